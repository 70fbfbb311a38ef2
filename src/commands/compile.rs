//! `tessera compile`: load a model, run the pass pipeline, place it on a target, simulate it,
//! and print (or write) the result.
//!
//! Placement: ops that carry a `device("...")` annotation are pinned there; the others are
//! placed by `tessera_place` (the `--strategy` for the `--objective`), then each device's ops
//! are ordered by the `schedule` pass's rule, and the result is simulated. With `--split auto`
//! (the default) or `force`, ops may also run split over one group of alike devices: the plan
//! is then applied to the graph as a device mesh with its collectives
//! ([`tessera_place::apply`]) before it is simulated, and the simulator chooses between the
//! best plans with and without splits. Split plans are searched on the graph as it came and,
//! when it has fused projections (a fused QKV), on the graph after `unfuse-split`, whose
//! pieces split by columns and feed attention split by heads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tessera_ir::{Graph, OpId, text};
use tessera_passes::Pipeline;
use tessera_place::alternatives::REPLICATED;
use tessera_place::apply::{SplitMode, apply_plan, split_problems};
use tessera_place::build::Built;
use tessera_place::pass::{apply_order, insert_transfers, rank_order};
use tessera_place::plan::{plan_of, records};
use tessera_place::strategy::{Ranked, SolveOptions};
use tessera_place::{Instance, Objective, Plan, lower_bound};
use tessera_targets::{
    Calibration, CostModel, SimOptions, SimReport, Target, placement_from_graph, simulate,
};

use crate::cli::{AUTO_MICROBATCHES, Microbatches};
use crate::instrument::PassFlags;

/// The pipeline `tessera compile` runs when `--passes` is not given.
pub const DEFAULT_PIPELINE: &str = "canonicalize,cse,eqsat,dce";

/// What `tessera compile` was asked to do.
pub struct CompileRequest<'a> {
    /// The model (.tir or .onnx).
    pub model: &'a Path,
    /// The target's name or FILE.toml.
    pub target: &'a str,
    /// `--target-path` directories.
    pub target_path: &'a [PathBuf],
    /// The pass pipeline.
    pub passes: &'a str,
    /// A calibration file of measured op times.
    pub calibration: Option<&'a Path>,
    /// Samples in the simulated stream (`None`: as many as its steady state needs).
    pub samples: Option<usize>,
    /// Output directory.
    pub output: Option<&'a Path>,
    /// `--input-shape` bindings.
    pub shapes: &'a [super::InputShape],
    /// Instrumentation flags for the pipeline.
    pub flags: &'a PassFlags,
    /// The placement strategy.
    pub strategy: &'a str,
    /// The placement objective.
    pub objective: Objective,
    /// Write the placement problem here (JSON) before solving it.
    pub emit_problem: Option<&'a Path>,
    /// The written problem also offers split alternatives.
    pub split_alternatives: bool,
    /// Whether the plan may split ops over a device group (`--split`).
    pub split: SplitMode,
    /// Only these split axes (`--split-axes`; empty: every axis).
    pub split_axes: &'a [String],
    /// Further outputs (with `output`).
    pub emits: &'a [super::emit::Emit],
    /// Write the placed graph as Graphviz DOT here (devices as clusters).
    pub dot: Option<&'a Path>,
    /// The training options (`--train`: compile the training step).
    pub train: &'a crate::cli::TrainArgs,
}

/// A compiled model: the placed graph and its simulation.
pub struct Compiled {
    /// The graph with every op placed.
    pub graph: Graph,
    /// What placement did, in words.
    pub placement: String,
    /// The placement plan.
    pub plan: Plan,
    /// The simulation of the placed graph.
    pub report: SimReport,
    /// The placement problem's name of each op the problem has (the names `plan.json` and
    /// its explanations use), by op.
    pub problem_names: BTreeMap<OpId, String>,
    /// What the simulator's timeline says about the transfers and the period.
    pub notes: crate::report::analysis::SimNotes,
    /// A microbatched step's pipeline schedule and the alternatives simulated.
    pub pipeline: Option<PipelineChoice>,
}

/// Runs `tessera compile`.
pub fn run(req: &CompileRequest<'_>) -> Result<()> {
    let target = super::targets::resolve(req.target, req.target_path).context("--target")?;
    let calibration = match req.calibration {
        Some(path) => {
            let c = Calibration::load(path)?;
            c.check(target.spec())?;
            Some(c)
        }
        None => None,
    };
    let mut stages = Vec::new();
    let clock = Instant::now();
    let graph = super::load_model_for(req.model, req.shapes, req.train.train)?;
    stages.push(stage("import and verify", clock));
    let inputs: Vec<(String, tessera_ir::TensorType)> = graph
        .inputs()
        .iter()
        .map(|&v| {
            let name = graph.value(v).name.clone().unwrap_or_else(|| v.to_string());
            (name, graph.ty(v).clone())
        })
        .collect();
    compile_loaded(req, target, calibration, graph, stages)
        .map_err(|e| super::with_unbound_hint(e, &inputs))
}

/// `tessera compile` once the model is loaded.
fn compile_loaded(
    req: &CompileRequest<'_>,
    target: std::sync::Arc<dyn Target>,
    calibration: Option<Calibration>,
    graph: Graph,
    mut stages: Vec<crate::report::StageTiming>,
) -> Result<()> {
    tessera_targets::set_default_target(Some(target.clone()));
    // `--microbatches auto`: the step placed and simulated with each count, the best kept.
    let (microbatches, auto_line) = match req.train.microbatches {
        Microbatches::Count(m) => (m, None),
        Microbatches::Auto if req.train.train => {
            let (m, line) = choose_microbatches(req, &*target, calibration.as_ref(), &graph)?;
            (m, Some(line))
        }
        Microbatches::Auto => (1, None),
    };
    let clock = Instant::now();
    let (graph, passes, n_passes) = step_graph(req, microbatches, graph, req.flags)?;
    stages.push(stage("pass pipeline", clock));
    let clock = Instant::now();
    let settings = place_settings(req, Some(n_passes));
    let compiled = compile(
        graph,
        &*target,
        calibration.as_ref(),
        req.samples,
        &settings,
    )
    .with_context(|| format!("{}: compiling for {}", req.model.display(), req.target))?;
    stages.push(stage("placement and simulation", clock));
    if req.flags.dump_pass_pipeline {
        eprint!(
            "{}",
            super::emit::pipelines_text(&compiled.graph, &*target)?
        );
    }
    let mut summary = summary(req.model, &*target, &compiled);
    if let Some(line) = auto_line {
        // After the first line (what was compiled for which target).
        let at = summary.find('\n').map_or(summary.len(), |i| i + 1);
        summary.insert_str(at, &line);
    }
    if req.flags.explain {
        // Why each op was split, as `tessera explain plan.json --op NAME` says it.
        let mut s = String::new();
        let split: std::collections::BTreeSet<&str> = compiled
            .plan
            .assignment
            .iter()
            .filter(|a| a.split.is_some())
            .map(|a| a.op.as_str())
            .collect();
        for e in compiled
            .plan
            .explanations
            .iter()
            .filter(|e| split.contains(e.op.as_str()))
        {
            s.push_str(&format!("//   {}: {} ({})\n", e.op, e.reason, e.constraint));
        }
        if !s.is_empty() {
            eprint!("// placement explained (split ops):\n{s}");
        }
    }
    if let Some(dot) = req.dot {
        super::write_atomically(dot, text::to_dot(&compiled.graph).as_bytes())?;
    }
    if req.output.is_none() && !req.emits.is_empty() {
        bail!("--emit writes files into the output directory: give -o DIR");
    }
    if let Some(final_dir) = req.output {
        // Written into a fresh sibling and swapped into place at the end (see `outdir`).
        let out = super::outdir::OutputDir::create(final_dir)?;
        let dir = out.path();
        let clock = Instant::now();
        let written = super::emit::write(
            dir,
            final_dir,
            &compiled.graph,
            &*target,
            req.model,
            req.emits,
            req.flags,
        )?;
        // Devices lowered by their target's own pipeline, with the artifacts written, and
        // fallbacks to the portable loops: never silent.
        for note in &written.notes {
            summary.push_str(note);
            summary.push('\n');
        }
        stages.push(stage("lowering to MLIR", clock));
        if req.train.train && tessera_onnx::is_onnx_path(req.model) {
            // `tessera train DIR` writes the trained model from it.
            let src = std::fs::read(req.model)
                .with_context(|| format!("cannot read {}", req.model.display()))?;
            super::write_atomically(&dir.join(super::train::SOURCE_MODEL), &src)?;
        }
        let placed = dir.join("placed.tir");
        // Its sidecar is a link to the weights file when that holds its large constants
        // (it does, from `emit::write`): the weights are written once.
        text::save_sharing(
            &compiled.graph,
            &placed,
            &dir.join(tessera_mlir::manifest::WEIGHTS_FILE),
        )
        .with_context(|| format!("cannot write {}", placed.display()))?;
        super::write_atomically(&dir.join("summary.txt"), summary.as_bytes())?;
        super::write_atomically(
            &dir.join("plan.json"),
            compiled.plan.try_to_json()?.as_bytes(),
        )?;
        let cost = CostModel::new(&*target, calibration.as_ref());
        let devices = placement_from_graph(&compiled.graph, target.spec(), None)?;
        let trace = tessera_targets::trace(
            &compiled.graph,
            &cost,
            &devices,
            crate::report::timeline_samples(compiled.graph.ops().len(), compiled.report.samples),
        )?;
        let data = crate::report::ReportData::new(
            req.model,
            target.spec(),
            &compiled,
            &trace,
            &passes,
            stages,
        );
        // Reproducible builds (reproducible-builds.org) set SOURCE_DATE_EPOCH: no wall times.
        let data = if std::env::var_os("SOURCE_DATE_EPOCH").is_some() {
            data.without_times()
        } else {
            data
        };
        super::write_atomically(
            &dir.join(crate::report::DATA_FILE),
            data.to_json()?.as_bytes(),
        )?;
        // Drawn from what was just written, as `tessera report DIR` draws it from the files.
        let page = crate::report::html::render(&crate::report::html::Page {
            data: &data,
            plan: &compiled.plan,
            graph: &compiled.graph,
        });
        super::write_atomically(&dir.join(crate::report::HTML_FILE), page.as_bytes())?;
        out.commit()?;
    }
    super::print_stdout(&summary)
}

/// The pass pipeline (`--passes`, after the training step's pass with `microbatches` when
/// training) run on `graph`: the result, the passes' records and the number of passes.
fn step_graph(
    req: &CompileRequest<'_>,
    microbatches: u64,
    graph: Graph,
    flags: &crate::instrument::PassFlags,
) -> Result<(Graph, tessera_passes::Report, usize)> {
    let mut pipeline =
        Pipeline::parse(req.passes).with_context(|| format!("--passes `{}`", req.passes))?;
    if req.train.train {
        // The training step is built first; the pipeline then optimizes it like any graph.
        pipeline.passes.insert(
            0,
            super::train::train_pass(req.train, microbatches, req.model, &graph)?,
        );
    }
    let (graph, passes) = super::opt::run_pipeline(graph, &pipeline, flags, req.model)?;
    Ok((graph, passes, pipeline.passes.len()))
}

/// The graph `compile` places for `req` with `microbatches` microbatches: the pass pipeline
/// (the training step's pass first, when training) run quietly on `graph`. For benchmarks
/// that place a step their own way beside `compile`.
pub fn training_step(req: &CompileRequest<'_>, microbatches: u64, graph: Graph) -> Result<Graph> {
    let quiet = crate::instrument::PassFlags::default();
    step_graph(req, microbatches, graph, &quiet).map(|(g, _, _)| g)
}

/// Placement's settings from the request; with `n_passes`, the request's problem file and
/// IR dumps too (numbered on from the pass pipeline's), which trial compiles leave out.
fn place_settings<'a>(req: &'a CompileRequest<'a>, n_passes: Option<usize>) -> PlaceSettings<'a> {
    PlaceSettings {
        strategy: req.strategy,
        objective: req.objective,
        emit_problem: n_passes.and(req.emit_problem),
        split_alternatives: req.split_alternatives,
        split: req.split,
        split_axes: req.split_axes,
        ir_dump: n_passes.and_then(|n| req.flags.ir_dump_dir.as_deref().map(|d| (d, n + 1))),
        step: StepSettings {
            pipeline: PipelineMode::parse(&req.train.pipeline).unwrap_or(PipelineMode::Auto),
            // At most 2^20 MiB (the flag's range): the product fits u64.
            bucket_bytes: (req.train.bucket_mb * 1_048_576.0) as u64,
            recompute: Recompute::parse(&req.train.recompute).unwrap_or(Recompute::Auto),
            shard_state: req.train.zero_stage != "0",
        },
    }
}

/// `--microbatches auto`: the training step built, placed and simulated with each count of
/// [`AUTO_MICROBATCHES`] (quietly: no IR printed or dumped, no problem written), and the
/// count kept whose step fits every device's capacity and is shortest (the simulated period,
/// the step `--pipeline` also compares; ties within 1e-9 relative: fewer microbatches, less
/// per-microbatch overhead). A count the batch does not divide into, or that no plan fits, is
/// left out with its reason; the summary line gives every count's outcome. GPipe's
/// microbatches fill the pipeline (its bubble is `(P-1)/(M+P-1)` of the step, Huang et al.
/// 2019), while each microbatch pays every op's fixed costs again: neither more nor fewer is
/// always better, so the simulator decides.
fn choose_microbatches(
    req: &CompileRequest<'_>,
    target: &dyn Target,
    calibration: Option<&Calibration>,
    graph: &Graph,
) -> Result<(u64, String)> {
    let mut outcomes: Vec<(u64, Result<(bool, f64)>)> = Vec::new();
    for m in AUTO_MICROBATCHES {
        let tried = training_step(req, m, graph.clone()).and_then(|g| {
            let c = compile(
                g,
                target,
                calibration,
                req.samples,
                &place_settings(req, None),
            )?;
            Ok(step_of(&c.report))
        });
        outcomes.push((m, tried));
    }
    let mut best: Option<(u64, (bool, f64))> = None;
    for (m, o) in &outcomes {
        if let Ok(st) = *o {
            // A tie keeps the fewer microbatches (tried first).
            if best.is_none_or(|(_, b)| step_beats(st, b) == Some(true)) {
                best = Some((*m, st));
            }
        }
    }
    let described: Vec<String> = outcomes
        .iter()
        .map(|(m, o)| match o {
            Ok((true, t)) => format!("{m}: {}", tessera_targets::sim::seconds(*t)),
            Ok((false, t)) => format!("{m}: {}, over capacity", tessera_targets::sim::seconds(*t)),
            Err(e) => {
                // A pass's failure without the pass's whole option list.
                let why = e
                    .chain()
                    .find_map(|c| c.downcast_ref::<tessera_passes::PipelineError>())
                    .map_or_else(|| e.root_cause().to_string(), |p| p.failure.to_string());
                format!("{m}: {why}")
            }
        })
        .collect();
    let Some((m, (_, t))) = best else {
        bail!(
            "{}: --microbatches auto: no count gives a step ({})",
            req.model.display(),
            described.join("; ")
        );
    };
    Ok((
        m,
        format!(
            "microbatches auto chose {m}: simulated step {} (tried {})\n",
            tessera_targets::sim::seconds(t),
            described.join("; ")
        ),
    ))
}

/// A compile stage that started at `clock`.
fn stage(name: &str, clock: Instant) -> crate::report::StageTiming {
    crate::report::StageTiming {
        name: name.to_string(),
        seconds: clock.elapsed().as_secs_f64(),
    }
}

/// How many of `auto`'s best plans (by the placement model) `compile` simulates to choose.
pub const SIMULATED_CANDIDATES: usize = 4;

/// How many of the `stages` strategy's configurations (the best by the model's latency of the
/// step, `stages::ranked`) `compile` simulates per problem, beside the problem's best plan:
/// the model's step leaves out link contention and the stream, which can reorder close ones.
pub const STAGES_SIMULATED: usize = 4;

/// How `compile` places.
pub struct PlaceSettings<'a> {
    /// The strategy (`auto`, ...).
    pub strategy: &'a str,
    /// The objective.
    pub objective: Objective,
    /// Where to write the placement problem, if anywhere.
    pub emit_problem: Option<&'a Path>,
    /// Whether the written problem offers split alternatives.
    pub split_alternatives: bool,
    /// Whether the plan may split ops over a device group (`--split`).
    pub split: SplitMode,
    /// Only these split axes (`--split-axes`; empty: every axis).
    pub split_axes: &'a [String],
    /// `--ir-dump-dir`: the folder, and the number of the first dump placement writes (the
    /// graph after placement, after scheduling and after transfer insertion, numbered on
    /// from the pass pipeline's dumps).
    pub ir_dump: Option<(&'a Path, usize)>,
    /// A microbatched training step's pipeline schedule (`--pipeline`), and its gradient
    /// buckets.
    pub step: StepSettings,
}

/// How a training step's plan is realized: its pipeline schedule and its gradient buckets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSettings {
    /// A microbatched step's pipeline schedule (`--pipeline`).
    pub pipeline: PipelineMode,
    /// The most bytes of gradients one all-reduce sums (`--bucket-mb`; 0: one per gradient).
    pub bucket_bytes: u64,
    /// Activation recomputation in a microbatched step's stages (`--recompute`).
    pub recompute: Recompute,
    /// Optimizer state updated split over a mesh stays split between steps (`--zero-stage
    /// 1`, the `shard-state` pass).
    pub shard_state: bool,
}

/// `--recompute`: where a microbatched step's stages recompute their forward at the backward
/// ([`tessera_place::recompute`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recompute {
    /// On the places (devices or meshes) with a device over its capacity in the simulated
    /// step, kept when the step then beats the one without (within capacity first).
    Auto,
    /// On every place.
    On,
    /// Never.
    Off,
}

impl Recompute {
    /// `auto`, `on` or `off`.
    pub fn parse(s: &str) -> Option<Recompute> {
        match s {
            "auto" => Some(Recompute::Auto),
            "on" => Some(Recompute::On),
            "off" => Some(Recompute::Off),
            _ => None,
        }
    }
}

impl Default for StepSettings {
    fn default() -> Self {
        StepSettings {
            pipeline: PipelineMode::Fixed(None),
            bucket_bytes: tessera_passes::DEFAULT_BUCKET_BYTES,
            recompute: Recompute::Auto,
            shard_state: true,
        }
    }
}

/// How a microbatched training step's devices order their microbatches (`--pipeline`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipelineMode {
    /// The simulator's best of GPipe, 1F1B and upward rank (within capacity, then the
    /// shortest step, then the least peak memory).
    Auto,
    /// This schedule (`None`: each device's ops by upward rank).
    Fixed(Option<tessera_place::pipeline::Schedule>),
}

impl PipelineMode {
    /// `auto`, `none`, `gpipe` or `1f1b`.
    pub fn parse(s: &str) -> Option<PipelineMode> {
        match s {
            "auto" => Some(PipelineMode::Auto),
            "none" => Some(PipelineMode::Fixed(None)),
            s => tessera_place::pipeline::Schedule::parse(s).map(|x| PipelineMode::Fixed(Some(x))),
        }
    }
}

/// The pipeline schedule a microbatched step got, and every schedule simulated for it.
#[derive(Clone, Debug)]
pub struct PipelineChoice {
    /// The microbatches.
    pub microbatches: usize,
    /// The schedule kept (`None`: upward rank).
    pub chosen: Option<tessera_place::pipeline::Schedule>,
    /// The ops the kept step recomputes (0: none).
    pub recomputed: usize,
    /// Each step simulated.
    pub tried: Vec<Tried>,
}

/// One microbatched step [`realize`] simulated.
#[derive(Clone, Debug)]
pub struct Tried {
    /// Its schedule (`None`: upward rank).
    pub schedule: Option<tessera_place::pipeline::Schedule>,
    /// The ops it recomputes (0: none) and the places they run on.
    pub recomputed: (usize, Vec<String>),
    /// Its step (the period).
    pub step: f64,
    /// Its largest peak memory on a device.
    pub peak: u64,
}

/// A schedule's name in reports.
pub fn schedule_name(s: Option<tessera_place::pipeline::Schedule>) -> &'static str {
    s.map_or("upward rank", |s| s.name())
}

impl Default for PlaceSettings<'_> {
    fn default() -> Self {
        PlaceSettings {
            strategy: "auto",
            objective: Objective::Throughput,
            emit_problem: None,
            split_alternatives: false,
            split: SplitMode::Off,
            split_axes: &[],
            ir_dump: None,
            step: StepSettings::default(),
        }
    }
}

/// Places every unplaced op, schedules each device's ops, and simulates the result.
pub fn compile(
    graph: Graph,
    target: &dyn Target,
    calibration: Option<&Calibration>,
    samples: Option<usize>,
    settings: &PlaceSettings<'_>,
) -> Result<Compiled> {
    let stages = crate::instrument::Stages::new();
    stages.stage("building the placement problem");
    let cost = CostModel::new(target, calibration);
    let built = tessera_place::build::build(&graph, &cost)?;
    let pinned = built
        .problem
        .ops
        .iter()
        .zip(&built.graph_ops)
        .filter(|(o, g)| o.pin.is_some() && g.is_some())
        .count();
    if settings.split == SplitMode::Off && !settings.split_axes.is_empty() {
        bail!("--split-axes needs --split auto or --split force");
    }
    // The problems a plan may come from: the one without splits (unless splits are forced)
    // and, when splitting is asked, one per device group (a graph has one device mesh).
    let mut variants: Vec<(Built, Instance)> = Vec::new();
    // The strategies that choose splits; the others place ops whole.
    let splitting = matches!(
        settings.strategy,
        "auto" | "split" | "stages" | "exhaustive" | "intra-op"
    );
    if settings.split == SplitMode::Force && !splitting {
        bail!(
            "--split force: strategy `{}` places ops whole; use auto, split, intra-op or \
             exhaustive",
            settings.strategy
        );
    }
    let split = if !graph.meshes.is_empty() || !splitting {
        // A graph the `shard` pass put on a mesh keeps it; a strategy that places ops whole
        // was asked for.
        SplitMode::Off
    } else {
        settings.split
    };
    // The graph with its fused projections unfused (`unfuse-split`: a fused QKV becomes
    // three products, each split by columns with no gather), when it has any; plans without
    // splits keep the graph as it came, split plans may use either.
    let unfused = if split != SplitMode::Off || settings.split_alternatives {
        let mut g = graph.clone();
        let mut stats = tessera_passes::Statistics::default();
        // An optional rewrite: a graph it cannot rewrite is split as it came.
        let unfused = tessera_passes::unfuse_split(&mut g, &mut stats).unwrap_or(false);
        (unfused && tessera_ir::verify::verify(&g).is_ok()).then_some(g)
    } else {
        None
    };
    if let Some(path) = settings.emit_problem {
        let json = if settings.split_alternatives {
            let options = tessera_place::build::BuildOptions { splits: true };
            // The graph compile splits: unfused when it splits at all.
            let g = unfused
                .as_ref()
                .filter(|_| split != SplitMode::Off)
                .unwrap_or(&graph);
            tessera_place::build::build_with(g, &cost, &options)?
                .problem
                .to_json()
        } else {
            built.problem.to_json()
        };
        super::write_atomically(path, json.as_bytes())?;
    }
    // Why a problem has no plan, when some problem without one was left out.
    let mut left_out: Option<anyhow::Error> = None;
    if split != SplitMode::Force {
        match Instance::new(built.problem.clone()) {
            Ok(inst) => variants.push((built.clone(), inst)),
            // An op that fits no device whole may still fit split.
            Err(e) if split == SplitMode::Auto => left_out = Some(e.into()),
            Err(e) => return Err(e.into()),
        }
    }
    // The graphs split problems are of: the graph as it came and, when it has fused
    // projections, the graph with them unfused (a fused product can only be split along
    // other axes; three products cost more launches where they run whole). Per graph, the
    // problem with every group's alternatives; with `auto`, a graph it cannot be made for is
    // placed without splits.
    let split_graphs: Vec<&Graph> = if split == SplitMode::Off {
        Vec::new()
    } else {
        std::iter::once(&graph).chain(unfused.as_ref()).collect()
    };
    // Graph of each variant (an index into `split_graphs`; 0, the graph as it came, for the
    // problem without splits).
    let mut graph_index: Vec<usize> = vec![0; variants.len()];
    // The problems with every group's alternatives: their choices include every split
    // problem's of their graph (the first's also the plain problem's), so the least of their
    // bounds holds for them all; when the first graph's cannot be made, the plain problem
    // is bounded on its own.
    let mut bound_insts: Vec<Instance> = Vec::new();
    let mut first_graph_bounded = false;
    let mut offered: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut any_group = false;
    let mut n_split_problems = 0;
    for (gi, g) in split_graphs.iter().enumerate() {
        stages.stage("placement: split alternatives");
        let options = tessera_place::build::BuildOptions { splits: true };
        let made = tessera_place::build::build_with(g, &cost, &options)
            .map_err(anyhow::Error::from)
            .and_then(|b| Ok((Instance::new(b.problem.clone())?, b)));
        let (full, with_splits) = match made {
            Ok(made) => made,
            Err(_) if split == SplitMode::Auto && !variants.is_empty() => continue,
            Err(e) => return Err(e),
        };
        // Tilings (several disjoint groups, each op on any one: stages that are each data
        // or tensor parallel) are offered for training steps.
        let tilings = !g.state.is_empty();
        let problems = split_problems(&full, split, settings.split_axes, tilings);
        first_graph_bounded |= gi == 0;
        bound_insts.push(full);
        any_group |= !with_splits.problem.groups.is_empty();
        offered.extend(
            with_splits
                .problem
                .ops
                .iter()
                .flat_map(|o| o.splits.iter().map(|s| s.axis.clone()))
                .filter(|a| split != SplitMode::Force || a != REPLICATED),
        );
        n_split_problems += problems.len();
        for mut p in problems {
            if gi > 0 {
                p.name = format!("{}, projections unfused", p.name);
            }
            let b = Built {
                problem: p.clone(),
                graph_ops: with_splits.graph_ops.clone(),
                device_index: with_splits.device_index.clone(),
            };
            match Instance::new(p) {
                Ok(inst) => {
                    variants.push((b, inst));
                    graph_index.push(gi);
                }
                Err(e) => {
                    left_out.get_or_insert(e.into());
                }
            }
        }
    }
    if !split_graphs.is_empty()
        && !bound_insts.is_empty()
        && n_split_problems == 0
        && (split == SplitMode::Force || !settings.split_axes.is_empty())
    {
        let asked = if settings.split_axes.is_empty() {
            String::new()
        } else {
            format!(" along {}", settings.split_axes.join(", "))
        };
        bail!(
            "--split {split}: no op of the graph splits{asked} over a device group of \
             target {} (its ops split along: {})",
            target.spec().name,
            if offered.is_empty() && !any_group {
                "nothing; the target has no group of two or more alike devices".to_string()
            } else if offered.is_empty() {
                "nothing; no op's shapes split evenly over a device group".to_string()
            } else {
                offered.into_iter().collect::<Vec<_>>().join(", ")
            }
        );
    }
    if variants.is_empty() {
        return Err(left_out.unwrap_or_else(|| anyhow::anyhow!("placement found no plan")));
    }
    let host = &target.spec().host;
    // The graph a problem is of.
    let graph_of = |v: usize| split_graphs.get(graph_index[v]).copied().unwrap_or(&graph);
    // Places, schedules and inserts the transfers and collectives of an assignment, then
    // simulates it.
    let realize = |v: usize, assign: &[usize]| -> Result<Realized> {
        let (built, inst) = &variants[v];
        realize(
            graph_of(v),
            built,
            inst,
            assign,
            &cost,
            samples,
            settings.step,
        )
    };
    let opts = SolveOptions {
        objective: settings.objective,
    };
    let chosen: Vec<usize>;
    let chosen_variant: usize;
    stages.stage("placement: lower bound");
    // Without split problems, the plain problem's bound; with them, the least of the bounds
    // of the problems with every group's alternatives, one per graph: every problem searched
    // chooses among one of theirs (the plain problem among the first's).
    let mut bound: Option<tessera_place::bound::LowerBound> = None;
    let mut bounded: Vec<&Instance> = bound_insts.iter().collect();
    if !first_graph_bounded
        && let Some((_, plain)) = variants.iter().find(|(b, _)| b.problem.groups.is_empty())
    {
        bounded.push(plain);
    }
    if bounded.is_empty() {
        bounded.push(&variants[0].1);
    }
    // The step's recurrence: the least over the problems too (each plan is one's).
    let mut recurrence: Option<f64> = None;
    for inst in bounded {
        let b = lower_bound(inst, settings.objective)?;
        if let Some(r) = b.recurrence {
            recurrence = Some(recurrence.map_or(r, |x: f64| x.min(r)));
        }
        if bound.as_ref().is_none_or(|x| b.value < x.value) {
            bound = Some(b);
        }
    }
    let mut bound = bound.expect("a problem to bound");
    bound.recurrence = recurrence;
    let (plan, (graph, report, _transfers, pipeline)) = if settings.strategy == "auto" {
        // The model's best few plans, each simulated; the simulator's best wins (it has link
        // contention and the stream's start, which the model leaves out).
        stages.stage("placement: searching (auto)");
        let (all, attempts) = search_variants(&variants, &opts, "auto")?;
        // Plan indices from the model's best (a stable sort: ties keep the search's order).
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.sort_by(|&a, &b| by_score(&all[a].1.2, &all[b].1.2));
        // The model's best plans without splits (those `--split off` simulates, so splitting
        // never loses to it), and the best plan over each device group; with splits forced,
        // the model's best plans.
        let plain = |i: &usize| variants[all[*i].0].0.problem.groups.is_empty();
        let mut picked: std::collections::BTreeSet<usize> = order
            .iter()
            .copied()
            .filter(|i| plain(i))
            .take(SIMULATED_CANDIDATES)
            .collect();
        if picked.is_empty() {
            picked.extend(order.iter().take(SIMULATED_CANDIDATES));
        }
        let tiled = all.iter().any(|a| a.1.0 == "stages");
        // Per problem, its best plan and the model's best `stages` configurations.
        for v in 0..variants.len() {
            picked.extend(order.iter().find(|&&i| all[i].0 == v));
            // (At most `STAGES_SIMULATED` per problem, the best by the model's step.)
            picked.extend(
                order
                    .iter()
                    .filter(|&&i| all[i].0 == v && all[i].1.0 == "stages"),
            );
        }
        let picks: Vec<usize> = order
            .iter()
            .copied()
            .filter(|i| picked.contains(i))
            .collect();
        let mut best: Option<(f64, usize, Realized)> = None;
        let candidates = picks.len();
        let mut failed: Option<anyhow::Error> = None;
        for (rank, &i) in picks.iter().enumerate() {
            stages.stage(format!("simulating plan {} of {candidates}", rank + 1));
            let (v, (_, sol, _)) = &all[i];
            // A candidate that cannot be realized (a split plan the simulator finds over
            // memory, say) leaves the others to compete.
            let done = match realize(*v, &sol.assign) {
                Ok(done) => done,
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            };
            let measure = match settings.objective {
                Objective::Throughput => done.1.period,
                Objective::Latency => done.1.latency,
            };
            if best.as_ref().is_none_or(|b| measure < b.0) {
                best = Some((measure, rank, done));
            }
        }
        let Some((_, rank, done)) = best else {
            return Err(failed.unwrap_or_else(|| anyhow::anyhow!("placement found no plan")));
        };
        let (v, (name, sol, _)) = &all[picks[rank]];
        chosen = sol.assign.clone();
        chosen_variant = *v;
        let inst = &variants[*v].1;
        let mut plan = plan_of(inst, sol, settings.objective, "auto", name, bound, true)?;
        plan.attempts = records(attempts);
        let stream = match samples {
            Some(n) => format!("{n} samples"),
            None => "streams long enough for the steady state".to_string(),
        };
        plan.selected_by = Some(format!(
            "simulation ({stream}) of the {candidates} best plans by the model{}; the \
             model's rank of this one: {}",
            if variants.len() > 1 && tiled {
                " (its best without splits, its best over each device group and its best \
                 configurations of stages)"
            } else if variants.len() > 1 {
                " (its best without splits and its best over each device group)"
            } else {
                ""
            },
            rank + 1
        ));
        (plan, done)
    } else {
        stages.stage(format!("placement: {}", settings.strategy));
        let (all, attempts) = search_variants(&variants, &opts, settings.strategy)?;
        let Some((v, (name, sol, _))) = all.iter().min_by(|a, b| by_score(&a.1.2, &b.1.2)) else {
            bail!("placement found no plan");
        };
        chosen = sol.assign.clone();
        chosen_variant = *v;
        let inst = &variants[*v].1;
        let mut plan = plan_of(
            inst,
            sol,
            settings.objective,
            settings.strategy,
            name,
            bound,
            true,
        )?;
        plan.attempts = records(attempts);
        (plan, realize(*v, &chosen)?)
    };
    let (built, inst) = &variants[chosen_variant];
    if let Some((dir, first)) = settings.ir_dump {
        // The chosen plan's graph after each step of `realize`.
        let unplaced = graph_of(chosen_variant).clone();
        let mut g = unplaced.clone();
        apply_plan(&mut g, built, inst, &chosen)?;
        crate::instrument::dump_after(dir, first, "place", &g)?;
        // Scheduling reorders the body; the plan's conversions go before their first users
        // in the new order.
        let mut g = unplaced;
        let schedule = pipeline.as_ref().and_then(|p| p.chosen);
        let order = body_order(&g, built, inst, &chosen, schedule);
        apply_order(&mut g, built, &order);
        apply_plan(&mut g, built, inst, &chosen)?;
        sync_gradients(&mut g, &settings.step)?;
        crate::instrument::dump_after(dir, first + 1, "schedule", &g)?;
        insert_transfers(&mut g, host);
        crate::instrument::dump_after(dir, first + 2, "transfers", &g)?;
    }
    let placement = crate::summary::placement_line(&plan, pinned);
    // Placement never overflows a device; annotations written by hand or by a pass can.
    if let Some(d) = report.devices.iter().find(|d| d.peak_memory > d.capacity) {
        bail!(
            "the placed graph does not fit on {}: it needs {} bytes at its peak, {} more than \
             the device's {} bytes",
            d.name,
            d.peak_memory,
            d.peak_memory - d.capacity,
            d.capacity
        );
    }
    // What the transfers move, and why the period exceeds the busiest resource, if it does.
    let devices = placement_from_graph(&graph, target.spec(), None)?;
    let notes = crate::report::analysis::analyze(&graph, &cost, &devices, &report)?;
    let problem_names = built
        .graph_ops
        .iter()
        .zip(&built.problem.ops)
        .filter_map(|(g, o)| g.map(|g| (g, o.name.clone())))
        .collect();
    Ok(Compiled {
        graph,
        placement,
        plan,
        report,
        problem_names,
        notes,
        pipeline,
    })
}

/// Each device's ops in HEFT's order or, for a microbatched step with a `pipeline` schedule,
/// in that schedule's order (problem op indices of `inst`).
fn body_order(
    graph: &Graph,
    built: &Built,
    inst: &Instance,
    assign: &[usize],
    pipeline: Option<tessera_place::pipeline::Schedule>,
) -> Vec<usize> {
    pipeline
        .and_then(|p| tessera_place::pipeline::pipeline_order(graph, built, inst, assign, p))
        .unwrap_or_else(|| rank_order(inst, assign))
}

/// What [`realize`] makes: the placed graph, its simulation, the transfers inserted, and for a
/// microbatched step the pipeline schedule it got.
pub type Realized = (Graph, SimReport, usize, Option<PipelineChoice>);

/// The graph of plan `assign` (options of `inst`, the problem of `built`): each device's ops
/// in HEFT's order (or, for a microbatched step, the `pipeline` schedule's: with
/// [`PipelineMode::Auto`] each of GPipe, 1F1B and upward rank is simulated and the shortest
/// step kept, then the least peak memory), the plan applied ([`apply_plan`]: devices, the mesh of its split ops and
/// their collectives), transfer ops on cut edges; with its simulation of a stream of
/// `samples` and the number of transfers inserted.
pub fn realize(
    graph: &Graph,
    built: &Built,
    inst: &Instance,
    assign: &[usize],
    cost: &CostModel<'_>,
    samples: Option<usize>,
    step: StepSettings,
) -> Result<Realized> {
    use tessera_place::pipeline::{Schedule, microbatch_count};
    let pipeline = step.pipeline;
    let spec = cost.spec();
    let microbatches = microbatch_count(graph);
    let candidates: Vec<Option<Schedule>> = match pipeline {
        PipelineMode::Fixed(s) => vec![s],
        PipelineMode::Auto if microbatches > 1 => {
            vec![Some(Schedule::GPipe), Some(Schedule::OneFOneB), None]
        }
        PipelineMode::Auto => vec![None],
    };
    let mut best: Option<(Graph, SimReport, usize, Option<Schedule>, usize)> = None;
    let mut tried = Vec::new();
    let peak = |r: &SimReport| r.devices.iter().map(|d| d.peak_memory).max().unwrap_or(0);
    for schedule in candidates {
        let mut placed = graph.clone();
        let order = body_order(graph, built, inst, assign, schedule);
        apply_order(&mut placed, built, &order);
        apply_plan(&mut placed, built, inst, assign)?;
        sync_gradients(&mut placed, &step)?;
        // The step as placed or, with `--recompute on`, recomputing every stage's forward;
        // with `auto`, once simulated, also recomputing the places with a device over
        // capacity.
        let mut pending = Some(if step.recompute == Recompute::On && microbatches > 1 {
            Recomputing::Everywhere
        } else {
            Recomputing::Nowhere
        });
        // A second variant only follows the step as placed under `auto`: only then is the
        // placed step kept for it.
        let may_follow = step.recompute == Recompute::Auto && microbatches > 1;
        let mut placed = Some(placed);
        while let Some(recomputing) = pending.take() {
            let mut g = match recomputing {
                Recomputing::Nowhere if may_follow => placed.clone(),
                _ => placed.take(),
            }
            .expect("the placed step, taken once");
            let recomputed = match &recomputing {
                Recomputing::Nowhere => (0, Vec::new()),
                Recomputing::Everywhere => (
                    tessera_place::recompute::recompute(&mut g, None),
                    vec!["every stage".to_string()],
                ),
                Recomputing::On(places) => (
                    tessera_place::recompute::recompute(&mut g, Some(places)),
                    places.iter().cloned().collect(),
                ),
            };
            if matches!(recomputing, Recomputing::On(_)) && recomputed.0 == 0 {
                // Nothing those places' backward reads back: the same step again.
                continue;
            }
            let transfers = insert_transfers(&mut g, &spec.host);
            let devices = placement_from_graph(&g, spec, None)?;
            let report = simulate(&g, cost, &devices, &SimOptions { samples })?;
            if may_follow && matches!(recomputing, Recomputing::Nowhere) {
                pending = over_capacity(&g, &report).map(Recomputing::On);
            }
            let copies = recomputed.0;
            tried.push(Tried {
                schedule,
                recomputed,
                step: report.period,
                peak: peak(&report),
            });
            // Within every device's capacity first, then the shortest step, then the least
            // peak.
            let better = best.as_ref().is_none_or(|(_, b, _, _, _)| {
                step_beats(step_of(&report), step_of(b)).unwrap_or_else(|| peak(&report) < peak(b))
            });
            if better {
                best = Some((g, report, transfers, schedule, copies));
            }
        }
    }
    let (g, report, transfers, chosen, recomputed) = best.expect("one schedule at least");
    let choice = (microbatches > 1).then_some(PipelineChoice {
        microbatches,
        chosen,
        recomputed,
        tried,
    });
    Ok((g, report, transfers, choice))
}

/// Where [`realize`] recomputes a microbatched step's stages ([`tessera_place::recompute`]).
enum Recomputing {
    /// Nowhere: the step as placed.
    Nowhere,
    /// On every place (`--recompute on`).
    Everywhere,
    /// On these places (`auto`: those with a device over capacity).
    On(BTreeSet<String>),
}

/// The places (a device, or `@mesh`) of `g`'s ops that run on a device the simulation `r`
/// puts over its capacity; `None` when every device is within it.
fn over_capacity(g: &Graph, r: &SimReport) -> Option<BTreeSet<String>> {
    let over: BTreeSet<&str> = r
        .devices
        .iter()
        .filter(|d| d.peak_memory > d.capacity)
        .map(|d| d.name.as_str())
        .collect();
    if over.is_empty() {
        return None;
    }
    let places: BTreeSet<String> = g
        .ops()
        .iter()
        .filter_map(|&o| g.op(o).device.as_deref())
        .filter(|place| match g.mesh_of_device(place) {
            Some(mesh) => mesh.devices.iter().any(|d| over.contains(d.as_str())),
            None => over.contains(place),
        })
        .map(str::to_string)
        .collect();
    (!places.is_empty()).then_some(places)
}

/// A simulated step as [`step_beats`] compares it: whether every device is within its
/// capacity, and the step's seconds (the period).
fn step_of(r: &SimReport) -> (bool, f64) {
    (
        r.devices.iter().all(|d| d.peak_memory <= d.capacity),
        r.period,
    )
}

/// Whether step `a` beats step `b` (each: within capacity, seconds): within capacity first,
/// then shorter by more than round-off (1e-9 relative); `None` when they tie.
fn step_beats(a: (bool, f64), b: (bool, f64)) -> Option<bool> {
    if a.0 != b.0 {
        return Some(a.0);
    }
    if (a.1 - b.1).abs() <= 1e-9 * b.1.abs() {
        return None;
    }
    Some(a.1 < b.1)
}

/// A placed training step's gradient all-reduces in buckets of `step.bucket_bytes` at most
/// (the `bucket-all-reduce` pass) and, with `step.shard_state`, its optimizer state kept
/// split where the update runs split (the `shard-state` pass, ZeRO-1); other graphs are left
/// alone.
fn sync_gradients(g: &mut Graph, step: &StepSettings) -> Result<()> {
    if !g.state.is_empty() && !g.meshes.is_empty() {
        tessera_passes::bucket_all_reduces(g, step.bucket_bytes)?;
        if step.shard_state {
            tessera_passes::shard_state(g);
        }
    }
    Ok(())
}

/// The order of two plans' model scores (the objective, then the other one).
fn by_score(a: &(f64, f64), b: &(f64, f64)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
}

/// Plans with the index of the problem they solve.
type VariantPlans = Vec<(usize, Ranked)>;

/// Solves each problem of `variants` (the one without splits and one per device group) with
/// `strategy`: the problem without splits as asked (`auto`: every plan auto ranks), each split
/// problem with `split` (the strategy that chooses splits; `exhaustive`, `intra-op` or
/// `stages` when asked), and with `auto` a problem with two or more disjoint groups also
/// with `stages` (both plans kept). Returns
/// the plans with their problem's index, and every attempt; an error only when no problem has
/// a plan.
fn search_variants(
    variants: &[(Built, Instance)],
    opts: &SolveOptions,
    strategy: &str,
) -> Result<(VariantPlans, Vec<tessera_place::strategy::Attempt>)> {
    let mut all = Vec::new();
    let mut attempts = Vec::new();
    let mut errors = Vec::new();
    let solve = |built: &Built, inst: &Instance| {
        let split = !built.problem.groups.is_empty();
        if split && strategy == "auto" {
            // `split`'s search, and on problems with several disjoint groups the `stages`
            // configurations beside it: both go to the simulator.
            let mut ranked = Vec::new();
            let mut attempts = Vec::new();
            let mut first_error = None;
            use tessera_place::strategy::{Attempt, stages};
            let stages = stages::applies(inst);
            match tessera_place::strategy::run("split", inst, opts) {
                Ok((sol, chosen, _)) => {
                    let score = sol.score(inst, opts.objective);
                    attempts.push(Attempt {
                        strategy: chosen.clone(),
                        outcome: Ok(score.0),
                    });
                    ranked.push((chosen, sol, score));
                }
                Err(e) => {
                    attempts.push(Attempt {
                        strategy: "split".to_string(),
                        outcome: Err(e.to_string()),
                    });
                    first_error.get_or_insert(e);
                }
            }
            if stages {
                match stage_plans(inst, opts, &mut attempts) {
                    Ok(found) => ranked.extend(found),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            } else {
                // `split` alone, as any strategy asked by name: no attempts listed.
                attempts.clear();
            }
            match first_error {
                Some(e) if ranked.is_empty() => Err(e),
                _ => Ok((ranked, attempts)),
            }
        } else if split || strategy != "auto" {
            let name = match (split, strategy) {
                (true, "exhaustive" | "intra-op" | "stages") | (false, _) => strategy,
                (true, _) => "split",
            };
            tessera_place::strategy::run(name, inst, opts).map(|(sol, chosen, att)| {
                let score = sol.score(inst, opts.objective);
                (vec![(chosen, sol, score)], att)
            })
        } else {
            // `auto`'s `stages` plan is its best configuration: the next best go on to the
            // simulator too, as on the split problems, and each is an attempt. The
            // configurations are computed once for both.
            use tessera_place::strategy::stages;
            let configs = stages::applies(inst).then(|| stages::configurations(inst, opts));
            let ranked = tessera_place::strategy::auto_ranked_with(inst, opts, configs.as_deref());
            ranked.map(|(mut ranked, mut attempts)| {
                if let Some(configs) = configs
                    && let Ok(found) = stage_plans_of(inst, configs, &mut attempts)
                {
                    for r in found {
                        if ranked.iter().all(|q| q.1.assign != r.1.assign) {
                            ranked.push(r);
                        }
                    }
                }
                (ranked, attempts)
            })
        }
    };
    // The problems are independent and their strategies deterministic (no clocks, fixed
    // seeds): solved on threads of their own and taken in order, the plans are the ones a
    // loop would find.
    let found: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = variants
            .iter()
            .map(|(built, inst)| scope.spawn(|| solve(built, inst)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    for (v, ((built, _), found)) in variants.iter().zip(found).enumerate() {
        match found {
            Ok((ranked, att)) => {
                all.extend(ranked.into_iter().map(|r| (v, r)));
                attempts.extend(att.into_iter().map(|mut a| {
                    if variants.len() > 1 {
                        a.strategy = format!("{} ({})", a.strategy, built.problem.name);
                    }
                    a
                }));
            }
            Err(e) => errors.push(e),
        }
    }
    if all.is_empty() {
        return Err(match errors.into_iter().next() {
            Some(e) => e.into(),
            None => anyhow::anyhow!("placement found no plan"),
        });
    }
    Ok((all, attempts))
}

/// The `stages` strategy's configurations of `inst`, each added to `attempts` (the plan says
/// which chains and cuts were weighed, and what each would take), and the best
/// [`STAGES_SIMULATED`] of them by the model's step, for the simulator; or why none has a
/// plan.
fn stage_plans(
    inst: &Instance,
    opts: &SolveOptions,
    attempts: &mut Vec<tessera_place::strategy::Attempt>,
) -> std::result::Result<Vec<Ranked>, tessera_place::ProblemError> {
    stage_plans_of(
        inst,
        tessera_place::strategy::stages::configurations(inst, opts),
        attempts,
    )
}

/// [`stage_plans`] of configurations already computed.
fn stage_plans_of(
    inst: &Instance,
    configs: Vec<tessera_place::strategy::stages::Config>,
    attempts: &mut Vec<tessera_place::strategy::Attempt>,
) -> std::result::Result<Vec<Ranked>, tessera_place::ProblemError> {
    use tessera_place::strategy::{Attempt, stages};
    for c in &configs {
        attempts.push(Attempt {
            strategy: stages::describe(inst, c),
            outcome: c.outcome.as_ref().map(|s| s.0).map_err(Clone::clone),
        });
    }
    Ok(stages::ranked(configs)?
        .into_iter()
        .take(STAGES_SIMULATED)
        .map(|(score, sol)| ("stages".to_string(), sol, score))
        .collect())
}

/// The text `tessera compile` prints and writes to `summary.txt`
/// ([`crate::summary::compile_summary`]).
pub fn summary(model: &Path, target: &dyn Target, c: &Compiled) -> String {
    crate::summary::compile_summary(model, target.spec(), c)
}
