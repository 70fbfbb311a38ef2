//! Shape-family ONNX ops: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split,
//! Slice, Pad, Tile, Expand, Shape, Size, ConstantOfShape, Constant, Range, DepthToSpace,
//! SpaceToDepth, Resize and Upsample.
//!
//! Shapes that ONNX passes as tensors (Reshape's shape, Slice's bounds, Pad's pads, ...) must
//! be known at import time; `Shape` of a statically shaped value folds to a constant so that
//! shape arithmetic in exported models folds away.

use tessera_ir::{
    CoordTransform, DepthToSpaceMode, Dim, ElemType, NearestMode, Op, PadMode, ReduceKind,
    ResizeMode, Scalar, Tensor, ValueId,
};

use super::{Arity, VARIADIC};
use super::{
    Node, Registry, const_input, const_ints, constant, i64_tensor, input, inputs, known_input,
    norm_axes, norm_axis, tensor_ints,
};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("Concat", &[(1, 1, VARIADIC)]),
    ("Constant", &[(1, 0, 0)]),
    ("ConstantOfShape", &[(9, 1, 1)]),
    ("DepthToSpace", &[(1, 1, 1)]),
    ("Expand", &[(8, 2, 2)]),
    ("Flatten", &[(1, 1, 1)]),
    ("Pad", &[(1, 1, 1), (11, 2, 3), (18, 2, 4)]),
    ("Range", &[(11, 3, 3)]),
    ("Reshape", &[(1, 1, 1), (5, 2, 2)]),
    ("Resize", &[(10, 2, 2), (11, 3, 4), (13, 1, 4)]),
    ("Shape", &[(1, 1, 1)]),
    ("Size", &[(1, 1, 1)]),
    ("Slice", &[(1, 1, 1), (10, 3, 5)]),
    ("SpaceToDepth", &[(1, 1, 1)]),
    ("Split", &[(1, 1, 2), (2, 1, 1), (13, 1, 2)]),
    ("Squeeze", &[(1, 1, 1), (13, 1, 2)]),
    ("Tile", &[(1, 3, 3), (6, 2, 2)]),
    ("Transpose", &[(1, 1, 1)]),
    ("Unsqueeze", &[(1, 1, 1), (13, 2, 2)]),
    ("Upsample", &[(1, 1, 1), (9, 2, 2)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("Reshape", 5, reshape_op);
    r.add("Flatten", 1, flatten);
    r.add("Squeeze", 1, squeeze);
    r.add("Unsqueeze", 1, unsqueeze);
    r.add("Transpose", 1, |cx, n| {
        let x = input(cx, n, 0)?;
        let rank = cx.ty(x).rank();
        let perm = match n.attr_ints("perm")? {
            Some(p) => p
                .iter()
                .map(|&a| {
                    usize::try_from(a).map_err(|_| format!("perm {p:?} has a negative entry"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => (0..rank).rev().collect(),
        };
        Ok(vec![cx.emit1(Op::Transpose { perm }, &[x])?])
    });
    r.add("Concat", 1, |cx, n| {
        let xs = inputs(cx, n)?;
        let first = *xs.first().ok_or("needs at least one input")?;
        let axis = n.attr_i("axis")?.ok_or("attribute `axis` is required")?;
        let axis = norm_axis(axis, cx.ty(first).rank())?;
        Ok(vec![cx.emit1(Op::Concat { axis }, &xs)?])
    });
    r.add("Split", 1, split);
    r.add("Slice", 1, slice);
    r.add("Pad", 1, pad);
    r.add("Tile", 6, |cx, n| {
        let x = input(cx, n, 0)?;
        let repeats = const_ints(cx, n, 1, "repeats")?
            .iter()
            .map(|&r| u64::try_from(r).map_err(|_| format!("repeats has a negative entry {r}")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(vec![cx.emit1(Op::Tile { repeats }, &[x])?])
    });
    r.add("Expand", 8, |cx, n| {
        let x = input(cx, n, 0)?;
        let shape = static_dims(&const_ints(cx, n, 1, "shape")?, "shape")?;
        Ok(vec![cx.emit1(Op::Expand { shape }, &[x])?])
    });
    r.add("Shape", 1, shape_op);
    r.add("Size", 1, |cx, n| {
        let x = input(cx, n, 0)?;
        match cx.ty(x).num_elements() {
            Some(k) => {
                let t = Tensor::I64(ndarray::arr0(k as i64).into_dyn());
                Ok(vec![constant(cx, t)])
            }
            None => Ok(vec![cx.emit1(Op::Size, &[x])?]),
        }
    });
    r.add("ConstantOfShape", 9, |cx, n| {
        let shape = static_dims(&const_ints(cx, n, 0, "shape")?, "shape")?;
        let (elem, value) = match n.attr_t("value")? {
            Some(t) => {
                let t = attr_tensor(cx, t)?;
                if t.len() != 1 {
                    return Err(format!(
                        "attribute `value` must hold one element, got {}",
                        t.ty()
                    ));
                }
                (t.elem(), scalar_of(&t))
            }
            None => (ElemType::F32, Scalar::Float(0.0)),
        };
        Ok(vec![cx.emit1(Op::Fill { shape, elem, value }, &[])?])
    });
    r.add("Constant", 1, constant_op);
    r.add("Range", 11, range);
    r.add("DepthToSpace", 1, |cx, n| {
        let x = input(cx, n, 0)?;
        let block = blocksize(n)?;
        let mode = match n.attr_s("mode")?.as_deref() {
            None | Some("DCR") => DepthToSpaceMode::Dcr,
            Some("CRD") => DepthToSpaceMode::Crd,
            Some(m) => return Err(format!("mode = \"{m}\" is not one of \"DCR\", \"CRD\"")),
        };
        Ok(vec![cx.emit1(Op::DepthToSpace { block, mode }, &[x])?])
    });
    r.add("SpaceToDepth", 1, space_to_depth);
    r.add("Resize", 10, resize);
    r.add("Upsample", 7, upsample);
}

/// The `axes` of Squeeze, Unsqueeze and the reductions: an attribute before opset
/// `input_since`, then optional input `i` (which must be known).
pub(super) fn axes_arg(
    cx: &mut Ctx<'_>,
    n: &Node<'_>,
    input_since: i64,
    i: usize,
) -> Result<Option<Vec<i64>>, String> {
    if cx.opset < input_since {
        if n.has_input(i) {
            return Err(format!(
                "axes as input {i} needs opset {input_since} (the model has opset {}); use the \
                 `axes` attribute",
                cx.opset
            ));
        }
        n.attr_ints("axes")
    } else if n.has_input(i) {
        const_ints(cx, n, i, "axes").map(Some)
    } else {
        Ok(None)
    }
}

/// Known extents from an ONNX shape tensor (all non-negative).
fn static_dims(v: &[i64], what: &str) -> Result<Vec<Dim>, String> {
    v.iter()
        .map(|&d| {
            u64::try_from(d)
                .map(Dim::Static)
                .map_err(|_| format!("{what} {v:?} has a negative extent"))
        })
        .collect()
}

/// The first element of a tensor as an IR scalar of the tensor's kind.
pub(super) fn scalar_of(t: &Tensor) -> Scalar {
    let x = t.to_f64_vec().first().copied().unwrap_or(0.0);
    if t.elem().is_float() {
        Scalar::Float(x)
    } else {
        match tensor_ints(t) {
            Some(v) => Scalar::Int(v.first().copied().unwrap_or(0)),
            None => Scalar::Int(x as i64),
        }
    }
}

/// Decodes a tensor attribute.
fn attr_tensor(cx: &mut Ctx<'_>, t: &crate::proto::TensorProto) -> Result<Tensor, String> {
    let (ty, data) = cx.tensor_proto(t)?;
    let dims: Vec<usize> = ty
        .static_dims()
        .unwrap_or_default()
        .iter()
        .map(|&d| d as usize)
        .collect();
    Tensor::from_le_bytes(ty.elem, &dims, &data).map_err(|e| e.to_string())
}

/// Reshapes `x` to `shape` (no op when it has that shape already).
pub(super) fn reshape_to(cx: &mut Ctx<'_>, x: ValueId, shape: Vec<Dim>) -> Result<ValueId, String> {
    if cx.ty(x).shape == shape {
        return Ok(x);
    }
    cx.emit1(Op::Reshape { shape }, &[x])
}

/// The element count of `dims` split into its static product and its symbols (sorted).
fn count_key(dims: &[Dim]) -> (u64, Vec<String>) {
    let mut n = 1u64;
    let mut syms = Vec::new();
    for d in dims {
        match d {
            Dim::Static(k) => n = n.saturating_mul(*k),
            Dim::Sym(s) => syms.push(s.clone()),
        }
    }
    syms.sort();
    (n, syms)
}

/// The product of extents as one extent: static, a single symbol, or `None` when it cannot
/// be written as one dimension.
fn dim_product(dims: &[Dim]) -> Option<Dim> {
    match count_key(dims) {
        (0, _) => Some(Dim::Static(0)),
        (n, s) if s.is_empty() => Some(Dim::Static(n)),
        (1, s) if s.len() == 1 => s.into_iter().next().map(Dim::Sym),
        _ => None,
    }
}

fn reshape_op(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let spec = const_ints(cx, n, 1, "shape")?;
    let allowzero = n.attr_i_or("allowzero", 0)? != 0;
    let xs = cx.ty(x).shape.clone();
    let mut out: Vec<Option<Dim>> = Vec::with_capacity(spec.len());
    for (i, &s) in spec.iter().enumerate() {
        out.push(match s {
            0 if !allowzero => Some(xs.get(i).cloned().ok_or_else(|| {
                format!(
                    "shape {spec:?}: 0 at position {i} copies an axis the input {} lacks",
                    cx.ty(x)
                )
            })?),
            -1 => None,
            s if s >= 0 => Some(Dim::Static(s as u64)),
            s => return Err(format!("shape {spec:?} has an invalid extent {s}")),
        });
    }
    let holes = out.iter().filter(|d| d.is_none()).count();
    if holes > 1 {
        return Err(format!("shape {spec:?} has more than one -1"));
    }
    let known: Vec<Dim> = out.iter().flatten().cloned().collect();
    let shape = if holes == 0 {
        known
    } else {
        let inferred = infer_extent(&xs, &known).ok_or_else(|| {
            format!(
                "cannot infer the -1 of shape {spec:?} for input {}: bind symbolic input \
                 dimensions with --input-shape",
                cx.ty(x)
            )
        })?;
        out.into_iter()
            .map(|d| d.unwrap_or_else(|| inferred.clone()))
            .collect()
    };
    Ok(vec![reshape_to(cx, x, shape)?])
}

/// The extent that makes `known` hold as many elements as `input`.
fn infer_extent(input: &[Dim], known: &[Dim]) -> Option<Dim> {
    let (n_in, mut syms) = count_key(input);
    let (n_out, out_syms) = count_key(known);
    if n_in == 0 {
        return (n_out != 0).then_some(Dim::Static(0));
    }
    for s in out_syms {
        let pos = syms.iter().position(|t| *t == s)?;
        syms.remove(pos);
    }
    if n_out == 0 || n_in % n_out != 0 {
        return None;
    }
    match (n_in / n_out, syms.len()) {
        (q, 0) => Some(Dim::Static(q)),
        (1, 1) => syms.pop().map(Dim::Sym),
        _ => None,
    }
}

fn flatten(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let xs = cx.ty(x).shape.clone();
    let r = xs.len() as i64;
    let axis = n.attr_i_or("axis", 1)?;
    if axis < -r || axis > r {
        return Err(format!("axis {axis} is out of range for rank {r}"));
    }
    let axis = if axis < 0 { axis + r } else { axis } as usize;
    let (a, b) = xs.split_at(axis);
    match (dim_product(a), dim_product(b)) {
        (Some(a), Some(b)) => Ok(vec![reshape_to(cx, x, vec![a, b])?]),
        _ => Err(format!(
            "flattening {} at axis {axis} combines symbolic extents: bind them with --input-shape",
            cx.ty(x)
        )),
    }
}

fn squeeze(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let xs = cx.ty(x).shape.clone();
    let axes = match axes_arg(cx, n, 13, 1)? {
        Some(a) => norm_axes(&a, xs.len())?,
        None => {
            if let Some(d) = xs.iter().find(|d| matches!(d, Dim::Sym(_))) {
                return Err(format!(
                    "Squeeze without axes on {} needs static extents (symbolic {d}): bind it \
                     with --input-shape",
                    cx.ty(x)
                ));
            }
            (0..xs.len()).filter(|&i| xs[i] == Dim::Static(1)).collect()
        }
    };
    for &a in &axes {
        if xs[a] != Dim::Static(1) {
            return Err(format!(
                "axis {a} of {} has extent {}, not 1",
                cx.ty(x),
                xs[a]
            ));
        }
    }
    let shape = xs
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, d)| d.clone())
        .collect();
    Ok(vec![reshape_to(cx, x, shape)?])
}

fn unsqueeze(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let xs = cx.ty(x).shape.clone();
    let axes = axes_arg(cx, n, 13, 1)?.ok_or("axes are required")?;
    let axes = norm_axes(&axes, xs.len() + axes.len())?;
    let mut rest = xs.into_iter();
    let shape = (0..axes.len() + cx.ty(x).rank())
        .map(|i| {
            if axes.contains(&i) {
                Dim::Static(1)
            } else {
                rest.next().unwrap_or(Dim::Static(1))
            }
        })
        .collect();
    Ok(vec![reshape_to(cx, x, shape)?])
}

fn split(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let axis = norm_axis(n.attr_i_or("axis", 0)?, cx.ty(x).rank())?;
    let d = cx.ty(x).shape[axis].as_static().ok_or_else(|| {
        format!(
            "splitting the symbolic axis {axis} of {}: bind it with --input-shape",
            cx.ty(x)
        )
    })?;
    let given = if cx.opset < 13 {
        n.attr_ints("split")?
    } else if n.has_input(1) {
        Some(const_ints(cx, n, 1, "split")?)
    } else {
        None
    };
    let sizes: Vec<u64> = match given {
        Some(s) => s
            .iter()
            .map(|&k| u64::try_from(k).map_err(|_| format!("split {s:?} has a negative size")))
            .collect::<Result<_, _>>()?,
        None => {
            let parts = match n.attr_i("num_outputs")? {
                Some(k) => u64::try_from(k)
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(|| format!("num_outputs = {k} must be positive"))?,
                None => n.p.output.len() as u64,
            };
            if parts == 0 || parts != n.p.output.len() as u64 {
                return Err(format!(
                    "num_outputs = {parts} must equal the node's {} outputs",
                    n.p.output.len()
                ));
            }
            if d % parts == 0 {
                vec![d / parts; parts as usize]
            } else if n.attr_i("num_outputs")?.is_some() {
                // Opset 18: chunks of ceil(d / parts), the last one smaller.
                let chunk = d.div_ceil(parts);
                let mut v = vec![chunk; parts as usize - 1];
                let used = chunk * (parts - 1);
                if used > d {
                    return Err(format!(
                        "cannot split extent {d} into {parts} chunks of {chunk}"
                    ));
                }
                v.push(d - used);
                v
            } else {
                return Err(format!(
                    "extent {d} of axis {axis} does not split evenly into {parts} outputs"
                ));
            }
        }
    };
    cx.emit(Op::Split { axis, sizes }, &[x])
}

/// Normalizes one sliced axis ONNX's way (clamping start to `[0, d-1]` for negative steps)
/// and returns the IR start and end.
fn slice_bounds(d: u64, start: i64, end: i64, step: i64) -> (i64, i64) {
    if d == 0 {
        return (0, 0);
    }
    let d = i128::from(d);
    let norm = |v: i64| {
        let v = i128::from(v);
        if v < 0 { v + d } else { v }
    };
    let (s, e) = if step > 0 {
        (norm(start).clamp(0, d), norm(end).clamp(0, d))
    } else {
        (norm(start).clamp(0, d - 1), norm(end).clamp(-1, d - 1))
    };
    // In range now; an end of -1 ("before the first element") is i64::MIN for the IR.
    (s as i64, if e < 0 { i64::MIN } else { e as i64 })
}

fn slice(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let xs = cx.ty(x).shape.clone();
    let (starts, ends, axes, steps) = if cx.opset < 10 {
        (
            n.attr_ints("starts")?
                .ok_or("attribute `starts` is required")?,
            n.attr_ints("ends")?.ok_or("attribute `ends` is required")?,
            n.attr_ints("axes")?,
            None,
        )
    } else {
        if n.has_input(1)
            && n.has_input(2)
            && (known_input(cx, n, 1).is_none() || known_input(cx, n, 2).is_none())
            && let Some(y) = dynamic_slice(cx, n, x)?
        {
            return Ok(vec![y]);
        }
        let opt = |cx: &mut Ctx<'_>, i, what| -> Result<Option<Vec<i64>>, String> {
            if n.has_input(i) {
                const_ints(cx, n, i, what).map(Some)
            } else {
                Ok(None)
            }
        };
        (
            const_ints(cx, n, 1, "starts")?,
            const_ints(cx, n, 2, "ends")?,
            opt(cx, 3, "axes")?,
            opt(cx, 4, "steps")?,
        )
    };
    let k = starts.len();
    let axes = axes.unwrap_or_else(|| (0..k as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if ends.len() != k || axes.len() != k || steps.len() != k {
        return Err(format!(
            "starts ({k}), ends ({}), axes ({}) and steps ({}) must have the same length",
            ends.len(),
            axes.len(),
            steps.len()
        ));
    }
    let mut items = Vec::with_capacity(k);
    for i in 0..k {
        let a = norm_axis(axes[i], xs.len())?;
        if steps[i] == 0 {
            return Err(format!("step of axis {a} is 0"));
        }
        let (s, e) = match &xs[a] {
            Dim::Static(d) => slice_bounds(*d, starts[i], ends[i], steps[i]),
            // A symbolic axis: only the whole axis is representable (big ends are INT_MAX).
            Dim::Sym(_) if steps[i] == 1 && starts[i] == 0 && ends[i] >= i64::from(i32::MAX) => {
                (0, i64::MAX)
            }
            Dim::Sym(_) => (starts[i], ends[i]),
        };
        items.push((a, s, e, steps[i]));
    }
    items.sort_by_key(|t| t.0);
    if items.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(format!("axes {axes:?} repeat an axis"));
    }
    let op = Op::Slice {
        axes: items.iter().map(|t| t.0).collect(),
        starts: items.iter().map(|t| t.1).collect(),
        ends: items.iter().map(|t| t.2).collect(),
        steps: items.iter().map(|t| t.3).collect(),
    };
    Ok(vec![cx.emit1(op, &[x])?])
}

/// The most steps [`offset_from`] walks back through reshapes and constant additions.
const MAX_OFFSET_WALK: usize = 32;

/// `v` as `root + offset` (elementwise, `offset` the same for every element) when `v` is
/// `root` passed through reshapes (Unsqueeze, Squeeze, Reshape) and additions or
/// subtractions of a known scalar (or one-element) integer; `(v, 0)` when it is none of these.
/// A bounded walk: no recursion.
fn offset_from(cx: &mut Ctx<'_>, v: ValueId) -> (ValueId, i64) {
    let (mut v, mut offset) = (v, 0i64);
    for _ in 0..MAX_OFFSET_WALK {
        let tessera_ir::ValueDef::Result(op, 0) = cx.g.value(v).def else {
            break;
        };
        let (kind, operands) = {
            let o = cx.g.op(op);
            (o.op.clone(), o.operands.clone())
        };
        let known_scalar = |cx: &mut Ctx<'_>, w: ValueId| {
            cx.known(w)
                .and_then(|t| tensor_ints(&t))
                .filter(|x| x.len() == 1)
                .map(|x| x[0])
        };
        let next = match (kind, operands.as_slice()) {
            (Op::Reshape { .. }, &[x]) => Some((x, 0)),
            (Op::Binary(tessera_ir::BinaryOp::Add), &[a, b]) => {
                match (known_scalar(cx, b), known_scalar(cx, a)) {
                    (Some(c), _) if cx.ty(a).num_elements() == cx.ty(v).num_elements() => {
                        Some((a, c))
                    }
                    (_, Some(c)) if cx.ty(b).num_elements() == cx.ty(v).num_elements() => {
                        Some((b, c))
                    }
                    _ => None,
                }
            }
            (Op::Binary(tessera_ir::BinaryOp::Sub), &[a, b])
                if cx.ty(a).num_elements() == cx.ty(v).num_elements() =>
            {
                known_scalar(cx, b)
                    .and_then(|c| c.checked_neg())
                    .map(|c| (a, c))
            }
            _ => None,
        };
        match next.and_then(|(w, c)| offset.checked_add(c).map(|o| (w, o))) {
            Some((w, o)) => (v, offset) = (w, o),
            None => break,
        }
    }
    (v, offset)
}

/// `Slice` whose starts or ends are computed at run time (a `Loop` body slicing at its
/// iteration number). Static shapes need a static extent, so the ends must be the starts plus
/// a constant `size` (`ends = starts + size`, through reshapes and additions of constants:
/// [`offset_from`]), and the steps 1. Each axis becomes a `gather` of `start + 0..size`, a
/// negative start counted from the end (`start + extent`) and the start then clamped to
/// `[0, extent - size]`. That is ONNX's answer whenever ONNX returns `size` elements; where
/// it returns fewer, a static extent cannot hold the answer and tessera's differs: a start
/// past `extent - size` gives the last `size` elements (ONNX: the rest of the axis), and a
/// start in `[-size, -1]`, whose end `start + size` is not negative and so is not counted
/// from the end, gives the window from `start + extent` moved inside the axis (ONNX: an
/// empty or shorter slice).
/// `None` when the ends are not the starts plus a constant (the caller then asks for known
/// bounds, as for every other slice).
fn dynamic_slice(cx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId) -> Result<Option<ValueId>, String> {
    let starts = input(cx, n, 1)?;
    let ends = input(cx, n, 2)?;
    let (s_root, s_off) = offset_from(cx, starts);
    let (e_root, e_off) = offset_from(cx, ends);
    if s_root != e_root {
        return Ok(None);
    }
    let Some(size) = e_off.checked_sub(s_off) else {
        return Ok(None);
    };
    let k = match cx.ty(starts).static_dims().as_deref() {
        Some([k]) => usize::try_from(*k).map_err(|_| "starts is too long".to_string())?,
        _ => {
            return Err(format!(
                "starts must be a 1-D tensor of static length, got {}",
                cx.ty(starts)
            ));
        }
    };
    let rank = cx.ty(x).rank();
    let axes = match known_input(cx, n, 3) {
        Some(t) => tensor_ints(&t).ok_or("axes must be integers")?,
        None if n.has_input(3) => return Err("input 3 (axes) must be known at import time".into()),
        None => (0..k as i64).collect(),
    };
    if axes.len() != k {
        return Err(format!(
            "starts ({k}) and axes ({}) must have the same length",
            axes.len()
        ));
    }
    if n.has_input(4) {
        let steps = const_ints(cx, n, 4, "steps")?;
        if steps.iter().any(|&s| s != 1) {
            return Err(format!(
                "steps {steps:?} with starts computed at run time: only steps of 1 are supported"
            ));
        }
    }
    let mut seen = Vec::with_capacity(k);
    let mut y = x;
    for (i, &axis) in axes.iter().enumerate() {
        let a = norm_axis(axis, rank)?;
        if seen.contains(&a) {
            return Err(format!("axes {axes:?} repeat an axis"));
        }
        seen.push(a);
        let d = cx.ty(x).shape[a].as_static().ok_or_else(|| {
            format!("slicing the symbolic axis {a} at run-time starts: bind it with --input-shape")
        })?;
        let d = i64::try_from(d).map_err(|_| format!("extent {d} is too large"))?;
        if size < 1 || size > d {
            return Err(format!(
                "ends = starts + {size}: a run-time slice of {size} elements from axis {a} of \
                 extent {d} (only 1 to {d} is supported)"
            ));
        }
        // start_i as an i64 [1].
        let s = if k == 1 {
            starts
        } else {
            cx.emit1(
                Op::Slice {
                    axes: vec![0],
                    starts: vec![i as i64],
                    ends: vec![i as i64 + 1],
                    steps: vec![1],
                },
                &[starts],
            )?
        };
        let s = if cx.ty(s).elem == ElemType::I64 {
            s
        } else {
            cx.emit1(Op::Cast { to: ElemType::I64 }, &[s])?
        };
        let zero = constant(cx, i64_tensor(&[0]));
        let extent = constant(cx, i64_tensor(&[d]));
        let negative = cx.emit1(Op::Binary(tessera_ir::BinaryOp::Less), &[s, zero])?;
        let wrapped = cx.emit1(Op::Binary(tessera_ir::BinaryOp::Add), &[s, extent])?;
        let s = cx.emit1(Op::Select, &[negative, wrapped, s])?;
        let s = cx.emit1(
            Op::Clip {
                min: Some(0.0),
                max: Some((d - size) as f64),
            },
            &[s],
        )?;
        // 0..size: a constant within the fold limit, else a `range` op.
        let window = super::iota(cx, size as u64, 0, 1)?;
        let idx = cx.emit1(Op::Binary(tessera_ir::BinaryOp::Add), &[s, window])?;
        y = cx.emit1(Op::Gather { axis: a }, &[y, idx])?;
    }
    Ok(Some(y))
}

fn pad(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let (elem, rank) = (cx.ty(x).elem, cx.ty(x).rank());
    let mode = match n.attr_s("mode")?.as_deref() {
        None | Some("constant") => PadMode::Constant,
        Some("reflect") => PadMode::Reflect,
        Some("edge") => PadMode::Edge,
        Some("wrap") => PadMode::Wrap,
        Some(m) => {
            return Err(format!(
                "mode = \"{m}\" is not one of \"constant\", \"reflect\", \"edge\", \"wrap\""
            ));
        }
    };
    let (given, value) = if cx.opset < 11 {
        let pads = n.attr_ints("pads")?.ok_or("attribute `pads` is required")?;
        let v = f64::from(n.attr_f_or("value", 0.0)?);
        let value = if elem.is_float() {
            Scalar::Float(v)
        } else {
            Scalar::Int(v as i64)
        };
        (pads, value)
    } else {
        let pads = const_ints(cx, n, 1, "pads")?;
        let value = if n.has_input(2) {
            let t = const_input(cx, n, 2, "constant_value")?;
            if t.len() > 1 {
                return Err(format!(
                    "input 2 (constant_value) must be a scalar, got {}",
                    t.ty()
                ));
            }
            if t.is_empty() {
                Scalar::Int(0)
            } else {
                scalar_of(&t)
            }
        } else {
            Scalar::Int(0)
        };
        (pads, value)
    };
    let axes = if n.has_input(3) {
        norm_axes(&const_ints(cx, n, 3, "axes")?, rank)?
    } else {
        (0..rank).collect()
    };
    if given.len() != 2 * axes.len() {
        return Err(format!(
            "pads {given:?} needs {} entries (begin and end for {} axes)",
            2 * axes.len(),
            axes.len()
        ));
    }
    let mut pads = vec![0; 2 * rank];
    for (i, &a) in axes.iter().enumerate() {
        pads[a] = given[i];
        pads[rank + a] = given[axes.len() + i];
    }
    let value = match value {
        Scalar::Int(v) if elem.is_float() => Scalar::Float(v as f64),
        v => v,
    };
    Ok(vec![cx.emit1(Op::Pad { pads, mode, value }, &[x])?])
}

fn shape_op(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let r = cx.ty(x).rank() as i64;
    let clampr = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clampr(n.attr_i_or("start", 0)?);
    let end = clampr(n.attr_i_or("end", r)?).max(start);
    let dims = &cx.ty(x).shape[start..end];
    match dims.iter().map(Dim::as_static).collect::<Option<Vec<_>>>() {
        Some(d) => {
            let v: Vec<i64> = d.iter().map(|&e| e as i64).collect();
            Ok(vec![constant(cx, i64_tensor(&v))])
        }
        None => Ok(vec![cx.emit1(Op::Shape { start, end }, &[x])?]),
    }
}

fn constant_op(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let hint = cx.hint().to_string();
    if let Some(t) = n.attr_t("value")? {
        let (ty, data) = cx.tensor_proto(t)?;
        return Ok(vec![cx.add_constant(&hint, ty, data)]);
    }
    let t = if let Some(f) = n.attr_f("value_float")? {
        Tensor::F32(ndarray::arr0(f).into_dyn())
    } else if let Some(v) = n.attr_floats("value_floats")? {
        Tensor::F32(ndarray::Array1::from(v).into_dyn())
    } else if let Some(i) = n.attr_i("value_int")? {
        Tensor::I64(ndarray::arr0(i).into_dyn())
    } else if let Some(v) = n.attr_ints("value_ints")? {
        i64_tensor(&v)
    } else if n.attr_names().any(|a| a == "sparse_value") {
        return Err("attribute `sparse_value` (a sparse constant) is not supported".into());
    } else if n.attr_names().any(|a| a.starts_with("value_string")) {
        return Err("string constants are not supported".into());
    } else {
        return Err("needs one of the attributes `value`, `value_float(s)`, `value_int(s)`".into());
    };
    Ok(vec![cx.constant_tensor(&hint, t)])
}

fn range(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let mut operands = [input(cx, n, 0)?, input(cx, n, 1)?, input(cx, n, 2)?];
    // The schema says scalars; ONNX's reference implementation (and its own expanded
    // functions, AffineGrid's) also passes one-element tensors, which become scalars.
    for v in &mut operands {
        if cx.ty(*v).rank() > 0 && cx.ty(*v).num_elements() == Some(1) {
            *v = reshape_to(cx, *v, Vec::new())?;
        }
    }
    let known: Vec<Option<Tensor>> = (0..3).map(|i| known_input(cx, n, i)).collect();
    let size = match known.as_slice() {
        [Some(s), Some(l), Some(d)] => {
            let count = match (tensor_ints(s), tensor_ints(l), tensor_ints(d)) {
                (Some(s), Some(l), Some(d)) => {
                    let (s, l, d) = (first(&s)?, first(&l)?, first(&d)?);
                    if d == 0 {
                        return Err("input 2 (delta) is 0".into());
                    }
                    let (num, d) = (i128::from(l) - i128::from(s), i128::from(d));
                    let q = num / d + i128::from(num % d != 0 && (num < 0) == (d < 0));
                    q.max(0) as u64
                }
                _ => {
                    let f = |t: &Tensor| t.to_f64_vec().first().copied().ok_or("empty input");
                    let (s, l, d) = (f(s)?, f(l)?, f(d)?);
                    if d == 0.0 {
                        return Err("input 2 (delta) is 0".into());
                    }
                    ((l - s) / d).ceil().max(0.0) as u64
                }
            };
            Dim::Static(count)
        }
        // Computed at run time: the length is a fresh symbol bound when the range runs.
        _ => Dim::Sym(format!("{}_len", cx.hint())),
    };
    Ok(vec![cx.emit1(Op::Range { size }, &operands)?])
}

fn first(v: &[i64]) -> Result<i64, String> {
    v.first()
        .copied()
        .ok_or_else(|| "range inputs must be scalars".to_string())
}

fn blocksize(n: &Node<'_>) -> Result<u64, String> {
    let b = n
        .attr_i("blocksize")?
        .ok_or("attribute `blocksize` is required")?;
    u64::try_from(b)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("blocksize = {b} must be positive"))
}

fn space_to_depth(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let block = blocksize(n)?;
    match n.attr_s("mode")?.as_deref() {
        None | Some("DCR") => Ok(vec![cx.emit1(Op::SpaceToDepth { block }, &[x])?]),
        Some("CRD") => {
            // [N, C, H/b, b, W/b, b] -> [N, C, b, b, H/b, W/b] -> [N, C*b*b, H/b, W/b].
            let t = cx.ty(x).clone();
            let dims = t
                .static_dims()
                .filter(|d| d.len() == 4 && d[2] % block == 0 && d[3] % block == 0)
                .ok_or_else(|| {
                    format!(
                        "input must be static [N, C, H, W] with H, W divisible by {block}, got {t}"
                    )
                })?;
            let (nn, c, h, w) = (dims[0], dims[1], dims[2] / block, dims[3] / block);
            let fixed = |v: &[u64]| v.iter().map(|&d| Dim::Static(d)).collect::<Vec<_>>();
            let y = reshape_to(cx, x, fixed(&[nn, c, h, block, w, block]))?;
            let y = cx.emit1(
                Op::Transpose {
                    perm: vec![0, 1, 3, 5, 2, 4],
                },
                &[y],
            )?;
            Ok(vec![reshape_to(
                cx,
                y,
                fixed(&[nn, c * block * block, h, w]),
            )?])
        }
        Some(m) => Err(format!("mode = \"{m}\" is not one of \"DCR\", \"CRD\"")),
    }
}

// ---------------------------------------------------------------------------------------
// Resize

/// The ONNX attributes of a resize, parsed.
struct ResizeSpec {
    mode: ResizeMode,
    coord: String,
    nearest: NearestMode,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    extrapolation: f64,
}

fn upsample(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let scales = if cx.opset < 9 {
        n.attr_floats("scales")?
            .ok_or("attribute `scales` is required")?
    } else {
        const_input(cx, n, 1, "scales")?
            .to_f64_vec()
            .iter()
            .map(|&s| s as f32)
            .collect()
    };
    let mode = resize_mode(n)?;
    let spec = ResizeSpec {
        mode,
        coord: "asymmetric".into(),
        nearest: NearestMode::Floor,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
        extrapolation: 0.0,
    };
    let rank = cx.ty(x).rank();
    let dims = resize_input_dims(cx, x)?;
    let (scales, sizes) = sizes_from_scales(&dims, &scales, &(0..rank).collect::<Vec<_>>())?;
    resize_with(cx, x, &spec, &scales, &sizes, None).map(|v| vec![v])
}

fn resize_mode(n: &Node<'_>) -> Result<ResizeMode, String> {
    Ok(match n.attr_s("mode")?.as_deref() {
        None | Some("nearest") => ResizeMode::Nearest,
        Some("linear" | "bilinear") => ResizeMode::Linear,
        Some("cubic") => ResizeMode::Cubic,
        Some(m) => {
            return Err(format!(
                "mode = \"{m}\" is not one of \"nearest\", \"linear\", \"cubic\""
            ));
        }
    })
}

fn resize_input_dims(cx: &Ctx<'_>, x: ValueId) -> Result<Vec<u64>, String> {
    cx.ty(x).static_dims().ok_or_else(|| {
        format!(
            "resizing {} needs a static input shape: bind symbolic dimensions with --input-shape",
            cx.ty(x)
        )
    })
}

/// Per-axis scales and output sizes from scales given for `axes` (`floor(in * scale)`).
fn sizes_from_scales(
    dims: &[u64],
    given: &[f32],
    axes: &[usize],
) -> Result<(Vec<f64>, Vec<u64>), String> {
    if given.len() != axes.len() {
        return Err(format!(
            "scales {given:?} has {} entries for {} axes",
            given.len(),
            axes.len()
        ));
    }
    let mut scales = vec![1.0; dims.len()];
    let mut sizes = dims.to_vec();
    for (&a, &s) in axes.iter().zip(given) {
        let s = f64::from(s);
        if !(s > 0.0 && s.is_finite()) {
            return Err(format!("scale {s} of axis {a} must be positive"));
        }
        scales[a] = s;
        sizes[a] = (dims[a] as f64 * s).floor() as u64;
    }
    Ok((scales, sizes))
}

fn resize(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let dims = resize_input_dims(cx, x)?;
    let rank = dims.len();
    let mode = resize_mode(n)?;
    let v10 = cx.opset < 11;
    let nearest = match n.attr_s("nearest_mode")?.as_deref() {
        _ if v10 => NearestMode::Floor,
        None | Some("round_prefer_floor") => NearestMode::RoundPreferFloor,
        Some("round_prefer_ceil") => NearestMode::RoundPreferCeil,
        Some("floor") => NearestMode::Floor,
        Some("ceil") => NearestMode::Ceil,
        Some(m) => return Err(format!("nearest_mode = \"{m}\" is not supported")),
    };
    let coord = if v10 {
        "asymmetric".to_string()
    } else {
        n.attr_s("coordinate_transformation_mode")?
            .unwrap_or_else(|| "half_pixel".into())
    };
    let spec = ResizeSpec {
        mode,
        coord,
        nearest,
        cubic_a: f64::from(n.attr_f_or("cubic_coeff_a", -0.75)?),
        exclude_outside: n.attr_i_or("exclude_outside", 0)? != 0,
        antialias: n.attr_i_or("antialias", 0)? != 0,
        extrapolation: f64::from(n.attr_f_or("extrapolation_value", 0.0)?),
    };
    let axes = match n.attr_ints("axes")? {
        Some(a) => {
            let mut seen = vec![false; rank];
            let v = a
                .iter()
                .map(|&x| norm_axis(x, rank))
                .collect::<Result<Vec<_>, _>>()?;
            if v.iter().any(|&x| std::mem::replace(&mut seen[x], true)) {
                return Err(format!("axes {a:?} repeat an axis"));
            }
            v
        }
        None => (0..rank).collect(),
    };
    let (scale_idx, sizes_idx) = if v10 { (1, usize::MAX) } else { (2, 3) };
    let scales_t = if n.has_input(scale_idx) {
        Some(const_input(cx, n, scale_idx, "scales")?).filter(|t| !t.is_empty())
    } else {
        None
    };
    let sizes_t = if n.has_input(sizes_idx) {
        Some(const_ints(cx, n, sizes_idx, "sizes")?).filter(|t| !t.is_empty())
    } else {
        None
    };
    let (scales, sizes) = match (scales_t, sizes_t) {
        (Some(s), None) => {
            let s: Vec<f32> = s.to_f64_vec().iter().map(|&v| v as f32).collect();
            sizes_from_scales(&dims, &s, &axes)?
        }
        (None, Some(z)) => {
            if z.len() != axes.len() {
                return Err(format!(
                    "sizes {z:?} has {} entries for {} axes",
                    z.len(),
                    axes.len()
                ));
            }
            let mut ratio = vec![1.0; rank];
            for (&a, &s) in axes.iter().zip(&z) {
                if s < 0 {
                    return Err(format!("sizes {z:?} has a negative extent"));
                }
                ratio[a] = s as f64 / dims[a] as f64;
            }
            let policy = n.attr_s("keep_aspect_ratio_policy")?;
            let pick = match policy.as_deref() {
                None | Some("stretch") => None,
                Some("not_larger") => Some(f64::min as fn(f64, f64) -> f64),
                Some("not_smaller") => Some(f64::max as fn(f64, f64) -> f64),
                Some(p) => {
                    return Err(format!(
                        "keep_aspect_ratio_policy = \"{p}\" is not supported"
                    ));
                }
            };
            let mut sizes = dims.clone();
            match pick {
                None => {
                    for (&a, &s) in axes.iter().zip(&z) {
                        sizes[a] = s as u64;
                    }
                }
                Some(f) => {
                    let s = axes.iter().map(|&a| ratio[a]).reduce(f).unwrap_or(1.0);
                    for &a in &axes {
                        ratio[a] = s;
                        sizes[a] = (s * dims[a] as f64 + 0.5) as u64;
                    }
                }
            }
            (ratio, sizes)
        }
        (Some(_), Some(_)) => return Err("only one of scales and sizes may be given".into()),
        (None, None) => return Err("one of the inputs scales and sizes is required".into()),
    };
    let roi = if spec.coord == "tf_crop_and_resize" {
        let r = if n.has_input(1) {
            const_input(cx, n, 1, "roi")?.to_f64_vec()
        } else {
            Vec::new()
        };
        let mut full: Vec<f64> = [vec![0.0; rank], vec![1.0; rank]].concat();
        if r.len() == 2 * axes.len() {
            for (i, &a) in axes.iter().enumerate() {
                full[a] = r[i];
                full[rank + a] = r[axes.len() + i];
            }
        } else if !r.is_empty() {
            return Err(format!(
                "roi has {} entries for {} axes",
                r.len(),
                axes.len()
            ));
        }
        Some(full)
    } else {
        None
    };
    resize_with(cx, x, &spec, &scales, &sizes, roi.as_deref()).map(|v| vec![v])
}

/// The source coordinate of output index `o` on one axis.
fn source_coord(
    coord: &str,
    o: f64,
    inn: f64,
    scale: f64,
    out: u64,
    roi: (f64, f64),
) -> Result<f64, String> {
    let out_f = scale * inn;
    Ok(match coord {
        "half_pixel" => (o + 0.5) / scale - 0.5,
        "pytorch_half_pixel" if out_f == 1.0 => -0.5,
        "pytorch_half_pixel" => (o + 0.5) / scale - 0.5,
        "align_corners" if out_f == 1.0 => 0.0,
        "align_corners" => o * (inn - 1.0) / (out_f - 1.0),
        "asymmetric" => o / scale,
        "half_pixel_symmetric" => {
            let offset = inn / 2.0 * (1.0 - out as f64 / out_f);
            offset + (o + 0.5) / scale - 0.5
        }
        "tf_crop_and_resize" => {
            let base = roi.0 * (inn - 1.0);
            if out_f == 1.0 {
                (roi.1 - roi.0) * (inn - 1.0) / 2.0 + base
            } else {
                o * (roi.1 - roi.0) * (inn - 1.0) / (out_f - 1.0) + base
            }
        }
        m => {
            return Err(format!(
                "coordinate_transformation_mode = \"{m}\" is not supported"
            ));
        }
    })
}

fn cubic_kernel(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Interpolation weights for fractional position `ratio` in `(0, 1]` past the left pixel.
fn coefficients(spec: &ResizeSpec, ratio: f64, scale: f64) -> Vec<f64> {
    let normalized = |c: Vec<f64>| {
        let s: f64 = c.iter().sum();
        c.into_iter().map(|v| v / s).collect()
    };
    match spec.mode {
        ResizeMode::Nearest => {
            let right = match spec.nearest {
                _ if ratio == 1.0 => true,
                NearestMode::RoundPreferFloor => ratio > 0.5,
                NearestMode::RoundPreferCeil => ratio >= 0.5,
                NearestMode::Floor => false,
                NearestMode::Ceil => true,
            };
            if right {
                vec![0.0, 1.0]
            } else {
                vec![1.0, 0.0]
            }
        }
        ResizeMode::Linear if spec.antialias && scale < 1.0 => {
            let start = (-1.0 / scale).floor() as i64 + 1;
            let taps = 2 - 2 * start;
            normalized(
                (start..start + taps)
                    .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                    .collect(),
            )
        }
        ResizeMode::Linear => vec![1.0 - ratio, ratio],
        ResizeMode::Cubic if spec.antialias && scale < 1.0 => {
            let start = (-2.0 / scale).floor() as i64 + 1;
            normalized(
                (start..2 - start)
                    .map(|i| cubic_kernel(scale * (i as f64 - ratio), spec.cubic_a))
                    .collect(),
            )
        }
        ResizeMode::Cubic => [1.0 + ratio, ratio, 1.0 - ratio, 2.0 - ratio]
            .iter()
            .map(|&d| cubic_kernel(d, spec.cubic_a))
            .collect(),
    }
}

/// One axis of a resize: for each output index, `k` (clamped source index, weight) taps, stored
/// flat (output-major), and whether the output lies outside the input (tf_crop_and_resize
/// extrapolation).
struct AxisTaps {
    k: usize,
    idx: Vec<i64>,
    w: Vec<f64>,
    outside: Vec<bool>,
}

/// The number of taps [`coefficients`] gives each output of a resize with `scale` (it does not
/// depend on the output's position), as a float so that a tiny scale cannot overflow it.
fn taps_per_output(spec: &ResizeSpec, scale: f64) -> f64 {
    match spec.mode {
        ResizeMode::Nearest => 2.0,
        ResizeMode::Linear if spec.antialias && scale < 1.0 => -2.0 * (-1.0 / scale).floor(),
        ResizeMode::Linear => 2.0,
        ResizeMode::Cubic if spec.antialias && scale < 1.0 => -2.0 * (-2.0 / scale).floor(),
        ResizeMode::Cubic => 4.0,
    }
}

/// The most taps (outputs times taps per output) a resize builds for one axis. Its index and
/// weight tables become constants of the graph (2 MiB each at this limit, far below the fold
/// limit); a resize past it is refused at its node instead of taking seconds and gigabytes to
/// import (found by fuzzing; at 2^22 taps an import still took a second, at 2^20 half of
/// one). An axis of 65,536 outputs with cubic taps, or 131,072 with linear or nearest ones,
/// fits.
const MAX_RESIZE_TAPS: f64 = (1u64 << 18) as f64;

fn axis_taps(
    spec: &ResizeSpec,
    inn: u64,
    out: u64,
    scale: f64,
    roi: (f64, f64),
) -> Result<AxisTaps, String> {
    let per = taps_per_output(spec, scale);
    if !(per >= 1.0 && out as f64 * per <= MAX_RESIZE_TAPS) {
        return Err(format!(
            "resizing to {out} outputs with {per} taps each (scale {scale}) needs a table of more \
             than {MAX_RESIZE_TAPS} taps"
        ));
    }
    let k = per as usize;
    let n = out as usize;
    let (mut idx, mut w) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
    let mut outside = Vec::with_capacity(n);
    let fin = inn as f64;
    let last = inn.saturating_sub(1) as i64;
    for o in 0..out {
        let x = source_coord(&spec.coord, o as f64, fin, scale, out, roi)?;
        outside.push(spec.coord == "tf_crop_and_resize" && (x < 0.0 || x > fin - 1.0));
        let xi = x.floor();
        let ratio = if x == xi { 1.0 } else { x - xi };
        let mut c = coefficients(spec, ratio, scale);
        if c.len() != k {
            return Err(format!(
                "resize taps: {} coefficients, expected {k}",
                c.len()
            ));
        }
        let k = k as i64;
        // The k indices nearest to x, ties to the smaller (k even: centred between pixels).
        let pad = (k + 1) / 2;
        let xp = x + pad as f64;
        let p = xp.floor();
        let frac = xp - p;
        let off = if k % 2 == 0 {
            if frac == 0.0 { -(k / 2) } else { -(k / 2) + 1 }
        } else if frac <= 0.5 {
            -((k - 1) / 2)
        } else {
            -((k - 1) / 2) + 1
        };
        let start = p as i64 + off - pad;
        if spec.exclude_outside {
            for (w, i) in c.iter_mut().zip(start..) {
                if i < 0 || i >= inn as i64 {
                    *w = 0.0;
                }
            }
            let s: f64 = c.iter().sum();
            if s != 0.0 {
                c.iter_mut().for_each(|w| *w /= s);
            }
        }
        idx.extend((start..start + k).map(|i| i.clamp(0, last)));
        w.extend(c);
    }
    Ok(AxisTaps { k, idx, w, outside })
}

/// Resize with per-axis `scales` (used in the coordinate mapping) and output `sizes`. Uses the
/// IR `resize` op when its semantics coincide, else gathers and weighs source elements axis
/// by axis.
fn resize_with(
    cx: &mut Ctx<'_>,
    x: ValueId,
    spec: &ResizeSpec,
    scales: &[f64],
    sizes: &[u64],
    roi: Option<&[f64]>,
) -> Result<ValueId, String> {
    let dims = resize_input_dims(cx, x)?;
    let rank = dims.len();
    let elem = cx.ty(x).elem;
    if spec.mode != ResizeMode::Nearest && !elem.is_float() {
        return Err(format!(
            "linear and cubic resize need a floating-point input, got {elem}"
        ));
    }
    let ir_coord = match spec.coord.as_str() {
        "half_pixel" => Some(CoordTransform::HalfPixel),
        "pytorch_half_pixel" => Some(CoordTransform::PytorchHalfPixel),
        "align_corners" => Some(CoordTransform::AlignCorners),
        "asymmetric" => Some(CoordTransform::Asymmetric),
        _ => None,
    };
    let exact = (0..rank).all(|i| sizes[i] as f64 == scales[i] * dims[i] as f64);
    if let Some(coord) = ir_coord
        && exact
        && !spec.antialias
        && !spec.exclude_outside
        && dims.iter().all(|&d| d > 0)
    {
        let op = Op::Resize {
            sizes: sizes.to_vec(),
            mode: spec.mode,
            coord,
            nearest: spec.nearest,
            cubic_coeff: spec.cubic_a,
        };
        return cx.emit1(op, &[x]);
    }
    let mut y = x;
    for a in 0..rank {
        let r = roi.map_or((0.0, 1.0), |r| (r[a], r[rank + a]));
        if sizes[a] == dims[a] && scales[a] == 1.0 && r == (0.0, 1.0) {
            continue;
        }
        if dims[a] == 0 {
            return Err(format!("cannot resize the empty axis {a}"));
        }
        let taps = axis_taps(spec, dims[a], sizes[a], scales[a], r)
            .map_err(|why| format!("axis {a}: {why}"))?;
        y = resize_axis(cx, y, a, &taps, spec)?;
        let outside = taps.outside;
        if outside.iter().any(|&b| b) {
            let mut shape = vec![1usize; rank];
            shape[a] = outside.len();
            let mask = Tensor::Bool(
                ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), outside)
                    .map_err(|e| e.to_string())?,
            );
            let mask = constant(cx, mask);
            let fill = super::scalar(cx, elem, spec.extrapolation)?;
            y = cx.emit1(Op::Select, &[mask, fill, y])?;
        }
    }
    Ok(y)
}

/// Interpolates axis `a`: gathers the taps and sums them weighted.
fn resize_axis(
    cx: &mut Ctx<'_>,
    x: ValueId,
    a: usize,
    taps: &AxisTaps,
    spec: &ResizeSpec,
) -> Result<ValueId, String> {
    let rank = cx.ty(x).rank();
    let elem = cx.ty(x).elem;
    let k = taps.k;
    let out = taps.outside.len();
    if spec.mode == ResizeMode::Nearest {
        // The tap of weight one (nearest has a one and a zero), else the first.
        let idx: Vec<i64> = (0..out)
            .map(|o| {
                let (i, w) = (&taps.idx[o * k..][..k], &taps.w[o * k..][..k]);
                w.iter().position(|&w| w == 1.0).map_or(i[0], |j| i[j])
            })
            .collect();
        let idx = constant(cx, i64_tensor(&idx));
        return cx.emit1(Op::Gather { axis: a }, &[x, idx]);
    }
    let idx = Tensor::I64(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[out, k]), taps.idx.clone())
            .map_err(|e| e.to_string())?,
    );
    let mut wshape = vec![out, k];
    wshape.extend(std::iter::repeat_n(1, rank - a - 1));
    let w = Tensor::F64(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&wshape), taps.w.clone())
            .map_err(|e| e.to_string())?,
    );
    let w = tessera_ir::interp::eval_op(&Op::Cast { to: elem }, &[&w])
        .map_err(|e| e.to_string())?
        .pop()
        .ok_or("cast produced no result")?;
    let idx = constant(cx, idx);
    let w = constant(cx, w);
    let g = cx.emit1(Op::Gather { axis: a }, &[x, idx])?;
    let p = cx.emit1(Op::Binary(tessera_ir::BinaryOp::Mul), &[g, w])?;
    cx.emit1(
        Op::Reduce {
            kind: ReduceKind::Sum,
            axes: vec![a + 1],
            keep_dims: false,
        },
        &[p],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(s: &str) -> Dim {
        Dim::Sym(s.into())
    }

    #[test]
    fn reshape_infers_static_and_symbolic_extents() {
        let st = |v: u64| Dim::Static(v);
        assert_eq!(infer_extent(&[st(2), st(6)], &[st(3)]), Some(st(4)));
        assert_eq!(
            infer_extent(&[sym("N"), st(4), st(5)], &[st(20)]),
            Some(sym("N"))
        );
        assert_eq!(
            infer_extent(&[sym("N"), st(4), st(5)], &[sym("N"), st(2)]),
            Some(st(10))
        );
        assert_eq!(infer_extent(&[sym("N"), st(4)], &[st(8)]), None);
        assert_eq!(infer_extent(&[sym("N"), sym("M")], &[st(1)]), None);
        assert_eq!(infer_extent(&[st(0), sym("N")], &[st(3)]), Some(st(0)));
        assert_eq!(infer_extent(&[st(6)], &[st(4)]), None);
    }

    #[test]
    fn slice_bounds_follow_onnx_clamping() {
        // Negative steps clamp the start into [0, d-1] (numpy would give an empty slice).
        assert_eq!(slice_bounds(5, -100, i64::MIN, -1), (0, i64::MIN));
        assert_eq!(slice_bounds(5, 1000, 0, -1), (4, 0));
        assert_eq!(slice_bounds(5, 1, i64::MAX, 1), (1, 5));
        assert_eq!(slice_bounds(5, -2, -1, 1), (3, 4));
        assert_eq!(slice_bounds(0, 3, -1, -1), (0, 0));
    }

    #[test]
    fn linear_taps_match_half_pixel_downsampling() {
        let spec = ResizeSpec {
            mode: ResizeMode::Linear,
            coord: "half_pixel".into(),
            nearest: NearestMode::RoundPreferFloor,
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
            extrapolation: 0.0,
        };
        // 4 -> 2 with scale 0.6: x = (o + 0.5) / 0.6 - 0.5.
        let taps = axis_taps(&spec, 4, 2, 0.6, (0.0, 1.0)).expect("taps");
        assert_eq!(taps.outside, vec![false, false]);
        assert_eq!(taps.k, 2);
        let x0: f64 = 0.5 / 0.6 - 0.5;
        assert_eq!(&taps.idx[..2], &[0, 1]);
        assert!((taps.w[1] - x0).abs() < 1e-12);
    }
}
