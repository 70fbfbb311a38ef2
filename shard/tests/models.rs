//! The pass on the ONNX test models (`testdata/models/onnx/*`, imported and specialized on
//! their sample inputs): with every strategy and two targets, the output verifies and the
//! reference interpreter gives bit-identical outputs before and after.

mod common;

use std::path::{Path, PathBuf};

use common::{same_bits, shard};
use tessera_ir::{Graph, Tensor, interp};
use tessera_shard::Strategy;

/// Reads an `.npy` file of f32, i64 or bool.
fn read_npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
    let dims = ndarray::IxDyn(&shape);
    let descr = npy.dtype().descr();
    match descr.as_str() {
        "'<f4'" => Tensor::F32(
            ndarray::ArrayD::from_shape_vec(dims, npy.into_vec::<f32>().expect("f32 data"))
                .expect("shape"),
        ),
        "'<i8'" => Tensor::I64(
            ndarray::ArrayD::from_shape_vec(dims, npy.into_vec::<i64>().expect("i64 data"))
                .expect("shape"),
        ),
        "'|b1'" => Tensor::Bool(
            ndarray::ArrayD::from_shape_vec(dims, npy.into_vec::<bool>().expect("bool data"))
                .expect("shape"),
        ),
        other => panic!("{}: unsupported dtype {other}", path.display()),
    }
}

fn models() -> Vec<(String, Graph, Vec<Tensor>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/models/onnx");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("io.json").is_file())
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for m in dirs {
        let io: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(m.join("io.json")).expect("io.json"))
                .expect("io.json parses");
        let mut options = tessera_onnx::ImportOptions::default();
        let mut inputs = Vec::new();
        for i in io["inputs"].as_array().expect("inputs") {
            let name = i["name"].as_str().expect("input name").to_string();
            let t = read_npy(&m.join(i["file"].as_str().expect("input file")));
            options
                .input_shapes
                .insert(name.clone(), t.shape().iter().map(|&d| d as u64).collect());
            options.input_values.insert(name, t.clone());
            inputs.push(t);
        }
        let g = tessera_onnx::import_file(&m.join("model.onnx"), &options)
            .unwrap_or_else(|e| panic!("{}: {e}", m.display()));
        let name = m.file_name().expect("name").to_string_lossy().into_owned();
        out.push((name, g, inputs));
    }
    out
}

#[test]
fn every_model_keeps_its_results_and_verifies() {
    let targets = ["mcm-2x2", "gpu-8"];
    let models = models();
    assert!(models.len() >= 8, "only {} models", models.len());
    let mut failures = Vec::new();
    let mut changed = 0;
    for (name, graph, inputs) in &models {
        let want = interp::run(graph, inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for target_name in targets {
            let target = tessera_targets::resolve(target_name, &[]).expect("built-in target");
            for strategy in [Strategy::Auto, Strategy::Tensor, Strategy::Data] {
                let mut g = graph.clone();
                let (did, _) = shard(&mut g, &*target, &[], strategy);
                let at = format!("{name} on {target_name} with {strategy:?}");
                if let Err(es) = tessera_ir::verify::verify(&g) {
                    failures.push(format!("{at}: does not verify: {}", es[0]));
                    continue;
                }
                match interp::run(&g, inputs) {
                    Ok(got) if same_bits(&want, &got) => {}
                    Ok(_) => failures.push(format!("{at}: outputs changed")),
                    Err(e) => failures.push(format!("{at}: {e}")),
                }
                changed += usize::from(did);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The forced strategies split something in several models.
    assert!(changed >= 4, "only {changed} runs changed a model");
}
