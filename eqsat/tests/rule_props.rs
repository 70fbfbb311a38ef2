//! Every rule is checked for semantic equivalence: random shapes and inputs, the rule alone,
//! its rewritten form forced out of the e-graph, and the reference interpreter's outputs
//! compared before and after (a property test per rule). `every_rule_has_a_property_test`
//! keeps the list complete.

mod common;

use common::{check_rule, const_decl, tensor, ty};
use proptest::prelude::*;
use tessera_eqsat::ir::ElemType::{F32, I32};

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: 12,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const TOL: f64 = 1e-4;

/// The rules these tests cover; `every_rule_has_a_property_test` compares with the rule list.
const COVERED: &[&str] = &[
    "add-commute",
    "mul-commute",
    "add-zero",
    "mul-one",
    "sub-zero",
    "div-one",
    "neg-neg",
    "sub-self",
    "matmul-factor-left",
    "matmul-factor-right",
    "matmul-distribute-left",
    "relu-relu",
    "transpose-transpose",
    "reshape-reshape",
    "reshape-identity",
    "matmul-bias-to-gemm",
    "merge-matmuls-shared-input",
    "merge-split-chain",
];

#[test]
fn every_rule_has_a_property_test() {
    let mut missing: Vec<&str> = tessera_eqsat::rules::all_rules()
        .iter()
        .map(|r| r.name)
        .filter(|n| !COVERED.contains(n))
        .collect();
    missing.sort_unstable();
    assert!(
        missing.is_empty(),
        "rules without a property test: {missing:?}"
    );
}

/// A binary op of `x: [a, b]` and `y` (`[b]` or `[a, b]`).
fn binary(op: &str, a: usize, b: usize, full: bool, seed: u64, rule: &str) -> Result<(), String> {
    let ydims: Vec<usize> = if full { vec![a, b] } else { vec![b] };
    let src = format!(
        "graph @g(%x: {}, %y: {}) {{\n  %0 = {op} %x, %y : {}\n  return %0\n}}\n",
        ty("f32", &[a, b]),
        ty("f32", &ydims),
        ty("f32", &[a, b])
    );
    let inputs = [tensor(F32, &[a, b], seed), tensor(F32, &ydims, seed + 1)];
    check_rule(rule, &src, &inputs, TOL).map(|_| ())
}

/// `x op c` where `c: [b]` is a constant filled with `fill`.
fn with_const(
    op: &str,
    fill: f64,
    a: usize,
    b: usize,
    seed: u64,
    rule: &str,
) -> Result<(), String> {
    let src = format!(
        "{}graph @g(%x: {}) {{\n  %c = const @c : {}\n  %0 = {op} %x, %c : {}\n  return %0\n}}\n",
        const_decl("c", &[b], 0, Some(fill)),
        ty("f32", &[a, b]),
        ty("f32", &[b]),
        ty("f32", &[a, b])
    );
    check_rule(rule, &src, &[tensor(F32, &[a, b], seed)], TOL).map(|_| ())
}

proptest! {
    #![proptest_config(cfg())]

    #[test]
    fn add_commute(a in 1usize..5, b in 1usize..5, full: bool, seed: u64) {
        binary("add", a, b, full, seed, "add-commute").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn mul_commute(a in 1usize..5, b in 1usize..5, full: bool, seed: u64) {
        binary("mul", a, b, full, seed, "mul-commute").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn add_zero(a in 1usize..5, b in 1usize..5, seed: u64) {
        with_const("add", 0.0, a, b, seed, "add-zero").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn mul_one(a in 1usize..5, b in 1usize..5, seed: u64) {
        with_const("mul", 1.0, a, b, seed, "mul-one").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn sub_zero(a in 1usize..5, b in 1usize..5, seed: u64) {
        with_const("sub", 0.0, a, b, seed, "sub-zero").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn div_one(a in 1usize..5, b in 1usize..5, seed: u64) {
        with_const("div", 1.0, a, b, seed, "div-one").map_err(TestCaseError::fail)?;
    }

    #[test]
    fn neg_neg(a in 1usize..5, b in 1usize..5, seed: u64) {
        let t = ty("f32", &[a, b]);
        let src = format!("graph @g(%x: {t}) {{\n  %0 = neg %x : {t}\n  %1 = neg %0 : {t}\n  %2 = mul %1, %x : {t}\n  return %2\n}}\n");
        check_rule("neg-neg", &src, &[tensor(F32, &[a, b], seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn sub_self(a in 1usize..5, b in 1usize..5, seed: u64) {
        let t = ty("i32", &[a, b]);
        let src = format!("graph @g(%x: {t}) {{\n  %0 = sub %x, %x : {t}\n  return %0\n}}\n");
        check_rule("sub-self", &src, &[tensor(I32, &[a, b], seed)], 0.0).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn matmul_factor_left(m in 1usize..5, k in 1usize..5, n in 1usize..5, seed: u64) {
        let src = format!(
            "graph @g(%x: {}, %a: {}, %b: {}) {{\n  %0 = matmul %x, %a : {o}\n  %1 = matmul %x, %b : {o}\n  %2 = add %0, %1 : {o}\n  return %2\n}}\n",
            ty("f32", &[m, k]), ty("f32", &[k, n]), ty("f32", &[k, n]), o = ty("f32", &[m, n]));
        let inputs = [tensor(F32, &[m, k], seed), tensor(F32, &[k, n], seed + 1), tensor(F32, &[k, n], seed + 2)];
        check_rule("matmul-factor-left", &src, &inputs, TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn matmul_factor_right(m in 1usize..5, k in 1usize..5, n in 1usize..5, seed: u64) {
        let src = format!(
            "graph @g(%a: {}, %b: {}, %x: {}) {{\n  %0 = matmul %a, %x : {o}\n  %1 = matmul %b, %x : {o}\n  %2 = add %0, %1 : {o}\n  return %2\n}}\n",
            ty("f32", &[m, k]), ty("f32", &[m, k]), ty("f32", &[k, n]), o = ty("f32", &[m, n]));
        let inputs = [tensor(F32, &[m, k], seed), tensor(F32, &[m, k], seed + 1), tensor(F32, &[k, n], seed + 2)];
        check_rule("matmul-factor-right", &src, &inputs, TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn matmul_distribute_left(m in 1usize..5, k in 1usize..5, n in 1usize..5, seed: u64) {
        let src = format!(
            "graph @g(%x: {}, %a: {}, %b: {}) {{\n  %0 = add %a, %b : {w}\n  %1 = matmul %x, %0 : {o}\n  return %1\n}}\n",
            ty("f32", &[m, k]), ty("f32", &[k, n]), ty("f32", &[k, n]), w = ty("f32", &[k, n]), o = ty("f32", &[m, n]));
        let inputs = [tensor(F32, &[m, k], seed), tensor(F32, &[k, n], seed + 1), tensor(F32, &[k, n], seed + 2)];
        check_rule("matmul-distribute-left", &src, &inputs, TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn relu_relu(a in 1usize..6, seed: u64) {
        let t = ty("f32", &[a]);
        let src = format!("graph @g(%x: {t}) {{\n  %0 = relu %x : {t}\n  %1 = relu %0 : {t}\n  return %1\n}}\n");
        check_rule("relu-relu", &src, &[tensor(F32, &[a], seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn transpose_transpose(
        dims in proptest::collection::vec(1usize..4, 3),
        p in Just(vec![0usize, 1, 2]).prop_shuffle(),
        q in Just(vec![0usize, 1, 2]).prop_shuffle(),
        seed: u64,
    ) {
        let mid: Vec<usize> = q.iter().map(|&i| dims[i]).collect();
        let end: Vec<usize> = p.iter().map(|&i| mid[i]).collect();
        let src = format!(
            "graph @g(%x: {}) {{\n  %0 = transpose %x {{perm = {q:?}}} : {}\n  %1 = transpose %0 {{perm = {p:?}}} : {}\n  return %1\n}}\n",
            ty("f32", &dims), ty("f32", &mid), ty("f32", &end));
        check_rule("transpose-transpose", &src, &[tensor(F32, &dims, seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn reshape_reshape(a in 1usize..4, b in 1usize..4, c in 1usize..4, back: bool, seed: u64) {
        let last = if back { vec![a, b, c] } else { vec![a, b * c] };
        let src = format!(
            "graph @g(%x: {}) {{\n  %0 = reshape %x {{shape = {:?}}} : {}\n  %1 = reshape %0 {{shape = {last:?}}} : {}\n  return %1\n}}\n",
            ty("f32", &[a, b, c]), [a * b, c], ty("f32", &[a * b, c]), ty("f32", &last));
        check_rule("reshape-reshape", &src, &[tensor(F32, &[a, b, c], seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn reshape_identity(a in 1usize..5, b in 1usize..5, seed: u64) {
        let t = ty("f32", &[a, b]);
        let src = format!("graph @g(%x: {t}) {{\n  %0 = reshape %x {{shape = {:?}}} : {t}\n  %1 = relu %0 : {t}\n  return %1\n}}\n", [a, b]);
        check_rule("reshape-identity", &src, &[tensor(F32, &[a, b], seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn matmul_bias_to_gemm(m in 1usize..5, k in 1usize..5, n in 1usize..5, full: bool, seed: u64) {
        let cdims = if full { vec![m, n] } else { vec![n] };
        let src = format!(
            "graph @g(%x: {}, %w: {}, %c: {}) {{\n  %0 = matmul %x, %w : {o}\n  %1 = add %0, %c : {o}\n  return %1\n}}\n",
            ty("f32", &[m, k]), ty("f32", &[k, n]), ty("f32", &cdims), o = ty("f32", &[m, n]));
        let inputs = [tensor(F32, &[m, k], seed), tensor(F32, &[k, n], seed + 1), tensor(F32, &cdims, seed + 2)];
        check_rule("matmul-bias-to-gemm", &src, &inputs, TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn merge_matmuls_shared_input(b in 1usize..3, m in 1usize..4, k in 1usize..5, n1 in 1usize..5, n2 in 1usize..5, seed: u64) {
        let src = format!(
            "{}{}graph @g(%x: {}) {{\n  %w1 = const @w1 : {}\n  %w2 = const @w2 : {}\n  %0 = matmul %x, %w1 : {}\n  %1 = matmul %x, %w2 : {}\n  return %0, %1\n}}\n",
            const_decl("w1", &[k, n1], seed, None), const_decl("w2", &[k, n2], seed + 7, None),
            ty("f32", &[b, m, k]), ty("f32", &[k, n1]), ty("f32", &[k, n2]), ty("f32", &[b, m, n1]), ty("f32", &[b, m, n2]));
        check_rule("merge-matmuls-shared-input", &src, &[tensor(F32, &[b, m, k], seed)], TOL).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn merge_split_chain(m in 1usize..4, a in 1usize..4, b in 1usize..4, c in 1usize..4, d in 1usize..4, pick in 0usize..3, seed: u64) {
        // x split into [a, b+c, d] (b+c moved to position `pick`), then that piece split again.
        let mut sizes = vec![a, d];
        sizes.insert(pick.min(2), b + c);
        let pieces: Vec<String> = sizes.iter().map(|&n| ty("f32", &[m, n])).collect();
        let total: usize = sizes.iter().sum();
        let idx = pick.min(2);
        let names: Vec<String> = (0..sizes.len()).map(|i| format!("%p{i}")).collect();
        let src = format!(
            "graph @g(%x: {}) {{\n  {} = split %x {{axis = 1, sizes = {sizes:?}}} : {}\n  %q0, %q1 = split %p{idx} {{axis = 1, sizes = [{b}, {c}]}} : {}, {}\n  return {}, %q0, %q1\n}}\n",
            ty("f32", &[m, total]), names.join(", "), pieces.join(", "), ty("f32", &[m, b]), ty("f32", &[m, c]),
            names.iter().enumerate().filter(|(i, _)| *i != idx).map(|(_, n)| n.clone()).collect::<Vec<_>>().join(", "));
        check_rule("merge-split-chain", &src, &[tensor(F32, &[m, total], seed)], TOL).map_err(TestCaseError::fail)?;
    }
}
