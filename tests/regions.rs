//! `tessera run` on a model with a data-dependent `If` whose then branch makes a rank-5
//! tensor and feeds an LSTM (`testdata/models/regions/if_rank5`, made by
//! `testdata/models/make_region_models.py`): interpreted and compiled (`scf.if`, JIT), on
//! inputs that take each branch, against onnxruntime's outputs; likewise a `Loop` slicing at
//! its iteration number (`scf.while`) and an opset-8 batched `Scan` (nested `scf.for`).

mod common;

use common::cli::{max_diff, ok, repo, tessera};

const MODEL: &str = "testdata/models/regions/if_rank5";

#[test]
fn if_rank5_runs_each_branch_interpreted_and_compiled() {
    let tmp = tempfile::tempdir().expect("tmp");
    for case in ["pos", "neg"] {
        let want = tessera::npy::read(&repo().join(MODEL).join(format!("output_y_{case}.npy")))
            .expect("reference");
        for target in [None, Some("cpu")] {
            let out = tmp
                .path()
                .join(format!("{case}-{}", target.unwrap_or("interp")));
            let mut cmd = tessera();
            cmd.args(["run", &format!("{MODEL}/model.onnx")])
                .args(["--input", &format!("x={MODEL}/input_x_{case}.npy")]);
            if let Some(t) = target {
                cmd.args(["--target", t]);
            }
            ok(cmd.arg("-o").arg(&out));
            let got = tessera::npy::read(&out.join("y.npy")).expect("output");
            let d = max_diff(&got, &want);
            assert!(
                d < 1e-5,
                "{case} on {target:?}: max |diff| {d} against onnxruntime"
            );
        }
    }
}

/// `tessera run` of `testdata/models/regions/NAME` with `inputs` (names), interpreted and
/// compiled for `cpu`, against onnxruntime's `outputs`.
fn runs_like_onnxruntime(name: &str, inputs: &[&str], outputs: &[&str]) {
    let dir = format!("testdata/models/regions/{name}");
    let tmp = tempfile::tempdir().expect("tmp");
    for target in [None, Some("cpu")] {
        let out = tmp.path().join(target.unwrap_or("interp"));
        let mut cmd = tessera();
        cmd.args(["run", &format!("{dir}/model.onnx")]);
        for i in inputs {
            cmd.args(["--input", &format!("{i}={dir}/input_{i}.npy")]);
        }
        if let Some(t) = target {
            cmd.args(["--target", t]);
        }
        ok(cmd.arg("-o").arg(&out));
        for o in outputs {
            let want = tessera::npy::read(&repo().join(&dir).join(format!("output_{o}.npy")))
                .expect("reference");
            let got = tessera::npy::read(&out.join(format!("{o}.npy"))).expect("output");
            let d = max_diff(&got, &want);
            assert!(
                d < 1e-5,
                "{name}: {o} on {target:?}: max |diff| {d} against onnxruntime"
            );
        }
    }
}

#[test]
fn a_loop_slicing_at_its_iteration_number_runs_interpreted_and_compiled() {
    runs_like_onnxruntime("loop_window", &["x"], &["acc", "sums"]);
}

#[test]
fn a_batched_opset_8_scan_runs_interpreted_and_compiled() {
    runs_like_onnxruntime(
        "scan8_batched",
        &["s0", "p0", "a", "b"],
        &["s", "p", "diffs", "prods"],
    );
}
