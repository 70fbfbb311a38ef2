//! Exhaustive search: every assignment of colocation units to their options (an allowed
//! device, or a split alternative over a device group: for a group of several ops, every
//! combination of its ops' alternatives over one device group), depth first, pruned when the
//! devices' loads so far (throughput) or the memory so far already rule a branch out. Exact for the problem's model (latency in the problem's op order), and only
//! for tiny problems: it refuses spaces over [`MAX_SPACE`] assignments. The tests use it as
//! the reference optimum.

use crate::eval::{Objective, evaluate, problem_order, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, better, score, units};

/// The largest number of assignments it enumerates.
pub const MAX_SPACE: f64 = 2.0e5;

/// The number of assignments of units to their options.
pub fn space(inst: &Instance) -> f64 {
    units(inst)
        .iter()
        .map(|u| unit_option_count(inst, u))
        .product()
}

/// The number of options of a unit: its allowed devices, plus, per device group, the
/// combinations of its ops' allowed alternatives there.
fn unit_option_count(inst: &Instance, unit: &[usize]) -> f64 {
    let devices = (0..inst.d).filter(|&k| inst.allowed(unit[0], k)).count() as f64;
    let splits: f64 = (0..inst.problem.groups.len())
        .map(|g| {
            unit.iter()
                .map(|&o| {
                    inst.alts[o]
                        .iter()
                        .filter(|a| a.allowed && a.group == g)
                        .count() as f64
                })
                .product::<f64>()
        })
        .sum();
    devices + splits
}

/// One option of a unit: the option of each of its ops, and what it adds per device
/// (device, seconds, bytes).
struct UnitOption {
    choice: Vec<usize>,
    adds: Vec<(usize, f64, u64)>,
}

/// Every option of `unit`, devices first in index order, then device groups in order with
/// their ops' alternatives combined in order.
fn unit_options(inst: &Instance, unit: &[usize]) -> Vec<UnitOption> {
    let mut out = Vec::new();
    for k in (0..inst.d).filter(|&k| inst.allowed(unit[0], k)) {
        out.push(UnitOption {
            choice: vec![k; unit.len()],
            adds: vec![(
                k,
                unit.iter().map(|&o| inst.t(o, k)).sum(),
                unit.iter()
                    .fold(0u64, |m, &o| m.saturating_add(inst.memory[o])),
            )],
        });
    }
    for g in 0..inst.problem.groups.len() {
        let lists: Vec<Vec<usize>> = unit
            .iter()
            .map(|&o| {
                (0..inst.alts[o].len())
                    .filter(|&a| inst.alts[o][a].allowed && inst.alts[o][a].group == g)
                    .map(|a| inst.d + a)
                    .collect()
            })
            .collect();
        if lists.iter().any(Vec::is_empty) {
            continue;
        }
        // Odometer over the combinations (no recursion).
        let mut at = vec![0usize; unit.len()];
        loop {
            let choice: Vec<usize> = at.iter().zip(&lists).map(|(&i, l)| l[i]).collect();
            let members = &inst.place_devices[inst.d + g];
            let adds = members
                .iter()
                .enumerate()
                .map(|(i, &k)| {
                    let mut t = 0.0;
                    let mut m = 0u64;
                    for (&o, &x) in unit.iter().zip(&choice) {
                        t += inst.option_times(o, x)[i];
                        m = m.saturating_add(inst.option_memory(o, x));
                    }
                    (k, t, m)
                })
                .collect();
            out.push(UnitOption { choice, adds });
            let mut i = 0;
            while i < at.len() {
                at[i] += 1;
                if at[i] < lists[i].len() {
                    break;
                }
                at[i] = 0;
                i += 1;
            }
            if i == at.len() {
                break;
            }
        }
    }
    out
}

/// Whether the problem is small enough.
pub fn fits(inst: &Instance) -> bool {
    space(inst) <= MAX_SPACE
}

struct Search<'a> {
    inst: &'a Instance,
    objective: Objective,
    units: Vec<Vec<usize>>,
    options: Vec<Vec<UnitOption>>,
    order: Vec<usize>,
    assign: Vec<usize>,
    load: Vec<f64>,
    memory: Vec<u64>,
    best: Option<((f64, f64), Vec<usize>)>,
    /// Complete assignments reached (not pruned), and the first one's violation.
    leaves: usize,
    first_violation: Option<String>,
}

/// One level of the depth-first search: the unit being placed, the next option to try for
/// it, and the option it has now (whose additions to take back).
struct Frame {
    next: usize,
    placed: Option<usize>,
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
            // Take back this unit's current option before trying the next.
            if let Some(i) = top.placed.take() {
                for &(k, dt, dm) in &self.options[u][i].adds {
                    self.load[k] -= dt;
                    self.memory[k] -= dm;
                }
            }
            let unit = &self.units[u];
            let mut chosen = None;
            while top.next < self.options[u].len() {
                let i = top.next;
                top.next += 1;
                let adds = &self.options[u][i].adds;
                if adds
                    .iter()
                    .any(|&(k, _, dm)| self.memory[k].saturating_add(dm) > inst.capacity[k])
                {
                    continue;
                }
                // Loads only grow, and both objectives are at least the busiest device's load
                // (equal loads may still win the tie-break).
                if let Some((b, _)) = &self.best
                    && adds.iter().any(|&(k, dt, _)| self.load[k] + dt > b.0)
                {
                    continue;
                }
                chosen = Some(i);
                break;
            }
            let Some(i) = chosen else {
                stack.pop();
                continue;
            };
            top.placed = Some(i);
            for (&o, &x) in unit.iter().zip(&self.options[u][i].choice) {
                self.assign[o] = x;
            }
            for &(k, dt, dm) in &self.options[u][i].adds {
                self.load[k] += dt;
                self.memory[k] += dm;
            }
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
    let us = units(inst);
    let options = us.iter().map(|u| unit_options(inst, u)).collect();
    let mut s = Search {
        inst,
        objective: opts.objective,
        units: us,
        options,
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
