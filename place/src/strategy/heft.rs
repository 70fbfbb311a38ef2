//! HEFT list scheduling for heterogeneous devices (Topcuoglu, Hariri and Wu,
//! "Performance-effective and low-complexity task scheduling for heterogeneous computing",
//! IEEE TPDS 2002).
//!
//! **Ranks.** The upward rank of an op is its mean time over the devices allowed to run it,
//! plus the largest, over its out-edges, of the edge's mean transfer time (mean route latency
//! plus bytes times mean seconds per byte, over ordered pairs of distinct reachable devices)
//! plus the consumer's rank. Ops are scheduled in decreasing rank, ties by op index: since
//! times and transfers are never negative, a producer's rank is at least its consumer's, so
//! this order is topological; it is the plan's `order`.
//!
//! **Device choice.** Each op goes to the allowed device where it finishes earliest
//! (non-insertion: a device runs its ops in the schedule order, which is exactly the list
//! schedule [`crate::eval`] evaluates, so the finish times computed here are the plan's;
//! on a device that does not overlap transfers the finish time includes receiving the
//! op's inputs, but not the sends of later consumers' tensors, which are not placed yet).
//! Ties are broken by the smaller resulting bottleneck (device and link loads), then by device
//! index. A colocation unit is placed whole at its first member's turn (by that member's
//! finish time); its other members follow on that device at their own turns.
//!
//! **Memory.** Placements are checked exactly with the incremental state of
//! [`crate::strategy::local`] (ops' memory and every tensor received, including the copies a
//! newly placed producer sends to consumers placed earlier); a device that would overflow is
//! skipped, and an op no device can take is an error naming it.
//!
//! It is a latency heuristic; `auto` also runs it for throughput (its plan is simply
//! evaluated for that objective).
//!
//! **Complexity.** O(E) for ranks, O(N log N) for the order, and O(N · devices · (edges per
//! op + devices + channels)) for the placement.

use crate::eval::violation;
use crate::problem::{Instance, ProblemError};
use crate::strategy::local::{NONE, State};
use crate::strategy::{Solution, SolveOptions, units};

/// The upward ranks of the ops.
pub fn upward_ranks(inst: &Instance) -> Vec<f64> {
    let d = inst.d;
    let (mut lat, mut inv, mut pairs) = (0.0, 0.0, 0usize);
    for a in 0..d {
        for b in 0..d {
            let i = a * d + b;
            if a != b && inst.latency[i].is_finite() && inst.inv_bandwidth[i].is_finite() {
                lat += inst.latency[i];
                inv += inst.inv_bandwidth[i];
                pairs += 1;
            }
        }
    }
    if pairs > 0 {
        lat /= pairs as f64;
        inv /= pairs as f64;
    }
    let mut rank = vec![0.0f64; inst.n];
    for o in (0..inst.n).rev() {
        let (sum, cnt) = (0..d)
            .filter(|&k| inst.allowed(o, k))
            .fold((0.0, 0usize), |(s, c), k| (s + inst.t(o, k), c + 1));
        let w = sum / cnt.max(1) as f64;
        let tail = inst.out_edges[o]
            .iter()
            .map(|&e| {
                let edge = &inst.problem.edges[e];
                lat + edge.bytes as f64 * inv + rank[edge.to]
            })
            .fold(0.0, f64::max);
        rank[o] = w + tail;
    }
    rank
}

/// The HEFT plan (see the module doc).
pub fn solve(inst: &Instance, _opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let n = inst.n;
    let d = inst.d;
    let rank = upward_ranks(inst);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| rank[b].total_cmp(&rank[a]).then(a.cmp(&b)));
    let us = units(inst);
    let mut unit_of = vec![0usize; n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let mut st = State::new(inst, &vec![NONE; n]);
    let mut finish = vec![0.0f64; n];
    let mut free = vec![0.0f64; d];
    let eft = |st: &State, finish: &[f64], free: &[f64], o: usize, k: usize| {
        let mut start = free[k];
        // A device that does not overlap transfers receives them itself, at the op's start
        // (as `crate::eval` schedules it).
        let mut receiving = 0.0;
        for &e in &inst.in_edges[o] {
            let edge = &inst.problem.edges[e];
            let p = edge.from;
            let t = inst.transfer(st.assign[p], k, edge.bytes);
            start = start.max(finish[p] + t);
            if !inst.overlap[k] && st.assign[p] != k {
                receiving += t;
            }
        }
        start + receiving + inst.t(o, k)
    };
    for &o in &order {
        let unit = &us[unit_of[o]];
        if st.assign[o] == NONE {
            let mut best: Option<(f64, f64, f64, usize)> = None;
            for k in 0..d {
                if !inst.allowed(o, k) {
                    continue;
                }
                let Some((m, s)) = st.try_move(unit, k) else {
                    continue;
                };
                let f = eft(&st, &finish, &free, o, k);
                let key = (f, m, s, k);
                if best.is_none_or(|b| (key.0, key.1, key.2) < (b.0, b.1, b.2)) {
                    best = Some(key);
                }
            }
            let Some((_, _, _, k)) = best else {
                let own: u64 = unit
                    .iter()
                    .fold(0u64, |m, &x| m.saturating_add(inst.memory[x]));
                let room = (0..d)
                    .filter(|&k| inst.allowed(o, k))
                    .map(|k| st.free_memory(k))
                    .max()
                    .unwrap_or(0);
                return Err(ProblemError::Infeasible(format!(
                    "heft: no device can take `{}`: its unit needs {own} bytes of its own plus \
                     the tensors it receives, the roomiest allowed device has {room} bytes free",
                    inst.op_name(o)
                )));
            };
            st.apply(unit, k);
        }
        let k = st.assign[o];
        finish[o] = eft(&st, &finish, &free, o, k);
        free[k] = finish[o];
    }
    let assign = st.assign;
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Infeasible(format!("heft: {why}")));
    }
    Ok(Solution { assign, order })
}
