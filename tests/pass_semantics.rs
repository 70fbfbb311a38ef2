//! Every pass preserves semantics: on each test model (the ONNX corpus and the IR test
//! files), the reference interpreter gives bit-identical outputs before and after each
//! registered pass, and after a whole canonicalization pipeline.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tessera_ir::{Graph, Tensor};
use tessera_passes::{NoInstrumentation, PassManager, Pipeline, registry};

mod common;

use common::{onnx_models, root};

/// The IR test files that run on deterministic pseudo-random inputs (symbols bound to 2).
fn ir_files() -> Vec<(String, Graph, Vec<Tensor>)> {
    let dir = root().join("testdata/ir");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/ir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tir"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let g = tessera_ir::text::load(&f).unwrap_or_else(|e| panic!("{e}"));
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let inputs: Vec<Tensor> = g
            .inputs()
            .iter()
            .map(|&v| {
                let ty = g.ty(v);
                let dims: Vec<usize> = ty
                    .shape
                    .iter()
                    .map(|d| d.as_static().unwrap_or(2) as usize)
                    .collect();
                let n: usize = dims.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        ((seed % 7) as f64) - 2.0
                    })
                    .collect();
                let t = Tensor::F64(
                    ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&dims), vals).expect("shape"),
                );
                let cast = tessera_ir::Op::Cast { to: ty.elem };
                tessera_ir::interp::eval_op(&cast, &[&t])
                    .expect("cast")
                    .remove(0)
            })
            .collect();
        out.push((
            f.file_name().expect("name").to_string_lossy().into_owned(),
            g,
            inputs,
        ));
    }
    out
}

fn same_bits(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.elem() == y.elem()
                && x.shape() == y.shape()
                && x.to_f64_vec()
                    .iter()
                    .zip(y.to_f64_vec())
                    .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
        })
}

#[test]
fn passes_preserve_interpreter_results() {
    let mut pipelines: BTreeMap<String, Pipeline> = BTreeMap::new();
    // `eqsat` reassociates float arithmetic: it has its own test below, within a tolerance
    // (and may be registered by that test in this process).
    // `grad` and `train` change the graph's interface by design (gradients as new outputs;
    // a training step's inputs and outputs): `passes/tests/grad_rules.rs` checks the
    // gradients against finite differences and `tests/train.rs` the steps against PyTorch.
    for p in registry()
        .into_iter()
        .filter(|p| !matches!(p.name, "eqsat" | "grad" | "train"))
    {
        pipelines.insert(
            p.name.to_string(),
            Pipeline::parse(p.name).expect("pass name parses"),
        );
    }
    pipelines.insert(
        "full".into(),
        Pipeline::parse("canonicalize,cse,dce,canonicalize").expect("pipeline"),
    );

    let mut checked = 0;
    let mut failures = Vec::new();
    let models = onnx_models().into_iter().chain(ir_files());
    for (name, graph, inputs) in models {
        let Ok(before) = tessera_ir::interp::run(&graph, &inputs) else {
            // Random inputs can make an IR test file fail at run time (a modulo by zero); the
            // ONNX models must always run.
            assert!(name.ends_with(".tir"), "{name} does not run");
            continue;
        };
        for (pname, pipeline) in &pipelines {
            let mut g = graph.clone();
            if let Err(e) = PassManager::new(pipeline.clone()).run(&mut g, &mut NoInstrumentation) {
                failures.push(format!("{name} / {pname}: {e}"));
                continue;
            }
            match tessera_ir::interp::run(&g, &inputs) {
                Ok(after) if same_bits(&before, &after) => checked += 1,
                Ok(_) => failures.push(format!(
                    "{name} / {pname}: outputs differ after the pipeline"
                )),
                Err(e) => failures.push(format!(
                    "{name} / {pname}: the transformed graph fails to run: {e}"
                )),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked >= 50,
        "only {checked} model/pipeline pairs were checked"
    );
}

/// `got` within `rtol`/`atol` of `want` (NaN matches NaN); integers exactly.
fn close(got: &[Tensor], want: &[Tensor], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err("output count differs".into());
    }
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if g.elem() != w.elem() || g.shape() != w.shape() {
            return Err(format!("output {k}: type differs"));
        }
        let float = w.elem().is_float();
        for (i, (p, q)) in g.to_f64_vec().iter().zip(w.to_f64_vec()).enumerate() {
            let ok = if float {
                *p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= atol + rtol * q.abs()
            } else {
                *p == q
            };
            if !ok {
                return Err(format!("output {k} element {i}: {p} vs {q}"));
            }
        }
    }
    Ok(())
}

/// Equality saturation reassociates and refactors arithmetic, so it is checked against the
/// interpreter's results before the pass within a float tolerance (and exactly for
/// integers), on every test model and IR file, with the cost models of two targets.
#[test]
fn eqsat_preserves_interpreter_results_within_tolerance() {
    tessera_eqsat::register().expect("eqsat registers");
    let mut failures = Vec::new();
    let mut rewritten = 0;
    let models = onnx_models().into_iter().chain(ir_files());
    for (name, graph, inputs) in models {
        let Ok(before) = tessera_ir::interp::run(&graph, &inputs) else {
            continue;
        };
        for target in ["cpu", "mcm-2x2"] {
            let mut g = graph.clone();
            let pipeline = Pipeline::parse(&format!("eqsat{{target={target}}}")).expect("pipeline");
            let report = match PassManager::new(pipeline).run(&mut g, &mut NoInstrumentation) {
                Ok(r) => r,
                Err(e) => {
                    failures.push(format!("{name} ({target}): {e}"));
                    continue;
                }
            };
            if report.runs[0].changed {
                rewritten += 1;
            }
            match tessera_ir::interp::run(&g, &inputs) {
                Ok(after) => {
                    if let Err(e) = close(&after, &before, 1e-4, 1e-5) {
                        failures.push(format!("{name} ({target}): {e}"));
                    }
                }
                Err(e) => failures.push(format!("{name} ({target}): interpreter after eqsat: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        rewritten >= 2,
        "eqsat rewrote only {rewritten} model/target pairs"
    );
}

/// `eqsat` keeps each backward op's link to its forward op (`grad-of`), which placement uses
/// to colocate them, also in a region it rewrites (here the double negation goes and the
/// transpose folds into a `gemm`, which keeps the link).
#[test]
fn eqsat_keeps_backward_links() {
    tessera_eqsat::register().expect("eqsat registers");
    let src = r#"graph @step(%x: f32[4, 4], %w: f32[4, 4]) {
  %h = matmul %x, %w : f32[4, 4] loc("fc")
  %a = neg %h : f32[4, 4]
  %b = neg %a : f32[4, 4]
  %t = transpose %x {perm = [1, 0]} : f32[4, 4] loc("fc") grad-of(%h)
  %d = matmul %t, %b : f32[4, 4] loc("fc") grad-of(%h)
  return %d as "dw"
}
"#;
    let mut g = tessera_ir::text::parse(src, None).expect("parses");
    let pipeline = Pipeline::parse("eqsat{target=cpu}").expect("pipeline");
    let report = PassManager::new(pipeline)
        .run(&mut g, &mut NoInstrumentation)
        .expect("eqsat runs");
    assert!(report.runs[0].changed, "{}", tessera_ir::text::print(&g));
    let text = tessera_ir::text::print(&g);
    assert!(!text.contains("neg"), "{text}");
    let fwd: Vec<_> = g
        .ops()
        .iter()
        .filter(|&&o| g.op(o).grad_of.is_none() && g.op(o).loc.as_deref() == Some("fc"))
        .map(|&o| g.op(o).results[0])
        .collect();
    assert_eq!(fwd.len(), 1, "{text}");
    let linked = g
        .ops()
        .iter()
        .filter(|&&o| g.op(o).grad_of == Some(fwd[0]))
        .count();
    assert_eq!(linked, g.ops().len() - 1, "{text}");
    assert!(linked >= 1, "{text}");
}
