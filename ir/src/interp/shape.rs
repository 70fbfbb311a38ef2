//! Data movement and shape ops: reshape, transpose, expand, concat, split, slice, pad, tile,
//! trilu, depth-to-space, space-to-depth, shape, fill, range. All work on every element type.
//!
//! Choices where `op.rs` is silent:
//! - `pad` in reflect mode mirrors repeatedly when a pad exceeds the extent; reflect and edge
//!   padding of an empty axis (by a positive amount) is an error; wrap is periodic (numpy
//!   `wrap`).
//! - `range` counts `max(ceil((limit - start) / delta), 0)` elements (in f64 for floats, exactly
//!   for integers), element `i` being `start + i * delta`; a zero delta is an error. When the
//!   `size` attribute is a symbol that is not bound, the count is not checked (a run binds the
//!   symbol from the result).
//! - `fill` converts its value with cast semantics.

use ndarray::{ArrayD, Axis, IxDyn, Slice};

use super::Bindings;
use super::common::*;
use crate::op::{DepthToSpaceMode, PadMode};
use crate::tensor::Tensor;
use crate::types::{Dim, ElemType, Scalar};

/// Reshape to a fully given shape with the same element count.
pub(crate) fn reshape(x: &Tensor, shape: &[Dim], b: &Bindings) -> R<Tensor> {
    let dims = resolve_dims(shape, b)?;
    let n = numel(&dims)?;
    if n != x.len() {
        bail!(
            "cannot reshape {:?} ({} elements) to {dims:?} ({n} elements)",
            x.shape(),
            x.len()
        );
    }
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        let v = row_major(a.view()).into_owned();
        from_vec(&dims, v).map(T::wrap)
    })
}

/// Axis permutation.
pub(crate) fn transpose(x: &Tensor, perm: &[usize]) -> R<Tensor> {
    let r = x.shape().len();
    let mut seen = vec![false; r];
    if perm.len() != r
        || perm
            .iter()
            .any(|&p| p >= r || std::mem::replace(&mut seen[p], true))
    {
        bail!("{perm:?} is not a permutation of the {r} axes");
    }
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        Ok(T::wrap(a.view().permuted_axes(IxDyn(perm)).as_standard_layout().into_owned()))
    })
}

/// Two-way broadcast to a shape.
pub(crate) fn expand(x: &Tensor, shape: &[Dim], b: &Bindings) -> R<Tensor> {
    let dims = resolve_dims(shape, b)?;
    let target = broadcast_shapes(x.shape(), &dims)?;
    numel_of(&target, x.elem())?;
    dispatch_any!(x.elem(), T => Ok(T::wrap(bview(arr::<T>(x)?, &target)?.to_owned())))
}

/// Concatenation along an axis.
pub(crate) fn concat(xs: &[&Tensor], axis: usize) -> R<Tensor> {
    if xs.is_empty() {
        bail!("expected at least 1 operand, got 0");
    }
    all_same_elem(xs)?;
    let s0 = xs[0].shape();
    check_axis(axis, s0.len())?;
    let mut total = 0usize;
    for (i, t) in xs.iter().enumerate() {
        let s = t.shape();
        if s.len() != s0.len()
            || s.iter()
                .zip(s0)
                .enumerate()
                .any(|(d, (a, b))| d != axis && a != b)
        {
            bail!(
                "operand {i} has shape {s:?}, incompatible with {s0:?} for concatenation on axis {axis}"
            );
        }
        total = total
            .checked_add(s[axis])
            .ok_or_else(|| ierr!("concatenated extent overflows"))?;
    }
    let mut shape = s0.to_vec();
    shape[axis] = total;
    numel_of(&shape, xs[0].elem())?;
    dispatch_any!(xs[0].elem(), T => {
        let views = xs.iter().map(|t| arr::<T>(t).map(|a| a.view())).collect::<R<Vec<_>>>()?;
        ndarray::concatenate(Axis(axis), &views).map(T::wrap).map_err(|e| ierr!("internal: {e}"))
    })
}

/// Split into pieces along an axis.
pub(crate) fn split(x: &Tensor, axis: usize, sizes: &[u64]) -> R<Vec<Tensor>> {
    check_axis(axis, x.shape().len())?;
    let sizes = sizes.iter().map(|&s| to_usize(s)).collect::<R<Vec<_>>>()?;
    let sum = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
    if sum != Some(x.shape()[axis]) {
        bail!(
            "sizes {sizes:?} do not sum to the extent {} of axis {axis}",
            x.shape()[axis]
        );
    }
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        let mut start = 0;
        Ok(sizes
            .iter()
            .map(|&s| {
                let piece = a.slice_axis(Axis(axis), Slice::from(start..start + s)).to_owned();
                start += s;
                T::wrap(piece)
            })
            .collect())
    })
}

/// Strided slice with numpy clamping.
pub(crate) fn slice(
    x: &Tensor,
    axes: &[usize],
    starts: &[i64],
    ends: &[i64],
    steps: &[i64],
) -> R<Tensor> {
    let rank = x.shape().len();
    if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
        bail!(
            "axes, starts, ends and steps must have the same length, got {}, {}, {}, {}",
            axes.len(),
            starts.len(),
            ends.len(),
            steps.len()
        );
    }
    let mut per_axis: Vec<Slice> = (0..rank).map(|_| Slice::from(..)).collect();
    for (i, &a) in axes.iter().enumerate() {
        check_axis(a, rank)?;
        if i > 0 && axes[i - 1] >= a {
            bail!("axes {axes:?} are not strictly increasing");
        }
        let d = x.shape()[a] as i64;
        let step = steps[i];
        if step == 0 {
            bail!("step 0 on axis {a}");
        }
        let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (start, end) = (norm(starts[i]), norm(ends[i]));
        per_axis[a] = if step > 0 {
            let s = start.clamp(0, d);
            let e = end.clamp(0, d).max(s);
            Slice::new(s as isize, Some(e as isize), step as isize)
        } else {
            // Elements start, start+step, ... while > end: the range (end, start] walked
            // from its top.
            let s = start.clamp(-1, d - 1);
            let e = end.clamp(-1, d - 1);
            if s <= e {
                Slice::new(0, Some(0), 1)
            } else {
                Slice::new(
                    (e + 1) as isize,
                    Some((s + 1) as isize),
                    step.max(-(isize::MAX as i64)) as isize,
                )
            }
        };
    }
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        Ok(T::wrap(a.slice_each_axis(|ax| per_axis[ax.axis.index()]).to_owned()))
    })
}

/// Padding with negative pads cropping.
pub(crate) fn pad(x: &Tensor, pads: &[i64], mode: PadMode, value: Scalar) -> R<Tensor> {
    let shape = x.shape();
    let r = shape.len();
    if pads.len() != 2 * r {
        bail!(
            "pads has {} entries, expected {} for rank {r}",
            pads.len(),
            2 * r
        );
    }
    // Extents and index arithmetic in i128: pads may be anywhere in i64.
    let mut out_shape = Vec::with_capacity(r);
    for (axis, &d) in shape.iter().enumerate() {
        let (b, e) = (i128::from(pads[axis]), i128::from(pads[r + axis]));
        let n = d as i128 + b + e;
        if n < 0 {
            bail!("pads {b} and {e} leave a negative extent on axis {axis} of extent {d}");
        }
        out_shape.push(usize::try_from(n).map_err(|_| ierr!("padded extent {n} is too large"))?);
    }
    numel_of(&out_shape, x.elem())?;
    if out_shape.contains(&0) {
        return empty_like(x.elem(), &out_shape);
    }
    let mut maps = Vec::with_capacity(r);
    for (axis, (&d, &n)) in shape.iter().zip(&out_shape).enumerate() {
        check_alloc(n, size_of::<Option<usize>>(), "the index map of pad")?;
        let b = i128::from(pads[axis]);
        let di = d as i128;
        let map = (0..n)
            .map(|o| {
                let i = o as i128 - b;
                if (0..di).contains(&i) {
                    return Ok(Some(i as usize));
                }
                Ok(match mode {
                    PadMode::Constant => None,
                    _ if di == 0 => bail!("cannot pad an empty axis {axis} in {mode:?} mode"),
                    PadMode::Edge => Some(i.clamp(0, di - 1) as usize),
                    PadMode::Wrap => Some(i.rem_euclid(di) as usize),
                    PadMode::Reflect => {
                        if di == 1 {
                            Some(0)
                        } else {
                            let p = 2 * (di - 1);
                            let j = i.rem_euclid(p);
                            Some((if j >= di { p - j } else { j }) as usize)
                        }
                    }
                })
            })
            .collect::<R<Vec<_>>>()?;
        maps.push(map);
    }
    dispatch_any!(x.elem(), T => remap(arr::<T>(x)?, &maps, T::from_scalar(value)).map(T::wrap))
}

/// An empty tensor (some extent is 0) of the given element type and shape; the shape must
/// have passed [`numel`].
fn empty_like(elem: ElemType, shape: &[usize]) -> R<Tensor> {
    dispatch_any!(elem, T => from_vec(shape, Vec::<T>::new()).map(T::wrap))
}

/// Repetition along every axis.
pub(crate) fn tile(x: &Tensor, repeats: &[u64]) -> R<Tensor> {
    let shape = x.shape();
    if repeats.len() != shape.len() {
        bail!(
            "repeats has {} entries, expected {}",
            repeats.len(),
            shape.len()
        );
    }
    let out_shape = shape
        .iter()
        .zip(repeats)
        .map(|(&d, &rep)| {
            d.checked_mul(to_usize(rep)?)
                .ok_or_else(|| ierr!("tiled extent overflows"))
        })
        .collect::<R<Vec<_>>>()?;
    numel_of(&out_shape, x.elem())?;
    if out_shape.contains(&0) {
        // No index maps for an empty result: they would be as long as the repeated extents.
        return empty_like(x.elem(), &out_shape);
    }
    let mut maps = Vec::with_capacity(shape.len());
    for (&d, &n) in shape.iter().zip(&out_shape) {
        check_alloc(n, size_of::<Option<usize>>(), "the index map of tile")?;
        maps.push((0..n).map(|o| Some(o % d)).collect::<Vec<_>>());
    }
    dispatch_any!(x.elem(), T => remap(arr::<T>(x)?, &maps, T::zero()).map(T::wrap))
}

/// Upper or lower triangle of the last two axes.
pub(crate) fn trilu(x: &Tensor, upper: bool, k: i64) -> R<Tensor> {
    let r = x.shape().len();
    if r < 2 {
        bail!("needs rank >= 2, got shape {:?}", x.shape());
    }
    dispatch_any!(x.elem(), T => {
        let mut out = arr::<T>(x)?.as_standard_layout().into_owned();
        for (idx, v) in out.indexed_iter_mut() {
            let (i, j) = (idx[r - 2] as i128, idx[r - 1] as i128);
            let keep = if upper { j - i >= k as i128 } else { j - i <= k as i128 };
            if !keep {
                *v = T::zero();
            }
        }
        Ok(T::wrap(out))
    })
}

fn block_size(block: u64) -> R<usize> {
    if block == 0 {
        bail!("block size must be positive");
    }
    to_usize(block)
}

/// Permutes via a reshape to `split`, an axis permutation and a reshape to `out`.
fn shuffle(x: &Tensor, split: &[usize], perm: &[usize], out: &[usize]) -> R<Tensor> {
    dispatch_any!(x.elem(), T => {
        let v = row_major(arr::<T>(x)?.view()).into_owned();
        let a = from_vec(split, v)?;
        let p = a.permuted_axes(IxDyn(perm));
        let v = row_major(p.view()).into_owned();
        from_vec(out, v).map(T::wrap)
    })
}

/// Depth to space, DCR or CRD.
pub(crate) fn depth_to_space(x: &Tensor, block: u64, mode: DepthToSpaceMode) -> R<Tensor> {
    let b = block_size(block)?;
    let &[n, c, h, w] = x.shape() else {
        bail!("input must be 4-D [N, C, H, W], got shape {:?}", x.shape());
    };
    let bb = b.checked_mul(b).ok_or_else(|| ierr!("block too large"))?;
    if c % bb != 0 {
        bail!("channels {c} are not a multiple of block^2 = {bb}");
    }
    let cc = c / bb;
    let out = [n, cc, h.saturating_mul(b), w.saturating_mul(b)];
    numel(&out)?;
    match mode {
        DepthToSpaceMode::Dcr => shuffle(x, &[n, b, b, cc, h, w], &[0, 3, 4, 1, 5, 2], &out),
        DepthToSpaceMode::Crd => shuffle(x, &[n, cc, b, b, h, w], &[0, 1, 4, 2, 5, 3], &out),
    }
}

/// Space to depth (DCR order).
pub(crate) fn space_to_depth(x: &Tensor, block: u64) -> R<Tensor> {
    let b = block_size(block)?;
    let &[n, c, h, w] = x.shape() else {
        bail!("input must be 4-D [N, C, H, W], got shape {:?}", x.shape());
    };
    if h % b != 0 || w % b != 0 {
        bail!("spatial extents {h}x{w} are not multiples of the block size {b}");
    }
    let bb = b
        .checked_mul(b)
        .ok_or_else(|| ierr!("block {b} is too large"))?;
    let out = [
        n,
        c.checked_mul(bb)
            .ok_or_else(|| ierr!("channels {c} times block² {bb} overflow"))?,
        h / b,
        w / b,
    ];
    numel(&out)?;
    shuffle(x, &[n, c, h / b, b, w / b, b], &[0, 3, 5, 1, 2, 4], &out)
}

/// The shape as a 1-D i64 tensor, axes `start..end`.
pub(crate) fn shape_of(x: &Tensor, start: usize, end: usize) -> R<Tensor> {
    let s = x.shape();
    if start > end || end > s.len() {
        bail!("axes {start}..{end} out of range for rank {}", s.len());
    }
    let v: Vec<i64> = s[start..end].iter().map(|&d| d as i64).collect();
    from_vec(&[v.len()], v).map(Tensor::I64)
}

/// A tensor filled with a value.
pub(crate) fn fill(shape: &[Dim], elem: ElemType, value: Scalar, b: &Bindings) -> R<Tensor> {
    let dims = resolve_dims(shape, b)?;
    numel_of(&dims, elem)?;
    dispatch_any!(elem, T => Ok(T::wrap(ArrayD::from_elem(IxDyn(&dims), T::from_scalar(value)))))
}

/// `start, start+delta, ...` up to `limit`.
pub(crate) fn range(
    start: &Tensor,
    limit: &Tensor,
    delta: &Tensor,
    size: &Dim,
    b: &Bindings,
) -> R<Tensor> {
    all_same_elem(&[start, limit, delta])?;
    for (t, what) in [(start, "start"), (limit, "limit"), (delta, "delta")] {
        if !t.shape().is_empty() {
            bail!("{what} must be a scalar, got shape {:?}", t.shape());
        }
    }
    let expected = match size {
        Dim::Static(n) => Some(to_usize(*n)?),
        Dim::Sym(s) => b.get(s).map(|&n| to_usize(n)).transpose()?,
    };
    dispatch_num!(start.elem(), T => {
        let get = |t: &Tensor| -> R<T> { arr::<T>(t)?.iter().next().copied().ok_or_else(|| ierr!("empty scalar")) };
        let (s, l, d) = (get(start)?, get(limit)?, get(delta)?);
        if d == T::zero() {
            bail!("delta is zero");
        }
        let count: f64 = if T::IS_FLOAT {
            ((l.to_f64() - s.to_f64()) / d.to_f64()).ceil()
        } else {
            // Exact integer ceil division in i128.
            let (s, l, d) = (as_i128(s), as_i128(l), as_i128(d));
            let num = l - s;
            let q = num / d;
            (if num % d != 0 && ((num < 0) == (d < 0)) { q + 1 } else { q }) as f64
        };
        if count.is_nan() || count > (isize::MAX / 8) as f64 {
            bail!("invalid element count {count}");
        }
        let n = if count > 0.0 { count as usize } else { 0 };
        // The count comes from the operands' values: check it before collecting.
        numel_of(&[n], T::ELEM)?;
        if let Some(e) = expected
            && e != n
        {
            bail!("produces {n} elements, but the size attribute is {e}");
        }
        let v: Vec<T> = if T::IS_FLOAT {
            (0..n).map(|i| T::from_f64(s.to_f64() + i as f64 * d.to_f64())).collect()
        } else {
            let mut acc = s;
            (0..n).map(|_| { let v = acc; acc = acc.wadd(d); v }).collect()
        };
        from_vec(&[n], v).map(T::wrap)
    })
}

fn as_i128<T: AnyElem>(v: T) -> i128 {
    match v.to_cast() {
        CastVal::I(i) => i128::from(i),
        CastVal::F(x) => x as i128,
        CastVal::B(b) => i128::from(b),
    }
}

/// `random-uniform`: the counter-based uniform stream of [`crate::op::Op::RandomUniform`].
pub(crate) fn random_uniform(
    seed: &Tensor,
    counter: &Tensor,
    shape: &[Dim],
    elem: ElemType,
    salt: u64,
    b: &Bindings,
) -> R<Tensor> {
    let scalar = |t: &Tensor, what: &str| -> R<i64> {
        match t {
            Tensor::I64(a) if a.ndim() == 0 => Ok(a.iter().next().copied().unwrap_or_default()),
            _ => Err(ierr!("{what} must be an i64 scalar, got {}", t.ty())),
        }
    };
    let key = crate::op::random_key(
        scalar(seed, "the seed")?,
        scalar(counter, "the counter")?,
        salt,
    );
    let dims = resolve_dims(shape, b)?;
    let n = numel_of(&dims, ElemType::F32)?;
    let scale = 1.0 / f64::from(1u32 << 24);
    let vals: Vec<f32> = (0..n as u64)
        .map(|i| (f64::from(crate::op::random_uniform_bits(key, i)) * scale) as f32)
        .collect();
    let t = Tensor::F32(ArrayD::from_shape_vec(IxDyn(&dims), vals).map_err(|e| ierr!("{e}"))?);
    if elem == ElemType::F32 {
        Ok(t)
    } else {
        super::elementwise::cast(&t, elem)
    }
}
