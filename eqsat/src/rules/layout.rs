//! Layout: transposes and reshapes cancelled, merged, pushed through elementwise ops, and
//! folded into matmul operands.

use super::{Rule, RuleKind::Layout, add_op, attr, rule, ty, var};
use crate::ir::{Dim, Op};

/// The layout rules.
pub fn rules() -> Vec<Rule> {
    vec![
        rule(
            "transpose-transpose",
            Layout,
            "transpose(transpose(x, q), p) => transpose(x, q[p]), or x when that is the identity",
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
            "reshape(reshape(x)) => reshape(x), or x when the shape comes back",
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
            "reshape(x) to x's own shape => x",
            "(reshape ?p ?x)",
            |eg, _, s| {
                let Op::Reshape { shape } = attr(eg, s, "?p")? else {
                    return None;
                };
                let same: &[Dim] = &ty(eg, s, "?x")?.shape;
                (same == shape.as_slice()).then(|| var(s, "?x"))?
            },
        ),
    ]
}
