//! Exhaustive search: every assignment of colocation units to allowed devices, depth first,
//! pruned when the devices' loads so far (throughput) or the memory so far already rule a
//! branch out. Exact for the problem's model (latency in the problem's op order), and only
//! for tiny problems: it refuses spaces over [`MAX_SPACE`] assignments. The tests use it as
//! the reference optimum.

use crate::eval::{Objective, evaluate, problem_order, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, better, score, units};

/// The largest number of assignments it enumerates.
pub const MAX_SPACE: f64 = 2.0e5;

/// The number of assignments of units to allowed devices.
pub fn space(inst: &Instance) -> f64 {
    units(inst)
        .iter()
        .map(|u| (0..inst.d).filter(|&k| inst.allowed(u[0], k)).count() as f64)
        .product()
}

/// Whether the problem is small enough.
pub fn fits(inst: &Instance) -> bool {
    space(inst) <= MAX_SPACE
}

struct Search<'a> {
    inst: &'a Instance,
    objective: Objective,
    units: Vec<Vec<usize>>,
    order: Vec<usize>,
    assign: Vec<usize>,
    load: Vec<f64>,
    memory: Vec<u64>,
    best: Option<((f64, f64), Vec<usize>)>,
}

impl Search<'_> {
    fn go(&mut self, u: usize) {
        let inst = self.inst;
        if u == self.units.len() {
            if violation(inst, &self.assign).is_some() {
                return;
            }
            let v = score(&evaluate(inst, &self.assign, &self.order), self.objective);
            if self.best.as_ref().is_none_or(|(b, _)| better(v, *b)) {
                self.best = Some((v, self.assign.clone()));
            }
            return;
        }
        let unit = std::mem::take(&mut self.units[u]);
        for k in 0..inst.d {
            if !inst.allowed(unit[0], k) {
                continue;
            }
            let dt: f64 = unit.iter().map(|&o| inst.t(o, k)).sum();
            let dm: u64 = unit.iter().map(|&o| inst.memory[o]).sum();
            if self.memory[k].saturating_add(dm) > inst.capacity[k] {
                continue;
            }
            // Loads only grow, and both objectives are at least the busiest device's load
            // (equal loads may still win the tie-break).
            if let Some((b, _)) = &self.best
                && self.load[k] + dt > b.0
            {
                continue;
            }
            for &o in &unit {
                self.assign[o] = k;
            }
            self.load[k] += dt;
            self.memory[k] += dm;
            self.go(u + 1);
            self.load[k] -= dt;
            self.memory[k] -= dm;
        }
        self.units[u] = unit;
    }
}

/// The optimum by enumeration.
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if !fits(inst) {
        return Err(ProblemError::Infeasible(format!(
            "exhaustive: {:.0} assignments is more than the {MAX_SPACE:.0} it enumerates",
            space(inst)
        )));
    }
    let mut s = Search {
        inst,
        objective: opts.objective,
        units: units(inst),
        order: problem_order(inst),
        assign: vec![0; inst.n],
        load: vec![0.0; inst.d],
        memory: vec![0; inst.d],
        best: None,
    };
    s.go(0);
    match s.best {
        Some((_, assign)) => Ok(Solution::in_problem_order(inst, assign)),
        None => Err(ProblemError::Infeasible(
            "exhaustive: no assignment fits in memory".into(),
        )),
    }
}
