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
