//! Reductions: `reduce` (every kind), `softmax`, `log-softmax`; `arg-reduce`, `cum-sum` and
//! `top-k`.
//!
//! A reduction is a `linalg.generic` with `reduction` loops over the reduced axes into a
//! result without them (16-bit floats accumulate in f32); `keep_dims` reshapes afterwards.

use tessera_ir::{BinaryOp, ElemType, Op, ReduceKind, TensorType};

use super::body::{Body, In, LResult, Val, affine_map, dims, err, identity_map};
use super::elementwise;
use super::linalg::acc_type;
use super::shape::reshape;

/// Lowers a reduction-like op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::Reduce {
            kind,
            axes,
            keep_dims: _,
        } => Ok(vec![reduce_op(b, &args[0], *kind, axes, out)?]),
        Op::Softmax { axis } => Ok(vec![softmax(b, &args[0], *axis, false)?]),
        Op::LogSoftmax { axis } => Ok(vec![softmax(b, &args[0], *axis, true)?]),
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// The type of `x` without `axes`.
pub fn reduced_type(x: &TensorType, axes: &[usize], elem: ElemType) -> LResult<TensorType> {
    let d = dims(x)?;
    let keep: Vec<u64> = d
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &v)| v)
        .collect();
    Ok(TensorType::fixed(elem, &keep))
}

/// The map reading a value reduced over `axes` (those axes dropped) from `rank` loops.
pub fn dropped_map(rank: usize, axes: &[usize]) -> String {
    let e: Vec<String> = (0..rank)
        .filter(|i| !axes.contains(i))
        .map(|i| format!("d{i}"))
        .collect();
    affine_map(rank, &e)
}

/// Reduces `x` over `axes` (all if empty) into a tensor of element type `acc` without
/// them: the accumulator starts at `init`; `step(b, acc, x)` folds one element.
pub fn reduce_with(
    b: &mut Body,
    x: &Val,
    axes: &[usize],
    acc: ElemType,
    init: f64,
    step: impl FnOnce(&mut Body, &str, &str) -> LResult<String>,
) -> LResult<Val> {
    let rank = x.ty.rank();
    let axes: Vec<usize> = if axes.is_empty() {
        (0..rank).collect()
    } else {
        axes.to_vec()
    };
    let rt = reduced_type(&x.ty, &axes, acc)?;
    let init_v = b.filled(&rt, init)?;
    let its: Vec<&str> = (0..rank)
        .map(|i| {
            if axes.contains(&i) {
                "reduction"
            } else {
                "parallel"
            }
        })
        .collect();
    let xe = x.ty.elem;
    let r = b.generic(
        &[In {
            val: x,
            map: identity_map(rank),
        }],
        &[(rt.clone(), dropped_map(rank, &axes), Some(init_v))],
        &its,
        |b, a| {
            let v = elementwise::cast(b, xe, acc, &a[0]);
            Ok(vec![step(b, &a[1], &v)?])
        },
    )?;
    Ok(Val {
        name: r[0].clone(),
        ty: rt,
    })
}

fn reduce_op(
    b: &mut Body,
    x: &Val,
    kind: ReduceKind,
    axes: &[usize],
    out: &TensorType,
) -> LResult<String> {
    let e = x.ty.elem;
    let acc = acc_type(e);
    let all: Vec<usize> = if axes.is_empty() {
        (0..x.ty.rank()).collect()
    } else {
        axes.to_vec()
    };
    let d = dims(&x.ty)?;
    let count: u64 = all.iter().map(|&a| d[a]).product();
    let add = |b: &mut Body, p: &str, q: &str| elementwise::binary(b, &BinaryOp::Add, acc, p, q);
    let (lo, hi) = bounds(acc);
    let red = match kind {
        ReduceKind::Sum | ReduceKind::Mean => reduce_with(b, x, &all, acc, 0.0, add)?,
        ReduceKind::Prod => reduce_with(b, x, &all, acc, 1.0, |b, p, q| {
            elementwise::binary(b, &BinaryOp::Mul, acc, p, q)
        })?,
        ReduceKind::Max => reduce_with(b, x, &all, acc, lo, |b, p, q| {
            elementwise::binary(b, &BinaryOp::Max, acc, p, q)
        })?,
        ReduceKind::Min => reduce_with(b, x, &all, acc, hi, |b, p, q| {
            elementwise::binary(b, &BinaryOp::Min, acc, p, q)
        })?,
        ReduceKind::L1 => reduce_with(b, x, &all, acc, 0.0, |b, p, q| {
            let a = elementwise::unary(b, &tessera_ir::UnaryOp::Abs, acc, q)?;
            add(b, p, &a)
        })?,
        ReduceKind::L2 | ReduceKind::SumSquare => reduce_with(b, x, &all, acc, 0.0, |b, p, q| {
            let s = elementwise::binary(b, &BinaryOp::Mul, acc, q, q)?;
            add(b, p, &s)
        })?,
        ReduceKind::LogSumExp => {
            if !acc.is_float() {
                return err("log-sum-exp needs a float operand");
            }
            reduce_with(b, x, &all, acc, 0.0, |b, p, q| {
                let ex = elementwise::unary(b, &tessera_ir::UnaryOp::Exp, acc, q)?;
                add(b, p, &ex)
            })?
        }
    };
    let fin_ty = red.ty.with_elem(e);
    let fin = b.elementwise(&[&red], &fin_ty, |b, s| {
        let v = match kind {
            ReduceKind::Mean => {
                let n = b.scalar(acc, count as f64);
                elementwise::binary(b, &BinaryOp::Div, acc, &s[0], &n)?
            }
            ReduceKind::L2 => {
                if acc.is_float() {
                    elementwise::unary(b, &tessera_ir::UnaryOp::Sqrt, acc, &s[0])?
                } else {
                    let f = elementwise::cast(b, acc, ElemType::F64, &s[0]);
                    let r = elementwise::unary(b, &tessera_ir::UnaryOp::Sqrt, ElemType::F64, &f)?;
                    elementwise::cast(b, ElemType::F64, acc, &r)
                }
            }
            ReduceKind::LogSumExp => elementwise::unary(b, &tessera_ir::UnaryOp::Log, acc, &s[0])?,
            _ => s[0].clone(),
        };
        Ok(elementwise::cast(b, acc, e, &v))
    })?;
    let fin = Val {
        name: fin,
        ty: fin_ty,
    };
    if dims(&fin.ty)? == dims(out)? {
        Ok(fin.name)
    } else {
        reshape(b, &fin, out)
    }
}

/// The lowest and highest value of an accumulator type (infinities for floats).
pub fn bounds(e: ElemType) -> (f64, f64) {
    match e {
        ElemType::U8 => (0.0, 255.0),
        ElemType::I8 => (-128.0, 127.0),
        ElemType::I16 => (-32768.0, 32767.0),
        ElemType::I32 => (i32::MIN as f64, i32::MAX as f64),
        ElemType::I64 => (i64::MIN as f64, i64::MAX as f64),
        ElemType::Bool => (0.0, 1.0),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    }
}

/// Softmax (or log-softmax) along `axis`, numerically stable.
pub fn softmax(b: &mut Body, x: &Val, axis: usize, log: bool) -> LResult<String> {
    let e = x.ty.elem;
    let acc = acc_type(e);
    let rank = x.ty.rank();
    let m = reduce_with(b, x, &[axis], acc, f64::NEG_INFINITY, |b, p, q| {
        elementwise::binary(b, &BinaryOp::Max, acc, p, q)
    })?;
    let shifted_ty = x.ty.with_elem(acc);
    let its = vec!["parallel"; rank];
    let sh = b.generic(
        &[
            In {
                val: x,
                map: identity_map(rank),
            },
            In {
                val: &m,
                map: dropped_map(rank, &[axis]),
            },
        ],
        &[(shifted_ty.clone(), identity_map(rank), None)],
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
    let sh = Val {
        name: sh[0].clone(),
        ty: shifted_ty.clone(),
    };
    let s = reduce_with(b, &sh, &[axis], acc, 0.0, |b, p, q| {
        let ex = elementwise::unary(b, &tessera_ir::UnaryOp::Exp, acc, q)?;
        elementwise::binary(b, &BinaryOp::Add, acc, p, &ex)
    })?;
    let r = b.generic(
        &[
            In {
                val: &sh,
                map: identity_map(rank),
            },
            In {
                val: &s,
                map: dropped_map(rank, &[axis]),
            },
        ],
        &[(x.ty.clone(), identity_map(rank), None)],
        &its,
        |b, a| {
            let v = if log {
                let l = elementwise::unary(b, &tessera_ir::UnaryOp::Log, acc, &a[1])?;
                elementwise::binary(b, &BinaryOp::Sub, acc, &a[0], &l)?
            } else {
                let ex = elementwise::unary(b, &tessera_ir::UnaryOp::Exp, acc, &a[0])?;
                elementwise::binary(b, &BinaryOp::Div, acc, &ex, &a[1])?
            };
            Ok(vec![elementwise::cast(b, acc, e, &v)])
        },
    )?;
    Ok(r[0].clone())
}
