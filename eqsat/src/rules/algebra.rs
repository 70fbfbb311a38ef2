//! Algebra: identities and zeros, cancellations, distributing and factoring matmul over add,
//! and bounded associativity.

use super::{Rule, RuleKind::Algebra, all_equal, pattern_rule, rule, ty, value, var};

/// The algebra rules.
pub fn rules() -> Vec<Rule> {
    vec![
        pattern_rule(
            "add-commute",
            Algebra,
            "x + y => y + x",
            "(add ?x ?y)",
            "(add ?y ?x)",
        ),
        pattern_rule(
            "mul-commute",
            Algebra,
            "x * y => y * x",
            "(mul ?x ?y)",
            "(mul ?y ?x)",
        ),
        rule(
            "add-zero",
            Algebra,
            "x + 0 => x (when the zero does not broadcast x to a larger shape)",
            "(add ?x ?z)",
            |eg, _, s| all_equal(value(eg, s, "?z")?, 0.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "mul-one",
            Algebra,
            "x * 1 => x (when the one does not broadcast x to a larger shape)",
            "(mul ?x ?o)",
            |eg, _, s| all_equal(value(eg, s, "?o")?, 1.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "sub-zero",
            Algebra,
            "x - 0 => x",
            "(sub ?x ?z)",
            |eg, _, s| all_equal(value(eg, s, "?z")?, 0.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "div-one",
            Algebra,
            "x / 1 => x",
            "(div ?x ?o)",
            |eg, _, s| all_equal(value(eg, s, "?o")?, 1.0).then(|| var(s, "?x"))?,
        ),
        pattern_rule("neg-neg", Algebra, "-(-x) => x", "(neg (neg ?x))", "?x"),
        rule(
            "sub-self",
            Algebra,
            "x - x => 0 for integer x (floats keep it: inf - inf is NaN)",
            "(sub ?x ?x)",
            |eg, _, s| {
                let t = ty(eg, s, "?x")?;
                if t.elem.is_float() {
                    return None;
                }
                let dims: Vec<usize> = t
                    .static_dims()?
                    .iter()
                    .map(|&d| usize::try_from(d).ok())
                    .collect::<Option<_>>()?;
                let zero = crate::ir::Tensor::zeros(t.elem, &dims).ok()?;
                super::add_const(eg, "zero", &zero)
            },
        ),
        pattern_rule(
            "matmul-factor-left",
            Algebra,
            "x@a + x@b => x@(a + b): one matmul instead of two",
            "(add (matmul ?x ?a) (matmul ?x ?b))",
            "(matmul ?x (add ?a ?b))",
        ),
        pattern_rule(
            "matmul-factor-right",
            Algebra,
            "a@x + b@x => (a + b)@x",
            "(add (matmul ?a ?x) (matmul ?b ?x))",
            "(matmul (add ?a ?b) ?x)",
        ),
        pattern_rule(
            "matmul-distribute-left",
            Algebra,
            "x@(a + b) => x@a + x@b (the reverse of matmul-factor-left)",
            "(matmul ?x (add ?a ?b))",
            "(add (matmul ?x ?a) (matmul ?x ?b))",
        ),
        pattern_rule(
            "relu-relu",
            Algebra,
            "relu(relu(x)) => relu(x)",
            "(relu (relu ?x))",
            "(relu ?x)",
        ),
    ]
}
