//! Reductions: `reduce` (every kind), `softmax`, `log-softmax`, `arg-reduce` (a generic with
//! two outputs: best value and its index), `cum-sum` (a loop over the axis carrying the
//! running sum) and `top-k` (selection: a loop over the `k` slots, one reduction each).
//!
//! A reduction is a `linalg.generic` with `reduction` loops over the reduced axes into a
//! result without them (16-bit floats accumulate in f32); `keep_dims` reshapes afterwards.

use tessera_ir::{ArgKind, BinaryOp, ElemType, Op, ReduceKind, TensorType};

use super::body::{Body, In, LResult, Val, affine_map, dims, elem, err, identity_map, tensor_ty};
use super::elementwise;
use super::index::for_loop;
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
        Op::ArgReduce {
            kind,
            axis,
            keep_dims: _,
            select_last,
        } => Ok(vec![arg_reduce(
            b,
            &args[0],
            *kind,
            *axis,
            *select_last,
            out,
        )?]),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => Ok(vec![cumsum(b, &args[0], *axis, *exclusive, *reverse, out)?]),
        Op::TopK { k, axis, largest } => top_k(b, &args[0], *k, *axis, *largest, results),
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// `x != x` (false for integers).
fn nan_test(b: &mut Body, e: ElemType, x: &str) -> Option<String> {
    e.is_float()
        .then(|| b.assign(format!("arith.cmpf uno, {x}, {x} : {}", elem(e))))
}

/// The index along `axis` inside a generic, as i64.
fn loop_index_i64(b: &mut Body, axis: usize) -> String {
    let i = b.assign(format!("linalg.index {axis} : index"));
    b.assign(format!("arith.index_cast {i} : index to i64"))
}

/// Index of the max or min along `axis` (as the interpreter: a running best starting at
/// index 0 that a later element replaces when strictly better, or equal with
/// `select_last`; NaN beats every number, and a NaN best is replaced only by a later NaN
/// with `select_last`).
fn arg_reduce(
    b: &mut Body,
    x: &Val,
    kind: ArgKind,
    axis: usize,
    last: bool,
    out: &TensorType,
) -> LResult<String> {
    let e = x.ty.elem;
    let rank = x.ty.rank();
    if dims(&x.ty)?[axis] == 0 {
        return err(format!("arg-reduce over the empty axis {axis}"));
    }
    let vt = reduced_type(&x.ty, &[axis], e)?;
    let it = reduced_type(&x.ty, &[axis], ElemType::I64)?;
    let v0 = b.index_generic(&vt, |b, o| {
        let mut src = o[..axis].to_vec();
        src.push(b.index(0));
        src.extend(o[axis..].iter().cloned());
        b.extract(x, &src)
    })?;
    let i0 = b.filled(&it, 0.0)?;
    let its: Vec<&str> = (0..rank)
        .map(|i| if i == axis { "reduction" } else { "parallel" })
        .collect();
    let pred = match (kind, last) {
        (ArgKind::Max, false) => "gt",
        (ArgKind::Max, true) => "ge",
        (ArgKind::Min, false) => "lt",
        (ArgKind::Min, true) => "le",
    };
    let r = b.generic(
        &[In {
            val: x,
            map: identity_map(rank),
        }],
        &[
            (vt, dropped_map(rank, &[axis]), Some(v0)),
            (it.clone(), dropped_map(rank, &[axis]), Some(i0)),
        ],
        &its,
        |b, a| {
            let (v, cur, ci) = (&a[0], &a[1], &a[2]);
            let pos = loop_index_i64(b, axis);
            // Ordered comparisons: false when either side is NaN.
            let c = elementwise::compare(b, e, pred, v, cur);
            let better = match nan_test(b, e, v) {
                None => c,
                Some(nv) if last => b.assign(format!("arith.ori {nv}, {c} : i1")),
                Some(nv) => {
                    let ty = elem(e);
                    let num = b.assign(format!("arith.cmpf ord, {cur}, {cur} : {ty}"));
                    let t = b.assign(format!("arith.andi {nv}, {num} : i1"));
                    b.assign(format!("arith.ori {t}, {c} : i1"))
                }
            };
            let nv = elementwise::pick(b, &better, v, cur, e);
            let ni = b.assign(format!("arith.select {better}, {pos}, {ci} : i64"));
            Ok(vec![nv, ni])
        },
    )?;
    let idx = Val {
        name: r[1].clone(),
        ty: it,
    };
    if dims(&idx.ty)? == dims(out)? {
        Ok(idx.name)
    } else {
        reshape(b, &idx, out)
    }
}

/// `tensor.extract_slice` offsets, sizes and strides of the slab at position `p` (an
/// `index` name) of `axis`, rank-reduced (the axis dropped).
fn slab(d: &[u64], axis: usize, p: &str) -> String {
    let offs: Vec<String> = (0..d.len())
        .map(|a| if a == axis { p.to_string() } else { "0".into() })
        .collect();
    let sizes: Vec<String> = d
        .iter()
        .enumerate()
        .map(|(a, &n)| if a == axis { "1".into() } else { n.to_string() })
        .collect();
    let ones = vec!["1"; d.len()];
    format!(
        "[{}] [{}] [{}]",
        offs.join(", "),
        sizes.join(", "),
        ones.join(", ")
    )
}

/// Cumulative sum along `axis`: a loop over the axis carrying the result and the running
/// sum of the slabs (wrapping for integers, in the element type as the interpreter).
fn cumsum(
    b: &mut Body,
    x: &Val,
    axis: usize,
    exclusive: bool,
    reverse: bool,
    out: &TensorType,
) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let e = x.ty.elem;
    let n = xd[axis];
    let o0 = b.empty(out)?;
    if xd.contains(&0) {
        return Ok(o0);
    }
    let lane = reduced_type(&x.ty, &[axis], e)?;
    let lane_s = tensor_ty(&lane)?;
    let (xs, os) = (tensor_ty(&x.ty)?, tensor_ty(out)?);
    let lr = lane.rank();
    let acc0 = b.filled(&lane, 0.0)?;
    let init = [
        Val {
            name: o0,
            ty: out.clone(),
        },
        Val {
            name: acc0,
            ty: lane.clone(),
        },
    ];
    let r = for_loop(b, n, &init, |b, j, c| {
        let p = if reverse {
            let top = b.index(n as i64 - 1);
            b.assign(format!("arith.subi {top}, {j} : index"))
        } else {
            j.to_string()
        };
        let at = slab(&xd, axis, &p);
        let sl = b.assign(format!(
            "tensor.extract_slice {}{at} : {xs} to {lane_s}",
            x.name
        ));
        let sl = Val {
            name: sl,
            ty: lane.clone(),
        };
        let mut o = c[0].name.clone();
        if exclusive {
            o = b.assign(format!(
                "tensor.insert_slice {} into {o}{at} : {lane_s} into {os}",
                c[1].name
            ));
        }
        let acc = b.generic(
            &[In {
                val: &sl,
                map: identity_map(lr),
            }],
            &[(lane.clone(), identity_map(lr), Some(c[1].name.clone()))],
            &vec!["parallel"; lr],
            |b, a| {
                Ok(vec![elementwise::binary(
                    b,
                    &BinaryOp::Add,
                    e,
                    &a[1],
                    &a[0],
                )?])
            },
        )?;
        let acc = acc[0].clone();
        if !exclusive {
            o = b.assign(format!(
                "tensor.insert_slice {acc} into {o}{at} : {lane_s} into {os}"
            ));
        }
        Ok(vec![o, acc])
    })?;
    Ok(r[0].clone())
}

/// Whether `(a, ia)` comes before `(c, ic)` in top-k's order: by value (descending for
/// `largest`, else ascending; NaN above every number, NaNs equal), then by index.
fn precedes(
    b: &mut Body,
    e: ElemType,
    largest: bool,
    (a, ia): (&str, &str),
    (c, ic): (&str, &str),
) -> String {
    let dir = if largest { "gt" } else { "lt" };
    let mut better = elementwise::compare(b, e, dir, a, c);
    let mut eq = elementwise::compare(b, e, "eq", a, c);
    if let (Some(na), Some(nc)) = (nan_test(b, e, a), nan_test(b, e, c)) {
        let t = b.int("i1", 1);
        let (hi, lo) = if largest { (&na, &nc) } else { (&nc, &na) };
        let not_lo = b.assign(format!("arith.xori {lo}, {t} : i1"));
        let nan_wins = b.assign(format!("arith.andi {hi}, {not_lo} : i1"));
        better = b.assign(format!("arith.ori {better}, {nan_wins} : i1"));
        let both = b.assign(format!("arith.andi {na}, {nc} : i1"));
        eq = b.assign(format!("arith.ori {eq}, {both} : i1"));
    }
    let first = b.assign(format!("arith.cmpi slt, {ia}, {ic} : i64"));
    let tie = b.assign(format!("arith.andi {eq}, {first} : i1"));
    b.assign(format!("arith.ori {better}, {tie} : i1"))
}

/// Top-k by selection: slot `s` is the first element, in top-k's total order (see
/// [`precedes`]), among those after slot `s - 1`'s; one reduction over the axis per slot.
fn top_k(
    b: &mut Body,
    x: &Val,
    k: u64,
    axis: usize,
    largest: bool,
    results: &[TensorType],
) -> LResult<Vec<String>> {
    let (vt, it) = (&results[0], &results[1]);
    let xd = dims(&x.ty)?;
    let e = x.ty.elem;
    let rank = xd.len();
    if k == 0 || xd.contains(&0) {
        return Ok(vec![b.empty(vt)?, b.empty(it)?]);
    }
    // Filled, not empty: slot 0 reads its (ignored) predecessor from them.
    let v0 = b.filled(vt, 0.0)?;
    let i0 = b.filled(it, 0.0)?;
    let lane_v = reduced_type(&x.ty, &[axis], e)?;
    let lane_i = reduced_type(&x.ty, &[axis], ElemType::I64)?;
    let (lvs, lis) = (tensor_ty(&lane_v)?, tensor_ty(&lane_i)?);
    let (vts, its_) = (tensor_ty(vt)?, tensor_ty(it)?);
    let od = dims(vt)?;
    let init = [
        Val {
            name: v0,
            ty: vt.clone(),
        },
        Val {
            name: i0,
            ty: it.clone(),
        },
    ];
    let iters: Vec<&str> = (0..rank)
        .map(|i| if i == axis { "reduction" } else { "parallel" })
        .collect();
    let r = for_loop(b, k, &init, |b, s, c| {
        let z = b.index(0);
        // The previous slot (slot 0 reads slot 0, unwritten, and ignores it).
        let one = b.index(1);
        let sm = b.assign(format!("arith.subi {s}, {one} : index"));
        let sm = b.assign(format!("arith.maxsi {sm}, {z} : index"));
        let prev = slab(&od, axis, &sm);
        let pv = Val {
            name: b.assign(format!(
                "tensor.extract_slice {}{prev} : {vts} to {lvs}",
                c[0].name
            )),
            ty: lane_v.clone(),
        };
        let pi = Val {
            name: b.assign(format!(
                "tensor.extract_slice {}{prev} : {its_} to {lis}",
                c[1].name
            )),
            ty: lane_i.clone(),
        };
        let first = b.assign(format!("arith.cmpi eq, {s}, {z} : index"));
        let bv0 = b.filled(&lane_v, 0.0)?;
        let bi0 = b.filled(&lane_i, -1.0)?;
        let best = b.generic(
            &[
                In {
                    val: x,
                    map: identity_map(rank),
                },
                In {
                    val: &pv,
                    map: dropped_map(rank, &[axis]),
                },
                In {
                    val: &pi,
                    map: dropped_map(rank, &[axis]),
                },
            ],
            &[
                (lane_v.clone(), dropped_map(rank, &[axis]), Some(bv0)),
                (lane_i.clone(), dropped_map(rank, &[axis]), Some(bi0)),
            ],
            &iters,
            |b, a| {
                let (xv, pv, pi, bv, bi) = (&a[0], &a[1], &a[2], &a[3], &a[4]);
                let j = loop_index_i64(b, axis);
                let after = precedes(b, e, largest, (pv, pi), (xv, &j));
                let cand = b.assign(format!("arith.ori {first}, {after} : i1"));
                let m1 = b.int("i64", -1);
                let none = b.assign(format!("arith.cmpi eq, {bi}, {m1} : i64"));
                let beats = precedes(b, e, largest, (xv, &j), (bv, bi));
                let nb = b.assign(format!("arith.ori {none}, {beats} : i1"));
                let take = b.assign(format!("arith.andi {cand}, {nb} : i1"));
                let v = elementwise::pick(b, &take, xv, bv, e);
                let i = b.assign(format!("arith.select {take}, {j}, {bi} : i64"));
                Ok(vec![v, i])
            },
        )?;
        let at = slab(&od, axis, s);
        let vals = b.assign(format!(
            "tensor.insert_slice {} into {}{at} : {lvs} into {vts}",
            best[0], c[0].name
        ));
        let inds = b.assign(format!(
            "tensor.insert_slice {} into {}{at} : {lis} into {its_}",
            best[1], c[1].name
        ));
        Ok(vec![vals, inds])
    })?;
    Ok(vec![r[0].clone(), r[1].clone()])
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
    // The row's maximum by `maxnumf`, not the `maximumf` of `ReduceMax`: the result is the
    // same (a NaN in the row makes every output NaN either way, through `x - max` or the
    // sum, and `exp` of either zero is 1), and x86 reduces a vector by `maxnumf` in a few
    // shuffles where `maximumf`'s NaN and signed-zero rules took a scalar chain per element.
    let m = reduce_with(b, x, &[axis], acc, f64::NEG_INFINITY, |b, p, q| {
        Ok(b.assign(format!("arith.maxnumf {p}, {q} : {}", elem(acc))))
    })?;
    // `x - max` and its exponential in one parallel generic (LLVM vectorizes it), the
    // exponentials then summed in a reduction of plain adds: each `exp` is computed once,
    // not once in the sum and again for the quotient.
    let shifted_ty = x.ty.with_elem(acc);
    let its = vec!["parallel"; rank];
    let mut outs = vec![(shifted_ty.clone(), identity_map(rank), None)];
    if log {
        outs.push((shifted_ty.clone(), identity_map(rank), None));
    }
    let shifted = b.generic(
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
        &outs,
        &its,
        |b, a| {
            let v = elementwise::cast(b, e, acc, &a[0]);
            let d = elementwise::binary(b, &BinaryOp::Sub, acc, &v, &a[1])?;
            let ex = elementwise::unary(b, &tessera_ir::UnaryOp::Exp, acc, &d)?;
            Ok(if log { vec![ex, d] } else { vec![ex] })
        },
    )?;
    let ex = Val {
        name: shifted[0].clone(),
        ty: shifted_ty.clone(),
    };
    let s = reduce_with(b, &ex, &[axis], acc, 0.0, |b, p, q| {
        elementwise::binary(b, &BinaryOp::Add, acc, p, q)
    })?;
    // Softmax divides the exponentials by the sum, log-softmax subtracts the sum's log from
    // the shifted values.
    let num = if log {
        Val {
            name: shifted[1].clone(),
            ty: shifted_ty,
        }
    } else {
        ex
    };
    let r = b.generic(
        &[
            In {
                val: &num,
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
                elementwise::binary(b, &BinaryOp::Div, acc, &a[0], &a[1])?
            };
            Ok(vec![elementwise::cast(b, acc, e, &v)])
        },
    )?;
    Ok(r[0].clone())
}
