//! Placement problems as data: the JSON schema ([`Problem`]) and its checked, indexed form
//! ([`Instance`]) that every solver works on.
//!
//! A problem is self-contained: it can be written by `tessera compile
//! --emit-placement-problem`, edited by hand, replayed and solved by `tessera place` with no
//! model or target at hand. The README's "Placement problems" section documents the schema
//! with an example; this module's types are its definition.
//!
//! **Model.**
//! - *Devices* run ops one at a time. A device's `kind` selects the op times that apply to it;
//!   `memory` is its capacity in bytes; `unsupported_ops` names op kinds it cannot run.
//! - *Routers* are nodes that only forward traffic (a switch).
//! - *Links* are full-duplex: each direction is a channel of `bandwidth` bytes per second
//!   after `latency` seconds. A transfer takes the route of fewest hops (then the widest, then
//!   the fastest, then file order: the same routes as the simulator, from
//!   [`tessera_targets::TargetSpec::route`]) and occupies every channel on it for
//!   `latency + bytes / narrowest bandwidth` seconds (cut-through).
//! - *Ops* are listed in a topological order (every edge goes forward). `time` maps device
//!   kinds to seconds; an op may run only on devices whose kind it lists and that do not list
//!   its `kind` as unsupported, and whose capacity is at least the op's own `memory`. `memory`
//!   is what the op keeps on its device (its weights and its outputs). `pin` fixes its device; ops sharing a `colocate` group share a device.
//! - *Edges* carry `bytes` from producer to consumer; `tensor` says which of the producer's
//!   results it is, so that two consumers of one tensor on one device receive it once.
//!   Received tensors also take memory on the receiving device.
//! - *Carried* state (a training step's): each names the ops that read a state and the op
//!   that writes its next value; a stream of runs waits for it from run to run.
//!
//! **Ranges** (those of [`tessera_targets::limits`], so that no sum a solver forms can
//! overflow): times and latencies are seconds in `[0, 1e6]`; bandwidths are bytes per second
//! in `[1, 1e18]`; memory capacities, op memory and edge bytes are at most 2^60. A problem has
//! at most [`MAX_NODES`] devices and routers and [`MAX_OP_DEVICE_PAIRS`] (op, device) pairs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tessera_targets::limits::{MAX_BYTES, MAX_RATE, MAX_SECONDS, MIN_RATE, is_rate, is_seconds};
use tessera_targets::{Device as TargetDevice, Link as TargetLink, TargetSpec};

pub use crate::split::Layout;

/// The schema version this build reads and writes.
pub const VERSION: u32 = 1;

/// The most devices and routers a problem may have together: the solvers keep tables per
/// pair of devices and a route tree per device.
pub const MAX_NODES: usize = 4096;

/// The most (op, device) pairs a problem may have: the solvers keep a table of them. The
/// (split, group device) pairs of the ops' splits count too.
pub const MAX_OP_DEVICE_PAIRS: usize = 1 << 27;

/// The most devices a device group may have: an all-to-all between two splits of a group
/// moves a block between every pair of its devices.
pub const MAX_GROUP_DEVICES: usize = 256;

/// A placement problem, as written to and read from JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Problem {
    /// The schema version ([`VERSION`]).
    pub version: u32,
    /// A name for reports (`model on target`).
    #[serde(default)]
    pub name: String,
    /// The devices that run ops.
    pub devices: Vec<Device>,
    /// Nodes that only forward traffic (switches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routers: Vec<String>,
    /// Full-duplex links between devices and routers.
    #[serde(default)]
    pub links: Vec<Link>,
    /// The ops, in a topological order.
    pub ops: Vec<OpSpec>,
    /// Data moving from one op to a later one.
    #[serde(default)]
    pub edges: Vec<Edge>,
    /// Groups of devices an op may run split over ([`OpSpec::splits`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<DeviceGroup>,
    /// State carried from one run to the next (a training step's parameters and optimizer
    /// state): the next run's readers wait for this run's writer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<Carried>,
}

/// A state carried between runs of the problem's graph: the ops that read it, and the op
/// that writes its next value. A stream of runs is then a cycle: run `k + 1`'s readers
/// start after run `k`'s writer ends, so the period is at least the longest path from a
/// reader to the writer ([`crate::bound`]'s `recurrence`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Carried {
    /// The state's name, for reports.
    #[serde(default)]
    pub name: String,
    /// The ops that read it (indices into [`Problem::ops`]).
    pub readers: Vec<usize>,
    /// The op that writes its next value (an index into [`Problem::ops`]).
    pub writer: usize,
}

/// Devices an op may run split over, in ring order: the collectives a split implies run as
/// rings through the devices in this order, each step over the route between neighbours.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceGroup {
    /// Unique name among the groups.
    pub name: String,
    /// Two or more distinct devices.
    pub devices: Vec<String>,
}

/// One way to run an op split over a device group: every device of the group runs its
/// share at the same time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSpec {
    /// The device group ([`Problem::groups`]).
    pub group: String,
    /// What is split, for reports (`batch`, `heads`, `hidden`, `vocab`, `channels`, ...).
    #[serde(default)]
    pub axis: String,
    /// Seconds of one device's share, per device kind (every device of the group needs its
    /// kind listed).
    pub time: BTreeMap<String, f64>,
    /// Bytes one device of the group keeps (its share of the weights and results).
    #[serde(default)]
    pub memory: u64,
    /// The layout each operand must arrive in, by operand index (`Edge::operand`): `R`
    /// (every device holds all of it) or `S<axis>` (split along that tensor axis). For an
    /// operand no edge brings (a weight, resident where it is used), how each device's copy is
    /// cut (its bytes are in `memory`).
    #[serde(default)]
    pub inputs: Vec<String>,
    /// The layout of each result, by result index (`Edge::tensor`): `R`, `S<axis>`, or `P`
    /// (every device holds a partial sum of the whole).
    #[serde(default)]
    pub outputs: Vec<String>,
}

/// A device of a placement problem.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    /// Unique name.
    pub name: String,
    /// The cost class: ops list their time per kind.
    pub kind: String,
    /// Memory capacity in bytes.
    pub memory: u64,
    /// Op kinds this device cannot run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_ops: Vec<String>,
    /// Whether it computes while its transfers run (default `true`). `false`: every
    /// transfer it sends or receives adds its time to the device's load (see
    /// [`crate::eval`]).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub overlap: bool,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// A full-duplex link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// One end (a device or router name).
    pub a: String,
    /// The other end.
    pub b: String,
    /// Bytes per second, each way.
    pub bandwidth: f64,
    /// Seconds before the first byte arrives.
    #[serde(default)]
    pub latency: f64,
}

impl From<&TargetLink> for Link {
    /// A target's link as a problem's link (the same ends, bandwidth and latency).
    fn from(l: &TargetLink) -> Link {
        Link {
            a: l.a.clone(),
            b: l.b.clone(),
            bandwidth: l.bandwidth,
            latency: l.latency,
        }
    }
}

/// An operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpSpec {
    /// Unique name (the model's node name where it has one).
    pub name: String,
    /// The op kind (`matmul`, `conv`, ...), matched against devices' `unsupported_ops`.
    #[serde(default)]
    pub kind: String,
    /// Seconds per device kind; a kind not listed cannot run the op.
    pub time: BTreeMap<String, f64>,
    /// Bytes the op keeps on its device (weights and outputs).
    #[serde(default)]
    pub memory: u64,
    /// Ops with the same group share a device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colocate: Option<String>,
    /// The device this op must run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
    /// More devices a pinned SPMD op (one sharded over a device mesh) runs on at the same
    /// time as on `pin`, each for its kind's `time` and holding `memory`; its tensors enter
    /// and leave through `pin`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spmd: Vec<String>,
    /// Ways to run the op split over a device group instead of whole on one device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitSpec>,
}

/// Data from one op to a later one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    /// The producer's index in `ops`.
    pub from: usize,
    /// The consumer's index in `ops` (greater than `from`).
    pub to: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// Which result of the producer (consumers of one tensor on one device share a copy).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tensor: u32,
    /// Which operand of the consumer it is (its layout under a split: [`SplitSpec::inputs`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub operand: u32,
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// Why a problem is not valid, or cannot be solved.
#[derive(Debug, thiserror::Error)]
pub enum ProblemError {
    /// The file could not be read or parsed.
    #[error("{file}: {message}")]
    File {
        /// The file.
        file: String,
        /// What went wrong (serde's message has line and column).
        message: String,
    },
    /// A field has a bad value.
    #[error("{at}: {message}")]
    Invalid {
        /// The field (`ops[3] (fc1/MatMul).time.gpu`).
        at: String,
        /// What is wrong.
        message: String,
    },
    /// No assignment respects the constraints (the message says which: memory over a
    /// capacity, an op no device may run, devices without a route between them, ...).
    #[error("infeasible: {0}")]
    Infeasible(String),
    /// A strategy gave no plan for a reason other than infeasibility: the problem is over
    /// its size limit, it does not model the objective, or its solver failed or hit a limit.
    #[error("{0}")]
    Unsolved(String),
}

/// A number for a message: `1e308`, not its 309 digits.
fn num(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-4..1e15).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

fn invalid(at: impl Into<String>, message: impl Into<String>) -> ProblemError {
    ProblemError::Invalid {
        at: at.into(),
        message: message.into(),
    }
}

impl Problem {
    /// Parses a problem from JSON text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Problem, ProblemError> {
        serde_json::from_str(text).map_err(|e| ProblemError::File {
            file: file.to_string(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a problem file.
    pub fn load(path: &Path) -> Result<Problem, ProblemError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ProblemError::File {
            file: file.clone(),
            message: e.to_string(),
        })?;
        Problem::parse(&text, &file)
    }

    /// The problem as pretty JSON with a final newline (deterministic: maps are ordered).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// A validated problem with dense tables: what the solvers use.
#[derive(Clone, Debug)]
pub struct Instance {
    /// The problem it was built from.
    pub problem: Problem,
    /// Number of ops.
    pub n: usize,
    /// Number of devices.
    pub d: usize,
    /// `time[o * d + k]`: seconds of op `o` on device `k`; infinite where it cannot run (kind
    /// not listed, unsupported, pinned elsewhere).
    pub time: Vec<f64>,
    /// Memory per op.
    pub memory: Vec<u64>,
    /// Capacity per device.
    pub capacity: Vec<u64>,
    /// Per device: whether it computes while its transfers run ([`Device::overlap`]).
    pub overlap: Vec<bool>,
    /// The colocation group of each op (an index into `groups`), if any.
    pub group_of: Vec<Option<usize>>,
    /// The members of each colocation group, in op order.
    pub groups: Vec<Vec<usize>>,
    /// Edges out of each op: indices into `problem.edges`.
    pub out_edges: Vec<Vec<usize>>,
    /// Edges into each op: indices into `problem.edges`.
    pub in_edges: Vec<Vec<usize>>,
    /// The distinct tensors (a producer's result, which all its consumers share): the tensor
    /// of each edge, numbered by producer and then by first edge in `out_edges`.
    pub tensor_of_edge: Vec<usize>,
    /// Each tensor's producer.
    pub tensor_from: Vec<usize>,
    /// Each tensor's bytes.
    pub tensor_bytes: Vec<u64>,
    /// `latency[a * d + b]`: route latency from device `a` to `b` (0 on the diagonal).
    pub latency: Vec<f64>,
    /// `inv_bandwidth[a * d + b]`: seconds per byte on the route's narrowest link.
    pub inv_bandwidth: Vec<f64>,
    /// The routes' labels: (the label before, the directed channel of this hop), one tree per
    /// source device; see [`Instance::route_channels`].
    route_labels: Vec<(u32, u32)>,
    /// `route_last[a * d + b]`: the route's last label (`u32::MAX` when `a == b` or no
    /// route exists).
    route_last: Vec<u32>,
    /// Hops between devices.
    pub hops: Vec<usize>,
    /// Number of channels (two per link).
    pub num_channels: usize,
    /// Load every plan has on each device: the `spmd` devices of pinned SPMD ops.
    pub base_load: Vec<f64>,
    /// Memory every plan has on each device (the same ops).
    pub base_memory: Vec<u64>,
    /// The `spmd` devices of each op (empty for most).
    pub spmd: Vec<Vec<usize>>,
    /// The devices of each place: places `0..d` are the devices themselves, place `d + g`
    /// is device group `g`'s devices in ring order.
    pub place_devices: Vec<Vec<usize>>,
    /// Per place, its devices' nodes (positions in `place_devices`) when the place spans two
    /// levels of the topology ([`tessera_targets::two_levels`]); `None` for the rest.
    pub nodes: Vec<Option<Vec<Vec<usize>>>>,
    /// Each op's split alternatives, in the problem's order: option `d + a` of op `o` is
    /// `alts[o][a]` (options below `d` are the devices, the op whole).
    pub alts: Vec<Vec<Alt>>,
}

/// A split alternative of an op, checked ([`SplitSpec`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Alt {
    /// The device group (place `d + group`).
    pub group: usize,
    /// Seconds of each group device's share, in the group's order (infinite where the
    /// device cannot run it; then the alternative is not allowed).
    pub time: Vec<f64>,
    /// Bytes each group device keeps.
    pub memory: u64,
    /// The layout each operand must arrive in.
    pub inputs: Vec<Layout>,
    /// The layout of each result.
    pub outputs: Vec<Layout>,
    /// Whether the op may run this way (every device of the group can run its share, holds
    /// its memory, and the op is not pinned).
    pub allowed: bool,
}

impl Alt {
    /// The op's duration this way: its slowest share.
    pub fn duration(&self) -> f64 {
        self.time.iter().copied().fold(0.0, f64::max)
    }
}

impl Instance {
    /// Checks `problem` and builds the tables. Errors name the field and the reason; numbers
    /// must lie in the ranges of the module doc.
    pub fn new(problem: Problem) -> Result<Instance, ProblemError> {
        if problem.version != VERSION {
            return Err(invalid(
                "version",
                format!(
                    "this tessera reads version {VERSION}, not {}",
                    problem.version
                ),
            ));
        }
        let d = problem.devices.len();
        if d == 0 {
            return Err(invalid("devices", "a problem needs at least one device"));
        }
        if d + problem.routers.len() > MAX_NODES {
            return Err(invalid(
                "devices",
                format!(
                    "{} devices and {} routers, more than the {MAX_NODES} a problem may have",
                    d,
                    problem.routers.len()
                ),
            ));
        }
        let n = problem.ops.len();
        if n.saturating_mul(d) > MAX_OP_DEVICE_PAIRS {
            return Err(invalid(
                "ops",
                format!(
                    "{n} ops on {d} devices make {} (op, device) pairs, more than the \
                     {MAX_OP_DEVICE_PAIRS} a problem may have",
                    n.saturating_mul(d)
                ),
            ));
        }
        let mut nodes: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, dev) in problem.devices.iter().enumerate() {
            if nodes.insert(dev.name.as_str(), i).is_some() {
                return Err(invalid(
                    format!("devices[{i}]"),
                    format!("the name `{}` is used twice", dev.name),
                ));
            }
            if dev.memory > MAX_BYTES {
                return Err(invalid(
                    format!("devices[{i}].memory"),
                    format!(
                        "must be at most 2^60 = {MAX_BYTES} bytes, not {}",
                        dev.memory
                    ),
                ));
            }
        }
        for (i, r) in problem.routers.iter().enumerate() {
            if nodes.insert(r.as_str(), d + i).is_some() {
                return Err(invalid(
                    format!("routers[{i}]"),
                    format!("the name `{r}` is used twice"),
                ));
            }
        }
        for (i, l) in problem.links.iter().enumerate() {
            for end in [&l.a, &l.b] {
                if !nodes.contains_key(end.as_str()) {
                    return Err(invalid(
                        format!("links[{i}]"),
                        format!("`{end}` is neither a device nor a router"),
                    ));
                }
            }
            if l.a == l.b {
                return Err(invalid(
                    format!("links[{i}]"),
                    "a link joins two different nodes",
                ));
            }
            if !is_rate(l.bandwidth) {
                return Err(invalid(
                    format!("links[{i}].bandwidth"),
                    format!(
                        "must be a number from {MIN_RATE} to {MAX_RATE:e} (bytes per second), \
                         not {}",
                        num(l.bandwidth)
                    ),
                ));
            }
            if !is_seconds(l.latency) {
                return Err(invalid(
                    format!("links[{i}].latency"),
                    format!(
                        "must be a number >= 0 and <= {MAX_SECONDS:e} (seconds), not {}",
                        num(l.latency)
                    ),
                ));
            }
        }
        let mut group_names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut place_devices: Vec<Vec<usize>> = (0..d).map(|k| vec![k]).collect();
        for (g, grp) in problem.groups.iter().enumerate() {
            let at = format!("groups[{g}] ({})", grp.name);
            if group_names.insert(grp.name.as_str(), g).is_some() {
                return Err(invalid(at, "the name is used twice"));
            }
            if grp.devices.len() < 2 {
                return Err(invalid(at, "a device group needs at least two devices"));
            }
            if grp.devices.len() > MAX_GROUP_DEVICES {
                return Err(invalid(
                    at,
                    format!(
                        "{} devices, more than the {MAX_GROUP_DEVICES} a device group may have",
                        grp.devices.len()
                    ),
                ));
            }
            let mut members = Vec::with_capacity(grp.devices.len());
            for (i, name) in grp.devices.iter().enumerate() {
                let k = *nodes
                    .get(name.as_str())
                    .filter(|&&k| k < d)
                    .ok_or_else(|| {
                        invalid(
                            format!("{at}.devices[{i}]"),
                            format!("`{name}` is not a device"),
                        )
                    })?;
                if members.contains(&k) {
                    return Err(invalid(
                        format!("{at}.devices[{i}]"),
                        format!("`{name}` is listed twice"),
                    ));
                }
                members.push(k);
            }
            place_devices.push(members);
        }
        // Each split keeps a time per device of its group: bound the total before building.
        let split_pairs = problem
            .ops
            .iter()
            .flat_map(|op| &op.splits)
            .fold(0usize, |t, sp| {
                let k = group_names
                    .get(sp.group.as_str())
                    .map_or(0, |&g| place_devices[d + g].len());
                t.saturating_add(k)
            });
        if split_pairs.saturating_add(n.saturating_mul(d)) > MAX_OP_DEVICE_PAIRS {
            return Err(invalid(
                "ops",
                format!(
                    "the ops' splits give {split_pairs} (split, device) pairs, which with the \
                     {} (op, device) pairs is more than the {MAX_OP_DEVICE_PAIRS} a problem may have",
                    n.saturating_mul(d)
                ),
            ));
        }
        let mut alts: Vec<Vec<Alt>> = vec![Vec::new(); n];
        // Membership only (nothing iterates it), so a hash set: a million names check fast.
        let mut names: std::collections::HashSet<&str> =
            std::collections::HashSet::with_capacity(n);
        let mut group_index: BTreeMap<&str, usize> = BTreeMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_of = vec![None; n];
        let mut time = vec![f64::INFINITY; n * d];
        let mut memory = Vec::with_capacity(n);
        let mut base_load = vec![0.0; d];
        let mut base_memory = vec![0u64; d];
        let mut spmd: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (o, op) in problem.ops.iter().enumerate() {
            let at = || format!("ops[{o}] ({})", op.name);
            if !names.insert(op.name.as_str()) {
                return Err(invalid(at(), "the name is used twice"));
            }
            for (kind, &t) in &op.time {
                if !is_seconds(t) {
                    return Err(invalid(
                        format!("{}.time.{kind}", at()),
                        format!(
                            "must be a number >= 0 and <= {MAX_SECONDS:e} (seconds), not {}",
                            num(t)
                        ),
                    ));
                }
            }
            if op.memory > MAX_BYTES {
                return Err(invalid(
                    format!("{}.memory", at()),
                    format!(
                        "must be at most 2^60 = {MAX_BYTES} bytes, not {}",
                        op.memory
                    ),
                ));
            }
            let pin = match &op.pin {
                Some(p) => Some(*nodes.get(p.as_str()).filter(|&&i| i < d).ok_or_else(|| {
                    invalid(format!("{}.pin", at()), format!("`{p}` is not a device"))
                })?),
                None => None,
            };
            for (k, dev) in problem.devices.iter().enumerate() {
                if pin.is_some_and(|p| p != k) {
                    continue;
                }
                if why_not(op, dev).is_none() {
                    time[o * d + k] = op.time.get(&dev.kind).copied().unwrap_or(f64::INFINITY);
                }
            }
            for (a, sp) in op.splits.iter().enumerate() {
                let at = format!("{}.splits[{a}]", at());
                let g = *group_names.get(sp.group.as_str()).ok_or_else(|| {
                    invalid(
                        format!("{at}.group"),
                        format!("`{}` is not a device group", sp.group),
                    )
                })?;
                for (kind, &t) in &sp.time {
                    if !is_seconds(t) {
                        return Err(invalid(
                            format!("{at}.time.{kind}"),
                            format!(
                                "must be a number >= 0 and <= {MAX_SECONDS:e} (seconds), not {}",
                                num(t)
                            ),
                        ));
                    }
                }
                if sp.memory > MAX_BYTES {
                    return Err(invalid(
                        format!("{at}.memory"),
                        format!(
                            "must be at most 2^60 = {MAX_BYTES} bytes, not {}",
                            sp.memory
                        ),
                    ));
                }
                let layouts = |list: &[String], field: &str, partial: bool| {
                    list.iter()
                        .enumerate()
                        .map(|(i, l)| {
                            let bad = |why: String| invalid(format!("{at}.{field}[{i}]"), why);
                            match l.parse::<Layout>() {
                                Ok(Layout::Partial) if !partial => Err(bad(
                                    "an operand arrives whole (`R`) or split (`S<axis>`), \
                                     not as a partial sum"
                                        .into(),
                                )),
                                Ok(x) => Ok(x),
                                Err(e) => Err(bad(e)),
                            }
                        })
                        .collect::<Result<Vec<_>, _>>()
                };
                let inputs = layouts(&sp.inputs, "inputs", false)?;
                let outputs = layouts(&sp.outputs, "outputs", true)?;
                let members = &place_devices[d + g];
                let time: Vec<f64> = members
                    .iter()
                    .map(|&k| {
                        let dev = &problem.devices[k];
                        if dev.unsupported_ops.contains(&op.kind) || sp.memory > dev.memory {
                            f64::INFINITY
                        } else {
                            sp.time.get(&dev.kind).copied().unwrap_or(f64::INFINITY)
                        }
                    })
                    .collect();
                let allowed =
                    pin.is_none() && op.spmd.is_empty() && time.iter().all(|t| t.is_finite());
                alts[o].push(Alt {
                    group: g,
                    time,
                    memory: sp.memory,
                    inputs,
                    outputs,
                    allowed,
                });
            }
            if (0..d).all(|k| time[o * d + k].is_infinite()) && !alts[o].iter().any(|a| a.allowed) {
                let why = match pin {
                    Some(p) => {
                        let dev = &problem.devices[p];
                        if op.memory > dev.memory {
                            format!(
                                "it is pinned to {}, but needs {} bytes there, {} more than its \
                                 {} bytes",
                                dev.name,
                                op.memory,
                                op.memory - dev.memory,
                                dev.memory
                            )
                        } else if !op.time.contains_key(&dev.kind) {
                            format!(
                                "it is pinned to {}, but has no time for its kind `{}`",
                                dev.name, dev.kind
                            )
                        } else {
                            format!(
                                "`{}` cannot run on {} (where it is pinned)",
                                op.kind, dev.name
                            )
                        }
                    }
                    None => format!(
                        "no device can run it: {}",
                        summarize(problem.devices.iter().map(|dev| {
                            (dev.name.as_str(), why_not(op, dev).unwrap_or_default())
                        }))
                    ),
                };
                return Err(ProblemError::Infeasible(format!("{}: {why}", at())));
            }
            for (i, name) in op.spmd.iter().enumerate() {
                let at = format!("{}.spmd[{i}]", at());
                if pin.is_none() {
                    return Err(invalid(at, "an op with spmd devices must be pinned"));
                }
                let k = *nodes
                    .get(name.as_str())
                    .filter(|&&k| k < d)
                    .ok_or_else(|| invalid(at.clone(), format!("`{name}` is not a device")))?;
                let t = op.time.get(&problem.devices[k].kind).ok_or_else(|| {
                    invalid(
                        at.clone(),
                        format!("no time for `{}`'s kind", problem.devices[k].name),
                    )
                })?;
                base_load[k] += t;
                base_memory[k] = base_memory[k].saturating_add(op.memory);
                spmd[o].push(k);
            }
            memory.push(op.memory);
            if let Some(g) = &op.colocate {
                let next = groups.len();
                let gi = *group_index.entry(g.as_str()).or_insert(next);
                if gi == next {
                    groups.push(Vec::new());
                }
                groups[gi].push(o);
                group_of[o] = Some(gi);
            }
        }
        // A group can only go where all its members can.
        for members in &groups {
            for k in 0..d {
                if members.iter().any(|&o| time[o * d + k].is_infinite()) {
                    for &o in members {
                        time[o * d + k] = f64::INFINITY;
                    }
                }
            }
            let on_a_group = (0..problem.groups.len()).any(|g| {
                members
                    .iter()
                    .all(|&o| alts[o].iter().any(|a| a.allowed && a.group == g))
            });
            if (0..d).all(|k| time[members[0] * d + k].is_infinite()) && !on_a_group {
                let g = problem.ops[members[0]].colocate.clone().unwrap_or_default();
                // For each device, the first member that cannot run there, and why.
                let reasons = problem.devices.iter().enumerate().map(|(k, dev)| {
                    let why = members
                        .iter()
                        .find_map(|&o| why_not_here(&problem, o, k))
                        .unwrap_or_default();
                    (dev.name.as_str(), why)
                });
                return Err(ProblemError::Infeasible(format!(
                    "colocation group `{g}`: no device can run all of its {} ops: {}",
                    members.len(),
                    summarize(reasons)
                )));
            }
        }
        for (i, c) in problem.carried.iter().enumerate() {
            if let Some(&o) = c.readers.iter().chain([&c.writer]).find(|&&o| o >= n) {
                return Err(invalid(
                    format!("carried[{i}]"),
                    format!("op index {o} out of range (there are {n} ops)"),
                ));
            }
        }
        let mut out_edges = vec![Vec::new(); n];
        let mut in_edges = vec![Vec::new(); n];
        // Looked up only (never iterated): a hash map.
        let mut tensor_bytes: std::collections::HashMap<(usize, u32), (usize, u64)> =
            std::collections::HashMap::with_capacity(problem.edges.len());
        for (i, e) in problem.edges.iter().enumerate() {
            if e.from >= n || e.to >= n {
                return Err(invalid(
                    format!("edges[{i}]"),
                    format!("op index out of range (there are {n} ops)"),
                ));
            }
            if e.from >= e.to {
                return Err(invalid(
                    format!("edges[{i}]"),
                    format!(
                        "goes from ops[{}] to ops[{}]; ops must be listed in a topological \
                         order, so edges go forward",
                        e.from, e.to
                    ),
                ));
            }
            if e.bytes > MAX_BYTES {
                return Err(invalid(
                    format!("edges[{i}].bytes"),
                    format!("must be at most 2^60 = {MAX_BYTES} bytes, not {}", e.bytes),
                ));
            }
            if let Some(&(j, bytes)) = tensor_bytes.get(&(e.from, e.tensor))
                && bytes != e.bytes
            {
                return Err(invalid(
                    format!("edges[{i}]"),
                    format!(
                        "tensor {} of ops[{}] has {} bytes here but {bytes} in edges[{j}]; \
                         one tensor has one size",
                        e.tensor, e.from, e.bytes
                    ),
                ));
            }
            tensor_bytes
                .entry((e.from, e.tensor))
                .or_insert((i, e.bytes));
            out_edges[e.from].push(i);
            in_edges[e.to].push(i);
        }
        for (o, list) in alts.iter().enumerate() {
            for (a, alt) in list.iter().enumerate() {
                let at = || format!("ops[{o}] ({}).splits[{a}]", problem.ops[o].name);
                if let Some(&e) = in_edges[o]
                    .iter()
                    .find(|&&e| problem.edges[e].operand as usize >= alt.inputs.len())
                {
                    return Err(invalid(
                        format!("{}.inputs", at()),
                        format!(
                            "edges[{e}] feeds operand {}, but only {} input layouts are given",
                            problem.edges[e].operand,
                            alt.inputs.len()
                        ),
                    ));
                }
                if let Some(&e) = out_edges[o]
                    .iter()
                    .find(|&&e| problem.edges[e].tensor as usize >= alt.outputs.len())
                {
                    return Err(invalid(
                        format!("{}.outputs", at()),
                        format!(
                            "edges[{e}] carries result {}, but only {} output layouts are given",
                            problem.edges[e].tensor,
                            alt.outputs.len()
                        ),
                    ));
                }
            }
        }
        // Routes, from the targets crate so that they match the simulator's: one search per
        // source device, kept as its tree of labels (memory linear in the devices per source,
        // however long the routes).
        let spec = routing_spec(&problem);
        let router = spec.router();
        let mut latency = vec![0.0; d * d];
        let mut inv_bandwidth = vec![0.0; d * d];
        let mut hops = vec![0; d * d];
        let mut route_labels: Vec<(u32, u32)> = Vec::new();
        let mut route_last = vec![u32::MAX; d * d];
        for a in 0..d {
            let tree = router.tree(a);
            let (labels, last) = tree.parts();
            let offset = route_labels.len();
            if offset + labels.len() >= u32::MAX as usize {
                return Err(invalid(
                    "links",
                    "the routes between the devices are too many to keep",
                ));
            }
            let offset = offset as u32;
            route_labels.extend(labels.iter().map(|&(parent, channel)| {
                let parent = if parent == u32::MAX {
                    u32::MAX
                } else {
                    offset + parent
                };
                (parent, channel)
            }));
            for b in 0..d {
                if a == b {
                    continue;
                }
                let Some(l) = last[b] else {
                    // Unreachable pairs cost infinitely much: a plan using them is invalid.
                    latency[a * d + b] = f64::INFINITY;
                    inv_bandwidth[a * d + b] = f64::INFINITY;
                    hops[a * d + b] = usize::MAX;
                    continue;
                };
                latency[a * d + b] = tree.latency(b).unwrap_or(f64::INFINITY);
                inv_bandwidth[a * d + b] = 1.0 / tree.bandwidth(b).unwrap_or(0.0);
                hops[a * d + b] = tree.hops(b).unwrap_or(usize::MAX);
                route_last[a * d + b] = offset + l;
            }
        }
        let mut tensor_of_edge = vec![0usize; problem.edges.len()];
        let mut tensor_from = Vec::new();
        let mut tensor_bytes = Vec::new();
        let mut local: Vec<(u32, usize)> = Vec::new();
        for (u, outs) in out_edges.iter().enumerate() {
            local.clear();
            for &e in outs {
                let edge = &problem.edges[e];
                tensor_of_edge[e] = match local.iter().find(|t| t.0 == edge.tensor) {
                    Some(&(_, t)) => t,
                    None => {
                        local.push((edge.tensor, tensor_from.len()));
                        tensor_from.push(u);
                        tensor_bytes.push(edge.bytes);
                        tensor_from.len() - 1
                    }
                };
            }
        }
        let capacity = problem.devices.iter().map(|x| x.memory).collect();
        let overlap = problem.devices.iter().map(|x| x.overlap).collect();
        let num_channels = 2 * problem.links.len();
        // Each group's nodes, when it spans two levels of the topology (positions in the
        // group), by its routes' widths: what its all-reduces take (`split::comm_time`).
        let nodes = place_devices
            .iter()
            .map(|ds| {
                let width = |i: usize, j: usize| 1.0 / inv_bandwidth[ds[i] * d + ds[j]];
                tessera_targets::two_levels(ds.len(), width)
            })
            .collect();
        Ok(Instance {
            problem,
            n,
            d,
            time,
            memory,
            capacity,
            overlap,
            group_of,
            groups,
            out_edges,
            in_edges,
            tensor_of_edge,
            tensor_from,
            tensor_bytes,
            latency,
            inv_bandwidth,
            route_labels,
            route_last,
            hops,
            num_channels,
            base_load,
            base_memory,
            spmd,
            place_devices,
            nodes,
            alts,
        })
    }

    /// Whether any op has split alternatives.
    pub fn has_splits(&self) -> bool {
        self.alts.iter().any(|a| !a.is_empty())
    }

    /// The number of options of op `o`: the devices, then its split alternatives.
    #[inline]
    pub fn options(&self, o: usize) -> usize {
        self.d + self.alts[o].len()
    }

    /// Whether op `o` may take option `x` (a device it may run on whole, or an allowed
    /// split alternative).
    pub fn option_allowed(&self, o: usize, x: usize) -> bool {
        if x < self.d {
            self.allowed(o, x)
        } else {
            self.alts[o].get(x - self.d).is_some_and(|a| a.allowed)
        }
    }

    /// The place of op `o` under option `x` (an index into `place_devices`).
    #[inline]
    pub fn place_of(&self, o: usize, x: usize) -> usize {
        if x < self.d {
            x
        } else {
            self.d + self.alts[o][x - self.d].group
        }
    }

    /// Op `o`'s seconds on each device of its place under option `x`.
    pub fn option_times(&self, o: usize, x: usize) -> &[f64] {
        if x < self.d {
            std::slice::from_ref(&self.time[o * self.d + x])
        } else {
            &self.alts[o][x - self.d].time
        }
    }

    /// Bytes op `o` keeps on each device of its place under option `x`.
    pub fn option_memory(&self, o: usize, x: usize) -> u64 {
        if x < self.d {
            self.memory[o]
        } else {
            self.alts[o][x - self.d].memory
        }
    }

    /// The name of place `p`: a device's, or a device group's.
    pub fn place_name(&self, p: usize) -> &str {
        if p < self.d {
            self.device_name(p)
        } else {
            &self.problem.groups[p - self.d].name
        }
    }

    /// Whether op `o` can run whole on some device.
    pub fn runs_whole(&self, o: usize) -> bool {
        (0..self.d).any(|k| self.allowed(o, k))
    }

    /// The directed channels (`2 * link + direction`, direction 1 from the link's `b` to its
    /// `a`) of the route from device `a` to device `b`, from `b` back to `a`; none when
    /// `a == b` or no route exists. A route never crosses a channel twice.
    pub fn route_channels(&self, a: usize, b: usize) -> RouteChannels<'_> {
        RouteChannels {
            labels: &self.route_labels,
            at: self
                .route_last
                .get(a * self.d + b)
                .copied()
                .unwrap_or(u32::MAX),
        }
    }

    /// Seconds of op `o` on device `k` (infinite where not allowed).
    #[inline]
    pub fn t(&self, o: usize, k: usize) -> f64 {
        self.time[o * self.d + k]
    }

    /// Whether op `o` may run on device `k` (kind, support, pin, group).
    #[inline]
    pub fn allowed(&self, o: usize, k: usize) -> bool {
        self.time[o * self.d + k].is_finite()
    }

    /// Seconds to move `bytes` from device `a` to device `b` (0 when equal).
    #[inline]
    pub fn transfer(&self, a: usize, b: usize, bytes: u64) -> f64 {
        if a == b {
            0.0
        } else {
            self.latency[a * self.d + b] + bytes as f64 * self.inv_bandwidth[a * self.d + b]
        }
    }

    /// The device names.
    pub fn device_name(&self, k: usize) -> &str {
        &self.problem.devices[k].name
    }

    /// The devices the graph's inputs (the `input:` ops) are pinned to, in op order: the
    /// host, for a problem `compile` built.
    pub fn input_devices(&self) -> impl Iterator<Item = usize> + '_ {
        self.problem
            .ops
            .iter()
            .filter(|o| o.name.starts_with("input:"))
            .filter_map(|o| o.pin.as_deref())
            .filter_map(|h| (0..self.d).find(|&k| self.device_name(k) == h))
    }

    /// The op names.
    pub fn op_name(&self, o: usize) -> &str {
        &self.problem.ops[o].name
    }

    /// The fastest allowed time of op `o`.
    pub fn min_time(&self, o: usize) -> f64 {
        (0..self.d)
            .map(|k| self.t(o, k))
            .fold(f64::INFINITY, f64::min)
    }
}

/// The channels of one route, from its end back to its start ([`Instance::route_channels`]).
#[derive(Clone, Debug)]
pub struct RouteChannels<'a> {
    labels: &'a [(u32, u32)],
    at: u32,
}

impl Iterator for RouteChannels<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let &(parent, channel) = self.labels.get(self.at as usize)?;
        if parent == u32::MAX {
            return None;
        }
        self.at = parent;
        Some(channel as usize)
    }
}

/// Why `op` cannot run on `dev` whatever its pin (unsupported, no time for the device's kind,
/// too big), or `None` when it can.
fn why_not(op: &OpSpec, dev: &Device) -> Option<String> {
    if dev.unsupported_ops.contains(&op.kind) {
        Some(format!("`{}` is unsupported", op.kind))
    } else if !op.time.contains_key(&dev.kind) {
        Some(format!("no time for kind `{}`", dev.kind))
    } else if op.memory > dev.memory {
        Some(format!(
            "{} bytes, less than the {} it needs",
            dev.memory, op.memory
        ))
    } else {
        None
    }
}

/// Why op `o` cannot run on device `k` by itself (its pin included), or `None` when it can.
fn why_not_here(p: &Problem, o: usize, k: usize) -> Option<String> {
    let op = &p.ops[o];
    let dev = &p.devices[k];
    if let Some(pin) = &op.pin
        && *pin != dev.name
    {
        return Some(format!("`{}` is pinned to {pin}", op.name));
    }
    why_not(op, dev).map(|why| format!("`{}`: {why}", op.name))
}

/// `DEVICES: REASON` groups, the devices with one reason together (at most four named), in
/// the order the reasons first occur, `; `-separated.
fn summarize<'a>(reasons: impl Iterator<Item = (&'a str, String)>) -> String {
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    for (dev, why) in reasons {
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, devs)) => devs.push(dev),
            None => groups.push((why, vec![dev])),
        }
    }
    groups
        .iter()
        .map(|(why, devs)| {
            let shown: Vec<&str> = devs.iter().take(4).copied().collect();
            let more = if devs.len() > shown.len() {
                format!(" and {} more", devs.len() - shown.len())
            } else {
                String::new()
            };
            format!("{}{more}: {why}", shown.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A [`TargetSpec`] with the problem's devices and routers as nodes and its links, used only
/// for routing (so routes match the simulator's).
fn routing_spec(p: &Problem) -> TargetSpec {
    let node = |name: &str| TargetDevice {
        name: name.to_string(),
        kind: String::new(),
        memory_bytes: 0,
        memory_bandwidth: 0.0,
        compute: BTreeMap::new(),
        supported_ops: None,
        lowering: String::new(),
        arch: None,
        efficiency: BTreeMap::new(),
        op_overhead: 0.0,
        overlap: true,
    };
    TargetSpec {
        name: p.name.clone(),
        description: String::new(),
        devices: p
            .devices
            .iter()
            .map(|d| node(&d.name))
            .chain(p.routers.iter().map(|r| node(r)))
            .collect(),
        links: p
            .links
            .iter()
            .map(|l| TargetLink {
                a: l.a.clone(),
                b: l.b.clone(),
                bandwidth: l.bandwidth,
                latency: l.latency,
            })
            .collect(),
        host: p.devices[0].name.clone(),
        layouts: Vec::new(),
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ops, {} edges, {} devices, {} links",
            self.name,
            self.ops.len(),
            self.edges.len(),
            self.devices.len(),
            self.links.len()
        )
    }
}
