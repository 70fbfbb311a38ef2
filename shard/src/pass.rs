//! The `shard` pass: options, the mesh, the candidates and their costs.
//!
//! **Mesh.** `mesh=2x2` (or `4`) takes that many devices of the target in file order; the
//! default is every device that can compute, is not a `switch` and is not the host (the
//! host too when that leaves fewer than two), as a 1-D mesh. The mesh is called `grid`.
//! A region splits over every mesh axis at once (`p` = all the mesh's devices). A graph
//! that already declares a mesh, or a mesh of one device, is left alone.
//!
//! **Candidates.** With `strategy=auto` the pass weighs three whole-graph candidates:
//! - *tensor*: every group of column-parallel matmuls that share their input, grown to its
//!   row-parallel closers (see [`crate::propagate`]), kept when its modelled time split
//!   (each op's time with its work divided by its shard factor, plus the all-reduces) is
//!   below its modelled time on one mesh device;
//! - *data*: every graph input whose leading extent `p` divides, split along it, grown as
//!   far as the rules allow, gathered where they stop;
//! - *none*: the graph as it is.
//!
//! It simulates each candidate on the target ([`tessera_targets::simulate`], one sample,
//! unplaced ops on the mesh's first device) and keeps the lowest latency among those whose
//! peak memory fits every device (among all when none fits), preferring none, then tensor,
//! then data on ties. When a candidate cannot be simulated (a symbolic shape),
//! the comparison uses the sum of modelled op and collective times instead.
//! `strategy=tensor` and `strategy=data` apply that candidate with every region it finds,
//! whatever the cost; `strategy=none` does nothing. Every decision is recorded as a note.
//!
//! Not done: mixing data and tensor parallelism on different mesh axes, splitting a value
//! along two tensor axes, resharding between regions, attention with a fused QKV weight
//! (its split mixes the three projections).

use std::sync::Arc;

use tessera_ir::{Graph, Mesh, Op, OpId, ValueId};
use tessera_passes::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};
use tessera_targets::sim::{mesh_devices, seconds, shard_factor};
use tessera_targets::{CostModel, SimOptions, Target, placement_from_graph, simulate};

use crate::propagate::{Mode, Region, Uses, grow, seed};
use crate::rewrite::apply;

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "shard",
    summary: "Split matmul blocks (tensor parallelism) or the batch (data parallelism) over a device mesh when the cost model says it is faster",
    options: &[
        OptionInfo {
            name: "target",
            kind: OptionKind::Str,
            default: "",
            doc: "target whose devices form the mesh and whose cost model decides (empty: the compile target, else cpu)",
        },
        OptionInfo {
            name: "mesh",
            kind: OptionKind::Str,
            default: "",
            doc: "mesh shape such as 4 or 2x2 (empty: every compute device but switches and the host, 1-D)",
        },
        OptionInfo {
            name: "strategy",
            kind: OptionKind::Str,
            default: "auto",
            doc: "auto (cheapest by cost), tensor, data or none",
        },
    ],
    create,
};

/// Which parallelism to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The cheapest candidate by the cost model.
    Auto,
    /// Tensor parallelism on every region found.
    Tensor,
    /// Data parallelism.
    Data,
    /// Nothing.
    None,
}

/// The pass's settings (its options, resolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Target name (empty: the default target, else `cpu`).
    pub target: String,
    /// Mesh shape (empty: the default, see the module doc).
    pub mesh: Vec<u32>,
    /// The strategy.
    pub strategy: Strategy,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            target: String::new(),
            mesh: Vec::new(),
            strategy: Strategy::Auto,
        }
    }
}

fn create(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    let strategy = match options.string("strategy") {
        "auto" => Strategy::Auto,
        "tensor" => Strategy::Tensor,
        "data" => Strategy::Data,
        "none" => Strategy::None,
        other => {
            return Err(PassError::new(format!(
                "unknown strategy `{other}` (expected auto, tensor, data or none)"
            )));
        }
    };
    let text = options.string("mesh").trim();
    let mesh = if text.is_empty() {
        Vec::new()
    } else {
        text.split('x')
            .map(|s| s.trim().parse::<u32>().ok().filter(|&n| n > 0))
            .collect::<Option<Vec<u32>>>()
            .ok_or_else(|| {
                PassError::new(format!(
                    "bad mesh `{text}` (expected sizes joined by x, such as 4 or 2x2)"
                ))
            })?
    };
    Ok(Box::new(Shard {
        settings: Settings {
            target: options.string("target").to_string(),
            mesh,
            strategy,
        },
    }))
}

/// Sets the target `shard` uses when its `target` option is empty (the process's compile
/// target, shared with the other passes that cost: see
/// [`tessera_targets::set_default_target`]).
pub fn set_default_target(target: Option<Arc<dyn Target>>) {
    tessera_targets::set_default_target(target);
}

struct Shard {
    settings: Settings,
}

impl Pass for Shard {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let target = tessera_targets::pass_target(&self.settings.target)
            .map_err(|e| PassError::new(format!("target: {e}")))?;
        run_shard(graph, &*target, &self.settings, stats)
    }
}

/// The mesh the settings ask for on `target` (see the module doc).
pub fn choose_mesh(target: &dyn Target, shape: &[u32]) -> Result<Mesh, PassError> {
    let spec = target.spec();
    let usable: Vec<&str> = spec
        .devices
        .iter()
        .filter(|d| d.kind != "switch" && !d.compute.is_empty())
        .map(|d| d.name.as_str())
        .collect();
    let without_host: Vec<&str> = usable.iter().copied().filter(|&d| d != spec.host).collect();
    let pool = if without_host.len() >= 2 {
        without_host
    } else {
        usable
    };
    let shape = if shape.is_empty() {
        vec![pool.len() as u32]
    } else {
        shape.to_vec()
    };
    let n: u64 = shape.iter().map(|&s| u64::from(s)).product();
    if n > pool.len() as u64 {
        return Err(PassError::new(format!(
            "a mesh of {n} devices needs more than the {} that target `{}` can use ({})",
            pool.len(),
            spec.name,
            pool.join(", ")
        )));
    }
    Ok(Mesh {
        name: "grid".into(),
        shape,
        devices: pool[..n as usize].iter().map(|s| s.to_string()).collect(),
    })
}

/// A value or op for notes: its result's name, else its handle.
fn label(g: &Graph, o: OpId) -> String {
    let data = g.op(o);
    match data.results.first().and_then(|&r| g.value(r).name.clone()) {
        Some(n) => format!("%{n}"),
        None => match &data.loc {
            Some(l) => format!("{} at {l:?}", data.op.name()),
            None => format!("{} {o}", data.op.name()),
        },
    }
}

/// Costs graphs on one target and mesh.
struct Coster<'a> {
    cost: CostModel<'a>,
    mesh: Mesh,
    devices: Vec<usize>,
}

impl Coster<'_> {
    /// The modelled seconds of `ops` of `g`: on the mesh (each device's share, or the
    /// collective), else on the mesh's first device.
    fn modelled(&self, g: &Graph, ops: &[OpId]) -> Result<f64, String> {
        let d0 = self.devices[0];
        let on_mesh = Some(self.mesh.device_name());
        let mut total = 0.0;
        for &o in ops {
            let data = g.op(o);
            if matches!(data.op, Op::Const(_)) {
                continue;
            }
            if data.device == on_mesh && data.op.collective_axes().is_some() {
                let v = match data.op {
                    Op::AllGather { .. } => data.results[0],
                    _ => data.operands[0],
                };
                let bytes = g
                    .ty(v)
                    .size_bytes()
                    .ok_or_else(|| format!("{} has a symbolic shape", g.ty(v)))?
                    as f64
                    / tessera_targets::sim::pieces(g, v) as f64;
                total += self
                    .cost
                    .collective_time(&data.op, &self.mesh, &self.devices, bytes)
                    .map_err(|e| e.to_string())?;
                continue;
            }
            let parts = if data.device == on_mesh {
                shard_factor(g, o)
            } else {
                1
            };
            let t = self
                .cost
                .op_time_sharded(g, o, d0, parts)
                .map_err(|e| e.to_string())?;
            total += t
                .seconds()
                .ok_or_else(|| format!("{} cannot run on the mesh's devices", data.op.name()))?;
        }
        Ok(total)
    }

    /// The simulated latency of `g`, unplaced ops on the mesh's first device, and the first
    /// device whose peak memory is over its capacity, if any.
    fn simulated(&self, g: &Graph) -> Result<(f64, Option<String>), String> {
        let spec = self.cost.spec();
        let placement =
            placement_from_graph(g, spec, Some(self.devices[0])).map_err(|e| e.to_string())?;
        let r = simulate(g, &self.cost, &placement, &SimOptions { samples: Some(1) })
            .map_err(|e| e.to_string())?;
        let over = r
            .devices
            .iter()
            .find(|d| d.peak_memory > d.capacity)
            .map(|d| d.name.clone());
        Ok((r.latency, over))
    }
}

/// One whole-graph candidate.
struct Candidate {
    name: &'static str,
    graph: Graph,
    regions: u64,
    collectives: u64,
}

/// Runs the pass on `graph` for `target`; returns whether the graph changed.
pub fn run_shard(
    graph: &mut Graph,
    target: &dyn Target,
    settings: &Settings,
    stats: &mut Statistics,
) -> Result<bool, PassError> {
    if settings.strategy == Strategy::None {
        return Ok(false);
    }
    if !graph.meshes.is_empty() {
        stats.note("shard: the graph already declares a mesh; left as it is");
        return Ok(false);
    }
    let mesh = choose_mesh(target, &settings.mesh)?;
    let p = mesh.devices.len() as u64;
    if p < 2 {
        stats.note(format!(
            "shard: target `{}` gives a mesh of {p} device; nothing to split",
            target.spec().name
        ));
        return Ok(false);
    }
    let devices = mesh_devices(&mesh, target.spec()).map_err(|e| PassError::new(e.to_string()))?;
    let coster = Coster {
        cost: CostModel::new(target, None),
        mesh: mesh.clone(),
        devices,
    };
    let forced = settings.strategy != Strategy::Auto;
    let mut candidates = vec![Candidate {
        name: "none",
        graph: graph.clone(),
        regions: 0,
        collectives: 0,
    }];
    if matches!(settings.strategy, Strategy::Auto | Strategy::Tensor) {
        candidates.push(tensor_candidate(graph, &coster, forced, stats));
    }
    if matches!(settings.strategy, Strategy::Auto | Strategy::Data) {
        candidates.push(data_candidate(graph, &coster, stats));
    }
    candidates.retain(|c| c.name == "none" || c.regions > 0);
    let chosen = if forced {
        candidates.into_iter().find(|c| c.name != "none")
    } else {
        pick(candidates, &coster, p, stats)
    };
    let Some(c) = chosen.filter(|c| c.name != "none") else {
        return Ok(false);
    };
    *graph = c.graph;
    stats.add("regions", "regions split over the mesh", c.regions);
    stats.add(
        "collectives",
        "all-reduce and all-gather ops inserted",
        c.collectives,
    );
    let on_mesh = Some(mesh.device_name());
    let on_mesh = graph
        .ops()
        .iter()
        .filter(|&&o| graph.op(o).device == on_mesh)
        .count();
    stats.add("ops-on-mesh", "ops placed on the mesh", on_mesh as u64);
    Ok(true)
}

/// The cheapest candidate by simulated latency (or modelled time when some candidate
/// cannot be simulated), with a note comparing them.
fn pick(
    candidates: Vec<Candidate>,
    coster: &Coster<'_>,
    p: u64,
    stats: &mut Statistics,
) -> Option<Candidate> {
    if candidates.len() < 2 {
        return candidates.into_iter().next();
    }
    let simulated: Result<Vec<(f64, Option<String>)>, String> = candidates
        .iter()
        .map(|c| coster.simulated(&c.graph))
        .collect();
    let mut overflows: Vec<Option<String>> = vec![None; candidates.len()];
    let (how, times) = match simulated {
        Ok(t) => {
            overflows = t.iter().map(|(_, o)| o.clone()).collect();
            ("simulated latency", t.into_iter().map(|(l, _)| l).collect())
        }
        Err(why) => {
            let modelled: Result<Vec<f64>, String> = candidates
                .iter()
                .map(|c| coster.modelled(&c.graph, c.graph.ops()))
                .collect();
            match modelled {
                Ok(t) => {
                    stats.note(format!(
                        "shard: cannot simulate ({why}); comparing modelled op times"
                    ));
                    ("modelled time", t)
                }
                Err(why) => {
                    stats.note(format!(
                        "shard: cannot cost the graph ({why}); left as it is"
                    ));
                    return None;
                }
            }
        }
    };
    // Candidates that fit in every device's memory come first; then the fastest.
    let fits = overflows.iter().any(Option::is_none);
    let mut best: Option<usize> = None;
    for (i, &t) in times.iter().enumerate() {
        if fits && overflows[i].is_some() {
            continue;
        }
        if best.is_none_or(|b| t < times[b]) {
            best = Some(i);
        }
    }
    let best = best.unwrap_or(0);
    let parts: Vec<String> = candidates
        .iter()
        .zip(&times)
        .zip(&overflows)
        .map(|((c, &t), over)| match over {
            Some(d) => format!("{} {} (over the memory of {d})", c.name, seconds(t)),
            None => format!("{} {}", c.name, seconds(t)),
        })
        .collect();
    stats.note(format!(
        "shard: {p}-way over @grid: {}; keeping {} ({how})",
        parts.join(", "),
        candidates[best].name
    ));
    candidates.into_iter().nth(best)
}

/// Tensor parallelism: each group of column-parallel ops sharing their input, grown to its
/// closers, kept when cheaper split (or always when `forced`).
fn tensor_candidate(
    g: &Graph,
    coster: &Coster<'_>,
    forced: bool,
    stats: &mut Statistics,
) -> Candidate {
    let p = coster.mesh.devices.len() as u64;
    let uses = Uses::new(g);
    let mut out = g.clone();
    out.meshes = vec![coster.mesh.clone()];
    let mut taken: std::collections::BTreeSet<OpId> = std::collections::BTreeSet::new();
    let mut regions = 0;
    let mut collectives = 0;
    for &o in g.ops() {
        if taken.contains(&o) || seed(g, o, p).is_none() {
            continue;
        }
        let x: ValueId = g.op(o).operands[0];
        let seeds: Vec<OpId> = uses
            .users(x)
            .iter()
            .copied()
            .filter(|&u| !taken.contains(&u) && seed(g, u, p).is_some() && g.op(u).operands[0] == x)
            .collect();
        taken.extend(&seeds);
        let names: Vec<String> = seeds.iter().map(|&s| label(g, s)).collect();
        let what = format!("block {}", names.join(", "));
        let region = match grow(g, Mode::Tensor, &seeds, &[], p) {
            Ok(r) if r.closers.is_empty() => {
                stats.note(format!(
                    "shard: {what}: no row-parallel op closes it; unsplit"
                ));
                continue;
            }
            Ok(r) => r,
            Err(why) => {
                stats.note(format!("shard: {what}: stops at {why}; unsplit"));
                continue;
            }
        };
        if region
            .ops
            .iter()
            .any(|op| taken.contains(op) && !seeds.contains(op))
        {
            stats.note(format!("shard: {what}: overlaps another region; unsplit"));
            continue;
        }
        taken.extend(&region.ops);
        let closers: Vec<String> = region.closers.iter().map(|&c| label(g, c)).collect();
        let what = format!("{what} -> {}", closers.join(", "));
        let mut trial = out.clone();
        let base = trial.num_op_handles();
        let n = apply(&mut trial, &region, &coster.mesh);
        // The region's ops and the ops this rewrite added.
        let new_ops: Vec<OpId> = trial
            .ops()
            .iter()
            .copied()
            .filter(|&op| op.index() >= base || region.ops.contains(&op))
            .collect();
        let split = coster.modelled(&trial, &new_ops);
        let whole = coster.modelled(g, &region.ops);
        let keep = match (&split, &whole) {
            (Ok(s), Ok(w)) => {
                let keep = forced || s < w;
                stats.note(format!(
                    "shard: {what} ({} ops): tensor-parallel {p}-way {} vs unsplit {}: {}",
                    region.ops.len(),
                    seconds(*s),
                    seconds(*w),
                    if keep { "split" } else { "unsplit" }
                ));
                keep
            }
            (Err(why), _) | (_, Err(why)) => {
                stats.note(format!(
                    "shard: {what}: cannot cost ({why}); {}",
                    if forced { "split" } else { "unsplit" }
                ));
                forced
            }
        };
        if keep {
            out = trial;
            regions += 1;
            collectives += n as u64;
        }
    }
    Candidate {
        name: "tensor",
        graph: out,
        regions,
        collectives,
    }
}

/// Data parallelism: inputs split along their leading axis, grown as far as the rules go.
fn data_candidate(g: &Graph, coster: &Coster<'_>, stats: &mut Statistics) -> Candidate {
    let p = coster.mesh.devices.len() as u64;
    let inputs: Vec<(ValueId, usize)> = g
        .inputs()
        .iter()
        .copied()
        .filter(|&v| {
            g.ty(v)
                .static_dims()
                .and_then(|d| d.first().copied())
                .is_some_and(|b| b >= p && b.is_multiple_of(p))
        })
        .map(|v| (v, 0))
        .collect();
    let empty = Candidate {
        name: "data",
        graph: g.clone(),
        regions: 0,
        collectives: 0,
    };
    if inputs.is_empty() {
        stats.note(format!(
            "shard: data-parallel: no input has a leading extent that {p} divides"
        ));
        return empty;
    }
    let region: Region = match grow(g, Mode::Data, &[], &inputs, p) {
        Ok(r) => r,
        Err(why) => {
            stats.note(format!("shard: data-parallel: {why}"));
            return empty;
        }
    };
    if region.ops.is_empty() {
        stats.note("shard: data-parallel: no op keeps the batch split");
        return empty;
    }
    let mut out = g.clone();
    out.meshes = vec![coster.mesh.clone()];
    let n = apply(&mut out, &region, &coster.mesh);
    stats.note(format!(
        "shard: data-parallel {p}-way: {} ops split, {} gathered values",
        region.ops.len(),
        region.gathers.len()
    ));
    Candidate {
        name: "data",
        graph: out,
        regions: 1,
        collectives: n as u64,
    }
}
