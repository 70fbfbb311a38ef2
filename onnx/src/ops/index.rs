//! Indexing ONNX ops: Gather, GatherElements, GatherND, ScatterElements (and the deprecated
//! Scatter), ScatterND, TopK, Trilu, CumSum, CumProd (unrolled), ArgMax and ArgMin; the
//! index-generated OneHot and EyeLike, and CenterCropPad (a pad whose negative pads crop).

use tessera_ir::{
    ArgKind, BinaryOp, Dim, ElemType, Op, PadMode, Scalar, ScatterReduction, ValueId,
};

use super::Arity;
use super::{
    Node, Registry, bin, cast_to, const_ints, input, iota, norm_axes, norm_axis, reshape, scalar,
    slice_axis,
};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("ArgMax", &[(1, 1, 1)]),
    ("ArgMin", &[(1, 1, 1)]),
    ("CenterCropPad", &[(18, 2, 2)]),
    ("CumProd", &[(26, 2, 2)]),
    ("CumSum", &[(11, 2, 2)]),
    ("EyeLike", &[(9, 1, 1)]),
    ("Gather", &[(1, 2, 2)]),
    ("GatherElements", &[(11, 2, 2)]),
    ("GatherND", &[(11, 2, 2)]),
    ("OneHot", &[(9, 3, 3)]),
    ("Scatter", &[(9, 3, 3)]),
    ("ScatterElements", &[(11, 3, 3)]),
    ("ScatterND", &[(11, 3, 3)]),
    ("TopK", &[(1, 1, 1), (10, 2, 2)]),
    ("Trilu", &[(14, 1, 2)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("OneHot", 9, one_hot);
    r.add("EyeLike", 9, eye_like);
    r.add("CenterCropPad", 18, center_crop_pad);
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
    r.add("CumProd", 26, cum_prod);
    r.add("ArgMax", 1, |cx, n| arg_reduce(cx, n, ArgKind::Max));
    r.add("ArgMin", 1, |cx, n| arg_reduce(cx, n, ArgKind::Min));
}

/// The longest axis CumProd unrolls (it emits a slice and a product per element).
const CUM_PROD_MAX_EXTENT: u64 = 256;

/// CumProd-26 along the known scalar `axis` (input 1): `y[k] = x[0] * x[1] * ... * x[k]`,
/// multiplied left to right as numpy's `cumprod` does (so the result is exact, not
/// `exp(cumsum(log x))`); `exclusive` shifts in a leading 1 (`y[k] = x[0] * ... * x[k-1]`),
/// `reverse` runs from the end. Unrolled over the axis, whose extent must be static and at
/// most [`CUM_PROD_MAX_EXTENT`].
fn cum_prod(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let xt = cx.ty(x).clone();
    if !xt.elem.is_numeric() {
        return Err(format!("input 0 must be numeric, got {xt}"));
    }
    let axis = one_int(&const_ints(cx, n, 1, "axis")?, "axis")?;
    let axis = norm_axis(axis, xt.rank())?;
    let exclusive = n.attr_i_or("exclusive", 0)? != 0;
    let reverse = n.attr_i_or("reverse", 0)? != 0;
    let len = xt.shape[axis].as_static().ok_or_else(|| {
        format!(
            "CumProd needs a static extent along axis {axis}, got {xt} (bind it with \
             --input-shape)"
        )
    })?;
    if len > CUM_PROD_MAX_EXTENT {
        return Err(format!(
            "CumProd is unrolled and supports at most {CUM_PROD_MAX_EXTENT} elements along \
             the axis, got {len}"
        ));
    }
    if len == 0 {
        return Ok(vec![x]);
    }
    let len = len as i64;
    // Positions in the order of accumulation.
    let order: Vec<i64> = if reverse {
        (0..len).rev().collect()
    } else {
        (0..len).collect()
    };
    let mut outs: Vec<Option<ValueId>> = vec![None; len as usize];
    let mut acc: Option<ValueId> = None;
    for (step, &i) in order.iter().enumerate() {
        if exclusive {
            // The product of the elements before `i` (1 for the first); the last element
            // itself is never used.
            let before = match acc {
                Some(a) => a,
                None => {
                    let one = scalar(cx, xt.elem, 1.0)?;
                    let mut shape = xt.shape.clone();
                    shape[axis] = Dim::Static(1);
                    cx.emit1(Op::Expand { shape }, &[one])?
                }
            };
            outs[i as usize] = Some(before);
            if step + 1 == order.len() {
                break;
            }
        }
        let xi = slice_axis(cx, x, axis, i, i + 1)?;
        let next = match acc {
            Some(a) => bin(cx, BinaryOp::Mul, a, xi)?,
            None => xi,
        };
        if !exclusive {
            outs[i as usize] = Some(next);
        }
        acc = Some(next);
    }
    let outs: Vec<ValueId> = outs.into_iter().flatten().collect();
    if outs.len() == 1 {
        return Ok(outs);
    }
    Ok(vec![cx.emit1(Op::Concat { axis }, &outs)?])
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

/// OneHot-9/11: for indices `[d...]`, depth D (known) and values `[off, on]`, the result
/// has a new axis of extent D at `axis` (default -1) and is `on` where the position along it
/// equals the index, `off` elsewhere. Negative indices count from D; indices still out of
/// range match nothing. Non-integer indices are truncated.
fn one_hot(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let indices = input(cx, n, 0)?;
    let depth = match super::const_input(cx, n, 1, "depth")? {
        t if t.len() == 1 => t.to_f64_vec()[0],
        t => {
            return Err(format!(
                "input 1 (depth) must hold one value, got {} values",
                t.len()
            ));
        }
    };
    if !(depth >= 1.0 && depth <= i64::MAX as f64) {
        return Err(format!("input 1 (depth) must be positive, got {depth}"));
    }
    let depth = depth as u64;
    let values = input(cx, n, 2)?;
    let ity = cx.ty(indices).clone();
    let rank = ity.rank() + 1;
    let axis = norm_axis(n.attr_i_or("axis", -1)?, rank)?;
    let idx = cast_to(cx, indices, ElemType::I64)?;
    let zero = scalar(cx, ElemType::I64, 0.0)?;
    let d = scalar(cx, ElemType::I64, depth as f64)?;
    let negative = bin(cx, BinaryOp::Less, idx, zero)?;
    let wrapped = bin(cx, BinaryOp::Add, idx, d)?;
    let idx = cx.emit1(Op::Select, &[negative, wrapped, idx])?;
    let mut shape = ity.shape.clone();
    shape.insert(axis, Dim::Static(1));
    let idx = reshape(cx, idx, shape)?;
    let positions = iota(cx, depth, axis, rank)?;
    let hot = bin(cx, BinaryOp::Equal, idx, positions)?;
    if cx.ty(values).rank() != 1 || cx.ty(values).shape[0] != Dim::Static(2) {
        return Err(format!(
            "input 2 (values) must be [off_value, on_value], got {}",
            cx.ty(values)
        ));
    }
    let off = slice_axis(cx, values, 0, 0, 1)?;
    let on = slice_axis(cx, values, 0, 1, 2)?;
    Ok(vec![cx.emit1(Op::Select, &[hot, on, off])?])
}

/// EyeLike-9/22: a 2-D tensor of the input's (static) shape, 1 where `col - row == k`
/// (default 0) and 0 elsewhere, of element type `dtype` (default: the input's).
fn eye_like(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let ty = cx.ty(x).clone();
    let elem = match n.attr_i("dtype")? {
        Some(code) => crate::decode::elem_type(
            i32::try_from(code).map_err(|_| format!("bad element type code {code}"))?,
        )?,
        None => ty.elem,
    };
    if ty.rank() != 2 {
        return Err(format!("input must be 2-D, got {ty}"));
    }
    let dims = ty
        .shape
        .iter()
        .map(|d| {
            d.as_static()
                .ok_or_else(|| format!("input {ty} has a symbolic extent"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let k = n.attr_i_or("k", 0)?;
    let rows = iota(cx, dims[0], 0, 2)?;
    let cols = iota(cx, dims[1], 1, 2)?;
    let diff = bin(cx, BinaryOp::Sub, cols, rows)?;
    let k = scalar(cx, ElemType::I64, k as f64)?;
    let on = bin(cx, BinaryOp::Equal, diff, k)?;
    Ok(vec![cast_to(cx, on, elem)?])
}

/// CenterCropPad-18: each listed axis (`axes`, default all) is cropped or zero-padded to
/// the known target extent, centered: a difference `d` is split as `d / 2` (rounded down)
/// before and the rest after. One `pad`, whose negative pads crop.
fn center_crop_pad(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let ty = cx.ty(x).clone();
    let rank = ty.rank();
    let target = const_ints(cx, n, 1, "shape")?;
    let axes = match n.attr_ints("axes")? {
        Some(a) => a,
        None => (0..rank as i64).collect(),
    };
    if axes.len() != target.len() {
        return Err(format!(
            "input 1 (shape) has {} entries for {} axes",
            target.len(),
            axes.len()
        ));
    }
    let mut pads = vec![0i64; 2 * rank];
    let mut axis_list = Vec::with_capacity(axes.len());
    for (&a, &want) in axes.iter().zip(&target) {
        let a = norm_axis(a, rank)?;
        axis_list.push(a as i64);
        let have = ty.shape[a]
            .as_static()
            .and_then(|d| i64::try_from(d).ok())
            .ok_or_else(|| format!("input {ty} has a symbolic extent on axis {a}"))?;
        if want < 0 {
            return Err(format!("target extent {want} is negative"));
        }
        let d = want - have;
        // Rounds toward -inf for crops (d < 0), as the spec's `floor(|d| / 2)` before.
        let before = if d >= 0 { d / 2 } else { -((-d) / 2) };
        pads[a] = before;
        pads[rank + a] = d - before;
    }
    norm_axes(&axis_list, rank)?;
    let value = if ty.elem.is_float() {
        Scalar::Float(0.0)
    } else {
        Scalar::Int(0)
    };
    Ok(vec![cx.emit1(
        Op::Pad {
            pads,
            mode: PadMode::Constant,
            value,
        },
        &[x],
    )?])
}
