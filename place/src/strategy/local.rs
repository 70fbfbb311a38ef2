//! Local search that improves any feasible plan: moves of one colocation unit to another
//! allowed device, kept when they make the plan better, for a bounded number of passes.
//!
//! **Model.** The plan's own evaluation ([`crate::eval`]): for throughput the bottleneck (the
//! largest device or channel load); for latency the list schedule in the plan's order.
//!
//! **Throughput** is evaluated incrementally by its `State`: it keeps device loads, channel
//! loads, memory, and for every tensor (producer, result) the devices that receive it, so a
//! move touches only the moved ops, their edges and the routes of their tensors. The
//! objective is a maximum, which is flat under most moves, so moves are ranked
//! lexicographically by (bottleneck, sum of squares of all loads): a move that keeps the
//! bottleneck and spreads load is taken, which lets later moves lower the bottleneck
//! (the usual plateau escape of load balancing). Each unit tries its best move (best
//! improvement over its candidate devices) once per pass.
//!
//! **Latency** is re-evaluated by a full list schedule per candidate move, so it runs only
//! a capped number of candidates ([`LATENCY_WORK`] op-visits in all); first improvement.
//!
//! **Moves**: a unit alone; when that cannot improve, the unit together with one
//! neighbouring unit on its device (a pair move: moving either end of an edge alone may make
//! a device receive a tensor it cannot hold, or cost a transfer the pair does not), then the
//! connected cluster of up to [`CLUSTER_UNITS`] units around it on its device (a chain).
//!
//! With at most [`SWAP_UNITS`] units, a unit that no such move improves also tries swapping
//! devices with each unit on another device (both moves evaluated together, so a swap that
//! only fits as a whole is found).
//!
//! **Candidates**: every allowed device when there are at most [`ALL_DEVICES`] devices;
//! otherwise the devices of the unit's graph neighbours, the devices one hop from its own,
//! and the least loaded allowed device.
//!
//! **Guarantees.** Every move keeps memory within capacity (received tensors included), ops
//! on allowed devices, and units whole; the result is re-evaluated from scratch and returned
//! only when it is feasible and no worse than the input, so the plan never gets worse.
//!
//! **Complexity.** A throughput candidate costs O(edges of the unit · route length plus
//! devices and channels); a pass tries O(units · candidates). Passes stop at [`MAX_PASSES`], when a
//! pass moves nothing, or when [`THROUGHPUT_WORK`] is spent.
//!
//! **Source.** Classic move-based local search for load balancing / graph partitioning
//! (Kernighan-Lin 1970, Fiduccia-Mattheyses 1982 style single-vertex moves with gains), here
//! with an exact incremental evaluation of the placement objective.

use crate::eval::{Objective, evaluate, schedule_latency, violation};
use crate::problem::Instance;
use crate::strategy::{Solution, SolveOptions, units};

/// The most passes over the units.
pub const MAX_PASSES: usize = 12;
/// With at most this many devices, every allowed device is a candidate.
pub const ALL_DEVICES: usize = 8;
/// The work budget of throughput search (resource and edge visits).
pub const THROUGHPUT_WORK: usize = 30_000_000;
/// The work budget of latency search (op and edge visits of re-scheduling).
pub const LATENCY_WORK: usize = 30_000_000;

/// With at most this many units, a unit no move improves also tries swapping devices with
/// every unit on another device.
pub const SWAP_UNITS: usize = 128;

/// The most units a cluster move carries.
pub const CLUSTER_UNITS: usize = 8;

/// Marks an op with no device yet (in [`State`]).
pub(crate) const NONE: usize = usize::MAX;

/// An assignment with its device loads, channel loads and memory, updated incrementally by
/// moves. Ops may be unassigned ([`NONE`]): they contribute nothing (so constructive
/// solvers can place ops one by one).
pub(crate) struct State<'a> {
    inst: &'a Instance,
    /// Device per op, or [`NONE`].
    pub assign: Vec<usize>,
    /// Busy seconds per device.
    pub load: Vec<f64>,
    /// Busy seconds per channel.
    pub chan: Vec<f64>,
    /// Bytes held per device.
    pub mem: Vec<u64>,
    /// Per tensor: (device, consuming edges on it).
    recv: Vec<Vec<(usize, u32)>>,
    out_keys: Vec<Vec<usize>>,
    in_keys: Vec<Vec<usize>>,
    // Scratch for one candidate move.
    in_s: Vec<bool>,
    tgt: Vec<usize>,
    key_pos: Vec<usize>,
    akeys: Vec<usize>,
    newrecv: Vec<Vec<(usize, u32)>>,
    dload: Vec<f64>,
    dchan: Vec<f64>,
    dmem: Vec<i128>,
}

impl<'a> State<'a> {
    /// The state of `assign` (entries may be [`NONE`]).
    pub fn new(inst: &'a Instance, assign: &[usize]) -> State<'a> {
        let mut out_keys: Vec<Vec<usize>> = vec![Vec::new(); inst.n];
        let mut in_keys = vec![Vec::new(); inst.n];
        for (u, outs) in out_keys.iter_mut().enumerate() {
            for &e in &inst.out_edges[u] {
                let key = inst.tensor_of_edge[e];
                if !outs.contains(&key) {
                    outs.push(key);
                }
                in_keys[inst.problem.edges[e].to].push(key);
            }
        }
        let nk = inst.tensor_from.len();
        let mut s = State {
            inst,
            assign: vec![NONE; inst.n],
            load: vec![0.0; inst.d],
            chan: vec![0.0; inst.num_channels],
            mem: vec![0; inst.d],
            recv: vec![Vec::new(); nk],
            out_keys,
            in_keys,
            in_s: vec![false; inst.n],
            tgt: vec![NONE; inst.n],
            key_pos: vec![usize::MAX; nk],
            akeys: Vec::new(),
            newrecv: Vec::new(),
            dload: vec![0.0; inst.d],
            dchan: vec![0.0; inst.num_channels],
            dmem: vec![0; inst.d],
        };
        s.rebuild(assign);
        s
    }

    /// Recomputes every table from `assign` (also clears floating-point drift).
    pub fn rebuild(&mut self, assign: &[usize]) {
        let inst = self.inst;
        self.assign.copy_from_slice(assign);
        self.load.iter_mut().for_each(|x| *x = 0.0);
        self.chan.iter_mut().for_each(|x| *x = 0.0);
        self.mem.iter_mut().for_each(|x| *x = 0);
        self.recv.iter_mut().for_each(Vec::clear);
        for (o, &k) in assign.iter().enumerate() {
            if k == NONE {
                continue;
            }
            self.load[k] += inst.t(o, k);
            self.mem[k] = self.mem[k].saturating_add(inst.memory[o]);
            for &key in &self.in_keys[o] {
                let r = &mut self.recv[key];
                match r.iter_mut().find(|x| x.0 == k) {
                    Some(x) => x.1 += 1,
                    None => r.push((k, 1)),
                }
            }
        }
        for key in 0..self.inst.tensor_from.len() {
            let src = assign[self.inst.tensor_from[key]];
            if src == NONE {
                continue;
            }
            let bytes = self.inst.tensor_bytes[key];
            let mut send: f64 = 0.0;
            for &(to, c) in &self.recv[key] {
                if c == 0 || to == src {
                    continue;
                }
                let t = inst.transfer(src, to, bytes);
                for ch in inst.route_channels(src, to) {
                    self.chan[ch] += t;
                }
                self.mem[to] = self.mem[to].saturating_add(bytes);
                // Devices that do not overlap transfers are busy with them (`crate::eval`).
                if !inst.overlap[to] {
                    self.load[to] += t;
                }
                send = send.max(t);
            }
            if !inst.overlap[src] {
                self.load[src] += send;
            }
        }
    }

    /// (bottleneck, sum of squares of loads) now.
    pub fn score(&self) -> (f64, f64) {
        let mut max: f64 = 0.0;
        let mut sq = 0.0;
        for &x in self.load.iter().chain(&self.chan) {
            max = max.max(x);
            sq += x * x;
        }
        (max, sq)
    }

    /// Fills the scratch deltas for the moves (every op of a set to its device, the sets
    /// disjoint); false when they would overflow a device's memory (or put an op where it
    /// may not run). Always call [`State::clear`] (or [`State::commit`]) afterwards.
    fn delta(&mut self, moves: &[(&[usize], usize)]) -> bool {
        let inst = self.inst;
        let d = inst.d;
        let mut ok = true;
        for (o, k) in moves
            .iter()
            .flat_map(|&(ops, k)| ops.iter().map(move |&o| (o, k)))
        {
            if !inst.allowed(o, k) {
                ok = false;
            }
            self.in_s[o] = true;
            self.tgt[o] = k;
            let cur = self.assign[o];
            if cur != NONE {
                self.dload[cur] -= inst.t(o, cur);
                self.dmem[cur] -= i128::from(inst.memory[o]);
            }
            self.dload[k] += inst.t(o, k);
            self.dmem[k] += i128::from(inst.memory[o]);
        }
        if !ok {
            return false;
        }
        // The tensors whose transfers change: made or used by a moved op.
        for &o in moves.iter().flat_map(|m| m.0) {
            for i in 0..self.out_keys[o].len() + self.in_keys[o].len() {
                let key = if i < self.out_keys[o].len() {
                    self.out_keys[o][i]
                } else {
                    self.in_keys[o][i - self.out_keys[o].len()]
                };
                if self.key_pos[key] == usize::MAX {
                    let p = self.akeys.len();
                    self.key_pos[key] = p;
                    self.akeys.push(key);
                    if self.newrecv.len() <= p {
                        self.newrecv.push(Vec::new());
                    }
                    self.newrecv[p].clear();
                    let (dst, src) = (&mut self.newrecv[p], &self.recv[key]);
                    dst.extend_from_slice(src);
                }
            }
        }
        for &o in moves.iter().flat_map(|m| m.0) {
            let cur = self.assign[o];
            let k = self.tgt[o];
            for &key in &self.in_keys[o] {
                let r = &mut self.newrecv[self.key_pos[key]];
                if cur != NONE
                    && let Some(x) = r.iter_mut().find(|x| x.0 == cur)
                {
                    x.1 -= 1;
                }
                match r.iter_mut().find(|x| x.0 == k) {
                    Some(x) => x.1 += 1,
                    None => r.push((k, 1)),
                }
            }
        }
        for p in 0..self.akeys.len() {
            let key = self.akeys[p];
            let bytes = self.inst.tensor_bytes[key];
            let s = self.inst.tensor_from[key];
            let old_src = self.assign[s];
            let new_src = if self.in_s[s] { self.tgt[s] } else { old_src };
            for (sign, src, list) in [
                (-1.0, old_src, &self.recv[key]),
                (1.0, new_src, &self.newrecv[p]),
            ] {
                if src == NONE {
                    continue;
                }
                let mut send: f64 = 0.0;
                for &(to, c) in list {
                    if c == 0 || to == src {
                        continue;
                    }
                    let t = inst.transfer(src, to, bytes);
                    for ch in inst.route_channels(src, to) {
                        self.dchan[ch] += sign * t;
                    }
                    if sign > 0.0 {
                        self.dmem[to] += i128::from(bytes);
                    } else {
                        self.dmem[to] -= i128::from(bytes);
                    }
                    if !inst.overlap[to] {
                        self.dload[to] += sign * t;
                    }
                    send = send.max(t);
                }
                if !inst.overlap[src] {
                    self.dload[src] += sign * send;
                }
            }
        }
        (0..d).all(|i| {
            self.dmem[i] <= 0
                || i128::from(self.mem[i]) + self.dmem[i] <= i128::from(inst.capacity[i])
        })
    }

    /// The score after the move in the scratch deltas.
    fn moved_score(&self) -> (f64, f64) {
        let mut max: f64 = 0.0;
        let mut sq = 0.0;
        for (x, dx) in self
            .load
            .iter()
            .zip(&self.dload)
            .chain(self.chan.iter().zip(&self.dchan))
        {
            let v = (x + dx).max(0.0);
            max = max.max(v);
            sq += v * v;
        }
        (max, sq)
    }

    /// Forgets the scratch deltas.
    fn clear(&mut self, moves: &[(&[usize], usize)]) {
        for &o in moves.iter().flat_map(|m| m.0) {
            self.in_s[o] = false;
        }
        for &key in &self.akeys {
            self.key_pos[key] = usize::MAX;
        }
        self.akeys.clear();
        self.dload.iter_mut().for_each(|x| *x = 0.0);
        self.dchan.iter_mut().for_each(|x| *x = 0.0);
        self.dmem.iter_mut().for_each(|x| *x = 0);
    }

    /// Applies the scratch deltas of the moves.
    fn commit(&mut self, moves: &[(&[usize], usize)]) {
        for i in 0..self.inst.d {
            self.load[i] = (self.load[i] + self.dload[i]).max(0.0);
            self.mem[i] = (i128::from(self.mem[i]) + self.dmem[i]).max(0) as u64;
        }
        for (c, dc) in self.chan.iter_mut().zip(&self.dchan) {
            *c = (*c + dc).max(0.0);
        }
        for p in 0..self.akeys.len() {
            let key = self.akeys[p];
            let r = &mut self.recv[key];
            r.clear();
            r.extend(self.newrecv[p].iter().copied().filter(|x| x.1 > 0));
        }
        for &o in moves.iter().flat_map(|m| m.0) {
            self.assign[o] = self.tgt[o];
        }
        self.clear(moves);
    }

    /// Evaluates moving `ops` to `k`: the new (bottleneck, sum of squares), or `None` when it
    /// breaks memory or support. The state is unchanged.
    pub fn try_move(&mut self, ops: &[usize], k: usize) -> Option<(f64, f64)> {
        self.try_moves(&[(ops, k)])
    }

    /// Evaluates several moves at once (disjoint sets, e.g. a swap).
    pub fn try_moves(&mut self, moves: &[(&[usize], usize)]) -> Option<(f64, f64)> {
        let ok = self.delta(moves);
        let r = ok.then(|| self.moved_score());
        self.clear(moves);
        r
    }

    /// Moves `ops` to `k` when memory and support allow; returns whether it moved.
    pub fn apply(&mut self, ops: &[usize], k: usize) -> bool {
        self.apply_moves(&[(ops, k)])
    }

    /// Makes several moves at once when memory and support allow; returns whether it did.
    pub fn apply_moves(&mut self, moves: &[(&[usize], usize)]) -> bool {
        if self.delta(moves) {
            self.commit(moves);
            true
        } else {
            self.clear(moves);
            false
        }
    }

    /// How much memory `k` could still take.
    pub fn free_memory(&self, k: usize) -> u64 {
        self.inst.capacity[k].saturating_sub(self.mem[k])
    }

    /// Work a move of `ops` costs (for budgets).
    pub fn move_cost(&self, ops: &[usize]) -> usize {
        ops.iter()
            .map(|&o| 1 + self.out_keys[o].len() * 4 + self.in_keys[o].len() * 2)
            .sum::<usize>()
            + self.inst.d
            + self.inst.num_channels
    }
}

/// The devices a unit tries moving to (see the module doc), sorted, without its own.
pub(crate) fn candidates(inst: &Instance, st: &State, unit: &[usize], out: &mut Vec<usize>) {
    out.clear();
    let d = inst.d;
    let cur = st.assign[unit[0]];
    if d <= ALL_DEVICES {
        out.extend((0..d).filter(|&k| k != cur && inst.allowed(unit[0], k)));
        return;
    }
    for &o in unit {
        for &e in inst.in_edges[o].iter().chain(&inst.out_edges[o]) {
            let edge = &inst.problem.edges[e];
            for x in [edge.from, edge.to] {
                let k = st.assign[x];
                if k != NONE {
                    out.push(k);
                }
            }
        }
    }
    if cur != NONE {
        out.extend((0..d).filter(|&k| inst.hops[cur * d + k] == 1));
    }
    if let Some(k) = (0..d)
        .filter(|&k| inst.allowed(unit[0], k))
        .min_by(|&a, &b| st.load[a].total_cmp(&st.load[b]))
    {
        out.push(k);
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&k| k != cur && inst.allowed(unit[0], k));
}

/// Whether `(m, s)` is strictly better than `(m0, s0)` (bottleneck first, then spread).
pub(crate) fn better(m: f64, s: f64, m0: f64, s0: f64) -> bool {
    m < m0 - 1e-12 * m0.abs() || (m <= m0 && s < s0 - 1e-12 * s0.abs())
}

/// Improves `sol` by moves of units between devices; the result is feasible and never worse
/// than `sol` for `opts.objective` (when `sol` itself is infeasible it is returned as is).
pub fn improve(inst: &Instance, sol: Solution, opts: &SolveOptions) -> Solution {
    if violation(inst, &sol.assign).is_some() || inst.n == 0 {
        return sol;
    }
    let us = units(inst);
    let assign = match opts.objective {
        Objective::Throughput => improve_throughput(inst, &sol.assign, &us),
        Objective::Latency => improve_latency(inst, &sol.assign, &sol.order, &us),
    };
    let before = evaluate(inst, &sol.assign, &sol.order).value(opts.objective);
    let after = evaluate(inst, &assign, &sol.order).value(opts.objective);
    if violation(inst, &assign).is_none() && after <= before {
        Solution {
            assign,
            order: sol.order,
        }
    } else {
        sol
    }
}

/// The unit index of every op.
fn unit_index(n: usize, us: &[Vec<usize>]) -> Vec<usize> {
    let mut unit_of = vec![0; n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    unit_of
}

/// The moves tried for unit `i`: the unit alone, then the unit with each neighbouring unit
/// on the same device (a pair move crosses barriers a single move cannot, e.g. when moving
/// either end of an edge alone would make a device receive a tensor it cannot hold), then
/// its connected cluster on the device.
fn move_sets(
    inst: &Instance,
    st: &State,
    us: &[Vec<usize>],
    unit_of: &[usize],
    i: usize,
    out: &mut Vec<Vec<usize>>,
) {
    out.clear();
    out.push(us[i].clone());
    let home = st.assign[us[i][0]];
    let mut seen: Vec<usize> = Vec::new();
    for &o in &us[i] {
        for &e in inst.in_edges[o].iter().chain(&inst.out_edges[o]) {
            let edge = &inst.problem.edges[e];
            for x in [edge.from, edge.to] {
                let j = unit_of[x];
                if j != i && st.assign[x] == home && !seen.contains(&j) {
                    seen.push(j);
                    let mut set = us[i].clone();
                    set.extend_from_slice(&us[j]);
                    out.push(set);
                }
            }
        }
    }
    // The connected group of up to CLUSTER_UNITS units on the device around the unit
    // (breadth first), when larger than a pair: a chain of ops moves together.
    let mut cluster = vec![i];
    let mut at = 0;
    while at < cluster.len() && cluster.len() < CLUSTER_UNITS {
        let u = cluster[at];
        at += 1;
        for &o in &us[u] {
            for &e in inst.in_edges[o].iter().chain(&inst.out_edges[o]) {
                let edge = &inst.problem.edges[e];
                for x in [edge.from, edge.to] {
                    let j = unit_of[x];
                    if st.assign[x] == home
                        && !cluster.contains(&j)
                        && cluster.len() < CLUSTER_UNITS
                    {
                        cluster.push(j);
                    }
                }
            }
        }
    }
    if cluster.len() > 2 {
        out.push(
            cluster
                .iter()
                .flat_map(|&j| us[j].iter().copied())
                .collect(),
        );
    }
}

/// Bottleneck search with incremental evaluation.
pub(crate) fn improve_throughput(
    inst: &Instance,
    assign: &[usize],
    us: &[Vec<usize>],
) -> Vec<usize> {
    let mut st = State::new(inst, assign);
    let unit_of = unit_index(inst.n, us);
    let mut cand = Vec::new();
    let mut sets = Vec::new();
    let mut work = 0usize;
    for _ in 0..MAX_PASSES {
        let mut moved = false;
        let (mut m0, mut s0) = st.score();
        for i in 0..us.len() {
            move_sets(inst, &st, us, &unit_of, i, &mut sets);
            let mut moved_here = false;
            // Pair moves only when the unit alone cannot improve.
            for set in &sets {
                candidates(inst, &st, set, &mut cand);
                let mut best: Option<(f64, f64, usize)> = None;
                for &k in &cand {
                    work += st.move_cost(set);
                    if let Some((m, s)) = st.try_move(set, k)
                        && better(m, s, m0, s0)
                        && best.is_none_or(|(bm, bs, _)| better(m, s, bm, bs))
                    {
                        best = Some((m, s, k));
                    }
                }
                if let Some((m, s, k)) = best
                    && st.apply(set, k)
                {
                    m0 = m;
                    s0 = s;
                    moved = true;
                    moved_here = true;
                    break;
                }
            }
            if !moved_here && us.len() <= SWAP_UNITS {
                let a = st.assign[us[i][0]];
                let mut best: Option<(f64, f64, usize)> = None;
                for (j, uj) in us.iter().enumerate() {
                    let b = st.assign[uj[0]];
                    if b == a || !inst.allowed(us[i][0], b) || !inst.allowed(uj[0], a) {
                        continue;
                    }
                    work += st.move_cost(&us[i]) + st.move_cost(uj);
                    if let Some((m, s)) = st.try_moves(&[(&us[i], b), (uj, a)])
                        && better(m, s, m0, s0)
                        && best.is_none_or(|(bm, bs, _)| better(m, s, bm, bs))
                    {
                        best = Some((m, s, j));
                    }
                }
                if let Some((m, s, j)) = best {
                    let b = st.assign[us[j][0]];
                    if st.apply_moves(&[(&us[i], b), (&us[j], a)]) {
                        (m0, s0) = (m, s);
                        moved = true;
                    }
                }
            }
            if work > THROUGHPUT_WORK {
                break;
            }
        }
        let now = st.assign.clone();
        st.rebuild(&now);
        if !moved || work > THROUGHPUT_WORK {
            break;
        }
    }
    st.assign
}

/// Latency search: full re-scheduling per candidate, first improvement, capped work.
fn improve_latency(
    inst: &Instance,
    assign: &[usize],
    order: &[usize],
    us: &[Vec<usize>],
) -> Vec<usize> {
    let mut st = State::new(inst, assign);
    let per_eval = inst.n + inst.problem.edges.len() + 1;
    let mut budget = LATENCY_WORK / per_eval;
    let mut cur = schedule_latency(inst, &st.assign, order);
    let unit_of = unit_index(inst.n, us);
    let mut cand = Vec::new();
    let mut sets = Vec::new();
    'passes: for _ in 0..MAX_PASSES {
        let mut moved = false;
        for i in 0..us.len() {
            let start = st.assign[us[i][0]];
            move_sets(inst, &st, us, &unit_of, i, &mut sets);
            for set in &sets {
                let home = st.assign[set[0]];
                candidates(inst, &st, set, &mut cand);
                for &k in &cand {
                    if budget == 0 {
                        break 'passes;
                    }
                    budget -= 1;
                    if !st.apply(set, k) {
                        continue;
                    }
                    let v = schedule_latency(inst, &st.assign, order);
                    if v < cur - 1e-12 * cur.abs() {
                        cur = v;
                        moved = true;
                        break;
                    }
                    st.apply(set, home);
                }
                if st.assign[set[0]] != home {
                    break;
                }
            }
            if us.len() <= SWAP_UNITS && st.assign[us[i][0]] == start {
                let a = start;
                for uj in us {
                    let b = st.assign[uj[0]];
                    if b == a || !inst.allowed(us[i][0], b) || !inst.allowed(uj[0], a) {
                        continue;
                    }
                    if budget == 0 {
                        break 'passes;
                    }
                    budget -= 1;
                    if !st.apply_moves(&[(&us[i], b), (uj, a)]) {
                        continue;
                    }
                    let v = schedule_latency(inst, &st.assign, order);
                    if v < cur - 1e-12 * cur.abs() {
                        cur = v;
                        moved = true;
                        break;
                    }
                    st.apply_moves(&[(&us[i], a), (uj, b)]);
                }
            }
        }
        if !moved {
            break;
        }
    }
    st.assign
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::problem_order;
    use crate::problem::Problem;

    /// Three devices on a line, two of them without overlap; a fan-out tensor (two consumers
    /// of one result on other devices) and a second result of the same op.
    const PROBLEM: &str = r#"{
      "version": 1, "name": "occupancy",
      "devices": [
        { "name": "a", "kind": "x", "memory": 1000000 },
        { "name": "b", "kind": "x", "memory": 1000000, "overlap": false },
        { "name": "c", "kind": "y", "memory": 1000000, "overlap": false }
      ],
      "links": [
        { "a": "a", "b": "b", "bandwidth": 1e6, "latency": 1e-4 },
        { "a": "b", "b": "c", "bandwidth": 2e6, "latency": 0 }
      ],
      "ops": [
        { "name": "p", "kind": "k", "time": { "x": 1e-3, "y": 2e-3 } },
        { "name": "q", "kind": "k", "time": { "x": 3e-3, "y": 1e-3 } },
        { "name": "r", "kind": "k", "time": { "x": 2e-3, "y": 2e-3 } },
        { "name": "s", "kind": "k", "time": { "x": 1e-3, "y": 4e-3 } },
        { "name": "t", "kind": "k", "time": { "x": 2e-3, "y": 1e-3 } }
      ],
      "edges": [
        { "from": 0, "to": 1, "bytes": 1000 },
        { "from": 0, "to": 2, "bytes": 1000 },
        { "from": 0, "to": 3, "bytes": 3000, "tensor": 1 },
        { "from": 1, "to": 4, "bytes": 2000 },
        { "from": 2, "to": 4, "bytes": 500 },
        { "from": 3, "to": 4, "bytes": 700 }
      ]
    }"#;

    /// The incremental state charges transfers to devices that do not overlap them exactly
    /// as `evaluate` does, from scratch and after every move, and `try_move` predicts it.
    #[test]
    fn incremental_loads_match_the_evaluation_with_occupancy() {
        let p: Problem = serde_json::from_str(PROBLEM).expect("problem");
        let inst = Instance::new(p).expect("instance");
        let order = problem_order(&inst);
        let mut st = State::new(&inst, &[0, 0, 0, 0, 0]);
        let mut x: u64 = 7;
        for step in 0..200 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let (o, k) = ((x >> 33) as usize % 5, (x >> 40) as usize % 3);
            let predicted = st.try_move(&[o], k).expect("memory is loose").0;
            assert!(st.apply(&[o], k));
            let ev = evaluate(&inst, &st.assign, &order);
            let (max, _) = st.score();
            assert!(
                (max - ev.period).abs() <= 1e-12,
                "step {step}: {max} != {}",
                ev.period
            );
            assert!((predicted - ev.period).abs() <= 1e-12, "step {step}");
            for (a, b) in st.load.iter().zip(&ev.device_load) {
                assert!(
                    (a - b).abs() <= 1e-12,
                    "step {step}: {:?} != {:?}",
                    st.load,
                    ev.device_load
                );
            }
        }
        // Everything on b: only its compute. p on a, the rest on b: b receives p's two
        // tensors (1000 and 3000 bytes over a 1 MB/s link with 0.1 ms latency).
        let ev = evaluate(&inst, &[0, 1, 1, 1, 1], &order);
        let receive = (1e-4 + 1000.0 / 1e6) + (1e-4 + 3000.0 / 1e6);
        assert!((ev.device_load[1] - (3e-3 + 2e-3 + 1e-3 + 2e-3 + receive)).abs() <= 1e-12);
        assert!((ev.device_load[0] - 1e-3).abs() <= 1e-12, "a overlaps");
        // Latency: p ends at 1 ms; q on b starts when p's tensor arrived (2.1 ms) and first
        // receives it (1.1 ms): ends at 6.2 ms; r reads the same tensor (received once):
        // 8.2 ms; s receives the 3 KB tensor (3.1 ms) before it computes: 12.3 ms; t 14.3 ms.
        assert!((ev.latency - 14.3e-3).abs() <= 1e-12, "{}", ev.latency);
        // p on b sends its first tensor to a (1.1 ms) and to c (0.5 ms): charged once, the
        // longer; b also receives q's result from a (2.1 ms) and r's from c (0.25 ms), which
        // c is charged for sending.
        let ev = evaluate(&inst, &[1, 0, 2, 1, 1], &order);
        let b = 1e-3 + 1e-3 + 2e-3 + 1.1e-3 + 2.1e-3 + 2.5e-4;
        assert!(
            (ev.device_load[1] - b).abs() <= 1e-12,
            "{:?}",
            ev.device_load
        );
        assert!((ev.device_load[2] - (2e-3 + 5e-4 + 2.5e-4)).abs() <= 1e-12);
    }
}
