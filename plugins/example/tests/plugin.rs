//! The example plugin's own `tessera` binary: its pass and target are registered next to the
//! built-in ones, and it compiles a model with them, the matmuls costed by the plugin's
//! systolic-array model.

use std::path::PathBuf;

use assert_cmd::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tool() -> Command {
    let mut c = Command::cargo_bin("tessera-example").expect("binary");
    c.current_dir(repo());
    c
}

fn stdout(c: &mut Command) -> String {
    let out = c.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn registers_its_pass_and_target() {
    let passes = stdout(tool().arg("passes"));
    assert!(
        passes.contains("pin-matmuls   Place every unplaced matmul"),
        "{passes}"
    );
    assert!(passes.contains("canonicalize"), "built-ins stay: {passes}");
    let targets = stdout(tool().arg("targets"));
    assert!(
        targets
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("example-npu") && l.ends_with("(plugin)")),
        "{targets}"
    );
    assert!(targets.contains("mcm-2x2"), "{targets}");
    let show = stdout(tool().args(["targets", "show", "example-npu"]));
    assert!(show.contains("npu1"), "{show}");
}

#[test]
fn compiles_a_model_with_the_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = stdout(
        tool()
            .args([
                "compile",
                "testdata/models/mlp.tir",
                "--target",
                "example-npu",
                "--passes",
                "canonicalize,pin-matmuls{device=npu1},cse",
                "--strategy",
                "single",
                "--objective",
                "latency",
                "--input-shape",
                "x=8x16",
                "--pass-statistics",
                "-o",
            ])
            .arg(dir.path()),
    );
    // The MLP's matmuls are [8,16]x[16,32] and [8,32]x[32,10] in f32: one 128x128 tile each,
    // (16 + 256) and (32 + 256) cycles, four passes for f32, at 1 GHz: 1088 ns + 1152 ns,
    // plus 100 ns of overhead each (their memory terms, 3584 B and 2664 B at 200 GB/s, are
    // smaller): 2440 ns. With `--strategy single --objective latency` the other four ops follow
    // them to npu1 (the single device with the lowest latency) and are memory-bound there, by the roofline: add 2176 B, relu 2048 B, add
    // 680 B, softmax 640 B at 200 GB/s, plus 100 ns each: 427.72 ns. npu1 is busy 2.868 us.
    let npu1 = out
        .lines()
        .find(|l| l.starts_with("npu1 "))
        .unwrap_or_else(|| panic!("no npu1 row: {out}"));
    let cols: Vec<&str> = npu1.split_whitespace().collect();
    // Six ops, plus the transfer that brings the input x from the host.
    assert_eq!(cols[1], "7", "{out}");
    assert_eq!(&cols[2..4], ["2.868", "us"], "{out}");
    assert!(out.contains("2 ops pinned by device annotations"), "{out}");
    assert!(!out.contains("transfers    0 per sample"), "{out}");
    let placed = std::fs::read_to_string(dir.path().join("placed.tir")).expect("placed IR");
    assert_eq!(placed.matches("= matmul").count(), 2, "{placed}");
    assert!(
        placed
            .lines()
            .filter(|l| l.contains("= matmul"))
            .all(|l| l.contains("device(\"npu1\")")),
        "{placed}"
    );
}

#[test]
fn the_plugin_refuses_f64_on_its_npus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("m.tir");
    std::fs::write(
        &model,
        "graph @g(%x: f64[4, 4]) {\n  %0 = matmul %x, %x : f64[4, 4]\n  return %0\n}\n",
    )
    .expect("write");
    let out = tool()
        .args([
            "compile",
            "--target",
            "example-npu",
            "--passes",
            "pin-matmuls",
        ])
        .arg(&model)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("matmul op0 cannot run on npu0: npu0 has no f64 datapath"),
        "{err}"
    );
}

#[test]
fn clashing_names_are_refused() {
    // The stock binary does not know the plugin's pass.
    let out = Command::cargo_bin("tessera-example")
        .expect("binary")
        .args(["opt", "--passes", "pin-matmul"])
        .arg(repo().join("testdata/models/mlp.tir"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did you mean `pin-matmuls`?"), "{err}");
}

/// Checks `text` against FileCheck-style directives, one per line: `CHECK: s` (s on a later
/// line than the previous match), `CHECK-NEXT: s` (on the very next line), `CHECK-NOT: s`
/// (nowhere in the text).
fn filecheck(text: &str, directives: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let mut at = 0;
    for d in directives.lines().map(str::trim).filter(|d| !d.is_empty()) {
        if let Some(s) = d.strip_prefix("CHECK-NOT: ") {
            assert!(!text.contains(s), "CHECK-NOT: {s}\n{text}");
        } else if let Some(s) = d.strip_prefix("CHECK-NEXT: ") {
            assert!(
                lines.get(at).is_some_and(|l| l.contains(s)),
                "CHECK-NEXT: {s} is not line {} ({:?})\n{text}",
                at + 1,
                lines.get(at)
            );
            at += 1;
        } else if let Some(s) = d.strip_prefix("CHECK: ") {
            let k = lines[at..]
                .iter()
                .position(|l| l.contains(s))
                .unwrap_or_else(|| panic!("CHECK: {s} not found after line {at}\n{text}"));
            at += k + 1;
        } else {
            panic!("not a directive: {d}");
        }
    }
}

/// A 256x256 matmul and a relu: two tiles of the array along each side.
const MATMUL_256: &str = "graph @g(%a: f32[256, 256], %b: f32[256, 256]) {
  %0 = matmul %a, %b : f32[256, 256]
  %1 = relu %0 : f32[256, 256]
  return %1
}
";

#[test]
fn the_npus_get_the_plugins_pipeline_and_artifact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("mm.tir");
    std::fs::write(&model, MATMUL_256).expect("write");
    let out_dir = dir.path().join("out");
    let out = stdout(
        tool()
            .args([
                "compile",
                "--target",
                "example-npu",
                "--passes",
                "pin-matmuls{device=npu0}",
                "--emit",
                "lowered",
                "-o",
            ])
            .arg(&out_dir)
            .arg(&model),
    );
    let note = out
        .lines()
        .find(|l| l.starts_with("lowering     npu0: "))
        .unwrap_or_else(|| panic!("no lowering line for npu0: {out}"));
    assert!(
        note.starts_with("lowering     npu0: example-npu's own pipeline; wrote npu0.npu.mlir ("),
        "{note}"
    );
    assert!(!out.contains("portable affine loops"), "{out}");
    let artifact = std::fs::read_to_string(out_dir.join("npu0.npu.mlir")).expect("the artifact");
    // The device pipeline ran: every loop nest is tiled by 128 (the fill and the relu two
    // loops each, the matmul three, in the kernel the step calls, the matmul fused with the
    // relu after it: tile loops, then point loops inside one tile), nothing of linalg or
    // tensors is left.
    filecheck(
        &artifact,
        "CHECK-NEXT: // example-npu program for npu0: 128x128 systolic array, 2 kernels
         CHECK-NEXT: // kernel @k0_matmul_relu: 7 tiled loops
         CHECK-NEXT: // kernel @step0: 0 tiled loops
         CHECK: func.func private @k0_matmul_relu(%arg0: memref<256x256xf32>, %arg1: memref<256x256xf32>)
         CHECK: affine.store %cst
         CHECK: affine.for %arg2 = 0 to 256 step 128 {
         CHECK-NEXT: affine.for %arg3 = 0 to 256 step 128 {
         CHECK-NEXT: affine.for %arg4 = 0 to 256 step 128 {
         CHECK-NEXT: affine.for %arg5 = #map(%arg2) to #map1(%arg2) {
         CHECK-NEXT: affine.for %arg6 = #map(%arg3) to #map1(%arg3) {
         CHECK-NEXT: affine.for %arg7 = #map(%arg4) to #map1(%arg4) {
         CHECK: arith.mulf
         CHECK-NEXT: arith.addf
         CHECK-NOT: linalg.
         CHECK-NOT: tensor<",
    );
    // `--emit lowered` is the same module the artifact was made from, byte for byte.
    let lowered = std::fs::read_to_string(out_dir.join("npu0.lowered.mlir")).expect("lowered");
    assert!(artifact.ends_with(&lowered), "{lowered}");
    assert!(
        lowered.starts_with("#map = affine_map<(d0) -> (d0)>"),
        "{lowered}"
    );
    // `tessera run DIR` still runs the portable modules on this CPU.
    let input = dir.path().join("in.npy");
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (256, 256), }";
    let pad = 64 - (10 + header.len() + 1) % 64;
    let header = format!("{header}{}\n", " ".repeat(pad % 64));
    npy.extend((header.len() as u16).to_le_bytes());
    npy.extend(header.as_bytes());
    for i in 0..256 * 256 {
        npy.extend(((i % 7) as f32 - 3.0).to_le_bytes());
    }
    std::fs::write(&input, npy).expect("write input");
    let ran = stdout(
        tool()
            .arg("run")
            .arg(&out_dir)
            .arg("--input")
            .arg(format!("a={}", input.display()))
            .arg("--input")
            .arg(format!("b={}", input.display())),
    );
    assert!(ran.contains("f32[256, 256]"), "{ran}");
}

#[test]
fn a_lowering_without_a_pipeline_says_it_falls_back() {
    // The plugin's lowering name in a plain target file: no Rust target, so no pipeline hook.
    let dir = tempfile::tempdir().expect("tempdir");
    let board = dir.path().join("board.toml");
    std::fs::write(
        &board,
        "name = \"board\"\nhost = \"cpu0\"\n\n[[device]]\nname = \"cpu0\"\nkind = \"cpu\"\n\
         memory = 1e9\nmemory_bandwidth = 1e10\ncompute = { f32 = 1e11 }\nlowering = \"cpu\"\n\n\
         [[device]]\nname = \"acc0\"\nkind = \"npu\"\nmemory = 1e9\nmemory_bandwidth = 1e11\n\
         compute = { f32 = 1e13 }\nlowering = \"example-npu\"\n\n[[interconnect.link]]\n\
         a = \"cpu0\"\nb = \"acc0\"\nbandwidth = 1e10\nlatency = 1e-6\n",
    )
    .expect("write");
    let model = dir.path().join("mm.tir");
    std::fs::write(&model, MATMUL_256).expect("write");
    let out_dir = dir.path().join("out");
    let out = stdout(
        tool()
            .arg("compile")
            .arg("--target")
            .arg(&board)
            .args([
                "--passes",
                "pin-matmuls{device=acc0}",
                "--emit",
                "lowered",
                "-o",
            ])
            .arg(&out_dir)
            .arg(&model),
    );
    assert!(
        out.contains(
            "lowering     acc0: no MLIR pipeline for lowering `example-npu` in this binary (its \
             target has no device_pipeline hook): the portable affine loops stand in for its \
             backend"
        ),
        "{out}"
    );
    let lowered = std::fs::read_to_string(out_dir.join("acc0.lowered.mlir")).expect("lowered");
    filecheck(
        &lowered,
        "CHECK-NEXT: // tessera: acc0: no MLIR pipeline for lowering `example-npu`
         CHECK: affine.for %arg2 = 0 to 256 {
         CHECK-NOT: step 128",
    );
    assert!(!out_dir.join("acc0.npu.mlir").exists());
}
