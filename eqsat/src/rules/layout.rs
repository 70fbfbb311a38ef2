//! Layout: transposes and reshapes cancelled, merged, pushed through elementwise ops, and
//! folded into matmul operands; splits of a concatenation cancelled.

use egg::Id;

use super::{
    Rule, RuleKind::Layout, add_op, any_multi_rule, any_rule, attr, find_op, is_known, rule, ty,
    var,
};
use crate::analysis::TEGraph;
use crate::ir::{BinaryOp, Dim, Op};
use crate::lang::{TNode, plain_op};

/// Kinds of the one-operand elementwise ops that carry attributes (the plain ones are found
/// from the op list): each result element depends only on the same operand element, so
/// they commute with any permutation of the axes.
const ATTR_UNARY: [&str; 7] = [
    "gelu",
    "elu",
    "leaky-relu",
    "selu",
    "hard-sigmoid",
    "cast",
    "clip",
];

/// Whether `op` is a one-operand elementwise op.
fn is_pointwise_unary(op: &Op) -> bool {
    matches!(op, Op::Unary(_) | Op::Cast { .. } | Op::Clip { .. })
}

/// `(kind ?x)` or `(kind ?a ?x)` with `inner` in place of `?x`, for every one-operand
/// elementwise kind.
fn unary_patterns(inner: &str, outer: impl Fn(&str) -> String) -> Vec<String> {
    let plain = crate::ir::text::OP_NAMES
        .iter()
        .filter(|n| matches!(plain_op(n), Some(Op::Unary(_))))
        .map(|k| outer(&format!("({k} {inner})")));
    let attributed = ATTR_UNARY
        .iter()
        .map(|k| outer(&format!("({k} ?a {inner})")));
    plain.chain(attributed).collect()
}

/// The permutation held by the attribute leaf bound to `?name`.
fn perm(eg: &TEGraph, s: &egg::Subst, name: &str) -> Option<Vec<usize>> {
    match attr(eg, s, name)? {
        Op::Transpose { perm } => Some(perm),
        _ => None,
    }
}

/// Whether `p` is the identity permutation.
fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &a)| i == a)
}

/// The permutation of `rank` axes that swaps the last two.
fn swap_last(rank: usize) -> Option<Vec<usize>> {
    if rank < 2 {
        return None;
    }
    let mut p: Vec<usize> = (0..rank).collect();
    p.swap(rank - 2, rank - 1);
    Some(p)
}

/// A gemm without scaling or transposes.
fn plain_gemm(trans_a: bool, trans_b: bool) -> Op {
    Op::Gemm {
        alpha: 1.0,
        beta: 1.0,
        trans_a,
        trans_b,
    }
}

/// The layout rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "transpose-transpose",
            Layout,
            "transpose(transpose(x, q), p) => transpose(x, q[p]), or x when that is the identity \
             (cheaper: one transpose or none)",
            "(transpose ?p (transpose ?q ?x))",
            |eg, _, s| {
                let (Op::Transpose { perm: p }, Op::Transpose { perm: q }) =
                    (attr(eg, s, "?p")?, attr(eg, s, "?q")?)
                else {
                    return None;
                };
                let composed: Vec<usize> = p
                    .iter()
                    .map(|&i| q.get(i).copied())
                    .collect::<Option<_>>()?;
                let x = var(s, "?x")?;
                if composed.iter().enumerate().all(|(i, &a)| i == a) {
                    Some(x)
                } else {
                    add_op(eg, Op::Transpose { perm: composed }, &[x])
                }
            },
        ),
        rule(
            "reshape-reshape",
            Layout,
            "reshape(reshape(x)) => reshape(x), or x when the shape comes back (cheaper: one view \
             or none)",
            "(reshape ?p (reshape ?q ?x))",
            |eg, _, s| {
                let Op::Reshape { shape } = attr(eg, s, "?p")? else {
                    return None;
                };
                let x = var(s, "?x")?;
                if ty(eg, s, "?x")?.shape == shape {
                    Some(x)
                } else {
                    add_op(eg, Op::Reshape { shape }, &[x])
                }
            },
        ),
        rule(
            "reshape-identity",
            Layout,
            "reshape(x) to x's own shape => x (cheaper: no op)",
            "(reshape ?p ?x)",
            |eg, _, s| {
                let Op::Reshape { shape } = attr(eg, s, "?p")? else {
                    return None;
                };
                let same: &[Dim] = &ty(eg, s, "?x")?.shape;
                (same == shape.as_slice()).then(|| var(s, "?x"))?
            },
        ),
        rule(
            "transpose-identity",
            Layout,
            "transpose(x) by the identity permutation => x (cheaper: no op)",
            "(transpose ?p ?x)",
            |eg, _, s| is_identity(&perm(eg, s, "?p")?).then(|| var(s, "?x"))?,
        ),
        rule(
            "transpose-into-reshape",
            Layout,
            "transpose(x) that moves only extent-1 axes (the others keep their order) => \
             reshape(x) (cheaper: a reshape is a view, a transpose copies)",
            "(transpose ?p ?x)",
            |eg, class, s| {
                let p = perm(eg, s, "?p")?;
                if is_identity(&p) {
                    return None;
                }
                let x = ty(eg, s, "?x")?;
                let kept: Vec<usize> = p
                    .iter()
                    .copied()
                    .filter(|&a| x.shape.get(a) != Some(&Dim::Static(1)))
                    .collect();
                if kept.windows(2).any(|w| w[0] > w[1]) {
                    return None;
                }
                let shape = eg[class].data.ty()?.shape.clone();
                add_op(eg, Op::Reshape { shape }, &[var(s, "?x")?])
            },
        ),
        any_rule(
            "unary-transpose",
            Layout,
            "f(transpose(x)) => transpose(f(x)) for every one-operand elementwise f (mirror, \
             same cost: sinks transposes toward their users, where they cancel or fold into a \
             matmul)",
            unary_patterns("(transpose ?p ?x)", str::to_string),
            |eg, class, s| {
                if is_known(eg, class) {
                    return None;
                }
                let (p, x) = (var(s, "?p")?, var(s, "?x")?);
                let perm = perm(eg, s, "?p")?;
                let t = eg.lookup(TNode::Op("transpose", vec![p, x]))?;
                let (f, _) = find_op(eg, class, |op, o| is_pointwise_unary(op) && o == [t])?;
                let fx = add_op(eg, f, &[x])?;
                add_op(eg, Op::Transpose { perm }, &[fx])
            },
        ),
        any_rule(
            "transpose-unary",
            Layout,
            "transpose(f(x)) => f(transpose(x)) for every one-operand elementwise f (mirror of \
             unary-transpose, same cost: hoists transposes toward their producers)",
            unary_patterns("?x", |u| format!("(transpose ?p {u})")),
            |eg, class, s| {
                if is_known(eg, class) {
                    return None;
                }
                let perm = perm(eg, s, "?p")?;
                let x = eg.find(var(s, "?x")?);
                let transpose = Op::Transpose { perm: perm.clone() };
                let f = eg[class].nodes.iter().find_map(|n| {
                    let (op, o) = crate::analysis::node_op(eg, n)?;
                    if op != transpose {
                        return None;
                    }
                    find_op(eg, eg.find(o[0]), |f, fo| {
                        is_pointwise_unary(f) && fo == [x]
                    })
                    .map(|(f, _)| f)
                })?;
                let tx = add_op(eg, transpose, &[x])?;
                add_op(eg, f, &[tx])
            },
        ),
        any_rule(
            "binary-transpose",
            Layout,
            "transpose(x, p) op transpose(y, p) => transpose(x op y, p) for every binary \
             elementwise op (cheaper: one transpose instead of two)",
            BinaryOp::ALL
                .iter()
                .map(|b| format!("({} (transpose ?p ?x) (transpose ?p ?y))", b.name())),
            |eg, class, s| {
                if is_known(eg, class) {
                    return None;
                }
                let (p, x, y) = (var(s, "?p")?, var(s, "?x")?, var(s, "?y")?);
                let perm = perm(eg, s, "?p")?;
                let tx = eg.lookup(TNode::Op("transpose", vec![p, x]))?;
                let ty_ = eg.lookup(TNode::Op("transpose", vec![p, y]))?;
                let (b, _) = find_op(eg, class, |op, o| {
                    matches!(op, Op::Binary(_)) && o == [tx, ty_]
                })?;
                let xy = add_op(eg, b, &[x, y])?;
                add_op(eg, Op::Transpose { perm }, &[xy])
            },
        ),
        rule(
            "matmul-transpose-a",
            Layout,
            "matmul(transpose(a, [1, 0]), b) => gemm(a, b, trans-a) for 2-D a and b (cheaper: \
             the transpose is folded into the product)",
            "(matmul (transpose ?p ?a) ?b)",
            |eg, _, s| {
                if perm(eg, s, "?p")? != [1, 0] || ty(eg, s, "?b")?.rank() != 2 {
                    return None;
                }
                add_op(eg, plain_gemm(true, false), &[var(s, "?a")?, var(s, "?b")?])
            },
        ),
        rule(
            "matmul-transpose-b",
            Layout,
            "matmul(a, transpose(b, [1, 0])) => gemm(a, b, trans-b) for 2-D a and b (cheaper: \
             the transpose is folded into the product)",
            "(matmul ?a (transpose ?p ?b))",
            |eg, _, s| {
                if perm(eg, s, "?p")? != [1, 0] || ty(eg, s, "?a")?.rank() != 2 {
                    return None;
                }
                add_op(eg, plain_gemm(false, true), &[var(s, "?a")?, var(s, "?b")?])
            },
        ),
        any_rule(
            "gemm-transpose-a",
            Layout,
            "gemm(transpose(a, [1, 0]), b[, c]) => gemm(a, b[, c]) with trans-a flipped \
             (cheaper: the transpose is folded into the product)",
            [
                "(gemm ?g (transpose ?p ?a) ?b)",
                "(gemm ?g (transpose ?p ?a) ?b ?c)",
            ],
            |eg, _, s| gemm_fold_transpose(eg, s, true),
        ),
        any_rule(
            "gemm-transpose-b",
            Layout,
            "gemm(a, transpose(b, [1, 0])[, c]) => gemm(a, b[, c]) with trans-b flipped \
             (cheaper: the transpose is folded into the product)",
            [
                "(gemm ?g ?a (transpose ?p ?b))",
                "(gemm ?g ?a (transpose ?p ?b) ?c)",
            ],
            |eg, _, s| gemm_fold_transpose(eg, s, false),
        ),
        rule(
            "transpose-matmul",
            Layout,
            "transpose(a @ b) swapping the last two axes => transpose(b) @ transpose(a) (mirror: \
             one transpose becomes two, which pays off where they cancel with others or fold \
             into a gemm)",
            "(transpose ?p (matmul ?a ?b))",
            |eg, class, s| {
                if is_known(eg, class) {
                    return None;
                }
                let (ra, rb) = (ty(eg, s, "?a")?.rank(), ty(eg, s, "?b")?.rank());
                let out = eg[class].data.ty()?.rank();
                if perm(eg, s, "?p")? != swap_last(out)? {
                    return None;
                }
                let (pa, pb) = (swap_last(ra)?, swap_last(rb)?);
                let ta = add_op(eg, Op::Transpose { perm: pa }, &[var(s, "?a")?])?;
                let tb = add_op(eg, Op::Transpose { perm: pb }, &[var(s, "?b")?])?;
                add_op(eg, Op::MatMul, &[tb, ta])
            },
        ),
        any_multi_rule(
            "split-concat",
            Layout,
            "split(concat(x1, ..., xn)) along the same axis into the same pieces => x1, ..., xn \
             (cheaper: no copies)",
            &[
                "?s = (split ?q (concat ?k ?x0 ?x1))",
                "?s = (split ?q (concat ?k ?x0 ?x1 ?x2))",
                "?s = (split ?q (concat ?k ?x0 ?x1 ?x2 ?x3))",
            ],
            |eg, s| split_concat(eg, s).unwrap_or_default(),
        ),
    ]
}

/// gemm with its transposed A (`a`) or B operand taken untransposed and the flag flipped.
fn gemm_fold_transpose(eg: &mut TEGraph, s: &egg::Subst, a: bool) -> Option<Id> {
    if perm(eg, s, "?p")? != [1, 0] {
        return None;
    }
    let Op::Gemm {
        alpha,
        beta,
        trans_a,
        trans_b,
    } = attr(eg, s, "?g")?
    else {
        return None;
    };
    let op = Op::Gemm {
        alpha,
        beta,
        trans_a: trans_a ^ a,
        trans_b: trans_b ^ !a,
    };
    let mut operands = vec![var(s, "?a")?, var(s, "?b")?];
    operands.extend(var(s, "?c"));
    add_op(eg, op, &operands)
}

/// The pieces of `split(concat(xs))` paired with the `xs`, when the split undoes the concat.
fn split_concat(eg: &mut TEGraph, s: &egg::Subst) -> Option<Vec<(Id, Id)>> {
    let (Op::Split { axis, sizes }, Op::Concat { axis: along }) =
        (attr(eg, s, "?q")?, attr(eg, s, "?k")?)
    else {
        return None;
    };
    let xs: Vec<Id> = (0..4).map_while(|i| var(s, &format!("?x{i}"))).collect();
    if axis != along || sizes.len() != xs.len() {
        return None;
    }
    let split = var(s, "?s")?;
    let mut pairs = Vec::new();
    for (i, (&x, &size)) in xs.iter().zip(&sizes).enumerate() {
        if eg[x].data.ty()?.shape.get(axis)? != &Dim::Static(size) {
            return None;
        }
        if let Some(piece) = eg.lookup(TNode::Get(i as u32, [split])) {
            pairs.push((piece, x));
        }
    }
    Some(pairs)
}
