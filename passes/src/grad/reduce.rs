//! Rules of the reductions: `reduce-*`, `softmax`, `log-softmax`, `cumsum`.

use tessera_ir::{BinaryOp as B, Dim, Op, OpData, ReduceKind as K, UnaryOp as U, ValueId};

use super::{Bw, R, g0};

/// `v` (a reduction's result or its gradient) with the reduced axes back as extent 1.
fn keep(
    bw: &mut Bw<'_>,
    v: ValueId,
    x_shape: &[Dim],
    axes: &[usize],
    keep_dims: bool,
) -> R<ValueId> {
    if keep_dims {
        return Ok(v);
    }
    let shape: Vec<Dim> = x_shape
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if axes.contains(&i) {
                Dim::Static(1)
            } else {
                d.clone()
            }
        })
        .collect();
    bw.reshape(v, &shape)
}

/// `reduce-*`: the output's gradient broadcast back over the reduced axes, times the
/// derivative of the reduction.
pub(crate) fn reduce(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Reduce {
        kind,
        ref axes,
        keep_dims,
    } = data.op
    else {
        return Err(bw.err("internal error: not a reduction"));
    };
    let x = data.operands[0];
    let y = data.results[0];
    let xs = bw.ty(x).shape;
    let axes: Vec<usize> = if axes.is_empty() {
        (0..xs.len()).collect()
    } else {
        axes.clone()
    };
    let gk = keep(bw, g, &xs, &axes, keep_dims)?;
    let ge = bw.expand(gk, &xs)?;
    let dx = match kind {
        K::Sum => ge,
        K::Mean => {
            let e = bw.elem(x);
            let n = match (bw.ty(x).num_elements(), bw.ty(y).num_elements()) {
                (Some(nx), Some(ny)) if ny > 0 => bw.scalar(nx as f64 / ny as f64, e)?,
                _ => {
                    let nx = bw.count(x, e)?;
                    let ny = bw.count(y, e)?;
                    bw.div(nx, ny)?
                }
            };
            bw.div(ge, n)?
        }
        K::Max | K::Min => {
            // Split evenly among the elements equal to the result (PyTorch's amax/amin).
            let yk = keep(bw, y, &xs, &axes, keep_dims)?;
            let hit = bw.bin(B::Equal, x, yk)?;
            let e = bw.elem(x);
            let one = bw.scalar(1.0, e)?;
            let zero = bw.scalar(0.0, e)?;
            let m = bw.select(hit, one, zero)?;
            let cnt = bw.reduce(K::Sum, m, axes.clone(), true)?;
            let share = bw.div(gk, cnt)?;
            let d = bw.mul(m, share)?;
            bw.expand(d, &xs)?
        }
        K::Prod => {
            let yk = keep(bw, y, &xs, &axes, keep_dims)?;
            let t = bw.div(yk, x)?;
            bw.mul(ge, t)?
        }
        K::L1 => {
            let s = bw.un(U::Sign, x)?;
            bw.mul(ge, s)?
        }
        K::L2 => {
            let yk = keep(bw, y, &xs, &axes, keep_dims)?;
            let t = bw.div(x, yk)?;
            bw.mul(ge, t)?
        }
        K::SumSquare => {
            let t = bw.scale(x, 2.0)?;
            bw.mul(ge, t)?
        }
        K::LogSumExp => {
            let yk = keep(bw, y, &xs, &axes, keep_dims)?;
            let d = bw.sub(x, yk)?;
            let p = bw.un(U::Exp, d)?;
            bw.mul(ge, p)?
        }
    };
    Ok(vec![Some(dx)])
}

/// `softmax`: `y * (g - sum(g * y))` along the axis.
pub(crate) fn softmax(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Softmax { axis } = data.op else {
        return Err(bw.err("internal error: not a softmax"));
    };
    let y = data.results[0];
    let gy = bw.mul(g, y)?;
    let s = bw.reduce(K::Sum, gy, vec![axis], true)?;
    let d = bw.sub(g, s)?;
    Ok(vec![Some(bw.mul(y, d)?)])
}

/// `log-softmax`: `g - exp(y) * sum(g)` along the axis.
pub(crate) fn log_softmax(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::LogSoftmax { axis } = data.op else {
        return Err(bw.err("internal error: not a log-softmax"));
    };
    let y = data.results[0];
    let s = bw.reduce(K::Sum, g, vec![axis], true)?;
    let p = bw.un(U::Exp, y)?;
    let t = bw.mul(p, s)?;
    Ok(vec![Some(bw.sub(g, t)?)])
}

/// `cumsum`: the cumulative sum of the gradient in the other direction.
pub(crate) fn cumsum(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::CumSum {
        axis,
        exclusive,
        reverse,
    } = data.op
    else {
        return Err(bw.err("internal error: not a cumsum"));
    };
    let d = bw.op(
        Op::CumSum {
            axis,
            exclusive,
            reverse: !reverse,
        },
        &[g],
    )?;
    Ok(vec![Some(d)])
}
