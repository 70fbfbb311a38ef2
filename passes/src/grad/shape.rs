//! Rules of the data-movement ops: `reshape`, `transpose`, `expand`, `concat`, `split`,
//! `slice`, `pad`, `tile`, `trilu`, and the communication ops (the identity on the logical
//! tensor).

use tessera_ir::{Dim, Op, OpData, PadMode, ReduceKind as K, Scalar, ValueId, infer};

use super::{Bw, R, dims, g0};

/// `transfer`, `all-reduce`, `all-gather`: the gradient passes unchanged.
pub(crate) fn identity(
    bw: &mut Bw<'_>,
    _data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    Ok(vec![Some(g0(bw, cots)?)])
}

pub(crate) fn reshape(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let s = bw.ty(data.operands[0]).shape;
    Ok(vec![Some(bw.reshape(g, &s)?)])
}

pub(crate) fn transpose(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Transpose { perm } = &data.op else {
        return Err(bw.err("internal error: not a transpose"));
    };
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    Ok(vec![Some(bw.transpose(g, inv)?)])
}

pub(crate) fn expand(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let s = bw.ty(data.operands[0]).shape;
    Ok(vec![Some(bw.sum_to(g, &s)?)])
}

/// `concat`: the gradient split back into the operands' extents.
pub(crate) fn concat(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Concat { axis } = data.op else {
        return Err(bw.err("internal error: not a concat"));
    };
    let mut sizes = Vec::with_capacity(data.operands.len());
    for &v in &data.operands {
        match bw.ty(v).shape[axis] {
            Dim::Static(n) => sizes.push(n),
            Dim::Sym(_) => {
                return Err(bw.err("its gradient needs the concatenated extents to be static"));
            }
        }
    }
    let pieces = bw.ops(Op::Split { axis, sizes }, &[g])?;
    Ok(pieces
        .into_iter()
        .zip(want)
        .map(|(p, &w)| w.then_some(p))
        .collect())
}

/// `split`: the pieces' gradients concatenated (zeros for pieces without one).
pub(crate) fn split(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let Op::Split { axis, .. } = data.op else {
        return Err(bw.err("internal error: not a split"));
    };
    let mut parts = Vec::with_capacity(cots.len());
    for (&r, c) in data.results.iter().zip(cots) {
        parts.push(match c {
            Some(c) => *c,
            None => {
                let t = bw.ty(r);
                bw.fill(&t, 0.0)?
            }
        });
    }
    if parts.is_empty() {
        return Ok(vec![None]);
    }
    let d = if parts.len() == 1 {
        parts[0]
    } else {
        bw.op(Op::Concat { axis }, &parts)?
    };
    Ok(vec![Some(d)])
}

fn zero_pad(bw: &mut Bw<'_>, v: ValueId, pads: Vec<i64>) -> R<ValueId> {
    if pads.iter().all(|&p| p == 0) {
        return Ok(v);
    }
    bw.op(
        Op::Pad {
            pads,
            mode: PadMode::Constant,
            value: Scalar::Float(0.0),
        },
        &[v],
    )
}

/// `slice`: the gradient placed back at the sliced positions, zeros elsewhere: per axis, a
/// step `s` interleaves `s - 1` zeros after each element (a pad of a new axis and a
/// reshape), then pads place the run; negative steps reverse the gradient first.
pub(crate) fn slice(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Slice {
        axes,
        starts,
        ends,
        steps,
    } = &data.op
    else {
        return Err(bw.err("internal error: not a slice"));
    };
    let x = data.operands[0];
    let xs = bw.static_dims(x)?;
    let r = xs.len();
    let mut cur = g;
    for (i, &axis) in axes.iter().enumerate() {
        let d = xs[axis] as i64;
        let (start, end, step) = (starts[i], ends[i], steps[i]);
        let len = infer::slice_len(xs[axis], start, end, step) as i64;
        if len == 0 {
            let t = bw.ty(x);
            return Ok(vec![Some(bw.fill(&t, 0.0)?)]);
        }
        // The first index taken, clamped as the op does.
        let first = if step > 0 {
            (if start < 0 { start + d } else { start }).clamp(0, d)
        } else {
            (if start < 0 { start + d } else { start }).clamp(-1, d - 1)
        };
        // The lowest index taken, and the gradient in increasing index order.
        let (low, s) = if step > 0 {
            (first, step)
        } else {
            let rev = bw.op(
                Op::Slice {
                    axes: vec![axis],
                    starts: vec![-1],
                    ends: vec![i64::MIN],
                    steps: vec![-1],
                },
                &[cur],
            )?;
            cur = rev;
            (first + (len - 1) * step, -step)
        };
        let cs = bw.ty(cur).shape;
        if s > 1 {
            // [.., len, ..] -> [.., len, 1, ..] -> pad to [.., len, s, ..] -> [.., len*s, ..]
            let mut with_axis = cs.clone();
            with_axis.insert(axis + 1, Dim::Static(1));
            let v = bw.reshape(cur, &with_axis)?;
            let mut pads = vec![0i64; 2 * (r + 1)];
            pads[r + 1 + axis + 1] = s - 1;
            let v = zero_pad(bw, v, pads)?;
            let mut merged = cs.clone();
            merged[axis] = Dim::Static((len * s) as u64);
            cur = bw.reshape(v, &merged)?;
        }
        let run = if s > 1 { len * s } else { len };
        let mut pads = vec![0i64; 2 * r];
        pads[axis] = low;
        pads[r + axis] = d - low - run;
        cur = zero_pad(bw, cur, pads)?;
    }
    Ok(vec![Some(cur)])
}

/// `pad` with a constant: the inverse crop (a pad by the negated amounts).
pub(crate) fn pad(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Pad { pads, mode, .. } = &data.op else {
        return Err(bw.err("internal error: not a pad"));
    };
    if *mode != PadMode::Constant {
        return Err(bw.err(format!(
            "the gradient of `{}` padding is not implemented (only constant padding)",
            match mode {
                PadMode::Reflect => "reflect",
                PadMode::Edge => "edge",
                PadMode::Wrap => "wrap",
                PadMode::Constant => "constant",
            }
        )));
    }
    let neg: Vec<i64> = pads.iter().map(|&p| -p).collect();
    Ok(vec![Some(zero_pad(bw, g, neg)?)])
}

/// `tile`: the gradient of every copy summed: `[r0*d0, ...]` as `[r0, d0, ...]`, summed
/// over the repeat axes.
pub(crate) fn tile(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Tile { repeats } = &data.op else {
        return Err(bw.err("internal error: not a tile"));
    };
    let x = data.operands[0];
    let xs = bw.static_dims(x)?;
    let mut split = Vec::with_capacity(2 * xs.len());
    for (&r, &d) in repeats.iter().zip(&xs) {
        split.push(r);
        split.push(d);
    }
    let v = bw.reshape(g, &dims(&split))?;
    let axes: Vec<usize> = (0..xs.len()).map(|i| 2 * i).collect();
    let s = bw.reduce(K::Sum, v, axes, false)?;
    let shape = bw.ty(x).shape;
    Ok(vec![Some(bw.reshape(s, &shape)?)])
}

/// `trilu`: the same triangle of the gradient.
pub(crate) fn trilu(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    Ok(vec![Some(bw.op(data.op.clone(), &[g])?)])
}
