//! `tessera compile`: load a model, run the pass pipeline, place it on a target, simulate it,
//! and print (or write) the result.
//!
//! Placement today: ops that carry a `device("...")` annotation keep it; all others go to the
//! one device that runs them with the lowest simulated latency while fitting in its memory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tessera_ir::{Graph, Op, text};
use tessera_passes::Pipeline;
use tessera_targets::{
    Calibration, CostModel, OpTime, SimError, SimOptions, SimReport, Target, TargetError,
    placement_from_graph, simulate,
};

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
    /// Samples in the simulated stream.
    pub samples: usize,
    /// Output directory.
    pub output: Option<&'a Path>,
    /// `--input-shape` bindings.
    pub shapes: &'a [super::InputShape],
    /// Instrumentation flags for the pipeline.
    pub flags: &'a PassFlags,
}

/// A compiled model: the placed graph and its simulation.
pub struct Compiled {
    /// The graph with every op placed.
    pub graph: Graph,
    /// What placement did, in words.
    pub placement: String,
    /// The simulation of the placed graph.
    pub report: SimReport,
}

/// Runs `tessera compile`.
pub fn run(req: &CompileRequest<'_>) -> Result<()> {
    let target =
        tessera_targets::resolve(req.target, &super::targets::search_path(req.target_path))
            .context("--target")?;
    let calibration = match req.calibration {
        Some(path) => {
            let c = Calibration::load(path)?;
            c.check(target.spec())?;
            Some(c)
        }
        None => None,
    };
    let graph = super::load_model(req.model, req.shapes)?;
    tessera_eqsat::set_default_target(Some(target.clone()));
    tessera_shard::set_default_target(Some(target.clone()));
    let pipeline =
        Pipeline::parse(req.passes).with_context(|| format!("--passes `{}`", req.passes))?;
    let graph = super::opt::run_pipeline(graph, &pipeline, req.flags, req.model)?;
    let compiled = compile(graph, &*target, calibration.as_ref(), req.samples)
        .with_context(|| format!("{}: compiling for {}", req.model.display(), req.target))?;
    let summary = summary(req.model, &*target, &compiled);
    if let Some(dir) = req.output {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let placed = dir.join("placed.tir");
        text::save(&compiled.graph, &placed)
            .with_context(|| format!("cannot write {}", placed.display()))?;
        super::write_atomically(&dir.join("summary.txt"), summary.as_bytes())?;
    }
    super::print_stdout(&summary)
}

/// Places every unplaced op and simulates the result.
pub fn compile(
    mut graph: Graph,
    target: &dyn Target,
    calibration: Option<&Calibration>,
    samples: usize,
) -> Result<Compiled> {
    let cost = CostModel::new(target, calibration);
    let placement = place_unplaced(&mut graph, &cost)?;
    let devices = placement_from_graph(&graph, target.spec(), None)?;
    let report = simulate(&graph, &cost, &devices, &SimOptions { samples })?;
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
    Ok(Compiled {
        graph,
        placement,
        report,
    })
}

/// Puts every op without a device on the single device with the lowest simulated latency
/// that can run them all and holds the peak memory; returns what it did, in words.
fn place_unplaced(graph: &mut Graph, cost: &CostModel<'_>) -> Result<String> {
    let spec = cost.spec();
    let unplaced: Vec<_> = graph
        .ops()
        .iter()
        .copied()
        .filter(|&op| graph.op(op).device.is_none() && !matches!(graph.op(op).op, Op::Const(_)))
        .collect();
    // Constants are not counted as ops (as in the summary's header).
    let placed = graph
        .ops()
        .iter()
        .filter(|&&op| graph.op(op).device.is_some() && !matches!(graph.op(op).op, Op::Const(_)))
        .count();
    if unplaced.is_empty() {
        return Ok(format!("all {placed} ops were already placed"));
    }
    let mut best: Option<(f64, usize)> = None;
    let mut refusals: Vec<String> = Vec::new();
    'devices: for (d, device) in spec.devices.iter().enumerate() {
        for &op in &unplaced {
            if let OpTime::Unsupported(why) = cost.op_time(graph, op, d)? {
                refusals.push(format!(
                    "{}: {} ({})",
                    device.name,
                    why,
                    tessera_targets::sim::describe_op(graph, op)
                ));
                continue 'devices;
            }
        }
        let devices = placement_from_graph(graph, spec, Some(d))?;
        let r = match simulate(graph, cost, &devices, &SimOptions { samples: 1 }) {
            Ok(r) => r,
            // A device without a route to the host (or to a device an op is pinned on)
            // cannot take the ops; another may.
            Err(SimError::Target(e @ TargetError::Unreachable { .. })) => {
                refusals.push(format!("{}: {e}", device.name));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(over) = r.devices.iter().find(|x| x.peak_memory > x.capacity) {
            refusals.push(format!(
                "{}: needs {} bytes on {}, which holds {}",
                device.name, over.peak_memory, over.name, over.capacity
            ));
            continue;
        }
        if best.is_none_or(|(t, _)| r.latency < t) {
            best = Some((r.latency, d));
        }
    }
    let Some((_, d)) = best else {
        bail!(
            "no single device of target `{}` can run the unplaced ops:\n  {}",
            spec.name,
            refusals.join("\n  ")
        );
    };
    let name = spec.devices[d].name.clone();
    for &op in graph.ops().to_vec().iter() {
        if graph.op(op).device.is_none() {
            graph.op_mut(op).device = Some(name.clone());
        }
    }
    Ok(format!(
        "{} ops on {name} (the single device with the lowest simulated latency that can run \
         them and hold them){}",
        unplaced.len(),
        if placed > 0 {
            format!("; {placed} ops kept their device")
        } else {
            String::new()
        }
    ))
}

/// The text `tessera compile` prints and writes to `summary.txt`.
pub fn summary(model: &Path, target: &dyn Target, c: &Compiled) -> String {
    let mut s = String::new();
    let ops = c
        .graph
        .ops()
        .iter()
        .filter(|&&op| !matches!(c.graph.op(op).op, Op::Const(_)))
        .count();
    let _ = writeln!(
        s,
        "compiled {} for {} ({} devices, {} links): {ops} ops",
        model.display(),
        target.spec().name,
        target.spec().devices.len(),
        target.spec().links.len()
    );
    let _ = writeln!(s, "placement    {}", c.placement);
    let _ = write!(s, "{}", c.report);
    s
}
