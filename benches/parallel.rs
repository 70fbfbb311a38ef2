//! Parallel training benchmark: the simulated step of tessera's plan for a training step
//! against the plans of the systems it is measured against, for GPT-2 small and BERT-base on
//! `gpu-8`, `hetero-cpu-gpu`, the two-node A100 + V100 target of
//! `testdata/targets/a100-v100.toml` and `mcm-4x4`.
//!
//! `cargo bench -p tessera --bench parallel [-- --only MODEL,... --targets T,...]` prints a
//! markdown table (the README's "Parallel training" section holds a run); the models come
//! from `benches/train/make_parallel_models.py`. Every value is the simulator's step (the
//! steady-state period of a stream of steps, each waiting for the state the last one wrote),
//! of the placed step with its collectives, DDP's gradient buckets and the pipeline schedule
//! the simulator finds best (`--pipeline auto`). Columns:
//! - `DDP`: PyTorch DDP, every op on the largest group of alike accelerators, split by
//!   batch where it can be (else replicated), gradients all-reduced in 25 MB buckets; one
//!   microbatch; the optimizer state whole on every replica (`--zero-stage 0`);
//! - `Megatron PP`: Megatron-LM's uniform pipeline, an equal number of layers (anchors: a
//!   forward op with its backward ops) per stage over every accelerator, a stage one device
//!   or one group of a tiling (each op there by its cheapest option: data or tensor
//!   parallel), best over stage sizes and microbatch counts 1, 2, 4, 8;
//! - `PipeDream`: PipeDream's planner, stages balanced by work as if every stage ran at the
//!   first stage's speed (it assumes identical devices), the same stage sizes and counts
//!   (both with the optimizer state split where the update is, ZeRO-1, as tessera's plans:
//!   Megatron-LM's distributed optimizer);
//! - `tessera`: `compile --train --microbatches auto` (each count compiled with `--split auto`
//!   and the simulator's choice kept), the microbatch count it chose, its lower bound (of the
//!   chosen count's problem: the least any plan of it can reach), the gap and the planner's
//!   time (every count's compile).
//!
//! A baseline plan that does not fit the devices' memory reads `over memory`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use tessera::commands::compile::{
    CompileRequest, PipelineMode, PlaceSettings, StepSettings, compile, realize, training_step,
};
use tessera::commands::{InputShape, load_model_for};
use tessera_ir::Graph;
use tessera_place::alternatives::REPLICATED;
use tessera_place::apply::{SplitMode, split_problems};
use tessera_place::build::{BuildOptions, Built, build_with};
use tessera_place::eval::violation;
use tessera_place::strategy::stages::{Cut, staged};
use tessera_place::{Instance, Objective};
use tessera_targets::{CostModel, SimReport, Target, TargetSpec};

/// The microbatch counts tried.
const COUNTS: [u64; 4] = [1, 2, 4, 8];

#[derive(Parser)]
struct TrainCli {
    #[command(flatten)]
    train: tessera::cli::TrainArgs,
}

/// A model of the benchmark: name, file, input shape.
struct Model {
    name: &'static str,
    file: &'static str,
    input: &'static str,
    dims: [u64; 2],
}

const MODELS: [Model; 2] = [
    Model {
        name: "GPT-2 small, 8x64",
        file: "testdata/models/large/train/gpt2_small.onnx",
        input: "input_ids",
        dims: [8, 64],
    },
    Model {
        name: "BERT-base, 8x128",
        file: "testdata/models/large/train/bert_base.onnx",
        input: "input_ids",
        dims: [8, 128],
    },
];

fn ms(v: Option<f64>) -> String {
    match v {
        Some(v) => format!("{:.2} ms", v * 1e3),
        None => "over memory".into(),
    }
}

/// A step's simulated time when it fits every device.
fn step(r: &SimReport) -> Option<f64> {
    r.devices
        .iter()
        .all(|d| d.peak_memory <= d.capacity)
        .then_some(r.period)
}

fn settings(strategy: &str) -> PlaceSettings<'_> {
    PlaceSettings {
        strategy,
        objective: Objective::Throughput,
        split: SplitMode::Auto,
        step: StepSettings {
            pipeline: PipelineMode::Auto,
            ..StepSettings::default()
        },
        ..PlaceSettings::default()
    }
}

/// The simulated step of `assign` on problem `built`/`inst` of `step_graph`, when it fits.
fn simulate(
    step_graph: &Graph,
    built: &Built,
    inst: &Instance,
    assign: &[usize],
    cost: &CostModel<'_>,
    zero: bool,
) -> Option<f64> {
    violation(inst, assign).is_none().then_some(())?;
    let step_settings = StepSettings {
        shard_state: zero,
        ..settings("auto").step
    };
    let (_, report, _, _) =
        realize(step_graph, built, inst, assign, cost, None, step_settings).ok()?;
    step(&report)
}

fn min(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The baselines of one step graph: DDP (one microbatch only), Megatron's uniform pipeline
/// and PipeDream's, each the best over stage sizes.
fn baselines(step_graph: &Graph, cost: &CostModel<'_>, ddp: bool) -> [Option<f64>; 3] {
    let mut out = [None; 3];
    let Ok(full_built) = build_with(step_graph, cost, &BuildOptions { splits: true }) else {
        return out;
    };
    let Ok(full) = Instance::new(full_built.problem.clone()) else {
        return out;
    };
    let restricted = |p: tessera_place::Problem| -> Option<(Built, Instance)> {
        let b = Built {
            problem: p.clone(),
            graph_ops: full_built.graph_ops.clone(),
            device_index: full_built.device_index.clone(),
        };
        Some((b, Instance::new(p).ok()?))
    };
    if ddp {
        // Split by batch, or replicated (every replica runs it whole).
        let batch = vec!["batch".to_string(), REPLICATED.to_string()];
        let largest = split_problems(&full, SplitMode::Auto, &batch, false)
            .into_iter()
            .filter_map(restricted)
            .filter(|(_, i)| i.problem.groups.len() == 1)
            .max_by_key(|(_, i)| i.place_devices[i.d].len());
        if let Some((b, inst)) = largest
            && let Some(s) = staged(&inst, &[inst.d], Cut::Uniform)
        {
            out[0] = simulate(step_graph, &b, &inst, &s.solution.assign, cost, false);
        }
    }
    // Stages of one device each: the accelerators of the most numerous kind, in order.
    let spec = cost.spec();
    let mut kinds: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (k, d) in spec.devices.iter().enumerate() {
        if d.name != spec.host {
            kinds.entry(d.kind.as_str()).or_default().push(k);
        }
    }
    let mut pipelines: Vec<(Built, Instance, Vec<usize>)> = Vec::new();
    if let Some(devices) = kinds.values().max_by_key(|v| v.len())
        && devices.len() >= 2
    {
        pipelines.push((full_built.clone(), full.clone(), devices.clone()));
    }
    // Stages of one group each: every tiling, all its groups in order.
    for p in split_problems(&full, SplitMode::Auto, &[], true) {
        if p.groups.len() < 2 {
            continue;
        }
        if let Some((b, inst)) = restricted(p) {
            let chain = (0..inst.problem.groups.len()).map(|g| inst.d + g).collect();
            pipelines.push((b, inst, chain));
        }
    }
    for (b, inst, chain) in &pipelines {
        for (slot, cut) in [(1, Cut::Uniform), (2, Cut::Homogeneous)] {
            if let Some(s) = staged(inst, chain, cut) {
                out[slot] = min(
                    out[slot],
                    simulate(step_graph, b, inst, &s.solution.assign, cost, true),
                );
            }
        }
    }
    out
}

fn row(model: &Model, spec: &TargetSpec, train: &tessera::cli::TrainArgs) -> String {
    let target: Arc<dyn Target> = Arc::new(spec.clone());
    let cost = CostModel::new(target.as_ref(), None);
    let path = PathBuf::from(model.file);
    let shapes = [InputShape {
        name: model.input.to_string(),
        dims: model.dims.to_vec(),
    }];
    let graph = match load_model_for(&path, &shapes, true) {
        Ok(g) => g,
        Err(e) => return format!("| {} | {} | {e:#} |", model.name, spec.name),
    };
    let flags = tessera::instrument::PassFlags::default();
    let req = CompileRequest {
        model: &path,
        target: &spec.name,
        target_path: &[],
        passes: tessera::commands::compile::DEFAULT_PIPELINE,
        calibration: None,
        samples: None,
        output: None,
        shapes: &shapes,
        flags: &flags,
        strategy: "auto",
        objective: Objective::Throughput,
        emit_problem: None,
        split_alternatives: false,
        split: SplitMode::Auto,
        split_axes: &[],
        emits: &[],
        dot: None,
        train,
    };
    tessera_targets::set_default_target(Some(target.clone()));
    let mut best: [Option<f64>; 3] = [None; 3];
    // tessera: (step, count, bound).
    let mut ours: Option<(f64, u64, f64)> = None;
    let mut planner = 0.0;
    let mut failure: Option<String> = None;
    for m in COUNTS {
        if !model.dims[0].is_multiple_of(m) {
            continue;
        }
        let step_graph = match training_step(&req, m, graph.clone()) {
            Ok(g) => g,
            Err(e) => {
                failure.get_or_insert(format!("{e:#}"));
                continue;
            }
        };
        let clock = Instant::now();
        let compiled = compile(
            step_graph.clone(),
            target.as_ref(),
            None,
            None,
            &settings("auto"),
        );
        planner += clock.elapsed().as_secs_f64();
        match compiled {
            Ok(c) => {
                if let Some(t) = step(&c.report)
                    && ours.is_none_or(|(b, _, _)| t < b * (1.0 - 1e-9))
                {
                    ours = Some((t, m, c.plan.lower_bound.step()));
                }
            }
            Err(e) => {
                failure.get_or_insert(format!("{e:#}"));
            }
        }
        let b = baselines(&step_graph, &cost, m == 1);
        for i in 0..3 {
            best[i] = min(best[i], b[i]);
        }
    }
    let Some((t, m, bound)) = ours else {
        return format!(
            "| {} | {} | {} | {} | {} | none: {} | | | | | {planner:.1} |",
            model.name,
            spec.name,
            ms(best[0]),
            ms(best[1]),
            ms(best[2]),
            failure.unwrap_or_default().replace('|', "/")
        );
    };
    let beats = best.iter().flatten().all(|&b| t <= b * (1.0 + 1e-9));
    format!(
        "| {} | {} | {} | {} | {} | {} | {m} | {} | {:.1}% | {} | {planner:.1} |",
        model.name,
        spec.name,
        ms(best[0]),
        ms(best[1]),
        ms(best[2]),
        ms(Some(t)),
        ms(Some(bound)),
        (t - bound).max(0.0) / t * 100.0,
        if beats { "yes" } else { "no" },
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let list = |flag: &str| -> Option<Vec<String>> {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(|s| s.split(',').map(str::to_string).collect())
    };
    let only = list("--only");
    let names = list("--targets").unwrap_or_else(|| {
        ["gpu-8", "hetero-cpu-gpu", "a100-v100", "mcm-4x4"]
            .map(String::from)
            .to_vec()
    });
    // The passes `tessera`'s command line registers (the default pipeline's eqsat among them).
    tessera_eqsat::register()
        .and_then(|()| tessera_place::pass::register())
        .and_then(|()| tessera_shard::register())
        .expect("registering the passes");
    let train = TrainCli::try_parse_from([
        "bench",
        "--train",
        "--labels",
        "labels",
        "--optimizer",
        "adamw{lr=0.0001}",
    ])
    .expect("training options")
    .train;
    let targets: Vec<TargetSpec> = names
        .iter()
        .map(|n| {
            if n == "a100-v100" {
                tessera_targets::load_file(std::path::Path::new("testdata/targets/a100-v100.toml"))
                    .expect("testdata/targets/a100-v100.toml")
            } else {
                tessera_targets::builtin_target(n)
                    .unwrap_or_else(|| panic!("no built-in target {n}"))
                    .expect("built-in target")
            }
        })
        .collect();
    println!(
        "| model | target | DDP | Megatron PP | PipeDream | tessera | microbatches | lower bound | gap | tessera at least as fast | planner (s) |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |");
    for model in &MODELS {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| model.file.contains(n.as_str())))
        {
            continue;
        }
        if !std::path::Path::new(model.file).exists() {
            println!(
                "| {} | | missing: run benches/train/make_parallel_models.py |",
                model.name
            );
            continue;
        }
        for spec in &targets {
            println!("{}", row(model, spec, &train));
        }
    }
}
