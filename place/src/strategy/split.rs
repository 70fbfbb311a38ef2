//! The `split` strategy: placement and op splitting decided together, by local search over
//! every op's options (a device, or a split alternative over a device group), after the
//! intra- and inter-operator search of Alpa (Zheng et al., OSDI 2022), with Alpa's
//! intra-operator integer program ([`intra_op`]) as one of its starts.
//!
//! **The method, by measurement** (`benches/intra_op.rs`, `benches/intra-op-results.md`: 203
//! split problems of the benchmark models per objective, 150 where every op fits the group):
//! the program alone (every op on the group, Alpa's stage) is worse than the local search on
//! every problem for throughput and on 147 of 150 for latency (it cannot pipeline ops over
//! the other devices), but on 3 latency problems it is better (GPT-2 small on `mcm-ring4`'s
//! four accelerators: 680.1 us against 841.8 us); as the search's last start it improves 2
//! throughput and 11 latency problems and, being last, never makes one worse, for at most
//! 0.15 s of solving. So: local search, with the program's plan per group as its last start.
//!
//! 1. Starts: the best device-only plan (`local`'s, when every op fits some device whole),
//!    the best [`ON_GROUP_STARTS`] plans that put every op on one device group (each op the
//!    alternative there that costs least with the reshards from its producers, Megatron-like
//!    tensor parallelism), and two greedy plans over options: units in order, each to the option that finishes it
//!    soonest (its devices' loads plus its share, plus the time to reshard its operands), or
//!    to the one that leaves its fullest device the least full, among those that fit memory
//!    (the least overflow when none does); an op too large for every device takes a split;
//!    last, the intra-operator program's plan on each group (when one fits).
//! 2. Local search on each start: for every unit with split alternatives, every other
//!    option is tried; a move to a split is also tried *chained*: the op's only consumer
//!    follows it onto the same device group with an alternative that reads the new layout as
//!    it is (no reshard between them), then that op's only consumer, up to [`CHAIN`] ops, and
//!    the best prefix counts. A move is kept when the plan stays feasible and its score
//!    improves. Passes repeat until none improves or the evaluation budget (proportional to
//!    the problem's size, [`EVAL_WORK`]) is spent.
//!
//! While a start is over memory (the greedy's, when nothing fits an op), the search ranks
//! plans by the bytes over capacity first, and, when no single move lowers them, also tries
//! pair moves (a unit and a unit it feeds, every option of each).
//!
//! Every plan is evaluated whole by [`crate::eval::evaluate`], so the search optimizes
//! exactly the model the plan reports.

use crate::eval::{Objective, violation};
use crate::problem::{Instance, ProblemError};
use crate::split::{
    Delivery, Layout, Tracker, comm_time, in_layout, kept, out_layout, reshard, schedule_latency,
};
use crate::strategy::{Solution, SolveOptions, better, intra_op, units};

/// The most ops a chained move carries along.
pub const CHAIN: usize = 8;

/// The evaluation budget, in op and edge visits: the search stops after about this much
/// work (deterministic: counted, not timed). A throughput move costs about 64 visits (the
/// op's edges, kept incrementally), a latency move a list schedule of the whole graph.
pub const EVAL_WORK: f64 = 3e7;

/// The `split` strategy: its own starts, then the intra-operator program's plan on each
/// device group (last, so the other starts search exactly as without them: the result is
/// never worse for them).
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let programs: Vec<Solution> = (0..inst.problem.groups.len())
        .filter_map(|g| intra_op::on_group(inst, g).ok())
        .map(|p| Solution::in_problem_order(inst, p.assign))
        .collect();
    search(inst, opts, programs)
}

/// The `split` strategy's search from its own starts only (no intra-operator program): what
/// `benches/intra_op.rs` measures the program against.
pub fn solve_local(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    search(inst, opts, Vec::new())
}

/// Local search from the strategy's own starts, then from `last`.
fn search(
    inst: &Instance,
    opts: &SolveOptions,
    last_starts: Vec<Solution>,
) -> Result<Solution, ProblemError> {
    let mut starts = Vec::new();
    if (0..inst.n).all(|o| inst.runs_whole(o))
        && let Ok(s) = super::local_from_baseline(inst, opts)
    {
        starts.push(s);
    }
    starts.push(greedy(inst, false)?);
    starts.push(greedy(inst, true)?);
    // Everything on one device group, as tensor parallelism does: the best of the groups.
    let mut on: Vec<(Key, Solution)> = (0..inst.problem.groups.len())
        .map(|g| {
            let s = on_group(inst, g);
            let t = Tracker::new(inst, s.assign.clone());
            (key_of(&t, &s.order, opts.objective), s)
        })
        .collect();
    on.sort_by(|a, b| {
        a.0.0
            .cmp(&b.0.0)
            .then(a.0.1.0.total_cmp(&b.0.1.0))
            .then(a.0.1.1.total_cmp(&b.0.1.1))
    });
    starts.extend(on.into_iter().take(ON_GROUP_STARTS).map(|(_, s)| s));
    starts.extend(last_starts);
    let mut best: Option<((f64, f64), Solution)> = None;
    let mut last = None;
    let mut budget = budget(inst, opts.objective);
    for s in starts {
        let s = improve(inst, s, opts, &mut budget);
        match violation(inst, &s.assign) {
            None => {
                let v = s.score(inst, opts.objective);
                if best.as_ref().is_none_or(|(b, _)| better(v, *b)) {
                    best = Some((v, s));
                }
            }
            Some(why) => last = Some(why),
        }
    }
    match best {
        Some((_, s)) => Ok(s),
        None => Err(ProblemError::Infeasible(format!(
            "split: the search found no feasible plan: {}",
            last.unwrap_or_default()
        ))),
    }
}

/// How many of the everything-on-one-group starts (the best by the objective) the search
/// improves.
pub const ON_GROUP_STARTS: usize = 2;

/// Every unit, in order, to its best option on device group `g`: the one whose duration plus
/// the time to reshard its operands from where its producers are is least; a unit with no
/// option there goes to its fastest option elsewhere. Tensor parallelism chosen op by op
/// (Megatron-LM's column-then-row pairs come out of it where they are cheapest).
fn on_group(inst: &Instance, g: usize) -> Solution {
    on_places(inst, |_| inst.d + g)
}

/// [`on_group`] with a place per unit: unit `i` (of [`units`], in order) to its best option on
/// place `place_of(i)` (a device group's place `d + g`, or a device), or, with no option there,
/// to its fastest option (its first member's time). The `stages` strategy's stages, each on its own group.
pub(crate) fn on_places(inst: &Instance, place_of: impl Fn(usize) -> usize) -> Solution {
    let mut assign = vec![usize::MAX; inst.n];
    for (i, unit) in units(inst).into_iter().enumerate() {
        let place = place_of(i);
        let options = unit_options(inst, &unit);
        let here: Vec<&Vec<usize>> = options
            .iter()
            .filter(|c| inst.place_of(unit[0], c[0]) == place)
            .collect();
        let pick = if here.is_empty() {
            options.iter().min_by(|a, b| {
                let t = |c: &Vec<usize>| -> f64 {
                    unit.iter()
                        .zip(c.iter())
                        .map(|(&o, &x)| inst.option_times(o, x)[0])
                        .sum()
                };
                t(a).total_cmp(&t(b))
            })
        } else {
            here.into_iter().min_by(|a, b| {
                let cost = |c: &Vec<usize>| -> f64 {
                    let mut total = 0.0;
                    for (&o, &x) in unit.iter().zip(c.iter()) {
                        total += inst.option_times(o, x).iter().copied().fold(0.0, f64::max);
                        for &e in &inst.in_edges[o] {
                            let edge = &inst.problem.edges[e];
                            let u = edge.from;
                            if assign[u] == usize::MAX {
                                continue;
                            }
                            let comm = reshard(
                                inst,
                                inst.place_of(u, assign[u]),
                                out_layout(inst, u, assign[u], edge.tensor),
                                place,
                                in_layout(inst, o, x, edge.operand),
                                edge.bytes,
                            );
                            total += comm_time(inst, &comm);
                        }
                    }
                    total
                };
                cost(a).total_cmp(&cost(b))
            })
        };
        if let Some(c) = pick {
            for (&o, &x) in unit.iter().zip(c) {
                assign[o] = x;
            }
        }
    }
    Solution::in_problem_order(inst, assign)
}

/// The options of a unit: per option, each member's option. Devices first, then per device
/// group the members' alternatives there (the fastest of each member's, so a unit of several
/// ops has one option per group).
pub(crate) fn unit_options(inst: &Instance, unit: &[usize]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = (0..inst.d)
        .filter(|&k| inst.allowed(unit[0], k))
        .map(|k| vec![k; unit.len()])
        .collect();
    if let [o] = unit {
        out.extend(
            (0..inst.alts[*o].len())
                .filter(|&a| inst.alts[*o][a].allowed)
                .map(|a| vec![inst.d + a]),
        );
        return out;
    }
    for g in 0..inst.problem.groups.len() {
        let choice: Option<Vec<usize>> = unit
            .iter()
            .map(|&o| {
                (0..inst.alts[o].len())
                    .filter(|&a| inst.alts[o][a].allowed && inst.alts[o][a].group == g)
                    .min_by(|&a, &b| {
                        inst.alts[o][a]
                            .duration()
                            .total_cmp(&inst.alts[o][b].duration())
                    })
                    .map(|a| inst.d + a)
            })
            .collect();
        out.extend(choice);
    }
    out
}

/// Units in order, each to the option finishing it soonest among those that fit memory (its
/// own and the operands it receives from units placed before it); with `roomy`, to the
/// option leaving the fullest of its devices the least full instead (the fallback when
/// the first way runs out of memory).
fn greedy(inst: &Instance, roomy: bool) -> Result<Solution, ProblemError> {
    let mut assign = vec![usize::MAX; inst.n];
    let mut load = inst.base_load.clone();
    let mut memory = inst.base_memory.clone();
    let mut received: std::collections::BTreeSet<(usize, u32, usize, Layout)> = Default::default();
    for unit in units(inst) {
        // (score, choice, bytes it adds per device, the tensors it receives)
        let mut best: Option<(f64, Vec<usize>, u64, Vec<Delivery>)> = None;
        for choice in unit_options(inst, &unit) {
            let place = inst.place_of(unit[0], choice[0]);
            let devices = &inst.place_devices[place];
            let mut t = vec![0.0; devices.len()];
            let mut m = 0u64;
            let mut comm = 0.0f64;
            let mut gets: Vec<Delivery> = Vec::new();
            for (&o, &x) in unit.iter().zip(&choice) {
                for (ti, &s) in t.iter_mut().zip(inst.option_times(o, x)) {
                    *ti += s;
                }
                m = m.saturating_add(inst.option_memory(o, x));
                for &e in &inst.in_edges[o] {
                    let edge = &inst.problem.edges[e];
                    let u = edge.from;
                    if assign[u] == usize::MAX {
                        continue; // a member of this unit
                    }
                    let lv = in_layout(inst, o, x, edge.operand);
                    let c = reshard(
                        inst,
                        inst.place_of(u, assign[u]),
                        out_layout(inst, u, assign[u], edge.tensor),
                        place,
                        lv,
                        edge.bytes,
                    );
                    comm = comm.max(comm_time(inst, &c));
                    let key = (u, edge.tensor, place, lv);
                    if !c.is_empty() && !received.contains(&key) && !gets.contains(&key) {
                        gets.push(key);
                        m = m.saturating_add(kept(inst, place, lv, edge.bytes));
                    }
                }
            }
            let over: u64 = devices
                .iter()
                .map(|&k| memory[k].saturating_add(m).saturating_sub(inst.capacity[k]))
                .fold(0u64, u64::saturating_add);
            let score = if over > 0 {
                // Only when nothing fits: the least overflow, for the search to repair.
                f64::MAX / 2.0 + over as f64
            } else if roomy {
                devices
                    .iter()
                    .map(|&k| memory[k].saturating_add(m) as f64 / inst.capacity[k].max(1) as f64)
                    .fold(0.0, f64::max)
            } else {
                devices
                    .iter()
                    .zip(&t)
                    .map(|(&k, &ti)| load[k] + ti)
                    .fold(0.0, f64::max)
                    + comm
            };
            if best.as_ref().is_none_or(|b| score < b.0) {
                best = Some((score, choice, m, gets));
            }
        }
        let Some((_, choice, m, gets)) = best else {
            return Err(ProblemError::Infeasible(format!(
                "split: `{}` has no option",
                inst.op_name(unit[0])
            )));
        };
        let place = inst.place_of(unit[0], choice[0]);
        for &k in &inst.place_devices[place] {
            memory[k] = memory[k].saturating_add(m);
        }
        received.extend(gets);
        for (&o, &x) in unit.iter().zip(&choice) {
            assign[o] = x;
            for (&k, &s) in inst.place_devices[place]
                .iter()
                .zip(inst.option_times(o, x))
            {
                load[k] += s;
            }
        }
    }
    Ok(Solution::in_problem_order(inst, assign))
}

/// The only consumer op of `o` (every out-edge goes to it), with the edge's tensor and
/// operand, when it is a unit of its own.
fn only_consumer(inst: &Instance, o: usize) -> Option<(usize, u32, u32)> {
    let first = &inst.problem.edges[*inst.out_edges[o].first()?];
    let same = inst.out_edges[o]
        .iter()
        .all(|&e| inst.problem.edges[e].to == first.to);
    (same && inst.group_of[first.to].is_none()).then_some((first.to, first.tensor, first.operand))
}

/// A chained move from op `o` on split option `x`: its consumers in turn onto the same group,
/// each with an alternative that reads the layout it is given as it is. Each step is
/// `(op, option)`.
fn chain(inst: &Instance, o: usize, x: usize) -> Vec<(usize, usize)> {
    let mut steps = Vec::new();
    let (mut cur, mut cx) = (o, x);
    while steps.len() < CHAIN {
        let Some((v, tensor, operand)) = only_consumer(inst, cur) else {
            break;
        };
        let layout = out_layout(inst, cur, cx, tensor);
        let group = inst.alts[cur][cx - inst.d].group;
        let fits = |a: &crate::problem::Alt| {
            let need = a.inputs.get(operand as usize).copied();
            a.allowed
                && a.group == group
                && (need == Some(layout)
                    || (layout == Layout::Replicated && matches!(need, Some(Layout::Split(_)))))
        };
        let Some(a) = inst.alts[v]
            .iter()
            .enumerate()
            .filter(|(_, a)| fits(a))
            .min_by(|(_, a), (_, b)| a.duration().total_cmp(&b.duration()))
            .map(|(a, _)| a)
        else {
            break;
        };
        steps.push((v, inst.d + a));
        (cur, cx) = (v, inst.d + a);
    }
    steps
}

/// A plan's rank in the search: bytes over capacity, then the objective, then a tie-break
/// (throughput: every resource's busy time summed; latency: the period).
type Key = (u64, (f64, f64));

fn wins(a: Key, b: Key) -> bool {
    // Sums kept by moves drift by round-off: a gain must beat it.
    let less = |x: f64, y: f64| x < y - 1e-12 * y.abs();
    let same = |x: f64, y: f64| !less(x, y) && !less(y, x);
    a.0 < b.0 || (a.0 == b.0 && (less(a.1.0, b.1.0) || (same(a.1.0, b.1.0) && less(a.1.1, b.1.1))))
}

/// The key of the tracker's assignment.
fn key_of(t: &Tracker<'_>, order: &[usize], objective: Objective) -> Key {
    let over = t.overflow();
    match objective {
        Objective::Throughput => (over, (t.period(), t.total_busy())),
        Objective::Latency => (
            over,
            (schedule_latency(t.inst(), &t.assign, order), t.period()),
        ),
    }
}

/// Whether a plan that fits memory breaks no other rule (a route must exist); checked when a
/// move is kept.
fn valid(inst: &Instance, t: &Tracker<'_>, key: Key) -> bool {
    key.0 > 0 || violation(inst, &t.assign).is_none()
}

/// The search's budget of moves for `inst` ([`EVAL_WORK`] over a move's cost), shared by its
/// starts.
pub fn budget(inst: &Instance, objective: Objective) -> usize {
    // The latency's list schedule visits every op and edge; the throughput's moves only the
    // op's own edges.
    let per_eval = match objective {
        Objective::Latency => (inst.n + inst.problem.edges.len() + 1) as f64,
        Objective::Throughput => 64.0,
    };
    (EVAL_WORK / per_eval).max(50.0) as usize
}

/// Local search over options from `start` (see the module doc), spending at most `budget`
/// moves (what it spends is taken off).
pub fn improve(
    inst: &Instance,
    start: Solution,
    opts: &SolveOptions,
    budget: &mut usize,
) -> Solution {
    let order = start.order;
    let mut t = Tracker::new(inst, start.assign);
    let mut cur = key_of(&t, &order, opts.objective);
    if !valid(inst, &t, cur) {
        return Solution {
            assign: t.assign,
            order,
        };
    }
    // Units with splits; every unit while the start is over memory.
    let movable: Vec<Vec<usize>> = units(inst)
        .into_iter()
        .filter(|u| cur.0 > 0 || u.iter().any(|&o| !inst.alts[o].is_empty()))
        .collect();
    'passes: loop {
        let mut improved = false;
        for unit in &movable {
            for choice in unit_options(inst, unit) {
                if unit.iter().zip(&choice).all(|(&o, &x)| t.assign[o] == x) {
                    continue;
                }
                if *budget == 0 {
                    break 'passes;
                }
                *budget -= 1;
                let saved: Vec<usize> = unit.iter().map(|&o| t.assign[o]).collect();
                for (&o, &x) in unit.iter().zip(&choice) {
                    t.set(o, x);
                }
                let k = key_of(&t, &order, opts.objective);
                let mut best = wins(k, cur).then_some((k, 0));
                // Chained: the only consumers follow onto the group.
                let steps = match unit[..] {
                    [o] if choice[0] >= inst.d => chain(inst, o, choice[0]),
                    _ => Vec::new(),
                };
                let before: Vec<usize> = steps.iter().map(|&(v, _)| t.assign[v]).collect();
                for (i, &(v, x)) in steps.iter().enumerate() {
                    if *budget == 0 {
                        break;
                    }
                    *budget -= 1;
                    t.set(v, x);
                    let k = key_of(&t, &order, opts.objective);
                    if wins(k, best.map_or(cur, |b| b.0)) {
                        best = Some((k, i + 1));
                    }
                }
                let len = best.map_or(0, |b| b.1);
                for (&(v, _), &x) in steps.iter().zip(&before).skip(len).rev() {
                    t.set(v, x);
                }
                match best {
                    Some((k, _)) if valid(inst, &t, k) => {
                        cur = k;
                        improved = true;
                    }
                    _ => {
                        for (&(v, _), &x) in steps.iter().zip(&before).take(len).rev() {
                            t.set(v, x);
                        }
                        for (&o, &x) in unit.iter().zip(&saved) {
                            t.set(o, x);
                        }
                    }
                }
            }
        }
        if !improved && cur.0 > 0 {
            // Still over memory and stuck: move a unit and a neighbour together.
            improved = pair_pass(inst, &mut t, &order, opts.objective, &mut cur, budget);
        }
        if !improved {
            break;
        }
    }
    Solution {
        assign: t.assign,
        order,
    }
}

/// One pass of pair moves (a unit and a unit it feeds, every option of each), keeping the
/// first that improves; whether one did.
fn pair_pass(
    inst: &Instance,
    t: &mut Tracker<'_>,
    order: &[usize],
    objective: Objective,
    cur: &mut Key,
    budget: &mut usize,
) -> bool {
    let us = units(inst);
    let mut unit_of = vec![0usize; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let options: Vec<Vec<Vec<usize>>> = us.iter().map(|u| unit_options(inst, u)).collect();
    for (i, u) in us.iter().enumerate() {
        let mut next: Vec<usize> = u
            .iter()
            .flat_map(|&o| {
                inst.out_edges[o]
                    .iter()
                    .map(|&e| unit_of[inst.problem.edges[e].to])
            })
            .filter(|&j| j != i)
            .collect();
        next.sort_unstable();
        next.dedup();
        for j in next {
            let both: Vec<usize> = u.iter().chain(&us[j]).copied().collect();
            let saved: Vec<usize> = both.iter().map(|&o| t.assign[o]).collect();
            for a in &options[i] {
                for b in &options[j] {
                    if *budget == 0 {
                        return false;
                    }
                    *budget -= 1;
                    for (&o, &x) in both.iter().zip(a.iter().chain(b)) {
                        t.set(o, x);
                    }
                    let k = key_of(t, order, objective);
                    if wins(k, *cur) && valid(inst, t, k) {
                        *cur = k;
                        return true;
                    }
                    for (&o, &x) in both.iter().zip(&saved).rev() {
                        t.set(o, x);
                    }
                }
            }
        }
    }
    false
}
