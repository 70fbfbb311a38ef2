//! Why each op is where it is: its modelled cost on every device, and the constraint that
//! decided between its device and the fastest alternative.
//!
//! For op `o` on device `k`, the constraint is, in this order:
//! - `pin`: the op was pinned (a `device(...)` annotation in the IR);
//! - `support`: no other device can run it;
//! - `fastest`: no allowed device runs it faster than `k`;
//! - otherwise the fastest other device `k'` is examined by moving `o` (with its colocation
//!   group) there: `colocation` when the group as a whole is not faster on `k'`; `memory`
//!   when `k'` could not hold it (with the overflow in bytes); `link` when the move makes a
//!   link direction the bottleneck (throughput) or its transfers cost more than it saves
//!   (latency); `load` when `k'` becomes the busiest resource (throughput) or is busy
//!   (latency); and `search` when the move would not make the plan worse, so nothing but the
//!   strategy's search kept it off `k'`.
//!
//! The move is evaluated incrementally (loads, channel loads and the receiving device's
//! memory change; tensors shared with other consumers are counted per edge), so explaining
//! every op of a large plan stays linear in the plan's size.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::eval::{Evaluation, Objective};
use crate::problem::Instance;
use crate::strategy::Solution;

/// The explanation of one op's placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Explanation {
    /// The op.
    pub op: String,
    /// Its device.
    pub device: String,
    /// Its modelled seconds on each device; `null` where it cannot run.
    pub costs: BTreeMap<String, Option<f64>>,
    /// The deciding constraint: pin, support, fastest, colocation, memory, link, load, search.
    pub constraint: String,
    /// The reason, in words with numbers.
    pub reason: String,
}

/// Explanations for every op of `sol`, in op order.
pub fn explain_all(
    inst: &Instance,
    sol: &Solution,
    objective: Objective,
    ev: &Evaluation,
) -> Vec<Explanation> {
    (0..inst.n)
        .map(|o| explain_op(inst, sol, objective, ev, o))
        .collect()
}

/// The name of split alternative `a` of op `o` in explanations and plans:
/// `GROUP/AXIS` (`GROUP/split-A` without an axis).
pub fn split_name(inst: &Instance, o: usize, a: usize) -> String {
    let spec = &inst.problem.ops[o].splits[a];
    let axis = if spec.axis.is_empty() {
        format!("split-{a}")
    } else {
        spec.axis.clone()
    };
    format!("{}/{axis}", spec.group)
}

/// The most ops a plan with splits has for its explanations to weigh every op's other
/// options by evaluating the whole plan (quadratic work); above it they give the costs and
/// the reason of the op's own option only.
pub const SPLIT_EXPLAIN_MAX_OPS: usize = 1_000;

/// The explanation of op `o` in a plan that splits some op: every option's modelled time
/// (devices whole, splits by `GROUP/AXIS`: the slowest share) and why its option won,
/// weighed by evaluating the plan with the op's unit moved to the best other option:
/// `memory` (the other option overflows a device, or the op fits no device whole), `time`
/// (the other option makes the objective worse by computing longer), `link` (it makes the
/// objective worse through transfers and resharding: a link or the reshard time binds),
/// `forced` (the problem lists no time for it whole: `compile --split force`), or `search`.
fn explain_split(
    inst: &Instance,
    sol: &Solution,
    objective: Objective,
    ev: &Evaluation,
    o: usize,
) -> Explanation {
    let x = sol.assign[o];
    let mut costs = device_costs(inst, o);
    for (a, alt) in inst.alts[o].iter().enumerate() {
        costs.insert(split_name(inst, o, a), alt.allowed.then(|| alt.duration()));
    }
    let here = if x < inst.d {
        inst.device_name(x).to_string()
    } else {
        split_name(inst, o, x - inst.d)
    };
    let (constraint, reason) = decide_split(inst, sol, objective, ev, o);
    Explanation {
        op: inst.op_name(o).to_string(),
        device: here,
        costs,
        constraint: constraint.to_string(),
        reason,
    }
}

fn decide_split(
    inst: &Instance,
    sol: &Solution,
    objective: Objective,
    ev: &Evaluation,
    o: usize,
) -> (&'static str, String) {
    let x = sol.assign[o];
    let spec = &inst.problem.ops[o];
    if let Some(p) = &spec.pin {
        return ("pin", format!("pinned to {p}"));
    }
    let duration = inst.option_times(o, x).iter().copied().fold(0.0, f64::max);
    let what = if x < inst.d {
        format!("whole on {} ({})", inst.device_name(x), secs(duration))
    } else {
        let a = x - inst.d;
        format!(
            "split {} ways ({}, {} per device)",
            inst.alts[o][a].time.len(),
            split_name(inst, o, a),
            secs(duration)
        )
    };
    if x >= inst.d && !inst.runs_whole(o) && spec.time.is_empty() {
        // No time on any kind: the problem does not let it run whole (`--split force`).
        return (
            "forced",
            format!("{what}: the problem offers no whole option (compile --split force)"),
        );
    }
    if x >= inst.d && !inst.runs_whole(o) {
        let largest = (0..inst.d)
            .filter(|&k| {
                inst.time[o * inst.d + k].is_finite()
                    || spec.time.contains_key(&inst.problem.devices[k].kind)
            })
            .map(|k| inst.capacity[k])
            .max()
            .unwrap_or(0);
        return (
            "memory",
            format!(
                "{what}: it fits no device whole (it needs {} bytes; the largest device that could \
                 run it holds {largest})",
                spec.memory
            ),
        );
    }
    if inst.n > SPLIT_EXPLAIN_MAX_OPS {
        return ("search", format!("{what}: the strategy's search chose it"));
    }
    let unit: Vec<usize> = match inst.group_of[o] {
        Some(g) => inst.groups[g].clone(),
        None => vec![o],
    };
    // The best other option of the unit by the objective: devices, and each split of a
    // single op.
    let mut others: Vec<Vec<usize>> = (0..inst.d)
        .filter(|&k| inst.allowed(o, k))
        .map(|k| vec![k; unit.len()])
        .collect();
    if unit.len() == 1 {
        others.extend(
            (0..inst.alts[o].len())
                .filter(|&a| inst.alts[o][a].allowed)
                .map(|a| vec![inst.d + a]),
        );
    }
    let mut assign = sol.assign.clone();
    let mut best: Option<(f64, Evaluation, usize)> = None;
    let mut overflow: Option<(usize, String)> = None;
    for choice in &others {
        if unit.iter().zip(choice).all(|(&u, &c)| sol.assign[u] == c) {
            continue;
        }
        for (&u, &c) in unit.iter().zip(choice) {
            assign[u] = c;
        }
        if let Some(why) = crate::eval::violation(inst, &assign) {
            overflow.get_or_insert((choice[0], why));
        } else {
            let e = crate::eval::evaluate(inst, &assign, &sol.order);
            let v = e.value(objective);
            if best.as_ref().is_none_or(|b| v < b.0) {
                best = Some((v, e, choice[0]));
            }
        }
        for &u in &unit {
            assign[u] = sol.assign[u];
        }
    }
    let option_name = |y: usize| {
        if y < inst.d {
            format!("whole on {}", inst.device_name(y))
        } else {
            format!("split as {}", split_name(inst, o, y - inst.d))
        }
    };
    let now = ev.value(objective);
    let Some((v, other, y)) = best else {
        return match overflow {
            Some((y, why)) => (
                "memory",
                format!("{what}; {} would not fit: {why}", option_name(y)),
            ),
            None => ("support", format!("{what}: it has no other option")),
        };
    };
    if v <= now * (1.0 + 1e-12) {
        return (
            "search",
            format!(
                "{what}; {} would make the {objective} {} (now {}), no worse: only the \
                 strategy's search kept it here",
                option_name(y),
                secs(v),
                secs(now)
            ),
        );
    }
    let y_time = inst.option_times(o, y).iter().copied().fold(0.0, f64::max);
    let busiest_channel = other.channel_load.iter().copied().fold(0.0, f64::max);
    let busiest_device = other.device_load.iter().copied().fold(0.0, f64::max);
    let by_link = match objective {
        Objective::Throughput => busiest_channel >= busiest_device,
        Objective::Latency => y_time <= duration,
    };
    if by_link {
        (
            "link",
            format!(
                "{what}; {} computes it in {} but its transfers and resharding would make \
                 the {objective} {} against {}",
                option_name(y),
                secs(y_time),
                secs(v),
                secs(now)
            ),
        )
    } else {
        (
            "time",
            format!(
                "{what}; {} would take {} and make the {objective} {} against {}",
                option_name(y),
                secs(y_time),
                secs(v),
                secs(now)
            ),
        )
    }
}

/// Op `o`'s modelled seconds on each device, `None` where it cannot run.
fn device_costs(inst: &Instance, o: usize) -> BTreeMap<String, Option<f64>> {
    (0..inst.d)
        .map(|j| {
            let t = inst.t(o, j);
            (inst.device_name(j).to_string(), t.is_finite().then_some(t))
        })
        .collect()
}

fn secs(s: f64) -> String {
    tessera_targets::sim::seconds(s)
}

/// The explanation of op `o`.
pub fn explain_op(
    inst: &Instance,
    sol: &Solution,
    objective: Objective,
    ev: &Evaluation,
    o: usize,
) -> Explanation {
    if crate::split::any_split(inst, &sol.assign) {
        return explain_split(inst, sol, objective, ev, o);
    }
    let assign = &sol.assign;
    let k = assign[o];
    let costs = device_costs(inst, o);
    let (constraint, reason) = decide(inst, assign, objective, ev, o);
    Explanation {
        op: inst.op_name(o).to_string(),
        device: inst.device_name(k).to_string(),
        costs,
        constraint: constraint.to_string(),
        reason,
    }
}

fn decide(
    inst: &Instance,
    assign: &[usize],
    objective: Objective,
    ev: &Evaluation,
    o: usize,
) -> (&'static str, String) {
    let k = assign[o];
    let name = |j: usize| inst.device_name(j);
    let spec = &inst.problem.ops[o];
    if let Some(p) = &spec.pin {
        return (
            "pin",
            format!(
                "pinned to {p} (the problem's `pin`: a device annotation, or a graph input or output on the host)"
            ),
        );
    }
    let allowed: Vec<usize> = (0..inst.d).filter(|&j| inst.allowed(o, j)).collect();
    if allowed.len() == 1 {
        return (
            "support",
            format!(
                "only {} can run it (`{}` has no time for the other devices' kinds, or they \
                 do not support it)",
                name(k),
                spec.kind
            ),
        );
    }
    let here = inst.t(o, k);
    let Some(alt) = allowed
        .iter()
        .copied()
        .filter(|&j| j != k && inst.t(o, j) < here)
        .min_by(|&a, &b| inst.t(o, a).total_cmp(&inst.t(o, b)))
    else {
        return (
            "fastest",
            format!(
                "{} runs it fastest ({}); no allowed device is faster",
                name(k),
                secs(here)
            ),
        );
    };
    let there = inst.t(o, alt);
    let unit: Vec<usize> = match inst.group_of[o] {
        Some(g) => inst.groups[g].clone(),
        None => vec![o],
    };
    let unit_here: f64 = unit.iter().map(|&u| inst.t(u, k)).sum();
    let unit_there: f64 = unit.iter().map(|&u| inst.t(u, alt)).sum();
    if unit.len() > 1 && unit_there >= unit_here {
        let g = spec.colocate.clone().unwrap_or_default();
        return (
            "colocation",
            format!(
                "{} would run it faster ({} vs {}), but its colocation group `{g}` ({} ops) \
                 takes {} there against {} on {}",
                name(alt),
                secs(there),
                secs(here),
                unit.len(),
                secs(unit_there),
                secs(unit_here),
                name(k)
            ),
        );
    }
    // Move the unit to `alt`, incrementally.
    let d = inst.d;
    let in_unit = |x: usize| unit.contains(&x);
    let mut load = ev.device_load.clone();
    load[k] -= unit_here;
    load[alt] += unit_there;
    let mut channel = ev.channel_load.clone();
    let mut mem_alt = ev.memory[alt] as i128;
    mem_alt += unit.iter().map(|&u| inst.memory[u] as i128).sum::<i128>();
    let mut link_delta = 0.0;
    for &u in &unit {
        for &e in inst.in_edges[u].iter().chain(&inst.out_edges[u]) {
            let edge = &inst.problem.edges[e];
            let incoming = edge.to == u;
            let other = if incoming { edge.from } else { edge.to };
            if in_unit(other) {
                continue;
            }
            let od = assign[other];
            let (old_from, old_to, new_from, new_to) = if incoming {
                (od, k, od, alt)
            } else {
                (k, od, alt, od)
            };
            if old_from != old_to {
                let t = inst.transfer(old_from, old_to, edge.bytes);
                link_delta -= t;
                for c in inst.route_channels(old_from, old_to) {
                    channel[c] -= t;
                }
            }
            if new_from != new_to {
                let t = inst.transfer(new_from, new_to, edge.bytes);
                link_delta += t;
                for c in inst.route_channels(new_from, new_to) {
                    channel[c] += t;
                }
                if incoming {
                    mem_alt += edge.bytes as i128;
                }
            } else if !incoming {
                // `alt` no longer receives what `u` sends it.
                mem_alt -= edge.bytes as i128;
            }
        }
    }
    if mem_alt > inst.capacity[alt] as i128 {
        return (
            "memory",
            format!(
                "{} would run it faster ({} vs {}) but would then hold {} bytes, {} more than \
                 its capacity of {} bytes",
                name(alt),
                secs(there),
                secs(here),
                mem_alt,
                mem_alt - inst.capacity[alt] as i128,
                inst.capacity[alt]
            ),
        );
    }
    match objective {
        Objective::Throughput => {
            let dev_max = (0..d)
                .max_by(|&a, &b| load[a].total_cmp(&load[b]))
                .unwrap_or(0);
            let ch_max = (0..channel.len()).max_by(|&a, &b| channel[a].total_cmp(&channel[b]));
            let ch_val = ch_max.map_or(0.0, |c| channel[c]);
            let new_period = load[dev_max].max(ch_val);
            if new_period <= ev.period * (1.0 + 1e-12) {
                return (
                    "search",
                    format!(
                        "{} would run it faster ({} vs {}) and the period would be {} (now {}); \
                         the strategy's search left it on {}",
                        name(alt),
                        secs(there),
                        secs(here),
                        secs(new_period),
                        secs(ev.period),
                        name(k)
                    ),
                );
            }
            if let Some(c) = ch_max
                && ch_val >= load[dev_max]
            {
                let l = &inst.problem.links[c / 2];
                let (a, b) = if c % 2 == 0 {
                    (&l.a, &l.b)
                } else {
                    (&l.b, &l.a)
                };
                return (
                    "link",
                    format!(
                        "on {} (faster: {} vs {}) its transfers would make the link {a} -> {b} \
                         the bottleneck: {} per sample against the period of {}",
                        name(alt),
                        secs(there),
                        secs(here),
                        secs(ch_val),
                        secs(ev.period)
                    ),
                );
            }
            (
                "load",
                format!(
                    "{} is faster ({} vs {}) but busy: moving it there would make {} the \
                     bottleneck at {} per sample against the period of {}",
                    name(alt),
                    secs(there),
                    secs(here),
                    name(dev_max),
                    secs(load[dev_max]),
                    secs(ev.period)
                ),
            )
        }
        Objective::Latency => {
            let saved = unit_here - unit_there;
            if link_delta > saved {
                (
                    "link",
                    format!(
                        "{} would save {} of compute but add {} of transfers",
                        name(alt),
                        secs(saved),
                        secs(link_delta)
                    ),
                )
            } else {
                (
                    "load",
                    format!(
                        "{} is faster ({} vs {}) but busy with other ops of the critical path \
                         (it carries {} of work per sample)",
                        name(alt),
                        secs(there),
                        secs(here),
                        secs(ev.device_load[alt])
                    ),
                )
            }
        }
    }
}

/// The explanation as text, for `tessera explain`.
pub fn render(e: &Explanation) -> String {
    let mut s = format!("op {} on {} ({})\n", e.op, e.device, e.constraint);
    s.push_str("  modelled time per device:\n");
    let width = e.costs.keys().map(|k| k.len()).max().unwrap_or(0);
    for (dev, t) in &e.costs {
        let t = t.map_or_else(|| "cannot run".to_string(), secs);
        let mark = if *dev == e.device { "  <- chosen" } else { "" };
        s.push_str(&format!("    {dev:<width$}  {t}{mark}\n"));
    }
    s.push_str(&format!("  why: {}\n", e.reason));
    s
}
