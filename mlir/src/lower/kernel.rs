//! Kernels: each fused group of ops that computes (most often one op; see
//! `fusion_groups` in the lowering) is a function of its own, which its step calls.
//!
//! A step's function would otherwise hold every op of the step in one block, and LLVM's
//! optimizer and code generator take time superlinear in a function's size (GPT-2 small's
//! width, one step, to an object file: 14.1 s with 12 layers, 171 s with 48). As calls of
//! kernels (in parts of 64 for a long step, see `lower_step`), every function is small and
//! the time is about linear in the model (4.0 and 15.5 s).
//!
//! - **What becomes a kernel.** An op, or a fused group (an op and the elementwise ops and
//!   reshapes that feed only it, at most one other op that computes among them), whose code
//!   makes a new tensor. An op whose code only
//!   views its operands (`tensor.extract_slice`, `collapse_shape`, `expand_shape`), only makes
//!   constants, or gives back an operand stays in the step: a function returns a view of its
//!   argument only through a copy. Communication, `dropout`'s identity and the shape queries
//!   never are kernels.
//! - **Shared code.** A kernel is its op's code with its operands as arguments `%arg<k>` (one
//!   per distinct operand, in first-use order) and its small constants inside. Ops with the
//!   same code (a transformer's layers: the same shapes, different weights) call one kernel:
//!   [`Kernels`] keeps one function per distinct text, numbered by first use in step order,
//!   and named after the first op that made it (`@k3_matmul`; a gemm with the same code calls
//!   it too), or a group's first ops (`@k5_matmul_add`, `@k7_matmul_pow_etc`). The call
//!   carries the op's location (a group's: `loc(fused[...])` of its ops' nodes); the
//!   kernel's own ops have none, since one
//!   kernel serves many model nodes (the ops of an `if`'s or a `loop`'s body keep their
//!   nodes', so such kernels are rarely shared).
//! - **Destinations.** A kernel whose result is a piece of a concatenation ([`Dest`]) takes
//!   the concatenation's result as its last argument, inserts its result there and gives it
//!   back; the schedule makes its ops compute in that block, so no piece is copied.
//! - **Kept whole by LLVM.** Kernels have internal linkage and `noinline`: LLVM would
//!   otherwise inline a kernel called once back into its step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tessera_ir::{Op, TensorType};

use super::body::{Body, LResult, LowerError, Val, dims, err, tensor_ty};

/// The kernels of a program, shared by all its steps and devices.
#[derive(Default)]
pub struct Kernels {
    /// A kernel's text with its name left out, to its number.
    by_code: BTreeMap<String, usize>,
    /// Each kernel's function text, by number.
    texts: Vec<String>,
    /// Each kernel's name, by number (after the first op that made it: ops of other kinds
    /// may lower to the same code, a matmul and a gemm).
    names: Vec<String>,
}

/// The attributes of a kernel (and of a long step's part): internal linkage, never inlined.
pub const ATTRIBUTES: &str = "llvm.linkage = #llvm.linkage<internal>, passthrough = [\"noinline\"]";

/// The attributes of a kernel of arithmetic-heavy elementwise code (the expansions of `exp`,
/// `erf`, `tanh`, a sigmoid: fused multiply-adds and rounding, [`arithmetic_heavy`]):
/// [`ATTRIBUTES`] and LLVM's vector width for the loops it vectorizes, 512 bits where the
/// CPU has them. LLVM's tuning for recent Intel CPUs prefers 256-bit vectors, which halves
/// such loops' throughput (`exp`, `erf` or a sigmoid over 65,536 elements took 30% less time
/// with 512-bit ones); for other kernels it measured better (the CNN 0.062 -> 0.055 ms,
/// resnet_small 0.447 -> 0.414), its short rows not filling wider vectors.
pub const WIDE_ATTRIBUTES: &str = "llvm.linkage = #llvm.linkage<internal>, passthrough = [\"noinline\", [\"prefer-vector-width\", \"512\"]]";

/// Whether a kernel's lines hold arithmetic-heavy elementwise code (see [`WIDE_ATTRIBUTES`]).
fn arithmetic_heavy(lines: &[String]) -> bool {
    lines
        .iter()
        .any(|l| l.contains("math.fma") || l.contains("math.roundeven"))
}

/// The placeholder for the kernel's name in [`Kernels::by_code`]'s keys.
const NAME: &str = "@__kernel__";

impl Kernels {
    /// The number and name of the kernel with this text (its name [`NAME`]), added when new;
    /// `op` names it.
    fn intern(&mut self, code: String, op: &str) -> (usize, String) {
        if let Some(&n) = self.by_code.get(&code) {
            return (n, self.names[n].clone());
        }
        let n = self.texts.len();
        let named = name(n, op);
        self.texts
            .push(code.replacen(NAME, &format!("@{named}"), 1));
        self.names.push(named.clone());
        self.by_code.insert(code, n);
        (n, named)
    }

    /// The function text of kernel `n`.
    pub fn text(&self, n: usize) -> &str {
        &self.texts[n]
    }

    /// Every kernel's text, by number.
    pub fn into_texts(self) -> Vec<String> {
        self.texts
    }
}

/// The symbol of kernel `n` of an op kind (`k3_layer_norm`).
fn name(n: usize, op: &str) -> String {
    let op: String = op
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("k{n}_{op}")
}

/// Whether an op may be a kernel: not a communication op (the identity here), not one the
/// lowering evaluates to constants, not `dropout` (the identity and a constant mask).
pub fn may_be_kernel(op: &Op) -> bool {
    !matches!(
        op,
        Op::Const(_)
            | Op::Transfer { .. }
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. }
            | Op::AllSlice { .. }
            | Op::Dropout { .. }
            | Op::Shape { .. }
            | Op::Size
            | Op::Fill { .. }
    )
}

/// Whether a lowered line only names a constant or a view of a value.
fn views_only(line: &str) -> bool {
    let rhs = line.trim_start();
    if rhs.starts_with("//") {
        return true;
    }
    let Some((_, rhs)) = rhs.split_once(" = ") else {
        return false;
    };
    [
        "arith.constant ",
        "tensor.extract_slice ",
        "tensor.collapse_shape ",
        "tensor.expand_shape ",
        "tensor.cast ",
    ]
    .iter()
    .any(|p| rhs.starts_with(p))
}

/// Where a kernel writes its one result: a block of a larger tensor that the step passes
/// it and gets back (destination-passing style). A concatenation's pieces are written so,
/// each into its place in the concatenation (see the lowering's `in_place_pieces`).
#[derive(Clone, Debug)]
pub struct Dest {
    /// The whole tensor's type: the kernel's last argument and its result.
    pub ty: TensorType,
    /// Where the block starts in it.
    pub offsets: Vec<u64>,
}

/// One op's code as a kernel: `code` writes it into a fresh body given the kernel's
/// arguments (one per `params` type, `%arg<k>`), and returns its result names. Returns the
/// kernel's number and name, or `None` when the code only views, makes constants or gives
/// back an argument (the op then stays in its step).
///
/// With a [`Dest`], the kernel takes the destination as one more argument after `params`
/// and returns it with its one result inserted at the offsets (`tensor.insert_slice`):
/// bufferized in place, the result's code writes straight into the destination's buffer
/// (the end of the schedule's contraction sequence, `crate::schedule`). Such a kernel always computes.
pub fn make(
    kernels: &mut Kernels,
    op: &str,
    params: &[TensorType],
    results: &[TensorType],
    dest: Option<&Dest>,
    code: impl FnOnce(&mut Body, &[Val]) -> LResult<Vec<String>>,
) -> LResult<Option<(usize, String)>> {
    let mut args: Vec<Val> = params
        .iter()
        .enumerate()
        .map(|(k, ty)| Val {
            name: format!("%arg{k}"),
            ty: ty.clone(),
        })
        .collect();
    let mut b = Body::default();
    let mut names = code(&mut b, &args)?;
    let dest_results;
    let results = match (dest, results, &names[..]) {
        (None, ..) => results,
        (Some(d), [piece], [name]) => {
            let arg = Val {
                name: format!("%arg{}", args.len()),
                ty: d.ty.clone(),
            };
            let block = Val {
                name: name.clone(),
                ty: piece.clone(),
            };
            names = vec![insert_block(&mut b, &block, &arg, &d.offsets)?.name];
            args.push(arg);
            dest_results = [d.ty.clone()];
            &dest_results[..]
        }
        (Some(_), ..) => {
            return err(format!(
                "a kernel with a destination has one result, not {}",
                results.len().max(names.len())
            ));
        }
    };
    let lines = b.into_lines();
    if lines.iter().all(|l| views_only(l)) || names.iter().any(|n| n.starts_with("%arg")) {
        return Ok(None);
    }
    let mut ps = Vec::new();
    for a in &args {
        ps.push(format!("{}: {}", a.name, tensor_ty(&a.ty)?));
    }
    let tys = results.iter().map(tensor_ty).collect::<LResult<Vec<_>>>()?;
    let attributes = if arithmetic_heavy(&lines) {
        WIDE_ATTRIBUTES
    } else {
        ATTRIBUTES
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "  func.func private {NAME}({}) -> ({}) attributes {{{attributes}}} {{",
        ps.join(", "),
        tys.join(", ")
    );
    for l in lines {
        let _ = writeln!(s, "  {l}");
    }
    let _ = writeln!(s, "    return {} : {}", names.join(", "), tys.join(", "));
    s.push_str("  }\n");
    Ok(Some(kernels.intern(s, op)))
}

/// Writes `block` into `dest` at `offsets` (unit strides); returns the result.
///
/// A block written as an expansion (a convolution's result, computed on `[N, M, pixels]`)
/// goes into the destination collapsed alike, where that keeps it one block: the op that
/// computes it then writes into the destination (empty-tensor elimination needs the
/// types to match).
pub fn insert_block(b: &mut Body, block: &Val, dest: &Val, offsets: &[u64]) -> LResult<Val> {
    let sizes = dims(&block.ty)?;
    if offsets.len() != sizes.len() {
        return err(format!(
            "a block of rank {} at offsets of rank {}",
            sizes.len(),
            offsets.len()
        ));
    }
    let whole = dims(&dest.ty)?;
    let Some(e) = b.expansion(block).cloned().filter(|e| {
        e.groups.iter().all(|grp| {
            grp.iter()
                .skip(1)
                .all(|&d| offsets[d] == 0 && sizes[d] == whole[d])
        })
    }) else {
        return b.insert_slice(block, dest, offsets);
    };
    let flat = b.collapse_shape(dest, &e.groups)?;
    let at: Vec<u64> = e
        .groups
        .iter()
        .map(|grp| offsets[grp[0]] * grp[1..].iter().map(|&d| whole[d]).product::<u64>())
        .collect();
    let flat = b.insert_slice(&e.source, &flat, &at)?;
    let name = b.expand_shape(&flat, &e.groups, &dest.ty)?;
    Ok(Val {
        name,
        ty: dest.ty.clone(),
    })
}

/// Writes the call of function `name` (a kernel) of one result of type `ty` on `args`;
/// returns the result.
pub fn call_one(b: &mut Body, name: &str, args: &[Val], ty: &TensorType) -> LResult<Val> {
    let names = call(b, name, args, std::slice::from_ref(ty))?;
    let name = names
        .into_iter()
        .next()
        .ok_or_else(|| LowerError("a call of one result made none".into()))?;
    Ok(Val {
        name,
        ty: ty.clone(),
    })
}

/// Writes the call of function `name` (a kernel, a step's part) on `args`; returns its
/// results' names.
pub fn call(
    b: &mut Body,
    name: &str,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    let arg_tys = args
        .iter()
        .map(|a| tensor_ty(&a.ty))
        .collect::<LResult<Vec<_>>>()?;
    let tys = results.iter().map(tensor_ty).collect::<LResult<Vec<_>>>()?;
    let names: Vec<&str> = args.iter().map(|a| a.name.as_str()).collect();
    let rhs = format!(
        "func.call @{name}({}) : ({}) -> ({})",
        names.join(", "),
        arg_tys.join(", "),
        tys.join(", ")
    );
    if results.is_empty() {
        b.line(rhs);
        return Ok(Vec::new());
    }
    let r = b.fresh();
    if results.len() == 1 {
        b.line(format!("{r} = {rhs}"));
        Ok(vec![r])
    } else {
        b.line(format!("{r}:{} = {rhs}", results.len()));
        Ok((0..results.len()).map(|k| format!("{r}#{k}")).collect())
    }
}
