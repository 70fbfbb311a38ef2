//! Exhaustive search: every assignment of colocation units to allowed devices, depth first,
//! pruned when the devices' loads so far (throughput) or the memory so far already rule a
//! branch out. Exact for the problem's model (latency in the problem's op order), and only
//! for tiny problems: it refuses spaces over [`MAX_SPACE`] assignments. The tests use it as
//! the reference optimum.

use crate::eval::{Objective, evaluate, problem_order, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, better, score, unit_heads, units};

/// The largest number of assignments it enumerates.
pub const MAX_SPACE: f64 = 2.0e5;

/// The number of assignments of units to allowed devices.
pub fn space(inst: &Instance) -> f64 {
    unit_heads(inst)
        .map(|o| (0..inst.d).filter(|&k| inst.allowed(o, k)).count() as f64)
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
    /// Complete assignments reached (not pruned), and the first one's violation.
    leaves: usize,
    first_violation: Option<String>,
}

/// One level of the depth-first search: the unit being placed, the next device to try for
/// it, and what placing it on its current device added (to take back).
struct Frame {
    next: usize,
    placed: Option<(usize, f64, u64)>,
}

impl Search<'_> {
    fn leaf(&mut self) {
        let inst = self.inst;
        self.leaves += 1;
        if let Some(why) = violation(inst, &self.assign) {
            if self.first_violation.is_none() {
                self.first_violation = Some(why);
            }
            return;
        }
        let v = score(&evaluate(inst, &self.assign, &self.order), self.objective);
        if self.best.as_ref().is_none_or(|(b, _)| better(v, *b)) {
            self.best = Some((v, self.assign.clone()));
        }
    }

    /// Every assignment of units to allowed devices, devices in index order, depth first with
    /// an explicit stack (one frame per unit: no recursion, however many units there are).
    fn run(&mut self) {
        let inst = self.inst;
        let n_units = self.units.len();
        let mut stack: Vec<Frame> = Vec::with_capacity(n_units);
        if n_units == 0 {
            self.leaf();
            return;
        }
        stack.push(Frame {
            next: 0,
            placed: None,
        });
        while !stack.is_empty() {
            let u = stack.len() - 1;
            let top = &mut stack[u];
            // Take back this unit's current device before trying the next.
            if let Some((k, dt, dm)) = top.placed.take() {
                self.load[k] -= dt;
                self.memory[k] -= dm;
            }
            let unit = &self.units[u];
            let mut chosen = None;
            while top.next < inst.d {
                let k = top.next;
                top.next += 1;
                if !inst.allowed(unit[0], k) {
                    continue;
                }
                let dt: f64 = unit.iter().map(|&o| inst.t(o, k)).sum();
                let dm: u64 = unit
                    .iter()
                    .fold(0u64, |m, &o| m.saturating_add(inst.memory[o]));
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
                chosen = Some((k, dt, dm));
                break;
            }
            let Some((k, dt, dm)) = chosen else {
                stack.pop();
                continue;
            };
            top.placed = Some((k, dt, dm));
            for &o in unit {
                self.assign[o] = k;
            }
            self.load[k] += dt;
            self.memory[k] += dm;
            if u + 1 == n_units {
                self.leaf();
            } else {
                stack.push(Frame {
                    next: 0,
                    placed: None,
                });
            }
        }
    }
}

/// The optimum by enumeration.
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if !fits(inst) {
        return Err(ProblemError::Unsolved(format!(
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
        leaves: 0,
        first_violation: None,
    };
    s.run();
    match s.best {
        Some((_, assign)) => Ok(Solution::in_problem_order(inst, assign)),
        None => Err(ProblemError::Infeasible(match s.first_violation {
            // Every assignment was tried; none is feasible.
            Some(why) => format!(
                "exhaustive: none of the {} assignments that fit the ops' own memory is \
                 feasible; the first fails because {why}",
                s.leaves
            ),
            None => "exhaustive: no assignment fits the ops' own memory on the devices that \
                     can run them"
                .into(),
        })),
    }
}
