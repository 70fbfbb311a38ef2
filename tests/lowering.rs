//! The end-to-end proof: every ONNX test model, compiled as `tessera compile` does (default
//! pass pipeline, placement, scheduling, transfers) for every built-in target, lowered to
//! one MLIR module per device, JIT-compiled on this CPU and run step by step as the manifest
//! says, computes what onnxruntime computed (the models' reference outputs, with their
//! tolerances). One test per target, so they run in parallel.

use std::path::Path;

use tessera::commands::compile::{DEFAULT_PIPELINE, PlaceSettings, compile};
use tessera::commands::emit::lower_graph;
use tessera::instrument::PassFlags;
use tessera_ir::Tensor;

mod common;

use common::{onnx_models, root};

/// The reference outputs of a test model, with `(rtol, atol)`.
fn reference(name: &str) -> Vec<(Tensor, f64, f64)> {
    let dir = root().join("testdata/models/onnx").join(name);
    let io: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("io.json")).expect("io.json"))
            .expect("io.json parses");
    io["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|o| {
            let t = tessera::npy::read(&dir.join(o["file"].as_str().expect("file")))
                .expect("reference npy");
            (
                t,
                o["rtol"].as_f64().unwrap_or(1e-3),
                o["atol"].as_f64().unwrap_or(1e-5),
            )
        })
        .collect()
}

fn close(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.shape() != want.shape() || got.elem() != want.elem() {
        return Err(format!("got {}, want {}", got.ty(), want.ty()));
    }
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let mut worst = (0.0f64, 0usize);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let err = (a - b).abs();
        let ok = err <= atol + rtol * b.abs() || (a.is_nan() && b.is_nan());
        if !ok && err > worst.0 {
            worst = (err, i);
        }
    }
    if worst.0 > 0.0 {
        return Err(format!(
            "element {} is {} but onnxruntime gives {} (|diff| {:e}, rtol {rtol}, atol {atol})",
            worst.1, g[worst.1], w[worst.1], worst.0
        ));
    }
    Ok(())
}

fn register_passes() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        tessera_eqsat::register()
            .and_then(|()| tessera_place::pass::register())
            .and_then(|()| tessera_shard::register())
            .expect("register the passes the binary registers");
    });
}

fn models_on(target_name: &str) {
    register_passes();
    let target = tessera_targets::resolve(target_name, &[]).expect("built-in target");
    tessera_targets::set_default_target(Some(target.clone()));
    let pipeline = tessera_passes::Pipeline::parse(DEFAULT_PIPELINE).expect("default pipeline");
    let mlir = tessera_mlir::Mlir::new();
    let models = onnx_models();
    assert!(models.len() >= 8, "expected the ONNX test corpus");
    for (name, graph, inputs) in &models {
        let what = format!("{name} on {target_name}");
        let origin = Path::new(name);
        let (g, _) = tessera::commands::opt::run_pipeline(
            graph.clone(),
            &pipeline,
            &PassFlags::default(),
            origin,
        )
        .unwrap_or_else(|e| panic!("{what}: passes: {e:#}"));
        let c = compile(g, &*target, None, Some(2), &PlaceSettings::default())
            .unwrap_or_else(|e| panic!("{what}: compile: {e:#}"));
        let program = lower_graph(&c.graph, target.spec(), origin, true)
            .unwrap_or_else(|e| panic!("{what}: {e:#}"));
        let weights = program
            .weight_tensors()
            .unwrap_or_else(|e| panic!("{what}: {}", e.0));
        let runner = tessera_mlir::Runner::new(
            &mlir,
            program.manifest.clone(),
            &program.module_map(),
            weights,
            0,
            tessera_mlir::GpuDevices::OnCpu,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let outputs = runner
            .run(inputs)
            .unwrap_or_else(|e| panic!("{what}: run: {e}"));
        let want = reference(name);
        assert_eq!(outputs.len(), want.len(), "{what}: output count");
        for (i, (got, (w, rtol, atol))) in outputs.iter().zip(&want).enumerate() {
            close(got, w, *rtol, *atol).unwrap_or_else(|e| panic!("{what}: output {i}: {e}"));
        }
        eprintln!(
            "{what}: {} steps on {} devices, matches onnxruntime",
            program.manifest.steps.len(),
            program.manifest.devices.len()
        );
    }
}

macro_rules! target_tests {
    ($($f:ident => $t:literal),* $(,)?) => {
        $(
            #[test]
            fn $f() {
                models_on($t);
            }
        )*
    };
}

target_tests! {
    compiled_models_match_onnxruntime_on_cpu => "cpu",
    compiled_models_match_onnxruntime_on_gpu_8 => "gpu-8",
    compiled_models_match_onnxruntime_on_hetero_cpu_gpu => "hetero-cpu-gpu",
    compiled_models_match_onnxruntime_on_mcm_2x2 => "mcm-2x2",
    compiled_models_match_onnxruntime_on_mcm_4x4 => "mcm-4x4",
    compiled_models_match_onnxruntime_on_mcm_ring4 => "mcm-ring4",
}

#[test]
fn every_builtin_target_has_a_test() {
    let mut names: Vec<String> = tessera_targets::builtin_targets()
        .into_iter()
        .map(|t| t.name)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "cpu",
            "gpu-8",
            "hetero-cpu-gpu",
            "mcm-2x2",
            "mcm-4x4",
            "mcm-ring4"
        ],
        "add a test above for a new built-in target"
    );
}
