//! Control flow imported as region ops: a data-dependent `If` whose then branch makes a
//! rank-5 tensor and feeds an LSTM (the else branch never makes one) becomes one `if` op;
//! the interpreter runs only the taken branch and matches onnxruntime on inputs that take
//! each branch (`testdata/models/make_region_models.py`). A `Loop` whose body slices at its
//! iteration number (a run-time `Slice` of static extent) and an opset-8 batched `Scan` (a
//! `scan` over the batch holding the `scan` over the sequence) match onnxruntime too.

mod common;

use std::path::{Path, PathBuf};

use common::proto::{self, FLOAT, INT32, INT64, graph, int64_init, model, node, value};
use common::{compare, read_npy, repo_root};
use tessera_ir::{Op, Tensor, interp, text, verify::verify};
use tessera_onnx::{ImportOptions, import_file};

fn dir() -> PathBuf {
    repo_root().join("testdata/models/regions/if_rank5")
}

#[test]
fn data_dependent_if_becomes_a_region_op_and_runs_the_taken_branch() {
    let g = import_file(&dir().join("model.onnx"), &ImportOptions::default()).expect("imports");
    verify(&g).unwrap_or_else(|e| panic!("{e:?}"));
    let ifs: Vec<_> = g
        .ops()
        .iter()
        .filter(|&&o| matches!(g.op(o).op, Op::If { .. }))
        .collect();
    assert_eq!(ifs.len(), 1, "{}", text::print(&g));
    let regions = g.op(*ifs[0]).op.regions();
    let ranks = |r: &tessera_ir::Graph| {
        r.ops()
            .iter()
            .flat_map(|&o| r.op(o).results.clone())
            .map(|v| r.ty(v).rank())
            .max()
            .unwrap_or(0)
    };
    assert_eq!(
        ranks(regions[0]),
        5,
        "the then branch makes a rank-5 tensor"
    );
    assert!(ranks(regions[1]) < 5, "the else branch never does");

    for case in ["pos", "neg"] {
        let x = read_npy(&dir().join(format!("input_x_{case}.npy")));
        let want = read_npy(&dir().join(format!("output_y_{case}.npy")));
        let got = interp::run(&g, &[x]).expect("runs");
        compare(&got[0], &want, Some((1e-4, 1e-5))).unwrap_or_else(|e| panic!("{case}: {e}"));
    }
}

/// The ops of `g` and of every region nested in it, by name, outermost first.
fn op_names(g: &tessera_ir::Graph) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut stack = vec![g];
    while let Some(g) = stack.pop() {
        for &o in g.ops() {
            out.push(g.op(o).op.name());
            stack.extend(g.op(o).op.regions());
        }
    }
    out
}

/// Imports `testdata/models/regions/NAME`, runs it on its inputs (`input_<name>.npy` in the
/// graph's input order) and compares every output with onnxruntime's.
fn matches_onnxruntime(name: &str) -> tessera_ir::Graph {
    let dir = repo_root().join("testdata/models/regions").join(name);
    let g = import_file(&dir.join("model.onnx"), &ImportOptions::default()).expect("imports");
    verify(&g).unwrap_or_else(|e| panic!("{e:?}"));
    let inputs: Vec<_> = g
        .inputs()
        .iter()
        .map(|&v| {
            let n = g.value(v).name.clone().expect("named input");
            read_npy(&dir.join(format!("input_{n}.npy")))
        })
        .collect();
    let got = interp::run(&g, &inputs).expect("runs");
    for (i, name) in g.output_names().iter().enumerate() {
        let n = name.clone().expect("named output");
        let want = read_npy(&dir.join(format!("output_{n}.npy")));
        compare(&got[i], &want, Some((1e-5, 1e-6))).unwrap_or_else(|e| panic!("{n}: {e}"));
    }
    g
}

#[test]
fn a_loop_slicing_at_its_iteration_number_matches_onnxruntime() {
    let g = matches_onnxruntime("loop_window");
    let ops = op_names(&g);
    assert!(ops.contains(&"loop"), "{ops:?}");
    // The run-time slice is a gather of a window inside the loop body.
    assert!(ops.contains(&"gather"), "{ops:?}");
    assert!(!ops.contains(&"slice"), "{ops:?}");
}

#[test]
fn a_batched_opset_8_scan_matches_onnxruntime() {
    let g = matches_onnxruntime("scan8_batched");
    let ops = op_names(&g);
    assert_eq!(ops.iter().filter(|&&o| o == "scan").count(), 2, "{ops:?}");
    // The body reads the outer `bias`: captured by the scan over the batch after its four
    // scanned operands, and passed on to the scan over the sequence.
    let outer = g
        .ops()
        .iter()
        .find(|&&o| g.op(o).op.name() == "scan")
        .expect("the scan over the batch");
    assert_eq!(g.op(*outer).operands.len(), 5);
}

/// `y = Slice(x, starts, ends, [0])` with `x: f32[6, 2]` and `starts: i64[1]` an input;
/// `ends` made by `ends_nodes` (which may add `two` or `seven` to an input).
fn run_time_slice(dir: &Path, ends_nodes: Vec<proto::NodeP>, ends: &str) -> PathBuf {
    let mut nodes = ends_nodes;
    nodes.push(node("Slice", "sl", &["x", "starts", ends, "axes"], &["y"]));
    let mut g = graph(
        "slice",
        nodes,
        vec![
            value("x", FLOAT, &["6", "2"]),
            value("starts", INT64, &["1"]),
            value("other", INT64, &["1"]),
        ],
        vec![value("y", FLOAT, &["2", "2"])],
    );
    g.initializer.push(int64_init("axes", &[1], &[0]));
    g.initializer.push(int64_init("two", &[1], &[2]));
    g.initializer.push(int64_init("seven", &[1], &[7]));
    let path = dir.join(format!("slice-{ends}.onnx"));
    proto::write(&path, &model(13, g));
    path
}

#[test]
fn a_run_time_slice_needs_ends_a_constant_past_its_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    // ends = starts + 2: rows [s, s + 2), negative starts counted from the end, and a window
    // reaching past the axis moved inside it.
    let path = run_time_slice(
        dir.path(),
        vec![node("Add", "e", &["starts", "two"], &["ends"])],
        "ends",
    );
    let g = import_file(&path, &ImportOptions::default()).expect("imports");
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let x = Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![6, 2], x).expect("x"));
    let i64s = |v: i64| Tensor::I64(ndarray::arr1(&[v]).into_dyn());
    // Starts 5 (past 6 - 2) and -1 (its end, 1, is not counted from the end) are where ONNX
    // returns fewer rows (one, none) than a static extent of 2 holds: tessera moves the window
    // inside the axis (the documented difference).
    for (start, rows) in [
        (1, [1.0, 2.0]),
        (-3, [3.0, 4.0]),
        (0, [0.0, 1.0]),
        (5, [4.0, 5.0]),
        (-1, [4.0, 5.0]),
    ] {
        let y = interp::run(&g, &[x.clone(), i64s(start), i64s(0)]).expect("runs");
        let want: Vec<f64> = rows
            .iter()
            .flat_map(|&r| [2.0 * r, 2.0 * r + 1.0])
            .collect();
        assert_eq!(y[0].to_f64_vec(), want, "start {start}");
    }
    // ends from another input: the extent is not static, so the bounds must be known.
    let path = run_time_slice(dir.path(), vec![], "other");
    let msg = import_file(&path, &ImportOptions::default())
        .expect_err("not static")
        .to_string();
    assert!(msg.contains("node `sl` (Slice)"), "{msg}");
    assert!(
        msg.contains("input 1 (starts) must be known at import time"),
        "{msg}"
    );
    // ends = starts + 7 on an axis of 6.
    let path = run_time_slice(
        dir.path(),
        vec![node("Add", "e", &["starts", "seven"], &["far"])],
        "far",
    );
    let msg = import_file(&path, &ImportOptions::default())
        .expect_err("too long")
        .to_string();
    assert!(
        msg.contains("a run-time slice of 7 elements from axis 0 of extent 6"),
        "{msg}"
    );
}

/// `y = Slice(x, starts, ends, axes)` with `x: f32[3, 4]`, `starts` a run-time input of
/// type `elem` (int64 or int32) and `ends = starts - (-2)`.
fn two_axis_slice(dir: &Path, elem: i32, axes: &[i64]) -> PathBuf {
    let nodes = vec![
        node("Sub", "e", &["starts", "minus_two"], &["ends"]),
        node("Slice", "sl", &["x", "starts", "ends", "axes"], &["y"]),
    ];
    let mut g = graph(
        "slice2",
        nodes,
        vec![
            value("x", FLOAT, &["3", "4"]),
            value("starts", elem, &["2"]),
        ],
        vec![value("y", FLOAT, &["2", "2"])],
    );
    g.initializer.push(int64_init("axes", &[2], axes));
    let mut minus_two = int64_init("minus_two", &[], &[-2]);
    if elem == INT32 {
        minus_two.data_type = Some(INT32);
        minus_two.int64_data.clear();
        minus_two.raw_data = Some((-2i32).to_le_bytes().to_vec());
    }
    g.initializer.push(minus_two);
    let path = dir.join("slice2.onnx");
    proto::write(&path, &model(13, g));
    path
}

#[test]
fn a_run_time_slice_over_two_axes_with_i32_starts_and_a_subtraction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let x = Tensor::F32(ndarray::ArrayD::from_shape_vec(vec![3, 4], x).expect("x"));
    for elem in [INT64, INT32] {
        // axes [-1, 0]: starts[0] is the column, starts[1] the row.
        let path = two_axis_slice(dir.path(), elem, &[-1, 0]);
        let g = import_file(&path, &ImportOptions::default()).expect("imports");
        verify(&g).unwrap_or_else(|e| panic!("{e:?}"));
        let starts = |c: i64, r: i64| match elem {
            INT64 => Tensor::I64(ndarray::arr1(&[c, r]).into_dyn()),
            _ => Tensor::I32(ndarray::arr1(&[c as i32, r as i32]).into_dyn()),
        };
        // Rows 1..3 and columns 2..4; then rows 0..2 and columns 1..3 (column -3 from the end).
        for ((c, r), want) in [
            ((2, 1), [6.0, 7.0, 10.0, 11.0]),
            ((-3, 0), [1.0, 2.0, 5.0, 6.0]),
        ] {
            let y = interp::run(&g, &[x.clone(), starts(c, r)]).expect("runs");
            assert_eq!(y[0].to_f64_vec(), want, "{elem}: starts ({c}, {r})");
        }
    }
}
