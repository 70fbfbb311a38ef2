//! Neural-network ops: normalizations (`layer-norm`, `batch-norm`, `instance-norm`, `lrn`)
//! and pooling.

use tessera_ir::{BinaryOp, Op, TensorType, UnaryOp};

use super::body::{Body, In, LResult, Val, affine_map, broadcast_map, dims, err, identity_map};
use super::elementwise;
use super::linalg::acc_type;
use super::reduce::{dropped_map, reduce_with};

/// Lowers a normalization or pooling op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::LayerNorm { axis, epsilon } => Ok(vec![layer_norm(b, args, *axis, *epsilon, out)?]),
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
    // Centered values, then their mean square.
    let its = vec!["parallel"; rank];
    let cty = x.ty.with_elem(acc);
    let centered = b.generic(
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
        &[(cty.clone(), identity_map(rank), None)],
        &its,
        |b, a| {
            let v = elementwise::cast(b, e, acc, &a[0]);
            let nn = b.scalar(acc, n as f64);
            let mean = elementwise::binary(b, &BinaryOp::Div, acc, &a[1], &nn)?;
            Ok(vec![elementwise::binary(
                b,
                &BinaryOp::Sub,
                acc,
                &v,
                &mean,
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
    let od = dims(out)?;
    let mut ins = vec![
        In {
            val: &centered,
            map: identity_map(rank),
        },
        In {
            val: &sq,
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
            let nn = b.scalar(acc, n as f64);
            let var = elementwise::binary(b, &BinaryOp::Div, acc, &a[1], &nn)?;
            let ep = b.scalar(acc, eps);
            let ve = elementwise::binary(b, &BinaryOp::Add, acc, &var, &ep)?;
            let sd = elementwise::unary(b, &UnaryOp::Sqrt, acc, &ve)?;
            let norm = elementwise::binary(b, &BinaryOp::Div, acc, &a[0], &sd)?;
            let s = elementwise::cast(b, pe[0], acc, &a[2]);
            let mut v = elementwise::binary(b, &BinaryOp::Mul, acc, &norm, &s)?;
            if has_bias {
                let bb = elementwise::cast(b, pe[1], acc, &a[3]);
                v = elementwise::binary(b, &BinaryOp::Add, acc, &v, &bb)?;
            }
            Ok(vec![elementwise::cast(b, acc, e, &v)])
        },
    )?;
    let _ = affine_map;
    Ok(r[0].clone())
}
