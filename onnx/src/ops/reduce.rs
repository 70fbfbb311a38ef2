//! Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
//! ReduceLogSumExp, ReduceSumSquare and ReduceLogSum (a log of ReduceSum).

use tessera_ir::{ElemType, Op, ReduceKind, UnaryOp, ValueId};

use super::Arity;
use super::shape::axes_arg;
use super::{Node, Registry, cast_to, input, norm_axes};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("ReduceL1", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceL2", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceLogSum", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceLogSumExp", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceMax", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceMean", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceMin", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceProd", &[(1, 1, 1), (18, 1, 2)]),
    ("ReduceSum", &[(1, 1, 1), (13, 1, 2)]),
    ("ReduceSumSquare", &[(1, 1, 1), (18, 1, 2)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    macro_rules! reduce {
        ($($name:literal => $kind:expr),* $(,)?) => {
            $(r.add($name, 1, |cx, n| Ok(vec![reduce(cx, n, $kind)?]));)*
        };
    }
    reduce! {
        "ReduceSum" => ReduceKind::Sum, "ReduceMean" => ReduceKind::Mean,
        "ReduceMax" => ReduceKind::Max, "ReduceMin" => ReduceKind::Min,
        "ReduceProd" => ReduceKind::Prod, "ReduceL1" => ReduceKind::L1,
        "ReduceL2" => ReduceKind::L2, "ReduceLogSumExp" => ReduceKind::LogSumExp,
        "ReduceSumSquare" => ReduceKind::SumSquare,
    }
    r.add("ReduceLogSum", 1, |cx, n| {
        let s = reduce(cx, n, ReduceKind::Sum)?;
        Ok(vec![cx.emit1(Op::Unary(UnaryOp::Log), &[s])?])
    });
}

/// One reduction with ONNX's axes (attribute before opset 13 for ReduceSum and 18 for the
/// others, then an optional input), `keepdims` and `noop_with_empty_axes`.
fn reduce(cx: &mut Ctx<'_>, n: &Node<'_>, kind: ReduceKind) -> Result<ValueId, String> {
    let x = input(cx, n, 0)?;
    let input_since = if n.op_type() == "ReduceSum" { 13 } else { 18 };
    let axes = axes_arg(cx, n, input_since, 1)?.unwrap_or_default();
    if axes.is_empty() && n.attr_i_or("noop_with_empty_axes", 0)? != 0 {
        return Ok(x);
    }
    let axes = norm_axes(&axes, cx.ty(x).rank())?;
    let op = Op::Reduce {
        kind,
        axes,
        keep_dims: n.attr_i_or("keepdims", 1)? != 0,
    };
    // Max and min of bool tensors are "any" and "all": reduce them as u8.
    let elem = cx.ty(x).elem;
    if elem == ElemType::Bool && matches!(kind, ReduceKind::Max | ReduceKind::Min) {
        let b = cast_to(cx, x, ElemType::U8)?;
        let y = cx.emit1(op, &[b])?;
        return cast_to(cx, y, ElemType::Bool);
    }
    cx.emit1(op, &[x])
}
