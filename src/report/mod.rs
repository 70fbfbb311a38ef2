//! The compile report: `report.json` (what only the compile knows: the target's topology, the
//! simulation with its timeline, the pass pipeline's timing and statistics) and `report.html`,
//! one self-contained page drawn from it, `plan.json` and `placed.tir` (see [`html`]).
//!
//! `tessera compile -o DIR` writes both; `tessera report DIR` draws the page again from the
//! files in DIR. Everything in `report.json` is deterministic except the wall times
//! (`passes[].seconds`, `verify_seconds`, `stages[].seconds`), which are measurements; with
//! `SOURCE_DATE_EPOCH` set they are recorded as 0 ([`ReportData::without_times`]).

pub mod analysis;
pub mod compare;
pub mod html;
pub mod scopes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use tessera_ir::{Graph, Op, OpId};
use tessera_passes::Report as PassReport;
use tessera_place::Plan;
use tessera_targets::{LayoutKind, SpanKind, TargetSpec, Trace};

use crate::commands::compile::Compiled;

/// The `format` of `report.json`.
pub const FORMAT: &str = "tessera-report/1";
/// The report's data file in an output directory.
pub const DATA_FILE: &str = "report.json";
/// The report page in an output directory.
pub const HTML_FILE: &str = "report.html";
/// Samples of the stream the timeline shows.
pub const TIMELINE_SAMPLES: usize = 3;
/// Graphs of more ops than this get a timeline of one sample (the page stays a few MB).
pub const TIMELINE_OPS_FOR_ONE_SAMPLE: usize = 10_000;

/// The most ops the report lists one by one (rows with their reasons and costs) and the most
/// timeline spans it keeps: a larger graph's report (a million-op chain) keeps the first ops
/// of the op list and the longest spans, says how many it leaves out, and stays a few MB.
/// `placed.tir` and `plan.json` always have every op.
pub const MAX_LISTED: usize = 10_000;

/// The samples the timeline of a graph of `ops` ops shows, for a stream of `samples`.
pub fn timeline_samples(ops: usize, samples: usize) -> usize {
    if ops > TIMELINE_OPS_FOR_ONE_SAMPLE {
        1
    } else {
        TIMELINE_SAMPLES.min(samples.max(1))
    }
}

/// `report.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportData {
    /// [`FORMAT`].
    pub format: String,
    /// The model file as given.
    pub model: String,
    /// The target's devices and links.
    pub target: TargetInfo,
    /// The simulation of the placed graph.
    pub simulation: Simulation,
    /// The simulated timeline of a few samples.
    pub timeline: Timeline,
    /// The pass pipeline, pass by pass.
    pub passes: Vec<PassTiming>,
    /// The compile's stages (import, passes, placement, lowering) with their wall times.
    pub stages: Vec<StageTiming>,
    /// Why placement put each op where it is (from `plan.json`'s explanations), by the op's
    /// key ([`op_key`]: its first result's name in `placed.tir`).
    pub reasons: BTreeMap<String, String>,
    /// Each op's modelled seconds on every device (`null` where it cannot run), from
    /// `plan.json`'s explanations, by the op's key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub costs: BTreeMap<String, BTreeMap<String, Option<f64>>>,
    /// Ops past [`MAX_LISTED`] in the op list, whose reasons and costs are left out.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_ops: usize,
    /// Every placed op's modelled seconds on its device (the simulated first sample; a mesh
    /// op's on one of its devices), by the op's handle as the device modules' comments name
    /// it (`op6`): what `tessera run DIR --profile` sets each kernel's measured time beside.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub op_seconds: BTreeMap<String, f64>,
    /// The last `tessera run DIR --profile`: the program's steps and kernels measured on
    /// this CPU, beside the prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<Measured>,
}

/// What `tessera run DIR --profile` measured, beside what the compile predicted.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// Timed runs (after untimed warm-up runs: a first one, then 50 ms of them).
    pub runs: usize,
    /// `--threads`, where given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u16>,
    /// The simulated latency of one sample, seconds: the prediction.
    pub predicted: f64,
    /// The median over the runs of the steps' time (each from its entry to its return),
    /// seconds: what the cost model predicts.
    pub measured: f64,
    /// `(predicted - measured) / measured`.
    pub error: f64,
    /// The median run's wall time, seconds: the steps and the runner's work around them
    /// (the inputs' copies, the outputs' buffers), which the model does not cover.
    pub run: f64,
    /// Each step, device by device in the manifest's order.
    pub steps: Vec<MeasuredStep>,
    /// Each kernel call, in the order the program makes them.
    pub kernels: Vec<MeasuredKernel>,
}

/// One step of a profiled run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeasuredStep {
    /// The step's id in the manifest.
    pub step: usize,
    /// The device that runs it.
    pub device: String,
    /// Its ops' modelled seconds (`None` where one is not in [`ReportData::op_seconds`]).
    pub predicted: Option<f64>,
    /// The median over the runs of the time from its entry to its return, seconds.
    pub measured: f64,
}

/// One kernel call of a profiled run (or a step's return, `kernel` empty: what follows its
/// last call).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MeasuredKernel {
    /// The step that makes the call.
    pub step: usize,
    /// The step's device.
    pub device: String,
    /// The kernel function called (`k12_matmul_div_etc`).
    pub kernel: String,
    /// The ops computed since the call before, as the module's comments name them
    /// (`op6 layer-norm`).
    pub ops: Vec<String>,
    /// Their modelled seconds (`None` where one is not in [`ReportData::op_seconds`]).
    pub predicted: Option<f64>,
    /// The median over the runs of the seconds from the call before to this one's end.
    pub measured: f64,
    /// Its start and end in the median run, seconds from the run's start.
    pub start: f64,
    /// See `start`.
    pub end: f64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The target's topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetInfo {
    /// Its name.
    pub name: String,
    /// Its one-line description.
    pub description: String,
    /// The host device.
    pub host: String,
    /// Every device, in target order.
    pub devices: Vec<DeviceInfo>,
    /// Every link, in target order.
    pub links: Vec<LinkInfo>,
    /// The geometry of the groups the target file's topology generator connected
    /// ([`tessera_targets::Layout`]); the topology is drawn in it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layouts: Vec<LayoutInfo>,
}

/// A generator's geometry: `ring`, `mesh2d`, `torus2d` (with `rows` and `cols`), `switch`
/// (with its `hub`) or `fully-connected`, over `members` in generator order.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayoutInfo {
    /// The generator (`mesh2d`, ...).
    pub kind: String,
    /// Rows of a mesh or torus (0 otherwise).
    #[serde(default)]
    pub rows: usize,
    /// Columns of a mesh or torus (0 otherwise).
    #[serde(default)]
    pub cols: usize,
    /// The switch device of a star.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hub: Option<String>,
    /// The devices, in generator order (row-major on a mesh).
    pub members: Vec<String>,
}

impl LayoutInfo {
    fn new(l: &tessera_targets::Layout) -> LayoutInfo {
        let (rows, cols, hub) = match &l.kind {
            LayoutKind::Mesh { rows, cols, .. } => (*rows, *cols, None),
            LayoutKind::Switch { hub } => (0, 0, Some(hub.clone())),
            _ => (0, 0, None),
        };
        LayoutInfo {
            kind: l.kind.topology().to_string(),
            rows,
            cols,
            hub,
            members: l.members.clone(),
        }
    }
}

/// One device of the target.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceInfo {
    /// Its name.
    pub name: String,
    /// Its kind (`cpu`, `gpu`, `chiplet`, `switch`, ...).
    pub kind: String,
    /// Memory capacity in bytes.
    pub memory_bytes: u64,
}

/// One link of the target.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkInfo {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Bytes per second, each way.
    pub bandwidth: f64,
    /// Seconds.
    pub latency: f64,
}

/// The simulator's results ([`SimReport`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Simulation {
    /// Seconds for one sample.
    pub latency: f64,
    /// Seconds between completions in the steady state.
    pub period: f64,
    /// Samples per second; infinite (`null` in JSON) when the period is 0.
    #[serde(deserialize_with = "null_is_infinite")]
    pub throughput: f64,
    /// Samples in the simulated stream.
    pub samples: usize,
    /// The busiest resource's seconds per sample.
    pub bound_period: f64,
    /// That resource.
    pub bottleneck: String,
    /// Transfers per sample.
    pub transfers: usize,
    /// What those transfers move, against the placed graph's `transfer` ops.
    #[serde(default)]
    pub transfer_count: analysis::TransferCount,
    /// Why the period exceeds the busiest resource's busy time, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_excess: Option<analysis::PeriodExcess>,
    /// Per device, in target order.
    pub devices: Vec<SimDevice>,
    /// Per link, in target order.
    pub links: Vec<SimLink>,
}

/// JSON has no infinity: serde_json writes it as `null`.
fn null_is_infinite<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// A device's share of the simulation.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimDevice {
    /// The device.
    pub name: String,
    /// Ops placed on it.
    pub ops: usize,
    /// Seconds busy per sample.
    pub busy: f64,
    /// Bytes of resident weights.
    pub weights: u64,
    /// Peak bytes in use (weights included).
    pub peak_memory: u64,
    /// Capacity in bytes.
    pub capacity: u64,
}

/// A link's share of the simulation, `a -> b` then `b -> a`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimLink {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Seconds busy per sample.
    pub busy: [f64; 2],
    /// Bytes per sample.
    pub bytes: [f64; 2],
}

/// The simulated timeline.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeline {
    /// Samples shown.
    pub samples: usize,
    /// Every interval, in start order (past [`MAX_LISTED`], the longest ones).
    pub spans: Vec<TimelineSpan>,
    /// Spans of the simulation left out (the shortest, past [`MAX_LISTED`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

/// One interval of the timeline.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineSpan {
    /// The sample (0-based).
    pub sample: usize,
    /// Start, seconds.
    pub start: f64,
    /// End, seconds.
    pub end: f64,
    /// The device (`chip0`) or link direction (`chip0 -> chip1`).
    pub lane: String,
    /// `op`, `transfer` or `collective`.
    pub kind: String,
    /// The op (its model name, or `opN`) or the moved value.
    pub name: String,
    /// The op's kind (`matmul`), or the moved value's type.
    pub what: String,
    /// The key ([`op_key`]) of the op the span belongs to: the op itself, or for a transfer
    /// the `transfer` op that moves the value (else the value's producer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
}

/// One pass of the pipeline.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PassTiming {
    /// The pass.
    pub name: String,
    /// Whether it changed the IR.
    pub changed: bool,
    /// Wall seconds of the pass.
    pub seconds: f64,
    /// Wall seconds of the verifier after it.
    pub verify_seconds: f64,
    /// Its counters.
    pub statistics: Vec<Statistic>,
    /// Its explanation notes (`--explain`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One counter of a pass.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statistic {
    /// Its name.
    pub name: String,
    /// What it counts.
    pub description: String,
    /// Its value.
    pub value: u64,
}

/// One stage of the compile.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageTiming {
    /// The stage.
    pub name: String,
    /// Wall seconds.
    pub seconds: f64,
}

/// An op's key: its first result's name as `placed.tir` prints it (`%matmul_3`), which
/// survives writing and reading the file (op handles do not); `names` is
/// [`tessera_ir::text::value_names`] of the graph.
pub fn op_key(graph: &Graph, names: &[String], op: OpId) -> String {
    match graph.op(op).results.first() {
        Some(v) => format!("%{}", names[v.index()]),
        None => op.to_string(),
    }
}

/// The name the report shows for an op: its model name (`loc`) with its key, or its key.
pub fn op_label(graph: &Graph, names: &[String], op: OpId) -> String {
    let key = op_key(graph, names, op);
    match &graph.op(op).loc {
        Some(loc) => format!("{loc} ({key})"),
        None => key,
    }
}

impl ReportData {
    /// Gathers the report's data from a compile.
    pub fn new(
        model: &Path,
        spec: &TargetSpec,
        compiled: &Compiled,
        trace: &Trace,
        passes: &PassReport,
        stages: Vec<StageTiming>,
    ) -> ReportData {
        let graph = &compiled.graph;
        let sim = &compiled.report;
        let names = tessera_ir::text::value_names(graph);
        let target = TargetInfo {
            name: spec.name.clone(),
            description: spec.description.clone(),
            host: spec.host.clone(),
            devices: spec
                .devices
                .iter()
                .map(|d| DeviceInfo {
                    name: d.name.clone(),
                    kind: d.kind.clone(),
                    memory_bytes: d.memory_bytes,
                })
                .collect(),
            links: spec
                .links
                .iter()
                .map(|l| LinkInfo {
                    a: l.a.clone(),
                    b: l.b.clone(),
                    bandwidth: l.bandwidth,
                    latency: l.latency,
                })
                .collect(),
            layouts: spec.layouts.iter().map(LayoutInfo::new).collect(),
        };
        let simulation = Simulation {
            latency: sim.latency,
            period: sim.period,
            throughput: sim.throughput,
            samples: sim.samples,
            bound_period: sim.bound_period,
            bottleneck: sim.bottleneck.clone(),
            transfers: sim.transfers,
            transfer_count: compiled.notes.transfers.clone(),
            period_excess: compiled.notes.period.clone(),
            devices: sim
                .devices
                .iter()
                .map(|d| SimDevice {
                    name: d.name.clone(),
                    ops: d.ops,
                    busy: d.busy,
                    weights: d.weights,
                    peak_memory: d.peak_memory,
                    capacity: d.capacity,
                })
                .collect(),
            links: sim
                .links
                .iter()
                .map(|l| SimLink {
                    a: l.a.clone(),
                    b: l.b.clone(),
                    busy: l.busy,
                    bytes: l.bytes,
                })
                .collect(),
        };
        let lane = |s: &tessera_targets::Span| analysis::lane_name(spec, s);
        // The op a transfer of a value belongs to: the `transfer` op moving it to the
        // receiving device, else the value's producer.
        let mut movers: BTreeMap<(tessera_ir::ValueId, &str), OpId> = BTreeMap::new();
        for &op in graph.ops() {
            let d = graph.op(op);
            if let (Op::Transfer { .. }, Some(&v), Some(dev)) =
                (&d.op, d.operands.first(), d.device.as_deref())
            {
                movers.entry((v, dev)).or_insert(op);
            }
        }
        let mover = |v: tessera_ir::ValueId, s: &tessera_targets::Span| -> Option<OpId> {
            // The receiving end of the span's link direction.
            let to = s.channel().map(|(l, fwd)| {
                let link = &spec.links[l];
                if fwd {
                    link.b.as_str()
                } else {
                    link.a.as_str()
                }
            });
            to.and_then(|to| movers.get(&(v, to)).copied())
                .or_else(|| {
                    // Any transfer of the value: the first key (v, _), found in log time.
                    movers
                        .range((v, "")..)
                        .next()
                        .filter(|((w, _), _)| *w == v)
                        .map(|(_, &op)| op)
                })
                .or(match graph.value(v).def {
                    tessera_ir::ValueDef::Result(p, _) => Some(p),
                    _ => None,
                })
        };
        // Past MAX_LISTED spans, the longest (in start order still).
        let mut kept: Vec<usize> = (0..trace.spans.len()).collect();
        if kept.len() > MAX_LISTED {
            let length = |i: usize| trace.spans[i].end - trace.spans[i].start;
            kept.sort_by(|&a, &b| length(b).total_cmp(&length(a)).then(a.cmp(&b)));
            kept.truncate(MAX_LISTED);
            kept.sort_unstable();
        }
        let omitted_spans = trace.spans.len() - kept.len();
        // Past MAX_LISTED ops, the op list's first ones have reasons and costs.
        let listed: Option<std::collections::BTreeSet<OpId>> = (graph.ops().len() > MAX_LISTED)
            .then(|| scopes::tree(graph).all_ops())
            .filter(|all| all.len() > MAX_LISTED)
            .map(|all| all.into_iter().take(MAX_LISTED).collect());
        let omitted_ops = listed.as_ref().map_or(0, |l| {
            graph
                .ops()
                .iter()
                .filter(|&&op| !matches!(graph.op(op).op, Op::Const(_)))
                .count()
                - l.len()
        });
        let is_listed = |op: &OpId| listed.as_ref().is_none_or(|l| l.contains(op));
        let spans = kept
            .iter()
            .map(|&i| &trace.spans[i])
            .map(|s| {
                let (kind, name, what, op) = match s.kind {
                    SpanKind::Op(op) => (
                        "op",
                        op_label(graph, &names, op),
                        graph.op(op).op.name().to_string(),
                        Some(op),
                    ),
                    SpanKind::Collective(op) => (
                        "collective",
                        op_label(graph, &names, op),
                        graph.op(op).op.name().to_string(),
                        Some(op),
                    ),
                    SpanKind::Transfer(v) => (
                        "transfer",
                        format!("%{}", names[v.index()]),
                        graph.ty(v).to_string(),
                        mover(v, s),
                    ),
                };
                TimelineSpan {
                    sample: s.sample,
                    start: s.start,
                    end: s.end,
                    lane: lane(s),
                    kind: kind.into(),
                    name,
                    what,
                    op: op.map(|op| op_key(graph, &names, op)),
                }
            })
            .collect();
        // Each listed op's reason and costs, from its explanation in the plan.
        let explained: BTreeMap<&str, &tessera_place::explain::Explanation> = compiled
            .plan
            .explanations
            .iter()
            .map(|e| (e.op.as_str(), e))
            .collect();
        let mut reasons = BTreeMap::new();
        let mut costs = BTreeMap::new();
        for (op, name) in &compiled.problem_names {
            let Some(e) = explained.get(name.as_str()).filter(|_| is_listed(op)) else {
                continue;
            };
            let key = op_key(graph, &names, *op);
            reasons.insert(key.clone(), e.reason.clone());
            costs.insert(key, e.costs.clone());
        }
        // Each op's time in the first sample, by its handle: on one device (a mesh op has a
        // span per mesh device, a collective one per channel; the longest).
        let mut op_seconds: BTreeMap<String, f64> = BTreeMap::new();
        for s in trace.spans.iter().filter(|s| s.sample == 0) {
            if let SpanKind::Op(op) | SpanKind::Collective(op) = s.kind {
                let t = op_seconds.entry(op.to_string()).or_insert(0.0);
                *t = t.max(s.end - s.start);
            }
        }
        let passes = passes
            .runs
            .iter()
            .map(|r| PassTiming {
                name: r.name.to_string(),
                changed: r.changed,
                seconds: r.elapsed.as_secs_f64(),
                verify_seconds: r.verify_elapsed.as_secs_f64(),
                statistics: r
                    .stats
                    .entries()
                    .iter()
                    .map(|&(name, description, value)| Statistic {
                        name: name.to_string(),
                        description: description.to_string(),
                        value,
                    })
                    .collect(),
                notes: r.stats.notes().to_vec(),
            })
            .collect();
        ReportData {
            format: FORMAT.to_string(),
            model: model.display().to_string(),
            target,
            simulation,
            timeline: Timeline {
                samples: trace.samples,
                spans,
                omitted: omitted_spans,
            },
            passes,
            stages,
            reasons,
            costs,
            omitted_ops,
            op_seconds,
            measured: None,
        }
    }

    /// The data with every wall time 0: what `compile` records when `SOURCE_DATE_EPOCH` is
    /// set (the reproducible-builds convention), so that all of its output is byte-identical
    /// for the same input.
    pub fn without_times(mut self) -> ReportData {
        for p in &mut self.passes {
            p.seconds = 0.0;
            p.verify_seconds = 0.0;
        }
        for s in &mut self.stages {
            s.seconds = 0.0;
        }
        self
    }

    /// As pretty JSON with a final newline.
    pub fn to_json(&self) -> Result<String> {
        let mut s = serde_json::to_string_pretty(self).context("report.json")?;
        s.push('\n');
        Ok(s)
    }
}

/// What `report.html` is drawn from: the files a compile wrote into a directory.
pub struct Inputs {
    /// `report.json`.
    pub data: ReportData,
    /// `plan.json`.
    pub plan: Plan,
    /// `placed.tir`.
    pub graph: Graph,
}

impl Inputs {
    /// Reads `report.json`, `plan.json` and `placed.tir` from `dir`.
    pub fn load(dir: &Path) -> Result<Inputs> {
        let file = |name: &str| -> Result<(PathBuf, String)> {
            let path = dir.join(name);
            let text = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "cannot read {} (is {} the output directory of `tessera compile -o`?)",
                    path.display(),
                    dir.display()
                )
            })?;
            Ok((path, text))
        };
        let (path, text) = file(DATA_FILE)?;
        let data: ReportData = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a tessera report data file", path.display()))?;
        if data.format != FORMAT {
            bail!(
                "{}: format `{}`, this tessera reads `{FORMAT}`",
                path.display(),
                data.format
            );
        }
        let (path, text) = file("plan.json")?;
        let plan = Plan::parse(&text, &path.display().to_string())?;
        let placed = dir.join("placed.tir");
        let graph = tessera_ir::text::load(&placed)
            .with_context(|| format!("cannot load {}", placed.display()))?;
        // Numbers the page scales by must be numbers.
        let sim = &data.simulation;
        if !(sim.latency.is_finite() && sim.period.is_finite() && sim.period >= 0.0) {
            bail!(
                "{}: the simulation's latency or period is not a finite number",
                path_of(dir, DATA_FILE)
            );
        }
        if let Some(s) = data.timeline.spans.iter().find(|s| {
            !(s.start.is_finite() && s.end.is_finite() && 0.0 <= s.start && s.start <= s.end)
        }) {
            bail!(
                "{}: timeline span of {} on {} runs from {} to {}: not an interval of time",
                path_of(dir, DATA_FILE),
                s.name,
                s.lane,
                s.start,
                s.end
            );
        }
        // The three files must come from one compile.
        let devices: Vec<&str> = data
            .target
            .devices
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        for &op in graph.ops() {
            let d = &graph.op(op).device;
            if matches!(graph.op(op).op, Op::Const(_)) {
                continue;
            }
            if let Some(d) = d
                && !d.starts_with('@')
                && !devices.contains(&d.as_str())
            {
                bail!(
                    "{}: op {op} is on `{d}`, which {} does not list among target {}'s devices \
                     (the files come from different compiles)",
                    placed.display(),
                    DATA_FILE,
                    data.target.name
                );
            }
        }
        Ok(Inputs { data, plan, graph })
    }
}

fn path_of(dir: &Path, file: &str) -> String {
    dir.join(file).display().to_string()
}

impl Inputs {
    /// The page drawn from them.
    pub fn render(&self) -> String {
        html::render(&html::Page {
            data: &self.data,
            plan: &self.plan,
            graph: &self.graph,
        })
    }
}

/// Draws `DIR/report.html` from the files in DIR and returns its path.
pub fn write_dir(dir: &Path) -> Result<PathBuf> {
    let page = Inputs::load(dir)?.render();
    let out = dir.join(HTML_FILE);
    crate::commands::write_atomically(&out, page.as_bytes())?;
    Ok(out)
}
