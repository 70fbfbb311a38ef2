//! Attention ONNX ops: Attention (opset 23+, with the sliding window of opset 25) and
//! RotaryEmbedding (opset 23), composed from matmuls, softmax, selects and reshapes.

use tessera_ir::{
    BinaryOp, Dim, ElemType, Op, PadMode, ReduceKind, Scalar, Tensor, UnaryOp, ValueId,
};

use super::Arity;
use super::{
    Node, Registry, bin, cast_to, constant, input, opt_input, reshape, scalar, slice_axis,
    transpose, un,
};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("Attention", &[(23, 3, 6), (24, 3, 7)]),
    ("RotaryEmbedding", &[(23, 3, 4)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("Attention", 23, attention);
    r.add("RotaryEmbedding", 23, rotary_embedding);
}

/// A static extent, or an error naming what needs it.
fn static_dim(d: &Dim, what: &str) -> Result<u64, String> {
    d.as_static()
        .ok_or_else(|| format!("{what} must be static, got `{d}` (bind it with --input-shape)"))
}

/// A positive count attribute as `u64`.
fn positive(v: i64, what: &str) -> Result<u64, String> {
    u64::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("attribute `{what}` must be positive, got {v}"))
}

/// `[B, S, H*D]` -> `[B, H, S, D]`.
fn split_heads(cx: &mut Ctx<'_>, x: ValueId, heads: u64, what: &str) -> Result<ValueId, String> {
    let shape = cx.ty(x).shape.clone();
    let hidden = static_dim(&shape[2], &format!("the hidden size of {what}"))?;
    if hidden % heads != 0 {
        return Err(format!(
            "the hidden size {hidden} of {what} is not a multiple of its {heads} heads"
        ));
    }
    let x = reshape(
        cx,
        x,
        vec![
            shape[0].clone(),
            shape[1].clone(),
            Dim::Static(heads),
            Dim::Static(hidden / heads),
        ],
    )?;
    transpose(cx, x, vec![0, 2, 1, 3])
}

/// `[B, H, S, D]` -> `[B, H*r, S, D]`, each head repeated `r` times in place
/// (`h0, h0, h1, h1, ...`, numpy's `repeat` along axis 1).
fn repeat_heads(cx: &mut Ctx<'_>, x: ValueId, r: u64) -> Result<ValueId, String> {
    if r == 1 {
        return Ok(x);
    }
    let s = cx.ty(x).shape.clone();
    let h = static_dim(&s[1], "the number of key/value heads")?;
    let x = reshape(
        cx,
        x,
        vec![
            s[0].clone(),
            s[1].clone(),
            Dim::Static(1),
            s[2].clone(),
            s[3].clone(),
        ],
    )?;
    let ones = Dim::Static(1);
    let x = cx.emit1(
        Op::Expand {
            shape: vec![
                ones.clone(),
                ones.clone(),
                Dim::Static(r),
                ones.clone(),
                ones,
            ],
        },
        &[x],
    )?;
    reshape(
        cx,
        x,
        vec![s[0].clone(), Dim::Static(h * r), s[2].clone(), s[3].clone()],
    )
}

/// Attention-23/24/25 (scaled dot-product attention). With Q `[B, Hq, Sq, D]`, K
/// `[B, Hkv, Skv, D]` and V `[B, Hkv, Skv, Dv]` (3-D inputs `[B, S, H*D]` are split into
/// heads with `q_num_heads` / `kv_num_heads` first, and Y is merged back):
///
/// - `K = concat(past_key, K)`, `V = concat(past_value, V)` along the sequence axis when a
///   cache is given; these are the `present_key` / `present_value` outputs;
/// - K and V heads are repeated `Hq / Hkv` times (grouped-query attention);
/// - `s = sqrt(scale)` with `scale` defaulting to `1 / sqrt(D)`, `qk = (Q*s) @ (K*s)^T`;
/// - `qk = softcap * tanh(qk / softcap)` when `softcap > 0`;
/// - `bias` = the mask (a float mask as is, a bool mask as `0` where true and `-inf`
///   where false; a mask shorter than `Skv` is padded with `-inf` / false) plus `-inf`
///   where a structural constraint fails: with `offset` = the past length, or
///   `nonpad_kv_seqlen[b] - Sq` without a past, or 0, and `e = j - i`: `is_causal` keeps
///   `e <= offset`, `left_window_size = L >= 0` keeps `e >= offset - L`,
///   `right_window_size = R >= 0` keeps `e <= offset + R`, and `nonpad_kv_seqlen` keeps
///   `j < nonpad_kv_seqlen[b]`;
/// - `p = softmax(qk + bias)` over keys (in `softmax_precision` when given), with rows whose
///   bias is all `-inf` set to 0; `Y = p @ V`;
/// - `qk_matmul_output` is `qk` before softcap (mode 0), after it (1), `qk + bias` (2) or
///   `p` (3).
fn attention(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let q = input(cx, n, 0)?;
    let k = input(cx, n, 1)?;
    let v = input(cx, n, 2)?;
    let mask = opt_input(cx, n, 3)?;
    let past_k = opt_input(cx, n, 4)?;
    let past_v = opt_input(cx, n, 5)?;
    let nonpad = opt_input(cx, n, 6)?;

    let (qt, kt, vt) = (cx.ty(q).clone(), cx.ty(k).clone(), cx.ty(v).clone());
    let t = qt.elem;
    if !t.is_float() || kt.elem != t || vt.elem != t {
        return Err(format!(
            "Q, K and V must share a floating-point element type, got {qt}, {kt}, {vt}"
        ));
    }
    let rank = qt.rank();
    if (rank != 3 && rank != 4) || kt.rank() != rank || vt.rank() != rank {
        return Err(format!(
            "Q, K and V must all be 3-D [batch, seq, hidden] or all 4-D \
             [batch, heads, seq, head_size], got {qt}, {kt}, {vt}"
        ));
    }

    let scale = n.attr_f("scale")?;
    let is_causal = match n.attr_i_or("is_causal", 0)? {
        0 => false,
        1 => true,
        other => return Err(format!("is_causal must be 0 or 1, got {other}")),
    };
    let softcap = n.attr_f_or("softcap", 0.0)?;
    if softcap.is_nan() || softcap < 0.0 {
        return Err(format!("softcap must be >= 0 (0: none), got {softcap}"));
    }
    let mode = n.attr_i_or("qk_matmul_output_mode", 0)?;
    if !(0..=3).contains(&mode) {
        return Err(format!(
            "qk_matmul_output_mode must be 0, 1, 2 or 3, got {mode}"
        ));
    }
    let softmax_elem = match n.attr_i("softmax_precision")? {
        None => t,
        Some(1) => ElemType::F32,
        Some(10) => ElemType::F16,
        Some(11) => ElemType::F64,
        Some(16) => ElemType::BF16,
        Some(other) => {
            return Err(format!(
                "softmax_precision = {other} is not one of 1 (FLOAT), 10 (FLOAT16), \
                 11 (DOUBLE), 16 (BFLOAT16)"
            ));
        }
    };
    let left = n.attr_i_or("left_window_size", -1)?;
    let right = n.attr_i_or("right_window_size", -1)?;
    if left < -1 || right < -1 {
        return Err(format!(
            "left_window_size and right_window_size must be -1 (unbounded) or >= 0, got \
             {left} and {right}"
        ));
    }
    if past_k.is_some() != past_v.is_some() {
        return Err("past_key and past_value must be given together".into());
    }
    if nonpad.is_some() && past_k.is_some() {
        return Err("nonpad_kv_seqlen cannot be combined with past_key / past_value".into());
    }
    let q_heads = n.attr_i("q_num_heads")?;
    let kv_heads = n.attr_i("kv_num_heads")?;

    // Q, K, V as [B, H, S, D].
    let (q, k, v) = if rank == 3 {
        let (Some(hq), Some(hkv)) = (q_heads, kv_heads) else {
            return Err("3-D Q, K and V need the q_num_heads and kv_num_heads attributes".into());
        };
        let hq = positive(hq, "q_num_heads")?;
        let hkv = positive(hkv, "kv_num_heads")?;
        (
            split_heads(cx, q, hq, "Q")?,
            split_heads(cx, k, hkv, "K")?,
            split_heads(cx, v, hkv, "V")?,
        )
    } else {
        // Ignored for 4-D inputs by Attention-23/24 and an error in Attention-25; accepted
        // here when consistent with the shapes.
        for (attr, given, dim) in [
            ("q_num_heads", q_heads, &qt.shape[1]),
            ("kv_num_heads", kv_heads, &kt.shape[1]),
        ] {
            if let Some(h) = given
                && dim.as_static().is_some_and(|d| i64::try_from(d) != Ok(h))
            {
                return Err(format!(
                    "attribute `{attr}` = {h} does not match the 4-D input's {dim} heads"
                ));
            }
        }
        (q, k, v)
    };
    let q_shape = cx.ty(q).shape.clone();
    let batch = q_shape[0].clone();

    // The KV cache.
    let concat_past = |cx: &mut Ctx<'_>, past: Option<ValueId>, x: ValueId, what: &str| {
        let Some(past) = past else { return Ok(x) };
        if cx.ty(past).rank() != 4 {
            return Err(format!(
                "{what} must be 4-D [batch, kv_heads, past_seq, head_size], got {}",
                cx.ty(past)
            ));
        }
        cx.emit1(Op::Concat { axis: 2 }, &[past, x])
    };
    let present_k = concat_past(cx, past_k, k, "past_key")?;
    let present_v = concat_past(cx, past_v, v, "past_value")?;

    // Grouped-query attention: repeat the K/V heads.
    let hq = static_dim(&q_shape[1], "the number of query heads")?;
    let hk = static_dim(&cx.ty(present_k).shape[1], "the number of key heads")?;
    let hv = static_dim(&cx.ty(present_v).shape[1], "the number of value heads")?;
    if hk != hv || hk == 0 || hq % hk != 0 {
        return Err(format!(
            "the {hq} query heads must be a multiple of the key/value heads ({hk} key, {hv} \
             value heads)"
        ));
    }
    let k_all = repeat_heads(cx, present_k, hq / hk)?;
    let v_all = repeat_heads(cx, present_v, hq / hk)?;

    // qk = (Q * s) @ (K * s)^T with s = sqrt(scale).
    let scale = match scale {
        Some(s) => f64::from(s),
        None => {
            let d = static_dim(&q_shape[3], "the head size (for the default scale)")?;
            1.0 / (d as f64).sqrt()
        }
    };
    let s = scalar(cx, t, scale.sqrt())?;
    let qs = bin(cx, BinaryOp::Mul, q, s)?;
    let ks = bin(cx, BinaryOp::Mul, k_all, s)?;
    let kst = transpose(cx, ks, vec![0, 1, 3, 2])?;
    let raw = cx.emit1(Op::MatMul, &[qs, kst])?;
    let capped = if softcap > 0.0 {
        let c = scalar(cx, t, f64::from(softcap))?;
        let x = bin(cx, BinaryOp::Div, raw, c)?;
        let x = un(cx, UnaryOp::Tanh, x)?;
        bin(cx, BinaryOp::Mul, x, c)?
    } else {
        raw
    };

    let sq = cx.ty(q).shape[2].clone();
    let skv = cx.ty(present_k).shape[2].clone();
    let bias = attention_bias(
        cx,
        AttnMasking {
            t,
            mask,
            is_causal,
            left,
            right,
            past_len: past_k.map(|p| cx.ty(p).shape[2].clone()),
            nonpad,
            batch,
            sq: &sq,
            skv: &skv,
        },
    )?;
    let with_bias = match bias {
        Some(b) => bin(cx, BinaryOp::Add, capped, b)?,
        None => capped,
    };

    let x = cast_to(cx, with_bias, softmax_elem)?;
    let mut p = cx.emit1(Op::Softmax { axis: 3 }, &[x])?;
    if let Some(b) = bias {
        // Rows whose keys are all masked: zero probabilities (not NaN).
        let last = cx.ty(b).rank() - 1;
        let mx = cx.emit1(
            Op::Reduce {
                kind: ReduceKind::Max,
                axes: vec![last],
                keep_dims: true,
            },
            &[b],
        )?;
        let ninf = scalar(cx, t, f64::NEG_INFINITY)?;
        let dead = bin(cx, BinaryOp::Equal, mx, ninf)?;
        let zero = scalar(cx, softmax_elem, 0.0)?;
        p = cx.emit1(Op::Select, &[dead, zero, p])?;
    }
    let p = cast_to(cx, p, t)?;
    let mut y = cx.emit1(Op::MatMul, &[p, v_all])?;
    if rank == 3 {
        y = transpose(cx, y, vec![0, 2, 1, 3])?;
        let ys = cx.ty(y).shape.clone();
        let dv = static_dim(&ys[3], "the value head size")?;
        y = reshape(
            cx,
            y,
            vec![ys[0].clone(), ys[1].clone(), Dim::Static(hq * dv)],
        )?;
    }

    let qk_out = match mode {
        0 => raw,
        1 => capped,
        2 => with_bias,
        _ => p,
    };
    let mut outs = vec![y, present_k, present_v, qk_out];
    outs.truncate(n.num_outputs().max(1));
    Ok(outs)
}

/// The inputs of the attention bias.
struct AttnMasking<'a> {
    /// The element type of Q.
    t: ElemType,
    mask: Option<ValueId>,
    is_causal: bool,
    left: i64,
    right: i64,
    /// The past sequence length, when a cache is given.
    past_len: Option<Dim>,
    nonpad: Option<ValueId>,
    batch: Dim,
    sq: &'a Dim,
    skv: &'a Dim,
}

/// The additive attention bias (see [`attention`]), broadcastable to `[B, H, Sq, Skv]`;
/// `None` when nothing is masked.
fn attention_bias(cx: &mut Ctx<'_>, m: AttnMasking<'_>) -> Result<Option<ValueId>, String> {
    let t = m.t;
    let zero = scalar(cx, t, 0.0)?;
    let ninf = scalar(cx, t, f64::NEG_INFINITY)?;
    let mut bias = None;
    if let Some(mask) = m.mask {
        let mt = cx.ty(mask).clone();
        if mt.rank() == 0 || mt.rank() > 4 {
            return Err(format!("attn_mask must have rank 1 to 4, got {mt}"));
        }
        let skv = static_dim(m.skv, "the key sequence length (with attn_mask)")?;
        let last = static_dim(&mt.shape[mt.rank() - 1], "attn_mask's last extent")?;
        if last > skv {
            return Err(format!(
                "attn_mask {mt} is longer than the {skv} keys (past included)"
            ));
        }
        let (mask, value) = if mt.elem == ElemType::Bool {
            (mask, Scalar::Int(0))
        } else if mt.elem.is_float() {
            (cast_to(cx, mask, t)?, Scalar::Float(f64::NEG_INFINITY))
        } else {
            return Err(format!(
                "attn_mask must be bool or floating-point, got {mt}"
            ));
        };
        let mut mask = mask;
        if last < skv {
            let r = mt.rank();
            let mut pads = vec![0; 2 * r];
            pads[2 * r - 1] = (skv - last) as i64;
            mask = cx.emit1(
                Op::Pad {
                    pads,
                    mode: PadMode::Constant,
                    value,
                },
                &[mask],
            )?;
        }
        if mt.elem == ElemType::Bool {
            mask = cx.emit1(Op::Select, &[mask, zero, ninf])?;
        }
        bias = Some(mask);
    }

    // Structural constraints as one bool `allowed`.
    let windowed = m.left >= 0 || m.right >= 0;
    let mut allowed: Option<ValueId> = None;
    let mut and = |cx: &mut Ctx<'_>, c: ValueId| -> Result<(), String> {
        allowed = Some(match allowed {
            Some(a) => bin(cx, BinaryOp::And, a, c)?,
            None => c,
        });
        Ok(())
    };
    if m.is_causal || windowed || m.nonpad.is_some() {
        let sq = static_dim(m.sq, "the query sequence length (with masking)")?;
        let skv = static_dim(m.skv, "the key sequence length (with masking)")?;
        let (sqi, skvi) = (sq as i64, skv as i64);
        // The per-batch valid lengths as [B, 1, 1, 1] i64.
        let nonpad = match m.nonpad {
            Some(np) => {
                let nt = cx.ty(np).clone();
                if nt.rank() != 1 || !nt.elem.is_int() {
                    return Err(format!(
                        "nonpad_kv_seqlen must be a 1-D integer tensor [batch], got {nt}"
                    ));
                }
                let np = cast_to(cx, np, ElemType::I64)?;
                let one = Dim::Static(1);
                Some(reshape(
                    cx,
                    np,
                    vec![m.batch.clone(), one.clone(), one.clone(), one],
                )?)
            }
            None => None,
        };
        if m.is_causal || windowed {
            // e[i, j] = j - i, compared with the offset (scalar or [B, 1, 1, 1]); computed
            // by ops when the table would exceed the import-time limit.
            let e = if sq
                .checked_mul(skv)
                .is_some_and(|n| cx.fits_fold_limit_count(n, ElemType::I64))
            {
                let e: Vec<i64> = (0..sqi)
                    .flat_map(|i| (0..skvi).map(move |j| j - i))
                    .collect();
                constant(
                    cx,
                    Tensor::I64(
                        ndarray::ArrayD::from_shape_vec(
                            ndarray::IxDyn(&[sq as usize, skv as usize]),
                            e,
                        )
                        .map_err(|e| e.to_string())?,
                    ),
                )
            } else {
                let cols = super::iota(cx, skv, 1, 2)?;
                let rows = super::iota(cx, sq, 0, 2)?;
                bin(cx, BinaryOp::Sub, cols, rows)?
            };
            let offset = match (&m.past_len, nonpad) {
                (Some(p), _) => {
                    let p = static_dim(p, "the past sequence length")?;
                    scalar(cx, ElemType::I64, p as f64)?
                }
                (None, Some(np)) => {
                    let sqv = scalar(cx, ElemType::I64, sq as f64)?;
                    bin(cx, BinaryOp::Sub, np, sqv)?
                }
                (None, None) => scalar(cx, ElemType::I64, 0.0)?,
            };
            if m.is_causal {
                let c = bin(cx, BinaryOp::LessEqual, e, offset)?;
                and(cx, c)?;
            }
            if m.left >= 0 {
                let l = scalar(cx, ElemType::I64, m.left as f64)?;
                let lo = bin(cx, BinaryOp::Sub, offset, l)?;
                let c = bin(cx, BinaryOp::GreaterEqual, e, lo)?;
                and(cx, c)?;
            }
            if m.right >= 0 {
                let r = scalar(cx, ElemType::I64, m.right as f64)?;
                let hi = bin(cx, BinaryOp::Add, offset, r)?;
                let c = bin(cx, BinaryOp::LessEqual, e, hi)?;
                and(cx, c)?;
            }
        }
        if let Some(np) = nonpad {
            let j = super::iota(cx, skv, 0, 1)?;
            let c = bin(cx, BinaryOp::Less, j, np)?;
            and(cx, c)?;
        }
    }
    if let Some(a) = allowed {
        let structural = cx.emit1(Op::Select, &[a, zero, ninf])?;
        bias = Some(match bias {
            Some(b) => bin(cx, BinaryOp::Add, b, structural)?,
            None => structural,
        });
    }
    Ok(bias)
}

/// RotaryEmbedding-23 on X `[B, H, S, D]` (or `[B, S, H*D]` with `num_heads`), with
/// `cos`/`sin` caches `[P, R/2]` indexed by `position_ids` `[B, S]` (or given as
/// `[B, S, R/2]`), where `R` = `rotary_embedding_dim` (default `D`). The first `R` features
/// of each head are split into halves `x1`, `x2` (or even/odd features when `interleaved`)
/// and become `x1*cos - x2*sin` and `x1*sin + x2*cos` (written back the same way); the rest
/// pass through.
fn rotary_embedding(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let cos = input(cx, n, 1)?;
    let sin = input(cx, n, 2)?;
    let pos = opt_input(cx, n, 3)?;
    let xt = cx.ty(x).clone();
    let t = xt.elem;
    if !t.is_float() || cx.ty(cos).elem != t || cx.ty(sin).elem != t {
        return Err(format!(
            "X, cos_cache and sin_cache must share a floating-point type, got {xt}, {}, {}",
            cx.ty(cos),
            cx.ty(sin)
        ));
    }
    let interleaved = n.attr_i_or("interleaved", 0)? != 0;
    let num_heads = n.attr_i("num_heads")?;
    // X as [B, S, H, D].
    let xs = match xt.rank() {
        4 => transpose(cx, x, vec![0, 2, 1, 3])?,
        3 => {
            let h = positive(
                num_heads.ok_or("a 3-D input needs the num_heads attribute")?,
                "num_heads",
            )?;
            let hidden = static_dim(&xt.shape[2], "the hidden size")?;
            if hidden % h != 0 {
                return Err(format!(
                    "the hidden size {hidden} is not a multiple of num_heads = {h}"
                ));
            }
            reshape(
                cx,
                x,
                vec![
                    xt.shape[0].clone(),
                    xt.shape[1].clone(),
                    Dim::Static(h),
                    Dim::Static(hidden / h),
                ],
            )?
        }
        _ => return Err(format!("X must be 3-D or 4-D, got {xt}")),
    };
    let s4 = cx.ty(xs).shape.clone();
    let d = static_dim(&s4[3], "the head size")?;
    let rot = match n.attr_i_or("rotary_embedding_dim", 0)? {
        0 => d,
        r => positive(r, "rotary_embedding_dim")?,
    };
    if rot > d || rot % 2 != 0 {
        return Err(format!(
            "rotary_embedding_dim = {rot} must be even and at most the head size {d}"
        ));
    }
    let half = rot / 2;
    let (cos, sin) = match pos {
        Some(p) => (
            cx.emit1(Op::Gather { axis: 0 }, &[cos, p])?,
            cx.emit1(Op::Gather { axis: 0 }, &[sin, p])?,
        ),
        None => (cos, sin),
    };
    let cs = cx.ty(cos).shape.clone();
    if cs.len() != 3 || cs[2] != Dim::Static(half) || cx.ty(sin).shape != cs {
        return Err(format!(
            "the cos/sin caches must be [batch, seq, {half}] (after indexing by position_ids), \
             got {} and {}",
            cx.ty(cos),
            cx.ty(sin)
        ));
    }
    let cache_shape = vec![
        cs[0].clone(),
        cs[1].clone(),
        Dim::Static(1),
        Dim::Static(half),
    ];
    let cos = reshape(cx, cos, cache_shape.clone())?;
    let sin = reshape(cx, sin, cache_shape)?;

    let xr = slice_axis(cx, xs, 3, 0, rot as i64)?;
    let (x1, x2) = if interleaved {
        let even = Op::Slice {
            axes: vec![3],
            starts: vec![0],
            ends: vec![rot as i64],
            steps: vec![2],
        };
        let odd = Op::Slice {
            axes: vec![3],
            starts: vec![1],
            ends: vec![rot as i64],
            steps: vec![2],
        };
        (cx.emit1(even, &[xr])?, cx.emit1(odd, &[xr])?)
    } else {
        (
            slice_axis(cx, xr, 3, 0, half as i64)?,
            slice_axis(cx, xr, 3, half as i64, rot as i64)?,
        )
    };
    let c1 = bin(cx, BinaryOp::Mul, cos, x1)?;
    let s2 = bin(cx, BinaryOp::Mul, sin, x2)?;
    let real = bin(cx, BinaryOp::Sub, c1, s2)?;
    let s1 = bin(cx, BinaryOp::Mul, sin, x1)?;
    let c2 = bin(cx, BinaryOp::Mul, cos, x2)?;
    let imag = bin(cx, BinaryOp::Add, s1, c2)?;
    let rotated = if interleaved {
        let rs = cx.ty(real).shape.clone();
        let mut col = rs.clone();
        col.push(Dim::Static(1));
        let real = reshape(cx, real, col.clone())?;
        let imag = reshape(cx, imag, col)?;
        let pairs = cx.emit1(Op::Concat { axis: 4 }, &[real, imag])?;
        let mut flat = rs;
        flat[3] = Dim::Static(rot);
        reshape(cx, pairs, flat)?
    } else {
        cx.emit1(Op::Concat { axis: 3 }, &[real, imag])?
    };
    let out = if rot < d {
        let rest = slice_axis(cx, xs, 3, rot as i64, d as i64)?;
        cx.emit1(Op::Concat { axis: 3 }, &[rotated, rest])?
    } else {
        rotated
    };
    let out = if xt.rank() == 3 {
        reshape(cx, out, xt.shape.clone())?
    } else {
        transpose(cx, out, vec![0, 2, 1, 3])?
    };
    Ok(vec![out])
}
