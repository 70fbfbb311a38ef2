//! `tessera targets`: listing, showing built-ins and user files (via `--target-path`, via
//! `TESSERA_TARGET_PATH`, by file name), and a bad file's error.

use std::fs;

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("TESSERA_TARGET_PATH");
    cmd
}

const BOARD: &str = r#"description = "a test board"
host = "host"

[[device]]
name = "host"
kind = "cpu"
memory = 8_000_000_000
memory_bandwidth = 50e9
compute = { f32 = 1e12 }
lowering = "cpu"

[[device]]
name = "npu"
count = 2
kind = "npu"
memory = 1_073_741_824
memory_bandwidth = 1e12
compute = { bf16 = 64e12, i8 = 128e12 }
supported_ops = ["matmul", "add"]
lowering = "chiplet"

[interconnect]
topology = "fully-connected"
devices = "npu"
bandwidth = 25e9
latency = 5e-7

[[interconnect.link]]
a = "host"
b = "npu0"
bandwidth = 16e9
latency = 1e-6
"#;

#[test]
fn lists_builtins() {
    let out = tessera().arg("targets").assert().success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        names,
        [
            "cpu",
            "mcm-2x2",
            "mcm-4x4",
            "mcm-ring4",
            "hetero-cpu-gpu",
            "gpu-8"
        ]
    );
    assert!(
        text.contains("2x2 mesh") && text.contains("(built-in)"),
        "{text}"
    );
}

#[test]
fn shows_a_builtin() {
    let run = || {
        let out = tessera()
            .args(["targets", "show", "mcm-2x2"])
            .assert()
            .success();
        String::from_utf8_lossy(&out.get_output().stdout).into_owned()
    };
    let text = run();
    assert_eq!(text, run(), "deterministic");
    for want in [
        "target mcm-2x2: ",
        "host: cpu0",
        "devices (5):",
        "chip3  chiplet  memory    32 MiB  bandwidth      4 TB/s  lowering chiplet",
        "compute: bf16 100 TFLOP/s, f16 100 TFLOP/s, f32 25 TFLOP/s, i8 200 TFLOP/s",
        "links (5):",
        "cpu0 <-> chip0   bandwidth     16 GB/s  latency 2 us",
        "chip2 <-> chip3  bandwidth     50 GB/s  latency 200 ns",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    tessera()
        .args(["targets", "show", "gpu-8"])
        .assert()
        .success()
        .stdout(contains("nvswitch  switch").and(contains("gpu7 <-> nvswitch")));
}

#[test]
fn user_file_via_target_path_and_env() {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("board.toml"), BOARD).expect("write");
    let dir_s = dir.path().to_str().expect("utf-8");
    let expected = [
        "target board: a test board",
        "host: host",
        "npu1  npu  memory     1 GiB  bandwidth      1 TB/s  lowering chiplet",
        "supported ops: [add, matmul]",
        "npu0 <-> npu1  bandwidth     25 GB/s  latency 500 ns",
        "host <-> npu0  bandwidth     16 GB/s  latency 1 us",
    ];
    let by_flag = tessera()
        .args(["targets", "show", "board", "--target-path", dir_s])
        .assert()
        .success();
    let by_flag = String::from_utf8_lossy(&by_flag.get_output().stdout).into_owned();
    for want in expected {
        assert!(by_flag.contains(want), "missing `{want}` in:\n{by_flag}");
    }
    let by_env = tessera()
        .env("TESSERA_TARGET_PATH", format!("/nonexistent:{dir_s}"))
        .args(["targets", "show", "board"])
        .assert()
        .success();
    assert_eq!(
        String::from_utf8_lossy(&by_env.get_output().stdout),
        by_flag
    );
    let path = dir.path().join("board.toml");
    tessera()
        .args(["targets", "show", path.to_str().expect("utf-8")])
        .assert()
        .success()
        .stdout(contains("target board: a test board"));
    tessera()
        .args(["targets", "--target-path", dir_s])
        .assert()
        .success()
        .stdout(contains("board           a test board (").and(contains("board.toml)")));
    tessera()
        .env("TESSERA_TARGET_PATH", dir_s)
        .arg("targets")
        .assert()
        .success()
        .stdout(contains("a test board"));
    // Without the search path the name is unknown.
    tessera()
        .args(["targets", "show", "board"])
        .assert()
        .code(1)
        .stderr(contains("error: unknown target `board`"));
}

#[test]
fn bad_file_error_names_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = BOARD.replace("memory = 1_073_741_824", "memory = 0");
    fs::write(dir.path().join("bad.toml"), bad).expect("write");
    let dir_s = dir.path().to_str().expect("utf-8");
    tessera()
        .args(["targets", "show", "bad", "--target-path", dir_s])
        .assert()
        .code(1)
        .stderr(contains("bad.toml:16: device.memory: must be positive"));
    tessera()
        .args(["targets", "--target-path", dir_s])
        .assert()
        .success()
        .stdout(
            contains("bad             invalid target file: ")
                .and(contains("bad.toml:16: device.memory")),
        );
    tessera()
        .args(["targets", "show", "missing.toml"])
        .assert()
        .code(1)
        .stderr(contains("error: missing.toml: "));
}

#[test]
fn an_unknown_target_gets_the_closest_name() {
    tessera()
        .args(["targets", "show", "hetero-cpu-gpuu"])
        .assert()
        .code(1)
        .stderr(contains("unknown target `hetero-cpu-gpuu`"))
        .stderr(contains("did you mean `hetero-cpu-gpu`?"));
    tessera()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["compile", "testdata/models/mlp.tir", "--target", "mcm-2x3"])
        .assert()
        .code(1)
        .stderr(contains("did you mean `mcm-2x2`?"));
    // Nothing close: no guess.
    tessera()
        .args(["targets", "show", "tpu-pod"])
        .assert()
        .code(1)
        .stderr(contains("unknown target `tpu-pod`"))
        .stderr(contains("did you mean").not());
}
