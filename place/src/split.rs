//! Split alternatives: an op run over a device group, each device doing its share, and the
//! communication that moving a tensor between two layouts implies.
//!
//! **Layouts.** A tensor is `R` (every device of its place holds all of it), `S<axis>` (split
//! along one tensor axis into equal blocks, one per device, in the group's order) or `P`
//! (every device holds a partial sum of the whole: the result of a contraction over a split
//! axis). An op run whole on one device makes and reads `R`.
//!
//! **Resharding** ([`reshard`]) a tensor of `B` bytes from its producer's place and layout to
//! the layout a consumer needs on its place, after the collectives of Megatron-LM and GSPMD
//! (Shoeybi et al. 2019; Xu et al. 2021), each a ring through the group in its listed order
//! (Patarasuk and Yuan 2009: `k - 1` steps of `B / k` bytes per neighbour for a gather or a
//! reduce-scatter, twice that for an all-reduce):
//! - on the same place: `S -> R` all-gather; `P -> R` all-reduce; `P -> S` reduce-scatter;
//!   `S<a> -> S<b>` all-to-all (every device sends `B / k^2` to every other); `R -> S` and
//!   equal layouts cost nothing (a device keeps its block).
//! - between places: a `P` producer first reduce-scatters within its group; then each of its
//!   `k_u` devices sends its block: to every consumer device when the consumer needs `R`
//!   (`B / k_u` each), to the consumer device of the same index when both sides split the
//!   same way over as many devices (`B / k` each), else to every consumer device its part
//!   (`B / (k_u k_v)` each). A whole op is a place of one device, so a tensor between two
//!   devices is one transfer of `B` bytes, as without splits. Transfers between one device
//!   and itself are free.
//!
//! **Costs.** Every ring step and every transfer takes its route's latency plus its bytes over
//! the route's narrowest bandwidth and occupies the route's channels for that long (the
//! model of [`crate::eval`]). A reshard's time (in the latency's list schedule) is its rings'
//! steps at the slowest neighbour pair, then its transfers as the busiest sender or receiver
//! does them one after another. The devices of the consumer's place each keep what they
//! receive (`B` for `R`, a block for `S`), once per tensor, place and layout. A device that
//! does not overlap transfers ([`crate::problem::Device::overlap`]) is charged as
//! [`crate::eval`] charges it: every ring step it sends or receives, every transfer it
//! receives, and, per tensor it sends, its longest transfer of it (the tensor is staged once
//! in its memory); for a plan without splits this is exactly `eval`'s rule.

use std::fmt;
use std::str::FromStr;

use tessera_targets::hierarchical_phases;

use crate::eval::Evaluation;
use crate::problem::Instance;

/// How a tensor lies on the devices of its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Layout {
    /// Every device holds all of it.
    Replicated,
    /// Split along this tensor axis, one block per device.
    Split(u32),
    /// Every device holds a partial sum of the whole.
    Partial,
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Layout::Replicated => f.write_str("R"),
            Layout::Split(a) => write!(f, "S{a}"),
            Layout::Partial => f.write_str("P"),
        }
    }
}

impl FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Layout, String> {
        match s {
            "R" => Ok(Layout::Replicated),
            "P" => Ok(Layout::Partial),
            _ => s
                .strip_prefix('S')
                .and_then(|a| a.parse::<u32>().ok())
                .filter(|&a| a < 64)
                .map(Layout::Split)
                .ok_or_else(|| {
                    format!("`{s}` is not a layout (expected R, P, or S<axis> with axis < 64)")
                }),
        }
    }
}

/// Ring collective steps over a device group: `steps` transfers of `piece` bytes from every
/// device to the next in the group's order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ring {
    /// The place (a group) whose devices form the ring.
    pub place: usize,
    /// Steps per neighbour pair.
    pub steps: u32,
    /// Bytes per step.
    pub piece: u64,
}

/// The communication of one reshard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Comm {
    /// Ring collectives, done first.
    pub rings: Vec<Ring>,
    /// Point-to-point transfers `(from, to, bytes)` between devices, after the rings.
    pub flows: Vec<(usize, usize, u64)>,
}

impl Comm {
    /// Whether nothing moves.
    pub fn is_empty(&self) -> bool {
        self.rings.is_empty() && self.flows.is_empty()
    }
}

fn blocks(bytes: u64, k: usize) -> u64 {
    bytes.div_ceil(k.max(1) as u64)
}

/// The communication that brings a tensor of `bytes` from place `pu` in layout `lu` to place
/// `pv` in layout `lv` (see the module doc).
pub fn reshard(inst: &Instance, pu: usize, lu: Layout, pv: usize, lv: Layout, bytes: u64) -> Comm {
    let us = &inst.place_devices[pu];
    let vs = &inst.place_devices[pv];
    let mut comm = Comm::default();
    let ring = |steps: usize, k: usize| Ring {
        place: pu,
        steps: steps as u32,
        piece: blocks(bytes, k),
    };
    if pu == pv {
        let k = us.len();
        match (lu, lv) {
            (a, b) if a == b => {}
            (Layout::Replicated, Layout::Split(_)) => {}
            (Layout::Split(_), Layout::Replicated) => comm.rings.push(ring(k - 1, k)),
            (Layout::Partial, Layout::Replicated) => comm.rings.push(ring(2 * (k - 1), k)),
            (Layout::Partial, Layout::Split(_)) => comm.rings.push(ring(k - 1, k)),
            (Layout::Split(_), Layout::Split(_)) => {
                let piece = blocks(bytes, k * k);
                for &a in us {
                    for &b in us {
                        if a != b {
                            comm.flows.push((a, b, piece));
                        }
                    }
                }
            }
            // A consumer never needs a partial sum (validated), and `R` holds everything.
            (_, Layout::Partial) | (Layout::Replicated, Layout::Replicated) => {}
        }
        return comm;
    }
    let (nu, nv) = (us.len(), vs.len());
    let mut lu = lu;
    if lu == Layout::Partial {
        comm.rings.push(ring(nu - 1, nu));
        lu = Layout::Split(u32::MAX);
    }
    let mut flow = |a: usize, b: usize, bytes: u64| {
        if a != b {
            comm.flows.push((a, b, bytes));
        }
    };
    match lv {
        Layout::Split(_) if nu == nv && (lu == lv || lu == Layout::Replicated) => {
            for (&a, &b) in us.iter().zip(vs) {
                flow(a, b, blocks(bytes, nv));
            }
        }
        Layout::Split(_) => {
            let piece = blocks(bytes, nu * nv);
            for &a in us {
                for &b in vs {
                    flow(a, b, piece);
                }
            }
        }
        Layout::Replicated | Layout::Partial => {
            let piece = blocks(bytes, nu);
            for &a in us {
                for &b in vs {
                    flow(a, b, piece);
                }
            }
        }
    }
    comm
}

/// The bytes each device of place `pv` keeps of a tensor of `bytes` it receives in layout
/// `lv`.
pub fn kept(inst: &Instance, pv: usize, lv: Layout, bytes: u64) -> u64 {
    match lv {
        Layout::Split(_) => blocks(bytes, inst.place_devices[pv].len()),
        Layout::Replicated | Layout::Partial => bytes,
    }
}

/// The layout of result `tensor` of op `o` under option `x`.
pub fn out_layout(inst: &Instance, o: usize, x: usize, tensor: u32) -> Layout {
    alt_layout(inst, o, x, |a| &a.outputs, tensor)
}

/// The layout operand `operand` of op `o` must arrive in under option `x`.
pub fn in_layout(inst: &Instance, o: usize, x: usize, operand: u32) -> Layout {
    alt_layout(inst, o, x, |a| &a.inputs, operand)
}

/// Entry `i` of the layout list `list` picks from op `o`'s alternative under option `x`: `R`
/// for a whole op (or past the list).
fn alt_layout(
    inst: &Instance,
    o: usize,
    x: usize,
    list: impl Fn(&crate::problem::Alt) -> &Vec<Layout>,
    i: u32,
) -> Layout {
    x.checked_sub(inst.d)
        .and_then(|a| list(&inst.alts[o][a]).get(i as usize).copied())
        .unwrap_or(Layout::Replicated)
}

/// The ring's neighbour pairs `(from, to)`.
pub fn ring_pairs<'a>(inst: &'a Instance, r: &Ring) -> impl Iterator<Item = (usize, usize)> + 'a {
    let ds = &inst.place_devices[r.place];
    (0..ds.len()).map(move |i| (ds[i], ds[(i + 1) % ds.len()]))
}

/// A reshard's time: its rings at their slowest neighbour pair, then its transfers at the
/// busiest sender or receiver. An all-reduce ring (`2(k-1)` steps) over a group that spans
/// two levels of the topology takes the hierarchical algorithm where it is faster, as the
/// simulator's cost model does (`tessera_targets::CostModel::all_reduce_plan`; the nodes,
/// [`Instance::nodes`], found once per problem).
pub fn comm_time(inst: &Instance, c: &Comm) -> f64 {
    let mut t = 0.0;
    for r in &c.rings {
        t += ring_time(inst, r);
    }
    if !c.flows.is_empty() {
        let mut busy: std::collections::BTreeMap<(bool, usize), f64> = Default::default();
        for &(a, b, bytes) in &c.flows {
            let x = inst.transfer(a, b, bytes);
            *busy.entry((false, a)).or_insert(0.0) += x;
            *busy.entry((true, b)).or_insert(0.0) += x;
        }
        t += busy.values().copied().fold(0.0, f64::max);
    }
    t
}

/// A ring collective's time (see [`comm_time`]).
fn ring_time(inst: &Instance, r: &Ring) -> f64 {
    let step = |ring: &[usize], piece: u64| -> f64 {
        let p = ring.len();
        (0..p)
            .map(|i| inst.transfer(ring[i], ring[(i + 1) % p], piece))
            .fold(0.0, f64::max)
    };
    let ds = &inst.place_devices[r.place];
    let k = ds.len();
    let flat = f64::from(r.steps) * step(ds, r.piece);
    if k < 4 || r.steps as usize != 2 * (k - 1) {
        return flat;
    }
    let Some(nodes) = &inst.nodes[r.place] else {
        return flat;
    };
    let bytes = r.piece.saturating_mul(k as u64);
    let nodes: Vec<Vec<usize>> = nodes
        .iter()
        .map(|node| node.iter().map(|&i| ds[i]).collect())
        .collect();
    let [(nodes, intra_steps, k), (rails, inter_steps, kn)] = hierarchical_phases(nodes);
    // A step of several rings at once: the slowest ring's (the model does not share links).
    let rings_step = |rings: &[Vec<usize>], parts: usize| {
        rings
            .iter()
            .map(|ring| step(ring, blocks(bytes, parts)))
            .fold(0.0, f64::max)
    };
    let hier = intra_steps * rings_step(&nodes, k) + inter_steps * rings_step(&rails, kn);
    flat.min(hier)
}

/// One tensor's journey: producer `u`'s result `tensor` to place `pv` in layout `lv`.
pub type Delivery = (usize, u32, usize, Layout);

/// The distinct reshards of `assign`: each (producer, tensor, consumer place, layout) once,
/// with its bytes and communication (empty ones left out), in producer order.
pub fn deliveries(inst: &Instance, assign: &[usize]) -> Vec<(Delivery, u64, Comm)> {
    let mut out = Vec::new();
    let mut seen: Vec<Delivery> = Vec::new();
    for u in 0..inst.n {
        seen.clear();
        let pu = inst.place_of(u, assign[u]);
        for &e in &inst.out_edges[u] {
            let edge = &inst.problem.edges[e];
            let v = edge.to;
            let pv = inst.place_of(v, assign[v]);
            let lu = out_layout(inst, u, assign[u], edge.tensor);
            let lv = in_layout(inst, v, assign[v], edge.operand);
            let key = (u, edge.tensor, pv, lv);
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            let comm = reshard(inst, pu, lu, pv, lv, edge.bytes);
            if !comm.is_empty() {
                out.push((key, edge.bytes, comm));
            }
        }
    }
    out
}

/// [`crate::eval::evaluate`] for an assignment of options (devices or split alternatives).
pub fn evaluate(inst: &Instance, assign: &[usize], order: &[usize]) -> Evaluation {
    let mut device_load = inst.base_load.clone();
    let mut memory = inst.base_memory.clone();
    for (o, &x) in assign.iter().enumerate().take(inst.n) {
        let m = inst.option_memory(o, x);
        for (&k, &t) in inst.place_devices[inst.place_of(o, x)]
            .iter()
            .zip(inst.option_times(o, x))
        {
            device_load[k] += t;
            memory[k] = memory[k].saturating_add(m);
        }
    }
    let mut channel_load = vec![0.0; inst.num_channels];
    let mut traffic = 0u64;
    // Per (producer, tensor, sending device): its longest transfer of the tensor.
    let mut sends: std::collections::BTreeMap<(usize, u32, usize), f64> = Default::default();
    for ((u, tensor, pv, lv), bytes, comm) in deliveries(inst, assign) {
        let keep = kept(inst, pv, lv, bytes);
        for &k in &inst.place_devices[pv] {
            memory[k] = memory[k].saturating_add(keep);
        }
        for r in &comm.rings {
            for (a, b) in ring_pairs(inst, r) {
                let t = f64::from(r.steps) * inst.transfer(a, b, r.piece);
                charge(inst, &mut channel_load, a, b, t);
                for k in [a, b] {
                    if !inst.overlap[k] {
                        device_load[k] += t;
                    }
                }
                traffic = traffic.saturating_add(u64::from(r.steps).saturating_mul(r.piece));
            }
        }
        for &(a, b, bytes) in &comm.flows {
            let t = inst.transfer(a, b, bytes);
            charge(inst, &mut channel_load, a, b, t);
            if !inst.overlap[b] {
                device_load[b] += t;
            }
            let s = sends.entry((u, tensor, a)).or_insert(0.0);
            *s = s.max(t);
            traffic = traffic.saturating_add(bytes);
        }
    }
    for ((_, _, a), t) in sends {
        if !inst.overlap[a] {
            device_load[a] += t;
        }
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

/// Adds a transfer of `t` seconds from `a` to `b` to its route's channels.
fn charge(inst: &Instance, channels: &mut [f64], a: usize, b: usize, t: f64) {
    for c in inst.route_channels(a, b) {
        channels[c] += t;
    }
}

/// The list-scheduled latency of an assignment of options: an op starts when every device of
/// its place is free and every operand has been resharded to it (its producer's finish plus
/// the reshard's time), and runs for its slowest share. A device that does not overlap
/// transfers spends, as in [`crate::eval`], what it receives of a tensor (once) before the
/// first op there that reads it, and stays busy after an op for its longest transfer of each
/// tensor the op made.
pub fn schedule_latency(inst: &Instance, assign: &[usize], order: &[usize]) -> f64 {
    let mut finish = vec![0.0f64; inst.n];
    let mut free = vec![0.0f64; inst.d];
    let mut end: f64 = 0.0;
    let occupy = !inst.overlap.iter().all(|&x| x);
    let mut received: std::collections::BTreeSet<(usize, u32, usize)> = Default::default();
    let mut seen: Vec<Delivery> = Vec::new();
    for &o in order {
        let x = assign[o];
        let pv = inst.place_of(o, x);
        let devices = &inst.place_devices[pv];
        let mut ready: f64 = 0.0;
        let mut receiving = vec![0.0f64; devices.len()];
        for &e in &inst.in_edges[o] {
            let edge = &inst.problem.edges[e];
            let u = edge.from;
            let pu = inst.place_of(u, assign[u]);
            let lu = out_layout(inst, u, assign[u], edge.tensor);
            let lv = in_layout(inst, o, x, edge.operand);
            let comm = reshard(inst, pu, lu, pv, lv, edge.bytes);
            ready = ready.max(finish[u] + comm_time(inst, &comm));
            if occupy {
                for (i, &b) in devices.iter().enumerate() {
                    if inst.overlap[b] || !received.insert((u, edge.tensor, b)) {
                        continue;
                    }
                    receiving[i] += comm
                        .rings
                        .iter()
                        .flat_map(|r| {
                            ring_pairs(inst, r).filter(move |&(_, to)| to == b).map(
                                move |(a, to)| f64::from(r.steps) * inst.transfer(a, to, r.piece),
                            )
                        })
                        .chain(
                            comm.flows
                                .iter()
                                .filter(|f| f.1 == b)
                                .map(|&(a, to, bytes)| inst.transfer(a, to, bytes)),
                        )
                        .sum::<f64>();
                }
            }
        }
        let start = devices
            .iter()
            .chain(&inst.spmd[o])
            .map(|&k| free[k])
            .fold(ready, f64::max);
        let duration = inst.option_times(o, x).iter().copied().fold(0.0, f64::max);
        let receive = receiving.iter().copied().fold(0.0, f64::max);
        finish[o] = start + receive + duration;
        for &k in devices.iter().chain(&inst.spmd[o]) {
            free[k] = finish[o];
        }
        if occupy {
            // Each sending device's longest transfer of each tensor, after the op.
            let mut sends: std::collections::BTreeMap<(u32, usize), f64> = Default::default();
            seen.clear();
            for &e in &inst.out_edges[o] {
                let edge = &inst.problem.edges[e];
                let v = edge.to;
                let key = (
                    o,
                    edge.tensor,
                    inst.place_of(v, assign[v]),
                    in_layout(inst, v, assign[v], edge.operand),
                );
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                let comm = reshard(
                    inst,
                    pv,
                    out_layout(inst, o, x, edge.tensor),
                    key.2,
                    key.3,
                    edge.bytes,
                );
                for &(a, b, bytes) in &comm.flows {
                    let s = sends.entry((edge.tensor, a)).or_insert(0.0);
                    *s = s.max(inst.transfer(a, b, bytes));
                }
                for r in &comm.rings {
                    for (a, b) in ring_pairs(inst, r) {
                        *sends.entry((edge.tensor, a)).or_insert(0.0) +=
                            f64::from(r.steps) * inst.transfer(a, b, r.piece);
                    }
                }
            }
            for ((_, a), t) in sends {
                if !inst.overlap[a] {
                    free[a] += t;
                }
            }
        }
        end = end.max(finish[o]);
    }
    end
}

/// [`crate::eval::violation`] for an assignment of options.
pub fn violation(inst: &Instance, assign: &[usize]) -> Option<String> {
    for (o, &x) in assign.iter().enumerate() {
        if x >= inst.options(o) {
            return Some(format!(
                "op `{}` takes option {x}, but has only {} (its devices and splits)",
                inst.op_name(o),
                inst.options(o)
            ));
        }
        if !inst.option_allowed(o, x) {
            return Some(if x < inst.d {
                format!(
                    "op `{}` cannot run on `{}`",
                    inst.op_name(o),
                    inst.device_name(x)
                )
            } else {
                format!(
                    "op `{}` cannot run split over `{}` (its split {})",
                    inst.op_name(o),
                    inst.place_name(inst.place_of(o, x)),
                    x - inst.d
                )
            });
        }
    }
    for members in &inst.groups {
        let p = inst.place_of(members[0], assign[members[0]]);
        if let Some(&o) = members.iter().find(|&&o| inst.place_of(o, assign[o]) != p) {
            return Some(format!(
                "ops `{}` and `{}` share a colocation group but not a place",
                inst.op_name(members[0]),
                inst.op_name(o)
            ));
        }
    }
    let delivered = deliveries(inst, assign);
    for ((u, _, pv, _), _, comm) in &delivered {
        let (u, pv) = (*u, *pv);
        let pairs = comm
            .rings
            .iter()
            .flat_map(|r| ring_pairs(inst, r).collect::<Vec<_>>())
            .chain(comm.flows.iter().map(|&(a, b, _)| (a, b)));
        for (a, b) in pairs {
            if !inst.latency[a * inst.d + b].is_finite() {
                return Some(format!(
                    "`{}`'s result must reach `{}` from `{}`, but no route leads from `{}` to \
                     `{}`",
                    inst.op_name(u),
                    inst.place_name(pv),
                    inst.device_name(a),
                    inst.device_name(a),
                    inst.device_name(b)
                ));
            }
        }
    }
    crate::eval::over_capacity(inst, assign, &memory_of(inst, assign, &delivered))
}

/// [`crate::eval::memory_use`] for an assignment of options.
pub fn memory_use(inst: &Instance, assign: &[usize]) -> Vec<u64> {
    memory_of(inst, assign, &deliveries(inst, assign))
}

/// Each device's memory: its ops' own, plus what it keeps of the `delivered` tensors.
fn memory_of(inst: &Instance, assign: &[usize], delivered: &[(Delivery, u64, Comm)]) -> Vec<u64> {
    let mut memory = inst.base_memory.clone();
    for (o, &x) in assign.iter().enumerate().take(inst.n) {
        let m = inst.option_memory(o, x);
        for &k in &inst.place_devices[inst.place_of(o, x)] {
            memory[k] = memory[k].saturating_add(m);
        }
    }
    for &((_, _, pv, lv), bytes, _) in delivered {
        let keep = kept(inst, pv, lv, bytes);
        for &k in &inst.place_devices[pv] {
            memory[k] = memory[k].saturating_add(keep);
        }
    }
    memory
}

/// Whether `assign` splits any op (so the general model of this module applies).
pub fn any_split(inst: &Instance, assign: &[usize]) -> bool {
    assign.iter().any(|&x| x >= inst.d)
}

/// An assignment of options with its device loads, link-direction loads and memory kept up
/// to date as single ops change option (only the op's own shares and the reshards of its
/// edges are redone): the `split` strategy's search evaluates its moves with it. Sums drift
/// by round-off as moves come and go; [`Tracker::new`] recomputes from scratch.
#[derive(Clone, Debug)]
pub struct Tracker<'a> {
    inst: &'a Instance,
    /// The option of each op.
    pub assign: Vec<usize>,
    load: Vec<f64>,
    channel: Vec<f64>,
    memory: Vec<i128>,
    /// The live reshards: how many edges need each, its communication, its kept bytes.
    live: std::collections::HashMap<Delivery, (u32, Comm, u64)>,
    /// Per (producer, tensor, sending device that does not overlap transfers): the times of
    /// its live transfers of the tensor (it is charged the longest).
    sends: std::collections::HashMap<(usize, u32, usize), Vec<f64>>,
}

impl<'a> Tracker<'a> {
    /// The tracker of `assign`.
    pub fn new(inst: &'a Instance, assign: Vec<usize>) -> Tracker<'a> {
        let mut t = Tracker {
            inst,
            assign,
            load: inst.base_load.clone(),
            channel: vec![0.0; inst.num_channels],
            memory: inst.base_memory.iter().map(|&m| i128::from(m)).collect(),
            live: Default::default(),
            sends: Default::default(),
        };
        for o in 0..inst.n {
            t.own(o, 1.0);
        }
        for e in 0..inst.problem.edges.len() {
            t.attach(e);
        }
        t
    }

    /// Adds (`sign` 1) or removes (-1) op `o`'s own shares and memory.
    fn own(&mut self, o: usize, sign: f64) {
        let inst = self.inst;
        let x = self.assign[o];
        let m = i128::from(inst.option_memory(o, x));
        for (&k, &t) in inst.place_devices[inst.place_of(o, x)]
            .iter()
            .zip(inst.option_times(o, x))
        {
            self.load[k] += sign * t;
            self.memory[k] += sign as i128 * m;
        }
    }

    fn key(&self, e: usize) -> Delivery {
        let inst = self.inst;
        let edge = &inst.problem.edges[e];
        let v = edge.to;
        (
            edge.from,
            edge.tensor,
            inst.place_of(v, self.assign[v]),
            in_layout(inst, v, self.assign[v], edge.operand),
        )
    }

    /// Adds (`sign` 1) or removes (-1) a reshard's loads and kept memory (`key`: its
    /// delivery).
    fn comm(&mut self, key: Delivery, comm: &Comm, kept: u64, sign: f64) {
        let inst = self.inst;
        let (u, tensor, pv, _) = key;
        for &k in &inst.place_devices[pv] {
            self.memory[k] += sign as i128 * i128::from(kept);
        }
        for r in &comm.rings {
            for (a, b) in ring_pairs(inst, r) {
                let t = f64::from(r.steps) * inst.transfer(a, b, r.piece);
                charge(inst, &mut self.channel, a, b, sign * t);
                for k in [a, b] {
                    if !inst.overlap[k] {
                        self.load[k] += sign * t;
                    }
                }
            }
        }
        for &(a, b, bytes) in &comm.flows {
            let t = inst.transfer(a, b, bytes);
            charge(inst, &mut self.channel, a, b, sign * t);
            if !inst.overlap[b] {
                self.load[b] += sign * t;
            }
            if !inst.overlap[a] {
                let times = self.sends.entry((u, tensor, a)).or_default();
                let before = times.iter().copied().fold(0.0, f64::max);
                if sign > 0.0 {
                    times.push(t);
                } else if let Some(i) = times.iter().position(|&x| x == t) {
                    times.swap_remove(i);
                }
                let after = times.iter().copied().fold(0.0, f64::max);
                self.load[a] += after - before;
            }
        }
    }

    fn attach(&mut self, e: usize) {
        let key = self.key(e);
        if let Some(entry) = self.live.get_mut(&key) {
            entry.0 += 1;
            return;
        }
        let inst = self.inst;
        let (u, tensor, pv, lv) = key;
        let bytes = inst.problem.edges[e].bytes;
        let comm = reshard(
            inst,
            inst.place_of(u, self.assign[u]),
            out_layout(inst, u, self.assign[u], tensor),
            pv,
            lv,
            bytes,
        );
        let kept_bytes = if comm.is_empty() {
            0
        } else {
            kept(inst, pv, lv, bytes)
        };
        self.comm(key, &comm, kept_bytes, 1.0);
        self.live.insert(key, (1, comm, kept_bytes));
    }

    fn detach(&mut self, e: usize) {
        let key = self.key(e);
        let Some(entry) = self.live.get_mut(&key) else {
            return;
        };
        entry.0 -= 1;
        if entry.0 == 0
            && let Some((_, comm, kept_bytes)) = self.live.remove(&key)
        {
            self.comm(key, &comm, kept_bytes, -1.0);
        }
    }

    /// The instance.
    pub fn inst(&self) -> &'a Instance {
        self.inst
    }

    /// Gives op `o` option `x`.
    pub fn set(&mut self, o: usize, x: usize) {
        if self.assign[o] == x {
            return;
        }
        let inst = self.inst;
        for i in 0..inst.in_edges[o].len() {
            self.detach(inst.in_edges[o][i]);
        }
        for i in 0..inst.out_edges[o].len() {
            self.detach(inst.out_edges[o][i]);
        }
        self.own(o, -1.0);
        self.assign[o] = x;
        self.own(o, 1.0);
        for i in 0..inst.in_edges[o].len() {
            self.attach(inst.in_edges[o][i]);
        }
        for i in 0..inst.out_edges[o].len() {
            self.attach(inst.out_edges[o][i]);
        }
    }

    /// The period: the busiest device or link direction.
    pub fn period(&self) -> f64 {
        self.load
            .iter()
            .chain(&self.channel)
            .copied()
            .fold(0.0, f64::max)
    }

    /// Every device's and link direction's busy time, summed.
    pub fn total_busy(&self) -> f64 {
        self.load.iter().chain(&self.channel).sum()
    }

    /// Bytes over capacity, summed over the devices.
    pub fn overflow(&self) -> u64 {
        self.memory
            .iter()
            .zip(&self.inst.capacity)
            .map(|(&m, &c)| u64::try_from((m - i128::from(c)).max(0)).unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add)
    }
}
