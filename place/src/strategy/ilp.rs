//! Exact placement for throughput by integer linear programming, for small problems.
//!
//! **Model** (the throughput model of [`crate::eval`], exactly):
//! - `x[u][k]` binary: colocation unit `u` on allowed device `k`; each unit on one device.
//! - For every tensor (producer, result) whose consumers are not all in the producer's unit,
//!   and every pair of devices `k1 != k2`, `z[t][k1][k2]` in [0, 1] with
//!   `z >= x[producer][k1] + x[consumer][k2] - 1` for each consumer: the tensor moves from
//!   `k1` to `k2` (once, however many consumers are on `k2`). Minimizing pushes `z` to
//!   exactly the product of the binaries, so the linearization is exact.
//! - Device rows: `sum_u x[u][k] · time(u, k) <= T`; on a device that does not overlap
//!   transfers, plus `sum z[t][k1][k] · transfer` (what it receives) and, per tensor it
//!   sends, a variable `send[t][k] >= z[t][k][k2] · transfer(k, k2)` for every `k2` (the
//!   longest of its transfers, as [`crate::eval`] charges it).
//! - Channel rows: every transfer is charged, for its whole `transfer(k1, k2, bytes)`, to
//!   every channel of the route `k1 -> k2`: `sum z · transfer <= T`.
//! - Memory rows: `sum_u x[u][k] · memory(u) + sum z[t][k1][k] · bytes(t) <= capacity(k)`.
//! - Minimize `T`.
//!
//! The assignment read from the solution is evaluated by [`crate::eval::evaluate`], so the
//! plan's value is the model's, not the solver's rounded one.
//!
//! **Latency is not modelled** (a schedule needs ordering variables and big-M rows); for it
//! this strategy answers with an error, and exhaustive search covers tiny problems.
//!
//! **Size.** Only problems with at most [`MAX_VARS`] variables ([`fits`]). The solver is the
//! pure-Rust microlp (branch and bound over the simplex; the crate good_lp uses for
//! [`crate::bound`], called directly here for its deterministic node limit): no time limit,
//! at most [`NODE_LIMIT`] nodes. Branch and bound is exponential in the worst case
//! (balancing is a partition problem), so when the limit is reached before optimality is
//! proven the strategy reports that instead of a plan. Times and bytes are scaled by their
//! largest values for a well-conditioned model.
//!
//! **Source.** The standard assignment ILP with a makespan variable and product
//! linearization (e.g. the task-assignment formulations surveyed by Stone, "Multiprocessor
//! scheduling with the aid of network flow algorithms", IEEE TSE 1977, and later mapping
//! ILPs), solved by branch and bound (Land and Doig, 1960).

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions as MipOptions, Variable};

use crate::eval::{Objective, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, unit_heads, units};

/// The largest number of variables (`x` and `z`) it solves.
pub const MAX_VARS: usize = 400;
/// The most branch-and-bound nodes it explores (a deterministic work limit); when the
/// optimum is not proven within them, it answers with an error rather than a plan it cannot
/// vouch for.
pub const NODE_LIMIT: u64 = 20_000;

/// A tensor that may cross devices: bytes, producer unit, consumer units.
struct Tensor {
    bytes: u64,
    from: usize,
    to: Vec<usize>,
}

fn tensors(inst: &Instance, unit_of: &[usize]) -> Vec<Tensor> {
    let mut out: Vec<Tensor> = Vec::new();
    let mut mine: Vec<(u32, usize)> = Vec::new();
    let mut seen: std::collections::HashSet<(usize, usize)> = std::collections::HashSet::new();
    for u in 0..inst.n {
        mine.clear();
        for &e in &inst.out_edges[u] {
            let edge = &inst.problem.edges[e];
            let cu = unit_of[edge.to];
            if cu == unit_of[u] {
                continue;
            }
            let i = match mine.iter().find(|m| m.0 == edge.tensor) {
                Some(&(_, i)) => i,
                None => {
                    out.push(Tensor {
                        bytes: edge.bytes,
                        from: unit_of[u],
                        to: Vec::new(),
                    });
                    mine.push((edge.tensor, out.len() - 1));
                    out.len() - 1
                }
            };
            // One tensor may have very many consumer units: a set, not a scan.
            if seen.insert((i, cu)) {
                out[i].to.push(cu);
            }
        }
        seen.clear();
    }
    out
}

/// The number of variables the model of `inst` has.
pub fn num_vars(inst: &Instance) -> usize {
    count_vars(inst, usize::MAX)
}

/// [`num_vars`], or some number over `cap` as soon as the count passes it.
fn count_vars(inst: &Instance, cap: usize) -> usize {
    let x: usize = unit_heads(inst)
        .map(|o| (0..inst.d).filter(|&k| inst.allowed(o, k)).count())
        .sum();
    if x > cap {
        return x;
    }
    let us = units(inst);
    let mut unit_of = vec![0; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let allowed = |u: usize| (0..inst.d).filter(|&k| inst.allowed(us[u][0], k)).count();
    let x: usize = (0..us.len()).map(allowed).sum();
    let ts = tensors(inst, &unit_of);
    let z: usize = ts
        .iter()
        .map(|t| allowed(t.from) * inst.d.saturating_sub(1))
        .sum();
    // A send variable per tensor and allowed sender that does not overlap transfers.
    let sends: usize = ts
        .iter()
        .map(|t| {
            (0..inst.d)
                .filter(|&k| !inst.overlap[k] && inst.allowed(us[t.from][0], k))
                .count()
        })
        .sum();
    x + z + sends
}

/// Whether the problem is small enough for the ILP.
pub fn fits(inst: &Instance) -> bool {
    count_vars(inst, MAX_VARS) <= MAX_VARS
}

/// The optimal throughput plan (see the module doc).
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if opts.objective != Objective::Throughput {
        return Err(ProblemError::Unsolved(
            "ilp: models throughput only (exhaustive covers latency for tiny problems)".into(),
        ));
    }
    if !fits(inst) {
        return Err(ProblemError::Unsolved(format!(
            "ilp: {} variables is more than the {MAX_VARS} it solves",
            num_vars(inst)
        )));
    }
    let d = inst.d;
    let us = units(inst);
    let mut unit_of = vec![0; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let ts = tensors(inst, &unit_of);
    let utime = |u: usize, k: usize| us[u].iter().map(|&o| inst.t(o, k)).sum::<f64>();
    let umem = |u: usize| us[u].iter().map(|&o| inst.memory[o] as f64).sum::<f64>();
    // Scales: the largest time or transfer, the largest capacity.
    let mut tmax: f64 = 0.0;
    for (u, _) in us.iter().enumerate() {
        for k in (0..d).filter(|&k| inst.allowed(us[u][0], k)) {
            tmax = tmax.max(utime(u, k));
        }
    }
    for t in &ts {
        for a in 0..d {
            for b in 0..d {
                let x = inst.transfer(a, b, t.bytes);
                if x.is_finite() {
                    tmax = tmax.max(x);
                }
            }
        }
    }
    let tscale = if tmax > 0.0 { 1.0 / tmax } else { 1.0 };
    let cmax = inst.capacity.iter().copied().max().unwrap_or(0) as f64;
    let mscale = if cmax > 0.0 { 1.0 / cmax } else { 1.0 };

    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let big_t = lp.add_var(1.0, (0.0, f64::INFINITY));
    let x: Vec<Vec<Option<Variable>>> = (0..us.len())
        .map(|u| {
            (0..d)
                .map(|k| inst.allowed(us[u][0], k).then(|| lp.add_binary_var(0.0)))
                .collect()
        })
        .collect();
    // z[t][k1 * d + k2]
    let z: Vec<Vec<Option<Variable>>> = ts
        .iter()
        .map(|t| {
            (0..d * d)
                .map(|i| {
                    let (k1, k2) = (i / d, i % d);
                    (k1 != k2 && x[t.from][k1].is_some()).then(|| lp.add_var(0.0, (0.0, 1.0)))
                })
                .collect()
        })
        .collect();
    let mut load: Vec<Vec<(Variable, f64)>> = vec![vec![(big_t, -1.0)]; d];
    let mut mem: Vec<Vec<(Variable, f64)>> = vec![Vec::new(); d];
    let mut chan: Vec<Vec<(Variable, f64)>> = vec![vec![(big_t, -1.0)]; inst.num_channels];
    for (u, row) in x.iter().enumerate() {
        let mut one = Vec::new();
        for (k, v) in row.iter().enumerate() {
            if let Some(v) = *v {
                load[k].push((v, utime(u, k) * tscale));
                mem[k].push((v, umem(u) * mscale));
                one.push((v, 1.0));
            }
        }
        lp.add_constraint(one, ComparisonOp::Eq, 1.0);
    }
    for (t, zt) in ts.iter().zip(&z) {
        for k1 in 0..d {
            let Some(xp) = x[t.from][k1] else { continue };
            // A sender that does not overlap transfers is busy for the longest of them:
            // `send >= z · transfer` for every receiving device.
            let send = (!inst.overlap[k1]).then(|| {
                let v = lp.add_var(0.0, (0.0, f64::INFINITY));
                load[k1].push((v, 1.0));
                v
            });
            for k2 in 0..d {
                let Some(zv) = zt[k1 * d + k2] else { continue };
                let mut used = false;
                for &c in &t.to {
                    if let Some(xc) = x[c][k2] {
                        lp.add_constraint(
                            [(zv, 1.0), (xp, -1.0), (xc, -1.0)],
                            ComparisonOp::Ge,
                            -1.0,
                        );
                        used = true;
                    }
                }
                if !used {
                    continue;
                }
                let tt = inst.transfer(k1, k2, t.bytes);
                if !tt.is_finite() {
                    // Unreachable: the pair cannot be used at all.
                    for &c in &t.to {
                        if let Some(xc) = x[c][k2] {
                            lp.add_constraint([(xp, 1.0), (xc, 1.0)], ComparisonOp::Le, 1.0);
                        }
                    }
                    continue;
                }
                for ch in inst.route_channels(k1, k2) {
                    chan[ch].push((zv, tt * tscale));
                }
                mem[k2].push((zv, t.bytes as f64 * mscale));
                if !inst.overlap[k2] {
                    load[k2].push((zv, tt * tscale));
                }
                if let Some(sv) = send {
                    lp.add_constraint([(sv, 1.0), (zv, -tt * tscale)], ComparisonOp::Ge, 0.0);
                }
            }
        }
    }
    for (k, (l, m)) in load.into_iter().zip(mem).enumerate() {
        lp.add_constraint(l, ComparisonOp::Le, 0.0);
        lp.add_constraint(m, ComparisonOp::Le, inst.capacity[k] as f64 * mscale);
    }
    for c in chan {
        lp.add_constraint(c, ComparisonOp::Le, 0.0);
    }
    let outcome = match solve_mip(&lp, NODE_LIMIT, "ilp")? {
        Some(o) => o,
        None => {
            return Err(ProblemError::Infeasible(
                "ilp: no assignment fits the devices' memory (received tensors included) \
                 while keeping every producer and consumer on devices a route connects"
                    .into(),
            ));
        }
    };
    if !outcome.is_optimal() {
        return Err(ProblemError::Unsolved(format!(
            "ilp: optimality not proven within {NODE_LIMIT} branch-and-bound nodes"
        )));
    }
    let Some(sol) = outcome.solution() else {
        return Err(ProblemError::Unsolved(
            "ilp: the solver gave no solution".into(),
        ));
    };
    let mut assign = vec![0; inst.n];
    for (u, row) in x.iter().enumerate() {
        let k = (0..d)
            .filter_map(|k| row[k].map(|v| (k, sol.var_value(v))))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(k, _)| k);
        for &o in &us[u] {
            assign[o] = k;
        }
    }
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Unsolved(format!(
            "ilp: the solver's assignment is not feasible ({why})"
        )));
    }
    Ok(Solution::in_problem_order(inst, assign))
}

/// Solves `lp` with microlp within `node_limit` branch-and-bound nodes; `None` when it is
/// infeasible. `who` names the strategy in errors.
///
/// microlp is a third-party solver: a panic inside it (an assertion on its numerics) must
/// not take the process down. The inputs are validated (finite, in the ranges of
/// `tessera_targets::limits`), so this is the last line of defence, not a code path; the
/// model is dropped whatever happens, so no broken state is observed after an unwind.
pub(crate) fn solve_mip(
    lp: &Problem,
    node_limit: u64,
    who: &str,
) -> Result<Option<microlp::SolveOutcome>, ProblemError> {
    let mut options = MipOptions::default();
    options.node_limit = Some(node_limit);
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| lp.solve_with(options))) {
        Ok(Ok(o)) => Ok(Some(o)),
        Ok(Err(microlp::Error::Infeasible)) => Ok(None),
        Ok(Err(e)) => Err(ProblemError::Unsolved(format!("{who}: solver failed: {e}"))),
        Err(_) => Err(ProblemError::Unsolved(format!(
            "{who}: the solver (microlp) failed internally on this problem"
        ))),
    }
}
