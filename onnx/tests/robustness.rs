//! Inputs found by fuzzing and by checking against onnx.checker: each must give a clear error
//! naming the file, the node or tensor and the reason (or import correctly), never abort,
//! hang or take quadratic time. External data that escapes the model's folder or is not a
//! regular file, `dim_value: -1`, invalid ONNX (duplicate names, wrong input counts), sizes
//! and ranks from the input, and many uses of one name.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::proto::{
    self, FLOAT, INT64, attr_i, attr_ints, float_init, graph, int64_init, model, node, value,
};
use tessera_ir::{Dim, Op, Tensor};
use tessera_onnx::{ImportError, ImportOptions, import_file};

fn import(path: &Path) -> Result<tessera_ir::Graph, ImportError> {
    import_file(path, &ImportOptions::default())
}

fn err(r: Result<tessera_ir::Graph, ImportError>) -> String {
    r.expect_err("the import should fail").to_string()
}

/// Imports on another thread and fails the test if that takes longer than `limit` (a hang).
fn import_within(path: &Path, limit: Duration) -> Result<tessera_ir::Graph, ImportError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(import(&p));
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("importing {} did not finish in {limit:?}", path.display()))
}

fn f32_tensor(shape: &[usize], data: Vec<f32>) -> Tensor {
    Tensor::F32(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), data).expect("shape"))
}

fn i64_tensor(shape: &[usize], data: Vec<i64>) -> Tensor {
    Tensor::I64(ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(shape), data).expect("shape"))
}

// ---------------------------------------------------------------------------------------------
// External data

/// `y = x + w` with `w: f32[4]` stored externally at `location`.
fn external_model(dir: &Path, location: &str) -> std::path::PathBuf {
    let mut w = float_init("w", &[4], &[]);
    w.data_location = Some(1);
    w.external_data = vec![proto::Entry {
        key: Some("location".into()),
        value: Some(location.into()),
    }];
    let mut g = graph(
        "g",
        vec![node("Add", "add", &["x", "w"], &["y"])],
        vec![value("x", FLOAT, &["4"])],
        vec![value("y", FLOAT, &["4"])],
    );
    g.initializer.push(w);
    let path = dir.join("model.onnx");
    proto::write(&path, &model(17, g));
    path
}

#[cfg(unix)]
#[test]
fn external_data_through_a_symlink_to_a_file_outside_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("secret.bin");
    std::fs::write(&secret, [7u8; 16]).expect("write");
    std::os::unix::fs::symlink(&secret, dir.path().join("w.bin")).expect("symlink");
    let path = external_model(dir.path(), "w.bin");
    let msg = err(import(&path));
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    assert!(msg.contains("initializer `w`"), "{msg}");
    assert!(msg.contains("w.bin"), "{msg}");
    assert!(msg.contains("outside the model's folder"), "{msg}");

    // A link that stays inside the folder is followed.
    std::fs::write(dir.path().join("real.bin"), [0u8; 16]).expect("write");
    std::fs::remove_file(dir.path().join("w.bin")).expect("remove");
    std::os::unix::fs::symlink("real.bin", dir.path().join("w.bin")).expect("symlink");
    import(&path).expect("a link inside the model's folder is fine");
}

#[cfg(unix)]
#[test]
fn external_data_through_a_symlinked_folder_pointing_outside_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("w.bin"), [7u8; 16]).expect("write");
    std::os::unix::fs::symlink(outside.path(), dir.path().join("weights")).expect("symlink");
    let path = external_model(dir.path(), "weights/w.bin");
    let msg = err(import(&path));
    assert!(msg.contains("initializer `w`"), "{msg}");
    assert!(msg.contains("weights/w.bin"), "{msg}");
    assert!(msg.contains("outside the model's folder"), "{msg}");
}

#[cfg(unix)]
#[test]
fn external_data_in_a_fifo_is_refused_without_blocking() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("w.bin");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let path = external_model(dir.path(), "w.bin");
    let msg = err(import_within(&path, Duration::from_secs(20)));
    assert!(msg.contains("initializer `w`"), "{msg}");
    assert!(msg.contains("w.bin"), "{msg}");
    assert!(msg.contains("is a FIFO, not a regular file"), "{msg}");

    // The model file itself as a FIFO: an I/O error, not a hang.
    let model_fifo = dir.path().join("fifo.onnx");
    let status = std::process::Command::new("mkfifo")
        .arg(&model_fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let e = import_within(&model_fifo, Duration::from_secs(20)).expect_err("a FIFO model");
    assert!(matches!(e, ImportError::Io { .. }), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn external_data_that_is_a_directory_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("w.bin")).expect("mkdir");
    let path = external_model(dir.path(), "w.bin");
    let msg = err(import(&path));
    assert!(msg.contains("initializer `w`"), "{msg}");
    assert!(msg.contains("w.bin"), "{msg}");
    assert!(msg.contains("is a directory, not a regular file"), "{msg}");
}

// ---------------------------------------------------------------------------------------------
// dim_value: -1

#[test]
fn dim_value_minus_one_is_a_symbolic_extent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relu.onnx");
    let m = model(
        17,
        graph(
            "relu",
            vec![node("Relu", "r", &["x"], &["y"])],
            vec![value("x", FLOAT, &["-1", "4"])],
            vec![value("y", FLOAT, &["-1", "4"])],
        ),
    );
    proto::write(&path, &m);
    let g = import(&path).expect("-1 is an unknown extent");
    let ty = g.ty(g.inputs()[0]);
    assert!(matches!(ty.shape[0], Dim::Sym(_)), "{ty}");
    assert_eq!(ty.shape[1], Dim::Static(4), "{ty}");

    let options = ImportOptions {
        input_shapes: BTreeMap::from([("x".to_string(), vec![3, 4])]),
        ..ImportOptions::default()
    };
    let g = import_file(&path, &options).expect("bound by --input-shape");
    assert_eq!(g.ty(g.outputs()[0]).to_string(), "f32[3, 4]");

    // Other negative extents are still errors.
    let mut m = m;
    m.graph.as_mut().expect("graph").input = vec![value("x", FLOAT, &["-2", "4"])];
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(
        msg.contains("input `x`: negative extent -2 on axis 0"),
        "{msg}"
    );
}

// ---------------------------------------------------------------------------------------------
// Invalid ONNX that onnx.checker refuses

#[test]
fn duplicate_graph_inputs_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dup.onnx");
    let m = model(
        17,
        graph(
            "g",
            vec![node("Add", "add", &["x", "x"], &["y"])],
            vec![value("x", FLOAT, &["4"]), value("x", FLOAT, &["5"])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(msg.contains("graph input `x` is declared twice"), "{msg}");
}

#[test]
fn duplicate_initializers_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dup.onnx");
    let mut g = graph(
        "g",
        vec![node("Add", "add", &["x", "w"], &["y"])],
        vec![value("x", FLOAT, &["2"])],
        vec![value("y", FLOAT, &["2"])],
    );
    g.initializer.push(float_init("w", &[2], &[1.0, 2.0]));
    g.initializer.push(float_init("w", &[2], &[3.0, 4.0]));
    proto::write(&path, &model(17, g));
    let msg = err(import(&path));
    assert!(msg.contains("initializer `w` is defined twice"), "{msg}");
}

#[test]
fn duplicate_attributes_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dup.onnx");
    let mut sm = node("Softmax", "sm", &["x"], &["y"]);
    sm.attribute = vec![attr_i("axis", 0), attr_i("axis", 1)];
    let m = model(
        17,
        graph(
            "g",
            vec![sm],
            vec![value("x", FLOAT, &["2", "3"])],
            vec![value("y", FLOAT, &["2", "3"])],
        ),
    );
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(msg.contains("node `sm` (Softmax)"), "{msg}");
    assert!(msg.contains("attribute `axis` is given twice"), "{msg}");
}

/// `y = x + w` where `w: f32[2]` is an initializer also declared as the input `w` with type
/// `declared`.
fn shadowing_model(elem: i32, declared: &[&str]) -> proto::Model {
    let mut g = graph(
        "g",
        vec![node("Add", "add", &["x", "w"], &["y"])],
        vec![value("x", FLOAT, &["2"]), value("w", elem, declared)],
        vec![value("y", FLOAT, &["2"])],
    );
    g.initializer.push(float_init("w", &[2], &[1.0, 2.0]));
    model(17, g)
}

#[test]
fn an_input_shadowing_an_initializer_must_have_its_type() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shadow.onnx");

    // The old "input with a default" form: same type, accepted; `w` is a constant.
    for declared in [&["2"][..], &["N"][..]] {
        proto::write(&path, &shadowing_model(FLOAT, declared));
        let g = import(&path).expect("same type as the initializer");
        assert_eq!(g.inputs().len(), 1, "only x is an input");
        assert_eq!(g.num_consts(), 1);
    }

    proto::write(&path, &shadowing_model(FLOAT, &["3"]));
    let msg = err(import(&path));
    assert!(
        msg.contains(
            "graph input `w` has the same name as an initializer of type f32[2] but it is \
             declared with shape [3]"
        ),
        "{msg}"
    );
    proto::write(&path, &shadowing_model(FLOAT, &["2", "1"]));
    let msg = err(import(&path));
    assert!(msg.contains("declared with shape [2, 1]"), "{msg}");
    proto::write(&path, &shadowing_model(INT64, &["2"]));
    let msg = err(import(&path));
    assert!(msg.contains("declared with element type int64"), "{msg}");
}

/// A one-node model `op_type(inputs) -> y` at `opset`, inputs `x0..` of type f32[2, 2].
fn one_node(opset: i64, op_type: &str, inputs: &[&str]) -> proto::Model {
    let mut declared: Vec<&str> = inputs.iter().copied().filter(|s| !s.is_empty()).collect();
    declared.sort_unstable();
    declared.dedup();
    model(
        opset,
        graph(
            "g",
            vec![node(op_type, "n", inputs, &["y"])],
            declared
                .iter()
                .map(|n| value(n, FLOAT, &["2", "2"]))
                .collect(),
            vec![value("y", FLOAT, &["2", "2"])],
        ),
    )
}

#[test]
fn more_inputs_than_the_schema_allows_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("arity.onnx");
    let cases: &[(i64, &str, &[&str], &str)] = &[
        (
            17,
            "Relu",
            &["a", "b"],
            "2 inputs given, but Relu takes at most 1 at opset 17",
        ),
        (
            17,
            "Gemm",
            &["a", "b", "c", "d"],
            "4 inputs given, but Gemm takes at most 3 at opset 17",
        ),
        (
            10,
            "Clip",
            &["a", "b", "c"],
            "3 inputs given, but Clip takes at most 1 at opset 10",
        ),
        (
            17,
            "Add",
            &["a", "b", "c"],
            "3 inputs given, but Add takes at most 2 at opset 17",
        ),
    ];
    for (opset, op, inputs, want) in cases {
        proto::write(&path, &one_node(*opset, op, inputs));
        let msg = err(import(&path));
        assert!(msg.contains(&format!("node `n` ({op})")), "{msg}");
        assert!(msg.contains(want), "{msg}");
    }
    // Trailing empty names are inputs not given.
    proto::write(&path, &one_node(17, "Relu", &["a", ""]));
    import(&path).expect("a trailing empty input is absent");
    // Variadic ops take any number.
    let many: Vec<String> = (0..50).map(|i| format!("x{i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    proto::write(&path, &one_node(17, "Sum", &refs));
    import(&path).expect("Sum is variadic");
}

#[test]
fn fewer_inputs_than_the_schema_requires_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("arity.onnx");
    let cases: &[(i64, &str, &[&str], &str)] = &[
        (
            9,
            "Gemm",
            &["a", "b"],
            "input 2 is missing, but Gemm takes at least 3 input(s) at opset 9",
        ),
        (
            17,
            "Where",
            &["a", "b"],
            "input 2 is missing, but Where takes at least 3 input(s) at opset 17",
        ),
        (
            17,
            "Add",
            &["", "b"],
            "input 0 is missing, but Add takes at least 2 input(s) at opset 17",
        ),
    ];
    for (opset, op, inputs, want) in cases {
        proto::write(&path, &one_node(*opset, op, inputs));
        let msg = err(import(&path));
        assert!(msg.contains(&format!("node `n` ({op})")), "{msg}");
        assert!(msg.contains(want), "{msg}");
    }
}

// ---------------------------------------------------------------------------------------------
// Sizes from the input

/// `y = OneHot(i, depth, [0, 1])` with `i: i64[3]`.
fn one_hot_model(depth: i64) -> proto::Model {
    let mut g = graph(
        "onehot",
        vec![node("OneHot", "oh", &["i", "depth", "values"], &["y"])],
        vec![value("i", INT64, &["3"])],
        vec![value("y", FLOAT, &["3", "D"])],
    );
    g.initializer.push(int64_init("depth", &[1], &[depth]));
    g.initializer.push(float_init("values", &[2], &[0.0, 1.0]));
    model(17, g)
}

/// The largest constant of a graph, in bytes.
fn largest_constant(g: &tessera_ir::Graph) -> usize {
    g.consts().map(|(_, c)| c.data.len()).max().unwrap_or(0)
}

#[test]
fn one_hot_with_a_huge_depth_is_not_built_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("onehot.onnx");
    // 2^40 positions: 8 TiB as an i64 table. The import keeps them as a `range` op.
    proto::write(&path, &one_hot_model(1 << 40));
    let g = import(&path).expect("a huge depth stays an op");
    assert!(
        g.ops()
            .iter()
            .any(|&o| matches!(g.op(o).op, Op::Range { .. })),
        "the positions are a range op"
    );
    assert!(largest_constant(&g) < 1024, "no table was built");
    assert_eq!(g.ty(g.outputs()[0]).to_string(), "f32[3, 1099511627776]");
    // Running it is an interpreter error, not an abort.
    let e = tessera_ir::interp::run(&g, &[i64_tensor(&[3], vec![0, 1, 2])])
        .expect_err("13 TiB of output");
    assert!(e.to_string().contains("memory limit"), "{e}");

    // A depth whose result cannot exist at all is an error naming the node.
    proto::write(&path, &one_hot_model(1 << 62));
    let msg = err(import(&path));
    assert!(msg.contains("node `oh` (OneHot)"), "{msg}");
    assert!(msg.contains("is too large"), "{msg}");
}

#[test]
fn one_hot_positions_past_the_small_table_size_are_a_range_op() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("onehot.onnx");
    // 2^26 positions fit the 1 GiB fold limit (512 MiB), but building them took seconds at
    // import (found by fuzzing): past 2^16 elements they are a `range` op, computed when the
    // model runs, and the result is the same.
    proto::write(&path, &one_hot_model(1 << 26));
    let g = import(&path).expect("imports");
    assert!(largest_constant(&g) < 1 << 20, "no table was built");
    assert!(
        g.ops()
            .iter()
            .any(|&o| matches!(g.op(o).op, Op::Range { .. })),
        "the positions are a range op"
    );
    proto::write(&path, &one_hot_model(70_000));
    let g = import(&path).expect("imports");
    let y = tessera_ir::interp::run(&g, &[i64_tensor(&[3], vec![5, -1, 69_999])]).expect("run");
    let y = y[0].to_f64_vec();
    assert_eq!(y.iter().sum::<f64>(), 3.0);
    assert_eq!(
        (y[5], y[70_000 + 69_999], y[140_000 + 69_999]),
        (1.0, 1.0, 1.0)
    );
}

#[test]
fn an_rnn_hidden_size_must_be_rs_last_extent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lstm.onnx");
    // X [1, 1, 2], W [1, 4, 2], R [1, 4, 1]: hidden size 1. An attribute of 2^62 overflowed
    // the gate sizes computed from it (found by fuzzing).
    for (hidden, ok) in [(1, true), (2, false), (1 << 62, false)] {
        let mut n = node("LSTM", "lstm", &["x", "w", "r"], &["y"]);
        n.attribute = vec![attr_i("hidden_size", hidden)];
        let mut g = graph(
            "lstm",
            vec![n],
            vec![value("x", FLOAT, &["1", "1", "2"])],
            vec![value("y", FLOAT, &["1", "1", "1", "1"])],
        );
        g.initializer.push(float_init("w", &[1, 4, 2], &[0.5; 8]));
        g.initializer.push(float_init("r", &[1, 4, 1], &[0.25; 4]));
        proto::write(&path, &model(14, g));
        match import(&path) {
            Ok(_) => assert!(ok, "hidden_size {hidden} imported"),
            Err(e) => {
                assert!(!ok, "hidden_size {hidden}: {e}");
                let msg = e.to_string();
                assert!(msg.contains("node `lstm` (LSTM)"), "{msg}");
                assert!(
                    msg.contains(&format!(
                        "attribute `hidden_size` is {hidden}, but R's last extent is 1"
                    )),
                    "{msg}"
                );
            }
        }
    }
}

#[test]
fn the_fold_limit_is_an_option_and_ops_compute_the_same_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("onehot.onnx");
    proto::write(&path, &one_hot_model(1000));
    let folded = import(&path).expect("import");
    assert!(
        largest_constant(&folded) >= 8000,
        "the positions are a constant"
    );
    let small = ImportOptions {
        fold_limit_bytes: 1024,
        ..ImportOptions::default()
    };
    let ops = import_file(&path, &small).expect("import under a small limit");
    assert!(largest_constant(&ops) < 1024, "no table over the limit");
    let x = [i64_tensor(&[3], vec![5, -1, 999])];
    let a = tessera_ir::interp::run(&folded, &x).expect("run");
    let b = tessera_ir::interp::run(&ops, &x).expect("run");
    assert_eq!(a, b);
    let y = a[0].to_f64_vec();
    assert_eq!(y.iter().sum::<f64>(), 3.0);
    assert_eq!((y[5], y[1000 + 999], y[2000 + 999]), (1.0, 1.0, 1.0));
}

#[test]
fn eye_like_and_hardmax_of_huge_declared_shapes_are_not_built_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.onnx");
    let one = |op: &str, dims: &[&str]| {
        model(
            17,
            graph(
                "g",
                vec![node(op, "n", &["x"], &["y"])],
                vec![value("x", FLOAT, dims)],
                vec![value("y", FLOAT, dims)],
            ),
        )
    };
    // 2^28 indices per axis are 2 GiB each: computed by ops.
    let e = (1u64 << 28).to_string();
    proto::write(&path, &one("EyeLike", &[&e, &e]));
    let g = import(&path).expect("EyeLike stays ops");
    assert!(largest_constant(&g) < 1024);
    assert_eq!(g.ty(g.outputs()[0]).to_string(), format!("f32[{e}, {e}]"));

    // 2^40 per axis: the input cannot exist, an error naming it.
    let e = (1u64 << 40).to_string();
    proto::write(&path, &one("EyeLike", &[&e, &e]));
    let msg = err(import(&path));
    assert!(msg.contains("input `x`: type f32["), "{msg}");
    assert!(msg.contains("is too large"), "{msg}");

    proto::write(&path, &one("Hardmax", &["1", &e]));
    let g = import(&path).expect("Hardmax stays ops");
    assert!(largest_constant(&g) < 1024);
}

#[test]
fn declared_input_shapes_over_the_size_limit_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.onnx");
    let e = (1u64 << 30).to_string();
    let m = model(
        17,
        graph(
            "g",
            vec![node("Relu", "r", &["x"], &["y"])],
            vec![value("x", FLOAT, &[&e, &e, &e])],
            vec![value("y", FLOAT, &[&e, &e, &e])],
        ),
    );
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(msg.contains("input `x`: type f32["), "{msg}");
    assert!(msg.contains("is too large"), "{msg}");
}

#[test]
fn a_causal_attention_mask_over_huge_sequences_is_not_built_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("attention.onnx");
    // S = 2^20: the [S, S] offset table would take 8 TiB.
    let s = (1u64 << 20).to_string();
    let dims = ["1", "1", s.as_str(), "8"];
    let mut n = node("Attention", "attn", &["q", "k", "v"], &["y"]);
    n.attribute = vec![attr_i("is_causal", 1)];
    let m = model(
        23,
        graph(
            "attention",
            vec![n],
            vec![
                value("q", FLOAT, &dims),
                value("k", FLOAT, &dims),
                value("v", FLOAT, &dims),
            ],
            vec![value("y", FLOAT, &dims)],
        ),
    );
    proto::write(&path, &m);
    let g = import(&path).expect("the mask is computed by ops");
    // The row and column indices (8 MiB each) are constants, the table is not.
    for (_, c) in g.consts() {
        assert!(
            c.data.len() <= 8 << 20,
            "constant {} of type {}",
            c.name,
            c.ty
        );
    }
}

#[test]
fn range_lengths_from_values_are_checked_before_allocating() {
    // Through the importer: the limit is a graph input, so the length is a symbol bound
    // when the range runs.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("range.onnx");
    let mut g = graph(
        "range",
        vec![node("Range", "rg", &["start", "limit", "delta"], &["y"])],
        vec![value("limit", INT64, &[])],
        vec![value("y", INT64, &["L"])],
    );
    g.initializer.push(int64_init("start", &[], &[0]));
    g.initializer.push(int64_init("delta", &[], &[1]));
    proto::write(&path, &model(17, g));
    let g = import(&path).expect("import");
    let small = tessera_ir::interp::run(&g, &[i64_tensor(&[], vec![4])]).expect("run");
    assert_eq!(small[0], i64_tensor(&[4], vec![0, 1, 2, 3]));
    let e = tessera_ir::interp::run(&g, &[i64_tensor(&[], vec![1 << 40])])
        .expect_err("8 TiB of output");
    assert!(e.to_string().contains("memory limit"), "{e}");

    // One op, with its size symbolic and unbound.
    let op = Op::Range {
        size: Dim::Sym("n".into()),
    };
    let scalar = |x: f32| f32_tensor(&[], vec![x]);
    let e = tessera_ir::interp::eval_op(&op, &[&scalar(0.0), &scalar(1e12), &scalar(1.0)])
        .expect_err("4 TB of output");
    assert!(e.to_string().contains("memory limit"), "{e}");
}

/// `y = Resize(x, sizes)` with `x: f32[1, 1, 4]`, `half_pixel_symmetric` coordinates (which
/// the IR `resize` op does not have, so the importer builds gather tables) and `mode`.
fn resize_model(mode: &str, size: i64) -> proto::Model {
    let mut rs = node("Resize", "rs", &["x", "", "", "sizes"], &["y"]);
    rs.attribute = vec![
        proto::attr_s("mode", mode),
        proto::attr_s("coordinate_transformation_mode", "half_pixel_symmetric"),
    ];
    let mut g = graph(
        "resize",
        vec![rs],
        vec![value("x", FLOAT, &["1", "1", "4"])],
        vec![value("y", FLOAT, &["1", "1", "N"])],
    );
    g.initializer.push(int64_init("sizes", &[3], &[1, 1, size]));
    model(19, g)
}

#[test]
fn resize_tap_tables_are_bounded_before_they_are_built() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("resize.onnx");
    // 2^20 nearest outputs or 2^19 cubic ones: tables of 2^21 taps, over the limit of 2^18.
    // Before the limit, a tiny model like these took seconds and gigabytes to import.
    for (mode, size) in [
        ("nearest", 1 << 20),
        ("cubic", 1 << 19),
        ("linear", i64::MAX / 2),
    ] {
        proto::write(&path, &resize_model(mode, size));
        let msg = err(import_within(&path, Duration::from_secs(20)));
        assert!(msg.contains("node `rs` (Resize)"), "{mode}: {msg}");
        assert!(msg.contains("taps each"), "{mode}: {msg}");
        assert!(msg.contains("262144 taps"), "{mode}: {msg}");
    }
    // Within the limit the tables are built, and the resize runs.
    proto::write(&path, &resize_model("cubic", 10));
    let g = import(&path).expect("a small cubic resize");
    assert_eq!(g.ty(g.outputs()[0]).to_string(), "f32[1, 1, 10]");
    let x = f32_tensor(&[1, 1, 4], vec![1.0, 2.0, 3.0, 4.0]);
    let y = tessera_ir::interp::run(&g, &[x]).expect("run")[0].to_f64_vec();
    assert_eq!(y.len(), 10);
    // (Its values are checked against onnxruntime by the ONNX node tests' resize cases.)
    assert!(y.iter().all(|v| (0.5..4.5).contains(v)), "{y:?}");
}

// ---------------------------------------------------------------------------------------------
// Many uses of one name, ranks

#[test]
fn ten_thousand_nodes_writing_one_name_import_in_linear_time() {
    // Each node's output is named `y`: the IR names them y, y_1, ..., y_10001 (the same
    // names as before); the probe for a free suffix used to start at 1 every time (50 s).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("chain.onnx");
    let count = 10_002;
    let nodes = (0..count)
        .map(|i| {
            node(
                "Relu",
                &format!("r{i}"),
                &[if i == 0 { "x" } else { "y" }],
                &["y"],
            )
        })
        .collect();
    let m = model(
        17,
        graph(
            "chain",
            nodes,
            vec![value("x", FLOAT, &["4"])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    proto::write(&path, &m);
    let start = Instant::now();
    let g = import(&path).expect("import");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let names: Vec<String> = g
        .ops()
        .iter()
        .map(|&o| g.value(g.op(o).results[0]).name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names.len(), count);
    assert_eq!(names[0], "y");
    for (i, n) in names.iter().enumerate().skip(1) {
        assert_eq!(n, &format!("y_{i}"));
    }
}

#[test]
fn one_max_of_ten_thousand_constants_imports_in_linear_time() {
    // Every folded partial maximum is a constant named after the node's output: `y`, `y_1`,
    // ... (this did not finish in minutes).
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("max.onnx");
    let count = 10_000;
    let names: Vec<String> = (0..count).map(|i| format!("c{i}")).collect();
    let mut inputs: Vec<&str> = names.iter().map(String::as_str).collect();
    inputs.push("x");
    let mut g = graph(
        "max",
        vec![node("Max", "m", &inputs, &["y"])],
        vec![value("x", FLOAT, &["2"])],
        vec![value("y", FLOAT, &["2"])],
    );
    for (i, n) in names.iter().enumerate() {
        // c_i = [i, -i]: the maximum is [count - 1, 0].
        g.initializer
            .push(float_init(n, &[2], &[i as f32, -(i as f32)]));
    }
    proto::write(&path, &model(17, g));
    let start = Instant::now();
    let g = import(&path).expect("import");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let y = tessera_ir::interp::run(&g, &[f32_tensor(&[2], vec![-1.0, 0.5])]).expect("run");
    assert_eq!(y[0], f32_tensor(&[2], vec![(count - 1) as f32, 0.5]));
}

#[test]
fn ranks_over_the_limit_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rank.onnx");
    // A chain of 10,000 Unsqueeze nodes: the 64th makes a rank-65 tensor (it used to go on
    // to rank 10,000 and take 3 GB).
    let nodes = (0..10_000)
        .map(|i| {
            let input = if i == 0 {
                "x".to_string()
            } else {
                format!("t{}", i - 1)
            };
            node(
                "Unsqueeze",
                &format!("u{i}"),
                &[&input, "axes"],
                &[&format!("t{i}")],
            )
        })
        .collect();
    let mut g = graph(
        "rank",
        nodes,
        vec![value("x", FLOAT, &["2"])],
        vec![value("t9999", FLOAT, &[])],
    );
    g.initializer.push(int64_init("axes", &[1], &[0]));
    proto::write(&path, &model(17, g));
    let msg = err(import(&path));
    assert!(msg.contains("node `u63` (Unsqueeze)"), "{msg}");
    assert!(
        msg.contains("rank 65 is more than the limit of 64"),
        "{msg}"
    );

    // A declared input or an initializer of rank 65.
    let dims = vec!["1"; 65];
    let m = model(
        17,
        graph(
            "g",
            vec![node("Relu", "r", &["x"], &["y"])],
            vec![value("x", FLOAT, &dims)],
            vec![value("y", FLOAT, &dims)],
        ),
    );
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(
        msg.contains("input `x`: the declared shape has rank 65"),
        "{msg}"
    );

    let mut g = graph(
        "g",
        vec![node("Relu", "r", &["w"], &["y"])],
        vec![],
        vec![value("y", FLOAT, &dims)],
    );
    g.initializer.push(float_init("w", &[1; 65], &[1.0]));
    proto::write(&path, &model(17, g));
    let msg = err(import(&path));
    assert!(
        msg.contains("initializer `w`: rank 65 is more than the limit of 64"),
        "{msg}"
    );

    // Unsqueeze with several axes at once is caught too, with its attribute form.
    let mut u = node("Unsqueeze", "wide", &["x"], &["y"]);
    u.attribute = vec![attr_ints("axes", &(0..70).collect::<Vec<_>>())];
    let m = model(
        11,
        graph(
            "g",
            vec![u],
            vec![value("x", FLOAT, &["2"])],
            vec![value("y", FLOAT, &[])],
        ),
    );
    proto::write(&path, &m);
    let msg = err(import(&path));
    assert!(msg.contains("node `wide` (Unsqueeze)"), "{msg}");
    assert!(
        msg.contains("rank 71 is more than the limit of 64"),
        "{msg}"
    );
}
