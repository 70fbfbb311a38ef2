//! The baselines: what a user gets without a placement algorithm. Benchmarks report tessera's
//! plans against these.
//!
//! - `single`: everything on one device (ops that device cannot run go to their fastest
//!   allowed device), the best such device for the objective.
//! - `round-robin`: colocation units dealt to devices in turn, skipping devices that cannot
//!   run a unit or hold it.
//! - `greedy`: units in topological order, each to the device where it is best right now:
//!   for throughput the smallest resulting bottleneck (device and link loads so far), for
//!   latency the earliest finish (as in HEFT without its ranks or insertion).

use crate::eval::{Objective, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, better, units};

/// All ops on the best single device.
pub fn single(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let mut best: Option<((f64, f64), Solution)> = None;
    let mut refusals = Vec::new();
    for k in 0..inst.d {
        let assign: Vec<usize> = (0..inst.n)
            .map(|o| {
                if inst.allowed(o, k) {
                    k
                } else {
                    fastest(inst, o)
                }
            })
            .collect();
        let assign = colocate(inst, assign);
        if let Some(why) = violation(inst, &assign) {
            refusals.push(format!("{}: {why}", inst.device_name(k)));
            continue;
        }
        let sol = Solution::in_problem_order(inst, assign);
        let v = sol.score(inst, opts.objective);
        if best.as_ref().is_none_or(|(b, _)| better(v, *b)) {
            best = Some((v, sol));
        }
    }
    best.map(|(_, s)| s).ok_or_else(|| {
        ProblemError::Infeasible(format!(
            "no single device can hold the ops: {}",
            refusals.join("; ")
        ))
    })
}

/// Units dealt to devices in turn.
pub fn round_robin(inst: &Instance) -> Result<Solution, ProblemError> {
    let mut assign = vec![0; inst.n];
    let mut memory = vec![0u64; inst.d];
    let mut next = 0;
    for unit in units(inst) {
        let need: u64 = unit
            .iter()
            .fold(0u64, |m, &o| m.saturating_add(inst.memory[o]));
        let k = (0..inst.d)
            .map(|i| (next + i) % inst.d)
            .find(|&k| {
                unit.iter().all(|&o| inst.allowed(o, k))
                    && memory[k].saturating_add(need) <= inst.capacity[k]
            })
            .ok_or_else(|| {
                ProblemError::Infeasible(format!(
                    "round-robin: no device can take `{}`",
                    inst.op_name(unit[0])
                ))
            })?;
        memory[k] += need;
        for &o in &unit {
            assign[o] = k;
        }
        next = (k + 1) % inst.d;
    }
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Infeasible(format!("round-robin: {why}")));
    }
    Ok(Solution::in_problem_order(inst, assign))
}

/// Units in order, each to the device where it is best right now.
pub fn greedy(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let d = inst.d;
    let mut assign = vec![usize::MAX; inst.n];
    let mut load = vec![0.0; d];
    let mut channel = vec![0.0; inst.num_channels];
    let mut memory = vec![0u64; d];
    let mut finish = vec![0.0f64; inst.n];
    let mut free = vec![0.0f64; d];
    for unit in units(inst) {
        let mut best: Option<(f64, f64, usize)> = None;
        for k in 0..d {
            if !unit.iter().all(|&o| inst.allowed(o, k)) {
                continue;
            }
            let mut need = 0u64;
            let mut dl = 0.0;
            let mut ch: Vec<(usize, f64)> = Vec::new();
            let mut t_free = free[k];
            for &o in &unit {
                need = need.saturating_add(inst.memory[o]);
                dl += inst.t(o, k);
                let mut start = t_free;
                for &e in &inst.in_edges[o] {
                    let edge = &inst.problem.edges[e];
                    let from = assign[edge.from];
                    if from == usize::MAX || from == k {
                        start = start.max(finish[edge.from]);
                        continue;
                    }
                    let t = inst.transfer(from, k, edge.bytes);
                    need = need.saturating_add(edge.bytes);
                    for c in inst.route_channels(from, k) {
                        ch.push((c, t));
                    }
                    if !inst.overlap[k] {
                        // It receives the tensor itself (`crate::eval`).
                        dl += t;
                    }
                    start = start.max(finish[edge.from] + t);
                }
                t_free = start + inst.t(o, k);
            }
            if memory[k].saturating_add(need) > inst.capacity[k] {
                continue;
            }
            let score = match opts.objective {
                Objective::Throughput => {
                    let mut peak = load[k] + dl;
                    for &(c, t) in &ch {
                        peak = peak.max(channel[c] + t);
                    }
                    peak
                }
                Objective::Latency => t_free,
            };
            let tie = load[k] + dl;
            if best.is_none_or(|(s, t, _)| score < s || (score == s && tie < t)) {
                best = Some((score, tie, k));
            }
        }
        let Some((_, _, k)) = best else {
            return Err(ProblemError::Infeasible(format!(
                "greedy: no device can take `{}` (support or memory)",
                inst.op_name(unit[0])
            )));
        };
        for &o in &unit {
            let mut start = free[k];
            for &e in &inst.in_edges[o] {
                let edge = &inst.problem.edges[e];
                let from = assign[edge.from];
                let from = if from == usize::MAX { k } else { from };
                let t = inst.transfer(from, k, edge.bytes);
                if from != k {
                    memory[k] = memory[k].saturating_add(edge.bytes);
                    for c in inst.route_channels(from, k) {
                        channel[c] += t;
                    }
                    if !inst.overlap[k] {
                        load[k] += t;
                    }
                }
                start = start.max(finish[edge.from] + t);
            }
            assign[o] = k;
            finish[o] = start + inst.t(o, k);
            free[k] = finish[o];
            load[k] += inst.t(o, k);
            memory[k] = memory[k].saturating_add(inst.memory[o]);
        }
    }
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Infeasible(format!("greedy: {why}")));
    }
    Ok(Solution::in_problem_order(inst, assign))
}

/// The fastest device op `o` may run on.
pub fn fastest(inst: &Instance, o: usize) -> usize {
    (0..inst.d)
        .filter(|&k| inst.allowed(o, k))
        .min_by(|&a, &b| inst.t(o, a).total_cmp(&inst.t(o, b)))
        .unwrap_or(0)
}

/// Moves every colocation group onto its first member's device.
pub fn colocate(inst: &Instance, mut assign: Vec<usize>) -> Vec<usize> {
    for members in &inst.groups {
        let k = assign[members[0]];
        for &o in members {
            assign[o] = k;
        }
    }
    assign
}
