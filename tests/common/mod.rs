//! Helpers shared by the binary's tests: the ONNX test models with their sample inputs.

#![allow(dead_code)] // each test binary uses a subset

pub mod cli;

use std::path::{Path, PathBuf};

use tessera_ir::{Graph, Tensor};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The ONNX test models, imported and specialized on their sample inputs, with those inputs.
pub fn onnx_models() -> Vec<(String, Graph, Vec<Tensor>)> {
    let dir = root().join("testdata/models/onnx");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("io.json").is_file())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for m in names {
        let io: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(m.join("io.json")).expect("io.json"))
                .expect("io.json parses");
        let mut options = tessera_onnx::ImportOptions::default();
        let mut inputs = Vec::new();
        for i in io["inputs"].as_array().expect("inputs") {
            let name = i["name"].as_str().expect("input name").to_string();
            let t = tessera::npy::read(&m.join(i["file"].as_str().expect("input file")))
                .expect("input npy");
            options
                .input_shapes
                .insert(name.clone(), t.shape().iter().map(|&d| d as u64).collect());
            options.input_values.insert(name, t.clone());
            inputs.push(t);
        }
        let g = tessera_onnx::import_file(&m.join("model.onnx"), &options)
            .unwrap_or_else(|e| panic!("{}: {e}", m.display()));
        out.push((
            m.file_name().expect("name").to_string_lossy().into_owned(),
            g,
            inputs,
        ));
    }
    out
}
