//! Algebra: identities and zeros, cancellations, distributing and factoring matmul over add,
//! bounded associativity (only where two constants fold into one), and scalars moved to the
//! smaller side of a matmul.

use egg::{Id, Subst};

use super::{
    MAX_FOLD_DEPTH, Rule, RuleKind::Algebra, add_op, all_equal, any_rule, const_name, eval,
    fold_depth, intern_const, intern_folded, is_known, is_scalar, lookup_op, numel, pattern_rule,
    rule, ty, value, var,
};
use crate::analysis::TEGraph;
use crate::ir::{BinaryOp, ElemType, Op, UnaryOp};
use crate::lang::TNode;

/// The algebra rules.
pub fn rules() -> Vec<Rule> {
    vec![
        pattern_rule(
            "add-commute",
            Algebra,
            "x + y => y + x (mirror, same cost: lets every other rule match either operand order)",
            "(add ?x ?y)",
            "(add ?y ?x)",
        ),
        pattern_rule(
            "mul-commute",
            Algebra,
            "x * y => y * x (mirror, same cost: lets every other rule match either operand order)",
            "(mul ?x ?y)",
            "(mul ?y ?x)",
        ),
        rule(
            "add-zero",
            Algebra,
            "x + 0 => x (cheaper: no op; when the zero does not broadcast x to a larger shape)",
            "(add ?x ?z)",
            |eg, _, s| all_equal(value(eg, s, "?z")?, 0.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "mul-one",
            Algebra,
            "x * 1 => x (cheaper: no op; when the one does not broadcast x to a larger shape)",
            "(mul ?x ?o)",
            |eg, _, s| all_equal(value(eg, s, "?o")?, 1.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "sub-zero",
            Algebra,
            "x - 0 => x (cheaper: no op)",
            "(sub ?x ?z)",
            |eg, _, s| all_equal(value(eg, s, "?z")?, 0.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "div-one",
            Algebra,
            "x / 1 => x (cheaper: no op)",
            "(div ?x ?o)",
            |eg, _, s| all_equal(value(eg, s, "?o")?, 1.0).then(|| var(s, "?x"))?,
        ),
        pattern_rule(
            "neg-neg",
            Algebra,
            "-(-x) => x (cheaper: no op)",
            "(neg (neg ?x))",
            "?x",
        ),
        rule(
            "sub-self",
            Algebra,
            "x - x => 0 for integer x (cheaper: a constant; floats keep it: inf - inf is NaN)",
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
                intern_const(eg, "zero", &zero)
            },
        ),
        rule(
            "matmul-factor-left",
            Algebra,
            "x@a + x@b => x@(a + b): one matmul instead of two (a and b with the same matrix \
             extents: a broadcast inside the matrix axes does not distribute)",
            "(add (matmul ?x ?a) (matmul ?x ?b))",
            |eg, class, s| {
                same_matrices(eg, s)?;
                if is_known(eg, class) {
                    return None;
                }
                let sum = sum_or_fold(eg, var(s, "?a")?, var(s, "?b")?)?;
                add_op(eg, Op::MatMul, &[var(s, "?x")?, sum])
            },
        ),
        rule(
            "matmul-factor-right",
            Algebra,
            "a@x + b@x => (a + b)@x: one matmul instead of two (a and b with the same matrix \
             extents)",
            "(add (matmul ?a ?x) (matmul ?b ?x))",
            |eg, class, s| {
                same_matrices(eg, s)?;
                if is_known(eg, class) {
                    return None;
                }
                let sum = sum_or_fold(eg, var(s, "?a")?, var(s, "?b")?)?;
                add_op(eg, Op::MatMul, &[sum, var(s, "?x")?])
            },
        ),
        rule(
            "matmul-distribute-left",
            Algebra,
            "x@(a + b) => x@a + x@b (mirror of matmul-factor-left: two matmuls, which pays off \
             where x@a or x@b exists already or merges with another product; a and b with the \
             same matrix extents)",
            "(matmul ?x (add ?a ?b))",
            |eg, class, s| {
                same_matrices(eg, s)?;
                if is_known(eg, class) {
                    return None;
                }
                let x = var(s, "?x")?;
                let xa = add_op(eg, Op::MatMul, &[x, var(s, "?a")?])?;
                let xb = add_op(eg, Op::MatMul, &[x, var(s, "?b")?])?;
                add_op(eg, Op::Binary(BinaryOp::Add), &[xa, xb])
            },
        ),
        pattern_rule(
            "relu-relu",
            Algebra,
            "relu(relu(x)) => relu(x) (cheaper: one op)",
            "(relu (relu ?x))",
            "(relu ?x)",
        ),
        // Identities with a constant operand. The type guard refuses each one where the
        // constant would broadcast x to a larger shape.
        rule(
            "pow-one",
            Algebra,
            "x ^ 1 => x (cheaper: no op)",
            "(pow ?x ?o)",
            |eg, _, s| all_equal(value(eg, s, "?o")?, 1.0).then(|| var(s, "?x"))?,
        ),
        rule(
            "pow-two",
            Algebra,
            "x ^ 2 => x * x (cheaper: a multiply instead of a power)",
            "(pow ?x ?t)",
            |eg, _, s| {
                if !all_equal(value(eg, s, "?t")?, 2.0) {
                    return None;
                }
                let x = var(s, "?x")?;
                add_op(eg, Op::Binary(BinaryOp::Mul), &[x, x])
            },
        ),
        any_rule(
            "mul-neg-one",
            Algebra,
            "x * -1 => -x (cheaper: a unary op, no constant read)",
            ["(mul ?x ?m)", "(mul ?m ?x)"],
            |eg, _, s| {
                if !all_equal(value(eg, s, "?m")?, -1.0) {
                    return None;
                }
                let x = var(s, "?x")?;
                add_op(eg, Op::Unary(UnaryOp::Neg), &[x])
            },
        ),
        rule(
            "zero-sub",
            Algebra,
            "0 - x => -x (cheaper: a unary op; integers, or floats when the zero is -0: +0 - x \
             is +0, not -0, for x = +0; signed types only)",
            "(sub ?z ?x)",
            |eg, _, s| {
                let z = value(eg, s, "?z")?;
                if !all_equal(z, 0.0) {
                    return None;
                }
                let elem = ty(eg, s, "?x")?.elem;
                if matches!(elem, ElemType::U8 | ElemType::Bool)
                    || (elem.is_float() && !z.to_f64_vec().iter().all(|v| v.is_sign_negative()))
                {
                    return None;
                }
                let x = var(s, "?x")?;
                add_op(eg, Op::Unary(UnaryOp::Neg), &[x])
            },
        ),
        any_rule(
            "relu-max-zero",
            Algebra,
            "max(x, 0) => relu(x) (cheaper: a unary op, no constant read; NaN stays NaN); \
             max(0, x) only for integers (for x = -0 it is +0, relu gives -0)",
            ["(max ?x ?z)", "(max ?z ?x)"],
            |eg, class, s| {
                if !all_equal(value(eg, s, "?z")?, 0.0) {
                    return None;
                }
                let (x, z) = (var(s, "?x")?, var(s, "?z")?);
                let x_first = lookup_op(eg, &Op::Binary(BinaryOp::Max), &[x, z])
                    .is_some_and(|c| c == eg.find(class));
                if !x_first && ty(eg, s, "?x")?.elem.is_float() {
                    return None;
                }
                add_op(eg, Op::Unary(UnaryOp::Relu), &[x])
            },
        ),
        // Negations absorbed.
        pattern_rule(
            "sub-neg",
            Algebra,
            "x - (-y) => x + y (cheaper: the negation goes)",
            "(sub ?x (neg ?y))",
            "(add ?x ?y)",
        ),
        pattern_rule(
            "add-neg",
            Algebra,
            "x + (-y) => x - y (cheaper: the negation goes)",
            "(add ?x (neg ?y))",
            "(sub ?x ?y)",
        ),
        rule(
            "neg-sub",
            Algebra,
            "-(x - y) => y - x for integers (cheaper: the negation goes; not for floats: for x = \
             y it gives +0 where -0 was, and 1/(-0) is -inf)",
            "(neg (sub ?x ?y))",
            |eg, _, s| {
                if ty(eg, s, "?x")?.elem.is_float() {
                    return None;
                }
                add_op(
                    eg,
                    Op::Binary(BinaryOp::Sub),
                    &[var(s, "?y")?, var(s, "?x")?],
                )
            },
        ),
        rule(
            "neg-mul",
            Algebra,
            "(-x) * y => -(x * y) (mirror, same cost when x and y have one shape: moves the \
             negation out to where neg-neg, add-neg and sub-neg remove it)",
            "(mul (neg ?x) ?y)",
            |eg, class, s| {
                if is_known(eg, class) {
                    return None;
                }
                // A class that is its own product (`-x` times y equal to `-x`: y is one
                // there, or `-x` zero) would give -(x*y), -(x*y*y), ... without end.
                let negated = eg.lookup(TNode::Op("neg", vec![var(s, "?x")?]))?;
                if eg.find(negated) == eg.find(class) {
                    return None;
                }
                let product = add_op(
                    eg,
                    Op::Binary(BinaryOp::Mul),
                    &[var(s, "?x")?, var(s, "?y")?],
                )?;
                add_op(eg, Op::Unary(UnaryOp::Neg), &[product])
            },
        ),
        // Unary cancellations.
        pattern_rule(
            "reciprocal-reciprocal",
            Algebra,
            "1/(1/x) => x (cheaper; equal within rounding, except where 1/x overflows)",
            "(reciprocal (reciprocal ?x))",
            "?x",
        ),
        pattern_rule(
            "log-exp",
            Algebra,
            "log(exp(x)) => x (cheaper, and exact where exp(x) does not overflow; the reverse, \
             exp(log(x)), is wrong for x <= 0 and is not a rule)",
            "(log (exp ?x))",
            "?x",
        ),
        pattern_rule(
            "abs-abs",
            Algebra,
            "|(|x|)| => |x| (cheaper: one op)",
            "(abs (abs ?x))",
            "(abs ?x)",
        ),
        pattern_rule(
            "abs-neg",
            Algebra,
            "|-x| => |x| (cheaper: one op)",
            "(abs (neg ?x))",
            "(abs ?x)",
        ),
        pattern_rule(
            "relu-abs",
            Algebra,
            "relu(|x|) => |x| (cheaper: one op; |x| is never negative)",
            "(relu (abs ?x))",
            "(abs ?x)",
        ),
        pattern_rule(
            "max-self",
            Algebra,
            "max(x, x) => x (cheaper: no op)",
            "(max ?x ?x)",
            "?x",
        ),
        pattern_rule(
            "min-self",
            Algebra,
            "min(x, x) => x (cheaper: no op)",
            "(min ?x ?x)",
            "?x",
        ),
        // Bounded associativity: two known constants fold into one, so each application
        // removes an op and nothing can grow without limit.
        rule(
            "add-const-assoc",
            Algebra,
            "(x + c1) + c2 => x + (c1 + c2) for known c1, c2 (cheaper: one add, the constants \
             fold; equal within rounding)",
            "(add (add ?x ?c1) ?c2)",
            |eg, _, s| fold_pair(eg, s, BinaryOp::Add, BinaryOp::Add, false),
        ),
        rule(
            "mul-const-assoc",
            Algebra,
            "(x * c1) * c2 => x * (c1 * c2) for known c1, c2 (cheaper: one multiply, the \
             constants fold; equal within rounding)",
            "(mul (mul ?x ?c1) ?c2)",
            |eg, class, s| {
                // (A class that is its own product by c2 folds into new constants only.)
                let inner = eg.lookup(TNode::Op("mul", vec![var(s, "?x")?, var(s, "?c1")?]))?;
                if eg.find(inner) == eg.find(class) {
                    return None;
                }
                fold_pair(eg, s, BinaryOp::Mul, BinaryOp::Mul, false)
            },
        ),
        rule(
            "add-sub-const",
            Algebra,
            "(x + c1) - c2 => x + (c1 - c2) for known c1, c2 (cheaper: one add, the constants fold)",
            "(sub (add ?x ?c1) ?c2)",
            |eg, _, s| fold_pair(eg, s, BinaryOp::Add, BinaryOp::Sub, false),
        ),
        rule(
            "sub-add-const",
            Algebra,
            "(x - c1) + c2 => x + (c2 - c1) for known c1, c2 (cheaper: one add, the constants fold)",
            "(add (sub ?x ?c1) ?c2)",
            |eg, _, s| fold_pair(eg, s, BinaryOp::Add, BinaryOp::Sub, true),
        ),
        rule(
            "sub-sub-const",
            Algebra,
            "(x - c1) - c2 => x - (c1 + c2) for known c1, c2 (cheaper: one subtract, the constants \
             fold)",
            "(sub (sub ?x ?c1) ?c2)",
            |eg, _, s| fold_pair(eg, s, BinaryOp::Sub, BinaryOp::Add, false),
        ),
        rule(
            "div-const-to-mul",
            Algebra,
            "x / c => x * (1/c) for a known float c whose reciprocal is finite and non-zero \
             (cheaper: a multiply instead of a divide; exact for powers of two, else within \
             one rounding)",
            "(div ?x ?c)",
            |eg, _, s| {
                if !ty(eg, s, "?c")?.elem.is_float() {
                    return None;
                }
                if value(eg, s, "?x").is_some() {
                    return None; // a constant: folded by the analysis
                }
                let c = var(s, "?c")?;
                let depth = fold_depth(eg, c)? + 1;
                if depth > MAX_FOLD_DEPTH {
                    return None;
                }
                let r = eval(&Op::Unary(UnaryOp::Reciprocal), &[value(eg, s, "?c")?])?;
                let rv = r.to_f64_vec();
                if rv.is_empty() || !rv.iter().all(|v| v.is_finite() && *v != 0.0) {
                    return None;
                }
                let stem = format!("{}.reciprocal", const_name(eg, c).unwrap_or_default());
                let r = intern_folded(eg, &stem, depth, &r)?;
                add_op(eg, Op::Binary(BinaryOp::Mul), &[var(s, "?x")?, r])
            },
        ),
        // A scalar factor moved across a matmul, to the smaller of the two tensors.
        any_rule(
            "matmul-scale-out",
            Algebra,
            "(a * s) @ b => (a @ b) * s for a one-element s, when the product has no more \
             elements than a (cheaper or equal: the scaling runs on the smaller tensor; 2-D, \
             matmul-scale-gemm then folds it into a gemm's alpha)",
            ["(matmul (mul ?a ?s) ?b)", "(matmul (mul ?s ?a) ?b)"],
            |eg, c, s| scale_out(eg, c, s, "?a"),
        ),
        any_rule(
            "matmul-scale-out-right",
            Algebra,
            "a @ (b * s) => (a @ b) * s for a one-element s, when the product has no more \
             elements than b (cheaper or equal: the scaling runs on the smaller tensor)",
            ["(matmul ?a (mul ?b ?s))", "(matmul ?a (mul ?s ?b))"],
            |eg, c, s| scale_out(eg, c, s, "?b"),
        ),
    ]
}

/// `(x inner c1) outer c2` rebuilt as `x op (c1 fold c2)` where both constants are known:
/// `outer_op` is the op between x and the folded constant, `fold` combines the constants
/// (`swap`: `c2 fold c1`). The folded constant is computed here and interned (equal values
/// share one class), at most [`MAX_FOLD_DEPTH`] folds deep (see [`fold_depth`]: around a
/// cycle of classes, reassociation would otherwise fold new constants without end).
fn fold_pair(
    eg: &mut TEGraph,
    s: &Subst,
    outer_op: BinaryOp,
    fold: BinaryOp,
    swap: bool,
) -> Option<Id> {
    // A known x makes the whole term a constant, which the analysis folds. Reassociating
    // it would only make new constants: with commutativity, every product (or sum) of the
    // constants in reach, without end.
    if value(eg, s, "?x").is_some() {
        return None;
    }
    let (v1, v2) = (value(eg, s, "?c1")?, value(eg, s, "?c2")?);
    let (c1, c2) = (var(s, "?c1")?, var(s, "?c2")?);
    let depth = fold_depth(eg, c1)? + fold_depth(eg, c2)? + 1;
    if depth > MAX_FOLD_DEPTH {
        return None;
    }
    let pair = if swap { [v2, v1] } else { [v1, v2] };
    let folded = eval(&Op::Binary(fold), &pair)?;
    if folded.len() > eg.analysis.fold_limit {
        return None;
    }
    let stem = const_name(eg, c1).unwrap_or_else(|| "c".into());
    let folded = intern_folded(eg, &stem, depth, &folded)?;
    add_op(eg, Op::Binary(outer_op), &[var(s, "?x")?, folded])
}

/// The class of `a + b`: a constant interned at the next fold depth when both values are
/// known (the analysis would give a new class of its own to every such sum, see
/// [`is_known`]), else an add node.
fn sum_or_fold(eg: &mut TEGraph, a: Id, b: Id) -> Option<Id> {
    if !(is_known(eg, a) && is_known(eg, b)) {
        return add_op(eg, Op::Binary(BinaryOp::Add), &[a, b]);
    }
    let depth = fold_depth(eg, a)? + fold_depth(eg, b)? + 1;
    if depth > MAX_FOLD_DEPTH {
        return None;
    }
    let (va, vb) = (eg[a].data.value.as_ref()?, eg[b].data.value.as_ref()?);
    let sum = eval(&Op::Binary(BinaryOp::Add), &[va, vb])?;
    if sum.len() > eg.analysis.fold_limit {
        return None;
    }
    let stem = const_name(eg, a).unwrap_or_else(|| "c".into());
    intern_folded(eg, &stem, depth, &sum)
}

/// `Some` when `?a` and `?b` have the same matrix extents: the same rank class (1-D, or at
/// least 2-D) and equal last one or two extents. Only their batch axes may broadcast: a
/// matmul distributes over an add batch by batch, but not over a broadcast inside the
/// matrices (`x @ (a + row)` is not `x @ a + x @ row` for a 1-D `row`).
fn same_matrices(eg: &TEGraph, s: &Subst) -> Option<()> {
    let (a, b) = (ty(eg, s, "?a")?, ty(eg, s, "?b")?);
    let tail = |t: &crate::ir::TensorType| t.shape[t.rank().saturating_sub(2)..].to_vec();
    let ok = a.rank() >= 1
        && b.rank() >= 1
        && (a.rank() >= 2) == (b.rank() >= 2)
        && tail(&a) == tail(&b);
    ok.then_some(())
}

/// `matmul` with a one-element factor on operand `scaled` (`?a` or `?b`) rebuilt as the
/// product scaled, when the product is no larger than the scaled operand.
fn scale_out(eg: &mut TEGraph, class: Id, s: &Subst, scaled: &str) -> Option<Id> {
    if is_known(eg, class) {
        return None;
    }
    if !is_scalar(&ty(eg, s, "?s")?) {
        return None;
    }
    let out = eg[class].data.ty()?.clone();
    if numel(&out)? > numel(&ty(eg, s, scaled)?)? {
        return None;
    }
    let (a, b, k) = (var(s, "?a")?, var(s, "?b")?, var(s, "?s")?);
    let product = add_op(eg, Op::MatMul, &[a, b])?;
    add_op(eg, Op::Binary(BinaryOp::Mul), &[product, k])
}
