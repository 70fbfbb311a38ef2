//! Rules of the normalizations and pooling: `layer-norm`, `batch-norm` (its statistics
//! are operands: given, or computed from the batch by the `train` pass), `avg-pool`,
//! `max-pool`.

use tessera_ir::{
    BinaryOp as B, ConvAttrs, Dim, ElemType, Op, OpData, PadMode, ReduceKind as K, Scalar,
    UnaryOp as U, ValueId,
};

use super::{Bw, R, dims, g0};

/// `layer-norm` over axes `axis..`: with `xhat = (x - mean) * rstd` and `h = g * scale`,
/// `dx = rstd * (h - mean(h) - xhat * mean(h * xhat))`; the scale's gradient is `g * xhat`
/// and the bias's `g`, summed to their shapes.
pub(crate) fn layer_norm(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::LayerNorm { axis, epsilon } = data.op else {
        return Err(bw.err("internal error: not a layer-norm"));
    };
    let (x, scale) = (data.operands[0], data.operands[1]);
    let axes: Vec<usize> = (axis..bw.ty(x).rank()).collect();
    let mu = bw.reduce(K::Mean, x, axes.clone(), true)?;
    let xc = bw.sub(x, mu)?;
    let sq = bw.mul(xc, xc)?;
    let var = bw.reduce(K::Mean, sq, axes.clone(), true)?;
    let ve = bw.offset(var, epsilon)?;
    let sd = bw.un(U::Sqrt, ve)?;
    let rstd = bw.un(U::Reciprocal, sd)?;
    let xhat = bw.mul(xc, rstd)?;
    let dx = if want[0] {
        let h = bw.mul(g, scale)?;
        let mh = bw.reduce(K::Mean, h, axes.clone(), true)?;
        let hx = bw.mul(h, xhat)?;
        let mhx = bw.reduce(K::Mean, hx, axes.clone(), true)?;
        let t = bw.mul(xhat, mhx)?;
        let d = bw.sub(h, mh)?;
        let d = bw.sub(d, t)?;
        Some(bw.mul(d, rstd)?)
    } else {
        None
    };
    let dscale = if want[1] {
        let t = bw.mul(g, xhat)?;
        let s = bw.ty(scale).shape;
        Some(bw.sum_to(t, &s)?)
    } else {
        None
    };
    let mut out = vec![dx, dscale];
    if let Some(&bias) = data.operands.get(2) {
        out.push(if want[2] {
            let s = bw.ty(bias).shape;
            Some(bw.sum_to(g, &s)?)
        } else {
            None
        });
    }
    Ok(out)
}

/// `batch-norm` with given statistics: every operand's gradient (the statistics' too).
pub(crate) fn batch_norm(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::BatchNorm { epsilon } = data.op else {
        return Err(bw.err("internal error: not a batch-norm"));
    };
    let [x, scale, _bias, mean, var] = data.operands[..] else {
        return Err(bw.err("internal error: batch-norm takes five operands"));
    };
    let xs = bw.ty(x).shape;
    let r = xs.len();
    let cshape = bw.ty(scale).shape;
    // [C] -> [C, 1, ...] so that it broadcasts along axis 1 of x.
    let mut col: Vec<Dim> = vec![cshape[0].clone()];
    col.extend((2..r).map(|_| Dim::Static(1)));
    let axes: Vec<usize> = std::iter::once(0).chain(2..r).collect();
    let ve = bw.offset(var, epsilon)?;
    let sd = bw.un(U::Sqrt, ve)?;
    let inv = bw.un(U::Reciprocal, sd)?;
    let inv_c = bw.reshape(inv, &col)?;
    let scale_c = bw.reshape(scale, &col)?;
    let mean_c = bw.reshape(mean, &col)?;
    let xc = bw.sub(x, mean_c)?;
    let gsum = bw.reduce(K::Sum, g, axes.clone(), false)?;
    let gxc = bw.mul(g, xc)?;
    let gxc_sum = bw.reduce(K::Sum, gxc, axes.clone(), false)?;
    let dx = if want[0] {
        let k = bw.mul(scale_c, inv_c)?;
        Some(bw.mul(g, k)?)
    } else {
        None
    };
    let dscale = if want[1] {
        Some(bw.mul(gxc_sum, inv)?)
    } else {
        None
    };
    let dbias = if want[2] { Some(gsum) } else { None };
    let dmean = if want[3] {
        let t = bw.mul(gsum, scale)?;
        let t = bw.mul(t, inv)?;
        Some(bw.un(U::Neg, t)?)
    } else {
        None
    };
    let dvar = if want[4] {
        // -0.5 * scale * inv^3 * sum(g * (x - mean))
        let i2 = bw.mul(inv, inv)?;
        let i3 = bw.mul(i2, inv)?;
        let t = bw.mul(gxc_sum, scale)?;
        let t = bw.mul(t, i3)?;
        Some(bw.scale(t, -0.5)?)
    } else {
        None
    };
    Ok(vec![dx, dscale, dbias, dmean, dvar])
}

/// `avg-pool`: the output's gradient divided by each window's divisor, spread back over the
/// window by a transposed depthwise convolution with a kernel of ones.
pub(crate) fn avg_pool(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Pool(p) = &data.op else {
        return Err(bw.err("internal error: not a pool"));
    };
    let x = data.operands[0];
    let xs = bw.static_dims(x)?;
    let os = bw.static_dims(data.results[0])?;
    let e = bw.elem(x);
    let nsp = xs.len() - 2;
    let (d_in, d_out) = (&xs[2..], &os[2..]);
    // The divisor of every window: the taps it counts, a convolution of ones.
    let (ones_extent, lead): (Vec<u64>, Vec<u64>) = if p.count_include_pad {
        (
            (0..nsp)
                .map(|i| d_in[i] + p.pads[i] + p.pads[nsp + i])
                .collect(),
            vec![0; nsp],
        )
    } else {
        (d_in.to_vec(), p.pads[..nsp].to_vec())
    };
    let mut conv_pads = lead.clone();
    for i in 0..nsp {
        let need = p.strides[i] * (d_out[i] - 1) + p.dilations[i] * (p.kernel[i] - 1) + 1;
        let have = ones_extent[i] + lead[i];
        conv_pads.push(need.saturating_sub(have));
    }
    let mut one_shape = vec![1, 1];
    one_shape.extend(&ones_extent);
    let mut k_shape = vec![1, 1];
    k_shape.extend(&p.kernel);
    let ones = fill(bw, &one_shape, e, 1.0)?;
    let kernel = fill(bw, &k_shape, e, 1.0)?;
    let div = bw.op(
        Op::Conv(ConvAttrs {
            strides: p.strides.clone(),
            pads: conv_pads,
            dilations: p.dilations.clone(),
            groups: 1,
        }),
        &[ones, kernel],
    )?;
    if bw.static_dims(div)?[2..] != *d_out {
        return Err(bw.err("internal error: the divisors do not match the pooled extents"));
    }
    let share = bw.div(g, div)?;
    let c = xs[1];
    let mut w_shape = vec![c, 1];
    w_shape.extend(&p.kernel);
    let w = fill(bw, &w_shape, e, 1.0)?;
    let spread = bw.op(
        Op::ConvTranspose {
            conv: ConvAttrs {
                strides: p.strides.clone(),
                // No end padding, as for conv's input gradient: every tap a window read.
                pads: p.pads[..nsp]
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(0, nsp))
                    .collect(),
                dilations: p.dilations.clone(),
                groups: c,
            },
            output_padding: vec![0; nsp],
        },
        &[share, w],
    )?;
    // Taps past the input's end (ceil mode) are cropped; inputs no window reads get 0.
    let ss = bw.static_dims(spread)?;
    let r = xs.len();
    let mut pads = vec![0i64; 2 * r];
    for i in 0..r {
        pads[r + i] = xs[i] as i64 - ss[i] as i64;
    }
    let dx = if pads.iter().all(|&p| p == 0) {
        spread
    } else {
        bw.op(
            Op::Pad {
                pads,
                mode: PadMode::Constant,
                value: Scalar::Float(0.0),
            },
            &[spread],
        )?
    };
    Ok(vec![Some(dx)])
}

fn fill(bw: &mut Bw<'_>, shape: &[u64], elem: ElemType, value: f64) -> R<ValueId> {
    bw.op(
        Op::Fill {
            shape: dims(shape),
            elem,
            value: Scalar::Float(value),
        },
        &[],
    )
}

/// `max-pool`: the gradient of each window goes to the first position (in window order,
/// as PyTorch's argmax) that holds the window's maximum. Per kernel tap, the input seen by
/// that tap (a strided slice of the input padded with -inf) is compared with the result;
/// the hits not taken by an earlier tap get the gradient, placed back by the slice's rule.
pub(crate) fn max_pool(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Pool(p) = &data.op else {
        return Err(bw.err("internal error: not a pool"));
    };
    let (x, y) = (data.operands[0], data.results[0]);
    let xs = bw.static_dims(x)?;
    let ys = bw.static_dims(y)?;
    let r = xs.len();
    let nsp = r - 2;
    let mut pads = vec![0i64; 2 * r];
    for i in 0..nsp {
        let (pb, pe) = (p.pads[i], p.pads[nsp + i]);
        let reach = p.strides[i] * (ys[2 + i].max(1) - 1) + p.dilations[i] * (p.kernel[i] - 1) + 1;
        let extra = reach.saturating_sub(xs[2 + i] + pb + pe);
        pads[2 + i] = pb as i64;
        pads[r + 2 + i] = (pe + extra) as i64;
    }
    let xp = bw.op(
        Op::Pad {
            pads: pads.clone(),
            mode: PadMode::Constant,
            value: Scalar::Float(f64::NEG_INFINITY),
        },
        &[x],
    )?;
    let zero = bw.scalar(0.0, bw.elem(g))?;
    let taps: u64 = p.kernel.iter().product();
    let mut taken: Option<ValueId> = None;
    let mut acc: Option<ValueId> = None;
    for t in 0..taps {
        // The tap's index along each spatial axis (row-major over the kernel).
        let mut rest = t;
        let mut k = vec![0u64; nsp];
        for i in (0..nsp).rev() {
            k[i] = rest % p.kernel[i];
            rest /= p.kernel[i];
        }
        let starts: Vec<i64> = (0..nsp).map(|i| (k[i] * p.dilations[i]) as i64).collect();
        let ends: Vec<i64> = (0..nsp)
            .map(|i| starts[i] + (p.strides[i] * (ys[2 + i].max(1) - 1)) as i64 + 1)
            .collect();
        let id = {
            let v = bw.op(
                Op::Slice {
                    axes: (2..r).collect(),
                    starts,
                    ends,
                    steps: p.strides.iter().map(|&s| s as i64).collect(),
                },
                &[xp],
            )?;
            match bw.g.value(v).def {
                tessera_ir::ValueDef::Result(o, _) => o,
                tessera_ir::ValueDef::Input(_) => {
                    return Err(bw.err("internal error: a slice that is an input"));
                }
            }
        };
        let slice = bw.g.op(id).clone();
        let xk = slice.results[0];
        let mut hit = bw.bin(B::Equal, xk, y)?;
        if let Some(tk) = taken {
            let free = bw.un(U::Not, tk)?;
            hit = bw.bin(B::And, hit, free)?;
            taken = Some(bw.bin(B::Or, tk, hit)?);
        } else {
            taken = Some(hit);
        }
        let c = bw.select(hit, g, zero)?;
        let placed = super::shape::slice(bw, &slice, &[Some(c)], &[true])?[0]
            .ok_or_else(|| bw.err("internal error: no slice gradient"))?;
        acc = Some(match acc {
            None => placed,
            Some(a) => bw.add(a, placed)?,
        });
    }
    let acc = acc.ok_or_else(|| bw.err("internal error: a kernel without taps"))?;
    let crop: Vec<i64> = pads.iter().map(|&q| -q).collect();
    let dx = if crop.iter().all(|&q| q == 0) {
        acc
    } else {
        bw.op(
            Op::Pad {
                pads: crop,
                mode: PadMode::Constant,
                value: Scalar::Float(0.0),
            },
            &[acc],
        )?
    };
    Ok(vec![Some(dx)])
}
