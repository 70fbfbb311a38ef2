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
            .and(contains("import"))
            .and(contains("Examples:")),
    );
}

#[test]
fn subcommand_help_describes_the_options() {
    tessera().args(["run", "--help"]).assert().success().stdout(
        contains("--input <NAME=FILE.npy>")
            .and(contains("--output-dir <DIR>"))
            .and(contains("--input-shape <NAME=DIMS>")),
    );
    tessera()
        .args(["import", "--help"])
        .assert()
        .success()
        .stdout(contains("--input-shape <NAME=DIMS>").and(contains("-o, --output <OUT.tir>")));
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
        .stderr(contains("<MODEL>"));
    tessera()
        .arg("import")
        .assert()
        .code(2)
        .stderr(contains("MODEL.onnx"));
    tessera()
        .args(["import", "m.onnx", "--input-shape", "x"])
        .assert()
        .code(2)
        .stderr(contains("expected NAME=DIMS"));
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
    for (cmd, file) in [
        ("fmt", "does/not/exist.tir"),
        ("run", "does/not/exist.tir"),
        ("fmt", "does/not/exist.onnx"),
        ("run", "does/not/exist.onnx"),
        ("import", "does/not/exist.onnx"),
    ] {
        tessera()
            .args([cmd, file])
            .assert()
            .code(1)
            .stderr(contains(format!("error: cannot read {file}")).and(contains("No such file")));
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
    // The second `a_b` output is named `a_b_1` (output names are distinct), whose file stem
    // `a_b_1` is taken by the sanitized `a_b`'s.
    assert_eq!(
        names,
        ["a_b.npy", "a_b_1.npy", "a_b_1_1.npy", "logits_0.npy"]
    );
    let relu = tessera::npy::read(&out.join("a_b.npy")).expect("read");
    assert_eq!(relu, f32_tensor(&[3], vec![0.0, 0.0, 2.0]));
    let neg = tessera::npy::read(&out.join("a_b_1.npy")).expect("read");
    assert_eq!(neg, f32_tensor(&[3], vec![1.0, -0.0, -2.0]));
    assert_eq!(
        tessera::npy::read(&out.join("a_b_1_1.npy")).expect("read"),
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

// ---------------------------------------------------------------------------------------------
// ONNX models: `tessera import`, and .onnx wherever a model is taken.

#[path = "../onnx/tests/common/proto.rs"]
mod proto;

/// Writes `y = relu(x + w)` with `x: f32[N, 20]` and a 20-element initializer `w` (large
/// enough for the sidecar) to `dir/name`.
fn write_onnx(dir: &Path, name: &str) -> PathBuf {
    use proto::{FLOAT, float_init, graph, model, node, value};
    let w: Vec<f32> = (0..20).map(|i| i as f32 - 10.0).collect();
    let mut g = graph(
        "addrelu",
        vec![
            node("Add", "add", &["x", "w"], &["s"]),
            node("Relu", "relu", &["s"], &["y"]),
        ],
        vec![value("x", FLOAT, &["N", "20"])],
        vec![value("y", FLOAT, &["N", "20"])],
    );
    g.initializer.push(float_init("w", &[20], &w));
    let path = dir.join(name);
    proto::write(&path, &model(17, g));
    path
}

/// The expected output of [`write_onnx`]'s model.
fn addrelu(x: &[f32]) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| (v + (i % 20) as f32 - 10.0).max(0.0))
        .collect()
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.assert().success().get_output().stdout.clone();
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn import_prints_the_ir_and_fmt_agrees() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_onnx(dir.path(), "m.onnx");
    let printed = stdout_of(tessera().arg("import").arg(&model));
    assert!(
        printed.contains("graph @addrelu(%x: f32[N, 20])"),
        "{printed}"
    );
    assert!(printed.contains("= relu "), "{printed}");
    // fmt imports .onnx files the same way.
    assert_eq!(stdout_of(tessera().arg("fmt").arg(&model)), printed);
}

#[test]
fn import_writes_tir_and_sidecar() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_onnx(dir.path(), "m.onnx");
    let out = dir.path().join("m.tir");
    let said = stdout_of(tessera().arg("import").arg(&model).arg("-o").arg(&out));
    assert!(said.contains("m.tir: 3 ops, 1 constants"), "{said}");
    assert!(said.contains("large constants in"), "{said}");
    assert!(dir.path().join("m.safetensors").exists());
    let text = fs::read_to_string(&out).expect("read m.tir");
    assert!(text.contains("= external"), "{text}");
    // The written file is canonical and loads with its sidecar.
    assert_eq!(stdout_of(tessera().arg("fmt").arg(&out)), text);
    // And runs like the ONNX model.
    let x: Vec<f32> = (0..40).map(|i| (i as f32) * 0.5 - 3.0).collect();
    let input = npy_arg(dir.path(), "x.npy", &f32_tensor(&[2, 20], x.clone()));
    for m in [&out, &model] {
        let out_dir = dir.path().join(format!(
            "out-{}",
            m.extension().and_then(|e| e.to_str()).unwrap_or("")
        ));
        tessera()
            .arg("run")
            .arg(m)
            .args(["--input", &input, "--output-dir"])
            .arg(&out_dir)
            .assert()
            .success();
        let got = tessera::npy::read(&out_dir.join("y.npy")).expect("read y");
        assert_eq!(got, f32_tensor(&[2, 20], addrelu(&x)), "{}", m.display());
    }
    // Nothing else is left in the folder (atomic writes leave no temporaries).
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "m.onnx",
            "m.safetensors",
            "m.tir",
            "out-onnx",
            "out-tir",
            "x.npy"
        ]
    );
}

#[test]
fn run_binds_symbolic_dims_from_the_inputs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_onnx(dir.path(), "m.onnx");
    let input = npy_arg(dir.path(), "x.npy", &f32_tensor(&[3, 20], vec![1.0; 60]));
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &input])
        .assert()
        .success()
        .stdout(contains("%y: f32[3, 20]"));
    // --input-shape must agree with the file.
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &input, "--input-shape", "x=4x20"])
        .assert()
        .code(1)
        .stderr(contains(
            "x.npy: input `x` has shape [3, 20], but --input-shape gives x=4x20",
        ));
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &input, "--input-shape", "x=3x20"])
        .assert()
        .success();
    // The run checks against the declared input types before importing.
    let wrong = npy_arg(dir.path(), "w.npy", &f32_tensor(&[3, 7], vec![1.0; 21]));
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &wrong])
        .assert()
        .code(1)
        .stderr(contains("w.npy").and(contains("axis 1 is 7, not 20")));
    tessera()
        .arg("run")
        .arg(&model)
        .args(["--input", &input.replacen("x=", "z=", 1)])
        .assert()
        .code(1)
        .stderr(contains("unknown input `z`").and(contains("its inputs are `x`")));
    tessera()
        .arg("run")
        .arg(&model)
        .assert()
        .code(1)
        .stderr(contains("missing --input for graph input `x` (f32[N, 20])"));
}

#[test]
fn input_shape_binds_onnx_and_tir_models() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_onnx(dir.path(), "m.onnx");
    let printed = stdout_of(
        tessera()
            .arg("import")
            .arg(&model)
            .args(["--input-shape", "x=2x20"]),
    );
    assert!(
        printed.contains("graph @addrelu(%x: f32[2, 20])"),
        "{printed}"
    );
    assert!(!printed.contains('N'), "{printed}");

    // A .tir model: the symbol is bound in every type.
    let printed = stdout_of(
        tessera()
            .arg("fmt")
            .arg(mlp())
            .args(["--input-shape", "x=2x16"]),
    );
    assert!(printed.contains("%x: f32[2, 16]"), "{printed}");
    assert!(printed.contains(": f32[2, 10]"), "{printed}");
    assert!(!printed.contains("[N"), "{printed}");
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input(), "--input-shape", "x=4x16"])
        .assert()
        .success()
        .stdout(contains("%y: f32[4, 10]"));
    tessera()
        .arg("run")
        .arg(mlp())
        .args(["--input", &mlp_input(), "--input-shape", "x=2x16"])
        .assert()
        .code(1)
        .stderr(contains("mlp.input.npy").and(contains("axis 0 is 4, not 2")));
}

#[test]
fn input_shape_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write_onnx(dir.path(), "m.onnx");
    let m = model.display().to_string();
    let mlp = mlp().display().to_string();
    for (cmd, file, shape, want) in [
        (
            "import",
            &m,
            "x=2",
            "--input-shape x: gives 1 extents, the input has rank 2 (f32[N, 20])",
        ),
        (
            "import",
            &m,
            "x=2x21",
            "--input-shape x: extent 21 conflicts with the declared f32[N, 20]",
        ),
        (
            "import",
            &m,
            "q=2x20",
            "--input-shape q: not a graph input (inputs: x)",
        ),
        ("fmt", &m, "q=2x20", "--input-shape q: not a graph input"),
        (
            "fmt",
            &mlp,
            "x=2",
            "--input-shape x: gives 1 extents, the input has rank 2 (f32[N, 16])",
        ),
        (
            "fmt",
            &mlp,
            "x=2x8",
            "--input-shape x: extent 8 conflicts with the declared f32[N, 16]",
        ),
        (
            "fmt",
            &mlp,
            "q=2",
            "--input-shape q: not a graph input (inputs: x)",
        ),
    ] {
        tessera()
            .args([cmd, file.as_str(), "--input-shape", shape])
            .assert()
            .code(1)
            .stderr(contains(want).and(contains(file.as_str())));
    }
    tessera()
        .args([
            "import",
            &m,
            "--input-shape",
            "x=1x20",
            "--input-shape",
            "x=2x20",
        ])
        .assert()
        .code(1)
        .stderr(contains("--input-shape x is given twice"));
    let input = npy_arg(dir.path(), "x.npy", &f32_tensor(&[3, 20], vec![1.0; 60]));
    tessera()
        .args(["run", &m, "--input", &input, "--input-shape", "q=1"])
        .assert()
        .code(1)
        .stderr(contains("--input-shape q: not a graph input (inputs: x)"));
}

#[test]
fn bad_onnx_files_are_named_in_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.onnx");
    fs::write(&garbage, b"\xff\xff\xff\xff not protobuf").expect("write");
    for cmd in ["import", "fmt", "run"] {
        tessera()
            .arg(cmd)
            .arg(&garbage)
            .assert()
            .code(1)
            .stderr(contains("garbage.onnx: not a valid ONNX model"));
    }

    use proto::{FLOAT, graph, model, node, value};
    let unsupported = dir.path().join("unsupported.onnx");
    let g = graph(
        "g",
        vec![
            node("Frobnicate", "f0", &["x"], &["a"]),
            node("Frobnicate", "f1", &["a"], &["b"]),
            node("Twiddle", "t0", &["b"], &["y"]),
        ],
        vec![value("x", FLOAT, &["4"])],
        vec![value("y", FLOAT, &["4"])],
    );
    proto::write(&unsupported, &model(17, g));
    tessera()
        .arg("import")
        .arg(&unsupported)
        .assert()
        .code(1)
        .stderr(
            contains("unsupported.onnx: the model uses 2 unsupported feature(s):")
                .and(contains(
                    "ai.onnx Frobnicate (opset 17): 2 nodes, first `f0`",
                ))
                .and(contains("ai.onnx Twiddle (opset 17): 1 node, first `t0`")),
        );
}

/// The bundled ONNX MLP (Gemm, GELU as Erf arithmetic, Softmax) reproduces onnxruntime.
#[test]
fn onnx_mlp_matches_onnxruntime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = models().join("onnx/mlp");
    let out = dir.path().join("out");
    tessera()
        .arg("run")
        .arg(m.join("model.onnx"))
        .arg("--input")
        .arg(format!("x={}", m.join("input_0_x.npy").display()))
        .arg("--output-dir")
        .arg(&out)
        .assert()
        .success();
    let got = tessera::npy::read(&out.join("probs.npy")).expect("read output");
    let want = tessera::npy::read(&m.join("output_0_probs.npy")).expect("read reference");
    assert_eq!(got.ty(), want.ty());
    for (i, (g, w)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 + 1e-3 * w.abs(),
            "element {i}: got {g}, onnxruntime {w}"
        );
    }
}

#[test]
fn a_failure_with_unbound_dimensions_lists_them_with_an_example() {
    // The walkthrough's model without --input-shape: the shape error says why.
    tessera()
        .args(["compile"])
        .arg(models().join("onnx/gpt2_tiny/model.onnx"))
        .args(["--target", "mcm-2x2"])
        .assert()
        .code(1)
        .stderr(contains("do not broadcast"))
        .stderr(contains(
            "inputs with symbolic extents, not bound by --input-shape",
        ))
        .stderr(contains("\n  input_ids: i64[1, seq]\n"))
        .stderr(contains("for example: --input-shape input_ids=1x8"));
    // A text IR model that fails later, in the compile, says it too.
    tessera()
        .arg("compile")
        .arg(mlp())
        .assert()
        .code(1)
        .stderr(contains("\n  x: f32[N, 16]\n"))
        .stderr(contains("for example: --input-shape x=1x16"));
    // Bound, the example compiles.
    tessera()
        .arg("compile")
        .arg(mlp())
        .args(["--input-shape", "x=1x16"])
        .assert()
        .success();
}

#[test]
fn strategies_are_checked_when_parsing_with_a_suggestion() {
    for cmd in [vec!["compile", "m.tir"], vec!["place", "p.json"]] {
        tessera()
            .args(&cmd)
            .args(["--strategy", "greedyy"])
            .assert()
            .code(2)
            .stderr(contains("unknown strategy `greedyy`"))
            .stderr(contains("did you mean `greedy`?"));
    }
}

#[test]
fn top_level_help_describes_what_exists() {
    tessera()
        .arg("--help")
        .assert()
        .success()
        .stdout(contains("yet to come").not())
        .stdout(contains("lowers each device's part to MLIR"));
}

/// Runs `tessera ARGS` under `script` (util-linux, in every Debian), so its stderr is a
/// terminal; returns what the terminal got.
fn on_a_terminal(args: &str) -> String {
    let out = std::process::Command::new("script")
        .args([
            "-qec",
            &format!("{} {args}", env!("CARGO_BIN_EXE_tessera")),
            "/dev/null",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("script (util-linux) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_spinner_shows_once_a_compile_runs_for_a_second() {
    // A 40,000-op chain of sums takes two seconds in a release build on a fast machine (a
    // chain of relus took half a second: the passes fold `relu(relu(x))`): the terminal
    // sees the stage spinner (once the process has run for a second), whatever stage it is
    // in.
    let dir = tempfile::tempdir().expect("tempdir");
    let mut src = String::from("graph @chain(%x: f32[4]) {\n");
    let mut prev = "%x".to_string();
    for i in 0..40_000 {
        src.push_str(&format!("  %v{i} = add {prev}, %x : f32[4]\n"));
        prev = format!("%v{i}");
    }
    src.push_str(&format!("  return {prev}\n}}\n"));
    let model = dir.path().join("chain.tir");
    fs::write(&model, src).expect("write");
    let long = on_a_terminal(&format!("compile {}", model.display()));
    assert!(long.contains("compiled "), "{long}");
    assert!(long.contains("\u{1b}[2K"), "no spinner drawn: {long}");
    // A quick compile prints its summary and nothing else.
    let quick = on_a_terminal("compile testdata/models/mlp.tir --input-shape x=1x16");
    assert!(
        quick.starts_with("compiled testdata/models/mlp.tir"),
        "{quick}"
    );
    assert!(!quick.contains('\u{1b}'), "{quick}");
}

#[test]
fn fmt_keeps_large_inline_constants_inline() {
    // 20 elements: more than the printer keeps inline, so a plain print makes it
    // `external`, which would not parse again without a sidecar.
    let dir = tempfile::tempdir().expect("tempdir");
    let values: Vec<String> = (0..20).map(|i| format!("{i}.5")).collect();
    let src = format!(
        "const @w : f32[20] = [{}]\n\ngraph @g(%x: f32[20]) {{\n  %w = const @w : f32[20]\n  %y = add %x, %w : f32[20]\n  return %y\n}}\n",
        values.join(", ")
    );
    let model = dir.path().join("big.tir");
    fs::write(&model, &src).expect("write");
    let out = tessera()
        .arg("fmt")
        .arg(&model)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let printed = String::from_utf8(out).expect("utf-8");
    assert!(!printed.contains("external"), "{printed}");
    assert!(printed.contains("19.5"), "{printed}");
    // The output parses again alone (another folder: no sidecar next to it) and prints the
    // same.
    let other = tempfile::tempdir().expect("tempdir");
    let again = other.path().join("again.tir");
    fs::write(&again, &printed).expect("write");
    tessera()
        .arg("fmt")
        .arg(&again)
        .assert()
        .success()
        .stdout(printed);
}
