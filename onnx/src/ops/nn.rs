//! Neural-network ONNX ops: convolution and transposed convolution, pooling (windowed and
//! global), the normalizations (batch, instance, layer, LRN) and the softmax family
//! (Softmax, LogSoftmax, Hardmax).

use tessera_ir::{
    ArgKind, BinaryOp, ConvAttrs, Dim, ElemType, Op, PoolAttrs, PoolKind, ReduceKind, TensorType,
    UnaryOp, ValueId,
};

use super::Arity;
use super::{
    Node, Registry, bin, cast_to, input, norm_axes, norm_axis, opt_input, reshape, scalar, un,
};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("AveragePool", &[(1, 1, 1)]),
    ("BatchNormalization", &[(1, 5, 5)]),
    ("Conv", &[(1, 2, 3)]),
    ("ConvTranspose", &[(1, 2, 3)]),
    ("GlobalAveragePool", &[(1, 1, 1)]),
    ("GlobalMaxPool", &[(1, 1, 1)]),
    ("GroupNormalization", &[(18, 3, 3)]),
    ("Hardmax", &[(1, 1, 1)]),
    ("InstanceNormalization", &[(1, 3, 3)]),
    ("LRN", &[(1, 1, 1)]),
    ("LayerNormalization", &[(17, 2, 3)]),
    ("LogSoftmax", &[(1, 1, 1)]),
    ("LpNormalization", &[(1, 1, 1)]),
    ("LpPool", &[(1, 1, 1)]),
    ("MaxPool", &[(1, 1, 1)]),
    ("MeanVarianceNormalization", &[(9, 1, 1)]),
    ("RMSNormalization", &[(23, 2, 2)]),
    ("Softmax", &[(1, 1, 1)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("Conv", 1, conv);
    r.add("ConvTranspose", 1, conv_transpose);
    r.add("MaxPool", 1, |cx, n| pool(cx, n, PoolKind::Max));
    r.add("AveragePool", 1, |cx, n| pool(cx, n, PoolKind::Avg));
    r.add("GlobalMaxPool", 1, |cx, n| {
        global_pool(cx, n, ReduceKind::Max)
    });
    r.add("GlobalAveragePool", 1, |cx, n| {
        global_pool(cx, n, ReduceKind::Mean)
    });
    r.add("BatchNormalization", 1, batch_norm);
    r.add("InstanceNormalization", 1, |cx, n| {
        let epsilon = f64::from(n.attr_f_or("epsilon", 1e-5)?);
        let x = input(cx, n, 0)?;
        let scale = input(cx, n, 1)?;
        let bias = input(cx, n, 2)?;
        Ok(vec![
            cx.emit1(Op::InstanceNorm { epsilon }, &[x, scale, bias])?,
        ])
    });
    r.add("LayerNormalization", 17, layer_norm);
    r.add("RMSNormalization", 23, rms_norm);
    r.add("LpNormalization", 1, lp_norm);
    r.add("LpPool", 11, lp_pool);
    r.add("GroupNormalization", 18, group_norm);
    r.add("MeanVarianceNormalization", 9, mvn);
    r.add("LRN", 1, |cx, n| {
        let size = n.attr_i("size")?.ok_or("attribute `size` is required")?;
        let size = u64::try_from(size)
            .ok()
            .filter(|&s| s > 0)
            .ok_or_else(|| format!("attribute `size` must be positive, got {size}"))?;
        let op = Op::Lrn {
            size,
            alpha: f64::from(n.attr_f_or("alpha", 1e-4)?),
            beta: f64::from(n.attr_f_or("beta", 0.75)?),
            bias: f64::from(n.attr_f_or("bias", 1.0)?),
        };
        let x = input(cx, n, 0)?;
        Ok(vec![cx.emit1(op, &[x])?])
    });
    r.add("Softmax", 1, |cx, n| {
        along_axis(cx, n, |cx, x, axis| cx.emit1(Op::Softmax { axis }, &[x]))
    });
    r.add("LogSoftmax", 1, |cx, n| {
        along_axis(cx, n, |cx, x, axis| cx.emit1(Op::LogSoftmax { axis }, &[x]))
    });
    r.add("Hardmax", 1, |cx, n| along_axis(cx, n, hardmax));
}

/// The `auto_pad` attribute.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    Valid,
    SameUpper,
    SameLower,
}

fn auto_pad(n: &Node<'_>) -> Result<AutoPad, String> {
    Ok(match n.attr_s("auto_pad")?.as_deref() {
        None | Some("NOTSET") | Some("") => AutoPad::NotSet,
        Some("VALID") => AutoPad::Valid,
        Some("SAME_UPPER") => AutoPad::SameUpper,
        Some("SAME_LOWER") => AutoPad::SameLower,
        Some(other) => {
            return Err(format!(
                "auto_pad = \"{other}\" is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER"
            ));
        }
    })
}

/// A list attribute of `len` non-negative entries (positive with `positive`), or `default`
/// repeated when absent.
fn dims_attr(
    n: &Node<'_>,
    name: &str,
    len: usize,
    default: u64,
    positive: bool,
) -> Result<Vec<u64>, String> {
    let Some(v) = n.attr_ints(name)? else {
        return Ok(vec![default; len]);
    };
    if v.len() != len {
        return Err(format!(
            "attribute `{name}` has {} entries, expected {len}",
            v.len()
        ));
    }
    v.iter()
        .map(|&x| {
            u64::try_from(x)
                .ok()
                .filter(|&x| !positive || x > 0)
                .ok_or_else(|| format!("attribute `{name}` has the invalid entry {x}"))
        })
        .collect()
}

/// The static spatial extents of a `[N, C, D...]` operand.
fn spatial_dims(ty: &TensorType, what: &str) -> Result<Vec<u64>, String> {
    if ty.rank() < 3 {
        return Err(format!(
            "{what} must have rank >= 3 ([N, C, D...]), got {ty}"
        ));
    }
    ty.shape[2..]
        .iter()
        .map(|d| {
            d.as_static().ok_or_else(|| {
                format!("{what} {ty} has a symbolic spatial extent; bind it with --input-shape")
            })
        })
        .collect()
}

/// Kernel, strides, dilations and pads of a conv or pool node; `auto_pad` resolved against
/// the input's spatial extents `dims`.
struct Window {
    kernel: Vec<u64>,
    strides: Vec<u64>,
    dilations: Vec<u64>,
    pads: Vec<u64>,
}

/// Reads the window attributes. `kernel` is the weight's kernel (conv); pooling reads the
/// required `kernel_shape` attribute.
fn window(n: &Node<'_>, dims: &[u64], kernel: Option<Vec<u64>>) -> Result<Window, String> {
    let s = dims.len();
    let kernel = match (kernel, n.attr_ints("kernel_shape")?) {
        (Some(k), None) => k,
        (Some(k), Some(attr)) => {
            if attr
                .iter()
                .map(|&x| u64::try_from(x).ok())
                .ne(k.iter().map(|&x| Some(x)))
            {
                return Err(format!(
                    "attribute `kernel_shape` {attr:?} does not match the weight's kernel {k:?}"
                ));
            }
            k
        }
        (None, None) => return Err("attribute `kernel_shape` is required".into()),
        (None, Some(_)) => dims_attr(n, "kernel_shape", s, 0, true)?,
    };
    let strides = dims_attr(n, "strides", s, 1, true)?;
    let dilations = dims_attr(n, "dilations", s, 1, true)?;
    let pads = match auto_pad(n)? {
        AutoPad::NotSet => dims_attr(n, "pads", 2 * s, 0, false)?,
        AutoPad::Valid => vec![0; 2 * s],
        mode => {
            // Output extent ceil(D / stride); the total padding that yields it is split
            // evenly, the odd one at the end (SAME_UPPER) or at the beginning (SAME_LOWER).
            let mut pads = vec![0; 2 * s];
            for i in 0..s {
                let out = dims[i].div_ceil(strides[i]);
                let eff = effective_kernel(kernel[i], dilations[i]);
                let total = (out.saturating_sub(1))
                    .saturating_mul(strides[i])
                    .saturating_add(eff)
                    .saturating_sub(dims[i]);
                let small = total / 2;
                let (b, e) = if mode == AutoPad::SameUpper {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                pads[i] = b;
                pads[s + i] = e;
            }
            pads
        }
    };
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// The extent a dilated kernel spans.
fn effective_kernel(k: u64, dilation: u64) -> u64 {
    dilation
        .saturating_mul(k.saturating_sub(1))
        .saturating_add(1)
}

/// Positive `group` attribute.
fn groups(n: &Node<'_>) -> Result<u64, String> {
    let g = n.attr_i_or("group", 1)?;
    u64::try_from(g)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| format!("attribute `group` must be positive, got {g}"))
}

/// Conv and ConvTranspose operands (x, w, optional bias) with the input's spatial extents and
/// the window attributes (the kernel read from the weight's static shape).
fn conv_operands(
    cx: &mut Ctx<'_>,
    n: &Node<'_>,
) -> Result<(Vec<ValueId>, Vec<u64>, Window), String> {
    let x = input(cx, n, 0)?;
    let w = input(cx, n, 1)?;
    let dims = spatial_dims(cx.ty(x), "input X")?;
    let kernel = spatial_dims(cx.ty(w), "weight W")?;
    if kernel.len() != dims.len() {
        return Err(format!(
            "weight W {} and input X {} differ in rank",
            cx.ty(w),
            cx.ty(x)
        ));
    }
    let mut operands = vec![x, w];
    operands.extend(opt_input(cx, n, 2)?);
    let w = window(n, &dims, Some(kernel))?;
    Ok((operands, dims, w))
}

fn conv(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let (operands, _, w) = conv_operands(cx, n)?;
    let attrs = ConvAttrs {
        strides: w.strides,
        pads: w.pads,
        dilations: w.dilations,
        groups: groups(n)?,
    };
    Ok(vec![cx.emit1(Op::Conv(attrs), &operands)?])
}

/// ConvTranspose. Pads come from `pads`, or from `output_shape` / SAME auto-padding by the
/// spec's equations; a negative trailing pad (an output larger than the full result)
/// becomes extra output padding.
fn conv_transpose(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    // The window's pads are a convolution's; they are resolved again below.
    let (operands, dims, w) = conv_operands(cx, n)?;
    let s = dims.len();
    let mode = auto_pad(n)?;
    let mut output_padding = dims_attr(n, "output_padding", s, 0, false)?;
    let output_shape = match n.attr_ints("output_shape")? {
        Some(v) if v.len() == s => Some(v),
        Some(v) if v.len() == s + 2 => Some(v[2..].to_vec()),
        Some(v) => {
            return Err(format!(
                "attribute `output_shape` has {} entries for {s} spatial axes",
                v.len()
            ));
        }
        None if matches!(mode, AutoPad::SameUpper | AutoPad::SameLower) => Some(
            dims.iter()
                .zip(&w.strides)
                .map(|(&d, &st)| i64::try_from(d.saturating_mul(st)).unwrap_or(i64::MAX))
                .collect(),
        ),
        None => None,
    };
    let pads = match output_shape {
        None if mode == AutoPad::NotSet => dims_attr(n, "pads", 2 * s, 0, false)?,
        None => vec![0; 2 * s],
        Some(shape) => {
            let mut pads = vec![0; 2 * s];
            for i in 0..s {
                let full = w.strides[i]
                    .saturating_mul(dims[i].saturating_sub(1))
                    .saturating_add(output_padding[i])
                    .saturating_add(effective_kernel(w.kernel[i], w.dilations[i]));
                let total = i64::try_from(full)
                    .ok()
                    .and_then(|f| f.checked_sub(shape[i]))
                    .ok_or("attribute `output_shape` is out of range")?;
                let half = total.div_euclid(2);
                let (b, e) = if mode == AutoPad::SameUpper {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                if b < 0 {
                    return Err(format!(
                        "output_shape {} on spatial axis {i} needs padding before the result, \
                         which is unsupported",
                        shape[i]
                    ));
                }
                pads[i] = b as u64;
                if e < 0 {
                    output_padding[i] += e.unsigned_abs();
                } else {
                    pads[s + i] = e as u64;
                }
            }
            pads
        }
    };
    let op = Op::ConvTranspose {
        conv: ConvAttrs {
            strides: w.strides,
            pads,
            dilations: w.dilations,
            groups: groups(n)?,
        },
        output_padding,
    };
    Ok(vec![cx.emit1(op, &operands)?])
}

fn pool(cx: &mut Ctx<'_>, n: &Node<'_>, kind: PoolKind) -> Result<Vec<ValueId>, String> {
    if n.num_outputs() > 1 {
        return Err("the optional output Indices is not supported".into());
    }
    let x = input(cx, n, 0)?;
    let dims = spatial_dims(cx.ty(x), "input X")?;
    let w = window(n, &dims, None)?;
    let attrs = PoolAttrs {
        kind,
        kernel: w.kernel,
        strides: w.strides,
        pads: w.pads,
        dilations: w.dilations,
        ceil_mode: n.attr_i_or("ceil_mode", 0)? != 0,
        count_include_pad: n.attr_i_or("count_include_pad", 0)? != 0,
    };
    Ok(vec![cx.emit1(Op::Pool(attrs), &[x])?])
}

fn global_pool(cx: &mut Ctx<'_>, n: &Node<'_>, kind: ReduceKind) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let rank = cx.ty(x).rank();
    if rank < 3 {
        return Err(format!(
            "input X must have rank >= 3 ([N, C, D...]), got {}",
            cx.ty(x)
        ));
    }
    let op = Op::Reduce {
        kind,
        axes: (2..rank).collect(),
        keep_dims: true,
    };
    Ok(vec![cx.emit1(op, &[x])?])
}

/// `BatchNormalization`. Imported to train (`ImportOptions::keep_parameters`), a node in
/// training mode (what a `TrainingMode.TRAINING` export writes) imports like one in
/// inference mode: the `train` pass gives every `batch-norm` its training form and updates
/// its running statistics as state. Its running-statistics outputs are then accepted when
/// nothing reads them (torch's exports never do).
fn batch_norm(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    if n.attr_i_or("training_mode", 0)? != 0 && !cx.training {
        return Err("training_mode = 1 is not supported (inference only; import the model to train, e.g. with compile --train)".into());
    }
    if n.attr_i_or("spatial", 1)? == 0 {
        return Err("spatial = 0 (per-activation statistics) is not supported".into());
    }
    let extra: Vec<&str> = n.p.output.iter().skip(1).map(String::as_str).collect();
    if !extra.is_empty() && !cx.training {
        return Err(
            "the optional training outputs (running mean and variance) are not supported".into(),
        );
    }
    if let Some(name) = extra
        .iter()
        .find(|o| !o.is_empty() && cx.used.contains(**o))
    {
        return Err(format!(
            "output `{name}` (an updated running statistic) is read by the model; not supported (the train pass updates running statistics as state)"
        ));
    }
    let epsilon = f64::from(n.attr_f_or("epsilon", 1e-5)?);
    let x = input(cx, n, 0)?;
    let elem = cx.ty(x).elem;
    let mut operands = vec![x];
    for i in 1..5 {
        // Scale/bias and mean/var may have their own (float) types from opset 15.
        let v = input(cx, n, i)?;
        operands.push(cast_to(cx, v, elem)?);
    }
    let mut outs = vec![cx.emit1(Op::BatchNorm { epsilon }, &operands)?];
    // Unread running-statistics outputs: bound to the statistics read (no one uses them).
    outs.extend(operands[3..5].iter().take(extra.len()));
    Ok(outs)
}

fn layer_norm(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let epsilon = f64::from(n.attr_f_or("epsilon", 1e-5)?);
    let x = input(cx, n, 0)?;
    let axis = norm_axis(n.attr_i_or("axis", -1)?, cx.ty(x).rank())?;
    let elem = cx.ty(x).elem;
    // stash_type (default float) is the precision of the statistics: half-precision inputs
    // are normalized in f32 (or f64) and converted back.
    let stash = match n.attr_i_or("stash_type", 1)? {
        1 => ElemType::F32,
        11 => ElemType::F64,
        _ => elem,
    };
    let work = if matches!(elem, ElemType::F16 | ElemType::BF16) {
        stash
    } else {
        elem
    };
    let mut operands = vec![cast_to(cx, x, work)?];
    for i in 1..3 {
        if let Some(v) = opt_input(cx, n, i)? {
            operands.push(cast_to(cx, v, work)?);
        } else if i == 1 {
            return Err("input 1 (Scale) is required".into());
        }
    }
    let xw = operands[0];
    let y = cx.emit1(Op::LayerNorm { axis, epsilon }, &operands)?;
    let mut outs = vec![cast_to(cx, y, elem)?];
    if n.num_outputs() > 1 {
        // The optional statistics, in the working precision: Mean and 1/sqrt(var + eps),
        // both with the normalized axes kept as 1.
        let mean_op = Op::Reduce {
            kind: ReduceKind::Mean,
            axes: (axis..cx.ty(xw).rank()).collect(),
            keep_dims: true,
        };
        let mean = cx.emit1(mean_op.clone(), &[xw])?;
        let d = cx.emit1(Op::Binary(BinaryOp::Sub), &[xw, mean])?;
        let d2 = cx.emit1(Op::Binary(BinaryOp::Mul), &[d, d])?;
        let var = cx.emit1(mean_op, &[d2])?;
        let eps = scalar(cx, work, epsilon)?;
        let var = cx.emit1(Op::Binary(BinaryOp::Add), &[var, eps])?;
        let std = cx.emit1(Op::Unary(UnaryOp::Sqrt), &[var])?;
        outs.push(mean);
        outs.push(cx.emit1(Op::Unary(UnaryOp::Reciprocal), &[std])?);
    }
    Ok(outs)
}

/// Applies a per-axis op (`f(cx, x, axis)`) with the softmax family's axis rules: from
/// opset 13 the op works along `axis` (default -1); before, the input is viewed as 2-D
/// `[d0*...*d(axis-1), d(axis)*...*d(r-1)]` (default axis 1) and the op works along the
/// second axis.
fn along_axis(
    cx: &mut Ctx<'_>,
    n: &Node<'_>,
    f: fn(&mut Ctx<'_>, ValueId, usize) -> Result<ValueId, String>,
) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let ty = cx.ty(x).clone();
    let rank = ty.rank();
    if cx.opset >= 13 {
        let axis = norm_axis(n.attr_i_or("axis", -1)?, rank)?;
        return Ok(vec![f(cx, x, axis)?]);
    }
    let axis = norm_axis(n.attr_i_or("axis", 1)?, rank)?;
    if axis + 1 == rank {
        return Ok(vec![f(cx, x, axis)?]);
    }
    // Flatten the trailing axes into one (the leading ones stay, which is the same thing
    // for an op along the last axis) and restore the shape after.
    let mut inner = 1u64;
    for d in &ty.shape[axis..] {
        let d = d.as_static().ok_or_else(|| {
            format!("input {ty} has a symbolic extent at or after axis {axis}; bind it with --input-shape")
        })?;
        inner = inner
            .checked_mul(d)
            .ok_or("the input's element count overflows")?;
    }
    let mut flat = ty.shape[..axis].to_vec();
    flat.push(Dim::Static(inner));
    let x2 = reshape(cx, x, flat)?;
    let y = f(cx, x2, axis)?;
    Ok(vec![reshape(cx, y, ty.shape)?])
}

/// Hardmax along `axis`: 1 at the first maximum, 0 elsewhere.
fn hardmax(cx: &mut Ctx<'_>, x: ValueId, axis: usize) -> Result<ValueId, String> {
    let ty = cx.ty(x).clone();
    let extent = ty.shape[axis]
        .as_static()
        .ok_or_else(|| format!("input {ty} has a symbolic extent on axis {axis}"))?;
    let arg = cx.emit1(
        Op::ArgReduce {
            kind: ArgKind::Max,
            axis,
            keep_dims: true,
            select_last: false,
        },
        &[x],
    )?;
    let iota = super::iota(cx, extent, axis, ty.rank())?;
    let hot = cx.emit1(Op::Binary(BinaryOp::Equal), &[arg, iota])?;
    cast_to(cx, hot, ty.elem)
}

/// The working precision of a normalization with a `stash_type` attribute (default 1,
/// float): half-precision inputs are normalized in f32 (or f64) and converted back.
fn stash_elem(n: &Node<'_>, elem: ElemType) -> Result<ElemType, String> {
    let stash = match n.attr_i_or("stash_type", 1)? {
        1 => ElemType::F32,
        11 => ElemType::F64,
        _ => elem,
    };
    Ok(if matches!(elem, ElemType::F16 | ElemType::BF16) {
        stash
    } else {
        elem
    })
}

/// The mean of `x` over `axes`, kept as extent-1 axes.
fn mean_over(cx: &mut Ctx<'_>, x: ValueId, axes: Vec<usize>) -> Result<ValueId, String> {
    cx.emit1(
        Op::Reduce {
            kind: ReduceKind::Mean,
            axes,
            keep_dims: true,
        },
        &[x],
    )
}

/// RMSNormalization-23: `x / sqrt(mean(x^2 over axes axis..rank) + epsilon) * scale`
/// (axis default -1, epsilon 1e-5), in the `stash_type` precision.
fn rms_norm(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let epsilon = f64::from(n.attr_f_or("epsilon", 1e-5)?);
    let x = input(cx, n, 0)?;
    let scale = input(cx, n, 1)?;
    let rank = cx.ty(x).rank();
    let axis = norm_axis(n.attr_i_or("axis", -1)?, rank)?;
    let elem = cx.ty(x).elem;
    let work = stash_elem(n, elem)?;
    let xw = cast_to(cx, x, work)?;
    let x2 = bin(cx, BinaryOp::Mul, xw, xw)?;
    let ms = mean_over(cx, x2, (axis..rank).collect())?;
    let eps = scalar(cx, work, epsilon)?;
    let ms = bin(cx, BinaryOp::Add, ms, eps)?;
    let rms = un(cx, UnaryOp::Sqrt, ms)?;
    let y = bin(cx, BinaryOp::Div, xw, rms)?;
    let scale = cast_to(cx, scale, work)?;
    let y = bin(cx, BinaryOp::Mul, y, scale)?;
    Ok(vec![cast_to(cx, y, elem)?])
}

/// LpNormalization-1/22: `x / norm` along `axis` (default -1), with the L1 (`p` = 1) or L2
/// (`p` = 2, the default) norm; 0 where the norm is 0.
fn lp_norm(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let axis = norm_axis(n.attr_i_or("axis", -1)?, cx.ty(x).rank())?;
    let kind = match n.attr_i_or("p", 2)? {
        1 => ReduceKind::L1,
        2 => ReduceKind::L2,
        p => return Err(format!("attribute `p` must be 1 or 2, got {p}")),
    };
    let norm = cx.emit1(
        Op::Reduce {
            kind,
            axes: vec![axis],
            keep_dims: true,
        },
        &[x],
    )?;
    let t = cx.ty(x).elem;
    let zero = scalar(cx, t, 0.0)?;
    let is_zero = bin(cx, BinaryOp::Equal, norm, zero)?;
    let q = bin(cx, BinaryOp::Div, x, norm)?;
    Ok(vec![cx.emit1(Op::Select, &[is_zero, zero, q])?])
}

/// LpPool-11/18/22: `(sum over the window of |x|^p)^(1/p)` (p default 2), the sum taken as
/// an average pool counting the (zero) padding times the window size.
fn lp_pool(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let p = n.attr_i_or("p", 2)?;
    if p <= 0 {
        return Err(format!("attribute `p` must be positive, got {p}"));
    }
    let x = input(cx, n, 0)?;
    let t = cx.ty(x).elem;
    let dims = spatial_dims(cx.ty(x), "input X")?;
    let w = window(n, &dims, None)?;
    let count = w.kernel.iter().product::<u64>() as f64;
    let a = un(cx, UnaryOp::Abs, x)?;
    let pf = scalar(cx, t, p as f64)?;
    let ap = bin(cx, BinaryOp::Pow, a, pf)?;
    let attrs = PoolAttrs {
        kind: PoolKind::Avg,
        kernel: w.kernel,
        strides: w.strides,
        pads: w.pads,
        dilations: w.dilations,
        ceil_mode: n.attr_i_or("ceil_mode", 0)? != 0,
        count_include_pad: true,
    };
    let avg = cx.emit1(Op::Pool(attrs), &[ap])?;
    let c = scalar(cx, t, count)?;
    let sum = bin(cx, BinaryOp::Mul, avg, c)?;
    let inv = scalar(cx, t, 1.0 / p as f64)?;
    Ok(vec![bin(cx, BinaryOp::Pow, sum, inv)?])
}

/// `(x - mean) / sqrt(var + epsilon)` over `axes` (population variance).
fn standardize(
    cx: &mut Ctx<'_>,
    x: ValueId,
    axes: Vec<usize>,
    epsilon: f64,
) -> Result<ValueId, String> {
    let mean = mean_over(cx, x, axes.clone())?;
    let d = bin(cx, BinaryOp::Sub, x, mean)?;
    let d2 = bin(cx, BinaryOp::Mul, d, d)?;
    let var = mean_over(cx, d2, axes)?;
    let eps = scalar(cx, cx.ty(x).elem, epsilon)?;
    let var = bin(cx, BinaryOp::Add, var, eps)?;
    let std = un(cx, UnaryOp::Sqrt, var)?;
    bin(cx, BinaryOp::Div, d, std)
}

/// GroupNormalization-18/21 on `[N, C, D...]` with `num_groups` G: each group of C/G
/// channels is standardized over its channels and spatial positions (epsilon default
/// 1e-5), then scaled and shifted. Opset 18 has per-group scale and bias (`[G]`); opset 21
/// per-channel ones (`[C]`), and computes in the `stash_type` precision.
fn group_norm(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let epsilon = f64::from(n.attr_f_or("epsilon", 1e-5)?);
    let groups = n
        .attr_i("num_groups")?
        .ok_or("attribute `num_groups` is required")?;
    let x = input(cx, n, 0)?;
    let ty = cx.ty(x).clone();
    if ty.rank() < 2 {
        return Err(format!(
            "input X must have rank >= 2 ([N, C, ...]), got {ty}"
        ));
    }
    let c = ty.shape[1]
        .as_static()
        .ok_or_else(|| format!("input X {ty} has a symbolic channel extent"))?;
    let g = u64::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| format!("num_groups {groups} does not divide the {c} channels"))?;
    let work = if cx.opset >= 21 {
        stash_elem(n, ty.elem)?
    } else {
        ty.elem
    };
    let xw = cast_to(cx, x, work)?;
    // [N, G, C/G, D...], standardized over every axis after G.
    let mut grouped = vec![ty.shape[0].clone(), Dim::Static(g), Dim::Static(c / g)];
    grouped.extend(ty.shape[2..].iter().cloned());
    let rank = grouped.len();
    let xg = reshape(cx, xw, grouped)?;
    let y = standardize(cx, xg, (2..rank).collect(), epsilon)?;
    let scale = input(cx, n, 1)?;
    let bias = input(cx, n, 2)?;
    let per_group = cx.opset < 21;
    // Scale and bias as [G, 1, 1...] (per group) or [G, C/G, 1...] (per channel).
    let mut sb_shape = vec![
        Dim::Static(g),
        Dim::Static(if per_group { 1 } else { c / g }),
    ];
    sb_shape.extend(std::iter::repeat_n(Dim::Static(1), rank - 3));
    let scale = cast_to(cx, scale, work)?;
    let scale = reshape(cx, scale, sb_shape.clone())?;
    let bias = cast_to(cx, bias, work)?;
    let bias = reshape(cx, bias, sb_shape)?;
    let y = bin(cx, BinaryOp::Mul, y, scale)?;
    let y = bin(cx, BinaryOp::Add, y, bias)?;
    let y = reshape(cx, y, ty.shape.clone())?;
    Ok(vec![cast_to(cx, y, ty.elem)?])
}

/// MeanVarianceNormalization-13: `(x - mean) / (sqrt(var) + 1e-9)` over `axes` (default
/// `[0, 2, 3]`), the population variance, as the spec's function body computes it.
fn mvn(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let axes = n.attr_ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
    let axes = norm_axes(&axes, cx.ty(x).rank())?;
    let mean = mean_over(cx, x, axes.clone())?;
    let d = bin(cx, BinaryOp::Sub, x, mean)?;
    let d2 = bin(cx, BinaryOp::Mul, d, d)?;
    let var = mean_over(cx, d2, axes)?;
    let std = un(cx, UnaryOp::Sqrt, var)?;
    let eps = scalar(cx, cx.ty(x).elem, 1e-9)?;
    let std = bin(cx, BinaryOp::Add, std, eps)?;
    Ok(vec![bin(cx, BinaryOp::Div, d, std)?])
}
