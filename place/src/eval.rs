//! Evaluating an assignment: the two objectives, loads, memory, and the constraints.
//!
//! **Throughput** (of a pipelined stream of samples): the steady-state period is bounded by
//! the busiest resource, so the objective is the largest per-sample busy time over every
//! device (the time of its ops) and every link direction (the time of every transfer whose
//! route crosses it, each transfer holding all its channels for its whole duration, as in the
//! simulator). A tensor needed on another device moves there once, however many ops there use
//! it.
//!
//! **Latency** (of one sample): a list schedule: each device runs its ops in the plan's order
//! (a topological order), an op starts when its device is free and its inputs have arrived,
//! and a cross-device input arrives `transfer` seconds after its producer finished. Links are
//! not contended here (the simulator, run on the placed graph, adds contention); this is the
//! classic model of HEFT (Topcuoglu, Hariri and Wu, IEEE TPDS 2002).
//!
//! **Devices that do not overlap transfers** (`overlap = false`, DMA-less accelerators, the
//! model of Tarnawski, Phanishayee, Devanur, Mahajan and Nina Paravecino, "Efficient
//! algorithms for device placement of DNN graph operators", NeurIPS 2020): a transfer
//! occupies such a device as well as the links. A tensor is staged through the sender's
//! memory, so the sender is charged once per tensor (its longest transfer to any receiving
//! device), and every receiving device that does not overlap is charged its own transfer.
//! For throughput these times add to the devices' loads. In the list schedule (and in the
//! simulator, the same way) the sender stays busy for its sends after the op that made the
//! tensors, while the link carries them, and a receiver spends each received tensor's
//! transfer time, once, at the start of the first op there that reads it, after the tensor
//! arrived.
//!
//! **Split ops** (an assignment where some op takes a split alternative,
//! [`crate::problem::Alt`]) are evaluated by [`crate::split`]'s model, which reduces to the
//! one above for ops run whole.
//!
//! **Memory**: a device holds the `memory` of every op on it plus every tensor it receives;
//! a plan is feasible when no device exceeds its capacity, every op runs where it is allowed,
//! and colocated ops share a device.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::problem::Instance;

/// What a plan minimizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// The period of a pipelined stream (1 / throughput).
    Throughput,
    /// The latency of one sample.
    Latency,
}

impl Objective {
    /// The objective's name.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Throughput => "throughput",
            Objective::Latency => "latency",
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "throughput" => Ok(Objective::Throughput),
            "latency" => Ok(Objective::Latency),
            _ => Err(format!(
                "unknown objective `{s}` (expected throughput or latency)"
            )),
        }
    }
}

/// The measures of one assignment.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The period of a stream: the busiest device or link direction, seconds per sample.
    pub period: f64,
    /// The latency of one sample (list schedule, no link contention).
    pub latency: f64,
    /// Busy seconds per sample on each device.
    pub device_load: Vec<f64>,
    /// Busy seconds per sample on each link direction (channel `2 * link + (b to a)`).
    pub channel_load: Vec<f64>,
    /// Bytes held on each device.
    pub memory: Vec<u64>,
    /// Total bytes sent between devices per sample.
    pub traffic: u64,
}

impl Evaluation {
    /// The objective's value.
    pub fn value(&self, objective: Objective) -> f64 {
        match objective {
            Objective::Throughput => self.period,
            Objective::Latency => self.latency,
        }
    }
}

/// The distinct transfers an assignment needs: `(producer, device, bytes)`, one per tensor and
/// receiving device.
pub fn transfers(inst: &Instance, assign: &[usize]) -> Vec<(usize, usize, u64)> {
    let mut out = Vec::new();
    let mut seen: Vec<(u32, usize)> = Vec::new();
    for u in 0..inst.n {
        seen.clear();
        for &e in &inst.out_edges[u] {
            let edge = &inst.problem.edges[e];
            let to = assign[edge.to];
            if to == assign[u] || seen.contains(&(edge.tensor, to)) {
                continue;
            }
            seen.push((edge.tensor, to));
            out.push((u, to, edge.bytes));
        }
    }
    out
}

/// Evaluates `assign` (a device per op), with `order` (a topological order of all ops) as the
/// order each device runs its ops in.
pub fn evaluate(inst: &Instance, assign: &[usize], order: &[usize]) -> Evaluation {
    if crate::split::any_split(inst, assign) {
        return crate::split::evaluate(inst, assign, order);
    }
    let mut device_load = inst.base_load.clone();
    let mut memory = inst.base_memory.clone();
    for o in 0..inst.n {
        device_load[assign[o]] += inst.t(o, assign[o]);
        memory[assign[o]] = memory[assign[o]].saturating_add(inst.memory[o]);
    }
    for (k, x) in occupancy(inst, assign).into_iter().enumerate() {
        device_load[k] += x;
    }
    let mut channel_load = vec![0.0; inst.num_channels];
    let mut traffic = 0u64;
    for (u, to, bytes) in transfers(inst, assign) {
        let from = assign[u];
        let t = inst.transfer(from, to, bytes);
        for c in inst.route_channels(from, to) {
            channel_load[c] += t;
        }
        memory[to] = memory[to].saturating_add(bytes);
        traffic = traffic.saturating_add(bytes);
    }
    let period = device_load
        .iter()
        .chain(channel_load.iter())
        .copied()
        .fold(0.0, f64::max);
    let latency = schedule_latency(inst, assign, order);
    Evaluation {
        period,
        latency,
        device_load,
        channel_load,
        memory,
        traffic,
    }
}

/// Per device, the seconds per sample that transfers occupy it (zero where it overlaps
/// them; see the module doc).
pub fn occupancy(inst: &Instance, assign: &[usize]) -> Vec<f64> {
    let mut extra = vec![0.0; inst.d];
    if inst.overlap.iter().all(|&x| x) {
        return extra;
    }
    for (u, &a) in assign.iter().enumerate().take(inst.n) {
        let (send, receives) = sends(inst, assign, u);
        for (to, t) in receives {
            if !inst.overlap[to] {
                extra[to] += t;
            }
        }
        if !inst.overlap[a] {
            extra[a] += send;
        }
    }
    extra
}

/// Op `u`'s transfers: the seconds its device spends sending them (per tensor, the longest
/// transfer to a receiving device) and each (receiving device, transfer seconds), one per
/// tensor and device.
fn sends(inst: &Instance, assign: &[usize], u: usize) -> (f64, Vec<(usize, f64)>) {
    let a = assign[u];
    let mut seen: Vec<(u32, usize)> = Vec::new();
    let mut longest: Vec<(u32, f64)> = Vec::new();
    let mut out = Vec::new();
    for &e in &inst.out_edges[u] {
        let edge = &inst.problem.edges[e];
        let to = assign[edge.to];
        if to == a || seen.contains(&(edge.tensor, to)) {
            continue;
        }
        seen.push((edge.tensor, to));
        let t = inst.transfer(a, to, edge.bytes);
        out.push((to, t));
        match longest.iter_mut().find(|x| x.0 == edge.tensor) {
            Some(x) => x.1 = x.1.max(t),
            None => longest.push((edge.tensor, t)),
        }
    }
    (longest.iter().map(|x| x.1).sum(), out)
}

/// The latency of one sample when devices run their ops in `order` (see the module doc).
pub fn schedule_latency(inst: &Instance, assign: &[usize], order: &[usize]) -> f64 {
    if crate::split::any_split(inst, assign) {
        return crate::split::schedule_latency(inst, assign, order);
    }
    let mut finish = vec![0.0f64; inst.n];
    let mut free = vec![0.0f64; inst.d];
    let mut end: f64 = 0.0;
    let occupy = !inst.overlap.iter().all(|&x| x);
    // The (producer, tensor, device) receptions done by a device that receives itself.
    let mut received: std::collections::BTreeSet<(usize, u32, usize)> =
        std::collections::BTreeSet::new();
    for &o in order {
        let k = assign[o];
        let mut ready: f64 = 0.0;
        let mut receiving = 0.0;
        for &e in &inst.in_edges[o] {
            let edge = &inst.problem.edges[e];
            let u = edge.from;
            let t = inst.transfer(assign[u], k, edge.bytes);
            ready = ready.max(finish[u] + t);
            if occupy && !inst.overlap[k] && assign[u] != k && received.insert((u, edge.tensor, k))
            {
                receiving += t;
            }
        }
        let start = inst.spmd[o]
            .iter()
            .map(|&x| free[x])
            .fold(free[k].max(ready), f64::max);
        finish[o] = start + receiving + inst.t(o, k);
        free[k] = finish[o];
        if occupy && !inst.overlap[k] {
            free[k] += sends(inst, assign, o).0;
        }
        for &x in &inst.spmd[o] {
            free[x] = finish[o];
        }
        end = end.max(finish[o]);
    }
    end
}

/// Why `assign` is not a feasible plan, or `None` when it is: the first violated constraint,
/// in words that name the op or device (for memory: by how much it overflows).
pub fn violation(inst: &Instance, assign: &[usize]) -> Option<String> {
    if assign.len() != inst.n {
        return Some(format!(
            "the plan assigns {} ops, the problem has {}",
            assign.len(),
            inst.n
        ));
    }
    if crate::split::any_split(inst, assign) {
        return crate::split::violation(inst, assign);
    }
    for (o, &k) in assign.iter().enumerate() {
        if k >= inst.d {
            return Some(format!(
                "op `{}` is on device {k}, which does not exist",
                inst.op_name(o)
            ));
        }
        if !inst.allowed(o, k) {
            return Some(format!(
                "op `{}` cannot run on `{}`",
                inst.op_name(o),
                inst.device_name(k)
            ));
        }
    }
    for members in &inst.groups {
        if let Some(&o) = members.iter().find(|&&o| assign[o] != assign[members[0]]) {
            return Some(format!(
                "ops `{}` and `{}` share a colocation group but not a device",
                inst.op_name(members[0]),
                inst.op_name(o)
            ));
        }
    }
    for edge in &inst.problem.edges {
        let (a, b) = (assign[edge.from], assign[edge.to]);
        if a != b && !inst.latency[a * inst.d + b].is_finite() {
            return Some(format!(
                "`{}` on `{}` feeds `{}` on `{}`, but no route leads from `{}` to `{}`",
                inst.op_name(edge.from),
                inst.device_name(a),
                inst.op_name(edge.to),
                inst.device_name(b),
                inst.device_name(a),
                inst.device_name(b)
            ));
        }
    }
    over_capacity(inst, assign, &memory_use(inst, assign))
}

/// The first device whose `memory` exceeds its capacity, in words with the overflow and,
/// when ops of `assign` run split over groups that include it, those groups (its stage).
pub(crate) fn over_capacity(inst: &Instance, assign: &[usize], memory: &[u64]) -> Option<String> {
    let (k, &m) = memory
        .iter()
        .enumerate()
        .find(|&(k, &m)| m > inst.capacity[k])?;
    let mut groups = std::collections::BTreeMap::<usize, usize>::new();
    for (o, &x) in assign.iter().enumerate() {
        let p = inst.place_of(o, x);
        if p >= inst.d && inst.place_devices[p].contains(&k) {
            *groups.entry(p - inst.d).or_default() += 1;
        }
    }
    let stage = groups
        .iter()
        .map(|(&g, &n)| {
            format!(
                "group `{}` ({}), where {n} split ops run",
                inst.problem.groups[g].name,
                inst.problem.groups[g].devices.join(", ")
            )
        })
        .collect::<Vec<_>>();
    Some(format!(
        "`{}`{} needs {m} bytes, {} more than its capacity of {} bytes",
        inst.device_name(k),
        if stage.is_empty() {
            String::new()
        } else {
            format!(" (in {})", stage.join(" and "))
        },
        m - inst.capacity[k],
        inst.capacity[k]
    ))
}

/// Bytes held on each device: its ops' memory plus the tensors it receives.
pub fn memory_use(inst: &Instance, assign: &[usize]) -> Vec<u64> {
    if crate::split::any_split(inst, assign) {
        return crate::split::memory_use(inst, assign);
    }
    let mut memory = inst.base_memory.clone();
    for o in 0..inst.n {
        memory[assign[o]] = memory[assign[o]].saturating_add(inst.memory[o]);
    }
    for (_, to, bytes) in transfers(inst, assign) {
        memory[to] = memory[to].saturating_add(bytes);
    }
    memory
}

/// The identity order `0..n` (the problem's own topological order).
pub fn problem_order(inst: &Instance) -> Vec<usize> {
    (0..inst.n).collect()
}

/// Whether `order` is a permutation of the ops in which every edge goes forward.
pub fn is_topological(inst: &Instance, order: &[usize]) -> bool {
    if order.len() != inst.n {
        return false;
    }
    let mut pos = vec![usize::MAX; inst.n];
    for (i, &o) in order.iter().enumerate() {
        if o >= inst.n || pos[o] != usize::MAX {
            return false;
        }
        pos[o] = i;
    }
    inst.problem.edges.iter().all(|e| pos[e.from] < pos[e.to])
}
