//! Reductions and ops along one axis: reduce, arg-reduce, softmax, log-softmax, cumsum.
//!
//! Float reductions accumulate in f64 and round once. Reducing an empty set gives the identity:
//! 0 for sum, sum-square, L1 and L2, 1 for prod, -inf (the lowest integer) for max, +inf (the
//! highest integer) for min, -inf for log-sum-exp, and NaN for the mean of floats. Max and min
//! propagate NaN.
//!
//! Integers: sum, prod, L1 and sum-square wrap; mean and L2 are computed in f64 and truncated
//! toward zero; the mean of an empty integer set and log-sum-exp of integers are errors.
//! bool is rejected.
//!
//! Arg-reduce works on every element type. NaN wins for both argmax and argmin (the first NaN,
//! or the last with `select_last`), as numpy's argmax/argmin do. An empty axis is an error.

use ndarray::{ArrayD, Axis, IxDyn};

use super::common::*;
use crate::op::{ArgKind, ReduceKind};
use crate::tensor::Tensor;

/// Checks a reduction axis set and returns it (all axes when empty).
fn reduce_axes(axes: &[usize], rank: usize) -> R<Vec<usize>> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    for (i, &a) in axes.iter().enumerate() {
        check_axis(a, rank)?;
        if i > 0 && axes[i - 1] >= a {
            bail!("axes {axes:?} are not strictly increasing");
        }
    }
    Ok(axes.to_vec())
}

/// Reduction over a set of axes.
pub(crate) fn reduce(x: &Tensor, kind: ReduceKind, axes: &[usize], keep: bool) -> R<Tensor> {
    dispatch_num!(x.elem(), T => reduce_t::<T>(arr::<T>(x)?, kind, axes, keep).map(T::wrap))
}

fn reduce_t<T: Num>(x: &ArrayD<T>, kind: ReduceKind, axes: &[usize], keep: bool) -> R<ArrayD<T>> {
    let rank = x.ndim();
    let axes = reduce_axes(axes, rank)?;
    let kept: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(&axes).copied().collect();
    let data = row_major(x.view().permuted_axes(perm));
    let outer = numel(&kept.iter().map(|&a| x.shape()[a]).collect::<Vec<_>>())?;
    let inner = numel(&axes.iter().map(|&a| x.shape()[a]).collect::<Vec<_>>())?;
    let out_shape: Vec<usize> = (0..rank)
        .filter_map(|a| {
            if axes.contains(&a) {
                keep.then_some(1)
            } else {
                Some(x.shape()[a])
            }
        })
        .collect();
    let mut out = Vec::with_capacity(outer);
    for o in 0..outer {
        let lane = if inner == 0 {
            &[][..]
        } else {
            &data[o * inner..(o + 1) * inner]
        };
        out.push(reduce_lane(lane, kind)?);
    }
    from_vec(&out_shape, out)
}

fn reduce_lane<T: Num>(lane: &[T], kind: ReduceKind) -> R<T> {
    let fsum = |f: &dyn Fn(f64) -> f64| lane.iter().map(|v| f(v.to_f64())).sum::<f64>();
    Ok(match kind {
        ReduceKind::Max => lane.iter().fold(T::lowest(), |a, &b| a.max_nan(b)),
        ReduceKind::Min => lane.iter().fold(T::highest(), |a, &b| a.min_nan(b)),
        ReduceKind::Mean => {
            if !T::IS_FLOAT && lane.is_empty() {
                bail!("mean of an empty set is undefined for {}", T::ELEM);
            }
            T::from_f64(fsum(&|v| v) / lane.len() as f64)
        }
        ReduceKind::L2 => T::from_f64(fsum(&|v| v * v).sqrt()),
        ReduceKind::LogSumExp => {
            if !T::IS_FLOAT {
                bail!(
                    "log-sum-exp needs a floating-point operand, got {}",
                    T::ELEM
                );
            }
            let m = lane.iter().fold(f64::NEG_INFINITY, |a, &b| {
                let b = b.to_f64();
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            });
            if !m.is_finite() {
                T::from_f64(m)
            } else {
                T::from_f64(m + fsum(&|v| (v - m).exp()).ln())
            }
        }
        _ if T::IS_FLOAT => T::from_f64(match kind {
            ReduceKind::Sum => fsum(&|v| v),
            ReduceKind::Prod => lane.iter().map(|v| v.to_f64()).product(),
            ReduceKind::L1 => fsum(&f64::abs),
            _ => fsum(&|v| v * v),
        }),
        ReduceKind::Sum => lane.iter().fold(T::zero(), |a, &b| a.wadd(b)),
        ReduceKind::Prod => lane.iter().fold(T::one(), |a, &b| a.wmul(b)),
        ReduceKind::L1 => lane.iter().fold(T::zero(), |a, &b| a.wadd(b.nabs())),
        ReduceKind::SumSquare => lane.iter().fold(T::zero(), |a, &b| a.wadd(b.wmul(b))),
    })
}

/// Index of the max or min along an axis.
pub(crate) fn arg_reduce(
    x: &Tensor,
    kind: ArgKind,
    axis: usize,
    keep: bool,
    last: bool,
) -> R<Tensor> {
    dispatch_any!(x.elem(), T => arg_t::<T>(arr::<T>(x)?, kind, axis, keep, last).map(Tensor::I64))
}

fn arg_t<T: AnyElem>(
    x: &ArrayD<T>,
    kind: ArgKind,
    axis: usize,
    keep: bool,
    last: bool,
) -> R<ArrayD<i64>> {
    check_axis(axis, x.ndim())?;
    if x.shape()[axis] == 0 {
        bail!("axis {axis} is empty");
    }
    #[allow(clippy::eq_op)]
    let nan = |v: T| v != v;
    let better = |new: T, cur: T| -> bool {
        match (nan(new), nan(cur)) {
            (_, true) => last && nan(new),
            (true, false) => true,
            (false, false) => match kind {
                ArgKind::Max => new > cur || (last && new == cur),
                ArgKind::Min => new < cur || (last && new == cur),
            },
        }
    };
    let res: Vec<i64> = x
        .lanes(Axis(axis))
        .into_iter()
        .map(|lane| {
            let mut best = 0usize;
            for (i, &v) in lane.iter().enumerate().skip(1) {
                if better(v, lane[best]) {
                    best = i;
                }
            }
            best as i64
        })
        .collect();
    let mut shape = x.shape().to_vec();
    shape.remove(axis);
    let mut out = from_vec(&shape, res)?;
    if keep {
        out.insert_axis_inplace(Axis(axis));
    }
    Ok(out)
}

/// Softmax or log-softmax along an axis (max-subtracted).
pub(crate) fn softmax(x: &Tensor, axis: usize, log: bool) -> R<Tensor> {
    dispatch_float!(x.elem(), F => softmax_t::<F>(arr::<F>(x)?, axis, log).map(F::wrap))
}

fn softmax_t<F: Float>(x: &ArrayD<F>, axis: usize, log: bool) -> R<ArrayD<F>> {
    check_axis(axis, x.ndim())?;
    let mut out = x.as_standard_layout().into_owned();
    for mut lane in out.lanes_mut(Axis(axis)) {
        let m = lane.iter().fold(F::lowest(), |a, &b| a.max_nan(b));
        let sum = lane.iter().fold(F::zero(), |a, &b| a + (b - m).exp());
        if log {
            let ls = sum.ln();
            lane.mapv_inplace(|v| v - m - ls);
        } else {
            lane.mapv_inplace(|v| (v - m).exp() / sum);
        }
    }
    Ok(out)
}

/// Cumulative sum along an axis.
pub(crate) fn cumsum(x: &Tensor, axis: usize, exclusive: bool, reverse: bool) -> R<Tensor> {
    dispatch_num!(x.elem(), T => cumsum_t::<T>(arr::<T>(x)?, axis, exclusive, reverse).map(T::wrap))
}

fn cumsum_t<T: Num>(x: &ArrayD<T>, axis: usize, exclusive: bool, reverse: bool) -> R<ArrayD<T>> {
    check_axis(axis, x.ndim())?;
    let mut out = ArrayD::from_elem(IxDyn(x.shape()), T::zero());
    for (mut o, i) in out
        .lanes_mut(Axis(axis))
        .into_iter()
        .zip(x.lanes(Axis(axis)))
    {
        let n = i.len();
        let mut acc = T::zero();
        for j in 0..n {
            let p = if reverse { n - 1 - j } else { j };
            if exclusive {
                o[p] = acc;
                acc = acc.wadd(i[p]);
            } else {
                acc = acc.wadd(i[p]);
                o[p] = acc;
            }
        }
    }
    Ok(out)
}
