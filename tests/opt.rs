//! `tessera opt` and `tessera passes`: pipelines, instrumentation flags, dumps and crash
//! reproducers, through the real binary.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;

fn tessera() -> Command {
    Command::cargo_bin("tessera").expect("tessera binary")
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// A small graph with something for every pass to do.
const INPUT: &str = "\
const @a : f32[2] = [1.0, 2.0]
const @b : f32[2] = [3.0, 4.0]
const @unused : f32[1] = [5.0]

graph @g(%x: f32[N, 2]) {
  %a = const @a : f32[2]
  %b = const @b : f32[2]
  %s = add %a, %b : f32[2]
  %t = transpose %x {perm = [0, 1]} : f32[N, 2]
  %p = mul %t, %s : f32[N, 2]
  %q = mul %t, %s : f32[N, 2]
  %y = add %p, %q : f32[N, 2]
  return %y
}
";

fn input_file(dir: &Path) -> String {
    let p = dir.join("in.tir");
    fs::write(&p, INPUT).expect("write input");
    p.to_string_lossy().into_owned()
}

#[test]
fn passes_lists_every_pass_with_its_options() {
    tessera().arg("passes").assert().success().stdout(
        contains("canonicalize  Fold constants")
            .and(contains("fold-limit=<uint>"))
            .and(contains("cse "))
            .and(contains("dce "))
            .and(contains("shape-infer "))
            .and(contains("shapes=<string>")),
    );
}

#[test]
fn opt_runs_a_pipeline_and_prints_the_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    tessera()
        .args(["opt", &input, "--passes", "canonicalize,cse"])
        .assert()
        .success()
        .stdout(
            contains("const @s : f32[2] = [4.0, 6.0]")
                .and(contains("%p = mul %x, %s : f32[N, 2]"))
                .and(contains("%y = add %p, %p : f32[N, 2]"))
                .and(contains("@unused").not())
                .and(contains("transpose").not()),
        );
    // -o writes a file that loads back to the same text.
    let out = dir.path().join("out.tir");
    tessera()
        .args(["opt", &input, "--passes", "canonicalize", "-o"])
        .arg(&out)
        .assert()
        .success();
    let printed = tessera()
        .arg("fmt")
        .arg(&out)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(
        String::from_utf8(printed).expect("utf-8"),
        fs::read_to_string(&out).expect("read")
    );
}

#[test]
fn opt_accepts_onnx_models_and_shapes() {
    let model = repo("testdata/models/onnx/gpt2_tiny/model.onnx");
    tessera()
        .arg("opt")
        .arg(&model)
        .args([
            "--input-shape",
            "input_ids=1x16",
            "--passes",
            "canonicalize,cse,dce",
        ])
        .assert()
        .success()
        .stdout(
            contains("graph @")
                .and(contains("%input_ids: i64[1, 16]"))
                .and(contains("return")),
        );
}

#[test]
fn print_ir_flags_print_around_the_selected_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    let run = |flags: &[&str]| {
        let out = tessera()
            .args(["opt", &input, "--passes", "cse,dce,dce"])
            .args(flags)
            .assert()
            .success();
        String::from_utf8(out.get_output().stderr.clone()).expect("utf-8")
    };
    let all = run(&["--print-ir-after-all"]);
    assert_eq!(all.matches("// -----// IR Dump After").count(), 3, "{all}");
    assert!(
        all.contains("// -----// IR Dump After cse //----- //\nconst @a"),
        "{all}"
    );
    let before = run(&["--print-ir-before=dce"]);
    assert_eq!(
        before
            .matches("// -----// IR Dump Before dce //----- //")
            .count(),
        2,
        "{before}"
    );
    assert!(!before.contains("Before cse"), "{before}");
    // cse merges %q into %p and the first dce removes constant @unused; the second dce
    // changes nothing, so only two dumps show with --print-ir-after-change.
    let changed = run(&["--print-ir-after-change"]);
    assert_eq!(changed.matches("IR Dump After").count(), 2, "{changed}");
    let before_all = run(&["--print-ir-before-all"]);
    assert_eq!(
        before_all.matches("IR Dump Before").count(),
        3,
        "{before_all}"
    );
    tessera()
        .args(["opt", &input, "--passes", "cse", "--print-ir-after=csee"])
        .assert()
        .code(1)
        .stderr(contains("unknown pass `csee`; did you mean `cse`?"));
}

#[test]
fn ir_dump_dir_writes_one_parseable_file_per_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    let dumps = dir.path().join("dumps");
    tessera()
        .args([
            "opt",
            &input,
            "--passes",
            "canonicalize,cse,dce",
            "--ir-dump-dir",
        ])
        .arg(&dumps)
        .assert()
        .success();
    let mut names: Vec<String> = fs::read_dir(&dumps)
        .expect("dump dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tir"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "00-input.tir",
            "01-after-canonicalize.tir",
            "02-after-cse.tir",
            "03-after-dce.tir"
        ]
    );
    for n in &names {
        // Each dump is a valid input of `tessera opt`.
        tessera()
            .args(["opt"])
            .arg(dumps.join(n))
            .args(["--passes", "dce"])
            .assert()
            .success();
    }
    assert!(
        fs::read_to_string(dumps.join("02-after-cse.tir"))
            .expect("dump")
            .contains("%y = add %p, %p")
    );
}

#[test]
fn timing_and_statistics_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    tessera()
        .args([
            "opt",
            &input,
            "--passes",
            "canonicalize,cse",
            "--timing",
            "--pass-statistics",
        ])
        .assert()
        .success()
        .stderr(
            contains("... Execution time report ...")
                .and(contains("  ----Wall Time----  ----Name----"))
                .and(contains("canonicalize\n"))
                .and(contains("(verifier)"))
                .and(contains("Total\n"))
                .and(contains("... Pass statistics report ..."))
                .and(contains(
                    "(S)      1 ops-folded - ops evaluated at compile time",
                ))
                .and(contains(
                    "(S)      1 ops-merged - ops merged into an identical earlier op",
                )),
        );
}

#[test]
fn a_failing_pass_writes_a_reproducer_that_replays_the_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    let repro = dir.path().join("repro.tir");
    let first = tessera()
        .args(["opt", &input, "--passes", "cse,shape-infer{shapes=\"x=2x2x2\"},dce", "--crash-reproducer"])
        .arg(&repro)
        .assert()
        .code(1)
        .stderr(contains("pass `shape-infer{shapes=\"x=2x2x2\" dims=\"\"}` (#2) failed: shapes: x: gives 3 extents"))
        .stderr(contains("reproducer written to"));
    let first_err = String::from_utf8(first.get_output().stderr.clone()).expect("utf-8");
    let text = fs::read_to_string(&repro).expect("reproducer");
    assert!(
        text.starts_with(
            "// tessera-reproducer: --passes shape-infer{shapes=\"x=2x2x2\" dims=\"\"}\n"
        ),
        "{text}"
    );
    // The reproducer holds the IR the failing pass started from: after cse.
    assert!(text.contains("%y = add %p, %p"), "{text}");
    let replay_repro = dir.path().join("again.tir");
    let again = tessera()
        .args(["opt", "--run-reproducer"])
        .arg(&repro)
        .arg("--crash-reproducer")
        .arg(&replay_repro)
        .assert()
        .code(1);
    let again_err = String::from_utf8(again.get_output().stderr.clone()).expect("utf-8");
    let cause = |s: &str| {
        s.split(" failed: ")
            .nth(1)
            .and_then(|t| t.lines().next())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(cause(&again_err), cause(&first_err));
    assert!(!cause(&first_err).is_empty(), "{first_err}");
    // --print-ir-after-failure shows the IR as the failed pass left it.
    tessera()
        .args([
            "opt",
            &input,
            "--passes",
            "shape-infer{shapes=\"x=1\"}",
            "--print-ir-after-failure",
            "--crash-reproducer",
        ])
        .arg(dir.path().join("r2.tir"))
        .assert()
        .code(1)
        .stderr(contains(
            "// -----// IR Dump After Failure shape-infer //----- //",
        ));
}

#[test]
fn pipeline_and_usage_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = input_file(dir.path());
    tessera()
        .args(["opt", &input, "--passes", "canonicalise"])
        .assert()
        .code(1)
        .stderr(contains(
            "unknown pass `canonicalise`; did you mean `canonicalize`?",
        ));
    tessera()
        .args(["opt", &input, "--passes", "cse{foo=1}"])
        .assert()
        .code(1)
        .stderr(contains("unknown option `foo` of pass `cse`"));
    tessera().args(["opt", &input]).assert().code(2);
    tessera()
        .args(["opt", "--run-reproducer"])
        .arg(&input)
        .assert()
        .code(1)
        .stderr(contains("not a reproducer"));
    // --no-verify-each and --verify-each are accepted (the last wins) and the result is
    // still right.
    for flags in [
        ["--no-verify-each", "--verify-each"],
        ["--verify-each", "--no-verify-each"],
    ] {
        tessera()
            .args(["opt", &input, "--passes", "cse"])
            .args(flags)
            .assert()
            .success()
            .stdout(contains("%y = add %p, %p"));
    }
}
