//! The models the placement benchmarks run on (shared by `placement` and `splitting`): the
//! ONNX test corpus (`testdata/models/onnx`), the large models of `make_onnx_models.py
//! --large` or `--eqsat-bench` when present (`testdata/models/large`), and the ImageNet
//! topologies the `onnx` wheel ships as `backend/test/data/light/light_*.onnx` (found through
//! `python3 -c "import onnx"`, or `ONNX_LIGHT_DIR`). Each is imported with its sample shapes
//! and run through `canonicalize,cse,dce` (no eqsat, so only placement differs).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tessera_ir::Graph;
use tessera_passes::{NoInstrumentation, PassManager, Pipeline};

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

pub fn import(path: &Path, shapes: BTreeMap<String, Vec<u64>>) -> Option<Graph> {
    let options = tessera_onnx::ImportOptions {
        input_shapes: shapes,
        ..Default::default()
    };
    let g = tessera_onnx::import_file(path, &options).ok()?;
    let pipeline = Pipeline::parse("canonicalize,cse,dce").ok()?;
    let mut g = g;
    PassManager::new(pipeline)
        .run(&mut g, &mut NoInstrumentation)
        .ok()?;
    Some(g)
}

pub fn io_shapes(dir: &Path) -> Option<BTreeMap<String, Vec<u64>>> {
    let io: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("io.json")).ok()?).ok()?;
    let mut shapes = BTreeMap::new();
    for i in io["inputs"].as_array()? {
        let dims: Vec<u64> = i["sample_shape"]
            .as_array()?
            .iter()
            .map(|d| d.as_u64())
            .collect::<Option<_>>()?;
        shapes.insert(i["name"].as_str()?.to_string(), dims);
    }
    Some(shapes)
}

pub fn light_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("ONNX_LIGHT_DIR") {
        return Some(PathBuf::from(d));
    }
    let out = Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into()))
        .args([
            "-c",
            "import onnx, os; print(os.path.dirname(onnx.__file__))",
        ])
        .output()
        .ok()?;
    let dir =
        PathBuf::from(String::from_utf8(out.stdout).ok()?.trim()).join("backend/test/data/light");
    dir.is_dir().then_some(dir)
}

pub fn models() -> Vec<(String, Graph)> {
    let mut out = Vec::new();
    for sub in ["testdata/models/onnx", "testdata/models/large"] {
        let Ok(read) = std::fs::read_dir(repo().join(sub)) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = read
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("io.json").is_file())
            .collect();
        dirs.sort();
        for d in dirs {
            let name = d
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(g) = io_shapes(&d).and_then(|s| import(&d.join("model.onnx"), s)) {
                out.push((name, g));
            }
        }
    }
    if let Some(dir) = light_dir()
        && let Ok(read) = std::fs::read_dir(&dir)
    {
        let mut files: Vec<PathBuf> = read
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "onnx"))
            .collect();
        files.sort();
        for f in files {
            let name = f
                .file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(g) = import(&f, BTreeMap::new()) {
                out.push((name, g));
            }
        }
    }
    out
}
