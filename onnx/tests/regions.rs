//! Control flow imported as region ops: a data-dependent `If` whose then branch makes a
//! rank-5 tensor and feeds an LSTM (the else branch never makes one) becomes one `if` op;
//! the interpreter runs only the taken branch and matches onnxruntime on inputs that take
//! each branch (`testdata/models/make_region_models.py`).

mod common;

use std::path::PathBuf;

use common::{compare, read_npy, repo_root};
use tessera_ir::{Op, interp, text, verify::verify};
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
