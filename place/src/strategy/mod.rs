//! The solvers. Every strategy takes an [`Instance`] and returns a feasible [`Solution`] (a
//! device per op and the order devices run their ops in) or an error saying why it found
//! none. None of them reads a clock: the same problem gives the same plan.
//!
//! - `exhaustive`: every assignment, with pruning; exact, for tiny problems only.
//! - `ilp`: integer programming, exact for throughput, small problems only.
//! - `single`, `round-robin`, `greedy`: the baselines every benchmark compares with.
//! - `dp`: contiguous pipeline stages along a device chain, exact by dynamic programming
//!   (over the DAG's contiguous splits, [`contiguous`], and over cuts of one op order).
//! - `heft`: HEFT list scheduling (latency-driven, heterogeneous devices).
//! - `multilevel`: METIS-style multilevel partitioning with topology-aware placement.
//! - `local`: greedy, then local search ([`local::improve`]); `auto` also runs local search
//!   on the best few plans of the other strategies.
//! - `split`: placement and op splitting together, local search over every op's options
//!   (a device, or a split alternative over a device group; [`split`]).
//! - `stages`: pipeline stages over disjoint device groups, each data or tensor parallel
//!   over its group, the stage boundaries balanced on each group's times ([`stages`]).
//! - `intra-op`: Alpa's intra-operator integer program: every op on one device group, each
//!   op's alternative chosen to minimize compute plus reshard time ([`intra_op`]).
//!
//! Only `split`, `stages`, `intra-op` and `exhaustive` take split alternatives; the others place ops
//! whole, so they refuse a problem with an op that fits no device whole.

use crate::eval::{Objective, evaluate, problem_order, violation};
use crate::problem::{Instance, ProblemError};

pub mod baseline;
pub mod contiguous;
pub mod dp;
pub mod exhaustive;
pub mod heft;
pub mod ilp;
pub mod intra_op;
pub mod local;
pub mod multilevel;
pub mod split;
pub mod stages;

/// Every strategy name with a one-line description, in the order `auto` tries them.
pub const STRATEGIES: &[(&str, &str)] = &[
    (
        "auto",
        "runs every strategy that fits the problem's size and keeps the best plan",
    ),
    (
        "exhaustive",
        "every assignment, pruned by bounds (exact; tiny problems only)",
    ),
    (
        "ilp",
        "integer programming over unit-device binaries (exact for throughput; small problems only)",
    ),
    (
        "single",
        "all ops on the one device that is best alone (baseline)",
    ),
    ("round-robin", "ops dealt to devices in turn (baseline)"),
    (
        "greedy",
        "each op, in order, to the device that finishes it soonest (baseline)",
    ),
    (
        "dp",
        "contiguous subgraphs as pipeline stages along a chain of devices (exact dynamic programming over the DAG's ideals, coarsened above a size)",
    ),
    (
        "heft",
        "HEFT list scheduling: ops by upward rank, each to the device finishing it earliest",
    ),
    (
        "multilevel",
        "multilevel partitioning: heavy-edge coarsening, topology-aware initial placement, refinement at every level",
    ),
    (
        "local",
        "greedy, then moves of ops between devices while the plan improves (local search)",
    ),
    (
        "split",
        "placement and op splitting together: local search over devices and split alternatives, with chained moves (problems with splits)",
    ),
    (
        "stages",
        "pipeline stages over disjoint device groups, each data or tensor parallel: every chain of groups cut where the slowest stage's work is least (problems with two or more groups)",
    ),
    (
        "intra-op",
        "Alpa's intra-operator pass: every op on one device group, its alternatives chosen by an integer program over compute and reshard times (problems with splits)",
    ),
];

/// What a solver is asked for.
#[derive(Clone, Copy, Debug)]
pub struct SolveOptions {
    /// What to minimize.
    pub objective: Objective,
}

/// A solver's answer: a device per op and the order each device runs its ops in.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    /// Device index per op.
    pub assign: Vec<usize>,
    /// A topological order of all ops (the schedule).
    pub order: Vec<usize>,
}

impl Solution {
    /// A solution with the problem's own order.
    pub fn in_problem_order(inst: &Instance, assign: Vec<usize>) -> Solution {
        Solution {
            assign,
            order: problem_order(inst),
        }
    }

    /// The objective's value.
    pub fn value(&self, inst: &Instance, objective: Objective) -> f64 {
        evaluate(inst, &self.assign, &self.order).value(objective)
    }

    /// The objective's value, then the other objective's as a tie-break: plans compare by
    /// this, so among equally good plans the one better on the other measure wins.
    pub fn score(&self, inst: &Instance, objective: Objective) -> (f64, f64) {
        score(&evaluate(inst, &self.assign, &self.order), objective)
    }
}

/// `(objective, other objective)` of an evaluation, compared lexicographically.
pub fn score(ev: &crate::eval::Evaluation, objective: Objective) -> (f64, f64) {
    match objective {
        Objective::Throughput => (ev.period, ev.latency),
        Objective::Latency => (ev.latency, ev.period),
    }
}

/// Whether score `a` is better than `b`.
pub fn better(a: (f64, f64), b: (f64, f64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// One strategy's result within `auto`.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The strategy.
    pub strategy: String,
    /// Its objective value, or why it gave none.
    pub outcome: Result<f64, String>,
}

/// Runs the strategy `name`. For `auto`, also returns every attempt and the strategy that won.
pub fn run(
    name: &str,
    inst: &Instance,
    opts: &SolveOptions,
) -> Result<(Solution, String, Vec<Attempt>), ProblemError> {
    if name == "auto" {
        return auto(inst, opts);
    }
    let sol = run_one(name, inst, opts)?;
    if let Some(why) = violation(inst, &sol.assign) {
        return Err(ProblemError::Infeasible(format!(
            "strategy `{name}` produced an invalid plan: {why}"
        )));
    }
    Ok((sol, name.to_string(), Vec::new()))
}

/// The strategies that choose split alternatives; the others place every op whole.
pub const SPLITTING: &[&str] = &["exhaustive", "split", "stages", "intra-op"];

fn run_one(name: &str, inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if !SPLITTING.contains(&name)
        && STRATEGIES.iter().any(|s| s.0 == name)
        && let Some(o) = (0..inst.n).find(|&o| !inst.runs_whole(o))
    {
        return Err(ProblemError::Infeasible(format!(
            "`{}` fits no device whole and must be split; `{name}` places ops whole (the \
             strategies that split: {})",
            inst.op_name(o),
            SPLITTING.join(", ")
        )));
    }
    match name {
        "exhaustive" => exhaustive::solve(inst, opts),
        "single" => baseline::single(inst, opts),
        "round-robin" => baseline::round_robin(inst),
        "greedy" => baseline::greedy(inst, opts),
        "local" => local_from_baseline(inst, opts),
        "dp" => dp::solve(inst, opts),
        "heft" => heft::solve(inst, opts),
        "ilp" => ilp::solve(inst, opts),
        "multilevel" => multilevel::solve(inst, opts),
        "split" => split::solve(inst, opts),
        "stages" => stages::solve(inst, opts),
        "intra-op" => intra_op::solve(inst, opts),
        _ => Err(ProblemError::Invalid {
            at: "--strategy".into(),
            message: format!(
                "unknown strategy `{name}` (expected one of: {})",
                STRATEGIES
                    .iter()
                    .map(|s| s.0)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// The strategies `auto` runs on `inst`, in order: the exact ones only below their size caps
/// (`auto` skips `ilp` for latency, which it does not model).
pub fn auto_candidates(inst: &Instance) -> Vec<&'static str> {
    let mut v = Vec::new();
    if exhaustive::fits(inst) {
        v.push("exhaustive");
    }
    if ilp::fits(inst) {
        v.push("ilp");
    }
    if inst.has_splits() {
        v.push("split");
    }
    if stages::applies(inst) {
        v.push("stages");
    }
    v.extend([
        "dp",
        "heft",
        "multilevel",
        "local",
        "greedy",
        "single",
        "round-robin",
    ]);
    v
}

/// How many of the best plans `auto` improves with local search.
pub const AUTO_IMPROVE: usize = 3;

/// Why `auto` skips the other strategies when the plan is forced ([`forced`]).
pub const FORCED: &str = "skipped: every op has one allowed device, so exhaustive's plan \
                          (the only assignment) is optimal";

/// Whether nothing is left to choose: every colocation unit has exactly one allowed device
/// (a one-device target, or everything pinned), and the order of ops cannot change the
/// objective (throughput, or latency with one device doing all the work). `auto` then
/// answers with exhaustive search's plan alone: every other strategy would return the same
/// assignment, after work that grows with the graph.
pub fn forced(inst: &Instance, objective: Objective) -> bool {
    let mut device = None;
    let mut one_device = true;
    for head in unit_heads(inst) {
        let mut allowed = (0..inst.d).filter(|&k| inst.allowed(head, k));
        let (Some(k), None) = (allowed.next(), allowed.next()) else {
            return false;
        };
        one_device &= device.is_none_or(|d| d == k);
        device = Some(k);
    }
    let no_spmd = inst.spmd.iter().all(Vec::is_empty);
    !inst.has_splits() && (objective == Objective::Throughput || (one_device && no_spmd))
}

/// The `local` strategy: local search from greedy's plan, or, when greedy finds none, from
/// the better of `single` and `round-robin`.
pub(crate) fn local_from_baseline(
    inst: &Instance,
    opts: &SolveOptions,
) -> Result<Solution, ProblemError> {
    let start = baseline::greedy(inst, opts).or_else(|e| {
        let mut best: Option<(f64, Solution)> = None;
        for s in [baseline::single(inst, opts), baseline::round_robin(inst)]
            .into_iter()
            .flatten()
        {
            let v = s.value(inst, opts.objective);
            if best.as_ref().is_none_or(|(b, _)| v < *b) {
                best = Some((v, s));
            }
        }
        best.map(|(_, s)| s).ok_or(e)
    })?;
    Ok(local::improve(inst, start, opts))
}

/// One plan `auto` found: the strategy (`local(NAME)` after local search), the plan, and its
/// score (objective, then the other objective).
pub type Ranked = (String, Solution, (f64, f64));

fn auto(
    inst: &Instance,
    opts: &SolveOptions,
) -> Result<(Solution, String, Vec<Attempt>), ProblemError> {
    let (mut ranked, attempts) = auto_ranked(inst, opts)?;
    let (name, sol, _) = ranked.swap_remove(0);
    Ok((sol, name, attempts))
}

/// Every distinct plan `auto` finds, best first by score (ties: the order found), with what
/// it tried. `auto` answers the first; `tessera compile` simulates the first few and keeps
/// the one the simulator finds best. An error when no strategy found a plan.
pub fn auto_ranked(
    inst: &Instance,
    opts: &SolveOptions,
) -> Result<(Vec<Ranked>, Vec<Attempt>), ProblemError> {
    auto_ranked_with(inst, opts, None)
}

/// [`auto_ranked`], with the `stages` strategy's configurations when the caller has them
/// already ([`stages::configurations`] of `inst` and `opts`): its plan is their best, not
/// computed again.
pub fn auto_ranked_with(
    inst: &Instance,
    opts: &SolveOptions,
    stage_configs: Option<&[stages::Config]>,
) -> Result<(Vec<Ranked>, Vec<Attempt>), ProblemError> {
    let mut attempts = Vec::new();
    // The plans found: (score, plan, strategy).
    let mut found: Vec<((f64, f64), Solution, String)> = Vec::new();
    let forced = forced(inst, opts.objective);
    for name in auto_candidates(inst) {
        if forced && name != "exhaustive" {
            attempts.push(Attempt {
                strategy: name.to_string(),
                outcome: Err(FORCED.to_string()),
            });
            continue;
        }
        if name == "ilp" && opts.objective != Objective::Throughput {
            // It models throughput only.
            continue;
        }
        let solved = match (name, stage_configs) {
            ("stages", Some(configs)) => stages::best(configs.to_vec()),
            _ => run_one(name, inst, opts),
        };
        let outcome = solved.and_then(|sol| match violation(inst, &sol.assign) {
            Some(why) => Err(ProblemError::Infeasible(why)),
            None => Ok(sol),
        });
        match outcome {
            Ok(sol) => {
                let s = sol.score(inst, opts.objective);
                attempts.push(Attempt {
                    strategy: name.to_string(),
                    outcome: Ok(s.0),
                });
                found.push((s, sol, name.to_string()));
            }
            Err(e) => attempts.push(Attempt {
                strategy: name.to_string(),
                outcome: Err(e.to_string()),
            }),
        }
    }
    if found.is_empty() {
        return Err(ProblemError::Infeasible(format!(
            "no strategy found a feasible plan: {}",
            attempts
                .iter()
                .map(|a| format!(
                    "{}: {}",
                    a.strategy,
                    a.outcome.as_ref().err().map_or("", |s| s.as_str())
                ))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let by_score = |a: &((f64, f64), Solution, String), b: &((f64, f64), Solution, String)| {
        a.0.0.total_cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1))
    };
    // Local search on the best few distinct plans (stable sort: ties keep strategy order).
    found.sort_by(by_score);
    // Local search moves ops between devices: its seeds are the plans without splits.
    let mut seeds: Vec<_> = found
        .iter()
        .filter(|f| !crate::split::any_split(inst, &f.1.assign))
        .cloned()
        .collect();
    seeds.dedup_by(|a, b| a.1.assign == b.1.assign);
    for (_, sol, name) in seeds
        .into_iter()
        .take(if forced { 0 } else { AUTO_IMPROVE })
    {
        let sol = local::improve(inst, sol, opts);
        let s = sol.score(inst, opts.objective);
        let name = format!("local({name})");
        attempts.push(Attempt {
            strategy: name.clone(),
            outcome: Ok(s.0),
        });
        found.push((s, sol, name));
    }
    found.sort_by(by_score);
    // Keep the first of each assignment (the better score, or the earlier strategy).
    let mut seen: Vec<&[usize]> = Vec::new();
    let mut keep = vec![false; found.len()];
    for (i, f) in found.iter().enumerate() {
        if !seen.contains(&f.1.assign.as_slice()) {
            seen.push(&f.1.assign);
            keep[i] = true;
        }
    }
    let ranked = found
        .into_iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|((s, sol, name), _)| (name, sol, s))
        .collect();
    Ok((ranked, attempts))
}

/// The first op of each colocation unit, in the order of [`units`] (without building them).
pub fn unit_heads(inst: &Instance) -> impl Iterator<Item = usize> + '_ {
    (0..inst.n).filter(move |&o| match inst.group_of[o] {
        Some(g) => inst.groups[g].first() == Some(&o),
        None => true,
    })
}

/// The colocation units of a problem: each group is one unit, each other op its own; in
/// order of their first op. Solvers that move ops move units.
pub fn units(inst: &Instance) -> Vec<Vec<usize>> {
    let mut seen = vec![false; inst.groups.len()];
    let mut out = Vec::new();
    for o in 0..inst.n {
        match inst.group_of[o] {
            Some(g) => {
                if !seen[g] {
                    seen[g] = true;
                    out.push(inst.groups[g].clone());
                }
            }
            None => out.push(vec![o]),
        }
    }
    out
}
