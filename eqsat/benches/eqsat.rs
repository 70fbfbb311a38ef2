//! Equality saturation on the test models and the TENSAT model families (BERT, ResNeXt-50,
//! Inception-v3, VGG-19; `make_onnx_models.py --eqsat-bench`, git-ignored, skipped when
//! absent): modelled cost before and after for two targets, e-graph size, rules applied,
//! time. The README's table comes from here.
//!
//! `cargo bench -p tessera-eqsat --bench eqsat`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tessera_eqsat::ir::Graph;
use tessera_eqsat::{Settings, run_eqsat};
use tessera_passes::Statistics;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Imports a model with its inputs bound to the sample shapes of its `io.json`.
fn import(dir: &Path) -> Option<Graph> {
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
    let options = tessera_onnx::ImportOptions {
        input_shapes: shapes,
        ..Default::default()
    };
    tessera_onnx::import_file(&dir.join("model.onnx"), &options).ok()
}

fn settings(device: &str) -> Settings {
    Settings {
        target: String::new(),
        device: device.to_string(),
        iter_limit: 16,
        node_limit: 20_000,
        time_limit: Duration::from_secs(2),
        region_ops: 256,
        rules: None,
        explain: false,
        fold_limit: 4096,
        exact_nodes: 300,
    }
}

fn main() {
    let mut models: Vec<(String, PathBuf)> = Vec::new();
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
            models.push((name, d));
        }
    }
    println!(
        "| model | ops | target (device) | cost before (us) | cost after (us) | change | regions | e-nodes | rules applied | stop | exact better | time (s) |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    for (name, dir) in models {
        let Some(graph) = import(&dir) else {
            println!("| {name} | - | import failed | | | | | | | | | |");
            continue;
        };
        let ops = graph.ops().len();
        for (target, device) in [("gpu-8", "gpu0"), ("mcm-2x2", "chip0")] {
            let t = tessera_targets::lookup(target, &[]).expect("built-in");
            let mut g = graph.clone();
            let mut stats = Statistics::default();
            let start = Instant::now();
            let result = run_eqsat(&mut g, &t, &settings(device), &mut stats);
            let secs = start.elapsed().as_secs_f64();
            if let Err(e) = result {
                println!("| {name} | {ops} | {target} ({device}) | error: {e} | | | | | | | | |");
                continue;
            }
            let (before, after) = (
                stats.get("cost-before-ns") as f64 / 1e3,
                stats.get("cost-after-ns") as f64 / 1e3,
            );
            let stop: Vec<String> = stats
                .entries()
                .iter()
                .filter(|(n, _, v)| n.starts_with("stop-") && *v > 0)
                .map(|(n, _, v)| format!("{} {v}", n.trim_start_matches("stop-")))
                .collect();
            println!(
                "| {name} | {ops} | {target} ({device}) | {before:.1} | {after:.1} | {:+.1}% | {} | {} | {} | {} | {} | {secs:.2} |",
                if before > 0.0 {
                    (after - before) / before * 100.0
                } else {
                    0.0
                },
                stats.get("regions"),
                stats.get("egraph-nodes"),
                stats.get("rules-applied"),
                stop.join(", "),
                stats.get("exact-better"),
            );
        }
    }
}
