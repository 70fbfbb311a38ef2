//! Resize (interpolation) over any number of axes.
//!
//! For every axis, output index `o` maps to the source coordinate given by the
//! [`CoordTransform`] with scale `out / in`. Then:
//! - nearest: rounds per [`NearestMode`] and clamps to `[0, in - 1]`; works on every element
//!   type;
//! - linear: clamps the coordinate to `[0, in - 1]` and blends the two neighbours;
//! - cubic: the four neighbours `floor(x) - 1 ..= floor(x) + 2`, indices clamped to the edge
//!   (ONNX `exclude_outside = 0`), weighted by the cubic convolution kernel with coefficient
//!   `a = cubic_coeff`.
//!
//! Linear and cubic are float-only and separable: they interpolate one axis after another
//! (mathematically the same as the N-linear/N-cubic formula; rounding may differ in the last
//! bits), over every axis whose mapping is not the identity. Any rank and any set of resized
//! axes is supported. Resizing an empty axis to a non-empty one is an error.

use ndarray::{ArrayD, Axis, IxDyn};

use super::common::*;
use crate::op::{CoordTransform, NearestMode, ResizeMode};
use crate::tensor::Tensor;

fn src_coord(o: usize, inn: usize, out: usize, coord: CoordTransform) -> f64 {
    let (o, fi, fo) = (o as f64, inn as f64, out as f64);
    let scale = fo / fi;
    match coord {
        CoordTransform::HalfPixel => (o + 0.5) / scale - 0.5,
        CoordTransform::PytorchHalfPixel => {
            if out > 1 {
                (o + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        CoordTransform::AlignCorners => {
            if out == 1 {
                0.0
            } else {
                o * (fi - 1.0) / (fo - 1.0)
            }
        }
        CoordTransform::Asymmetric => o / scale,
    }
}

fn clamp_index(i: f64, inn: usize) -> usize {
    if i.is_nan() || i <= 0.0 {
        0
    } else if i >= (inn - 1) as f64 {
        inn - 1
    } else {
        i as usize
    }
}

fn cubic_weight(d: f64, a: f64) -> f64 {
    let d = d.abs();
    if d <= 1.0 {
        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    } else if d < 2.0 {
        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    } else {
        0.0
    }
}

/// Resize to `sizes`.
/// The taps of one axis of `resize` from extent `inn` to `out`: for every output index, the
/// (source index, weight) pairs it sums (one for nearest, up to two for linear, up to four for
/// cubic with coefficient `cubic_coeff`; zero weights left out). The compiled lowering uses
/// the same tables, so both agree to the bit.
pub fn resize_taps(
    inn: usize,
    out: usize,
    mode: ResizeMode,
    coord: CoordTransform,
    nearest: NearestMode,
    cubic_coeff: f64,
) -> Vec<Vec<(usize, f64)>> {
    (0..out)
        .map(|o| {
            let c = src_coord(o, inn, out, coord);
            match mode {
                ResizeMode::Nearest => {
                    let r = match nearest {
                        NearestMode::RoundPreferFloor => (c - 0.5).ceil(),
                        NearestMode::RoundPreferCeil => (c + 0.5).floor(),
                        NearestMode::Floor => c.floor(),
                        NearestMode::Ceil => c.ceil(),
                    };
                    vec![(clamp_index(r, inn), 1.0)]
                }
                ResizeMode::Linear => {
                    let c = c.clamp(0.0, (inn - 1) as f64);
                    let i0 = c.floor();
                    let w = c - i0;
                    let i0 = i0 as usize;
                    let mut t = vec![(i0, 1.0 - w)];
                    if w > 0.0 {
                        t.push(((i0 + 1).min(inn - 1), w));
                    }
                    t
                }
                ResizeMode::Cubic => {
                    let f = c.floor();
                    let t = c - f;
                    (-1i32..=2)
                        .filter_map(|j| {
                            let w = cubic_weight(t - f64::from(j), cubic_coeff);
                            (w != 0.0).then(|| (clamp_index(f + f64::from(j), inn), w))
                        })
                        .collect()
                }
            }
        })
        .collect()
}

pub(crate) fn resize(
    x: &Tensor,
    sizes: &[u64],
    mode: ResizeMode,
    coord: CoordTransform,
    nearest: NearestMode,
    cubic_coeff: f64,
) -> R<Tensor> {
    let shape = x.shape().to_vec();
    if sizes.len() != shape.len() {
        bail!(
            "sizes has {} entries, expected {} (the rank)",
            sizes.len(),
            shape.len()
        );
    }
    let sizes = sizes.iter().map(|&s| to_usize(s)).collect::<R<Vec<_>>>()?;
    numel_of(&sizes, x.elem())?;
    for (d, (&i, &o)) in shape.iter().zip(&sizes).enumerate() {
        if i == 0 && o > 0 {
            bail!("cannot resize empty axis {d} to extent {o}");
        }
    }
    if sizes.contains(&0) {
        // No tap tables for an empty result: they would be as long as the other extents.
        return match mode {
            ResizeMode::Nearest => {
                dispatch_any!(x.elem(), T => from_vec(&sizes, Vec::<T>::new()).map(T::wrap))
            }
            _ => dispatch_float!(x.elem(), F => from_vec(&sizes, Vec::<F>::new()).map(F::wrap)),
        };
    }
    for &o in &sizes {
        // Up to four (index, weight) taps per output index, in a vector of their own.
        check_alloc(
            o,
            4 * size_of::<(usize, f64)>() + size_of::<Vec<(usize, f64)>>(),
            "the tap table of resize",
        )?;
    }
    // Taps per axis and output index: (source index, weight).
    let taps: Vec<Vec<Vec<(usize, f64)>>> = shape
        .iter()
        .zip(&sizes)
        .map(|(&inn, &out)| resize_taps(inn, out, mode, coord, nearest, cubic_coeff))
        .collect();
    let identity = |t: &Vec<Vec<(usize, f64)>>, inn: usize| {
        t.len() == inn
            && t.iter()
                .enumerate()
                .all(|(o, v)| v.as_slice() == [(o, 1.0)])
    };
    match mode {
        ResizeMode::Nearest => {
            let maps: Vec<Vec<Option<usize>>> = taps
                .iter()
                .map(|t| t.iter().map(|v| Some(v[0].0)).collect())
                .collect();
            dispatch_any!(x.elem(), T => remap(arr::<T>(x)?, &maps, T::zero()).map(T::wrap))
        }
        _ => dispatch_float!(x.elem(), F => {
            let mut cur = arr::<F>(x)?.clone();
            for (axis, t) in taps.iter().enumerate() {
                if !identity(t, shape[axis]) {
                    cur = interp_axis(&cur, axis, t);
                }
            }
            Ok(F::wrap(cur))
        }),
    }
}

fn interp_axis<F: Float>(x: &ArrayD<F>, axis: usize, taps: &[Vec<(usize, f64)>]) -> ArrayD<F> {
    let mut shape = x.shape().to_vec();
    shape[axis] = taps.len();
    let mut out = ArrayD::from_elem(IxDyn(&shape), F::zero());
    for (mut ol, il) in out
        .lanes_mut(Axis(axis))
        .into_iter()
        .zip(x.lanes(Axis(axis)))
    {
        for (o, t) in taps.iter().enumerate() {
            ol[o] = F::c(t.iter().map(|&(i, w)| w * il[i].to_f64()).sum());
        }
    }
    out
}
