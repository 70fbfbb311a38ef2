//! A discrete-event simulator of a placed graph on a target.
//!
//! **Model.** Every non-`const` op runs on its device, one op at a time per device, for the
//! time the [`CostModel`] gives. A value used on a device other than the one that holds it is
//! moved there once by a transfer, which occupies every link direction (channel) on its route
//! for its whole duration (cut-through, see [`crate::cost`]); a transfer starts when its value
//! is ready and all its channels are free, and channels serve transfers first come, first
//! served, so transfers that share a link contend. Graph inputs start on the host, graph
//! outputs end on the host, and constants (weights) are resident on every device that uses
//! them, loaded before the run. So is state (`Graph::state`: a training step's parameters
//! and optimizer state), whose next values are written in place: they take no memory of
//! their own and stay on their device.
//!
//! **Meshes (SPMD).** An op placed on one of the graph's meshes (`device("@grid")`,
//! [`on_mesh`] of the mesh's index in a placement) runs on every device of that mesh: one
//! task per device, each for
//! [`CostModel::op_time_sharded`] with `parts` the shard factor of the op, the largest number
//! of pieces any of its operands or results is cut into by its sharding (a column-parallel
//! matmul whose weight and result are split 4 ways does a quarter of the work on each
//! device; an op on replicated values repeats the whole work on each). A value made on the
//! mesh has a copy on every mesh device of `bytes / pieces` of its own sharding, and so
//! does a split weight (a constant with a sharding) used on the mesh. A
//! collective (`all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`) on the mesh waits for its operand on every mesh
//! device (a barrier), then occupies every link direction of its rings for
//! [`CostModel::collective_time`], and for as long every mesh device that does not overlap
//! transfers with compute ([`crate::Device::overlap`] false); a device that overlaps them
//! runs its next ops meanwhile, as it does beside any transfer. Its result is usable when
//! the rings (and the devices it occupies) are done. Between the
//! mesh and single devices: a value moved onto the mesh is sent to every mesh device, each
//! receiving its piece (`bytes / pieces` of the value's sharding) from where the value is;
//! a whole (unsplit) value goes to the mesh's first device, and to each other one from
//! there when that transfer is faster than the one from the source (a broadcast over the
//! mesh's links when the source's are slower). A mesh value used off the mesh (or as a graph output) is moved from the mesh's
//! first device with the size of the copy there. That is exact for replicated values, which
//! is what a sharding pass hands off the mesh (it all-gathers first); for a value still
//! sharded it undercounts the gather.
//!
//! **Order.** Each device runs the ops placed on it in graph body order (a scheduling pass
//! decides that order). In a stream of samples each sample keeps that order, and an idle
//! device starts the ready op of the earliest sample.
//!
//! **Steps carry their state.** In a stream of a training step's samples (steps), a state's
//! next value is the next step's state, written in place: every op that reads a state input
//! waits, in step `s + 1`, for the op that made its next value in step `s`. A step whose
//! first ops read the parameters its last ops update therefore starts when the previous one
//! ends, and its period is its latency (synchronous training, as GPipe and PyTorch run it);
//! only what the dataflow allows overlaps. A state read on a device where its update does not
//! run (a replica's copy of a parameter) is refreshed: after the update, a transfer of the new
//! value to that device, which its readers in the next step wait for (and which the step's
//! own latency and link loads include).
//!
//! **Results** ([`SimReport`]):
//! - the latency of one sample: the time until its last op and its output transfers are done;
//! - the steady-state period and throughput of a stream: `samples` samples queued at time 0
//!   (by default as many as [`steady_samples`] says the steady state needs), the period
//!   measured between the completions of the middle and the last sample, and never below the
//!   busiest resource's time per sample (a short stream can finish in a bunch before its
//!   bottleneck saturates);
//! - busy time per device and per link direction for one sample, and the resource whose busy
//!   time bounds the period from below;
//! - peak memory per device for one sample: resident weights plus the live values at the worst
//!   moment. A value is allocated on its device when the op producing it (or the transfer
//!   bringing it) starts, and freed when the last op or transfer using it there finishes;
//!   graph outputs stay on the host (a constant output is a weight there). Views (a
//!   `reshape`) count as copies; a `transfer` op's result is the copy its transfer brought,
//!   not another one. A sample whose byte counts do not fit in 64 bits is an error.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt;

use crate::cost::{CostModel, OpTime};
use crate::ir::{Graph, Mesh, Op, OpId, ValueDef, ValueId};
use crate::{TargetError, WorkError};

/// Why a graph cannot be simulated.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An op's work could not be computed (a symbolic shape).
    #[error(transparent)]
    Work(#[from] WorkError),
    /// A route or device problem in the target.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// An op has no device and no default was given.
    #[error("{op} has no device; place it (device(\"...\")) or choose a default device")]
    Unplaced {
        /// The op, described.
        op: String,
    },
    /// An op's device does not exist in the target.
    #[error("{op} is placed on `{device}`, which target `{target}` does not have")]
    UnknownDevice {
        /// The op, described.
        op: String,
        /// The device named.
        device: String,
        /// The target.
        target: String,
    },
    /// An op is placed on a device that cannot run it.
    #[error("{op} cannot run on {device}: {reason}")]
    Unsupported {
        /// The op, described.
        op: String,
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
    /// The stream has more task instances (tasks times samples) than the simulator numbers.
    #[error("{tasks} tasks times {samples} samples is too long a stream; simulate fewer samples")]
    StreamTooLong {
        /// Tasks per sample (ops and transfers).
        tasks: usize,
        /// Samples asked for.
        samples: usize,
    },
    /// A value's size is not static.
    #[error("value {value} has a symbolic shape {ty}; bind it with --input-shape")]
    Symbolic {
        /// The value handle.
        value: String,
        /// Its type.
        ty: String,
    },
    /// A size in bytes does not fit in 64 bits.
    #[error("{what} is too large: its size in bytes does not fit in 64 bits")]
    TooLarge {
        /// What, described (`value v3 of type f32[...]`, `the memory used on chip0`).
        what: String,
    },
}

/// `matmul op3 at "fc1/MatMul"`: an op for error messages.
pub fn describe_op(graph: &Graph, op: OpId) -> String {
    let data = graph.op(op);
    match &data.loc {
        Some(loc) => format!("{} {op} at {loc:?}", data.op.name()),
        None => format!("{} {op}", data.op.name()),
    }
}

/// The placement of an op that runs on the graph's first mesh (`device("@name")`); the
/// graph's mesh `k` is [`on_mesh`]`(k)`, counting down from it.
pub const ON_MESH: usize = usize::MAX - 1;

/// The placement of an op that runs on the graph's mesh number `k` (`Graph::meshes`).
pub fn on_mesh(k: usize) -> usize {
    ON_MESH - k
}

/// The index in `Graph::meshes` of the mesh a placement `d` names, if it names one of a
/// graph with `meshes` meshes.
pub fn mesh_slot(d: usize, meshes: usize) -> Option<usize> {
    (d <= ON_MESH && ON_MESH - d < meshes).then(|| ON_MESH - d)
}

/// The device of every op (indexed by [`OpId::index`]), from the graph's `device(...)`
/// annotations; ops without one go to `default` (a device index) or are an error. An op on
/// the graph's mesh `k` (`device("@name")`) gets [`on_mesh`]`(k)`.
pub fn placement_from_graph(
    graph: &Graph,
    spec: &crate::TargetSpec,
    default: Option<usize>,
) -> Result<Vec<usize>, SimError> {
    let mut placement = vec![usize::MAX; graph.num_op_handles()];
    let index = spec.device_map();
    for &op in graph.ops() {
        let data = graph.op(op);
        let mesh = data
            .device
            .as_deref()
            .and_then(|d| d.strip_prefix('@'))
            .and_then(|name| graph.meshes.iter().position(|m| m.name == name));
        placement[op.index()] = match (&data.device, mesh) {
            (_, Some(k)) => on_mesh(k),
            (Some(name), None) => {
                index
                    .get(name.as_str())
                    .copied()
                    .ok_or_else(|| SimError::UnknownDevice {
                        op: describe_op(graph, op),
                        device: name.clone(),
                        target: spec.name.clone(),
                    })?
            }
            (None, None) if matches!(data.op, Op::Const(_)) => default.unwrap_or(0),
            (None, None) => default.ok_or_else(|| SimError::Unplaced {
                op: describe_op(graph, op),
            })?,
        };
    }
    Ok(placement)
}

/// The target device index of each device of `mesh`, in the mesh's order.
pub fn mesh_devices(mesh: &Mesh, spec: &crate::TargetSpec) -> Result<Vec<usize>, TargetError> {
    mesh.devices
        .iter()
        .map(|d| {
            spec.device_index(d)
                .ok_or_else(|| TargetError::UnknownDevice {
                    target: spec.name.clone(),
                    device: d.clone(),
                })
        })
        .collect()
}

/// The number of pieces `v`'s sharding cuts it into (1 without a sharding or a mesh).
pub fn pieces(graph: &Graph, v: ValueId) -> u64 {
    match (graph.value_mesh(v), &graph.value(v).sharding) {
        (Some(m), Some(s)) => m.shard_count(s).max(1),
        _ => 1,
    }
}

/// The shard factor of an op on the mesh: the most pieces any operand or result is cut into.
pub fn shard_factor(graph: &Graph, op: OpId) -> u64 {
    let data = graph.op(op);
    data.operands
        .iter()
        .chain(&data.results)
        .map(|&v| pieces(graph, v))
        .max()
        .unwrap_or(1)
}

/// Simulation settings.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimOptions {
    /// Samples in the stream that measures throughput (at least 1); `None` (the default):
    /// as many as the steady state needs ([`steady_samples`]).
    pub samples: Option<usize>,
}

/// The shortest stream [`steady_samples`] runs.
pub const STEADY_MIN_SAMPLES: usize = 8;
/// The longest stream [`steady_samples`] runs.
pub const STEADY_MAX_SAMPLES: usize = 512;
/// Samples per sample in flight that [`steady_samples`] runs.
pub const STEADY_SAMPLES_PER_DEPTH: usize = 16;
/// Task instances (tasks times samples) past which [`steady_samples`] shortens the stream.
pub const STEADY_TASK_BUDGET: usize = 1 << 22;

/// The length of a stream whose period is the steady state's: [`STEADY_SAMPLES_PER_DEPTH`]
/// times the samples in flight (the latency of one sample over the busiest resource's time
/// per sample, rounded up), within [`STEADY_MIN_SAMPLES`]..=[`STEADY_MAX_SAMPLES`], and no
/// more than [`STEADY_TASK_BUDGET`] task instances allow (never fewer than the minimum).
/// With every sample queued at once, the completions of a stream only a few samples longer
/// than the pipeline is deep still carry its filling: on GPT-2 small over `gpu-8` (12
/// samples in flight) the period measured over 8, 16, 32, 64 and 512 samples was 151.7,
/// 203.2, 147.0, 140.7 and 136.6 us, the last equal to the busiest link's time per sample.
pub fn steady_samples(latency: f64, floor: f64, tasks: usize) -> usize {
    let depth = if floor > 0.0 && latency.is_finite() {
        (latency / floor)
            .ceil()
            .clamp(1.0, STEADY_MAX_SAMPLES as f64) as usize
    } else {
        1
    };
    let budget = (STEADY_TASK_BUDGET / tasks.max(1)).max(STEADY_MIN_SAMPLES);
    (STEADY_SAMPLES_PER_DEPTH * depth).clamp(STEADY_MIN_SAMPLES, STEADY_MAX_SAMPLES.min(budget))
}

/// Per-device results.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceReport {
    /// The device's name.
    pub name: String,
    /// Ops placed on it (`const` ops excluded).
    pub ops: usize,
    /// Seconds busy running ops, per sample.
    pub busy: f64,
    /// Bytes of weights resident on it.
    pub weights: u64,
    /// Peak bytes in use during one sample (weights included).
    pub peak_memory: u64,
    /// Its memory capacity in bytes.
    pub capacity: u64,
}

/// Per-link results, each direction separately (`a -> b` is forward).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkReport {
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Seconds busy per sample, `a -> b` then `b -> a`.
    pub busy: [f64; 2],
    /// Bytes carried per sample, `a -> b` then `b -> a`.
    pub bytes: [f64; 2],
}

/// What a simulation found.
#[derive(Clone, Debug, PartialEq)]
pub struct SimReport {
    /// Seconds from a sample's inputs on the host to its outputs on the host.
    pub latency: f64,
    /// Seconds between completions in the steady state of the stream.
    pub period: f64,
    /// Samples per second in the steady state (`1 / period`).
    pub throughput: f64,
    /// Samples simulated in the stream.
    pub samples: usize,
    /// The largest busy time of any device or link direction per sample: no schedule has a
    /// shorter period.
    pub bound_period: f64,
    /// The resource with that busy time (`chip0`, or `chip0 -> chip1`).
    pub bottleneck: String,
    /// Every device of the target, in target order.
    pub devices: Vec<DeviceReport>,
    /// Every link of the target, in target order.
    pub links: Vec<LinkReport>,
    /// Transfers per sample.
    pub transfers: usize,
}

/// What a span of a [`Trace`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// An op running on a device.
    Op(OpId),
    /// A value moved between devices, on one link direction of its route.
    Transfer(ValueId),
    /// A collective op's traffic on one link direction of its rings.
    Collective(OpId),
}

/// One interval of a [`Trace`]: a device running an op, or a link direction carrying data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Span {
    /// The sample (0-based) in the stream.
    pub sample: usize,
    /// Start, in seconds from the stream's start.
    pub start: f64,
    /// End, in seconds.
    pub end: f64,
    /// The device (an index into the spec's devices) for an op; the channel for traffic:
    /// see [`Span::channel`].
    pub lane: usize,
    /// What runs.
    pub kind: SpanKind,
}

impl Span {
    /// For traffic, the link (an index into the spec's links) and direction (`true`: from its
    /// `a` to its `b`); `None` for an op.
    pub fn channel(&self) -> Option<(usize, bool)> {
        match self.kind {
            SpanKind::Op(_) => None,
            _ => Some(CostModel::channel_link(self.lane)),
        }
    }
}

/// The timeline of a short stream: every op and every link direction's traffic, in start
/// order (ties in the order the simulator started them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    /// Samples in the stream.
    pub samples: usize,
    /// Every interval.
    pub spans: Vec<Span>,
}

/// Simulates a stream of `samples` samples of `graph` placed by `placement`, as [`simulate`]
/// does, and returns its timeline.
pub fn trace(
    graph: &Graph,
    cost: &CostModel<'_>,
    placement: &[usize],
    samples: usize,
) -> Result<Trace, SimError> {
    let plan = build(graph, cost, placement)?;
    let samples = stream_length(&plan, samples)?;
    let result = run(&plan, samples, false, true);
    let nt = plan.tasks.len();
    let mut spans = Vec::new();
    for &(inst, start) in &result.starts {
        let t = &plan.tasks[inst as usize % nt];
        let sample = inst as usize / nt;
        let end = start + t.seconds;
        match (t.kind, plan.origins[inst as usize % nt]) {
            (Kind::Op { device, .. }, Origin::Op(op)) => spans.push(Span {
                sample,
                start,
                end,
                lane: device as usize,
                kind: SpanKind::Op(op),
            }),
            (
                Kind::Transfer {
                    chan_start,
                    chan_end,
                },
                origin,
            ) => {
                let kind = match origin {
                    Origin::Op(op) => SpanKind::Collective(op),
                    Origin::Value(v) => SpanKind::Transfer(v),
                };
                for &c in &plan.channels[chan_start as usize..chan_end as usize] {
                    spans.push(Span {
                        sample,
                        start,
                        end,
                        lane: c as usize,
                        kind,
                    });
                }
            }
            (Kind::Op { .. }, Origin::Value(_)) => {}
        }
    }
    // A transfer that waits for its channels is decided before it starts.
    spans.sort_by(|a, b| a.start.total_cmp(&b.start));
    Ok(Trace { samples, spans })
}

/// The number of samples a stream of `samples` runs (at least 1), checked: task instances are
/// numbered in 32 bits across the stream.
fn stream_length(plan: &Plan, samples: usize) -> Result<usize, SimError> {
    let samples = samples.max(1);
    if plan
        .tasks
        .len()
        .checked_mul(samples)
        .is_none_or(|n| n > u32::MAX as usize)
    {
        return Err(SimError::StreamTooLong {
            tasks: plan.tasks.len(),
            samples,
        });
    }
    Ok(samples)
}

/// What made a task: an op (its run on one device, or a collective's link task), or the
/// transfer of a value.
#[derive(Clone, Copy, Debug)]
enum Origin {
    Op(OpId),
    Value(ValueId),
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Op { device: u32, pos: u32 },
    Transfer { chan_start: u32, chan_end: u32 },
}

#[derive(Clone, Debug)]
struct Task {
    kind: Kind,
    seconds: f64,
    /// Seconds its device stays busy after it (an op on a device that does not overlap
    /// transfers, sending what it made).
    tail: f64,
    succ_start: u32,
    succ_end: u32,
    npred: u32,
    /// Copies allocated when the task starts.
    alloc_start: u32,
    alloc_end: u32,
    /// Copies released when the task finishes.
    free_start: u32,
    free_end: u32,
}

/// A value held on one device.
#[derive(Clone, Debug)]
struct Copy {
    device: u32,
    bytes: u64,
    /// Tasks that must finish before it is freed; `u32::MAX` for pinned (outputs on host).
    uses: u32,
}

/// The graph compiled into tasks, reusable across runs.
struct Plan {
    tasks: Vec<Task>,
    /// What made each task.
    origins: Vec<Origin>,
    succs: Vec<u32>,
    channels: Vec<u32>,
    /// Bytes each entry of `channels` carries for its task.
    chan_bytes: Vec<f64>,
    copies: Vec<Copy>,
    allocs: Vec<u32>,
    frees: Vec<u32>,
    /// Copies present at the start of a sample (graph inputs on the host).
    initial: Vec<u32>,
    weights: Vec<u64>,
    /// (writer, reader) task pairs across samples: the reader in sample `s + 1` waits for the
    /// writer in sample `s` (a state's next value, read as the state by the next step).
    carried: Vec<(u32, u32)>,
    num_devices: usize,
    num_channels: usize,
}

/// Simulates `graph` placed by `placement` (a device index per op index, as
/// [`placement_from_graph`] gives) on the cost model's target.
pub fn simulate(
    graph: &Graph,
    cost: &CostModel<'_>,
    placement: &[usize],
    options: &SimOptions,
) -> Result<SimReport, SimError> {
    let plan = build(graph, cost, placement)?;
    let single = run(&plan, 1, true, false);
    let spec = cost.spec();
    let mut ops = vec![0usize; spec.devices.len()];
    for t in &plan.tasks {
        if let Kind::Op { device, .. } = t.kind {
            ops[device as usize] += 1;
        }
    }
    let devices: Vec<DeviceReport> = spec
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| DeviceReport {
            name: d.name.clone(),
            ops: ops[i],
            busy: single.device_busy[i],
            weights: plan.weights[i],
            peak_memory: plan.weights[i] + single.peak[i],
            capacity: d.memory_bytes,
        })
        .collect();
    let links: Vec<LinkReport> = spec
        .links
        .iter()
        .enumerate()
        .map(|(li, l)| LinkReport {
            a: l.a.clone(),
            b: l.b.clone(),
            busy: [single.channel_busy[2 * li], single.channel_busy[2 * li + 1]],
            bytes: [
                single.channel_bytes[2 * li],
                single.channel_bytes[2 * li + 1],
            ],
        })
        .collect();
    let mut bound_period = 0.0;
    let mut bottleneck = String::new();
    for d in &devices {
        if d.busy > bound_period {
            bound_period = d.busy;
            bottleneck = d.name.clone();
        }
    }
    for l in &links {
        for (dir, busy) in l.busy.iter().enumerate() {
            if *busy > bound_period {
                bound_period = *busy;
                bottleneck = if dir == 0 {
                    format!("{} -> {}", l.a, l.b)
                } else {
                    format!("{} -> {}", l.b, l.a)
                };
            }
        }
    }
    let samples = options
        .samples
        .unwrap_or_else(|| steady_samples(single.latency(), bound_period, plan.tasks.len()));
    let samples = stream_length(&plan, samples)?;
    let measured = if samples == 1 {
        single.latency()
    } else {
        let stream = run(&plan, samples, false, false);
        let mut done = stream.sample_done;
        done.sort_by(f64::total_cmp);
        let h = (samples - 1) / 2;
        (done[samples - 1] - done[h]) / (samples - 1 - h) as f64
    };
    // A short stream whose latency is long next to its busiest resource's load finishes its
    // samples in a bunch before that resource saturates; no steady state is faster than the
    // bound, so the period is never reported below it.
    let period = measured.max(bound_period);
    // A collective's link task and its per-device events move no value: not transfers.
    let transfers = plan
        .tasks
        .iter()
        .zip(&plan.origins)
        .filter(|(t, o)| matches!(t.kind, Kind::Transfer { .. }) && matches!(o, Origin::Value(_)))
        .count();
    Ok(SimReport {
        latency: single.latency(),
        period,
        throughput: if period > 0.0 {
            1.0 / period
        } else {
            f64::INFINITY
        },
        samples,
        bound_period,
        bottleneck,
        devices,
        links,
        transfers,
    })
}

/// The bytes of one device's piece of the tensor a collective moves: an `all-gather`'s result,
/// any other collective's operand (0 for an op with neither).
pub fn collective_piece_bytes(graph: &Graph, op: OpId) -> Result<f64, SimError> {
    let data = graph.op(op);
    let v = if matches!(data.op, Op::AllGather { .. }) {
        data.results.first()
    } else {
        data.operands.first()
    };
    Ok(match v {
        Some(&v) => value_bytes(graph, v)? as f64 / pieces(graph, v) as f64,
        None => 0.0,
    })
}

fn value_bytes(graph: &Graph, v: ValueId) -> Result<u64, SimError> {
    let ty = graph.ty(v);
    ty.size_bytes().ok_or_else(|| {
        if ty.static_dims().is_some() {
            SimError::TooLarge {
                what: format!("value {v} of type {ty}"),
            }
        } else {
            SimError::Symbolic {
                value: v.to_string(),
                ty: ty.to_string(),
            }
        }
    })
}

/// Where a value can be found on a device: the task that makes it available there (none for
/// a graph input on the host) and its copy.
#[derive(Clone, Copy)]
struct Avail {
    device: usize,
    task: Option<u32>,
    copy: u32,
}

/// Tasks, copies and their relations while the plan is built.
#[derive(Default)]
struct Builder {
    tasks: Vec<Task>,
    origins: Vec<Origin>,
    preds: Vec<Vec<u32>>,
    allocs: Vec<Vec<u32>>,
    frees: Vec<Vec<u32>>,
    copies: Vec<Copy>,
    channels: Vec<u32>,
    chan_bytes: Vec<f64>,
    /// Where each value is available, by value index; the first entry is the original.
    avail: Vec<Vec<Avail>>,
    /// A task that must also finish before a value is usable (a collective's link task).
    also: Vec<Option<u32>>,
    /// Every value transfer: (its task, the task that made the copy it moves, from, to).
    moves: Vec<(u32, Option<u32>, usize, usize)>,
    /// A collective's copy on each device that overlaps it with compute: (the event task
    /// that marks it ready there, the device). Such a device runs no op task for it.
    events: Vec<(u32, usize)>,
}

impl Builder {
    fn task(&mut self, kind: Kind, seconds: f64, origin: Origin) -> u32 {
        self.origins.push(origin);
        self.tasks.push(Task {
            kind,
            seconds,
            tail: 0.0,
            succ_start: 0,
            succ_end: 0,
            npred: 0,
            alloc_start: 0,
            alloc_end: 0,
            free_start: 0,
            free_end: 0,
        });
        self.preds.push(Vec::new());
        self.allocs.push(Vec::new());
        self.frees.push(Vec::new());
        (self.tasks.len() - 1) as u32
    }

    fn copy(&mut self, device: usize, bytes: u64) -> u32 {
        self.copies.push(Copy {
            device: device as u32,
            bytes,
            uses: 0,
        });
        (self.copies.len() - 1) as u32
    }

    /// The copy of `v` on device `d`, adding a transfer from the original if there is none;
    /// the transfer carries `bytes`, or the original's size when `None`.
    fn fetch(
        &mut self,
        v: ValueId,
        d: usize,
        bytes: Option<u64>,
        cost: &CostModel<'_>,
    ) -> Result<Avail, SimError> {
        self.fetch_from(v, d, bytes, None, cost)
    }

    /// As [`Builder::fetch`], moving the copy `from` (default: the original).
    fn fetch_from(
        &mut self,
        v: ValueId,
        d: usize,
        bytes: Option<u64>,
        from: Option<Avail>,
        cost: &CostModel<'_>,
    ) -> Result<Avail, SimError> {
        if let Some(a) = self.avail[v.index()].iter().find(|a| a.device == d) {
            return Ok(*a);
        }
        let src = from.unwrap_or(self.avail[v.index()][0]);
        let bytes = bytes.unwrap_or(self.copies[src.copy as usize].bytes);
        let seconds = cost.transfer_time(src.device, d, bytes as f64)?;
        let chan_start = self.channels.len() as u32;
        self.channels
            .extend(cost.channels(src.device, d)?.iter().map(|&c| c as u32));
        self.chan_bytes.resize(self.channels.len(), bytes as f64);
        let kind = Kind::Transfer {
            chan_start,
            chan_end: self.channels.len() as u32,
        };
        let t = self.task(kind, seconds, Origin::Value(v));
        if let Some(p) = src.task {
            self.preds[t as usize].push(p);
        }
        if let Some(p) = self.also[v.index()] {
            self.preds[t as usize].push(p);
        }
        self.moves.push((t, src.task, src.device, d));
        let copy = self.copy(d, bytes);
        self.allocs[t as usize].push(copy);
        self.frees[t as usize].push(src.copy);
        self.copies[src.copy as usize].uses += 1;
        let a = Avail {
            device: d,
            task: Some(t),
            copy,
        };
        self.avail[v.index()].push(a);
        Ok(a)
    }
}

fn build(graph: &Graph, cost: &CostModel<'_>, placement: &[usize]) -> Result<Plan, SimError> {
    let spec = cost.spec();
    let n_dev = spec.devices.len();
    let host = spec
        .device_index(&spec.host)
        .ok_or_else(|| TargetError::UnknownDevice {
            target: spec.name.clone(),
            device: spec.host.clone(),
        })?;
    let mut b = Builder {
        avail: vec![Vec::new(); graph.num_values()],
        ..Builder::default()
    };
    let mut is_const = vec![false; graph.num_values()];
    let mut initial = Vec::new();
    let mut weights = vec![0u64; n_dev];
    let mut resident: BTreeSet<(usize, usize)> = BTreeSet::new();
    let mut last_on_device: Vec<Option<u32>> = vec![None; n_dev];
    let mut pos = vec![0u32; n_dev];

    // State inputs (a training step's parameters and optimizer state) are resident where
    // they are used, like weights; their next values are written in place (no buffer of
    // their own) and stay there.
    let (state_inputs, state_nexts) = graph.state_values();
    let mut resident_state: BTreeSet<(usize, ValueId)> = BTreeSet::new();
    for &input in graph.inputs() {
        if state_inputs.contains(&input) {
            is_const[input.index()] = true;
            continue;
        }
        let copy = b.copy(host, value_bytes(graph, input)?);
        initial.push(copy);
        b.avail[input.index()].push(Avail {
            device: host,
            task: None,
            copy,
        });
    }
    // Each mesh some op runs on, with its target devices.
    let n_meshes = graph.meshes.len();
    let mut meshes: Vec<Option<(&Mesh, Vec<usize>)>> = vec![None; n_meshes];
    for &o in graph.ops() {
        if let Some(k) = placement
            .get(o.index())
            .and_then(|&d| mesh_slot(d, n_meshes))
            && meshes[k].is_none()
        {
            let m = &graph.meshes[k];
            meshes[k] = Some((m, mesh_devices(m, spec)?));
        }
    }
    b.also = vec![None; graph.num_values()];
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            for &r in &data.results {
                is_const[r.index()] = true;
            }
            continue;
        }
        let d = placement.get(op.index()).copied().unwrap_or(usize::MAX);
        let unsupported = |reason: String, d: usize| SimError::Unsupported {
            op: describe_op(graph, op),
            device: spec.devices[d].name.clone(),
            reason,
        };
        // (device, seconds) of each task the op becomes.
        let mut runs: Vec<(usize, f64)> = Vec::new();
        // The link task of a collective: its channels and seconds.
        let mut link_task: Option<(Vec<(usize, f64)>, f64)> = None;
        let mesh = mesh_slot(d, n_meshes).and_then(|k| meshes[k].as_ref());
        let on_a_mesh = mesh.is_some();
        if let Some((m, devs)) = mesh {
            if data.op.collective_axes().is_some() {
                let bytes = collective_piece_bytes(graph, op)?;
                let seconds = cost.collective_time(&data.op, m, devs, bytes)?;
                runs.extend(devs.iter().map(|&dev| (dev, seconds)));
                // The bytes its rings send over each channel (a hierarchical all-reduce's
                // rings within the nodes and across them).
                let chans = cost.collective_loads(&data.op, m, devs, bytes)?;
                link_task = Some((chans, seconds));
            } else {
                let parts = shard_factor(graph, op);
                for &dev in devs {
                    match cost.op_time_sharded(graph, op, dev, parts)? {
                        OpTime::Time { seconds, .. } => runs.push((dev, seconds)),
                        OpTime::Unsupported(reason) => return Err(unsupported(reason, dev)),
                    }
                }
            }
        } else {
            if d >= n_dev {
                return Err(SimError::Unplaced {
                    op: describe_op(graph, op),
                });
            }
            match cost.op_time(graph, op, d)? {
                OpTime::Time { seconds, .. } => runs.push((d, seconds)),
                OpTime::Unsupported(reason) => return Err(unsupported(reason, d)),
            }
        }
        // A collective waits for its operand on every device (and its link task with it).
        let mut barrier: Vec<u32> = Vec::new();
        if link_task.is_some() {
            for &v in &data.operands {
                if is_const[v.index()] {
                    continue;
                }
                for &(dev, _) in &runs {
                    let a = b.fetch(
                        v,
                        dev,
                        Some(value_bytes(graph, v)? / pieces(graph, v)),
                        cost,
                    )?;
                    barrier.extend(a.task);
                }
                barrier.extend(b.also[v.index()]);
            }
        }
        let link = match link_task {
            Some((chans, seconds)) => {
                let chan_start = b.channels.len() as u32;
                b.channels.extend(chans.iter().map(|&(c, _)| c as u32));
                b.chan_bytes.extend(chans.iter().map(|&(_, bytes)| bytes));
                let kind = Kind::Transfer {
                    chan_start,
                    chan_end: b.channels.len() as u32,
                };
                let t = b.task(kind, seconds, Origin::Op(op));
                b.preds[t as usize].extend(&barrier);
                Some(t)
            }
            None => None,
        };
        for &(dev, seconds) in &runs {
            let t = match link {
                // A collective on a device that overlaps transfers with compute leaves the
                // device free: its copy there is ready when the link task ends (an event,
                // not an op in the device's order).
                Some(l) if spec.devices[dev].overlap => {
                    let at = b.channels.len() as u32;
                    let kind = Kind::Transfer {
                        chan_start: at,
                        chan_end: at,
                    };
                    let t = b.task(kind, 0.0, Origin::Op(op));
                    b.preds[t as usize].push(l);
                    b.events.push((t, dev));
                    t
                }
                _ => {
                    let t = b.task(
                        Kind::Op {
                            device: dev as u32,
                            pos: pos[dev],
                        },
                        seconds,
                        Origin::Op(op),
                    );
                    pos[dev] += 1;
                    if let Some(prev) = last_on_device[dev] {
                        b.preds[t as usize].push(prev);
                    }
                    last_on_device[dev] = Some(t);
                    t
                }
            };
            b.preds[t as usize].extend(&barrier);
            let mut seen: Vec<ValueId> = Vec::with_capacity(data.operands.len());
            let mut received: Option<u32> = None;
            for &v in &data.operands {
                if seen.contains(&v) {
                    continue;
                }
                seen.push(v);
                if is_const[v.index()] {
                    if let ValueDef::Result(cop, _) = graph.value(v).def
                        && let Op::Const(c) = graph.op(cop).op
                        && resident.insert((dev, c.index()))
                    {
                        // On the mesh a split weight is resident as its piece only.
                        let parts = if on_a_mesh { pieces(graph, v) } else { 1 };
                        weights[dev] += graph.constant(c).ty.size_bytes().unwrap_or(0) / parts;
                    }
                    if state_inputs.contains(&v) && resident_state.insert((dev, v)) {
                        let parts = if on_a_mesh { pieces(graph, v) } else { 1 };
                        weights[dev] += value_bytes(graph, v)? / parts;
                    }
                    continue;
                }
                let a = match mesh {
                    Some((_, devs)) => {
                        let piece = value_bytes(graph, v)? / pieces(graph, v);
                        if pieces(graph, v) == 1 && dev != devs[0] {
                            // A whole value: through the mesh's first device when faster.
                            let first = b.fetch(v, devs[0], Some(piece), cost)?;
                            let src = b.avail[v.index()][0].device;
                            let relay = cost.transfer_time(first.device, dev, piece as f64)?;
                            let direct = cost.transfer_time(src, dev, piece as f64)?;
                            let via = (relay < direct).then_some(first);
                            b.fetch_from(v, dev, Some(piece), via, cost)?
                        } else {
                            b.fetch(v, dev, Some(piece), cost)?
                        }
                    }
                    _ => b.fetch(v, dev, None, cost)?,
                };
                if let Some(p) = a.task {
                    b.preds[t as usize].push(p);
                }
                if let Some(p) = b.also[v.index()] {
                    b.preds[t as usize].push(p);
                }
                if matches!(data.op, Op::Transfer { .. }) {
                    // A `transfer` op is the arrival of its operand: its result is that copy,
                    // freed after the result's last use, not a second buffer.
                    received = Some(a.copy);
                    continue;
                }
                b.frees[t as usize].push(a.copy);
                b.copies[a.copy as usize].uses += 1;
            }
            if let (Some(copy), [r]) = (received, data.results.as_slice()) {
                b.avail[r.index()].push(Avail {
                    device: dev,
                    task: Some(t),
                    copy,
                });
                continue;
            }
            for &r in &data.results {
                let bytes = if state_nexts.contains(&r) {
                    0
                } else if on_a_mesh {
                    value_bytes(graph, r)? / pieces(graph, r)
                } else {
                    value_bytes(graph, r)?
                };
                let copy = b.copy(dev, bytes);
                b.allocs[t as usize].push(copy);
                b.avail[r.index()].push(Avail {
                    device: dev,
                    task: Some(t),
                    copy,
                });
                if link.is_some() {
                    b.also[r.index()] = link;
                }
            }
        }
    }
    for &out in graph.outputs() {
        if state_nexts.contains(&out) {
            continue;
        }
        if is_const[out.index()] {
            // A constant output is held on the host like any weight used there.
            if let ValueDef::Result(cop, _) = graph.value(out).def
                && let Op::Const(c) = graph.op(cop).op
                && resident.insert((host, c.index()))
            {
                weights[host] += graph.constant(c).ty.size_bytes().unwrap_or(0);
            }
            continue;
        }
        let a = b.fetch(out, host, None, cost)?;
        b.copies[a.copy as usize].uses = u32::MAX;
    }

    // Every byte count the run adds up on a device (weights plus every copy ever held
    // there) must fit in a u64, so that live and peak memory cannot overflow.
    let mut total = weights.clone();
    for c in &b.copies {
        let d = c.device as usize;
        total[d] = total[d]
            .checked_add(c.bytes)
            .ok_or_else(|| SimError::TooLarge {
                what: format!("the memory used on {}", spec.devices[d].name),
            })?;
    }

    let carried = carry_state(graph, cost, &mut b)?;
    occupy_devices(&mut b, spec);

    // Flatten successor lists and per-task copy lists.
    let Builder {
        mut tasks,
        origins,
        mut preds,
        allocs,
        frees,
        copies,
        channels,
        chan_bytes,
        ..
    } = b;
    let mut succ_lists: Vec<Vec<u32>> = vec![Vec::new(); tasks.len()];
    for (t, ps) in preds.iter_mut().enumerate() {
        ps.sort_unstable();
        ps.dedup();
        tasks[t].npred = ps.len() as u32;
        for &p in ps.iter() {
            succ_lists[p as usize].push(t as u32);
        }
    }
    let mut succs = Vec::new();
    let mut flat_allocs = Vec::new();
    let mut flat_frees = Vec::new();
    for (t, task) in tasks.iter_mut().enumerate() {
        task.succ_start = succs.len() as u32;
        succs.extend_from_slice(&succ_lists[t]);
        task.succ_end = succs.len() as u32;
        task.alloc_start = flat_allocs.len() as u32;
        flat_allocs.extend_from_slice(&allocs[t]);
        task.alloc_end = flat_allocs.len() as u32;
        task.free_start = flat_frees.len() as u32;
        flat_frees.extend_from_slice(&frees[t]);
        task.free_end = flat_frees.len() as u32;
    }
    Ok(Plan {
        tasks,
        origins,
        succs,
        channels,
        chan_bytes,
        copies,
        allocs: flat_allocs,
        frees: flat_frees,
        initial,
        weights,
        carried,
        num_devices: n_dev,
        num_channels: cost.num_channels(),
    })
}

/// The dependencies between consecutive samples of a training step: a state's next value is
/// written in place, and the next sample (the next step) reads it. Every op task that reads a
/// state input waits, in sample `s + 1`, for the op task that made its next value in sample
/// `s` on its device; a reader on a device where no writer runs waits for a refresh, a
/// transfer of the new value from the (first) writer's device after it, made here once per
/// state and device (a replica's copy of a parameter updated elsewhere). Returns the
/// (writer or refresh, reader) task pairs. A writer or reader that is a collective on devices
/// that overlap it with compute counts as the event marking its copy ready on each device.
fn carry_state(
    graph: &Graph,
    cost: &CostModel<'_>,
    b: &mut Builder,
) -> Result<Vec<(u32, u32)>, SimError> {
    let mut carried: Vec<(u32, u32)> = Vec::new();
    if graph.state.is_empty() {
        return Ok(carried);
    }
    let names = tessera_ir::text::output_names(graph);
    // Op tasks by graph op, with their devices.
    let mut op_tasks: BTreeMap<OpId, Vec<(u32, usize)>> = BTreeMap::new();
    for (t, (task, origin)) in b.tasks.iter().zip(&b.origins).enumerate() {
        if let (Kind::Op { device, .. }, Origin::Op(op)) = (task.kind, origin) {
            op_tasks
                .entry(*op)
                .or_default()
                .push((t as u32, device as usize));
        }
    }
    // A collective (an all-gather of a state's next value off a mesh, say) is on its devices
    // as the events that mark its copies ready.
    for &(t, device) in &b.events {
        if let Origin::Op(op) = b.origins[t as usize] {
            op_tasks.entry(op).or_default().push((t, device));
        }
    }
    for tasks in op_tasks.values_mut() {
        tasks.sort_unstable();
    }
    let mut readers: BTreeMap<ValueId, Vec<(u32, usize)>> = BTreeMap::new();
    for &op in graph.ops() {
        for v in graph.op(op).operands.iter().collect::<BTreeSet<_>>() {
            readers
                .entry(*v)
                .or_default()
                .extend(op_tasks.get(&op).into_iter().flatten().copied());
        }
    }
    for slot in &graph.state {
        let (Some(&input), Some(k)) = (
            graph.inputs().get(slot.input),
            names.iter().position(|n| *n == slot.next),
        ) else {
            continue;
        };
        let next = graph.outputs()[k];
        let ValueDef::Result(writer, _) = graph.value(next).def else {
            continue;
        };
        let writers = op_tasks.get(&writer).cloned().unwrap_or_default();
        let Some(&(first, from)) = writers.first() else {
            continue;
        };
        let mut refresh: BTreeMap<usize, u32> = BTreeMap::new();
        for &(r, device) in readers.get(&input).into_iter().flatten() {
            if let Some(&(w, _)) = writers.iter().find(|&&(_, d)| d == device) {
                carried.push((w, r));
                continue;
            }
            let t = match refresh.get(&device) {
                Some(&t) => t,
                None => {
                    let bytes = value_bytes(graph, input)?;
                    let seconds = cost.transfer_time(from, device, bytes as f64)?;
                    let chan_start = b.channels.len() as u32;
                    b.channels
                        .extend(cost.channels(from, device)?.iter().map(|&c| c as u32));
                    b.chan_bytes.resize(b.channels.len(), bytes as f64);
                    let kind = Kind::Transfer {
                        chan_start,
                        chan_end: b.channels.len() as u32,
                    };
                    let t = b.task(kind, seconds, Origin::Value(next));
                    b.preds[t as usize].push(first);
                    b.moves.push((t, Some(first), from, device));
                    refresh.insert(device, t);
                    t
                }
            };
            carried.push((t, r));
        }
    }
    carried.sort_unstable();
    carried.dedup();
    Ok(carried)
}

/// Devices that do not overlap transfers with compute ([`crate::Device::overlap`] false) are
/// busy with them, as `tessera-place`'s evaluator charges them: the op that made a value
/// keeps its device busy afterwards for the longest of the value's transfers (a `tail`, while
/// the links carry them), and the first op on a receiving device that reads a moved value
/// takes that transfer's time longer, receiving it before it computes.
fn occupy_devices(b: &mut Builder, spec: &crate::TargetSpec) {
    if spec.devices.iter().all(|d| d.overlap) {
        return;
    }
    // Per producing task, the longest transfer of each value it made (by transfer origin).
    let mut longest: BTreeMap<(u32, usize), f64> = BTreeMap::new();
    let mut receives: BTreeMap<u32, f64> = BTreeMap::new();
    for &(t, src, from, to) in &b.moves {
        let seconds = b.tasks[t as usize].seconds;
        if !spec.devices[from].overlap
            && let Some(p) = src
            && matches!(b.tasks[p as usize].kind, Kind::Op { .. })
        {
            let v = match b.origins[t as usize] {
                Origin::Value(v) => v.index(),
                Origin::Op(_) => continue,
            };
            let e = longest.entry((p, v)).or_insert(0.0);
            *e = e.max(seconds);
        }
        if !spec.devices[to].overlap {
            receives.insert(t, seconds);
        }
    }
    for ((p, _), seconds) in longest {
        b.tasks[p as usize].tail += seconds;
    }
    if receives.is_empty() {
        return;
    }
    // The first op (in task order, the body's) that waits for each received transfer.
    for i in 0..b.tasks.len() {
        if !matches!(b.tasks[i].kind, Kind::Op { .. }) {
            continue;
        }
        let mut extra = 0.0;
        for p in &b.preds[i] {
            if let Some(s) = receives.remove(p) {
                extra += s;
            }
        }
        b.tasks[i].seconds += extra;
    }
}

/// What one run measured.
#[derive(Clone, Debug)]
struct RunResult {
    sample_done: Vec<f64>,
    device_busy: Vec<f64>,
    channel_busy: Vec<f64>,
    channel_bytes: Vec<f64>,
    /// Peak live bytes per device (weights excluded); only when memory was tracked.
    peak: Vec<u64>,
    /// Every instance with its start time, in start order; only when traced.
    starts: Vec<(u32, f64)>,
}

impl RunResult {
    fn latency(&self) -> f64 {
        self.sample_done.iter().copied().fold(0.0, f64::max)
    }
}

/// Event kinds of [`run`], in the order events at one time are handled (by sequence).
const FINISH: u8 = 0;
const START: u8 = 1;
const FREE: u8 = 2;

/// Non-negative `f64` seconds as totally ordered bits (positive floats order like their bits).
fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

/// Runs `samples` samples of `plan`, all queued at time 0. Busy times and bytes are per
/// sample (divided by `samples`).
fn run(plan: &Plan, samples: usize, track_memory: bool, traced: bool) -> RunResult {
    let nt = plan.tasks.len();
    let mut npred: Vec<u32> = Vec::with_capacity(nt * samples);
    for _ in 0..samples {
        npred.extend(plan.tasks.iter().map(|t| t.npred));
    }
    // Readers of a state wait for the previous sample's writer; writers per task, in order.
    let mut carried_from: Vec<Vec<u32>> =
        vec![Vec::new(); if plan.carried.is_empty() { 0 } else { nt }];
    for &(w, r) in &plan.carried {
        carried_from[w as usize].push(r);
        for s in 1..samples {
            npred[s * nt + r as usize] += 1;
        }
    }
    // (time, sequence, instance or device, what: FINISH, START (of a transfer that waited for
    // its channels) or FREE (a device's tail ends; the third field is the device)).
    let mut events: BinaryHeap<Reverse<(u64, u64, u32, u8)>> = BinaryHeap::new();
    let mut seq: u64 = 0;
    // Per device: ready ops as (sample, position, instance), earliest sample first.
    let mut ready: Vec<BinaryHeap<Reverse<(u32, u32, u32)>>> =
        vec![BinaryHeap::new(); plan.num_devices];
    let mut idle = vec![true; plan.num_devices];
    let mut chan_free = vec![0.0f64; plan.num_channels];
    let mut device_busy = vec![0.0; plan.num_devices];
    let mut channel_busy = vec![0.0; plan.num_channels];
    let mut channel_bytes = vec![0.0; plan.num_channels];
    let mut sample_done = vec![0.0f64; samples];
    let mut uses: Vec<u32> = if track_memory {
        plan.copies.iter().map(|c| c.uses).collect()
    } else {
        Vec::new()
    };
    let mut live = vec![0u64; plan.num_devices];
    let mut peak = vec![0u64; plan.num_devices];
    let mut starts: Vec<(u32, f64)> = Vec::new();
    if track_memory {
        for &c in &plan.initial {
            let copy = &plan.copies[c as usize];
            live[copy.device as usize] += copy.bytes;
        }
        peak.clone_from(&live);
    }

    // Allocates the copies that instance `inst` makes.
    macro_rules! alloc {
        ($inst:expr) => {{
            let t = &plan.tasks[$inst as usize % nt];
            for &c in &plan.allocs[t.alloc_start as usize..t.alloc_end as usize] {
                let copy = &plan.copies[c as usize];
                let d = copy.device as usize;
                live[d] += copy.bytes;
                peak[d] = peak[d].max(live[d]);
            }
        }};
    }

    // Starts instance `inst` (sample `s`, task `t`), decided at `now`, at `begin` (later than
    // `now` for a transfer that waits for its channels).
    macro_rules! start {
        ($inst:expr, $now:expr, $begin:expr) => {{
            let inst: u32 = $inst;
            let t = &plan.tasks[inst as usize % nt];
            let now: f64 = $now;
            let begin: f64 = $begin;
            if traced {
                starts.push((inst, begin));
            }
            if track_memory {
                if begin > now {
                    // Its copies exist from its start: allocate them then.
                    events.push(Reverse((key(begin), seq, inst, START)));
                    seq += 1;
                } else {
                    alloc!(inst);
                }
            }
            events.push(Reverse((key(begin + t.seconds), seq, inst, FINISH)));
            seq += 1;
        }};
    }

    // Makes instance `inst` ready at `now`.
    macro_rules! make_ready {
        ($inst:expr, $now:expr) => {{
            let inst: u32 = $inst;
            let now: f64 = $now;
            let s = inst as usize / nt;
            let t = &plan.tasks[inst as usize % nt];
            match t.kind {
                Kind::Op { device, pos } => {
                    ready[device as usize].push(Reverse((s as u32, pos, inst)));
                }
                Kind::Transfer {
                    chan_start,
                    chan_end,
                } => {
                    let chans = &plan.channels[chan_start as usize..chan_end as usize];
                    let begin = chans
                        .iter()
                        .map(|&c| chan_free[c as usize])
                        .fold(now, f64::max);
                    let bytes = &plan.chan_bytes[chan_start as usize..chan_end as usize];
                    for (&c, &b) in chans.iter().zip(bytes) {
                        chan_free[c as usize] = begin + t.seconds;
                        channel_busy[c as usize] += t.seconds;
                        channel_bytes[c as usize] += b;
                    }
                    start!(inst, now, begin);
                }
            }
        }};
    }

    macro_rules! dispatch {
        ($d:expr, $now:expr) => {{
            let d: usize = $d;
            if idle[d]
                && let Some(Reverse((_, _, inst))) = ready[d].pop()
            {
                idle[d] = false;
                device_busy[d] += plan.tasks[inst as usize % nt].seconds;
                start!(inst, $now, $now);
            }
        }};
    }

    for s in 0..samples {
        for t in 0..nt {
            if npred[s * nt + t] == 0 {
                make_ready!((s * nt + t) as u32, 0.0);
            }
        }
    }
    for d in 0..plan.num_devices {
        dispatch!(d, 0.0);
    }
    while let Some(Reverse((bits, _, inst, what))) = events.pop() {
        if what == START {
            alloc!(inst);
            continue;
        }
        let now = f64::from_bits(bits);
        if what == FREE {
            // `inst` is a device whose tail ended.
            idle[inst as usize] = true;
            dispatch!(inst as usize, now);
            continue;
        }
        let s = inst as usize / nt;
        let t = &plan.tasks[inst as usize % nt];
        sample_done[s] = sample_done[s].max(now);
        if track_memory {
            for &c in &plan.allocs[t.alloc_start as usize..t.alloc_end as usize] {
                if uses[c as usize] == 0 {
                    let copy = &plan.copies[c as usize];
                    live[copy.device as usize] -= copy.bytes;
                }
            }
            for &c in &plan.frees[t.free_start as usize..t.free_end as usize] {
                let u = &mut uses[c as usize];
                if *u != u32::MAX {
                    *u -= 1;
                    if *u == 0 {
                        let copy = &plan.copies[c as usize];
                        live[copy.device as usize] -= copy.bytes;
                    }
                }
            }
        }
        let base = (s * nt) as u32;
        for &succ in &plan.succs[t.succ_start as usize..t.succ_end as usize] {
            let i = (base + succ) as usize;
            npred[i] -= 1;
            if npred[i] == 0 {
                make_ready!(base + succ, now);
            }
        }
        if s + 1 < samples
            && let Some(readers) = carried_from.get(inst as usize % nt)
        {
            let next = ((s + 1) * nt) as u32;
            for &r in readers {
                let i = (next + r) as usize;
                npred[i] -= 1;
                if npred[i] == 0 {
                    make_ready!(next + r, now);
                    if let Kind::Op { device, .. } = plan.tasks[r as usize].kind {
                        dispatch!(device as usize, now);
                    }
                }
            }
        }
        if let Kind::Op { device, .. } = t.kind {
            if t.tail > 0.0 {
                device_busy[device as usize] += t.tail;
                events.push(Reverse((key(now + t.tail), seq, device, FREE)));
                seq += 1;
            } else {
                idle[device as usize] = true;
                dispatch!(device as usize, now);
            }
        }
        // Ops made ready on other devices may be able to start now.
        for &succ in &plan.succs[t.succ_start as usize..t.succ_end as usize] {
            if let Kind::Op { device, .. } = plan.tasks[succ as usize].kind {
                dispatch!(device as usize, now);
            }
        }
    }
    let per = samples as f64;
    RunResult {
        sample_done,
        device_busy: device_busy.iter().map(|b| b / per).collect(),
        channel_busy: channel_busy.iter().map(|b| b / per).collect(),
        channel_bytes: channel_bytes.iter().map(|b| b / per).collect(),
        peak,
        starts,
    }
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "latency      {}", seconds(self.latency))?;
        writeln!(
            f,
            "throughput   {}samples/s (period {}, {} samples; bound {} on {})",
            rate(self.throughput),
            seconds(self.period),
            self.samples,
            seconds(self.bound_period),
            if self.bottleneck.is_empty() {
                "nothing"
            } else {
                &self.bottleneck
            }
        )?;
        writeln!(f, "transfers    {} per sample", self.transfers)?;
        self.write_tables(f)
    }
}

impl SimReport {
    /// The per-device table (ops, busy time, weights, peak memory, capacity; devices without
    /// ops or memory left out) and the link directions in use, as the summary prints them.
    pub fn write_tables(&self, f: &mut impl fmt::Write) -> fmt::Result {
        let w = self
            .devices
            .iter()
            .map(|d| d.name.len())
            .max()
            .unwrap_or(0)
            .max(6);
        writeln!(
            f,
            "{:w$}  {:>6}  {:>11}  {:>10}  {:>10}  {:>10}",
            "device", "ops", "busy", "weights", "peak mem", "capacity"
        )?;
        for d in &self.devices {
            if d.ops == 0 && d.peak_memory == 0 {
                continue;
            }
            writeln!(
                f,
                "{:w$}  {:>6}  {:>11}  {:>10}  {:>10}  {:>10}{}",
                d.name,
                d.ops,
                seconds(d.busy),
                bytes(d.weights),
                bytes(d.peak_memory),
                bytes(d.capacity),
                if d.peak_memory > d.capacity {
                    "  OVER CAPACITY"
                } else {
                    ""
                }
            )?;
        }
        let used: Vec<&LinkReport> = self
            .links
            .iter()
            .filter(|l| l.busy[0] > 0.0 || l.busy[1] > 0.0)
            .collect();
        if !used.is_empty() {
            writeln!(f, "link directions in use:")?;
            for l in used {
                for (dir, (from, to)) in [(&l.a, &l.b), (&l.b, &l.a)].into_iter().enumerate() {
                    if l.busy[dir] > 0.0 {
                        writeln!(
                            f,
                            "  {from} -> {to}: busy {}, {} per sample",
                            seconds(l.busy[dir]),
                            bytes(l.bytes[dir] as u64)
                        )?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Seconds with a unit that keeps three significant digits: `12.3 us`.
pub fn seconds(s: f64) -> String {
    let (v, unit) = if s == 0.0 {
        (0.0, "s")
    } else if s < 1e-6 {
        (s * 1e9, "ns")
    } else if s < 1e-3 {
        (s * 1e6, "us")
    } else if s < 1.0 {
        (s * 1e3, "ms")
    } else {
        (s, "s")
    };
    format!("{v:.3} {unit}")
}

/// Bytes in binary units with three significant digits: `512 B`, `3.91 KiB`, `32.0 MiB`.
pub fn bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", units[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", units[u])
    } else {
        format!("{v:.2} {}", units[u])
    }
}

/// A rate with three or four significant digits and an SI prefix: `8.51 M`, `912.3`.
pub fn rate(r: f64) -> String {
    if !r.is_finite() {
        return "unbounded".to_string();
    }
    for (scale, p) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if r >= scale {
            return format!("{:.3} {p}", r / scale);
        }
    }
    format!("{r:.3} ")
}
