//! Indexing ONNX ops: Gather, GatherElements, GatherND, ScatterElements (and the deprecated
//! Scatter), ScatterND, TopK, Trilu, CumSum, ArgMax and ArgMin.

use tessera_ir::{ArgKind, Op, ScatterReduction, ValueId};

use super::{Node, Registry, const_ints, input, norm_axis};
use crate::import::Ctx;

pub(crate) fn register(r: &mut Registry) {
    r.add("Gather", 1, |cx, n| {
        let (x, i) = (input(cx, n, 0)?, input(cx, n, 1)?);
        let axis = norm_axis(n.attr_i_or("axis", 0)?, cx.ty(x).rank())?;
        Ok(vec![cx.emit1(Op::Gather { axis }, &[x, i])?])
    });
    r.add("GatherElements", 11, |cx, n| {
        let (x, i) = (input(cx, n, 0)?, input(cx, n, 1)?);
        let axis = norm_axis(n.attr_i_or("axis", 0)?, cx.ty(x).rank())?;
        Ok(vec![cx.emit1(Op::GatherElements { axis }, &[x, i])?])
    });
    r.add("GatherND", 11, |cx, n| {
        let (x, i) = (input(cx, n, 0)?, input(cx, n, 1)?);
        let batch_dims = usize::try_from(n.attr_i_or("batch_dims", 0)?)
            .map_err(|_| "batch_dims must be non-negative".to_string())?;
        Ok(vec![cx.emit1(Op::GatherNd { batch_dims }, &[x, i])?])
    });
    r.add("ScatterElements", 11, scatter_elements);
    r.add("Scatter", 9, scatter_elements);
    r.add("ScatterND", 11, |cx, n| {
        let reduction = reduction(n)?;
        let (x, i, u) = (input(cx, n, 0)?, input(cx, n, 1)?, input(cx, n, 2)?);
        Ok(vec![cx.emit1(Op::ScatterNd { reduction }, &[x, i, u])?])
    });
    r.add("TopK", 1, top_k);
    r.add("Trilu", 14, |cx, n| {
        let x = input(cx, n, 0)?;
        let upper = n.attr_i_or("upper", 1)? != 0;
        let k = if n.has_input(1) {
            one_int(&const_ints(cx, n, 1, "k")?, "k")?
        } else {
            0
        };
        Ok(vec![cx.emit1(Op::Trilu { upper, k }, &[x])?])
    });
    r.add("CumSum", 11, |cx, n| {
        let x = input(cx, n, 0)?;
        let axis = one_int(&const_ints(cx, n, 1, "axis")?, "axis")?;
        let axis = norm_axis(axis, cx.ty(x).rank())?;
        let op = Op::CumSum {
            axis,
            exclusive: n.attr_i_or("exclusive", 0)? != 0,
            reverse: n.attr_i_or("reverse", 0)? != 0,
        };
        Ok(vec![cx.emit1(op, &[x])?])
    });
    r.add("ArgMax", 1, |cx, n| arg_reduce(cx, n, ArgKind::Max));
    r.add("ArgMin", 1, |cx, n| arg_reduce(cx, n, ArgKind::Min));
}

/// The single element of a known scalar (or one-element) input.
fn one_int(v: &[i64], what: &str) -> Result<i64, String> {
    match v {
        [x] => Ok(*x),
        _ => Err(format!("input `{what}` must hold one value, got {v:?}")),
    }
}

fn reduction(n: &Node<'_>) -> Result<ScatterReduction, String> {
    Ok(match n.attr_s("reduction")?.as_deref() {
        None | Some("none") => ScatterReduction::None,
        Some("add") => ScatterReduction::Add,
        Some("mul") => ScatterReduction::Mul,
        Some("max") => ScatterReduction::Max,
        Some("min") => ScatterReduction::Min,
        Some(r) => {
            return Err(format!(
                "reduction = \"{r}\" is not one of \"none\", \"add\", \"mul\", \"max\", \"min\""
            ));
        }
    })
}

fn scatter_elements(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let reduction = reduction(n)?;
    let (x, i, u) = (input(cx, n, 0)?, input(cx, n, 1)?, input(cx, n, 2)?);
    let axis = norm_axis(n.attr_i_or("axis", 0)?, cx.ty(x).rank())?;
    Ok(vec![cx.emit1(
        Op::ScatterElements { axis, reduction },
        &[x, i, u],
    )?])
}

fn top_k(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let k = if cx.opset < 10 {
        n.attr_i("k")?.ok_or("attribute `k` is required")?
    } else {
        one_int(&const_ints(cx, n, 1, "k")?, "k")?
    };
    let k = u64::try_from(k).map_err(|_| format!("k = {k} must be non-negative"))?;
    let axis = norm_axis(n.attr_i_or("axis", -1)?, cx.ty(x).rank())?;
    // sorted = 0 leaves the order unspecified; the sorted order is one valid answer.
    let largest = n.attr_i_or("largest", 1)? != 0;
    cx.emit(Op::TopK { k, axis, largest }, &[x])
}

fn arg_reduce(cx: &mut Ctx<'_>, n: &Node<'_>, kind: ArgKind) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let axis = norm_axis(n.attr_i_or("axis", 0)?, cx.ty(x).rank())?;
    let op = Op::ArgReduce {
        kind,
        axis,
        keep_dims: n.attr_i_or("keepdims", 1)? != 0,
        select_last: n.attr_i_or("select_last_index", 0)? != 0,
    };
    Ok(vec![cx.emit1(op, &[x])?])
}
