//! Indexing ops: gather, gather-elements, gather-nd, scatter-elements, scatter-nd, top-k.
//!
//! Indices may have any integer element type; negative indices count from the end; an index
//! out of range is an error. Choices where `op.rs` is silent:
//! - gather-elements and scatter-elements need `indices` of the data's rank whose extents do
//!   not exceed the data's on every axis but `axis` (as ONNX).
//! - gather-nd follows ONNX: `batch_dims < rank(indices)`, `batch_dims + indices.shape[-1] <=
//!   rank(data)`, equal leading batch extents; result shape `indices.shape[..-1] ++
//!   data.shape[batch_dims + indices.shape[-1]..]`.
//! - scatter-nd needs `updates.shape == indices.shape[..-1] ++ data.shape[indices.shape[-1]..]`.
//! - scatters apply updates in row-major order of `updates`, so with duplicate indices and no
//!   reduction the last update wins. Reductions other than none need a numeric type; add and
//!   mul wrap for integers; max and min propagate NaN.
//! - top-k: `k` must not exceed the axis extent. NaN counts as larger than every number, so
//!   with `largest` NaNs come first and otherwise last; among equal values the lower index
//!   comes first.

use std::cmp::Ordering;

use ndarray::{ArrayD, Axis, IxDyn};

use super::common::*;
use crate::op::ScatterReduction;
use crate::tensor::Tensor;
use crate::types::ElemType;

/// `gather` along an axis.
pub(crate) fn gather(x: &Tensor, idx: &Tensor, axis: usize) -> R<Tensor> {
    let ind = indices_i64(idx)?;
    let shape = x.shape();
    check_axis(axis, shape.len())?;
    let d = shape[axis];
    let ii = ind
        .iter()
        .map(|&i| norm_index(i, d, "index", axis))
        .collect::<R<Vec<_>>>()?;
    let outer = numel(&shape[..axis])?;
    let inner = numel(&shape[axis + 1..])?;
    let mut out_shape = shape[..axis].to_vec();
    out_shape.extend(ind.shape());
    out_shape.extend(&shape[axis + 1..]);
    let total = numel_of(&out_shape, x.elem())?;
    dispatch_any!(x.elem(), T => {
        if total == 0 {
            // An empty result may still have huge extents beside its zero one: no loop over
            // them (found by fuzzing: seconds gathering nothing).
            return from_vec(&out_shape, Vec::new()).map(T::wrap);
        }
        let data = row_major(arr::<T>(x)?.view());
        let mut out = Vec::with_capacity(total);
        for o in 0..outer {
            for &i in &ii {
                let s = (o * d + i) * inner;
                out.extend_from_slice(&data[s..s + inner]);
            }
        }
        from_vec(&out_shape, out).map(T::wrap)
    })
}

/// Row-major offsets into `data_shape` of every position of `ind`, with axis `axis` replaced by
/// the index value.
fn element_targets(data_shape: &[usize], ind: &ArrayD<i64>, axis: usize) -> R<Vec<usize>> {
    let r = data_shape.len();
    check_axis(axis, r)?;
    if ind.ndim() != r {
        bail!("indices have rank {}, data has rank {r}", ind.ndim());
    }
    for (d, (&i, &x)) in ind.shape().iter().zip(data_shape).enumerate() {
        if d != axis && i > x {
            bail!("indices extent {i} exceeds data extent {x} on axis {d}");
        }
    }
    let st = strides_of(data_shape);
    ind.indexed_iter()
        .map(|(pos, &i)| {
            let j = norm_index(i, data_shape[axis], "index", axis)?;
            Ok((0..r)
                .map(|d| if d == axis { j * st[d] } else { pos[d] * st[d] })
                .sum())
        })
        .collect()
}

/// `gather-elements` along an axis.
pub(crate) fn gather_elements(x: &Tensor, idx: &Tensor, axis: usize) -> R<Tensor> {
    let ind = indices_i64(idx)?;
    let targets = element_targets(x.shape(), &ind, axis)?;
    dispatch_any!(x.elem(), T => {
        let data = row_major(arr::<T>(x)?.view());
        from_vec(ind.shape(), targets.iter().map(|&t| data[t]).collect()).map(T::wrap)
    })
}

/// Offsets of the slices addressed by the index tuples of `ind` (last axis), after
/// `batch_dims` shared leading axes; returns the offsets and the slice length.
fn nd_targets(
    data_shape: &[usize],
    ind: &ArrayD<i64>,
    batch_dims: usize,
) -> R<(Vec<usize>, usize)> {
    let (r, q) = (data_shape.len(), ind.ndim());
    if q == 0 || batch_dims >= q {
        bail!(
            "indices of shape {:?} need rank > batch_dims = {batch_dims}",
            ind.shape()
        );
    }
    let m = ind.shape()[q - 1];
    if batch_dims + m > r {
        bail!("index tuples of length {m} after {batch_dims} batch axes exceed the data rank {r}");
    }
    if ind.shape()[..batch_dims] != data_shape[..batch_dims] {
        bail!(
            "batch extents differ: indices {:?}, data {:?}",
            &ind.shape()[..batch_dims],
            &data_shape[..batch_dims]
        );
    }
    let st = strides_of(data_shape);
    let slice = numel(&data_shape[batch_dims + m..])?;
    let bsz = numel(&data_shape[batch_dims..])?;
    let per_batch = numel(&ind.shape()[batch_dims..q - 1])?;
    let flat = row_major(ind.view());
    let ntuples = numel(&ind.shape()[..q - 1])?;
    let mut offs = Vec::with_capacity(ntuples);
    for j in 0..ntuples {
        let bi = j.checked_div(per_batch).unwrap_or(0);
        let mut off = bi * bsz;
        for k in 0..m {
            let ax = batch_dims + k;
            off += norm_index(flat[j * m + k], data_shape[ax], "index", ax)? * st[ax];
        }
        offs.push(off);
    }
    Ok((offs, slice))
}

/// `gather-nd`.
pub(crate) fn gather_nd(x: &Tensor, idx: &Tensor, batch_dims: usize) -> R<Tensor> {
    let ind = indices_i64(idx)?;
    let (offs, slice) = nd_targets(x.shape(), &ind, batch_dims)?;
    let q = ind.ndim();
    let m = ind.shape()[q - 1];
    let mut out_shape = ind.shape()[..q - 1].to_vec();
    out_shape.extend(&x.shape()[batch_dims + m..]);
    let total = numel_of(&out_shape, x.elem())?;
    dispatch_any!(x.elem(), T => {
        let data = row_major(arr::<T>(x)?.view());
        let mut out = Vec::with_capacity(total);
        for &o in &offs {
            out.extend_from_slice(&data[o..o + slice]);
        }
        from_vec(&out_shape, out).map(T::wrap)
    })
}

/// Writes `u` (row-major) into a copy of `x` at `targets`, combining with `red`.
fn apply_scatter(x: &Tensor, u: &Tensor, targets: &[usize], red: ScatterReduction) -> R<Tensor> {
    same_elem(x, u)?;
    if red == ScatterReduction::None {
        return dispatch_any!(x.elem(), T => {
            let mut out = row_major(arr::<T>(x)?.view()).into_owned();
            let ud = row_major(arr::<T>(u)?.view());
            for (&t, &v) in targets.iter().zip(ud.iter()) {
                out[t] = v;
            }
            from_vec(x.shape(), out).map(T::wrap)
        });
    }
    dispatch_num!(x.elem(), T => {
        let mut out = row_major(arr::<T>(x)?.view()).into_owned();
        let ud = row_major(arr::<T>(u)?.view());
        let f: fn(T, T) -> T = match red {
            ScatterReduction::Add => T::wadd,
            ScatterReduction::Mul => T::wmul,
            ScatterReduction::Max => T::max_nan,
            _ => T::min_nan,
        };
        for (&t, &v) in targets.iter().zip(ud.iter()) {
            out[t] = f(out[t], v);
        }
        from_vec(x.shape(), out).map(T::wrap)
    })
}

/// `scatter-elements`.
pub(crate) fn scatter_elements(
    x: &Tensor,
    idx: &Tensor,
    u: &Tensor,
    axis: usize,
    red: ScatterReduction,
) -> R<Tensor> {
    let ind = indices_i64(idx)?;
    if ind.shape() != u.shape() {
        bail!(
            "indices shape {:?} differs from updates shape {:?}",
            ind.shape(),
            u.shape()
        );
    }
    let targets = element_targets(x.shape(), &ind, axis)?;
    apply_scatter(x, u, &targets, red)
}

/// `scatter-nd`.
pub(crate) fn scatter_nd(x: &Tensor, idx: &Tensor, u: &Tensor, red: ScatterReduction) -> R<Tensor> {
    let ind = indices_i64(idx)?;
    let (offs, slice) = nd_targets(x.shape(), &ind, 0)?;
    let q = ind.ndim();
    let m = ind.shape()[q - 1];
    let mut expected = ind.shape()[..q - 1].to_vec();
    expected.extend(&x.shape()[m..]);
    if u.shape() != expected.as_slice() {
        bail!("updates have shape {:?}, expected {expected:?}", u.shape());
    }
    let targets: Vec<usize> = offs.iter().flat_map(|&o| o..o + slice).collect();
    apply_scatter(x, u, &targets, red)
}

/// The `k` largest or smallest along an axis: values and i64 indices.
pub(crate) fn top_k(x: &Tensor, k: u64, axis: usize, largest: bool) -> R<Vec<Tensor>> {
    let shape = x.shape();
    check_axis(axis, shape.len())?;
    let k = to_usize(k)?;
    if k > shape[axis] {
        bail!("k = {k} exceeds the extent {} of axis {axis}", shape[axis]);
    }
    let mut out_shape = shape.to_vec();
    out_shape[axis] = k;
    numel_of(&out_shape, x.elem())?;
    numel_of(&out_shape, ElemType::I64)?;
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        #[allow(clippy::eq_op)]
        let nan = |v: T| v != v;
        // Ascending order with NaN greatest.
        let asc = |p: T, q: T| match (nan(p), nan(q)) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            _ => p.partial_cmp(&q).unwrap_or(Ordering::Equal),
        };
        let mut vals = ArrayD::from_elem(IxDyn(&out_shape), T::zero());
        let mut inds = ArrayD::from_elem(IxDyn(&out_shape), 0i64);
        for ((lane, mut vl), mut il) in a
            .lanes(Axis(axis))
            .into_iter()
            .zip(vals.lanes_mut(Axis(axis)))
            .zip(inds.lanes_mut(Axis(axis)))
        {
            let mut order: Vec<usize> = (0..lane.len()).collect();
            if largest {
                order.sort_by(|&i, &j| asc(lane[j], lane[i]));
            } else {
                order.sort_by(|&i, &j| asc(lane[i], lane[j]));
            }
            for (slot, &i) in order.iter().take(k).enumerate() {
                vl[slot] = lane[i];
                il[slot] = i as i64;
            }
        }
        Ok(vec![T::wrap(vals), Tensor::I64(inds)])
    })
}
