//! Neural-network ops: normalizations (`layer-norm`, `batch-norm`, `instance-norm`, `lrn`)
//! and pooling.
//!
//! As in the interpreter, 16-bit floats compute in f32; instance norm's statistics, LRN's
//! sums of squares and average pooling's sums accumulate in f64. Pooling and LRN read a
//! padded copy of the input (padding never wins a max; average pooling divides by the
//! per-axis counts of the taps it counts, a constant table per axis) in a generic whose
//! window loops get their extents from a dummy "window" operand, as `linalg.pooling_*` do.
//! A float max pooling of at most 64 taps is instead one generic of parallel loops over the
//! result, each tap's window of the padded input an operand (a strided slice), the maximum
//! taken from the first window on: the form of a depthwise convolution, which the CPU
//! schedule vectorizes along rows at stride 1 (`schedule::max_taps`).

use tessera_ir::{BinaryOp, ElemType, Op, PoolAttrs, PoolKind, TensorType, UnaryOp};

use super::body::{Body, In, LResult, Val, affine_map, broadcast_map, dims, err, identity_map};
use super::elementwise;
use super::linalg::{
    DEPTHWISE_TAPS, Geom, SpreadAxis, acc_type, narrow, pad_for_windows, spread, taps,
    window_source, windows,
};
use super::reduce::{bounds, dropped_map, reduce_with};

/// Lowers a normalization or pooling op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::LayerNorm { axis, epsilon } => Ok(vec![layer_norm(b, args, *axis, *epsilon, out)?]),
        Op::BatchNorm { epsilon } => Ok(vec![batch_norm(b, args, *epsilon, out)?]),
        Op::InstanceNorm { epsilon } => Ok(vec![instance_norm(b, args, *epsilon, out)?]),
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => Ok(vec![lrn(b, &args[0], *size, *alpha, *beta, *bias, out)?]),
        Op::Pool(attrs) => Ok(vec![pool(b, &args[0], attrs, out)?]),
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// `(x - mean) / sqrt(var + eps) * scale + bias` over the axes from `axis` on.
fn layer_norm(
    b: &mut Body,
    args: &[Val],
    axis: usize,
    eps: f64,
    out: &TensorType,
) -> LResult<String> {
    if args.len() < 2 {
        return err("layer norm needs a scale operand");
    }
    let x = &args[0];
    let e = x.ty.elem;
    let acc = acc_type(e);
    let rank = x.ty.rank();
    let xd = dims(&x.ty)?;
    let axes: Vec<usize> = (axis..rank).collect();
    let n: u64 = axes.iter().map(|&a| xd[a]).product();
    let sum = reduce_with(b, x, &axes, acc, 0.0, |b, p, q| {
        elementwise::binary(b, &BinaryOp::Add, acc, p, q)
    })?;
    // The mean once per row, then the centered values and their mean square.
    let mean = b.map(&sum, |b, s| {
        let nn = b.scalar(acc, n as f64);
        elementwise::binary(b, &BinaryOp::Div, acc, s, &nn)
    })?;
    let its = vec!["parallel"; rank];
    let cty = x.ty.with_elem(acc);
    let centered = b.generic(
        &[
            In {
                val: x,
                map: identity_map(rank),
            },
            In {
                val: &mean,
                map: dropped_map(rank, &axes),
            },
        ],
        &[(cty.clone(), identity_map(rank), None)],
        &its,
        |b, a| {
            let v = elementwise::cast(b, e, acc, &a[0]);
            Ok(vec![elementwise::binary(
                b,
                &BinaryOp::Sub,
                acc,
                &v,
                &a[1],
            )?])
        },
    )?;
    let centered = Val {
        name: centered[0].clone(),
        ty: cty,
    };
    let sq = reduce_with(b, &centered, &axes, acc, 0.0, |b, p, q| {
        let s = elementwise::binary(b, &BinaryOp::Mul, acc, q, q)?;
        elementwise::binary(b, &BinaryOp::Add, acc, p, &s)
    })?;
    // `1 / sqrt(var + eps)` once per row: each element is then multiplied by it (a square
    // root and two divisions per element took a tenth of BERT tiny's time).
    let inv = b.map(&sq, |b, s| {
        let nn = b.scalar(acc, n as f64);
        let var = elementwise::binary(b, &BinaryOp::Div, acc, s, &nn)?;
        let sd = std_dev(b, acc, &var, eps)?;
        let one = b.scalar(acc, 1.0);
        elementwise::binary(b, &BinaryOp::Div, acc, &one, &sd)
    })?;
    let od = dims(out)?;
    let mut ins = vec![
        In {
            val: &centered,
            map: identity_map(rank),
        },
        In {
            val: &inv,
            map: dropped_map(rank, &axes),
        },
    ];
    // scale and bias broadcast to the normalized shape (trailing axes).
    for p in &args[1..] {
        let pd = dims(&p.ty)?;
        let m = broadcast_map(&pd, &od);
        ins.push(In { val: p, map: m });
    }
    let has_bias = args.len() > 2;
    let pe: Vec<_> = args[1..].iter().map(|a| a.ty.elem).collect();
    let r = b.generic(
        &ins,
        &[(out.clone(), identity_map(rank), None)],
        &its,
        |b, a| {
            let norm = elementwise::binary(b, &BinaryOp::Mul, acc, &a[0], &a[1])?;
            let s = elementwise::cast(b, pe[0], acc, &a[2]);
            let mut v = elementwise::binary(b, &BinaryOp::Mul, acc, &norm, &s)?;
            if has_bias {
                let bb = elementwise::cast(b, pe[1], acc, &a[3]);
                v = elementwise::binary(b, &BinaryOp::Add, acc, &v, &bb)?;
            }
            Ok(vec![elementwise::cast(b, acc, e, &v)])
        },
    )?;
    Ok(r[0].clone())
}

/// `sqrt(var + eps)` in type `t`, inside a generic's body.
fn std_dev(b: &mut Body, t: ElemType, var: &str, eps: f64) -> LResult<String> {
    let ep = b.scalar(t, eps);
    let ve = elementwise::binary(b, &BinaryOp::Add, t, var, &ep)?;
    elementwise::unary(b, &UnaryOp::Sqrt, t, &ve)
}

/// The map reading a per-channel `[C]` operand from `rank` loops.
fn channel_map(rank: usize) -> String {
    affine_map(rank, &["d1".to_string()])
}

/// `(x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]`, in f32 for 16-bit floats.
fn batch_norm(b: &mut Body, args: &[Val], eps: f64, out: &TensorType) -> LResult<String> {
    let x = &args[0];
    let rank = x.ty.rank();
    if rank < 2 || args.len() != 5 {
        return err("batch-norm needs x of shape [N, C, ...] and four [C] operands");
    }
    let e = x.ty.elem;
    let f = acc_type(e);
    let mut ins = vec![In {
        val: x,
        map: identity_map(rank),
    }];
    for p in &args[1..] {
        ins.push(In {
            val: p,
            map: channel_map(rank),
        });
    }
    let pe: Vec<ElemType> = args.iter().map(|a| a.ty.elem).collect();
    let r = b.generic(
        &ins,
        &[(out.clone(), identity_map(rank), None)],
        &vec!["parallel"; rank],
        |b, a| {
            let v: Vec<String> = a[..5]
                .iter()
                .zip(&pe)
                .map(|(s, &t)| elementwise::cast(b, t, f, s))
                .collect();
            let (xv, s, bb, m, var) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
            let sd = std_dev(b, f, var, eps)?;
            let c = elementwise::binary(b, &BinaryOp::Sub, f, xv, m)?;
            let n = elementwise::binary(b, &BinaryOp::Div, f, &c, &sd)?;
            let n = elementwise::binary(b, &BinaryOp::Mul, f, &n, s)?;
            let n = elementwise::binary(b, &BinaryOp::Add, f, &n, bb)?;
            Ok(vec![elementwise::cast(b, f, e, &n)])
        },
    )?;
    Ok(r[0].clone())
}

/// Per (n, c): mean and population variance over the spatial axes (f64, two passes), then
/// `(x - mean) / sqrt(var + eps) * scale[c] + bias[c]`.
fn instance_norm(b: &mut Body, args: &[Val], eps: f64, out: &TensorType) -> LResult<String> {
    let x = &args[0];
    let rank = x.ty.rank();
    if rank < 3 || args.len() != 3 {
        return err("instance-norm needs x of shape [N, C, D...], scale and bias");
    }
    let e = x.ty.elem;
    let f = acc_type(e);
    let w = ElemType::F64;
    let xd = dims(&x.ty)?;
    let axes: Vec<usize> = (2..rank).collect();
    let n: u64 = xd[2..].iter().product();
    let sum = reduce_with(b, x, &axes, w, 0.0, |b, p, q| {
        elementwise::binary(b, &BinaryOp::Add, w, p, q)
    })?;
    // Sum of squared deviations.
    let sq_ty = sum.ty.clone();
    let init = b.filled(&sq_ty, 0.0)?;
    let its: Vec<&str> = (0..rank)
        .map(|i| if i < 2 { "parallel" } else { "reduction" })
        .collect();
    let sq = b.generic(
        &[
            In {
                val: x,
                map: identity_map(rank),
            },
            In {
                val: &sum,
                map: dropped_map(rank, &axes),
            },
        ],
        &[(sq_ty.clone(), dropped_map(rank, &axes), Some(init))],
        &its,
        |b, a| {
            let v = elementwise::cast(b, e, w, &a[0]);
            let nn = b.scalar(w, n as f64);
            let mean = elementwise::binary(b, &BinaryOp::Div, w, &a[1], &nn)?;
            let c = elementwise::binary(b, &BinaryOp::Sub, w, &v, &mean)?;
            let c2 = elementwise::binary(b, &BinaryOp::Mul, w, &c, &c)?;
            Ok(vec![elementwise::binary(b, &BinaryOp::Add, w, &a[2], &c2)?])
        },
    )?;
    let sq = Val {
        name: sq[0].clone(),
        ty: sq_ty,
    };
    let pe: Vec<ElemType> = args.iter().map(|a| a.ty.elem).collect();
    let r = b.generic(
        &[
            In {
                val: x,
                map: identity_map(rank),
            },
            In {
                val: &sum,
                map: dropped_map(rank, &axes),
            },
            In {
                val: &sq,
                map: dropped_map(rank, &axes),
            },
            In {
                val: &args[1],
                map: channel_map(rank),
            },
            In {
                val: &args[2],
                map: channel_map(rank),
            },
        ],
        &[(out.clone(), identity_map(rank), None)],
        &vec!["parallel"; rank],
        |b, a| {
            let nn = b.scalar(w, n as f64);
            let mean = elementwise::binary(b, &BinaryOp::Div, w, &a[1], &nn)?;
            let var = elementwise::binary(b, &BinaryOp::Div, w, &a[2], &nn)?;
            let sd = std_dev(b, w, &var, eps)?;
            let mean = elementwise::cast(b, w, f, &mean);
            let sd = elementwise::cast(b, w, f, &sd);
            let xv = elementwise::cast(b, e, f, &a[0]);
            let s = elementwise::cast(b, pe[1], f, &a[3]);
            let bb = elementwise::cast(b, pe[2], f, &a[4]);
            let c = elementwise::binary(b, &BinaryOp::Sub, f, &xv, &mean)?;
            let v = elementwise::binary(b, &BinaryOp::Div, f, &c, &sd)?;
            let v = elementwise::binary(b, &BinaryOp::Mul, f, &v, &s)?;
            let v = elementwise::binary(b, &BinaryOp::Add, f, &v, &bb)?;
            Ok(vec![elementwise::cast(b, f, e, &v)])
        },
    )?;
    Ok(r[0].clone())
}

/// A dummy operand of shape `d` that gives a generic's window loops their extents.
fn window(b: &mut Body, d: &[u64]) -> LResult<Val> {
    let ty = TensorType::fixed(ElemType::I8, d);
    let name = b.assign(format!(
        "arith.constant dense<0> : {}",
        super::body::tensor_ty(&ty)?
    ));
    Ok(Val { name, ty })
}

/// `x / (bias + alpha/size * sum of squares over the channel window)^beta`, in f64.
fn lrn(
    b: &mut Body,
    x: &Val,
    size: u64,
    alpha: f64,
    beta: f64,
    bias: f64,
    out: &TensorType,
) -> LResult<String> {
    let rank = x.ty.rank();
    if rank < 2 || size == 0 {
        return err("lrn needs x of shape [N, C, ...] and a positive size");
    }
    let e = x.ty.elem;
    let w = ElemType::F64;
    let xd = dims(&x.ty)?;
    let before = (size - 1) / 2;
    // Zero channels around the input so that every window is in range.
    let mut pd = xd.clone();
    pd[1] = xd[1] + size - 1;
    let xp = spread(
        b,
        x,
        &TensorType::fixed(e, &pd),
        &[SpreadAxis {
            axis: 1,
            off: before as i64,
            stride: 1,
        }],
        0.0,
    )?;
    let win = window(b, &[size])?;
    let nl = rank + 1;
    let mut x_exprs: Vec<String> = (0..rank).map(|i| format!("d{i}")).collect();
    x_exprs[1] = format!("d1 + d{rank}");
    let o_exprs: Vec<String> = (0..rank).map(|i| format!("d{i}")).collect();
    let sq_ty = x.ty.with_elem(w);
    let init = b.filled(&sq_ty, 0.0)?;
    let mut its = vec!["parallel"; rank];
    its.push("reduction");
    let sq = b.generic(
        &[
            In {
                val: &xp,
                map: affine_map(nl, &x_exprs),
            },
            In {
                val: &win,
                map: affine_map(nl, &[format!("d{rank}")]),
            },
        ],
        &[(sq_ty.clone(), affine_map(nl, &o_exprs), Some(init))],
        &its,
        |b, a| {
            let v = elementwise::cast(b, e, w, &a[0]);
            let v2 = elementwise::binary(b, &BinaryOp::Mul, w, &v, &v)?;
            Ok(vec![elementwise::binary(b, &BinaryOp::Add, w, &a[2], &v2)?])
        },
    )?;
    let sq = Val {
        name: sq[0].clone(),
        ty: sq_ty,
    };
    let scale = alpha / size as f64;
    let r = b.elementwise(&[x, &sq], out, |b, s| {
        let sc = b.scalar(w, scale);
        let bi = b.scalar(w, bias);
        let be = b.scalar(w, beta);
        let t = elementwise::binary(b, &BinaryOp::Mul, w, &sc, &s[1])?;
        let t = elementwise::binary(b, &BinaryOp::Add, w, &bi, &t)?;
        let d = elementwise::binary(b, &BinaryOp::Pow, w, &t, &be)?;
        let v = elementwise::cast(b, e, w, &s[0]);
        let q = elementwise::binary(b, &BinaryOp::Div, w, &v, &d)?;
        Ok(narrow(b, w, e, &q))
    })?;
    Ok(r)
}

/// Max or average pooling, see the module doc.
fn pool(b: &mut Body, x: &Val, attrs: &PoolAttrs, out: &TensorType) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let od = dims(out)?;
    let rank = xd.len();
    if rank < 3 || attrs.kernel.len() != rank - 2 {
        return err("pooling needs x of shape [N, C, D...] and a kernel per spatial axis");
    }
    let s = rank - 2;
    let k = attrs.kernel.clone();
    let g = Geom::new(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let (strides, dils, pads) = (&g.strides, &g.dils, &g.pads);
    let e = x.ty.elem;
    let max = attrs.kind == PoolKind::Max;
    if !max && !e.is_float() {
        return err("average pooling needs a float operand");
    }
    let fill = if max { bounds(e).0 } else { 0.0 };
    let count = k.iter().try_fold(1u64, |n, &e| n.checked_mul(e));
    if max
        && e.is_float()
        && count.is_some_and(|n| (1..=DEPTHWISE_TAPS).contains(&n))
        && !od.contains(&0)
    {
        // Each tap's window an operand of its own and the maximum taken from the first, in
        // parallel loops over the result only (as a depthwise convolution: the schedule
        // vectorizes it along the rows at stride 1, and the threads run its channels).
        let src = window_source(b, x, &k, &od[2..], &g, fill)?;
        let wins = windows(b, &src, &g, &taps(&k), &od)?;
        let ins: Vec<&Val> = wins.iter().collect();
        return b.elementwise(&ins, out, |b, a| {
            let mut m = a[0].clone();
            for v in &a[1..] {
                m = elementwise::binary(b, &BinaryOp::Max, e, &m, v)?;
            }
            Ok(m)
        });
    }
    let xp = pad_for_windows(b, x, &k, &od[2..], &g, fill)?;
    let win = window(b, &k)?;
    // Loops: n, c, o..., k....
    let nl = rank + s;
    let mut x_exprs = vec!["d0".to_string(), "d1".to_string()];
    x_exprs.extend((0..s).map(|j| g.tap_expr(j, 2 + j, rank + j)));
    let w_exprs: Vec<String> = (0..s).map(|j| format!("d{}", rank + j)).collect();
    let o_exprs: Vec<String> = (0..rank).map(|i| format!("d{i}")).collect();
    let mut its = vec!["parallel"; rank];
    its.extend(vec!["reduction"; s]);
    let acc = if max { e } else { ElemType::F64 };
    let acc_ty = out.with_elem(acc);
    let init = b.filled(&acc_ty, fill)?;
    let r = b.generic(
        &[
            In {
                val: &xp,
                map: affine_map(nl, &x_exprs),
            },
            In {
                val: &win,
                map: affine_map(nl, &w_exprs),
            },
        ],
        &[(acc_ty.clone(), affine_map(nl, &o_exprs), Some(init))],
        &its,
        |b, a| {
            if max {
                Ok(vec![elementwise::binary(
                    b,
                    &BinaryOp::Max,
                    e,
                    &a[2],
                    &a[0],
                )?])
            } else {
                let v = elementwise::cast(b, e, acc, &a[0]);
                Ok(vec![elementwise::binary(
                    b,
                    &BinaryOp::Add,
                    acc,
                    &a[2],
                    &v,
                )?])
            }
        },
    )?;
    if max {
        return Ok(r[0].clone());
    }
    let sum = Val {
        name: r[0].clone(),
        ty: acc_ty,
    };
    // The divisor: per axis, the number of counted taps of each output position.
    let mut tables = Vec::new();
    for j in 0..s {
        let (lo, hi) = if attrs.count_include_pad {
            (-(pads[j] as i128), (xd[2 + j] + pads[s + j]) as i128)
        } else {
            (0, xd[2 + j] as i128)
        };
        let counts: Vec<f64> = (0..od[2 + j])
            .map(|o| {
                (0..k[j])
                    .filter(|&t| {
                        let i = (o * strides[j] + t * dils[j]) as i128 - pads[j] as i128;
                        i >= lo && i < hi
                    })
                    .count() as f64
            })
            .collect();
        let ty = TensorType::fixed(ElemType::F64, &[od[2 + j]]);
        let bytes: Vec<u8> = counts.iter().flat_map(|c| c.to_le_bytes()).collect();
        let lit = super::dense_literal(&ty, &bytes)?;
        let name = b.assign(format!(
            "arith.constant {lit} : {}",
            super::body::tensor_ty(&ty)?
        ));
        tables.push(Val { name, ty });
    }
    let mut ins = vec![In {
        val: &sum,
        map: identity_map(rank),
    }];
    for (j, t) in tables.iter().enumerate() {
        ins.push(In {
            val: t,
            map: affine_map(rank, &[format!("d{}", 2 + j)]),
        });
    }
    let r = b.generic(
        &ins,
        &[(out.clone(), identity_map(rank), None)],
        &vec!["parallel"; rank],
        |b, a| {
            let mut c = a[1].clone();
            for t in &a[2..=s] {
                c = elementwise::binary(b, &BinaryOp::Mul, acc, &c, t)?;
            }
            let q = elementwise::binary(b, &BinaryOp::Div, acc, &a[0], &c)?;
            Ok(vec![narrow(b, acc, e, &q)])
        },
    )?;
    Ok(r[0].clone())
}
