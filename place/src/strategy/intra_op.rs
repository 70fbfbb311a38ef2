//! `intra-op`: Alpa's intra-operator pass as an integer program: every op on one device group,
//! each taking the alternative (a split, or replicated) that minimizes the sum of the ops'
//! times and the reshards between them (Zheng et al., "Alpa: Automating Inter- and
//! Intra-Operator Parallelism for Distributed Deep Learning", OSDI 2022, section 4.2).
//!
//! **Model**, per device group `g` (the strategy keeps the group whose plan
//! [`crate::eval::evaluate`] scores best):
//! - units (colocation groups) with options on `g` choose one: `x[u][i]` binary,
//!   `sum_i x[u][i] = 1`; a unit with no option there (an input or output pinned to the host,
//!   an op no group device runs) is fixed to its fastest option (a device, or a split over
//!   another group); a colocated unit has one option per group (its members' fastest
//!   alternatives there), so it is fixed too;
//! - a unit's cost: its ops' durations under the option (the slowest group device's share);
//! - between two units with edges, the reshard cost of each pair of options: `C[i][j]`, the
//!   sum over the edges of [`crate::split::comm_time`] of [`crate::split::reshard`] (a fixed
//!   side folds it into the other's cost); linearized as in Alpa with `y[i][j]` in `[0, 1]`,
//!   `sum_j y[i][j] = x[a][i]`, `sum_i y[i][j] = x[b][j]`;
//! - memory: on each group device, the options' bytes plus the fixed units' there, at most its
//!   capacity (received tensors are left out; the plan is checked by
//!   [`crate::eval::violation`] after);
//! - minimize the sum of costs.
//!
//! That objective is a latency of the group run alone (every device busy with every op's
//! share, one after another), not the period: like Alpa, this optimizes one stage and leaves
//! pipelining to the search around it. A tensor read by several consumers in one layout is
//! charged once per consumer here, once in the evaluator.
//!
//! **Solver**: microlp (branch and bound over the simplex, deterministic): at most
//! [`NODE_LIMIT`] nodes and [`MAX_VARS`] variables; the incumbent at the node limit is taken
//! and [`IntraOp::optimal`] says whether it is proven.

use microlp::{ComparisonOp, OptimizationDirection, Problem, Variable};

use crate::eval::violation;
use crate::problem::{Instance, ProblemError};
use crate::split::{comm_time, in_layout, out_layout, reshard};
use crate::strategy::split::unit_options;
use crate::strategy::{Solution, SolveOptions, better, units};

/// The most variables (`x` and `y`) one group's program may have (the benchmark models
/// need at most 5,524; microlp's work grows faster than the variables).
pub const MAX_VARS: usize = 50_000;
/// The most branch-and-bound nodes per program (a deterministic work limit).
pub const NODE_LIMIT: u64 = 200;

/// One group's answer.
#[derive(Clone, Debug)]
pub struct IntraOp {
    /// An option per op.
    pub assign: Vec<usize>,
    /// The program's objective: seconds of compute and reshards.
    pub objective: f64,
    /// Whether branch and bound proved it optimal (else the incumbent at the node limit).
    pub optimal: bool,
    /// Variables of the program.
    pub vars: usize,
}

/// The `intra-op` strategy: the program for every device group, the best plan by the
/// objective asked for.
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let mut best: Option<((f64, f64), Solution)> = None;
    let mut last = None;
    for g in 0..inst.problem.groups.len() {
        match on_group(inst, g) {
            Ok(p) => {
                let s = Solution::in_problem_order(inst, p.assign);
                let v = s.score(inst, opts.objective);
                if best.as_ref().is_none_or(|(b, _)| better(v, *b)) {
                    best = Some((v, s));
                }
            }
            Err(e) => last = Some(e),
        }
    }
    match (best, last) {
        (Some((_, s)), _) => Ok(s),
        (None, Some(e)) => Err(e),
        (None, None) => Err(ProblemError::Unsolved(
            "intra-op: the problem has no device group".into(),
        )),
    }
}

/// A unit's choice: its options on the group, or the one it is fixed to.
struct Choice {
    options: Vec<Vec<usize>>,
    /// Cost of each option (durations and reshards inside the unit and from fixed units).
    cost: Vec<f64>,
    /// Its variables `x[u][i]`, when it has two or more options.
    vars: Option<Vec<Variable>>,
}

/// The program for device group `g` (see the module doc).
pub fn on_group(inst: &Instance, g: usize) -> Result<IntraOp, ProblemError> {
    let place = inst.d + g;
    let us = units(inst);
    let mut unit_of = vec![0usize; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let duration = |unit: &[usize], c: &[usize]| -> f64 {
        unit.iter()
            .zip(c)
            .map(|(&o, &x)| inst.option_times(o, x).iter().copied().fold(0.0, f64::max))
            .sum()
    };
    let mut choices: Vec<Choice> = us
        .iter()
        .map(|unit| {
            let all = unit_options(inst, unit);
            let here: Vec<Vec<usize>> = all
                .iter()
                .filter(|c| inst.place_of(unit[0], c[0]) == place)
                .cloned()
                .collect();
            let options = if here.is_empty() {
                let fastest = all
                    .into_iter()
                    .min_by(|a, b| duration(unit, a).total_cmp(&duration(unit, b)));
                fastest.into_iter().collect()
            } else {
                here
            };
            let cost = options.iter().map(|c| duration(unit, c)).collect();
            Choice {
                options,
                cost,
                vars: None,
            }
        })
        .collect();
    if let Some(u) = choices.iter().position(|c| c.options.is_empty()) {
        return Err(ProblemError::Infeasible(format!(
            "intra-op: op {} runs nowhere",
            inst.problem.ops[us[u][0]].name
        )));
    }
    // The option of op `o` under its unit's option `i`.
    let member = |u: usize, o: usize| us[u].iter().position(|&m| m == o).expect("a member");
    let edge_cost = |e: usize, xu: usize, xv: usize| -> f64 {
        let edge = &inst.problem.edges[e];
        let comm = reshard(
            inst,
            inst.place_of(edge.from, xu),
            out_layout(inst, edge.from, xu, edge.tensor),
            inst.place_of(edge.to, xv),
            in_layout(inst, edge.to, xv, edge.operand),
            edge.bytes,
        );
        comm_time(inst, &comm)
    };
    // Reshard matrices between units, by (producer unit, consumer unit).
    let mut pairs: std::collections::BTreeMap<(usize, usize), Vec<Vec<f64>>> = Default::default();
    for (e, edge) in inst.problem.edges.iter().enumerate() {
        let (a, b) = (unit_of[edge.from], unit_of[edge.to]);
        let (ma, mb) = (member(a, edge.from), member(b, edge.to));
        if a == b {
            for i in 0..choices[a].options.len() {
                let x = &choices[a].options[i];
                choices[a].cost[i] += edge_cost(e, x[ma], x[mb]);
            }
            continue;
        }
        let (na, nb) = (choices[a].options.len(), choices[b].options.len());
        let m = pairs
            .entry((a, b))
            .or_insert_with(|| vec![vec![0.0; nb]; na]);
        for (i, row) in m.iter_mut().enumerate() {
            for (j, c) in row.iter_mut().enumerate() {
                *c += edge_cost(e, choices[a].options[i][ma], choices[b].options[j][mb]);
            }
        }
    }
    // A fixed side folds its row or column into the other's costs.
    let mut constant = 0.0;
    let mut free_pairs = Vec::new();
    for ((a, b), m) in pairs {
        match (choices[a].options.len(), choices[b].options.len()) {
            (1, 1) => constant += m[0][0],
            (1, _) => {
                for (j, c) in m[0].iter().enumerate() {
                    choices[b].cost[j] += c;
                }
            }
            (_, 1) => {
                for (i, row) in m.iter().enumerate() {
                    choices[a].cost[i] += row[0];
                }
            }
            _ => free_pairs.push((a, b, m)),
        }
    }
    let vars = choices
        .iter()
        .filter(|c| c.options.len() > 1)
        .map(|c| c.options.len())
        .sum::<usize>()
        + free_pairs
            .iter()
            .map(|(_, _, m)| m.len() * m[0].len())
            .sum::<usize>();
    if vars > MAX_VARS {
        return Err(ProblemError::Unsolved(format!(
            "intra-op: {vars} variables is more than the {MAX_VARS} it solves"
        )));
    }
    // Scale the costs by the largest, for a well-conditioned program.
    let largest = choices
        .iter()
        .flat_map(|c| c.cost.iter())
        .chain(free_pairs.iter().flat_map(|(_, _, m)| m.iter().flatten()))
        .copied()
        .fold(0.0, f64::max);
    let scale = if largest > 0.0 { 1.0 / largest } else { 1.0 };
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    for c in choices.iter_mut().filter(|c| c.options.len() > 1) {
        let xs: Vec<Variable> = c
            .cost
            .iter()
            .map(|&t| lp.add_binary_var(t * scale))
            .collect();
        lp.add_constraint(xs.iter().map(|&v| (v, 1.0)), ComparisonOp::Eq, 1.0);
        c.vars = Some(xs);
    }
    for (a, b, m) in &free_pairs {
        let (xa, xb) = (
            choices[*a].vars.as_ref().expect("free"),
            choices[*b].vars.as_ref().expect("free"),
        );
        let y: Vec<Vec<Variable>> = m
            .iter()
            .map(|row| {
                row.iter()
                    .map(|&c| lp.add_var(c * scale, (0.0, 1.0)))
                    .collect()
            })
            .collect();
        for (i, row) in y.iter().enumerate() {
            let mut terms: Vec<(Variable, f64)> = row.iter().map(|&v| (v, 1.0)).collect();
            terms.push((xa[i], -1.0));
            lp.add_constraint(terms, ComparisonOp::Eq, 0.0);
        }
        for (j, &xj) in xb.iter().enumerate() {
            let mut terms: Vec<(Variable, f64)> = y.iter().map(|row| (row[j], 1.0)).collect();
            terms.push((xj, -1.0));
            lp.add_constraint(terms, ComparisonOp::Eq, 0.0);
        }
    }
    // Memory on each group device.
    let cmax = inst.capacity.iter().copied().max().unwrap_or(0) as f64;
    let mscale = if cmax > 0.0 { 1.0 / cmax } else { 1.0 };
    let mut short_of_memory = false;
    for &k in &inst.place_devices[place] {
        let mut fixed = 0u64;
        let mut terms = Vec::new();
        for (u, c) in choices.iter().enumerate() {
            let bytes = |opt: &[usize]| -> u64 {
                if !inst.place_devices[inst.place_of(us[u][0], opt[0])].contains(&k) {
                    return 0;
                }
                us[u]
                    .iter()
                    .zip(opt)
                    .map(|(&o, &x)| inst.option_memory(o, x))
                    .fold(0u64, u64::saturating_add)
            };
            match &c.vars {
                Some(xs) => {
                    terms.extend(
                        xs.iter()
                            .zip(&c.options)
                            .map(|(&v, opt)| (v, bytes(opt) as f64 * mscale))
                            .filter(|t| t.1 > 0.0),
                    );
                }
                None => fixed = fixed.saturating_add(bytes(&c.options[0])),
            }
        }
        let room = inst.capacity[k] as f64 - fixed as f64 - inst.base_memory[k] as f64;
        short_of_memory |= room < 0.0;
        lp.add_constraint(terms, ComparisonOp::Le, room * mscale);
    }
    if vars == 0 {
        // Nothing to choose: every unit has one option (memory as the rows above say).
        if short_of_memory {
            return Err(ProblemError::Infeasible(format!(
                "intra-op: no choice of alternatives on group {} fits its devices' memory",
                inst.problem.groups[g].name
            )));
        }
        let mut assign = vec![0usize; inst.n];
        for (u, c) in choices.iter().enumerate() {
            for (&o, &x) in us[u].iter().zip(&c.options[0]) {
                assign[o] = x;
            }
        }
        let objective = constant + choices.iter().map(|c| c.cost[0]).sum::<f64>();
        if let Some(why) = violation(inst, &assign) {
            return Err(ProblemError::Unsolved(format!(
                "intra-op: the program's one plan on group {} is not feasible ({why})",
                inst.problem.groups[g].name
            )));
        }
        return Ok(IntraOp {
            assign,
            objective,
            optimal: true,
            vars,
        });
    }
    let Some(outcome) = super::ilp::solve_mip(&lp, NODE_LIMIT, "intra-op")? else {
        return Err(ProblemError::Infeasible(format!(
            "intra-op: no choice of alternatives on group {} fits its devices' memory",
            inst.problem.groups[g].name
        )));
    };
    let optimal = outcome.is_optimal();
    let Some(sol) = outcome.solution() else {
        return Err(ProblemError::Unsolved(format!(
            "intra-op: no integer solution within {NODE_LIMIT} branch-and-bound nodes"
        )));
    };
    // Each unit's option: its largest `x` (one-hot at an integer solution).
    let picked: Vec<usize> = choices
        .iter()
        .map(|c| match &c.vars {
            Some(xs) => (0..xs.len())
                .max_by(|&a, &b| sol.var_value(xs[a]).total_cmp(&sol.var_value(xs[b])))
                .unwrap_or(0),
            None => 0,
        })
        .collect();
    let mut assign = vec![0usize; inst.n];
    let mut objective = constant;
    for (u, c) in choices.iter().enumerate() {
        for (&o, &x) in us[u].iter().zip(&c.options[picked[u]]) {
            assign[o] = x;
        }
        objective += c.cost[picked[u]];
    }
    for (a, b, m) in &free_pairs {
        objective += m[picked[*a]][picked[*b]];
    }
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Unsolved(format!(
            "intra-op: the program's plan on group {} is not feasible ({why})",
            inst.problem.groups[g].name
        )));
    }
    Ok(IntraOp {
        assign,
        objective,
        optimal,
        vars,
    })
}
