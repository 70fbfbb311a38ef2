//! Fusion and merging: matmul and bias into gemm, scales into gemm's alpha, conv with the
//! batch norm, bias or per-channel scale after it folded into its constants, relu and clip
//! folded into one clip, matmuls or convs sharing an input merged into one wider op and
//! split, and the reverse splits.
//!
//! Rules here that compute new constants do it in the builder, once per match, and add them
//! with [`intern_const`]: applying the rule to the same match again finds the same constant
//! and adds nothing.

use egg::{Id, Subst};

use super::{
    MAX_FOLD_DEPTH, Rule, RuleKind::Fusion, add, add_op, any_multi_rule, any_rule, attr,
    const_index, const_name, eval, f64_tensor, find_op, fold_depth, intern_const, intern_folded,
    is_known, is_scalar, known, multi_rule, rule, ty, var,
};
use crate::analysis::TEGraph;
use crate::ir::{BinaryOp, ConvAttrs, Dim, Op, Tensor, TensorType};
use crate::lang::TNode;

/// The most original weights one merged matmul or conv may hold.
const MAX_MERGED: usize = 4;

/// The fusion rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "matmul-bias-to-gemm",
            Fusion,
            "add(matmul(a, b), c) => gemm(a, b, c) for 2-D a and b (cheaper: the add runs in the \
             gemm's epilogue)",
            "(add (matmul ?a ?b) ?c)",
            |eg, _, s| {
                let (a, b) = (ty(eg, s, "?a")?, ty(eg, s, "?b")?);
                if a.shape.len() != 2 || b.shape.len() != 2 {
                    return None;
                }
                let op = Op::Gemm {
                    alpha: 1.0,
                    beta: 1.0,
                    trans_a: false,
                    trans_b: false,
                };
                add_op(eg, op, &[var(s, "?a")?, var(s, "?b")?, var(s, "?c")?])
            },
        ),
        multi_rule(
            "merge-matmuls-shared-input",
            Fusion,
            "x@W1 and x@W2 with constant 2-D W1, W2 => split(x@[W1 W2]) (cheaper: one wider \
             matmul reading x once; weights merged in constant order, at most 4, so each set \
             is built once)",
            "?m1 = (matmul ?x ?w1), ?m2 = (matmul ?x ?w2)",
            |eg, s| {
                let (Some(m1), Some(m2), Some(x)) = (var(s, "?m1"), var(s, "?m2"), var(s, "?x"))
                else {
                    return Vec::new();
                };
                if eg.find(m1) == eg.find(m2) {
                    return Vec::new();
                }
                let (Some(w1), Some(w2)) = (var(s, "?w1"), var(s, "?w2")) else {
                    return Vec::new();
                };
                let Some(parts) = merge_parts(eg, w1, w2) else {
                    return Vec::new();
                };
                let (Some(t1), Some(t2)) =
                    (super::const_tensor(eg, w1), super::const_tensor(eg, w2))
                else {
                    return Vec::new();
                };
                // The matched terms themselves, for explanations.
                let m1 = super::term(eg, TNode::Op("matmul", vec![x, w1]));
                let m2 = super::term(eg, TNode::Op("matmul", vec![x, w2]));
                merge_columns(eg, x, m1, m2, &t1, &t2, parts).unwrap_or_default()
            },
        ),
        multi_rule(
            "merge-split-chain",
            Fusion,
            "split(piece i of split(y)) along the same axis => one split of y with the pieces \
             inlined (what chained merges leave behind)",
            "?o = (split ?a ?g)",
            |eg, s| merge_split_chain(eg, s).unwrap_or_default(),
        ),
        multi_rule(
            "split-merged-matmul",
            Fusion,
            "split(x @ W) along W's columns, W constant => x @ W1, x @ W2, ... (mirror of \
             merge-matmuls-shared-input: lets each piece fuse on its own, e.g. into a gemm; \
             the slices of a merged weight are its original constants)",
            "?sp = (split ?q (matmul ?x ?w))",
            |eg, s| split_matmul(eg, s).unwrap_or_default(),
        ),
        any_multi_rule(
            "merge-convs-shared-input",
            Fusion,
            "conv(x, W1[, b1]) and conv(x, W2[, b2]) with the same attributes, groups = 1 and \
             constant weights (biases: both or neither) => split(conv(x, [W1; W2][, [b1; \
             b2]])) along channels: one wider conv reading x once (at most 4 weights merged, \
             in constant order)",
            &[
                "?c1 = (conv ?k ?x ?w1), ?c2 = (conv ?k ?x ?w2)",
                "?c1 = (conv ?k ?x ?w1 ?b1), ?c2 = (conv ?k ?x ?w2 ?b2)",
            ],
            |eg, s| merge_convs(eg, s).unwrap_or_default(),
        ),
        any_rule(
            "conv-batch-norm-fold",
            Fusion,
            "batch-norm(conv(x, W[, b]), scale, bias, mean, var) with all of them constant => \
             conv(x, W', b'), W' = W * f per output channel, b' = (b - mean) * f + bias, f = \
             scale / sqrt(var + epsilon) (cheaper: the normalization disappears)",
            [
                "(batch-norm ?e (conv ?k ?x ?w) ?s ?t ?m ?v)",
                "(batch-norm ?e (conv ?k ?x ?w ?b) ?s ?t ?m ?v)",
            ],
            conv_batch_norm,
        ),
        any_rule(
            "conv-mul-fold",
            Fusion,
            "conv(x, W[, b]) * c with constant W (and b) and a constant c that is one value per \
             output channel (or one value) => conv(x, W * c, b * c) (cheaper: no multiply)",
            [
                "(mul (conv ?k ?x ?w) ?c)",
                "(mul ?c (conv ?k ?x ?w))",
                "(mul (conv ?k ?x ?w ?b) ?c)",
                "(mul ?c (conv ?k ?x ?w ?b))",
            ],
            conv_mul,
        ),
        any_rule(
            "conv-add-fold",
            Fusion,
            "conv(x, W[, b]) + c with a known c that is one value per output channel (or one \
             value) => conv(x, W, b + c) (cheaper: the add becomes the conv's bias)",
            [
                "(add (conv ?k ?x ?w) ?c)",
                "(add ?c (conv ?k ?x ?w))",
                "(add (conv ?k ?x ?w ?b) ?c)",
                "(add ?c (conv ?k ?x ?w ?b))",
            ],
            conv_add,
        ),
        any_rule(
            "gemm-scale",
            Fusion,
            "gemm(a, b[, c]) * s with alpha = 1 (and beta = 1) for a known one-element float s \
             => gemm with alpha = s (and beta = s) (cheaper: no multiply)",
            [
                "(mul (gemm ?g ?a ?b) ?s)",
                "(mul ?s (gemm ?g ?a ?b))",
                "(mul (gemm ?g ?a ?b ?c) ?s)",
                "(mul ?s (gemm ?g ?a ?b ?c))",
            ],
            |eg, _, s| {
                let k = scalar_factor(eg, s)?;
                let Op::Gemm {
                    alpha,
                    beta,
                    trans_a,
                    trans_b,
                } = attr(eg, s, "?g")?
                else {
                    return None;
                };
                let c = var(s, "?c");
                // Only an unscaled gemm: around a cycle of classes (x * 0 = x * 0 * k) a scale
                // folded again and again would make new alphas without end.
                if alpha != 1.0 || (c.is_some() && beta != 1.0) {
                    return None;
                }
                let op = Op::Gemm {
                    alpha: k,
                    beta: if c.is_some() { k } else { beta },
                    trans_a,
                    trans_b,
                };
                let mut operands = vec![var(s, "?a")?, var(s, "?b")?];
                operands.extend(c);
                add_op(eg, op, &operands)
            },
        ),
        any_rule(
            "matmul-scale-gemm",
            Fusion,
            "(a @ b) * s for 2-D a, b and a known one-element float s => gemm(a, b) with alpha \
             = s (cheaper: no multiply)",
            ["(mul (matmul ?a ?b) ?s)", "(mul ?s (matmul ?a ?b))"],
            |eg, _, s| {
                let k = scalar_factor(eg, s)?;
                if ty(eg, s, "?a")?.rank() != 2 || ty(eg, s, "?b")?.rank() != 2 {
                    return None;
                }
                let op = Op::Gemm {
                    alpha: k,
                    beta: 1.0,
                    trans_a: false,
                    trans_b: false,
                };
                add_op(eg, op, &[var(s, "?a")?, var(s, "?b")?])
            },
        ),
        any_rule(
            "gemm-add-bias",
            Fusion,
            "gemm(a, b) + c => gemm(a, b, c) with beta = 1, when c broadcasts to the product \
             (cheaper: the add runs in the gemm's epilogue)",
            ["(add (gemm ?g ?a ?b) ?c)", "(add ?c (gemm ?g ?a ?b))"],
            |eg, _, s| {
                let Op::Gemm {
                    alpha,
                    trans_a,
                    trans_b,
                    ..
                } = attr(eg, s, "?g")?
                else {
                    return None;
                };
                let op = Op::Gemm {
                    alpha,
                    beta: 1.0,
                    trans_a,
                    trans_b,
                };
                add_op(eg, op, &[var(s, "?a")?, var(s, "?b")?, var(s, "?c")?])
            },
        ),
        rule(
            "gemm-to-matmul-bias",
            Fusion,
            "gemm(a, b, c) with alpha = beta = 1 and no transposes => add(matmul(a, b), c) \
             (mirror of matmul-bias-to-gemm: lets the matmul rules, factoring and merging, see \
             the product of an imported gemm)",
            "(gemm ?g ?a ?b ?c)",
            |eg, class, s| {
                if attr(eg, s, "?g")? != plain_gemm() || is_known(eg, class) {
                    return None;
                }
                let product = add_op(eg, Op::MatMul, &[var(s, "?a")?, var(s, "?b")?])?;
                add_op(eg, Op::Binary(BinaryOp::Add), &[product, var(s, "?c")?])
            },
        ),
        rule(
            "gemm-to-matmul",
            Fusion,
            "gemm(a, b) without C, alpha = 1 and no transposes => matmul(a, b) (mirror, same \
             cost: the matmul rules apply to it)",
            "(gemm ?g ?a ?b)",
            |eg, _, s| {
                let Op::Gemm {
                    alpha: 1.0,
                    trans_a: false,
                    trans_b: false,
                    ..
                } = attr(eg, s, "?g")?
                else {
                    return None;
                };
                add_op(eg, Op::MatMul, &[var(s, "?a")?, var(s, "?b")?])
            },
        ),
        rule(
            "clip-relu",
            Fusion,
            "clip(relu(x), lo, hi) => clip(x, max(lo, 0), hi) (cheaper: one op)",
            "(clip ?k (relu ?x))",
            |eg, _, s| {
                let Op::Clip { min, max } = attr(eg, s, "?k")? else {
                    return None;
                };
                if min.is_some_and(f64::is_nan) || max.is_some_and(f64::is_nan) {
                    return None;
                }
                let min = Some(min.map_or(0.0, |m| m.max(0.0)));
                add_op(eg, Op::Clip { min, max }, &[var(s, "?x")?])
            },
        ),
        rule(
            "relu-clip",
            Fusion,
            "relu(clip(x, lo, hi)) => clip(x, max(lo, 0), hi) when hi >= 0 or absent (cheaper: \
             one op)",
            "(relu (clip ?k ?x))",
            |eg, _, s| {
                let Op::Clip { min, max } = attr(eg, s, "?k")? else {
                    return None;
                };
                if min.is_some_and(f64::is_nan) || max.is_some_and(|m| m.is_nan() || m < 0.0) {
                    return None;
                }
                let min = Some(min.map_or(0.0, |m| m.max(0.0)));
                add_op(eg, Op::Clip { min, max }, &[var(s, "?x")?])
            },
        ),
        rule(
            "clip-clip",
            Fusion,
            "clip(clip(x, a, b), c, d) => clip(x, clamp(a, c, d), clamp(b, c, d)) (cheaper: \
             one op)",
            "(clip ?k2 (clip ?k1 ?x))",
            |eg, _, s| {
                let (Op::Clip { min: a, max: b }, Op::Clip { min: c, max: d }) =
                    (attr(eg, s, "?k1")?, attr(eg, s, "?k2")?)
                else {
                    return None;
                };
                let a = a.unwrap_or(f64::NEG_INFINITY);
                let b = b.unwrap_or(f64::INFINITY);
                let c = c.unwrap_or(f64::NEG_INFINITY);
                let d = d.unwrap_or(f64::INFINITY);
                if [a, b, c, d].iter().any(|v| v.is_nan()) || a > b || c > d {
                    return None;
                }
                let clamp = |v: f64| v.max(c).min(d);
                let bound = |v: f64| v.is_finite().then_some(v);
                let op = Op::Clip {
                    min: bound(clamp(a)),
                    max: bound(clamp(b)),
                };
                add_op(eg, op, &[var(s, "?x")?])
            },
        ),
    ]
}

/// A gemm without scaling or transposes.
fn plain_gemm() -> Op {
    Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a: false,
        trans_b: false,
    }
}

/// The value of the one-element float `?s` as `f64`, when known.
fn scalar_factor(eg: &TEGraph, s: &Subst) -> Option<f64> {
    let t = ty(eg, s, "?s")?;
    if !t.elem.is_float() || !is_scalar(&t) {
        return None;
    }
    let v = eg[var(s, "?s")?].data.value.as_ref()?.to_f64_vec();
    match v.as_slice() {
        [k] => Some(*k),
        _ => None,
    }
}

/// The original constants of `w1` and `w2`, in order, if the two may be merged: both
/// constants, all of `w1`'s originals before `w2`'s, at most [`MAX_MERGED`] in all.
fn merge_parts(eg: &TEGraph, w1: Id, w2: Id) -> Option<Vec<u32>> {
    let (c1, c2) = (const_index(eg, w1)?, const_index(eg, w2)?);
    let (p1, p2) = (eg.analysis.parts_of(c1)?, eg.analysis.parts_of(c2)?);
    if p1.last() >= p2.first() || p1.len() + p2.len() > MAX_MERGED {
        return None;
    }
    Some(p1.iter().chain(&p2).copied().collect())
}

/// `x @ [w1 w2]` split back into the two products.
fn merge_columns(
    eg: &mut TEGraph,
    x: Id,
    m1: Id,
    m2: Id,
    w1: &Tensor,
    w2: &Tensor,
    parts: Vec<u32>,
) -> Option<Vec<(Id, Id)>> {
    let (s1, s2) = (w1.shape(), w2.shape());
    if s1.len() != 2 || s2.len() != 2 || s1[0] != s2[0] || w1.elem() != w2.elem() {
        return None;
    }
    let joined = eval(&Op::Concat { axis: 1 }, &[w1, w2])?;
    let w = intern_const(eg, "merged", &joined)?;
    let c = const_index(eg, w)?;
    eg.analysis.parts.insert(c, parts);
    let y = add_op(eg, Op::MatMul, &[x, w])?;
    let rank = eg[y].data.ty()?.shape.len();
    let split = add_op(
        eg,
        Op::Split {
            axis: rank - 1,
            sizes: vec![s1[1] as u64, s2[1] as u64],
        },
        &[y],
    )?;
    let a = add(eg, TNode::Get(0, [split]))?;
    let b = add(eg, TNode::Get(1, [split]))?;
    Some(vec![(m1, a), (m2, b)])
}

/// The replacement pairs of `merge-split-chain` for one match, if a chain is there.
fn merge_split_chain(
    eg: &mut crate::analysis::TEGraph,
    s: &egg::Subst,
) -> Option<Vec<(egg::Id, egg::Id)>> {
    use crate::lang::TNode;
    let outer = var(s, "?o")?;
    let Op::Split {
        axis,
        sizes: outer_sizes,
    } = super::attr(eg, s, "?a")?
    else {
        return None;
    };
    let g = var(s, "?g")?;
    // A piece of another split, along the same axis.
    let (index, inner_class) = eg[g].nodes.iter().find_map(|n| match n {
        TNode::Get(i, [c]) => Some((*i as usize, *c)),
        _ => None,
    })?;
    let (inner_op, inner_args) = eg[inner_class].nodes.iter().find_map(|n| {
        let (op, args) = crate::analysis::node_op(eg, n)?;
        matches!(op, Op::Split { .. }).then_some((op, args))
    })?;
    let Op::Split {
        axis: inner_axis,
        sizes: inner_sizes,
    } = inner_op
    else {
        return None;
    };
    if inner_axis != axis || index >= inner_sizes.len() {
        return None;
    }
    let mut sizes = inner_sizes[..index].to_vec();
    sizes.extend_from_slice(&outer_sizes);
    sizes.extend_from_slice(&inner_sizes[index + 1..]);
    let flat = add_op(eg, Op::Split { axis, sizes }, &inner_args)?;
    let mut pairs = Vec::new();
    let get = |eg: &mut crate::analysis::TEGraph, i: usize, c: egg::Id| {
        super::add(eg, TNode::Get(i as u32, [c]))
    };
    // The old side as the exact `get` terms, so that explanations show this step there.
    let old = |eg: &mut crate::analysis::TEGraph, i: usize, c: egg::Id| {
        super::term(eg, TNode::Get(i as u32, [c]))
    };
    for j in 0..outer_sizes.len() {
        pairs.push((old(eg, j, outer), get(eg, index + j, flat)?));
    }
    for k in (0..inner_sizes.len()).filter(|&k| k != index) {
        let to = if k < index {
            k
        } else {
            k + outer_sizes.len() - 1
        };
        pairs.push((old(eg, k, inner_class), get(eg, to, flat)?));
    }
    Some(pairs)
}

/// The pieces of `split(x @ W)` along W's last axis, each paired with `x @ W_i`.
fn split_matmul(eg: &mut TEGraph, s: &Subst) -> Option<Vec<(Id, Id)>> {
    let Op::Split { axis, sizes } = attr(eg, s, "?q")? else {
        return None;
    };
    let (sp, x, w) = (var(s, "?sp")?, var(s, "?x")?, var(s, "?w")?);
    let wt = ty(eg, s, "?w")?;
    let out_rank = eg[sp].data.types.first()?.rank();
    if wt.rank() < 2 || axis + 1 != out_rank {
        return None;
    }
    // Every piece must be in use (a class) for the split to go.
    let pieces: Vec<Id> = (0..sizes.len())
        .map(|i| eg.lookup(TNode::Get(i as u32, [sp])))
        .collect::<Option<_>>()?;
    let weight = super::const_tensor(eg, w)?;
    let last = wt.rank() - 1;
    let base = eg.analysis.consts[const_index(eg, w)? as usize]
        .name
        .clone();
    let mut pairs = Vec::with_capacity(sizes.len());
    let mut start = 0i64;
    for (piece, &size) in pieces.into_iter().zip(&sizes) {
        let end = start.checked_add(i64::try_from(size).ok()?)?;
        let slice = Op::Slice {
            axes: vec![last],
            starts: vec![start],
            ends: vec![end],
            steps: vec![1],
        };
        let wi = eval(&slice, &[&weight])?;
        let wi = intern_const(eg, &format!("{base}.part"), &wi)?;
        let product = add_op(eg, Op::MatMul, &[x, wi])?;
        pairs.push((piece, product));
        start = end;
    }
    Some(pairs)
}

/// Two convs of `x` merged along output channels and split back.
fn merge_convs(eg: &mut TEGraph, s: &Subst) -> Option<Vec<(Id, Id)>> {
    let (c1, c2, x) = (var(s, "?c1")?, var(s, "?c2")?, var(s, "?x")?);
    if eg.find(c1) == eg.find(c2) {
        return None;
    }
    let op = attr(eg, s, "?k")?;
    let Op::Conv(ConvAttrs { groups: 1, .. }) = op else {
        return None;
    };
    let (w1, w2) = (var(s, "?w1")?, var(s, "?w2")?);
    let parts = merge_parts(eg, w1, w2)?;
    let (t1, t2) = (super::const_tensor(eg, w1)?, super::const_tensor(eg, w2)?);
    let (m1, m2) = (*t1.shape().first()?, *t2.shape().first()?);
    let joined = eval(&Op::Concat { axis: 0 }, &[&t1, &t2])?;
    let bias = match (var(s, "?b1"), var(s, "?b2")) {
        (Some(b1), Some(b2)) => {
            let (b1, b2) = (known(eg, b1)?, known(eg, b2)?);
            Some(eval(&Op::Concat { axis: 0 }, &[&b1, &b2])?)
        }
        _ => None,
    };
    let w = intern_const(eg, "merged", &joined)?;
    let c = const_index(eg, w)?;
    eg.analysis.parts.insert(c, parts);
    let mut operands = vec![x, w];
    if let Some(b) = bias {
        operands.push(intern_const(eg, "merged.bias", &b)?);
    }
    let y = add_op(eg, op, &operands)?;
    let split = add_op(
        eg,
        Op::Split {
            axis: 1,
            sizes: vec![m1 as u64, m2 as u64],
        },
        &[y],
    )?;
    let a = add(eg, TNode::Get(0, [split]))?;
    let b = add(eg, TNode::Get(1, [split]))?;
    Some(vec![(c1, a), (c2, b)])
}

/// `values` as one value per output channel of a conv result of type `out` (rank r, `m`
/// channels): `c` must broadcast to the channel axis only (extent 1 elsewhere).
fn per_channel(c: &Tensor, out: &TensorType) -> Option<Vec<f64>> {
    let m = match out.shape.get(1)? {
        Dim::Static(m) => usize::try_from(*m).ok()?,
        Dim::Sym(_) => return None,
    };
    let r = out.rank();
    let shape = c.shape();
    if shape.len() > r {
        return None;
    }
    let lead = r - shape.len();
    let mut channels = 1;
    for (i, &d) in shape.iter().enumerate() {
        let axis = lead + i;
        if axis == 1 && d == m {
            channels = m;
        } else if d != 1 {
            return None;
        }
    }
    let v = c.to_f64_vec();
    Some(
        (0..m)
            .map(|i| v[if channels == 1 { 0 } else { i }])
            .collect(),
    )
}

/// The matched conv's attributes, input, weight class and optional bias class.
fn matched_conv(eg: &TEGraph, s: &Subst) -> Option<(Op, Id, Id, Option<Id>)> {
    let op = attr(eg, s, "?k")?;
    if !matches!(op, Op::Conv(_)) {
        return None;
    }
    Some((op, var(s, "?x")?, var(s, "?w")?, var(s, "?b")))
}

/// The bias of a conv as per-channel values (zeros when it has none).
fn bias_values(eg: &TEGraph, b: Option<Id>, m: usize) -> Option<Vec<f64>> {
    match b {
        Some(b) => {
            let v = known(eg, b)?.to_f64_vec();
            (v.len() == m).then_some(v)
        }
        None => Some(vec![0.0; m]),
    }
}

/// The fold depth (see [`fold_depth`]) of constants computed from the classes `sources`
/// (absent ones skipped): one more than the deepest, if within [`MAX_FOLD_DEPTH`] and all
/// are constants.
fn next_depth(eg: &TEGraph, sources: &[Option<Id>]) -> Option<u32> {
    let mut depth = 0;
    for id in sources.iter().flatten() {
        depth = depth.max(fold_depth(eg, *id)?);
    }
    (depth < MAX_FOLD_DEPTH).then_some(depth + 1)
}

/// `conv(x, W', b')` with new constants at fold depth `depth`: `scale[m]` multiplies output
/// channel m of the weight (`None`: W as it is), `bias` is the new bias.
fn rebuilt_conv(
    eg: &mut TEGraph,
    op: Op,
    x: Id,
    w: Id,
    scale: Option<&[f64]>,
    bias: &[f64],
    depth: u32,
) -> Option<Id> {
    let stem = const_name(eg, w).unwrap_or_else(|| "conv".into());
    let weight = match scale {
        Some(f) => {
            let t = super::const_tensor(eg, w)?;
            let m = *t.shape().first()?;
            if m != f.len() || m == 0 {
                return None;
            }
            let per = t.len() / m;
            let scaled: Vec<f64> = t
                .to_f64_vec()
                .iter()
                .enumerate()
                .map(|(i, v)| v * f[i / per])
                .collect();
            let t = f64_tensor(t.elem(), t.shape(), &scaled)?;
            intern_folded(eg, &stem, depth, &t)?
        }
        None => w,
    };
    let elem = eg[weight].data.ty()?.elem;
    let b = f64_tensor(elem, &[bias.len()], bias)?;
    let b = intern_folded(eg, &format!("{stem}.bias"), depth, &b)?;
    add_op(eg, op, &[x, weight, b])
}

/// Builder of conv-batch-norm-fold.
fn conv_batch_norm(eg: &mut TEGraph, class: Id, s: &Subst) -> Option<Id> {
    let Op::BatchNorm { epsilon } = attr(eg, s, "?e")? else {
        return None;
    };
    let (op, x, w, b) = matched_conv(eg, s)?;
    // Done already for this match (the class holds a conv of x with a folded bias).
    let xf = eg.find(x);
    if find_op(eg, class, |o, args| {
        *o == op && args.len() == 3 && args[0] == xf
    })
    .is_some()
    {
        return None;
    }
    let [sc, bi, mean, var_] = ["?s", "?t", "?m", "?v"].map(|n| {
        var(s, n)
            .and_then(|id| known(eg, id))
            .map(|t| t.to_f64_vec())
    });
    let (sc, bi, mean, var_) = (sc?, bi?, mean?, var_?);
    let m = sc.len();
    if bi.len() != m || mean.len() != m || var_.len() != m {
        return None;
    }
    let sources = [Some(w), b]
        .into_iter()
        .chain(["?s", "?t", "?m", "?v"].map(|n| var(s, n)));
    let depth = next_depth(eg, &sources.collect::<Vec<_>>())?;
    let bias = bias_values(eg, b, m)?;
    let f: Vec<f64> = (0..m).map(|i| sc[i] / (var_[i] + epsilon).sqrt()).collect();
    if f.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let new_bias: Vec<f64> = (0..m).map(|i| (bias[i] - mean[i]) * f[i] + bi[i]).collect();
    rebuilt_conv(eg, op, x, w, Some(&f), &new_bias, depth)
}

/// Builder of conv-mul-fold.
fn conv_mul(eg: &mut TEGraph, class: Id, s: &Subst) -> Option<Id> {
    let (op, x, w, b) = matched_conv(eg, s)?;
    let out = eg[class].data.ty()?.clone();
    if !out.elem.is_float() {
        return None;
    }
    let depth = next_depth(eg, &[Some(w), b, var(s, "?c")])?;
    let c = known(eg, var(s, "?c")?)?;
    let f = per_channel(&c, &out)?;
    let bias: Vec<f64> = bias_values(eg, b, f.len())?
        .iter()
        .zip(&f)
        .map(|(b, f)| b * f)
        .collect();
    rebuilt_conv(eg, op, x, w, Some(&f), &bias, depth)
}

/// Builder of conv-add-fold.
fn conv_add(eg: &mut TEGraph, class: Id, s: &Subst) -> Option<Id> {
    let (op, x, w, b) = matched_conv(eg, s)?;
    let out = eg[class].data.ty()?.clone();
    let depth = next_depth(eg, &[b, var(s, "?c")])?;
    let c = known(eg, var(s, "?c")?)?;
    let add_c = per_channel(&c, &out)?;
    let bias: Vec<f64> = bias_values(eg, b, add_c.len())?
        .iter()
        .zip(&add_c)
        .map(|(b, c)| b + c)
        .collect();
    rebuilt_conv(eg, op, x, w, None, &bias, depth)
}
