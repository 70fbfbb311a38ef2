//! `unfuse-split` against the reference interpreter on random shapes: fused products (gemm or
//! matmul, transposed or not, each kind of bias: none, `[N]`, `[1, N]`, `[M, N]` constants,
//! an `[M, 1]` input; with or without a reshape in between) split
//! into random pieces compute the same outputs after the rewrite, which must have happened.

use proptest::prelude::*;
use tessera_ir::interp::run;
use tessera_ir::{Tensor, text};
use tessera_passes::{Statistics, unfuse_split};

fn values(n: u64, seed: u64) -> String {
    (0..n)
        .map(|i| format!("{:.1}", ((i * 7 + seed * 13) % 19) as f64 - 9.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A fused product of `x: f32[m, k]` by a constant into `pieces`; returns the text and the
/// input shape.
fn model(
    m: u64,
    k: u64,
    pieces: &[u64],
    trans_b: bool,
    bias: u8,
    gemm: bool,
    reshape: bool,
) -> String {
    let n: u64 = pieces.iter().sum();
    let wshape = if trans_b { (n, k) } else { (k, n) };
    let mut consts = format!(
        "const @w : f32[{}, {}] = [{}]\n",
        wshape.0,
        wshape.1,
        values(n * k, 1)
    );
    let mut body = format!("  %w = const @w : f32[{}, {}]\n", wshape.0, wshape.1);
    let prod = if gemm {
        let c = match bias {
            1 => {
                consts += &format!("const @b : f32[{n}] = [{}]\n", values(n, 2));
                body += &format!("  %b = const @b : f32[{n}]\n");
                ", %b"
            }
            2 => {
                consts += &format!("const @b : f32[1, {n}] = [{}]\n", values(n, 3));
                body += &format!("  %b = const @b : f32[1, {n}]\n");
                ", %b"
            }
            3 => ", %c",
            4 => {
                consts += &format!("const @b : f32[{m}, {n}] = [{}]\n", values(m * n, 4));
                body += &format!("  %b = const @b : f32[{m}, {n}]\n");
                ", %b"
            }
            _ => "",
        };
        format!(
            "  %y = gemm %x, %w{c} {{alpha = 0.5, beta = 2.0, trans-a = false, trans-b = {trans_b}}} : f32[{m}, {n}]\n"
        )
    } else {
        format!("  %y = matmul %x, %w : f32[{m}, {n}]\n")
    };
    body += &prod;
    let (src, rank_shape) = if reshape {
        body += &format!("  %r = reshape %y {{shape = [1, {m}, {n}]}} : f32[1, {m}, {n}]\n");
        ("%r", format!("1, {m}, "))
    } else {
        ("%y", format!("{m}, "))
    };
    let axis = if reshape { 2 } else { 1 };
    let names: Vec<String> = (0..pieces.len()).map(|i| format!("%p{i}")).collect();
    let tys: Vec<String> = pieces
        .iter()
        .map(|p| format!("f32[{rank_shape}{p}]"))
        .collect();
    let sizes: Vec<String> = pieces.iter().map(u64::to_string).collect();
    body += &format!(
        "  {} = split {src} {{axis = {axis}, sizes = [{}]}} : {}\n  return {}\n",
        names.join(", "),
        sizes.join(", "),
        tys.join(", "),
        names.join(", ")
    );
    format!("{consts}\ngraph @fused(%x: f32[{m}, {k}], %c: f32[{m}, 1]) {{\n{body}}}\n")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x0f5e),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_rewrite_keeps_the_outputs(
        m in 1u64..4,
        k in 1u64..5,
        pieces in prop::collection::vec(1u64..5, 2..4),
        trans_b in any::<bool>(),
        bias in 0u8..5,
        gemm in any::<bool>(),
        reshape in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let src = model(m, k, &pieces, trans_b && gemm, bias, gemm, reshape);
        let g = text::parse(&src, None).map_err(|e| TestCaseError::fail(format!("{e}\n{src}")))?;
        tessera_ir::verify::verify(&g).map_err(|e| TestCaseError::fail(format!("{:?}\n{src}", e[0])))?;
        let x = Tensor::F32(ndarray::ArrayD::from_shape_fn(
            ndarray::IxDyn(&[m as usize, k as usize]),
            |i| ((i[0] * 5 + i[1] * 3 + seed as usize) % 11) as f32 - 5.0,
        ));
        let c = Tensor::F32(ndarray::ArrayD::from_shape_fn(
            ndarray::IxDyn(&[m as usize, 1]),
            |i| i[0] as f32 + 0.5,
        ));
        let want = run(&g, &[x.clone(), c.clone()]).expect("the fused graph runs");
        let mut after = g.clone();
        let mut stats = Statistics::default();
        let changed = unfuse_split(&mut after, &mut stats).expect("the pass");
        prop_assert!(changed, "nothing rewritten:\n{src}");
        tessera_ir::verify::verify(&after).map_err(|e| TestCaseError::fail(format!("{:?}", e[0])))?;
        let printed = text::print(&after);
        prop_assert!(!printed.contains("= split"), "a split is left:\n{printed}");
        let got = run(&after, &[x, c]).expect("the rewritten graph runs");
        prop_assert_eq!(got, want, "{}", printed);
    }
}
