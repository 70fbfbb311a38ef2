//! Rules of the contractions: `matmul`, `gemm`, `einsum`, `conv`, `conv-transpose`.

use tessera_ir::{ConvAttrs, Dim, Op, OpData, ReduceKind, ValueId, infer};

use super::{Bw, R, g0};

fn swap_last2(bw: &mut Bw<'_>, x: ValueId) -> R<ValueId> {
    let r = bw.ty(x).rank();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    bw.transpose(x, perm)
}

/// `matmul` (numpy semantics): 1-D operands are made 2-D first, batch broadcasting is
/// undone by summing.
pub(crate) fn matmul(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let (a, b) = (data.operands[0], data.operands[1]);
    let (at, bt) = (bw.ty(a), bw.ty(b));
    let a2 = if at.rank() == 1 {
        bw.reshape(a, &[Dim::Static(1), at.shape[0].clone()])?
    } else {
        a
    };
    let b2 = if bt.rank() == 1 {
        bw.reshape(b, &[bt.shape[0].clone(), Dim::Static(1)])?
    } else {
        b
    };
    let a2s = bw.ty(a2).shape;
    let b2s = bw.ty(b2).shape;
    let ys = infer::matmul_shape(&a2s, &b2s).map_err(|e| bw.err(e.message))?;
    let g2 = bw.reshape(g, &ys)?;
    let da = if want[0] {
        let bt2 = swap_last2(bw, b2)?;
        let d = bw.op(Op::MatMul, &[g2, bt2])?;
        let d = bw.sum_to(d, &a2s)?;
        Some(bw.reshape(d, &at.shape)?)
    } else {
        None
    };
    let db = if want[1] {
        let at2 = swap_last2(bw, a2)?;
        let d = bw.op(Op::MatMul, &[at2, g2])?;
        let d = bw.sum_to(d, &b2s)?;
        Some(bw.reshape(d, &bt.shape)?)
    } else {
        None
    };
    Ok(vec![da, db])
}

/// `gemm`: `alpha op(A) op(B) + beta C`.
pub(crate) fn gemm(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Gemm {
        alpha,
        beta,
        trans_a,
        trans_b,
    } = data.op
    else {
        return Err(bw.err("internal error: not a gemm"));
    };
    let (a, b) = (data.operands[0], data.operands[1]);
    let gemm = |ta: bool, tb: bool| Op::Gemm {
        alpha,
        beta: 0.0,
        trans_a: ta,
        trans_b: tb,
    };
    let da = if want[0] {
        Some(match (trans_a, trans_b) {
            (false, false) => bw.op(gemm(false, true), &[g, b])?,
            (false, true) => bw.op(gemm(false, false), &[g, b])?,
            (true, false) => bw.op(gemm(false, true), &[b, g])?,
            (true, true) => bw.op(gemm(true, true), &[b, g])?,
        })
    } else {
        None
    };
    let db = if want[1] {
        Some(match (trans_a, trans_b) {
            (false, false) => bw.op(gemm(true, false), &[a, g])?,
            (true, false) => bw.op(gemm(false, false), &[a, g])?,
            (false, true) => bw.op(gemm(true, false), &[g, a])?,
            (true, true) => bw.op(gemm(true, true), &[g, a])?,
        })
    } else {
        None
    };
    let mut out = vec![da, db];
    if let Some(&c) = data.operands.get(2) {
        out.push(if want[2] {
            let d = bw.scale(g, beta)?;
            let cs = bw.ty(c).shape;
            Some(bw.sum_to(d, &cs)?)
        } else {
            None
        });
    }
    Ok(out)
}

/// `einsum`: each operand's gradient is the einsum of the output's gradient with the other
/// operands. Needs every index of the operand, each once, in the output or another operand.
pub(crate) fn einsum(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Einsum { equation } = &data.op else {
        return Err(bw.err("internal error: not an einsum"));
    };
    let (inputs, output) = infer::parse_einsum(equation).map_err(|e| bw.err(e.message))?;
    let text = |s: &[char]| s.iter().collect::<String>();
    let mut out = Vec::new();
    for (i, sub) in inputs.iter().enumerate() {
        if !want[i] {
            out.push(None);
            continue;
        }
        let mut seen = Vec::new();
        for &c in sub {
            let elsewhere = output.contains(&c)
                || inputs
                    .iter()
                    .enumerate()
                    .any(|(j, s)| j != i && s.contains(&c));
            if seen.contains(&c) || !elsewhere {
                return Err(bw.err(format!(
                    "the gradient of einsum `{equation}` with respect to operand {i} is not supported (an index repeated or summed only there)"
                )));
            }
            seen.push(c);
        }
        let mut terms = vec![text(&output)];
        let mut operands = vec![g];
        for (j, s) in inputs.iter().enumerate() {
            if j != i {
                terms.push(text(s));
                operands.push(data.operands[j]);
            }
        }
        let eq = format!("{}->{}", terms.join(","), text(sub));
        out.push(Some(bw.op(Op::Einsum { equation: eq }, &operands)?));
    }
    Ok(out)
}

/// The gradient of a convolution's weight: `input` `[N, Cin, D...]` convolved (with the
/// attributes `conv`) into an output whose gradient is `out_grad` `[N, Cout, O...]`; the
/// result is `[Cout, Cin/groups, K...]` for the kernel extents `kernel`.
fn weight_grad(
    bw: &mut Bw<'_>,
    input: ValueId,
    out_grad: ValueId,
    conv: &ConvAttrs,
    kernel: &[u64],
) -> R<ValueId> {
    let groups = conv.groups as usize;
    let xs = bw.static_dims(input)?;
    let gs = bw.static_dims(out_grad)?;
    let rank = xs.len();
    let split = |bw: &mut Bw<'_>, v: ValueId, c: u64| -> R<Vec<ValueId>> {
        if groups == 1 {
            return Ok(vec![v]);
        }
        bw.ops(
            Op::Split {
                axis: 1,
                sizes: vec![c / groups as u64; groups],
            },
            &[v],
        )
    };
    let xg = split(bw, input, xs[1])?;
    let gg = split(bw, out_grad, gs[1])?;
    let mut swap: Vec<usize> = (0..rank).collect();
    swap.swap(0, 1);
    let mut pieces = Vec::with_capacity(groups);
    for (x, g) in xg.into_iter().zip(gg) {
        let xt = bw.transpose(x, swap.clone())?;
        let gt = bw.transpose(g, swap.clone())?;
        let c = bw.op(
            Op::Conv(ConvAttrs {
                strides: conv.dilations.clone(),
                pads: conv.pads.clone(),
                dilations: conv.strides.clone(),
                groups: 1,
            }),
            &[xt, gt],
        )?;
        // [Cin/g, Cout/g, K'...] with K' >= K: keep the first K of each spatial axis.
        let cs = bw.static_dims(c)?;
        let c = if cs[2..] != *kernel {
            bw.op(
                Op::Slice {
                    axes: (2..rank).collect(),
                    starts: vec![0; rank - 2],
                    ends: kernel.iter().map(|&k| k as i64).collect(),
                    steps: vec![1; rank - 2],
                },
                &[c],
            )?
        } else {
            c
        };
        pieces.push(bw.transpose(c, swap.clone())?);
    }
    if pieces.len() == 1 {
        Ok(pieces[0])
    } else {
        bw.op(Op::Concat { axis: 0 }, &pieces)
    }
}

/// Pads (zeros) or crops the spatial axes of `v` to the extents `target`.
fn fit_spatial(bw: &mut Bw<'_>, v: ValueId, target: &[u64]) -> R<ValueId> {
    let vs = bw.static_dims(v)?;
    if vs == target {
        return Ok(v);
    }
    let r = vs.len();
    let mut pads = vec![0i64; 2 * r];
    for i in 0..r {
        pads[r + i] = target[i] as i64 - vs[i] as i64;
    }
    bw.op(
        Op::Pad {
            pads,
            mode: tessera_ir::PadMode::Constant,
            value: tessera_ir::Scalar::Float(0.0),
        },
        &[v],
    )
}

/// The gradients of a channels-first op's input and weight, and of its optional bias
/// (operand 2: the output's gradient summed over every axis but 1).
fn with_bias(
    bw: &mut Bw<'_>,
    data: &OpData,
    want: &[bool],
    g: ValueId,
    dx: Option<ValueId>,
    dw: Option<ValueId>,
) -> R<Vec<Option<ValueId>>> {
    let mut out = vec![dx, dw];
    if data.operands.len() > 2 {
        out.push(if want[2] {
            let r = bw.ty(g).rank();
            let axes: Vec<usize> = std::iter::once(0).chain(2..r).collect();
            Some(bw.reduce(ReduceKind::Sum, g, axes, false)?)
        } else {
            None
        });
    }
    Ok(out)
}

/// `conv`: the input's gradient is a transposed convolution of the output's gradient with
/// the same weight; the weight's is a convolution of the input with the output's gradient.
pub(crate) fn conv(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Conv(attrs) = &data.op else {
        return Err(bw.err("internal error: not a conv"));
    };
    let (x, w) = (data.operands[0], data.operands[1]);
    let xs = bw.static_dims(x)?;
    let ws = bw.static_dims(w)?;
    let nsp = xs.len() - 2;
    let dx = if want[0] {
        // No end padding: the transposed convolution then reaches every input position a
        // window read (the forward end padding can hide some from it), and the result is
        // cut or zero-padded to the input's extents.
        let mut spread = attrs.clone();
        spread.pads[nsp..].fill(0);
        let t = bw.op(
            Op::ConvTranspose {
                conv: spread,
                output_padding: vec![0; nsp],
            },
            &[g, w],
        )?;
        Some(fit_spatial(bw, t, &xs)?)
    } else {
        None
    };
    let dw = if want[1] {
        Some(weight_grad(bw, x, g, attrs, &ws[2..])?)
    } else {
        None
    };
    with_bias(bw, data, want, g, dx, dw)
}

/// `conv-transpose`: the adjoint of `conv`, so the input's gradient is a convolution.
pub(crate) fn conv_transpose(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::ConvTranspose { conv, .. } = &data.op else {
        return Err(bw.err("internal error: not a conv-transpose"));
    };
    let (x, w) = (data.operands[0], data.operands[1]);
    let xs = bw.static_dims(x)?;
    let ws = bw.static_dims(w)?;
    let dx = if want[0] {
        let c = bw.op(Op::Conv(conv.clone()), &[g, w])?;
        let cs = bw.static_dims(c)?;
        if cs != xs {
            return Err(bw.err(format!(
                "internal error: the input gradient is {cs:?}, not {xs:?}"
            )));
        }
        Some(c)
    } else {
        None
    };
    let dw = if want[1] {
        Some(weight_grad(bw, g, x, conv, &ws[2..])?)
    } else {
        None
    };
    with_bias(bw, data, want, g, dx, dw)
}
