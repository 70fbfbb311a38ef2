//! The cost-based choice flips with size: the same MLP stays whole when it is tiny (the
//! all-reduce costs more than the split saves) and is split when it is big. And the default
//! mesh of the built-in targets.

mod common;

use common::{parse_with_data, random_inputs, same_bits, shard};
use tessera_ir::{Op, interp};
use tessera_shard::Strategy;

/// `x[1, s, d] -> matmul [d, f] -> relu -> matmul [f, d]`, weights from the test sidecar.
fn mlp(s: u64, d: u64, f: u64) -> String {
    format!(
        "const @w1 : f32[{d}, {f}] = external
const @w2 : f32[{f}, {d}] = external

graph @mlp(%x: f32[1, {s}, {d}]) {{
  %w1 = const @w1 : f32[{d}, {f}]
  %h0 = matmul %x, %w1 : f32[1, {s}, {f}]
  %h = relu %h0 : f32[1, {s}, {f}]
  %w2 = const @w2 : f32[{f}, {d}]
  %y = matmul %h, %w2 : f32[1, {s}, {d}]
  return %y
}}
"
    )
}

#[test]
fn tiny_matmuls_stay_whole_and_big_ones_are_split() {
    let target = tessera_targets::resolve("mcm-2x2", &[]).expect("built-in");
    let mut results = Vec::new();
    for (s, d, f) in [(2, 8, 32), (256, 1024, 4096)] {
        let before = parse_with_data(&mlp(s, d, f)).expect("parses");
        let mut after = before.clone();
        let (changed, stats) = shard(&mut after, &*target, &[], Strategy::Auto);
        tessera_ir::verify::verify(&after).expect("verifies");
        let inputs = random_inputs(&before, 3);
        let want = interp::run(&before, &inputs).expect("runs");
        let got = interp::run(&after, &inputs).expect("runs");
        assert!(same_bits(&want, &got));
        let reduces = after
            .ops()
            .iter()
            .filter(|&&o| matches!(after.op(o).op, Op::AllReduce { .. }))
            .count();
        let note = stats
            .notes()
            .iter()
            .find(|n| n.contains("tensor-parallel"))
            .cloned()
            .expect("a note on the block");
        results.push((changed, reduces, note));
    }
    let (small, big) = (&results[0], &results[1]);
    assert!(!small.0 && small.1 == 0, "tiny: {small:?}");
    assert!(small.2.ends_with(": unsplit"), "{}", small.2);
    assert!(big.0 && big.1 == 1, "big: {big:?}");
    assert!(big.2.ends_with(": split"), "{}", big.2);
}

#[test]
fn default_meshes_of_the_built_in_targets() {
    let mesh = |name: &str| {
        let t = tessera_targets::resolve(name, &[]).expect("built-in");
        tessera_shard::pass::choose_mesh(&*t, &[]).expect("mesh")
    };
    let gpus = mesh("gpu-8");
    assert_eq!(gpus.shape, vec![8]);
    assert_eq!(gpus.devices[0], "gpu0");
    assert_eq!(gpus.devices[7], "gpu7");
    assert_eq!(
        mesh("mcm-2x2").devices,
        vec!["chip0", "chip1", "chip2", "chip3"]
    );
    assert_eq!(mesh("cpu").devices, vec!["cpu0"]);
    let t = tessera_targets::resolve("mcm-2x2", &[]).expect("built-in");
    let two = tessera_shard::pass::choose_mesh(&*t, &[2, 2]).expect("mesh");
    assert_eq!(two.shape, vec![2, 2]);
    let err = tessera_shard::pass::choose_mesh(&*t, &[8]).expect_err("too big");
    assert!(
        err.message.contains("a mesh of 8 devices"),
        "{}",
        err.message
    );

    // A one-device mesh has nothing to split.
    let cpu = tessera_targets::resolve("cpu", &[]).expect("built-in");
    let mut g = parse_with_data(&mlp(2, 8, 32)).expect("parses");
    let (changed, stats) = shard(&mut g, &*cpu, &[], Strategy::Tensor);
    assert!(!changed);
    assert!(
        stats.notes()[0].contains("mesh of 1 device"),
        "{:?}",
        stats.notes()
    );
}
