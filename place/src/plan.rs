//! A solved plan: what `tessera place` prints and `tessera compile -o` writes as
//! `plan.json`. It carries the assignment, the schedule, the objective's value, the lower
//! bound and the gap, per-device and per-link loads, what `auto` tried, and an explanation
//! per op ([`crate::explain`]).
//!
//! The JSON is deterministic (no timings inside; `tessera place` prints the solve time on
//! stderr) so plans can be diffed and replayed.

use serde::{Deserialize, Serialize};

use crate::bound::{LowerBound, lower_bound};
use crate::eval::{Objective, evaluate, is_topological, violation};
use crate::explain::{Explanation, explain_all};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{self, Solution, SolveOptions};

/// A placement plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The problem's name.
    pub problem: String,
    /// What was minimized.
    pub objective: Objective,
    /// The strategy asked for (`auto`, ...).
    pub strategy: String,
    /// The strategy whose plan this is.
    pub chosen: String,
    /// The objective's value: seconds per sample (throughput) or seconds (latency).
    pub value: f64,
    /// The steady-state period of a stream under this plan (seconds per sample).
    pub period: f64,
    /// Samples per second: 1 / period.
    pub throughput: f64,
    /// One sample's latency under this plan (list schedule, no link contention).
    pub latency: f64,
    /// The lower bound on `value` over all plans.
    pub lower_bound: LowerBound,
    /// `(value - lower_bound) / value`: the most this plan can be above the optimum, as a
    /// fraction of its value (0 when proven optimal).
    pub gap: f64,
    /// Bytes moved between devices per sample.
    pub traffic: u64,
    /// Per device: ops, load, memory.
    pub devices: Vec<DeviceUse>,
    /// Per loaded link direction.
    pub links: Vec<LinkUse>,
    /// How the plan was picked among `auto`'s, when not by the model alone (`tessera
    /// compile` simulates the best few).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_by: Option<String>,
    /// What `auto` tried, with each strategy's value or why it gave none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// The device of each op, in the problem's op order.
    pub assignment: Vec<Assigned>,
    /// The schedule, as op indices, when it differs from the problem's op order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<usize>>,
    /// Why each op is where it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub explanations: Vec<Explanation>,
}

/// One device's share of a plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceUse {
    /// The device.
    pub name: String,
    /// Ops placed on it.
    pub ops: usize,
    /// Busy seconds per sample.
    pub load: f64,
    /// Bytes held.
    pub memory: u64,
    /// Capacity in bytes.
    pub capacity: u64,
}

/// One link direction's load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkUse {
    /// Sending end.
    pub from: String,
    /// Receiving end.
    pub to: String,
    /// Busy seconds per sample.
    pub load: f64,
}

/// One strategy tried by `auto`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptRecord {
    /// The strategy.
    pub strategy: String,
    /// Its objective value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Why it gave no plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An op's device, or its device group when it runs split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Assigned {
    /// The op.
    pub op: String,
    /// Its device (whole), or its device group (split).
    pub device: String,
    /// The split it runs as, when split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitUse>,
}

/// The split alternative an op runs as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitUse {
    /// Its index in the problem op's `splits`.
    pub index: usize,
    /// What is split (the alternative's `axis`).
    #[serde(default)]
    pub axis: String,
    /// Over how many devices.
    pub ways: usize,
}

/// Solves `inst` with `strategy` for `objective` and builds the plan (with explanations when
/// `explain`).
pub fn solve(
    inst: &Instance,
    strategy_name: &str,
    objective: Objective,
    explain: bool,
) -> Result<Plan, ProblemError> {
    Ok(solve_with_solution(inst, strategy_name, objective, explain)?.0)
}

/// [`solve`], also returning the solution behind the plan (device indices and the order).
pub fn solve_with_solution(
    inst: &Instance,
    strategy_name: &str,
    objective: Objective,
    explain: bool,
) -> Result<(Plan, Solution), ProblemError> {
    let bound = lower_bound(inst, objective)?;
    let (sol, chosen, attempts) = strategy::run(strategy_name, inst, &SolveOptions { objective })?;
    let mut plan = plan_of(
        inst,
        &sol,
        objective,
        strategy_name,
        &chosen,
        bound,
        explain,
    )?;
    plan.attempts = records(attempts);
    plan.check_finite()?;
    Ok((plan, sol))
}

/// The plan's records of what `auto` tried.
pub fn records(attempts: Vec<crate::strategy::Attempt>) -> Vec<AttemptRecord> {
    attempts
        .into_iter()
        .map(|a| AttemptRecord {
            strategy: a.strategy,
            value: a.outcome.as_ref().ok().copied(),
            error: a.outcome.err(),
        })
        .collect()
}

/// The plan of a given solution.
pub fn plan_of(
    inst: &Instance,
    sol: &Solution,
    objective: Objective,
    strategy_name: &str,
    chosen: &str,
    bound: LowerBound,
    explain: bool,
) -> Result<Plan, ProblemError> {
    if let Some(why) = violation(inst, &sol.assign) {
        return Err(ProblemError::Infeasible(why));
    }
    if !is_topological(inst, &sol.order) {
        return Err(ProblemError::Infeasible(format!(
            "strategy `{chosen}` gave a schedule that is not a topological order"
        )));
    }
    let ev = evaluate(inst, &sol.assign, &sol.order);
    let value = ev.value(objective);
    let gap = if value > 0.0 {
        ((value - bound.value) / value).max(0.0)
    } else {
        0.0
    };
    let mut counts = vec![0; inst.d];
    for (o, &x) in sol.assign.iter().enumerate() {
        for &k in &inst.place_devices[inst.place_of(o, x)] {
            counts[k] += 1;
        }
    }
    let devices = (0..inst.d)
        .map(|k| DeviceUse {
            name: inst.device_name(k).to_string(),
            ops: counts[k],
            load: ev.device_load[k],
            memory: ev.memory[k],
            capacity: inst.capacity[k],
        })
        .collect();
    let links = ev
        .channel_load
        .iter()
        .enumerate()
        .filter(|&(_, &l)| l > 0.0)
        .map(|(c, &load)| {
            let l = &inst.problem.links[c / 2];
            let (from, to) = if c % 2 == 0 {
                (&l.a, &l.b)
            } else {
                (&l.b, &l.a)
            };
            LinkUse {
                from: from.clone(),
                to: to.clone(),
                load,
            }
        })
        .collect();
    let identity = sol.order.iter().enumerate().all(|(i, &o)| i == o);
    let plan = Plan {
        problem: inst.problem.name.clone(),
        objective,
        strategy: strategy_name.to_string(),
        chosen: chosen.to_string(),
        value,
        period: ev.period,
        throughput: if ev.period > 0.0 {
            1.0 / ev.period
        } else {
            0.0
        },
        latency: ev.latency,
        lower_bound: bound,
        gap,
        traffic: ev.traffic,
        devices,
        links,
        selected_by: None,
        attempts: Vec::new(),
        assignment: (0..inst.n)
            .map(|o| {
                let x = sol.assign[o];
                Assigned {
                    op: inst.op_name(o).to_string(),
                    device: inst.place_name(inst.place_of(o, x)).to_string(),
                    split: (x >= inst.d).then(|| {
                        let a = x - inst.d;
                        SplitUse {
                            index: a,
                            axis: inst.problem.ops[o].splits[a].axis.clone(),
                            ways: inst.alts[o][a].time.len(),
                        }
                    }),
                }
            })
            .collect(),
        order: (!identity).then(|| sol.order.clone()),
        explanations: if explain {
            explain_all(inst, sol, objective, &ev)
        } else {
            Vec::new()
        },
    };
    plan.check_finite()?;
    Ok(plan)
}

impl Plan {
    /// How many ops run on a device group, by split axis (the alternatives' `axis`;
    /// [`crate::alternatives::REPLICATED`]: whole on every device of the group).
    pub fn split_axes(&self) -> std::collections::BTreeMap<&str, usize> {
        let mut axes = std::collections::BTreeMap::new();
        for s in self.assignment.iter().filter_map(|a| a.split.as_ref()) {
            *axes.entry(s.axis.as_str()).or_insert(0) += 1;
        }
        axes
    }

    /// Checks that every number of the plan is finite: JSON has no infinity or NaN (serde
    /// writes them as `null`, which [`Plan::parse`] refuses), so such a plan is an error,
    /// naming the field, rather than a file that cannot be read back. The ranges of
    /// [`crate::problem`] keep a solved plan's numbers finite; this is the check that they did.
    pub fn check_finite(&self) -> Result<(), ProblemError> {
        let mut fields: Vec<(String, f64)> = vec![
            ("value".into(), self.value),
            ("period".into(), self.period),
            ("throughput".into(), self.throughput),
            ("latency".into(), self.latency),
            ("lower_bound.value".into(), self.lower_bound.value),
            ("gap".into(), self.gap),
        ];
        for (name, &v) in &self.lower_bound.components {
            fields.push((format!("lower_bound.components.{name}"), v));
        }
        for d in &self.devices {
            fields.push((format!("devices ({}).load", d.name), d.load));
        }
        for l in &self.links {
            fields.push((format!("links ({} -> {}).load", l.from, l.to), l.load));
        }
        for a in &self.attempts {
            if let Some(v) = a.value {
                fields.push((format!("attempts ({}).value", a.strategy), v));
            }
        }
        for e in &self.explanations {
            for (dev, c) in &e.costs {
                if let Some(v) = *c {
                    fields.push((format!("explanations ({}).costs.{dev}", e.op), v));
                }
            }
        }
        match fields.into_iter().find(|(_, v)| !v.is_finite()) {
            Some((at, v)) => Err(ProblemError::Invalid {
                at: format!("plan {at}"),
                message: format!(
                    "is {v}, which JSON cannot hold; the problem's numbers are too large for \
                     its sums"
                ),
            }),
            None => Ok(()),
        }
    }

    /// The plan as pretty JSON with a final newline, after [`Plan::check_finite`].
    pub fn try_to_json(&self) -> Result<String, ProblemError> {
        self.check_finite()?;
        Ok(self.to_json())
    }

    /// The plan as pretty JSON with a final newline (a non-finite number is written as
    /// `null`: use [`Plan::try_to_json`] for a plan not made by [`solve`] or [`plan_of`]).
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// Parses a plan; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Plan, ProblemError> {
        serde_json::from_str(text).map_err(|e| ProblemError::File {
            file: file.to_string(),
            message: e.to_string(),
        })
    }

    /// The explanation of the op named `op`.
    pub fn explanation(&self, op: &str) -> Option<&Explanation> {
        self.explanations.iter().find(|e| e.op == op)
    }
}
