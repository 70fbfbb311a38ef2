//! The `place` and `schedule` passes.
//!
//! - `place{strategy=auto objective=throughput target=}` builds the placement problem of the
//!   graph on the target ([`crate::build`]), solves it ([`crate::plan::solve`]), writes a
//!   `device("...")` on every op (ops already annotated are pinned and keep theirs; ops on a
//!   mesh keep the mesh), and inserts a `transfer` op on every cut edge
//!   ([`insert_transfers`]).
//! - `schedule{target= pipeline=none}` orders the body so each device runs its ops by
//!   decreasing upward rank (the length of the costliest path from the op to the end,
//!   transfers included), the priority of HEFT's list scheduling (Topcuoglu, Hariri and Wu,
//!   2002); every op must be placed. Constants move to just before their first use. With
//!   `pipeline=gpipe` or `1f1b`, a microbatched training step's devices run its microbatches'
//!   forwards and backwards in that pipeline schedule's order ([`crate::pipeline`]).
//!
//! Both cost with the pass's `target` option, else the compile target
//! ([`tessera_targets::set_default_target`]), else `cpu`.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use tessera_ir::{Graph, Op, OpId, ValueDef, ValueId};
use tessera_passes::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};
use tessera_targets::CostModel;

use crate::build::{BuildError, Built, build};
use crate::eval::Objective;
use crate::plan::{Plan, solve_with_solution};
use crate::problem::{Instance, ProblemError};
use crate::strategy::STRATEGIES;

/// The `place` pass's registry record.
pub const PLACE: PassInfo = PassInfo {
    name: "place",
    summary: "Place every op on a device of the target (memory-aware; see tessera place)",
    options: &[
        OptionInfo {
            name: "strategy",
            kind: OptionKind::Str,
            default: "auto",
            doc: "the solver: auto, exhaustive, ilp, dp, multilevel, heft, local, greedy, single, round-robin",
        },
        OptionInfo {
            name: "objective",
            kind: OptionKind::Str,
            default: "throughput",
            doc: "throughput (pipelined stream) or latency (one sample)",
        },
        OptionInfo {
            name: "target",
            kind: OptionKind::Str,
            default: "",
            doc: "target to place on (empty: the compile target, else cpu)",
        },
    ],
    create: create_place,
};

/// The `schedule` pass's registry record.
pub const SCHEDULE: PassInfo = PassInfo {
    name: "schedule",
    summary: "Order each device's ops by upward rank (HEFT's priority); every op must be placed",
    options: &[
        OptionInfo {
            name: "target",
            kind: OptionKind::Str,
            default: "",
            doc: "target whose costs rank the ops (empty: the compile target, else cpu)",
        },
        OptionInfo {
            name: "pipeline",
            kind: OptionKind::Str,
            default: "none",
            doc: "a microbatched training step's pipeline schedule: none (upward rank), gpipe or 1f1b",
        },
    ],
    create: create_schedule,
};

/// Registers `place` and `schedule` (idempotent).
pub fn register() -> Result<(), tessera_passes::RegisterError> {
    for info in [PLACE, SCHEDULE] {
        if tessera_passes::lookup(info.name).is_none() {
            tessera_passes::register(info)?;
        }
    }
    Ok(())
}

/// Why placement failed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The graph gives no problem.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The problem has no (valid) plan.
    #[error(transparent)]
    Problem(#[from] ProblemError),
}

/// A placed graph's plan and the problem behind it.
#[derive(Debug)]
pub struct Placed {
    /// The plan.
    pub plan: Plan,
    /// The problem, with the graph op behind each problem op.
    pub built: Built,
}

/// Places every op of `graph` on `cost`'s target with `strategy` for `objective`, writing
/// `device(...)` annotations; returns the plan.
pub fn place_graph(
    graph: &mut Graph,
    cost: &CostModel<'_>,
    strategy: &str,
    objective: Objective,
    explain: bool,
) -> Result<Placed, PlaceError> {
    let mut built = build(graph, cost)?;
    // The instance holds the problem while it is solved, and gives it back (no copy).
    let inst = Instance::new(std::mem::replace(
        &mut built.problem,
        crate::problem::Problem {
            version: crate::problem::VERSION,
            name: String::new(),
            devices: Vec::new(),
            routers: Vec::new(),
            links: Vec::new(),
            ops: Vec::new(),
            edges: Vec::new(),
            groups: Vec::new(),
            carried: Vec::new(),
        },
    ))?;
    let (plan, sol) = solve_with_solution(&inst, strategy, objective, explain)?;
    built.problem = inst.problem;
    for (o, &k) in sol.assign.iter().enumerate() {
        if let (Some(Some(op)), Some(spec), Some(dev)) = (
            built.graph_ops.get(o),
            built.problem.ops.get(o),
            built.problem.devices.get(k),
        ) && spec.spmd.is_empty()
        {
            graph.op_mut(*op).device = Some(dev.name.clone());
        }
    }
    Ok(Placed { plan, built })
}

/// Inserts an explicit `transfer {from, to}` op for every value used on a device other than
/// the one holding it: one per value and receiving device, placed on the receiver just before
/// the first op there that uses it, which (with every later user there) then reads the
/// transfer's result. Graph inputs start on `host` and move the same way. Not covered, as the
/// simulator models them itself: constants and state inputs (resident where used), values entering
/// or leaving a device mesh, and graph outputs (which end on the host). Returns the number of
/// transfers inserted. Values an existing `transfer` already moves are left alone, so running
/// it twice inserts nothing the second time.
pub fn insert_transfers(graph: &mut Graph, host: &str) -> usize {
    let single = |d: &Option<String>| -> Option<String> {
        match d {
            Some(x) if !x.starts_with('@') => Some(x.clone()),
            _ => None,
        }
    };
    // Where each value lives.
    let mut home: BTreeMap<ValueId, String> = BTreeMap::new();
    for (i, &v) in graph.inputs().iter().enumerate() {
        // State (a training step's parameters and optimizer state) is resident where it is
        // used, like a weight: it is not moved from the host every run.
        if graph.state.iter().any(|s| s.input == i) {
            continue;
        }
        home.insert(v, host.to_string());
    }
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        if let Some(d) = single(&data.device) {
            for &v in &data.results {
                home.insert(v, d.clone());
            }
        }
    }
    // (value, receiving device) -> the first user's body position, and every user there.
    let mut needs: BTreeMap<(ValueId, String), (usize, Vec<OpId>)> = BTreeMap::new();
    for (pos, &op) in graph.ops().iter().enumerate() {
        let data = graph.op(op);
        if matches!(data.op, Op::Transfer { .. }) {
            continue;
        }
        let Some(d) = single(&data.device) else {
            continue;
        };
        for &v in &data.operands {
            if let Some(h) = home.get(&v)
                && *h != d
            {
                let users = &mut needs.entry((v, d.clone())).or_insert((pos, Vec::new())).1;
                if users.last() != Some(&op) {
                    users.push(op);
                }
            }
        }
    }
    let mut inserts: Vec<(usize, ValueId, String, Vec<OpId>)> = needs
        .into_iter()
        .map(|((v, d), (pos, users))| (pos, v, d, users))
        .collect();
    // Insert from the back so positions stay valid; ties keep value order.
    inserts.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let count = inserts.len();
    // The transfers go into the body in one pass at the end (inserting each into the body
    // would move the rest of it every time: quadratic in a long graph with many cuts). Before
    // each position they stand in the order one-by-one insertion from the back gave them: the
    // last created first.
    let mut before: Vec<Vec<OpId>> = vec![Vec::new(); graph.ops().len() + 1];
    for (pos, v, to, users) in inserts {
        let from = home[&v].clone();
        let ty = graph.ty(v).clone();
        let sharding = graph.value(v).sharding.clone();
        let t = graph.create_detached_op(
            Op::Transfer {
                from,
                to: to.clone(),
            },
            vec![v],
            vec![ty],
        );
        if let Some(slot) = before.get_mut(pos) {
            slot.push(t);
        }
        graph.op_mut(t).device = Some(to.clone());
        let r = graph.op(t).results[0];
        graph.value_mut(r).sharding = sharding;
        if let Some(name) = &graph.value(v).name {
            let name = format!("{name}.to.{to}");
            graph.set_name(r, name);
        }
        // Users on `to` read the transfer's result.
        for op in users {
            for operand in &mut graph.op_mut(op).operands {
                if *operand == v {
                    *operand = r;
                }
            }
        }
    }
    if count > 0 {
        let old = graph.ops().to_vec();
        let mut body = Vec::with_capacity(old.len() + count);
        for (pos, slot) in before.iter().enumerate() {
            body.extend(slot.iter().rev());
            if let Some(&op) = old.get(pos) {
                body.push(op);
            }
        }
        graph.set_ops(body);
    }
    count
}

/// Writes the device of each op of `assign` (indices into `inst`'s devices) on the graph ops
/// behind `built`'s problem ops; ops on a mesh (SPMD) keep it, and ops split over a device
/// group (options past the devices) are left to [`crate::apply::apply_plan`].
pub fn write_devices(graph: &mut Graph, built: &Built, inst: &Instance, assign: &[usize]) {
    for (o, &k) in assign.iter().enumerate() {
        if let Some(op) = built.graph_ops[o]
            && k < inst.d
            && built.problem.ops[o].spmd.is_empty()
        {
            graph.op_mut(op).device = Some(inst.device_name(k).to_string());
        }
    }
}

/// Upward ranks of a fixed assignment, and the order HEFT's list scheduling gives: the ready
/// op of highest rank first (ties: the earlier op), so every edge goes forward.
/// An op split over a device group (option `>= inst.d`) counts its slowest share, and its
/// transfers as if from and to the group's first device.
pub fn rank_order(inst: &Instance, assign: &[usize]) -> Vec<usize> {
    let device = |o: usize| inst.place_devices[inst.place_of(o, assign[o])][0];
    let mut rank = vec![0.0f64; inst.n];
    for o in (0..inst.n).rev() {
        let mut tail: f64 = 0.0;
        for &e in &inst.out_edges[o] {
            let edge = &inst.problem.edges[e];
            tail = tail.max(inst.transfer(device(o), device(edge.to), edge.bytes) + rank[edge.to]);
        }
        let time = inst
            .option_times(o, assign[o])
            .iter()
            .copied()
            .fold(0.0, f64::max);
        rank[o] = time + tail;
    }
    #[derive(PartialEq)]
    struct Ready(f64, usize);
    impl Eq for Ready {}
    impl PartialOrd for Ready {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Ready {
        fn cmp(&self, other: &Self) -> Ordering {
            self.0
                .total_cmp(&other.0)
                .then_with(|| other.1.cmp(&self.1))
        }
    }
    let mut missing: Vec<usize> = (0..inst.n).map(|o| inst.in_edges[o].len()).collect();
    let mut heap: BinaryHeap<Ready> = (0..inst.n)
        .filter(|&o| missing[o] == 0)
        .map(|o| Ready(rank[o], o))
        .collect();
    let mut order = Vec::with_capacity(inst.n);
    while let Some(Ready(_, o)) = heap.pop() {
        order.push(o);
        for &e in &inst.out_edges[o] {
            let v = inst.problem.edges[e].to;
            missing[v] -= 1;
            if missing[v] == 0 {
                heap.push(Ready(rank[v], v));
            }
        }
    }
    order
}

/// Reorders `graph`'s body to `order` (problem op indices of `built`); constants go just
/// before their first use, unused ones first.
pub fn apply_order(graph: &mut Graph, built: &Built, order: &[usize]) {
    let mut placed: BTreeSet<OpId> = BTreeSet::new();
    let mut body: Vec<OpId> = Vec::with_capacity(graph.ops().len());
    let used: BTreeSet<OpId> = graph
        .ops()
        .iter()
        .flat_map(|&op| graph.op(op).operands.clone())
        .filter_map(|v| match graph.value(v).def {
            ValueDef::Result(p, _) => Some(p),
            ValueDef::Input(_) => None,
        })
        .collect();
    for &op in graph.ops() {
        if matches!(graph.op(op).op, Op::Const(_)) && !used.contains(&op) {
            body.push(op);
            placed.insert(op);
        }
    }
    for &o in order {
        let Some(op) = built.graph_ops[o] else {
            continue;
        };
        for &v in &graph.op(op).operands {
            if let ValueDef::Result(p, _) = graph.value(v).def
                && matches!(graph.op(p).op, Op::Const(_))
                && placed.insert(p)
            {
                body.push(p);
            }
        }
        if placed.insert(op) {
            body.push(op);
        }
    }
    // Anything the problem did not list (none today) keeps its place at the end.
    for &op in graph.ops() {
        if placed.insert(op) {
            body.push(op);
        }
    }
    graph.set_ops(body);
}

fn create_place(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    let strategy = options.string("strategy").to_string();
    if !STRATEGIES.iter().any(|s| s.0 == strategy) {
        return Err(PassError::new(format!(
            "unknown strategy `{strategy}` (expected one of: {})",
            STRATEGIES
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let objective: Objective = options
        .string("objective")
        .parse()
        .map_err(PassError::new)?;
    Ok(Box::new(PlacePass {
        strategy,
        objective,
        target: options.string("target").to_string(),
    }))
}

struct PlacePass {
    strategy: String,
    objective: Objective,
    target: String,
}

impl Pass for PlacePass {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let target = tessera_targets::pass_target(&self.target)
            .map_err(|e| PassError::new(format!("target: {e}")))?;
        let cost = CostModel::new(&*target, None);
        let before: Vec<Option<String>> = graph
            .ops()
            .iter()
            .map(|&op| graph.op(op).device.clone())
            .collect();
        let placed = place_graph(graph, &cost, &self.strategy, self.objective, false)
            .map_err(|e| PassError::new(e.to_string()))?;
        let transfers = insert_transfers(graph, &target.spec().host);
        stats.add(
            "transfers",
            "transfer ops inserted on cut edges",
            transfers as u64,
        );
        let p = &placed.plan;
        let graph_ops = placed.built.graph_ops.iter().flatten().count();
        stats.add(
            "ops-placed",
            "ops with a device after placement",
            graph_ops as u64,
        );
        stats.note(format!(
            "{}: {} chose {}; {} {} (period {}, latency {}); lower bound {} ({}); gap {:.1}%",
            target.spec().name,
            p.strategy,
            p.chosen,
            p.objective,
            tessera_targets::sim::seconds(p.value),
            tessera_targets::sim::seconds(p.period),
            tessera_targets::sim::seconds(p.latency),
            tessera_targets::sim::seconds(p.lower_bound.value),
            p.lower_bound.binding(),
            p.gap * 100.0
        ));
        let after: Vec<Option<String>> = graph
            .ops()
            .iter()
            .map(|&op| graph.op(op).device.clone())
            .collect();
        Ok(before != after || transfers > 0)
    }
}

fn create_schedule(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    let pipeline = match options.string("pipeline") {
        "none" => None,
        s => Some(crate::pipeline::Schedule::parse(s).ok_or_else(|| {
            PassError::new(format!(
                "pipeline: unknown schedule `{s}` (expected none, gpipe or 1f1b)"
            ))
        })?),
    };
    Ok(Box::new(SchedulePass {
        target: options.string("target").to_string(),
        pipeline,
    }))
}

struct SchedulePass {
    target: String,
    pipeline: Option<crate::pipeline::Schedule>,
}

impl Pass for SchedulePass {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let target = tessera_targets::pass_target(&self.target)
            .map_err(|e| PassError::new(format!("target: {e}")))?;
        let cost = CostModel::new(&*target, None);
        schedule_graph(graph, &cost, self.pipeline, stats)
    }
}

/// The `schedule` pass on a placed graph: each device's ops in upward-rank order or, with
/// `pipeline`, a microbatched step's pipeline schedule; returns whether the body changed.
pub fn schedule_graph(
    graph: &mut Graph,
    cost: &CostModel<'_>,
    pipeline: Option<crate::pipeline::Schedule>,
    stats: &mut Statistics,
) -> Result<bool, PassError> {
    {
        if let Some(&op) = graph
            .ops()
            .iter()
            .find(|&&op| graph.op(op).device.is_none() && !matches!(graph.op(op).op, Op::Const(_)))
        {
            return Err(PassError::new(format!(
                "{} has no device; run `place` first",
                tessera_targets::sim::describe_op(graph, op)
            )));
        }
        let built = build(graph, cost).map_err(|e| PassError::new(e.to_string()))?;
        let inst =
            Instance::new(built.problem.clone()).map_err(|e| PassError::new(e.to_string()))?;
        // Every op is pinned: the assignment is each op's only allowed device.
        let assign: Vec<usize> = (0..inst.n)
            .map(|o| (0..inst.d).find(|&k| inst.allowed(o, k)).unwrap_or(0))
            .collect();
        let order = pipeline
            .and_then(|p| crate::pipeline::pipeline_order(graph, &built, &inst, &assign, p))
            .unwrap_or_else(|| rank_order(&inst, &assign));
        let before = graph.ops().to_vec();
        apply_order(graph, &built, &order);
        let moved = before
            .iter()
            .zip(graph.ops())
            .filter(|(a, b)| a != b)
            .count();
        stats.add(
            "ops-moved",
            "ops whose position in the body changed",
            moved as u64,
        );
        Ok(before != graph.ops())
    }
}
