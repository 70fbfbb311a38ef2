//! Fusion and merging: matmul and bias into gemm, conv and batch norm folded, consecutive
//! elementwise ops, matmuls or convs sharing an input merged into one wider op and split,
//! and the reverse splits.

use super::{Rule, RuleKind::Fusion, add_op, const_index, const_tensor, multi_rule, rule, ty, var};
use crate::ir::{Op, Tensor};

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
                let (Some(t1), Some(t2)) = (const_tensor(eg, w1), const_tensor(eg, w2)) else {
                    return Vec::new();
                };
                let parts: Vec<u32> = p1.iter().chain(&p2).copied().collect();
                merge_columns(eg, x, m1, m2, &t1, &t2, parts).unwrap_or_default()
            },
        ),
    ]
}

/// `x @ [w1 w2]` split back into the two products.
fn merge_columns(
    eg: &mut crate::analysis::TEGraph,
    x: egg::Id,
    m1: egg::Id,
    m2: egg::Id,
    w1: &Tensor,
    w2: &Tensor,
    parts: Vec<u32>,
) -> Option<Vec<(egg::Id, egg::Id)>> {
    let (s1, s2) = (w1.shape(), w2.shape());
    if s1.len() != 2 || s2.len() != 2 || s1[0] != s2[0] || w1.elem() != w2.elem() {
        return None;
    }
    let joined = crate::ir::interp::eval_op(&Op::Concat { axis: 1 }, &[w1, w2]).ok()?;
    let w = super::add_const(eg, "merged", joined.first()?)?;
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
    let a = super::add(eg, crate::lang::TNode::Get(0, [split]))?;
    let b = super::add(eg, crate::lang::TNode::Get(1, [split]))?;
    Some(vec![(m1, a), (m2, b)])
}
