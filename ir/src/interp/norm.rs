//! Normalizations: layer-norm, batch-norm, instance-norm, LRN. All float-only.
//!
//! Means and (population) variances accumulate in f64, two-pass. All operands share the
//! element type of `x`. LRN accepts any `[N, C, ...]` of rank >= 2 (ONNX requires rank 4 in
//! older opsets; the formula does not care). Instance norm needs rank >= 3.

use ndarray::{ArrayD, Axis, IxDyn};

use super::common::*;
use crate::tensor::Tensor;

fn mean_var(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let (n, s) = v.clone().fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    let mean = s / n as f64;
    let var = v.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
    (mean, var)
}

/// Layer normalization over axes `axis..rank`.
pub(crate) fn layer_norm(xs: &[&Tensor], axis: usize, eps: f64) -> R<Tensor> {
    all_same_elem(xs)?;
    dispatch_float!(xs[0].elem(), F => {
        let bias = match xs.get(2) {
            Some(b) => Some(arr::<F>(b)?),
            None => None,
        };
        layer_norm_t::<F>(arr::<F>(xs[0])?, arr::<F>(xs[1])?, bias, axis, eps).map(F::wrap)
    })
}

fn layer_norm_t<F: Float>(
    x: &ArrayD<F>,
    scale: &ArrayD<F>,
    bias: Option<&ArrayD<F>>,
    axis: usize,
    eps: f64,
) -> R<ArrayD<F>> {
    check_axis(axis, x.ndim())?;
    let norm_shape = &x.shape()[axis..];
    let inner = numel(norm_shape)?;
    let flat = |t: &ArrayD<F>, what: &str| -> R<Vec<F>> {
        let v = t.broadcast(IxDyn(norm_shape)).ok_or_else(|| {
            ierr!(
                "{what} of shape {:?} does not broadcast to the normalized shape {norm_shape:?}",
                t.shape()
            )
        })?;
        Ok(v.iter().copied().collect())
    };
    let s = flat(scale, "scale")?;
    let b = match bias {
        Some(b) => flat(b, "bias")?,
        None => vec![F::zero(); inner],
    };
    let data = row_major(x.view());
    let mut out = Vec::with_capacity(data.len());
    if inner > 0 {
        for row in data.chunks_exact(inner) {
            let (mean, var) = mean_var(row.iter().map(|v| v.to_f64()));
            let (mean, denom) = (F::c(mean), F::c((var + eps).sqrt()));
            out.extend(
                row.iter()
                    .zip(&s)
                    .zip(&b)
                    .map(|((&v, &s), &b)| (v - mean) / denom * s + b),
            );
        }
    }
    from_vec(x.shape(), out)
}

fn per_channel<'a, F: Float>(t: &'a Tensor, c: usize, what: &str) -> R<&'a ArrayD<F>> {
    let a = arr::<F>(t)?;
    if a.shape() != [c] {
        bail!("{what} must have shape [{c}], got {:?}", a.shape());
    }
    Ok(a)
}

/// Inference batch normalization.
pub(crate) fn batch_norm(
    x: &Tensor,
    s: &Tensor,
    b: &Tensor,
    m: &Tensor,
    v: &Tensor,
    eps: f64,
) -> R<Tensor> {
    all_same_elem(&[x, s, b, m, v])?;
    dispatch_float!(x.elem(), F => {
        let xa = arr::<F>(x)?;
        if xa.ndim() < 2 {
            bail!("input must be [N, C, ...], got shape {:?}", xa.shape());
        }
        let c = xa.shape()[1];
        let (s, b) = (per_channel::<F>(s, c, "scale")?, per_channel::<F>(b, c, "bias")?);
        let (m, v) = (per_channel::<F>(m, c, "mean")?, per_channel::<F>(v, c, "var")?);
        let eps = F::c(eps);
        let mut out = xa.as_standard_layout().into_owned();
        for (ci, mut plane) in out.axis_iter_mut(Axis(1)).enumerate() {
            let denom = (v[ci] + eps).sqrt();
            plane.mapv_inplace(|x| (x - m[ci]) / denom * s[ci] + b[ci]);
        }
        Ok(F::wrap(out))
    })
}

/// Instance normalization.
pub(crate) fn instance_norm(x: &Tensor, s: &Tensor, b: &Tensor, eps: f64) -> R<Tensor> {
    all_same_elem(&[x, s, b])?;
    dispatch_float!(x.elem(), F => {
        let xa = arr::<F>(x)?;
        if xa.ndim() < 3 {
            bail!("input must be [N, C, D...], got shape {:?}", xa.shape());
        }
        let c = xa.shape()[1];
        let (s, b) = (per_channel::<F>(s, c, "scale")?, per_channel::<F>(b, c, "bias")?);
        let plane = numel(&xa.shape()[2..])?;
        let data = row_major(xa.view());
        let mut out = Vec::with_capacity(data.len());
        if plane > 0 {
            for (i, p) in data.chunks_exact(plane).enumerate() {
                let ci = i % c;
                let (mean, var) = mean_var(p.iter().map(|v| v.to_f64()));
                let (mean, denom) = (F::c(mean), F::c((var + eps).sqrt()));
                out.extend(p.iter().map(|&v| (v - mean) / denom * s[ci] + b[ci]));
            }
        }
        from_vec(xa.shape(), out).map(F::wrap)
    })
}

/// Local response normalization across channels.
pub(crate) fn lrn(x: &Tensor, size: u64, alpha: f64, beta: f64, bias: f64) -> R<Tensor> {
    dispatch_float!(x.elem(), F => {
        let xa = arr::<F>(x)?;
        if xa.ndim() < 2 {
            bail!("input must be [N, C, ...], got shape {:?}", xa.shape());
        }
        if size == 0 {
            bail!("size must be positive");
        }
        let size = to_usize(size)?;
        let (before, after) = ((size - 1) / 2, size / 2);
        let (n, c) = (xa.shape()[0], xa.shape()[1]);
        let plane = numel(&xa.shape()[2..])?;
        let data = row_major(xa.view());
        let mut out = vec![F::zero(); data.len()];
        let scale = alpha / size as f64;
        for ni in 0..n {
            for ci in 0..c {
                let lo = ci.saturating_sub(before);
                let hi = (ci + after).min(c.saturating_sub(1));
                for p in 0..plane {
                    let at = |cc: usize| data[(ni * c + cc) * plane + p];
                    let sq: f64 = (lo..=hi).map(|cc| at(cc).to_f64().powi(2)).sum();
                    let d = (bias + scale * sq).powf(beta);
                    out[(ni * c + ci) * plane + p] = F::c(at(ci).to_f64() / d);
                }
            }
        }
        from_vec(xa.shape(), out).map(F::wrap)
    })
}
