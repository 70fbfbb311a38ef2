//! Fusion and merging: matmul and bias into gemm, conv and batch norm folded, consecutive
//! elementwise ops, matmuls or convs sharing an input merged into one wider op and split,
//! and the reverse splits.

use super::{Rule, RuleKind::Fusion, add_op, const_index, const_tensor, multi_rule, rule, ty, var};
use crate::ir::Op;

/// The most original weights one merged matmul may hold.
const MAX_MERGED: usize = 4;

/// The fusion rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "matmul-bias-to-gemm",
            Fusion,
            "add(matmul(a, b), c) => gemm(a, b, c) for 2-D a and b",
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
            "x@W1 and x@W2 with constant 2-D W1, W2 => split(x@[W1 W2]): one wider matmul \
             (weights merged in constant order, at most 4, so each set is built once)",
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
                let (Some(c1), Some(c2)) = (const_index(eg, w1), const_index(eg, w2)) else {
                    return Vec::new();
                };
                let (Some(p1), Some(p2)) = (eg.analysis.parts_of(c1), eg.analysis.parts_of(c2))
                else {
                    return Vec::new();
                };
                // Canonical order: all of w1's originals before w2's; a bounded total.
                if p1.last() >= p2.first() || p1.len() + p2.len() > MAX_MERGED {
                    return Vec::new();
                }
                let parts: Vec<u32> = p1.iter().chain(&p2).copied().collect();
                // The matched terms themselves, for explanations.
                let m1 = super::term(eg, crate::lang::TNode::Op("matmul", vec![x, w1]));
                let m2 = super::term(eg, crate::lang::TNode::Op("matmul", vec![x, w2]));
                merge_columns(eg, x, (m1, w1), (m2, w2), parts).unwrap_or_default()
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
    ]
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

/// `x @ [w1 w2]` split back into the two products. The merged weight is built once per set
/// of original weights and found again when the rule fires on the same match later.
fn merge_columns(
    eg: &mut crate::analysis::TEGraph,
    x: egg::Id,
    (m1, w1): (egg::Id, egg::Id),
    (m2, w2): (egg::Id, egg::Id),
    parts: Vec<u32>,
) -> Option<Vec<(egg::Id, egg::Id)>> {
    let (t1, t2) = (eg[w1].data.ty()?.clone(), eg[w2].data.ty()?.clone());
    let (s1, s2) = (t1.static_dims()?, t2.static_dims()?);
    if s1.len() != 2 || s2.len() != 2 || s1[0] != s2[0] || t1.elem != t2.elem {
        return None;
    }
    let known = eg
        .analysis
        .parts
        .iter()
        .find(|(_, p)| **p == parts)
        .map(|(c, _)| *c);
    let w = match known {
        Some(c) => super::add(eg, crate::lang::TNode::Const(c))?,
        None => {
            let (a, b) = (const_tensor(eg, w1)?, const_tensor(eg, w2)?);
            let joined = crate::ir::interp::eval_op(&Op::Concat { axis: 1 }, &[&a, &b]).ok()?;
            let w = super::add_const(eg, "merged", joined.first()?)?;
            let c = const_index(eg, w)?;
            eg.analysis.parts.insert(c, parts);
            w
        }
    };
    let y = add_op(eg, Op::MatMul, &[x, w])?;
    let rank = eg[y].data.ty()?.shape.len();
    let split = add_op(
        eg,
        Op::Split {
            axis: rank - 1,
            sizes: vec![s1[1], s2[1]],
        },
        &[y],
    )?;
    let a = super::add(eg, crate::lang::TNode::Get(0, [split]))?;
    let b = super::add(eg, crate::lang::TNode::Get(1, [split]))?;
    Some(vec![(m1, a), (m2, b)])
}
