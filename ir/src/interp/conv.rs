//! Convolution, transposed convolution and pooling, channels-first, any number (>= 1) of
//! spatial axes.
//!
//! Conv and conv-transpose are float-only (f16/bf16 via f32). They use im2col (col2im for the
//! transpose) plus one matrix product per image and group. Max pooling accepts every numeric
//! type; average pooling is float-only.
//!
//! Empty `strides`/`dilations` mean all 1 and empty `pads` mean all 0. A max-pool window that
//! covers only padding gives the lowest value (-inf); an average-pool window that counts no
//! element gives NaN (0/0). With `count_include_pad`, the divisor counts the window positions
//! inside the padded extent (`[-pad_begin, D + pad_end)`), so a window that `ceil_mode`
//! extends past the trailing padding is not divided by its full size (as PyTorch and
//! onnxruntime do).

use ndarray::{ArrayD, ArrayView2, ArrayViewMut2};

use super::common::*;
use crate::op::{ConvAttrs, PoolAttrs, PoolKind};
use crate::tensor::Tensor;

/// Marks a tap that falls into padding.
const PAD: usize = usize::MAX;

/// Per-axis geometry: strides, begin and end pads, dilations.
struct Geom {
    strides: Vec<usize>,
    pb: Vec<usize>,
    pe: Vec<usize>,
    dil: Vec<usize>,
}

fn geom(strides: &[u64], pads: &[u64], dil: &[u64], s: usize) -> R<Geom> {
    let conv = |v: &[u64], n: usize, default: usize, what: &str| -> R<Vec<usize>> {
        if v.is_empty() {
            return Ok(vec![default; n]);
        }
        if v.len() != n {
            bail!("{what} has {} entries, expected {n}", v.len());
        }
        v.iter().map(|&x| to_usize(x)).collect()
    };
    let strides = conv(strides, s, 1, "strides")?;
    let pads = conv(pads, 2 * s, 0, "pads")?;
    let dil = conv(dil, s, 1, "dilations")?;
    if strides.contains(&0) {
        bail!("strides must be positive, got {strides:?}");
    }
    if dil.contains(&0) {
        bail!("dilations must be positive, got {dil:?}");
    }
    Ok(Geom {
        strides,
        pb: pads[..s].to_vec(),
        pe: pads[s..].to_vec(),
        dil,
    })
}

/// Output extent of a window sweep ([`crate::infer::window_extent`]).
fn out_extent(d: usize, k: usize, g: &Geom, axis: usize, ceil: bool) -> R<usize> {
    let u = |x: usize| x as u64;
    let n = crate::infer::window_extent(
        u(d),
        u(k),
        u(g.strides[axis]),
        u(g.pb[axis]),
        u(g.pe[axis]),
        u(g.dil[axis]),
        ceil,
    )
    .map_err(|e| ierr!("spatial axis {axis}: {}", e.message))?;
    to_usize(n)
}

/// For every kernel tap `kk` and output position `oo` (both flattened), the flattened input
/// spatial offset that tap reads, or [`PAD`].
fn tap_table(in_sp: &[usize], k_sp: &[usize], out_sp: &[usize], g: &Geom) -> R<Vec<usize>> {
    let s = in_sp.len();
    // Per axis: idx[d][k][o] as Option.
    let per_axis: Vec<Vec<Vec<Option<usize>>>> = (0..s)
        .map(|d| {
            (0..k_sp[d])
                .map(|k| {
                    (0..out_sp[d])
                        .map(|o| {
                            let i = (o * g.strides[d] + k * g.dil[d]) as i128 - g.pb[d] as i128;
                            (i >= 0 && i < in_sp[d] as i128).then_some(i as usize)
                        })
                        .collect()
                })
                .collect()
        })
        .collect();
    let kk_n = numel(k_sp)?;
    let oo_n = numel(out_sp)?;
    let total = kk_n
        .checked_mul(oo_n)
        .ok_or_else(|| ierr!("im2col table too large"))?;
    numel(&[total])?;
    check_alloc(total, size_of::<usize>(), "the tap table")?;
    let ist = strides_of(in_sp);
    let mut table = Vec::with_capacity(total);
    for kk in 0..kk_n {
        let kidx = unflatten(kk, k_sp);
        for oo in 0..oo_n {
            let oidx = unflatten(oo, out_sp);
            let mut off = 0usize;
            let mut pad = false;
            for d in 0..s {
                match per_axis[d][kidx[d]][oidx[d]] {
                    Some(i) => off += i * ist[d],
                    None => pad = true,
                }
            }
            table.push(if pad { PAD } else { off });
        }
    }
    Ok(table)
}

fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn spatial_rank(x: &[usize], what: &str) -> R<usize> {
    if x.len() < 3 {
        bail!("{what} must be [N, C, D...] with at least one spatial axis, got shape {x:?}");
    }
    Ok(x.len() - 2)
}

/// Convolution (cross-correlation).
pub(crate) fn conv(xs: &[&Tensor], attrs: &ConvAttrs) -> R<Tensor> {
    all_same_elem(xs)?;
    dispatch_float!(xs[0].elem(), F => {
        let bias = match xs.get(2) {
            Some(b) => Some(arr::<F>(b)?),
            None => None,
        };
        conv_t::<F>(arr::<F>(xs[0])?, arr::<F>(xs[1])?, bias, attrs).map(F::wrap)
    })
}

fn check_bias<F>(bias: Option<&ArrayD<F>>, m: usize) -> R<()> {
    if let Some(b) = bias
        && b.shape() != [m]
    {
        bail!("bias must have shape [{m}], got {:?}", b.shape());
    }
    Ok(())
}

fn add_bias<F: Float>(out: &mut [F], bias: Option<&ArrayD<F>>, n: usize, m: usize, plane: usize) {
    if let Some(b) = bias {
        let bv: Vec<F> = b.iter().copied().collect();
        for i in 0..n {
            for (mi, &bm) in bv.iter().enumerate() {
                let start = (i * m + mi) * plane;
                for v in &mut out[start..start + plane] {
                    *v += bm;
                }
            }
        }
    }
}

fn conv_t<F: Float>(
    x: &ArrayD<F>,
    w: &ArrayD<F>,
    bias: Option<&ArrayD<F>>,
    attrs: &ConvAttrs,
) -> R<ArrayD<F>> {
    let s = spatial_rank(x.shape(), "input")?;
    if w.ndim() != x.ndim() {
        bail!(
            "weight rank {} differs from input rank {}",
            w.ndim(),
            x.ndim()
        );
    }
    let g = geom(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let groups = to_usize(attrs.groups)?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let (m, cg) = (w.shape()[0], w.shape()[1]);
    if groups == 0 || cg.checked_mul(groups) != Some(c) || m % groups != 0 {
        bail!(
            "channels do not match groups: input has {c} channels, weight is {:?}, groups = {groups}",
            w.shape()
        );
    }
    check_bias(bias, m)?;
    let mg = m / groups;
    let in_sp = &x.shape()[2..];
    let k_sp = &w.shape()[2..];
    let out_sp = (0..s)
        .map(|d| out_extent(in_sp[d], k_sp[d], &g, d, false))
        .collect::<R<Vec<_>>>()?;
    let mut out_shape = vec![n, m];
    out_shape.extend(&out_sp);
    let total = numel(&out_shape)?;
    let (ii, kk, oo) = (numel(in_sp)?, numel(k_sp)?, numel(&out_sp)?);
    let rows = cg
        .checked_mul(kk)
        .ok_or_else(|| ierr!("kernel too large"))?;
    let xd = row_major(x.view());
    let wd = row_major(w.view());
    let mut out = vec![F::zero(); total];
    let pointwise = k_sp.iter().all(|&k| k == 1)
        && g.strides.iter().all(|&s| s == 1)
        && g.pb.iter().chain(&g.pe).all(|&p| p == 0);
    let table = if pointwise || total == 0 {
        vec![]
    } else {
        tap_table(in_sp, k_sp, &out_sp, &g)?
    };
    let mut cols = vec![
        F::zero();
        if pointwise || total == 0 {
            0
        } else {
            numel(&[rows, oo])?
        }
    ];
    if total > 0 && rows > 0 {
        for ni in 0..n {
            for gi in 0..groups {
                let x0 = (ni * c + gi * cg) * ii;
                let colv = if pointwise {
                    ArrayView2::from_shape((rows, oo), &xd[x0..x0 + cg * ii])
                } else {
                    for ci in 0..cg {
                        let plane = &xd[x0 + ci * ii..x0 + (ci + 1) * ii];
                        for k in 0..kk {
                            let row = &mut cols[(ci * kk + k) * oo..(ci * kk + k + 1) * oo];
                            let taps = &table[k * oo..(k + 1) * oo];
                            for (r, &t) in row.iter_mut().zip(taps) {
                                *r = if t == PAD { F::zero() } else { plane[t] };
                            }
                        }
                    }
                    ArrayView2::from_shape((rows, oo), &cols[..])
                }
                .map_err(|e| ierr!("internal: {e}"))?;
                let wv =
                    ArrayView2::from_shape((mg, rows), &wd[gi * mg * rows..(gi + 1) * mg * rows])
                        .map_err(|e| ierr!("internal: {e}"))?;
                let o0 = (ni * m + gi * mg) * oo;
                let mut ov = ArrayViewMut2::from_shape((mg, oo), &mut out[o0..o0 + mg * oo])
                    .map_err(|e| ierr!("internal: {e}"))?;
                F::gemm(F::one(), wv, colv, &mut ov);
            }
        }
    }
    add_bias(&mut out, bias, n, m, oo);
    from_vec(&out_shape, out)
}

/// Transposed convolution.
pub(crate) fn conv_transpose(
    xs: &[&Tensor],
    attrs: &ConvAttrs,
    output_padding: &[u64],
) -> R<Tensor> {
    all_same_elem(xs)?;
    dispatch_float!(xs[0].elem(), F => {
        let bias = match xs.get(2) {
            Some(b) => Some(arr::<F>(b)?),
            None => None,
        };
        conv_transpose_t::<F>(arr::<F>(xs[0])?, arr::<F>(xs[1])?, bias, attrs, output_padding).map(F::wrap)
    })
}

fn conv_transpose_t<F: Float>(
    x: &ArrayD<F>,
    w: &ArrayD<F>,
    bias: Option<&ArrayD<F>>,
    attrs: &ConvAttrs,
    output_padding: &[u64],
) -> R<ArrayD<F>> {
    let s = spatial_rank(x.shape(), "input")?;
    if w.ndim() != x.ndim() {
        bail!(
            "weight rank {} differs from input rank {}",
            w.ndim(),
            x.ndim()
        );
    }
    let g = geom(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let opad: Vec<usize> = if output_padding.is_empty() {
        vec![0; s]
    } else if output_padding.len() != s {
        bail!(
            "output_padding has {} entries, expected {s}",
            output_padding.len()
        );
    } else {
        output_padding
            .iter()
            .map(|&p| to_usize(p))
            .collect::<R<_>>()?
    };
    let groups = to_usize(attrs.groups)?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let mg = w.shape()[1];
    if groups == 0 || w.shape()[0] != c || c % groups != 0 {
        bail!(
            "channels do not match groups: input has {c} channels, weight is {:?}, groups = {groups}",
            w.shape()
        );
    }
    let cg = c / groups;
    let m = mg
        .checked_mul(groups)
        .ok_or_else(|| ierr!("too many channels"))?;
    check_bias(bias, m)?;
    let in_sp = &x.shape()[2..];
    let k_sp = &w.shape()[2..];
    let mut out_sp = Vec::with_capacity(s);
    for d in 0..s {
        if k_sp[d] == 0 {
            bail!("kernel extent of spatial axis {d} is 0");
        }
        let full = (g.strides[d] as i128) * (in_sp[d] as i128 - 1)
            + opad[d] as i128
            + (g.dil[d] as i128) * (k_sp[d] as i128 - 1)
            + 1
            - g.pb[d] as i128
            - g.pe[d] as i128;
        if full < 0 || full > isize::MAX as i128 {
            bail!("invalid output extent {full} on spatial axis {d}");
        }
        out_sp.push(full as usize);
    }
    let mut out_shape = vec![n, m];
    out_shape.extend(&out_sp);
    let total = numel(&out_shape)?;
    let (ii, kk, oo) = (numel(in_sp)?, numel(k_sp)?, numel(&out_sp)?);
    let rows = numel(&[mg, kk])?;
    let mut out = vec![F::zero(); total];
    if total > 0 && ii > 0 && kk > 0 {
        // table[k][i]: output offset that input position i feeds through tap k.
        let ost = strides_of(&out_sp);
        let table_len = numel(&[kk, ii])?;
        check_alloc(table_len, size_of::<usize>(), "the tap table")?;
        let mut table = Vec::with_capacity(table_len);
        for k in 0..kk {
            let kidx = unflatten(k, k_sp);
            for i in 0..ii {
                let iidx = unflatten(i, in_sp);
                let mut off = 0usize;
                let mut pad = false;
                for d in 0..s {
                    let o = (iidx[d] * g.strides[d] + kidx[d] * g.dil[d]) as i128 - g.pb[d] as i128;
                    if o < 0 || o >= out_sp[d] as i128 {
                        pad = true;
                    } else {
                        off += o as usize * ost[d];
                    }
                }
                table.push(if pad { PAD } else { off });
            }
        }
        let xd = row_major(x.view());
        let wd = row_major(w.view());
        let mut cols = ndarray::Array2::from_elem((rows, ii), F::zero());
        for ni in 0..n {
            for gi in 0..groups {
                let x0 = (ni * c + gi * cg) * ii;
                let xv = ArrayView2::from_shape((cg, ii), &xd[x0..x0 + cg * ii])
                    .map_err(|e| ierr!("internal: {e}"))?;
                let wv =
                    ArrayView2::from_shape((cg, rows), &wd[gi * cg * rows..(gi + 1) * cg * rows])
                        .map_err(|e| ierr!("internal: {e}"))?;
                F::gemm(F::one(), wv.t(), xv, &mut cols.view_mut());
                for mi in 0..mg {
                    let o0 = (ni * m + gi * mg + mi) * oo;
                    let plane = &mut out[o0..o0 + oo];
                    for k in 0..kk {
                        let row = cols.row(mi * kk + k);
                        let taps = &table[k * ii..(k + 1) * ii];
                        for (&t, &v) in taps.iter().zip(row.iter()) {
                            if t != PAD {
                                plane[t] += v;
                            }
                        }
                    }
                }
            }
        }
    }
    add_bias(&mut out, bias, n, m, oo);
    from_vec(&out_shape, out)
}

/// Max or average pooling.
pub(crate) fn pool(x: &Tensor, attrs: &PoolAttrs) -> R<Tensor> {
    match attrs.kind {
        PoolKind::Max => {
            dispatch_num!(x.elem(), T => pool_t::<T>(arr::<T>(x)?, attrs).map(T::wrap))
        }
        PoolKind::Avg => {
            dispatch_float!(x.elem(), T => pool_t::<T>(arr::<T>(x)?, attrs).map(T::wrap))
        }
    }
}

fn pool_t<T: Num>(x: &ArrayD<T>, attrs: &PoolAttrs) -> R<ArrayD<T>> {
    let s = spatial_rank(x.shape(), "input")?;
    if attrs.kernel.len() != s {
        bail!("kernel has {} entries, expected {s}", attrs.kernel.len());
    }
    let k_sp = attrs
        .kernel
        .iter()
        .map(|&k| to_usize(k))
        .collect::<R<Vec<_>>>()?;
    let g = geom(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let (n, c) = (x.shape()[0], x.shape()[1]);
    let in_sp = &x.shape()[2..];
    let out_sp = (0..s)
        .map(|d| out_extent(in_sp[d], k_sp[d], &g, d, attrs.ceil_mode))
        .collect::<R<Vec<_>>>()?;
    let mut out_shape = vec![n, c];
    out_shape.extend(&out_sp);
    let total = numel(&out_shape)?;
    let (ii, kk, oo) = (numel(in_sp)?, numel(&k_sp)?, numel(&out_sp)?);
    let mut out = Vec::with_capacity(total);
    if total > 0 {
        let table = tap_table(in_sp, &k_sp, &out_sp, &g)?;
        // Divisors for average pooling: the product over axes of the counted taps.
        let counts: Vec<usize> = if attrs.kind == PoolKind::Avg {
            let per_axis: Vec<Vec<usize>> = (0..s)
                .map(|d| {
                    (0..out_sp[d])
                        .map(|o| {
                            (0..k_sp[d])
                                .filter(|&k| {
                                    let i =
                                        (o * g.strides[d] + k * g.dil[d]) as i128 - g.pb[d] as i128;
                                    let hi = if attrs.count_include_pad {
                                        (in_sp[d] + g.pe[d]) as i128
                                    } else {
                                        in_sp[d] as i128
                                    };
                                    let lo = if attrs.count_include_pad {
                                        -(g.pb[d] as i128)
                                    } else {
                                        0
                                    };
                                    i >= lo && i < hi
                                })
                                .count()
                        })
                        .collect()
                })
                .collect();
            (0..oo)
                .map(|o| {
                    unflatten(o, &out_sp)
                        .iter()
                        .enumerate()
                        .map(|(d, &i)| per_axis[d][i])
                        .product()
                })
                .collect()
        } else {
            vec![]
        };
        let xd = row_major(x.view());
        for plane_i in 0..n * c {
            let plane = &xd[plane_i * ii..(plane_i + 1) * ii];
            for o in 0..oo {
                let taps = (0..kk)
                    .map(|k| table[k * oo + o])
                    .filter(|&t| t != PAD)
                    .map(|t| plane[t]);
                out.push(match attrs.kind {
                    PoolKind::Max => taps.fold(T::lowest(), T::max_nan),
                    PoolKind::Avg => {
                        let sum = taps.fold(0.0, |acc, v| acc + v.to_f64());
                        T::from_f64(sum / counts[o] as f64)
                    }
                });
            }
        }
    }
    from_vec(&out_shape, out)
}
