//! Import time and peak memory per model, each import in a fresh process so that its peak
//! resident set (`VmHWM`) is its own. Prints a markdown table.
//!
//! `cargo bench -p tessera-onnx --bench import` measures `testdata/models/onnx/*` and
//! `testdata/models/large/gpt2_small` when present (`make_onnx_models.py --large`); more
//! model files can be given in `TESSERA_BENCH_MODELS` (separated by `:`). Each model is
//! imported with its inputs bound to the sample shapes of its `io.json` (as `tessera run`
//! does) and verified; the time is measured inside the child (process start excluded), best
//! of `TESSERA_BENCH_RUNS` (default 3). Linux only (reads `/proc/self/status`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tessera_onnx::{ImportOptions, import_file};

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The sample input shapes from the `io.json` next to a model, if any.
fn sample_shapes(model: &Path) -> BTreeMap<String, Vec<u64>> {
    let Some(text) = model
        .parent()
        .and_then(|d| std::fs::read_to_string(d.join("io.json")).ok())
    else {
        return BTreeMap::new();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
        return BTreeMap::new();
    };
    json["inputs"]
        .as_array()
        .map(|inputs| {
            inputs
                .iter()
                .filter_map(|i| {
                    let name = i["name"].as_str()?.to_string();
                    let dims = i["sample_shape"]
                        .as_array()?
                        .iter()
                        .map(|d| d.as_u64())
                        .collect::<Option<Vec<u64>>>()?;
                    Some((name, dims))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The child: import one model, print `seconds vmhwm_kib ops consts` or `error ...`.
fn child(model: &Path) {
    let options = ImportOptions {
        input_shapes: sample_shapes(model),
        ..ImportOptions::default()
    };
    let start = Instant::now();
    match import_file(model, &options) {
        Ok(g) => {
            let verified = tessera_ir::verify::verify(&g).is_ok();
            let secs = start.elapsed().as_secs_f64();
            println!(
                "{secs} {} {} {} {verified}",
                vm_hwm_kib(),
                g.ops().len(),
                g.num_consts()
            );
        }
        Err(e) => println!("error {}", e.to_string().replace('\n', " ")),
    }
}

fn file_bytes(model: &Path) -> u64 {
    let mut n = std::fs::metadata(model).map_or(0, |m| m.len());
    let data = model.with_extension("onnx.data");
    n += std::fs::metadata(data).map_or(0, |m| m.len());
    n
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(Path::new(&args[i + 1]));
        return;
    }
    if args.iter().any(|a| a == "--baseline") {
        println!("{}", vm_hwm_kib());
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf();
    let mut models: Vec<PathBuf> = std::fs::read_dir(root.join("testdata/models/onnx"))
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path().join("model.onnx"))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    models.sort();
    let large = root.join("testdata/models/large/gpt2_small/model.onnx");
    if large.exists() {
        models.push(large);
    }
    if let Ok(extra) = std::env::var("TESSERA_BENCH_MODELS") {
        models.extend(
            extra
                .split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        );
    }
    let runs: usize = std::env::var("TESSERA_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let exe = std::env::current_exe().expect("current exe");
    let baseline = Command::new(&exe)
        .arg("--baseline")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(0);

    println!("| model | files (MB) | IR ops | constants | import + verify (ms) | peak RSS (MiB) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for model in &models {
        let name = model.parent().and_then(|p| p.file_name()).map_or_else(
            || model.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let mut best: Option<(f64, u64, String, String)> = None;
        let mut error = None;
        for _ in 0..runs {
            let out = Command::new(&exe)
                .arg("--child")
                .arg(model)
                .output()
                .expect("run the child");
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let f: Vec<&str> = text.split_whitespace().collect();
            if f.first() == Some(&"error") || f.len() < 5 || !out.status.success() {
                error = Some(if text.is_empty() {
                    format!(
                        "child failed: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )
                } else {
                    text
                });
                break;
            }
            let secs: f64 = f[0].parse().unwrap_or(f64::NAN);
            let hwm: u64 = f[1].parse().unwrap_or(0);
            let ops = if f[4] == "true" {
                f[2].to_string()
            } else {
                format!("{} (verifier errors)", f[2])
            };
            if best.as_ref().is_none_or(|b| secs < b.0) {
                best = Some((secs, hwm, ops, f[3].to_string()));
            }
        }
        let mb = file_bytes(model) as f64 / 1e6;
        match (best, error) {
            (Some((secs, hwm, ops, consts)), None) => println!(
                "| {name} | {mb:.1} | {ops} | {consts} | {:.1} | {:.1} |",
                secs * 1e3,
                hwm as f64 / 1024.0
            ),
            (_, e) => println!(
                "| {name} | {mb:.1} | - | - | - | {} |",
                e.unwrap_or_default().chars().take(120).collect::<String>()
            ),
        }
    }
    println!(
        "\npeak RSS of the bench process without importing: {:.1} MiB; best of {runs} runs",
        baseline as f64 / 1024.0
    );
}
