//! `canonicalize`: constant folding and local simplifications, repeated to a fixpoint, then
//! dead-code elimination.
//!
//! - **Folding**: an op whose operands are all constants and whose results are small (at
//!   most `fold-limit` elements each) is evaluated with the reference interpreter and
//!   replaced by constants. With `fold-moves` (on by default), so is an op that only moves
//!   or converts data (reshape, transpose, slice, concat, split, gather, depth/space
//!   rearrangements, cast) of any size when its results together take no more bytes than
//!   its operands and no earlier pass placed or split it: weight preprocessing such as the transposed embedding of a tied language
//!   model head is then done once, at compile time, not on every run (what IREE's constant
//!   evaluation does with hoisted constant expressions), and folding never expands data (a
//!   broadcast stays an op).
//! - **No-ops** are replaced by their operand: reshape or expand to the same type, transpose
//!   by the identity permutation, cast to the same element type, slice of whole axes with
//!   unit steps, pad by zeros, tile by ones, concat of one operand, split into one piece,
//!   `x - 0`, `x * 1`, `x / 1` (and `x + 0` for integers; for floats `-0.0 + 0.0` is `+0.0`)
//!   when the result has `x`'s type.
//! - **Chains** collapse: transpose of transpose composes the permutations, reshape of
//!   reshape keeps the last, cast of cast skips the middle type when it represents every
//!   value of the source type exactly (so the double cast changes nothing).

use std::collections::BTreeSet;

use tessera_ir::{
    BinaryOp, Bytes, Constant, ElemType, Graph, Op, OpId, Tensor, TensorType, ValueDef, ValueId,
};

use crate::pass::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};
use crate::util::Substitution;

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "canonicalize",
    summary: "Fold constants and remove no-op and redundant ops",
    options: &[
        OptionInfo {
            name: "fold-limit",
            kind: OptionKind::UInt,
            default: "65536",
            doc: "fold an op only when each result has at most this many elements",
        },
        OptionInfo {
            name: "fold-moves",
            kind: OptionKind::Bool,
            default: "true",
            doc: "also fold data movement and casts of constants of any size that do not grow them",
        },
        OptionInfo {
            name: "max-iterations",
            kind: OptionKind::UInt,
            default: "10",
            doc: "stop after this many rounds even if the IR still changes",
        },
    ],
    create: |o: &Options| {
        Ok(Box::new(Canonicalize {
            fold_limit: o.uint("fold-limit"),
            fold_moves: o.flag("fold-moves"),
            max_iterations: o.uint("max-iterations"),
        }))
    },
};

struct Canonicalize {
    fold_limit: u64,
    fold_moves: bool,
    max_iterations: u64,
}

/// Whether `op` only moves or converts its operands' elements (its work is linear in them).
fn moves_data(op: &Op) -> bool {
    matches!(
        op,
        Op::Reshape { .. }
            | Op::Transpose { .. }
            | Op::Slice { .. }
            | Op::Concat { .. }
            | Op::Split { .. }
            | Op::Gather { .. }
            | Op::DepthToSpace { .. }
            | Op::SpaceToDepth { .. }
            | Op::Cast { .. }
    )
}

impl Pass for Canonicalize {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut changed = false;
        for _ in 0..self.max_iterations.max(1) {
            let round = self.round(graph, stats)?;
            changed |= round;
            if !round {
                break;
            }
            stats.add("iterations", "rounds that changed the IR", 1);
        }
        changed |= crate::dce::dce(graph, stats);
        Ok(changed)
    }
}

/// What to do with one op.
enum Action {
    Keep,
    /// Replace every result by these values.
    Replace(Vec<ValueId>),
    /// The op was rewritten in place.
    Rewritten,
}

impl Canonicalize {
    /// One walk over the body; returns whether anything changed.
    fn round(&self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut subst = Substitution::default();
        let mut order = Vec::with_capacity(graph.ops().len());
        let mut changed = false;
        let mut const_names: BTreeSet<String> =
            graph.consts().map(|(_, c)| c.name.clone()).collect();
        for o in graph.ops().to_vec() {
            subst.apply_to_op(graph, o);
            if let Some(consts) = self.fold(graph, o, &mut const_names)? {
                let results = graph.op(o).results.clone();
                for (r, c) in results.into_iter().zip(consts) {
                    let ty = graph.constant(c).ty.clone();
                    let op = graph.create_detached_op(Op::Const(c), vec![], vec![ty]);
                    order.push(op);
                    let v = graph.op(op).results[0];
                    // The constant takes over the folded value's name (the old value is dead).
                    if let Some(name) = graph.value(r).name.clone() {
                        graph.value_mut(r).name = None;
                        graph.set_name(v, name);
                    }
                    subst.insert(r, v);
                }
                stats.add("ops-folded", "ops evaluated at compile time", 1);
                changed = true;
                continue;
            }
            match simplify(graph, o) {
                Action::Keep => order.push(o),
                Action::Rewritten => {
                    order.push(o);
                    stats.add("ops-simplified", "ops rewritten into a simpler form", 1);
                    changed = true;
                }
                Action::Replace(values) => {
                    for (r, v) in graph.op(o).results.clone().into_iter().zip(values) {
                        subst.insert(r, v);
                    }
                    stats.add("ops-erased", "no-op ops replaced by their operand", 1);
                    changed = true;
                }
            }
        }
        graph.set_ops(order);
        if !subst.is_empty() {
            subst.apply_to_outputs(graph);
        }
        Ok(changed)
    }

    /// Evaluates `o` when every operand is a constant and the results are small; returns the
    /// new constants.
    fn fold(
        &self,
        graph: &mut Graph,
        o: OpId,
        const_names: &mut BTreeSet<String>,
    ) -> Result<Option<Vec<tessera_ir::ConstId>>, PassError> {
        let data = graph.op(o);
        if matches!(data.op, Op::Const(_)) {
            return Ok(None);
        }
        let small = data.results.iter().all(|&r| {
            graph
                .ty(r)
                .num_elements()
                .is_some_and(|n| n <= self.fold_limit)
        });
        let bytes = |vs: &[ValueId]| {
            vs.iter().try_fold(0u64, |acc, &v| {
                graph.ty(v).size_bytes().and_then(|n| acc.checked_add(n))
            })
        };
        // Not an op placed or split by an earlier pass: the constant would lose its device
        // and sharding.
        let unplaced = data.device.is_none()
            && data
                .results
                .iter()
                .all(|&r| graph.value(r).sharding.is_none());
        let moved = self.fold_moves
            && unplaced
            && moves_data(&data.op)
            && matches!(
                (bytes(&data.results), bytes(&data.operands)),
                (Some(out), Some(inp)) if out <= inp
            );
        if !small && !moved {
            return Ok(None);
        }
        let outs = if let Some(t) = shape_query(graph, &data.op, &data.operands) {
            vec![t]
        } else {
            let mut inputs = Vec::with_capacity(data.operands.len());
            for &v in &data.operands {
                match const_tensor(graph, v) {
                    Some(t) => inputs.push(t),
                    None => return Ok(None),
                }
            }
            let refs: Vec<&Tensor> = inputs.iter().collect();
            // An op that fails to evaluate (say, an integer division by zero) is left for
            // run time to report.
            match tessera_ir::interp::eval_op(&data.op, &refs) {
                Ok(outs) => outs,
                Err(_) => return Ok(None),
            }
        };
        let results = data.results.clone();
        let mut consts = Vec::with_capacity(outs.len());
        for (r, t) in results.into_iter().zip(outs) {
            let base = graph
                .value(r)
                .name
                .clone()
                .unwrap_or_else(|| "folded".to_string());
            let mut name = base.clone();
            let mut i = 1;
            while const_names.contains(&name) {
                name = format!("{base}_{i}");
                i += 1;
            }
            const_names.insert(name.clone());
            let ty: TensorType = t.ty();
            if ty != *graph.ty(r) {
                return Err(PassError::new(format!(
                    "folding `{}` gave {ty}, but its result is declared {}",
                    graph.op(o).op.name(),
                    graph.ty(r)
                )));
            }
            consts.push(graph.add_const(Constant {
                name,
                ty,
                data: Bytes::from(t.to_le_bytes()),
            }));
        }
        Ok(Some(consts))
    }
}

/// `shape` and `size` of a value with a static type depend only on the type.
fn shape_query(graph: &Graph, op: &Op, operands: &[ValueId]) -> Option<Tensor> {
    let dims = graph.ty(*operands.first()?).static_dims()?;
    let ints = |v: Vec<i64>| {
        let n = v.len();
        Some(Tensor::I64(
            ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[n]), v).ok()?,
        ))
    };
    match op {
        Op::Shape { start, end } => ints(
            dims.get(*start..*end)?
                .iter()
                .map(|&d| i64::try_from(d).ok())
                .collect::<Option<_>>()?,
        ),
        Op::Size => {
            let n = i64::try_from(dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?).ok()?;
            Some(Tensor::I64(ndarray::ArrayD::from_elem(
                ndarray::IxDyn(&[]),
                n,
            )))
        }
        _ => None,
    }
}

/// The contents of `v` when a `const` op defines it.
fn const_tensor(graph: &Graph, v: ValueId) -> Option<Tensor> {
    let ValueDef::Result(op, 0) = graph.value(v).def else {
        return None;
    };
    let Op::Const(c) = graph.op(op).op else {
        return None;
    };
    let c = graph.constant(c);
    Tensor::from_typed_le_bytes(&c.ty, &c.data).ok()
}

/// The op defining `v`, when an op does.
fn producer(graph: &Graph, v: ValueId) -> Option<(OpId, &Op)> {
    match graph.value(v).def {
        ValueDef::Result(op, _) => Some((op, &graph.op(op).op)),
        ValueDef::Input(_) => None,
    }
}

/// Whether every value of `src` converts to `mid` exactly (so a cast through `mid` loses
/// nothing).
fn represents_exactly(mid: ElemType, src: ElemType) -> bool {
    use ElemType::*;
    if mid == src || src == Bool {
        return true;
    }
    match mid {
        F64 => matches!(src, F32 | F16 | BF16 | I32 | I16 | I8 | U8),
        F32 => matches!(src, F16 | BF16 | I16 | I8 | U8),
        F16 => matches!(src, I8 | U8),
        BF16 => matches!(src, I8 | U8),
        I64 => matches!(src, I32 | I16 | I8 | U8),
        I32 => matches!(src, I16 | I8 | U8),
        I16 => matches!(src, I8 | U8),
        I8 | U8 | Bool => false,
    }
}

/// Whether a constant value is entirely `x`.
fn is_splat(graph: &Graph, v: ValueId, x: f64) -> bool {
    const_tensor(graph, v).is_some_and(|t| {
        !t.is_empty()
            && t.to_f64_vec()
                .iter()
                .all(|&e| e == x && (x != 0.0 || e.is_sign_positive() == x.is_sign_positive()))
    })
}

fn simplify(graph: &mut Graph, o: OpId) -> Action {
    let data = graph.op(o);
    let results = data.results.clone();
    let operands = data.operands.clone();
    let same_type = |graph: &Graph, i: usize| -> bool {
        operands
            .get(i)
            .is_some_and(|&x| results.len() == 1 && graph.ty(x) == graph.ty(results[0]))
    };
    let keep_operand = |i: usize| Action::Replace(vec![operands[i]]);
    match data.op.clone() {
        Op::Reshape { shape } => {
            if same_type(graph, 0) {
                return keep_operand(0);
            }
            if let Some((_, Op::Reshape { .. })) = producer(graph, operands[0]) {
                let inner = graph
                    .op(producer(graph, operands[0]).map(|p| p.0).expect("checked"))
                    .operands[0];
                let op = graph.op_mut(o);
                op.op = Op::Reshape { shape };
                op.operands = vec![inner];
                return Action::Rewritten;
            }
            Action::Keep
        }
        Op::Expand { .. }
        | Op::Clip {
            min: None,
            max: None,
        } if same_type(graph, 0) => keep_operand(0),
        Op::Transpose { perm } => {
            if perm.iter().enumerate().all(|(i, &p)| i == p) {
                return keep_operand(0);
            }
            if let Some((inner_op, Op::Transpose { perm: inner })) = producer(graph, operands[0]) {
                // Result axis i is inner axis perm[i], which is operand axis inner[perm[i]].
                let composed: Vec<usize> = perm
                    .iter()
                    .map(|&p| inner.get(p).copied().unwrap_or(p))
                    .collect();
                let x = graph.op(inner_op).operands[0];
                if composed.iter().enumerate().all(|(i, &p)| i == p) {
                    return Action::Replace(vec![x]);
                }
                let op = graph.op_mut(o);
                op.op = Op::Transpose { perm: composed };
                op.operands = vec![x];
                return Action::Rewritten;
            }
            Action::Keep
        }
        Op::Cast { to } => {
            let x = operands[0];
            if graph.ty(x).elem == to {
                return keep_operand(0);
            }
            if let Some((inner_op, Op::Cast { to: mid })) = producer(graph, x) {
                let src = graph.op(inner_op).operands[0];
                let src_elem = graph.ty(src).elem;
                // Float-to-integer casts saturate while integer-to-integer casts wrap, so an
                // integer passed through a float into an integer is not the direct cast.
                let saturates = src_elem.is_int() && mid.is_float() && to.is_int();
                if represents_exactly(*mid, src_elem) && !saturates {
                    if graph.ty(src).elem == to {
                        return Action::Replace(vec![src]);
                    }
                    graph.op_mut(o).operands = vec![src];
                    return Action::Rewritten;
                }
            }
            Action::Keep
        }
        Op::Slice { steps, .. } if steps.iter().all(|&s| s == 1) && same_type(graph, 0) => {
            keep_operand(0)
        }
        Op::Pad { pads, .. } if pads.iter().all(|&p| p == 0) => keep_operand(0),
        Op::Tile { repeats } if repeats.iter().all(|&r| r == 1) => keep_operand(0),
        Op::Concat { .. } if operands.len() == 1 => keep_operand(0),
        Op::Split { sizes, .. } if sizes.len() == 1 => keep_operand(0),
        Op::Binary(b) if same_type(graph, 0) => {
            let y = operands[1];
            let int = !graph.ty(operands[0]).elem.is_float();
            let identity = match b {
                BinaryOp::Sub => is_splat(graph, y, 0.0),
                BinaryOp::Add => (int && is_splat(graph, y, 0.0)) || is_splat(graph, y, -0.0),
                BinaryOp::Mul | BinaryOp::Div => is_splat(graph, y, 1.0),
                _ => false,
            };
            if identity {
                keep_operand(0)
            } else {
                Action::Keep
            }
        }
        _ => Action::Keep,
    }
}
