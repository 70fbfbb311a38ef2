//! The reference interpreter: evaluates a [`Graph`] on concrete [`Tensor`]s.
//!
//! It is the correctness oracle of every pass, so it favours clarity and exact op semantics
//! (see [`crate::op`]) over speed, except that matmul and convolution use ndarray's matrix
//! product so that real models run in reasonable time.
//!
//! - [`run`] evaluates a whole graph: it checks the inputs against the graph signature and
//!   binds symbolic dimensions, evaluates the body in order, checks every result against its
//!   declared type, and frees every intermediate (and every constant, which is decoded on first
//!   use) after its last use.
//! - [`eval_op`] evaluates one op on operand tensors (constant folding uses it);
//!   [`eval_op_with`] is the same with symbol bindings for attributes holding symbolic dims.
//!
//! Element types: f32, f64 and the integers are computed natively; f16 and bf16 operands of
//! computing ops are converted to f32, computed and converted back (data-movement ops such as
//! reshape, slice or gather work on them directly). Integer add/sub/mul wrap; integer division
//! truncates toward zero and division by zero is an error. Ops that only make sense on floats
//! (exp, softmax, conv, ...) reject integer operands with an error. Bad operands (wrong count,
//! element type or shape, out-of-range index) give an [`InterpError`], never a panic.
//!
//! # Memory limit
//!
//! Before it allocates a tensor or a table, the interpreter checks its byte size against a
//! memory limit and fails with an [`InterpError`] naming the op when it is above it, so that a
//! graph that verifies but asks for absurd amounts of memory (`fill` of `[100000, 100000,
//! 100000]`) gives an error rather than an aborted process. The limit is per allocation, not a
//! running total. The default, [`DEFAULT_MEMORY_LIMIT`], is a fixed 64 GiB, not a fraction of
//! the machine's memory, so that whether a graph is refused does not depend on the machine;
//! [`run_with`] and [`eval_op_limited`] take another one through [`RunOptions`]. [`run`]
//! also checks each op's declared result types (with symbols bound) against the limit before
//! evaluating the op. Element counts of tables are checked assuming one byte per element
//! where the exact size is not known up front; tensors are checked exactly.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use crate::graph::{Graph, OpId, ValueDef, ValueId};
use crate::op::Op;
use crate::tensor::Tensor;
use crate::types::{Dim, ElemType, TensorType};

mod common;
mod conv;
mod elementwise;
mod index;
mod linalg;
mod norm;
mod reduce;
mod region;
mod resize;
pub use resize::resize_taps;
mod shape;

use common::{R, arity, bail, exact, ierr};

/// Extents bound to symbolic dimensions (`Dim::Sym`) during a run.
pub type Bindings = HashMap<String, u64>;

/// The default per-allocation memory limit of the interpreter: 64 GiB (see the module doc).
pub const DEFAULT_MEMORY_LIMIT: u64 = 64 << 30;

/// Options of [`run_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// The most bytes one tensor or table may take; larger ones are an [`InterpError`].
    pub memory_limit: u64,
}

impl Default for RunOptions {
    fn default() -> RunOptions {
        RunOptions {
            memory_limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

/// An interpreter error: the op it happened in, when known, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InterpError {
    /// The op being evaluated, when the error comes from [`run`].
    pub op: Option<OpId>,
    /// The op's text name (`gather`, `matmul`, ...), when the error comes from an op.
    pub op_name: Option<&'static str>,
    /// What went wrong.
    pub message: String,
}

impl InterpError {
    /// An error with only a message.
    pub fn msg(message: impl Into<String>) -> InterpError {
        InterpError {
            op: None,
            op_name: None,
            message: message.into(),
        }
    }

    fn named(mut self, name: &'static str) -> InterpError {
        self.op_name.get_or_insert(name);
        self
    }

    fn at(mut self, op: OpId) -> InterpError {
        self.op.get_or_insert(op);
        self
    }
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.op, self.op_name) {
            (Some(op), Some(name)) => write!(f, "{op} ({name}): {}", self.message),
            (Some(op), None) => write!(f, "{op}: {}", self.message),
            (None, Some(name)) => write!(f, "{name}: {}", self.message),
            (None, None) => f.write_str(&self.message),
        }
    }
}

/// Evaluates `graph` on `inputs` and returns its outputs.
///
/// Checks the number of inputs and each input's element type and shape against the graph's
/// input types; symbolic dimensions are bound from the actual extents (the same symbol must
/// get the same extent everywhere). Every result is checked against its declared type (with
/// symbols bound; a symbol first seen in a result, such as the size of a data-dependent
/// `range`, is bound there). Intermediates and decoded constants are freed after their last
/// use.
///
/// `graph` should have passed [`crate::verify::verify`]: the interpreter relies on the
/// verifier for the meaning of a graph, and an unverified graph may fail in obscure ways. It
/// still never panics on one: dangling op, value and constant handles are reported as
/// errors. Uses the default [`RunOptions`].
pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    run_with(graph, inputs, &RunOptions::default())
}

/// [`run`] with options.
pub fn run_with(
    graph: &Graph,
    inputs: &[Tensor],
    options: &RunOptions,
) -> Result<Vec<Tensor>, InterpError> {
    let _limit = common::with_memory_limit(options.memory_limit);
    run_impl(graph, inputs)
}

fn run_impl(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    run_refs(graph, &refs)
}

/// [`run_impl`] on borrowed inputs (region bodies run this way, so captured values are not
/// copied per iteration).
fn run_refs(graph: &Graph, inputs: &[&Tensor]) -> Result<Vec<Tensor>, InterpError> {
    let gin = graph.inputs();
    let nvals = graph.num_values();
    for &v in gin {
        if v.index() >= nvals {
            bail!("graph input {v} is not a value");
        }
    }
    if inputs.len() != gin.len() {
        bail!("graph expects {} inputs, got {}", gin.len(), inputs.len());
    }
    let mut bindings = Bindings::new();
    for (i, (&v, t)) in gin.iter().zip(inputs).enumerate() {
        let label = match &graph.value(v).name {
            Some(n) => format!("input {i} ({n})"),
            None => format!("input {i}"),
        };
        check_type(graph.ty(v), t, &mut bindings).map_err(|m| ierr!("{label}: {m}"))?;
    }

    // Last use of every value: its position in the body, or MAX for graph outputs.
    let order = graph.ops();
    let mut last_use: Vec<Option<usize>> = vec![None; nvals];
    for (pos, &o) in order.iter().enumerate() {
        if o.index() >= graph.num_op_handles() {
            bail!("the body lists the invalid op {o}");
        }
        for &v in graph.op(o).results.iter().chain(&graph.op(o).operands) {
            if v.index() >= nvals {
                bail!("{o} uses unknown value {v}");
            }
        }
        for &v in &graph.op(o).operands {
            if v.index() >= nvals {
                bail!("{o} uses unknown value {v}");
            }
            last_use[v.index()] = Some(pos);
        }
    }
    for &v in graph.outputs() {
        if v.index() >= nvals {
            bail!("graph output {v} is not a value");
        }
        last_use[v.index()] = Some(usize::MAX);
    }

    let mut values: Vec<Option<Cow<'_, Tensor>>> = (0..nvals).map(|_| None).collect();
    for (&v, t) in gin.iter().zip(inputs) {
        if last_use[v.index()].is_some() {
            values[v.index()] = Some(Cow::Borrowed(*t));
        }
    }

    for (pos, &oid) in order.iter().enumerate() {
        let od = graph.op(oid);
        if matches!(od.op, Op::Const(_)) {
            // Constants are decoded lazily, at their first use.
            continue;
        }
        for &v in &od.operands {
            if values[v.index()].is_none() {
                let t = materialize_const(graph, v, &mut bindings).map_err(|e| e.at(oid))?;
                values[v.index()] = Some(Cow::Owned(t));
            }
        }
        check_result_sizes(graph, &od.results, &bindings)
            .map_err(|e| e.named(od.op.name()).at(oid))?;
        let mut operands = Vec::with_capacity(od.operands.len());
        for &v in &od.operands {
            let t = values[v.index()]
                .as_deref()
                .ok_or_else(|| ierr!("operand {v} has no value").at(oid))?;
            operands.push(t);
        }
        let results = eval_op_with(&od.op, &operands, &bindings).map_err(|e| e.at(oid))?;
        drop(operands);
        if results.len() != od.results.len() {
            let e = ierr!(
                "produced {} results, the graph declares {}",
                results.len(),
                od.results.len()
            );
            return Err(e.named(od.op.name()).at(oid));
        }
        for (i, (t, &v)) in results.into_iter().zip(&od.results).enumerate() {
            check_type(graph.ty(v), &t, &mut bindings)
                .map_err(|m| ierr!("result {i}: {m}").named(od.op.name()).at(oid))?;
            if last_use[v.index()].is_some() {
                values[v.index()] = Some(Cow::Owned(t));
            }
        }
        for &v in &od.operands {
            if last_use[v.index()] == Some(pos) {
                values[v.index()] = None;
            }
        }
    }

    let outs = graph.outputs();
    let mut result = Vec::with_capacity(outs.len());
    for (i, &v) in outs.iter().enumerate() {
        if values[v.index()].is_none() {
            let t = materialize_const(graph, v, &mut bindings)?;
            values[v.index()] = Some(Cow::Owned(t));
        }
        let used_again = outs[i + 1..].contains(&v);
        let t = if used_again {
            values[v.index()].clone()
        } else {
            values[v.index()].take()
        };
        let t = t.ok_or_else(|| ierr!("graph output {v} has no value"))?;
        result.push(t.into_owned());
    }
    Ok(result)
}

/// Checks the declared types of an op's results against the memory limit, before the op
/// allocates them. Types with symbols not yet bound are skipped.
fn check_result_sizes(graph: &Graph, results: &[ValueId], bindings: &Bindings) -> R<()> {
    for (i, &v) in results.iter().enumerate() {
        let ty = graph.ty(v);
        let Ok(dims) = common::resolve_dims(&ty.shape, bindings) else {
            continue;
        };
        common::numel_of(&dims, ty.elem).map_err(|e| ierr!("result {i}: {}", e.message))?;
    }
    Ok(())
}

/// Decodes the constant behind `v` (which must be the result of a `const` op).
fn materialize_const(graph: &Graph, v: ValueId, bindings: &mut Bindings) -> R<Tensor> {
    let ValueDef::Result(op, _) = graph.value(v).def else {
        bail!("value {v} has no value (a graph input that was not bound?)");
    };
    if op.index() >= graph.num_op_handles() {
        bail!("value {v} is defined by the invalid op {op}");
    }
    let Op::Const(cid) = graph.op(op).op else {
        bail!("value {v} is used before it is computed (defined by {op})");
    };
    if cid.index() >= graph.num_consts() {
        bail!("{op} names the constant {cid}, which does not exist");
    }
    let c = graph.constant(cid);
    let dims =
        c.ty.static_dims()
            .ok_or_else(|| ierr!("constant @{} has a symbolic shape {}", c.name, c.ty))?;
    let dims = dims
        .into_iter()
        .map(common::to_usize)
        .collect::<R<Vec<_>>>()?;
    let t = Tensor::from_le_bytes(c.ty.elem, &dims, &c.data)
        .map_err(|e| ierr!("constant @{}: {e}", c.name))?;
    check_type(graph.ty(v), &t, bindings)
        .map_err(|m| ierr!("constant @{}: {m}", c.name).named("const").at(op))?;
    Ok(t)
}

/// Checks a tensor against a declared type, binding symbols.
fn check_type(ty: &TensorType, t: &Tensor, bindings: &mut Bindings) -> Result<(), String> {
    if t.elem() != ty.elem {
        return Err(format!(
            "expected element type {}, got {}",
            ty.elem,
            t.elem()
        ));
    }
    let shape = t.shape();
    if shape.len() != ty.rank() {
        return Err(format!(
            "expected {ty} (rank {}), got shape {shape:?} (rank {})",
            ty.rank(),
            shape.len()
        ));
    }
    for (axis, (d, &n)) in ty.shape.iter().zip(shape).enumerate() {
        let n = n as u64;
        match d {
            Dim::Static(e) if *e != n => {
                return Err(format!(
                    "expected {ty}, got shape {shape:?}: axis {axis} has extent {n}, expected {e}"
                ));
            }
            Dim::Static(_) => {}
            Dim::Sym(s) => match bindings.get(s) {
                Some(&b) if b != n => {
                    return Err(format!(
                        "expected {ty}, got shape {shape:?}: axis {axis} has extent {n} but symbol {s} is bound to {b}"
                    ));
                }
                Some(_) => {}
                None => {
                    bindings.insert(s.clone(), n);
                }
            },
        }
    }
    Ok(())
}

/// Evaluates one op on operand tensors, with no symbol bindings (an attribute with an unbound
/// symbolic dimension is an error). [`Op::Const`] cannot be evaluated this way. The op need
/// not have been verified: bad operands or attributes give an error, never a panic.
pub fn eval_op(op: &Op, operands: &[&Tensor]) -> Result<Vec<Tensor>, InterpError> {
    eval_op_with(op, operands, &Bindings::new())
}

/// [`eval_op_with`] under the memory limit of `options` (instead of the one in force on this
/// thread: the default, or the one of the [`run_with`] that is running).
pub fn eval_op_limited(
    op: &Op,
    operands: &[&Tensor],
    bindings: &Bindings,
    options: &RunOptions,
) -> Result<Vec<Tensor>, InterpError> {
    let _limit = common::with_memory_limit(options.memory_limit);
    eval_op_with(op, operands, bindings)
}

/// Evaluates one op on operand tensors; symbolic dimensions in attributes (reshape, expand,
/// fill, range) take their extents from `bindings`.
pub fn eval_op_with(
    op: &Op,
    operands: &[&Tensor],
    bindings: &Bindings,
) -> Result<Vec<Tensor>, InterpError> {
    let r = if computes(op) {
        via_f32(op, operands, bindings)
    } else {
        compute(op, operands, bindings)
    };
    r.map_err(|e| e.named(op.name()))
}

/// Ops that compute on values (f16/bf16 go through f32); the rest move data and work on any
/// element type directly.
fn computes(op: &Op) -> bool {
    !matches!(
        op,
        Op::Const(_)
            | Op::Cast { .. }
            | Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Expand { .. }
            | Op::Concat { .. }
            | Op::Split { .. }
            | Op::Slice { .. }
            | Op::Pad { .. }
            | Op::Tile { .. }
            | Op::Gather { .. }
            | Op::GatherElements { .. }
            | Op::GatherNd { .. }
            | Op::Trilu { .. }
            | Op::DepthToSpace { .. }
            | Op::SpaceToDepth { .. }
            | Op::Shape { .. }
            | Op::Size
            | Op::Fill { .. }
            | Op::RandomUniform { .. }
            | Op::Dropout { .. }
            | Op::Transfer { .. }
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::AllSlice { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. }
            | Op::If { .. }
            | Op::Loop { .. }
            | Op::Scan(_)
    )
}

/// Evaluates with f16/bf16 operands converted to f32 and f32 results converted back.
fn via_f32(op: &Op, xs: &[&Tensor], b: &Bindings) -> R<Vec<Tensor>> {
    let Some(half) = xs
        .iter()
        .map(|t| t.elem())
        .find(|e| matches!(e, ElemType::F16 | ElemType::BF16))
    else {
        return compute(op, xs, b);
    };
    for t in xs {
        let e = t.elem();
        if e.is_float() && e != half {
            bail!("operand element types differ: {half} vs {e}");
        }
    }
    let conv: Vec<Cow<'_, Tensor>> = xs
        .iter()
        .map(|&t| match t {
            Tensor::F16(a) => Cow::Owned(Tensor::F32(a.mapv(f32::from))),
            Tensor::BF16(a) => Cow::Owned(Tensor::F32(a.mapv(f32::from))),
            other => Cow::Borrowed(other),
        })
        .collect();
    let refs: Vec<&Tensor> = conv.iter().map(|c| c.as_ref()).collect();
    let res = compute(op, &refs, b)?;
    Ok(res
        .into_iter()
        .map(|t| match (t, half) {
            (Tensor::F32(a), ElemType::F16) => Tensor::F16(a.mapv(half::f16::from_f32)),
            (Tensor::F32(a), _) => Tensor::BF16(a.mapv(half::bf16::from_f32)),
            (other, _) => other,
        })
        .collect())
}

fn compute(op: &Op, xs: &[&Tensor], b: &Bindings) -> R<Vec<Tensor>> {
    let one = |t: R<Tensor>| t.map(|t| vec![t]);
    match op {
        Op::Const(_) => {
            bail!("const ops have no operands to evaluate; decode the graph constant instead")
        }
        Op::Unary(u) => {
            let [x] = exact(xs)?;
            one(elementwise::unary(*u, x))
        }
        Op::Binary(bop) => {
            let [x, y] = exact(xs)?;
            one(elementwise::binary(*bop, x, y))
        }
        Op::Select => {
            let [c, x, y] = exact(xs)?;
            one(elementwise::select(c, x, y))
        }
        Op::Cast { to } => {
            let [x] = exact(xs)?;
            one(elementwise::cast(x, *to))
        }
        Op::Clip { min, max } => {
            let [x] = exact(xs)?;
            one(elementwise::clip(x, *min, *max))
        }
        Op::MatMul => {
            let [x, y] = exact(xs)?;
            one(linalg::matmul(x, y))
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => {
            arity(xs, 2, 3)?;
            one(linalg::gemm(xs, *alpha, *beta, *trans_a, *trans_b))
        }
        Op::Einsum { equation } => one(linalg::einsum(equation, xs)),
        Op::Conv(attrs) => {
            arity(xs, 2, 3)?;
            one(conv::conv(xs, attrs))
        }
        Op::ConvTranspose {
            conv: attrs,
            output_padding,
        } => {
            arity(xs, 2, 3)?;
            one(conv::conv_transpose(xs, attrs, output_padding))
        }
        Op::Pool(attrs) => {
            let [x] = exact(xs)?;
            one(conv::pool(x, attrs))
        }
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => {
            let [x] = exact(xs)?;
            one(reduce::reduce(x, *kind, axes, *keep_dims))
        }
        Op::ArgReduce {
            kind,
            axis,
            keep_dims,
            select_last,
        } => {
            let [x] = exact(xs)?;
            one(reduce::arg_reduce(
                x,
                *kind,
                *axis,
                *keep_dims,
                *select_last,
            ))
        }
        Op::Softmax { axis } => {
            let [x] = exact(xs)?;
            one(reduce::softmax(x, *axis, false))
        }
        Op::LogSoftmax { axis } => {
            let [x] = exact(xs)?;
            one(reduce::softmax(x, *axis, true))
        }
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => {
            let [x] = exact(xs)?;
            one(reduce::cumsum(x, *axis, *exclusive, *reverse))
        }
        Op::LayerNorm { axis, epsilon } => {
            arity(xs, 2, 3)?;
            one(norm::layer_norm(xs, *axis, *epsilon))
        }
        Op::BatchNorm { epsilon } => {
            let [x, s, bias, m, v] = exact(xs)?;
            one(norm::batch_norm(x, s, bias, m, v, *epsilon))
        }
        Op::InstanceNorm { epsilon } => {
            let [x, s, bias] = exact(xs)?;
            one(norm::instance_norm(x, s, bias, *epsilon))
        }
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => {
            let [x] = exact(xs)?;
            one(norm::lrn(x, *size, *alpha, *beta, *bias))
        }
        Op::Reshape { shape } => {
            let [x] = exact(xs)?;
            one(shape::reshape(x, shape, b))
        }
        Op::Transpose { perm } => {
            let [x] = exact(xs)?;
            one(shape::transpose(x, perm))
        }
        Op::Expand { shape } => {
            let [x] = exact(xs)?;
            one(shape::expand(x, shape, b))
        }
        Op::Concat { axis } => one(shape::concat(xs, *axis)),
        Op::Split { axis, sizes } => {
            let [x] = exact(xs)?;
            shape::split(x, *axis, sizes)
        }
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            let [x] = exact(xs)?;
            one(shape::slice(x, axes, starts, ends, steps))
        }
        Op::Pad { pads, mode, value } => {
            let [x] = exact(xs)?;
            one(shape::pad(x, pads, *mode, *value))
        }
        Op::Tile { repeats } => {
            let [x] = exact(xs)?;
            one(shape::tile(x, repeats))
        }
        Op::Trilu { upper, k } => {
            let [x] = exact(xs)?;
            one(shape::trilu(x, *upper, *k))
        }
        Op::DepthToSpace { block, mode } => {
            let [x] = exact(xs)?;
            one(shape::depth_to_space(x, *block, *mode))
        }
        Op::SpaceToDepth { block } => {
            let [x] = exact(xs)?;
            one(shape::space_to_depth(x, *block))
        }
        Op::Shape { start, end } => {
            let [x] = exact(xs)?;
            one(shape::shape_of(x, *start, *end))
        }
        Op::Size => {
            let [x] = exact(xs)?;
            Ok(vec![Tensor::I64(ndarray::arr0(x.len() as i64).into_dyn())])
        }
        Op::Fill { shape, elem, value } => {
            exact::<0>(xs)?;
            one(shape::fill(shape, *elem, *value, b))
        }
        Op::Range { size } => {
            let [s, l, d] = exact(xs)?;
            one(shape::range(s, l, d, size, b))
        }
        Op::RandomUniform { shape, elem, salt } => {
            let [seed, counter] = exact(xs)?;
            one(shape::random_uniform(seed, counter, shape, *elem, *salt, b))
        }
        // Inference semantics: the identity and an all-true mask (the train pass gives it
        // its training semantics).
        Op::Dropout { .. } => {
            let [x] = exact(xs)?;
            let mask = ndarray::ArrayD::from_elem(ndarray::IxDyn(x.shape()), true);
            Ok(vec![x.clone(), Tensor::Bool(mask)])
        }
        // Global view (see `crate::op`): a value is the logical tensor wherever it lives and
        // however it is laid out, and an all-reduce's operand already is the logical sum (the
        // per-device partial sums are not materialized), so these only pass it on.
        Op::Transfer { .. }
        | Op::AllReduce { .. }
        | Op::AllGather { .. }
        | Op::AllSlice { .. }
        | Op::ReduceScatter { .. }
        | Op::AllToAll { .. } => {
            let [x] = exact(xs)?;
            Ok(vec![x.clone()])
        }
        Op::Gather { axis } => {
            let [x, i] = exact(xs)?;
            one(index::gather(x, i, *axis))
        }
        Op::GatherElements { axis } => {
            let [x, i] = exact(xs)?;
            one(index::gather_elements(x, i, *axis))
        }
        Op::GatherNd { batch_dims } => {
            let [x, i] = exact(xs)?;
            one(index::gather_nd(x, i, *batch_dims))
        }
        Op::ScatterElements { axis, reduction } => {
            let [x, i, u] = exact(xs)?;
            one(index::scatter_elements(x, i, u, *axis, *reduction))
        }
        Op::ScatterNd { reduction } => {
            let [x, i, u] = exact(xs)?;
            one(index::scatter_nd(x, i, u, *reduction))
        }
        Op::TopK { k, axis, largest } => {
            let [x] = exact(xs)?;
            index::top_k(x, *k, *axis, *largest)
        }
        Op::Resize {
            sizes,
            mode,
            coord,
            nearest,
            cubic_coeff,
        } => {
            let [x] = exact(xs)?;
            one(resize::resize(
                x,
                sizes,
                *mode,
                *coord,
                *nearest,
                *cubic_coeff,
            ))
        }
        Op::If {
            then_branch,
            else_branch,
        } => region::if_op(then_branch, else_branch, xs),
        Op::Loop { carried, body, .. } => region::loop_op(*carried, body, xs),
        Op::Scan(s) => region::scan_op(s, xs),
    }
}
