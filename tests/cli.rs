//! End-to-end tests of the `tessera` command line: the bundled sample model, and every kind of
//! bad input getting a clear error and a non-zero exit code.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use ndarray::{ArrayD, IxDyn};
use predicates::prelude::*;
use predicates::str::contains;
use tessera_ir::{Graph, Op, Tensor, TensorType, UnaryOp, text};

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models")
}

fn mlp() -> PathBuf {
    models().join("mlp.tir")
}

fn mlp_input() -> String {
    format!("x={}", models().join("mlp.input.npy").display())
}

fn f32_tensor(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape matches"))
}

/// Writes a tensor as `.npy` into `dir` and returns `x=<path>`.
fn npy_arg(dir: &Path, file: &str, t: &Tensor) -> String {
    let path = dir.join(file);
    tessera::npy::write(&path, t).expect("write .npy");
    format!("x={}", path.display())
}

// ---------------------------------------------------------------------------------------------
// Help and usage.

#[test]
fn help_lists_the_commands() {
    tessera().arg("--help").assert().success().stdout(
        contains("fmt")
            .and(contains("run"))
            .and(contains("Examples:")),
    );
}

#[test]
fn subcommand_help_describes_the_options() {
    tessera()
        .args(["run", "--help"])
        .assert()
        .success()
        .stdout(contains("--input <NAME=FILE.npy>").and(contains("--output-dir <DIR>")));
    tessera()
        .args(["fmt", "--help"])
        .assert()
        .success()
        .stdout(contains("canonical"));
}

#[test]
fn version_is_printed_everywhere() {
    let v = env!("CARGO_PKG_VERSION");
    tessera()
        .arg("--version")
        .assert()
        .success()
        .stdout(contains(format!("tessera {v}")));
    tessera()
        .args(["run", "--version"])
        .assert()
        .success()
        .stdout(contains(v));
    tessera()
        .args(["fmt", "--version"])
        .assert()
        .success()
        .stdout(contains(v));
}

#[test]
fn usage_errors_exit_with_2() {
    tessera().assert().code(2);
    tessera()
        .arg("frobnicate")
        .assert()
        .code(2)
        .stderr(contains("frobnicate"));
    tessera()
        .arg("fmt")
        .assert()
        .code(2)
        .stderr(contains("FILE.tir"));
    tessera()
        .args(["run", "m.tir", "--input", "no-equals-sign"])
        .assert()
        .code(2)
        .stderr(contains("expected NAME=FILE.npy"));
}

// ---------------------------------------------------------------------------------------------
// Bad IR files.

#[test]
fn missing_file_names_the_path() {
    for cmd in ["fmt", "run"] {
        tessera()
            .args([cmd, "does/not/exist.tir"])
            .assert()
            .code(1)
            .stderr(
                contains("error: cannot read does/not/exist.tir").and(contains("No such file")),
            );
    }
}

#[test]
fn directory_instead_of_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    tessera()
        .arg("fmt")
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(contains("is a directory"));
}

#[test]
fn malformed_text_points_at_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.tir");
    fs::write(
        &path,
        "graph @g(%x: f32[2]) {\n  %y = relu %x : f32[2]\n  %z = = %y\n  return %z\n}\n",
    )
    .expect("write");
    for cmd in ["fmt", "run"] {
        tessera().arg(cmd).arg(&path).assert().code(1).stderr(
            contains("error:")
                .and(contains("bad.tir"))
                .and(predicate::str::is_match(r":3:\d+").expect("regex")),
        );
    }
}

#[test]
fn verifier_errors_are_shown_in_the_ir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("wrong.tir");
    // The result type of `add` is wrong: f32[3] + f32[3] is f32[3], not f32[4].
    fs::write(
        &path,
        "graph @g(%x: f32[3]) {\n  %y = add %x, %x : f32[4]\n  return %y\n}\n",
    )
    .expect("write");
    tessera()
        .arg("fmt")
        .arg(&path)
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty())
        .stderr(
            contains("%y")
                .and(contains("error: "))
                .and(contains("verifier found")),
        );
}

// ---------------------------------------------------------------------------------------------
// fmt on the sample model.

#[test]
fn fmt_prints_the_canonical_text() {
    let committed = fs::read_to_string(mlp()).expect("read mlp.tir");
    let out = tessera()
        .arg("fmt")
        .arg(mlp())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let printed = String::from_utf8(out).expect("utf-8");
    // The committed model is written in canonical form (make_mlp.py writes it so).
    assert_eq!(printed, committed);

    // Printing the printed text again changes nothing.
    let dir = tempfile::tempdir().expect("tempdir");
    fs::write(dir.path().join("mlp.tir"), &printed).expect("write");
    fs::copy(
        models().join("mlp.safetensors"),
        dir.path().join("mlp.safetensors"),
    )
    .expect("copy sidecar");
    tessera()
        .arg("fmt")
        .arg(dir.path().join("mlp.tir"))
        .assert()
        .success()
        .stdout(printed);
}

// ---------------------------------------------------------------------------------------------
// run on the sample model.

#[test]
fn run_prints_a_summary() {
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input()])
        .assert()
        .success()
        .stdout(
            contains("%y: f32[4, 10]")
                .and(contains("min "))
                .and(contains("first: [")),
        );
}

#[test]
fn run_matches_numpy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input()])
        .arg("--output-dir")
        .arg(&out)
        .assert()
        .success()
        .stdout(contains("y.npy"));
    let got = tessera::npy::read(&out.join("y.npy")).expect("read output");
    let want = tessera::npy::read(&models().join("mlp.expected.npy")).expect("read expected");
    assert_eq!(got.ty(), want.ty());
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        assert!((g - w).abs() <= 1e-5, "element {i}: got {g}, numpy {w}");
    }
    // Nothing but the output file is left behind (no temporary files).
    let names: Vec<_> = fs::read_dir(&out)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["y.npy"]);
}

#[test]
fn output_file_names_are_made_safe_and_distinct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ty = TensorType::fixed(tessera_ir::ElemType::F32, &[3]);
    let mut g = Graph::new("names");
    let x = g.add_input(Some("x".into()), ty.clone());
    let mut outs = Vec::new();
    for (name, op) in [
        ("a/b", UnaryOp::Relu),
        ("a_b", UnaryOp::Neg),
        ("logits:0", UnaryOp::Abs),
    ] {
        let o = g.push_op(Op::Unary(op), vec![x], vec![ty.clone()]);
        let v = g.op(o).results[0];
        g.set_name(v, name);
        outs.push(v);
    }
    outs.push(outs[1]); // the same value returned twice
    g.set_outputs(outs);
    let model = dir.path().join("names.tir");
    text::save(&g, &model).expect("save");

    let out = dir.path().join("out");
    let input = npy_arg(dir.path(), "x.npy", &f32_tensor(&[3], vec![-1.0, 0.0, 2.0]));
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &input, "-o"])
        .arg(&out)
        .assert()
        .success();

    let mut names: Vec<String> = fs::read_dir(&out)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a_b.npy", "a_b_1.npy", "a_b_2.npy", "logits_0.npy"]);
    let relu = tessera::npy::read(&out.join("a_b.npy")).expect("read");
    assert_eq!(relu, f32_tensor(&[3], vec![0.0, 0.0, 2.0]));
    let neg = tessera::npy::read(&out.join("a_b_1.npy")).expect("read");
    assert_eq!(neg, f32_tensor(&[3], vec![1.0, -0.0, -2.0]));
    assert_eq!(
        tessera::npy::read(&out.join("a_b_2.npy")).expect("read"),
        neg
    );
}

// ---------------------------------------------------------------------------------------------
// Bad inputs to run.

fn run_mlp_with(input: &str) -> assert_cmd::assert::Assert {
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", input])
        .assert()
}

#[test]
fn wrong_npy_dtype() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Tensor::F64(ArrayD::zeros(IxDyn(&[4, 16])));
    run_mlp_with(&npy_arg(dir.path(), "f64.npy", &t))
        .code(1)
        .stderr(
            contains("f64.npy")
                .and(contains("input `x`"))
                .and(contains("holds f64 (float64), expected f32 (float32)")),
        );
}

#[test]
fn wrong_npy_shape() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = f32_tensor(&[4, 8], vec![0.0; 32]);
    run_mlp_with(&npy_arg(dir.path(), "narrow.npy", &t))
        .code(1)
        .stderr(
            contains("narrow.npy")
                .and(contains("input `x`"))
                .and(contains("axis 1 is 8, not 16")),
        );
    let t = f32_tensor(&[16], vec![0.0; 16]);
    run_mlp_with(&npy_arg(dir.path(), "flat.npy", &t))
        .code(1)
        .stderr(contains("flat.npy").and(contains("expected rank 2")));
}

#[test]
fn symbolic_dimension_takes_any_extent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = f32_tensor(&[1, 16], vec![0.5; 16]);
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &npy_arg(dir.path(), "one.npy", &t)])
        .assert()
        .success()
        .stdout(contains("%y: f32[1, 10]"));
}

#[test]
fn unknown_input_name() {
    let input = format!("z={}", models().join("mlp.input.npy").display());
    run_mlp_with(&input)
        .code(1)
        .stderr(contains("unknown input `z`").and(contains("its inputs are `x`")));
}

#[test]
fn missing_input() {
    tessera()
        .arg("run")
        .arg(mlp())
        .assert()
        .code(1)
        .stderr(contains("missing --input for graph input `x` (f32[N, 16])"));
}

#[test]
fn duplicate_input() {
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input(), "-i", &mlp_input()])
        .assert()
        .code(1)
        .stderr(contains("input `x` is given twice"));
}

#[test]
fn missing_npy_file() {
    run_mlp_with("x=no/such/input.npy")
        .code(1)
        .stderr(contains("cannot read no/such/input.npy").and(contains("No such file")));
}

#[test]
fn corrupt_npy_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.npy");
    fs::write(&garbage, b"these bytes are not a numpy file").expect("write");
    run_mlp_with(&format!("x={}", garbage.display()))
        .code(1)
        .stderr(contains("garbage.npy").and(contains("not a .npy file")));

    let good = fs::read(models().join("mlp.input.npy")).expect("read");
    let truncated = dir.path().join("truncated.npy");
    fs::write(&truncated, &good[..good.len() - 10]).expect("write");
    run_mlp_with(&format!("x={}", truncated.display()))
        .code(1)
        .stderr(contains("truncated.npy").and(contains("truncated data")));

    let header_only = dir.path().join("cut.npy");
    fs::write(&header_only, &good[..40]).expect("write");
    run_mlp_with(&format!("x={}", header_only.display()))
        .code(1)
        .stderr(contains("cut.npy").and(contains("truncated header")));
}

#[test]
fn unwritable_output_dir() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    fs::write(&file, "").expect("write");
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input(), "--output-dir"])
        .arg(&file)
        .assert()
        .code(1)
        .stderr(contains("cannot create output directory").and(contains("a-file")));
}
