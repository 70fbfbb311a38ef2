//! Lower bounds on the best objective any plan can reach, so every plan reports how far from
//! optimal it can at most be (its gap).
//!
//! Components (the bound is their maximum; each is valid on its own):
//! - `work`: every op needs at least its fastest time somewhere, and the usable devices share
//!   that work: the sum of fastest times over the number of devices that can run anything
//!   (the period is at least the average device load, and so is the latency).
//! - `largest-op`: the fastest time of the slowest colocation unit (an op or a group): it runs
//!   whole on one device.
//! - `lp` (problems up to [`LP_MAX_VARS`] unit-device pairs): the linear-programming
//!   relaxation of assigning units to devices, with each device's load at most `T` and its
//!   memory within capacity, minimizing `T`. It joins work, support and memory: when the fast
//!   devices cannot hold everything, part of the work must run on slow ones. It also charges
//!   the transfers to and from ops that can only run on one device `p` (graph inputs and
//!   outputs on the host): unless the other end runs on `p` (a fraction `x`), the tensor
//!   occupies one of `p`'s link directions for at least its fastest transfer, so `p`'s
//!   incoming (and outgoing) transfers fractionally summed stay within `T` times its links
//!   (for the period only: the latency's list schedule does not serialize a link's
//!   transfers, so they would not bound it). Solved with
//!   good_lp and the pure-Rust microlp simplex; the result is shrunk by a relative 1e-9 so
//!   round-off never lifts it above the optimum.
//! - `lp-branch`: the `lp` relaxation branched once ([`branch_bound`]): the unit it spreads
//!   most over its options is held to each option in turn, and the least of those relaxations
//!   is a bound, since every plan puts that unit on exactly one option (at most
//!   [`BRANCH_MAX_SOLVES`] relaxations solved, the other options bounded by their time
//!   alone; no branching on a unit of over [`BRANCH_MAX_OPTIONS`] options). It removes the
//!   relaxation's fraction of a large op in memory left over on fast devices (GPT-2 small's
//!   language-model head on `mcm-4x4`: 1.293 ms by `lp`, 1.489 ms branched).
//! - `io`: transfers no plan avoids. An edge whose ends have no device in common moves its
//!   tensor at least as fast as the best pair of allowed devices allows; all such transfers
//!   into ops pinned to one device share that device's incoming link directions, so the
//!   period is at least their total over the number of its links (inputs and outputs pinned
//!   to the host make this the host link's load). For the latency, whose schedule lets
//!   transfers share a link, only the longest single unavoidable transfer counts.
//! - `critical-path` (latency only): the longest chain of ops at their fastest times, with
//!   each edge's unavoidable transfer time.
//! - `recurrence` (kept apart, [`LowerBound::recurrence`]: a bound on the period of a
//!   stream whose runs wait for each other's state, which the simulator's period obeys and
//!   the placement model's busiest resource does not; a problem with carried state, a
//!   training step's): a stream
//!   of runs is a cyclic graph, each state's next readers waiting for its writer, so the
//!   period is at least the longest chain from a reader of a state to the writer of its
//!   next value (ops at their fastest, transfers unavoidable), whatever the devices: the
//!   iteration bound of a cyclic dataflow graph (Reiter, "Scheduling Parallel
//!   Computations", JACM 1968), modulo scheduling's recurrence-constrained minimum
//!   interval (Rau, "Iterative Modulo Scheduling", MICRO 1994). For a training step the
//!   chain from the first layer's weights through the forward, the loss and the backward to
//!   that layer's update is nearly the whole step: data parallelism shortens each op on it,
//!   but steps do not overlap.
//!
//! Memory: when the ops' own memory exceeds the capacity of all the devices together, no plan
//! exists; that is reported as an error, not as a bound.
//!
//! **Split alternatives** ([`crate::split`]) enlarge every choice, and each component stays
//! valid over the enlarged choice: an op's work is its least total device time over its
//! options (whole, or the sum of a split's shares), its duration its least over its options
//! (a split's slowest share), its memory its least total; a unit on a device group loads
//! each group device with at least its ops' fastest shares there; the LP gains a variable per
//! unit and device group whose every op has an alternative there, which loads (and fills)
//! each group device with those least shares; a transfer to or from a pinned op may be
//! split over a group's devices, so its least link time is the least over those options; an
//! edge whose ends may be split is not counted as an unavoidable transfer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::eval::Objective;
use crate::problem::{Instance, ProblemError};
use crate::strategy::{unit_heads, units};

/// The largest number of (unit, device) variables the LP bound is computed for.
pub const LP_MAX_VARS: usize = 20_000;

/// A lower bound and what it is made of.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LowerBound {
    /// The bound: the largest component.
    pub value: f64,
    /// Each component's value, by name.
    pub components: BTreeMap<String, f64>,
    /// For a problem with carried state (a training step), the `recurrence` bound on the
    /// period of a stream of runs, which the simulator's period obeys and the placement
    /// model's (the busiest resource, each run on its own) does not: see [`LowerBound::step`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recurrence: Option<f64>,
}

impl LowerBound {
    /// The bound on a step of a stream of runs whose state carries over (the simulator's
    /// period): the larger of the bound and the recurrence.
    pub fn step(&self) -> f64 {
        self.value.max(self.recurrence.unwrap_or(0.0))
    }

    /// The component that gives the bound.
    pub fn binding(&self) -> &str {
        self.components
            .iter()
            .filter(|&(_, &v)| v == self.value)
            .map(|(k, _)| k.as_str())
            .next()
            .unwrap_or("")
    }
}

/// The lower bound of `inst` for `objective`; an error when memory makes it infeasible.
pub fn lower_bound(inst: &Instance, objective: Objective) -> Result<LowerBound, ProblemError> {
    let mut components = BTreeMap::new();
    let total_memory: u128 = (0..inst.n).map(|o| least_memory(inst, o)).sum();
    let total_capacity: u128 = inst.capacity.iter().map(|&c| u128::from(c)).sum();
    if total_memory > total_capacity {
        return Err(ProblemError::Infeasible(format!(
            "the ops need {total_memory} bytes, {} more than all devices hold together \
             ({total_capacity} bytes)",
            total_memory - total_capacity
        )));
    }
    // Ops with one allowed device (pinned, or supported nowhere else) and the tensors they
    // must receive from ops pinned elsewhere.
    let only = only_device(inst);
    let mut forced = vec![0u128; inst.d];
    for (o, k) in only.iter().enumerate() {
        if let Some(k) = *k {
            forced[k] += u128::from(inst.memory[o]);
        }
    }
    let mut received: std::collections::BTreeSet<(usize, u32, usize)> = Default::default();
    for edge in &inst.problem.edges {
        if let (Some(a), Some(b)) = (only[edge.from], only[edge.to])
            && a != b
            && received.insert((edge.from, edge.tensor, b))
        {
            forced[b] += u128::from(edge.bytes);
        }
    }
    for (k, &m) in forced.iter().enumerate() {
        let cap = u128::from(inst.capacity[k]);
        if m > cap {
            return Err(ProblemError::Infeasible(format!(
                "the ops that can only run on {} need {m} bytes there, {} more than its {cap} \
                 bytes",
                inst.device_name(k),
                m - cap
            )));
        }
    }
    let mut usable = vec![false; inst.d];
    for o in 0..inst.n {
        for (k, u) in usable.iter_mut().enumerate() {
            *u |= inst.allowed(o, k);
        }
        for a in inst.alts[o].iter().filter(|a| a.allowed) {
            for &k in &inst.place_devices[inst.d + a.group] {
                usable[k] = true;
            }
        }
    }
    let usable = usable.iter().filter(|&&u| u).count().max(1);
    let work: f64 = (0..inst.n).map(|o| least_work(inst, o)).sum();
    components.insert("work".to_string(), work / usable as f64);
    let mut n_units = 0usize;
    let largest = unit_heads(inst)
        .map(|head| {
            n_units += 1;
            let members = match inst.group_of[head] {
                Some(g) => &inst.groups[g][..],
                None => std::slice::from_ref(&head),
            };
            let whole = (0..inst.d)
                .filter(|&k| inst.allowed(head, k))
                .map(|k| unit_time(inst, members, k))
                .fold(f64::INFINITY, f64::min);
            let split = (0..inst.problem.groups.len())
                .filter_map(|g| group_shares(inst, members, g))
                .map(|shares| busiest(&shares))
                .fold(f64::INFINITY, f64::min);
            let split = match members {
                [o] => split.max(least_split_duration(inst, *o)),
                _ => split,
            };
            whole.min(split)
        })
        .fold(0.0, f64::max);
    components.insert("largest-op".to_string(), largest);
    if n_units.saturating_mul(inst.d + inst.problem.groups.len()) <= LP_MAX_VARS {
        let us = units(inst);
        if let Some(lp) = lp_bound(inst, &us, objective, None)? {
            components.insert("lp".to_string(), lp.value);
            if let Some((unit, main)) = lp.branch {
                let branched = branch_bound(inst, &us, objective, unit, main, lp.value)?;
                components.insert("lp-branch".to_string(), branched);
            }
        }
    }
    let unavoidable = unavoidable_transfers(inst);
    let mut into_pinned: BTreeMap<usize, f64> = BTreeMap::new();
    let mut counted: std::collections::BTreeSet<(usize, u32, usize)> = Default::default();
    for (e, edge) in inst.problem.edges.iter().enumerate() {
        let allowed: Vec<usize> = (0..inst.d).filter(|&k| inst.allowed(edge.to, k)).collect();
        if unavoidable[e] > 0.0
            && let [p] = allowed[..]
            && counted.insert((edge.from, edge.tensor, p))
        {
            *into_pinned.entry(p).or_insert(0.0) += unavoidable[e];
        }
    }
    let mut io: f64 = unavoidable.iter().copied().fold(0.0, f64::max);
    if objective == Objective::Throughput {
        for (&p, &total) in &into_pinned {
            io = io.max(total / links_at(inst, p).max(1) as f64);
        }
    }
    components.insert("io".to_string(), io);
    if objective == Objective::Latency {
        let mut path = vec![0.0f64; inst.n];
        let mut longest: f64 = 0.0;
        for o in 0..inst.n {
            let start = inst.in_edges[o]
                .iter()
                .map(|&e| path[inst.problem.edges[e].from] + unavoidable[e])
                .fold(0.0, f64::max);
            path[o] = start + least_duration(inst, o);
            longest = longest.max(path[o]);
        }
        components.insert("critical-path".to_string(), longest);
    }
    let recurrence = (!inst.problem.carried.is_empty()).then(|| recurrence(inst, &unavoidable));
    let value = components.values().copied().fold(0.0, f64::max);
    Ok(LowerBound {
        value,
        components,
        recurrence,
    })
}

/// The most (op, state) pairs [`recurrence`] visits: past it, the states not yet visited
/// are left out (the bound stays valid, only less tight).
const RECURRENCE_MAX_VISITS: usize = 200_000_000;

/// The longest chain, over the carried states, from a reader of a state to the writer of
/// its next value: each op at its least duration, each edge at its unavoidable transfer.
fn recurrence(inst: &Instance, unavoidable: &[f64]) -> f64 {
    let n = inst.n;
    let duration: Vec<f64> = (0..n).map(|o| least_duration(inst, o)).collect();
    // The latest end of a chain from a reader to each op (`-inf`: no chain reaches it).
    let mut end = vec![f64::NEG_INFINITY; n];
    let mut reader = vec![false; n];
    let mut longest: f64 = 0.0;
    let mut visits = 0usize;
    for c in &inst.problem.carried {
        let Some(start) = c.readers.iter().copied().filter(|&r| r <= c.writer).min() else {
            continue;
        };
        visits = visits.saturating_add(c.writer - start + 1);
        if visits > RECURRENCE_MAX_VISITS {
            break;
        }
        for &r in &c.readers {
            reader[r] = true;
        }
        for o in start..=c.writer {
            let mut from = if reader[o] { 0.0 } else { f64::NEG_INFINITY };
            for &e in &inst.in_edges[o] {
                let p = inst.problem.edges[e].from;
                if p >= start {
                    from = from.max(end[p] + unavoidable[e]);
                }
            }
            end[o] = from + duration[o];
        }
        if end[c.writer].is_finite() {
            longest = longest.max(end[c.writer]);
        }
        for &r in &c.readers {
            reader[r] = false;
        }
    }
    longest
}

/// The number of links at device `k` (each gives it one incoming and one outgoing direction).
fn links_at(inst: &Instance, k: usize) -> usize {
    let name = inst.device_name(k);
    inst.problem
        .links
        .iter()
        .filter(|l| l.a == name || l.b == name)
        .count()
}

/// For each op, its device when only one may run it (pinned, or supported nowhere else).
fn only_device(inst: &Instance) -> Vec<Option<usize>> {
    (0..inst.n)
        .map(|o| {
            if inst.alts[o].iter().any(|a| a.allowed) {
                return None;
            }
            let mut it = (0..inst.d).filter(|&k| inst.allowed(o, k));
            match (it.next(), it.next()) {
                (Some(k), None) => Some(k),
                _ => None,
            }
        })
        .collect()
}

/// For each edge, the least time its transfer takes in any plan: 0 when its ends can share a
/// device, else the fastest transfer between devices they may run on.
fn unavoidable_transfers(inst: &Instance) -> Vec<f64> {
    let mut to_allowed = vec![false; inst.d];
    inst.problem
        .edges
        .iter()
        .map(|edge| {
            let splits = |o: usize| inst.alts[o].iter().any(|a| a.allowed);
            if splits(edge.from) || splits(edge.to) {
                return 0.0;
            }
            for (k, t) in to_allowed.iter_mut().enumerate() {
                *t = inst.allowed(edge.to, k);
            }
            let from: Vec<usize> = (0..inst.d)
                .filter(|&k| inst.allowed(edge.from, k))
                .collect();
            if from.iter().any(|&k| to_allowed[k]) {
                return 0.0;
            }
            let mut best = f64::INFINITY;
            for &a in &from {
                for b in (0..inst.d).filter(|&b| to_allowed[b]) {
                    best = best.min(inst.transfer(a, b, edge.bytes));
                }
            }
            if best.is_finite() { best } else { 0.0 }
        })
        .collect()
}

/// Op `o`'s least total device time over its options.
fn least_work(inst: &Instance, o: usize) -> f64 {
    inst.alts[o]
        .iter()
        .filter(|a| a.allowed)
        .map(|a| a.time.iter().sum::<f64>())
        .fold(inst.min_time(o), f64::min)
}

/// Op `o`'s least duration over its splits (infinite without any).
fn least_split_duration(inst: &Instance, o: usize) -> f64 {
    inst.alts[o]
        .iter()
        .filter(|a| a.allowed)
        .map(|a| a.duration())
        .fold(f64::INFINITY, f64::min)
}

/// Op `o`'s least duration over its options.
fn least_duration(inst: &Instance, o: usize) -> f64 {
    inst.min_time(o).min(least_split_duration(inst, o))
}

/// Op `o`'s least total memory over its options.
fn least_memory(inst: &Instance, o: usize) -> u128 {
    let whole = if inst.runs_whole(o) {
        u128::from(inst.memory[o])
    } else {
        u128::MAX
    };
    inst.alts[o]
        .iter()
        .filter(|a| a.allowed)
        .map(|a| u128::from(a.memory) * a.time.len() as u128)
        .fold(whole, u128::min)
}

/// For a unit on device group `g` (every member has an allowed alternative there): per
/// group device, the least seconds and bytes its members' shares put on it. `None` when
/// some member has no alternative on `g`.
fn group_shares(inst: &Instance, unit: &[usize], g: usize) -> Option<Vec<(f64, u64)>> {
    let k = inst.place_devices[inst.d + g].len();
    let mut out = vec![(0.0, 0u64); k];
    for &o in unit {
        let mut alts = inst.alts[o].iter().filter(|a| a.allowed && a.group == g);
        let first = alts.next()?;
        let mut least: Vec<(f64, u64)> = first.time.iter().map(|&t| (t, first.memory)).collect();
        for a in alts {
            for (l, &t) in least.iter_mut().zip(&a.time) {
                l.0 = l.0.min(t);
                l.1 = l.1.min(a.memory);
            }
        }
        for (x, l) in out.iter_mut().zip(least) {
            x.0 += l.0;
            x.1 = x.1.saturating_add(l.1);
        }
    }
    Some(out)
}

/// Unit `u`'s seconds whole on device `k`.
fn unit_time(inst: &Instance, u: &[usize], k: usize) -> f64 {
    u.iter().map(|&o| inst.t(o, k)).sum()
}

/// The seconds of the busiest device among a unit's shares on a group ([`group_shares`]).
fn busiest(shares: &[(f64, u64)]) -> f64 {
    shares.iter().map(|s| s.0).fold(0.0, f64::max)
}

/// One option of a unit: whole on a device, or split over a device group.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Choice {
    Device(usize),
    Group(usize),
}

/// A solved relaxation.
struct LpSolved {
    /// Its optimum, shrunk for round-off.
    value: f64,
    /// Without a fix, the unit to branch on when one is spread over its options (the one
    /// whose share off its main option, times its longest per-device time there, is
    /// largest), and its main option (the one with the largest share).
    branch: Option<(usize, Choice)>,
}

/// Most options a unit may have for [`branch_bound`] to branch on it.
pub const BRANCH_MAX_OPTIONS: usize = 32;

/// Most relaxations [`branch_bound`] solves (a deterministic work limit: on GPT-2 small's
/// `mcm-4x4` problem one takes about 0.1 s here for the period, 0.7 s for the latency).
pub const BRANCH_MAX_SOLVES: usize = 4;

/// The LP relaxation branched once (the first level of branch and bound, Land and Doig
/// 1960): every plan puts unit `unit` on exactly one of its options, so the least over its
/// options of the relaxation with the unit fixed there is a lower bound too, and often a
/// tighter one than `base` (the relaxation without the fix): it cannot put a fraction of a
/// large op on devices whose memory is left over, or spread one op over several devices to
/// halve its time. The unit's `main` option (its largest share in the relaxation) goes
/// first: when holding it there costs nothing, the least is `base` and no other option need
/// be tried. The others are taken in the order of their time alone (the unit's time on the
/// device, or on the busiest device of the group, that the option puts it on: a floor of
/// both objectives for every plan that takes it); once that reaches the best value found,
/// no later option can lower it. An
/// option whose relaxation the solver does not solve counts as `base` (it may be infeasible,
/// in which case no plan takes it, or round-off: `base` is right either way). After
/// [`BRANCH_MAX_SOLVES`] relaxations, each remaining option counts as the larger of `base`
/// and its time alone, both bounds for the plans that take it. A unit with more than
/// [`BRANCH_MAX_OPTIONS`] options is not branched on: `base` is returned.
fn branch_bound(
    inst: &Instance,
    us: &[Vec<usize>],
    objective: Objective,
    unit: usize,
    main: Choice,
    base: f64,
) -> Result<f64, ProblemError> {
    let u = &us[unit];
    // Each option and its time alone: the unit's time on the option's busiest device.
    let mut options: Vec<(f64, Choice)> = (0..inst.d)
        .filter(|&k| inst.allowed(u[0], k))
        .map(|k| (unit_time(inst, u, k), Choice::Device(k)))
        .chain(
            (0..inst.problem.groups.len())
                .filter_map(|g| group_shares(inst, u, g).map(|s| (busiest(&s), Choice::Group(g)))),
        )
        .collect();
    if options.len() > BRANCH_MAX_OPTIONS {
        return Ok(base);
    }
    // The main option first, then by the time alone (a stable order: ties keep devices
    // before groups, each by index).
    options.sort_by(|a, b| (a.1 != main).cmp(&(b.1 != main)).then(a.0.total_cmp(&b.0)));
    // The options past the solve limit cap the result at their least `max(base, alone)`:
    // when that is `base`, no relaxation need be solved.
    let mut best = options
        .iter()
        .skip(BRANCH_MAX_SOLVES)
        .map(|&(alone, _)| alone.max(base))
        .fold(f64::INFINITY, f64::min);
    let solve = |(alone, choice): (f64, Choice)| {
        let value = match lp_bound(inst, us, objective, Some((unit, choice))) {
            Ok(Some(s)) => s.value,
            Ok(None) | Err(_) => base,
        };
        value.max(alone)
    };
    // The main option alone first: when it costs nothing, no other need be solved.
    let (main_alone, _) = options[0];
    if main_alone < best {
        best = best.min(solve(options[0]));
    }
    if best <= base * (1.0 + 1e-9) {
        return Ok(base);
    }
    // The others up to the limit, each on a thread of its own; an option that alone reaches
    // `best` cannot lower it (and the times alone only grow from here). The least is the
    // same whatever order the threads finish in.
    let rest: Vec<(f64, Choice)> = options
        .iter()
        .copied()
        .take(BRANCH_MAX_SOLVES)
        .skip(1)
        .take_while(|&(alone, _)| alone < best)
        .collect();
    let solved: Vec<f64> = std::thread::scope(|scope| {
        // A thread the system cannot start solves in this one instead.
        let handles: Vec<_> = rest
            .into_iter()
            .map(|option| {
                std::thread::Builder::new()
                    .spawn_scoped(scope, move || solve(option))
                    .map_err(|_| option)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or(base),
                Err(option) => solve(option),
            })
            .collect()
    });
    best = solved.into_iter().fold(best, f64::min);
    Ok(if best.is_finite() { best } else { base })
}

/// The LP relaxation's optimum, `None` when the solver fails (the other components stand);
/// an error when even the relaxation cannot fit the memory. With `fix`, one unit is held
/// to one of its options.
fn lp_bound(
    inst: &Instance,
    us: &[Vec<usize>],
    objective: Objective,
    fix: Option<(usize, Choice)>,
) -> Result<Option<LpSolved>, ProblemError> {
    use good_lp::{
        Expression, ProblemVariables, ResolutionError, Solution, SolverModel, constraint, microlp,
        variable,
    };
    // Seconds are scaled to microseconds and bytes to megabytes for a well-scaled model.
    let mut vars = ProblemVariables::new();
    let t = vars.add(variable().min(0.0));
    let mut x: Vec<Vec<(usize, good_lp::Variable)>> = Vec::with_capacity(us.len());
    // Per unit, its device groups: (the group's shares, variable).
    type Shares = Vec<(f64, u64)>;
    let mut xg: Vec<Vec<(usize, Shares, good_lp::Variable)>> = Vec::with_capacity(us.len());
    for u in us {
        let row = (0..inst.d)
            .filter(|&k| inst.allowed(u[0], k))
            .map(|k| (k, vars.add(variable().min(0.0).max(1.0))))
            .collect();
        x.push(row);
        let groups = (0..inst.problem.groups.len())
            .filter_map(|g| {
                group_shares(inst, u, g).map(|s| (g, s, vars.add(variable().min(0.0).max(1.0))))
            })
            .collect();
        xg.push(groups);
    }
    // Transfers to and from ops that can only run on one device `p` (inputs and outputs on the
    // host): each occupies one of `p`'s incoming (outgoing) link directions for at least its
    // fastest time, unless the other end runs on `p` too.
    let mut unit_of = vec![0usize; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let var = |o: usize, k: usize| {
        x[unit_of[o]]
            .iter()
            .find(|&&(kk, _)| kk == k)
            .map(|&(_, v)| v)
    };
    let only = only_device(inst);
    let fastest = |o: usize, p: usize, into: bool, bytes: u64| {
        let one = |k: usize, bytes: u64| {
            if into {
                inst.transfer(k, p, bytes)
            } else {
                inst.transfer(p, k, bytes)
            }
        };
        // Split over a group, the tensor moves in blocks between `p` and the group's other
        // devices (see `crate::split`), each at least a block's transfer.
        let split = inst.alts[o]
            .iter()
            .filter(|a| a.allowed)
            .map(|a| {
                let ds = &inst.place_devices[inst.d + a.group];
                let block = bytes.div_ceil(ds.len() as u64);
                ds.iter()
                    .filter(|&&k| k != p)
                    .map(|&k| one(k, block))
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min);
        (0..inst.d)
            .filter(|&k| k != p && inst.allowed(o, k))
            .map(|k| one(k, bytes))
            .fold(split, f64::min)
    };
    // (p, producer, tensor) -> (seconds, consumers) for tensors leaving p; and for tensors
    // arriving at p, (p, producer, tensor) -> seconds.
    let mut leaving: BTreeMap<(usize, usize, u32), (f64, Vec<usize>)> = BTreeMap::new();
    let mut arriving: BTreeMap<(usize, usize, u32), f64> = BTreeMap::new();
    for e in &inst.problem.edges {
        match (only[e.from], only[e.to]) {
            (Some(p), q) if q != Some(p) => {
                let c = fastest(e.to, p, false, e.bytes);
                let entry = leaving
                    .entry((p, e.from, e.tensor))
                    .or_insert((f64::INFINITY, Vec::new()));
                entry.0 = entry.0.min(c);
                entry.1.push(e.to);
            }
            (q, Some(p)) if q != Some(p) => {
                let c = fastest(e.from, p, true, e.bytes);
                let entry = arriving
                    .entry((p, e.from, e.tensor))
                    .or_insert(f64::INFINITY);
                *entry = entry.min(c);
            }
            _ => {}
        }
    }
    let y: Vec<good_lp::Variable> = leaving
        .iter()
        .map(|_| vars.add(variable().min(0.0).max(1.0)))
        .collect();
    let mut model = vars.minimise(t).using(microlp);
    let mut into_p: BTreeMap<usize, Expression> = BTreeMap::new();
    let mut out_of_p: BTreeMap<usize, Expression> = BTreeMap::new();
    for (&(p, u, _), &c) in &arriving {
        if !c.is_finite() {
            continue;
        }
        let term = match var(u, p) {
            Some(v) => c * 1e6 - c * 1e6 * v,
            None => Expression::from(c * 1e6),
        };
        *into_p.entry(p).or_insert_with(|| Expression::from(0.0)) += term;
    }
    for ((&(p, _, _), (c, consumers)), &yv) in leaving.iter().zip(&y) {
        if !c.is_finite() {
            continue;
        }
        for &v in consumers {
            model = match var(v, p) {
                Some(xv) => model.with(constraint!(yv + xv >= 1.0)),
                None => model.with(constraint!(yv >= 1.0)),
            };
        }
        *out_of_p.entry(p).or_insert_with(|| Expression::from(0.0)) += *c * 1e6 * yv;
    }
    // The latency's schedule does not serialize transfers on a link (module doc): the link
    // rows bound the period only.
    for (p, expr) in into_p.into_iter().chain(out_of_p) {
        let links = links_at(inst, p);
        if links > 0 && objective == Objective::Throughput {
            model = model.with(constraint!(expr - (links as f64) * t <= 0.0));
        }
    }
    let mut load: Vec<Expression> = vec![Expression::from(0.0); inst.d];
    let mut mem: Vec<Expression> = vec![Expression::from(0.0); inst.d];
    for ((u, row), groups) in us.iter().zip(&x).zip(&xg) {
        let mut sum = Expression::from(0.0);
        for &(k, v) in row {
            let time = unit_time(inst, u, k) * 1e6;
            let bytes: f64 = u.iter().map(|&o| inst.memory[o] as f64).sum::<f64>() / 1e6;
            load[k] += time * v;
            mem[k] += bytes * v;
            sum += v;
        }
        for (g, shares, v) in groups {
            for (&k, &(time, bytes)) in inst.place_devices[inst.d + g].iter().zip(shares) {
                load[k] += time * 1e6 * *v;
                mem[k] += bytes as f64 / 1e6 * *v;
            }
            sum += *v;
        }
        model = model.with(constraint!(sum == 1.0));
    }
    if let Some((unit, choice)) = fix {
        let held = match choice {
            Choice::Device(k) => x[unit].iter().find(|&&(kk, _)| kk == k).map(|&(_, v)| v),
            Choice::Group(g) => xg[unit]
                .iter()
                .find(|&&(gg, _, _)| gg == g)
                .map(|&(_, _, v)| v),
        };
        match held {
            Some(v) => model = model.with(constraint!(v >= 1.0)),
            None => return Ok(None),
        }
    }
    for (k, (l, m)) in load.into_iter().zip(mem).enumerate() {
        model = model.with(constraint!(l - t <= 0.0));
        model = model.with(constraint!(m <= inst.capacity[k] as f64 / 1e6));
    }
    // microlp is a third-party solver: an assertion inside it (it checks its numerics) must
    // not take the process down. The inputs are validated (finite, in the ranges of
    // `tessera_targets::limits`), so this is the last line of defence, not a code path; the
    // model is consumed by the call, so nothing half-updated is seen after an unwind.
    let solved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || model.solve()));
    match solved {
        Ok(Ok(s)) => {
            let v = s.value(t) / 1e6 * (1.0 - 1e-9);
            // A value the solver cannot have meant (round-off gone wrong) is no bound.
            if !(v.is_finite() && v >= 0.0) {
                return Ok(None);
            }
            // The unit most spread over its options, weighted by the time at stake (only
            // the unfixed relaxation branches).
            let mut branch: Option<(usize, Choice)> = None;
            let mut heaviest = 0.0f64;
            let rows = if fix.is_none() { &x[..] } else { &[] };
            for (i, (row, groups)) in rows.iter().zip(&xg).enumerate() {
                let (mut most, mut longest) = (0.0f64, 0.0f64);
                let mut main = None;
                for &(k, var) in row {
                    let share = s.value(var);
                    if main.is_none() || share > most {
                        (most, main) = (share, Some(Choice::Device(k)));
                    }
                    if share > 1e-9 {
                        longest = longest.max(unit_time(inst, &us[i], k));
                    }
                }
                for (g, shares, var) in groups {
                    let share = s.value(*var);
                    if main.is_none() || share > most {
                        (most, main) = (share, Some(Choice::Group(*g)));
                    }
                    if share > 1e-9 {
                        longest = longest.max(busiest(shares));
                    }
                }
                let weight = (1.0 - most).max(0.0) * longest;
                if let Some(main) = main
                    && weight > v * 1e-6
                    && (branch.is_none() || weight > heaviest)
                {
                    (branch, heaviest) = (Some((i, main)), weight);
                }
            }
            Ok(Some(LpSolved { value: v, branch }))
        }
        // The relaxation is infeasible only through memory (every other row can be met by a
        // large enough `T`); say which devices overflow, exactly. When the exact check finds
        // room after all, the solver's answer was round-off and the component is skipped.
        // With splits there is no exact check to tell real infeasibility from the solver's
        // round-off: the component is skipped, and the strategies say whether a plan fits.
        Ok(Err(ResolutionError::Infeasible)) if inst.has_splits() => Ok(None),
        Ok(Err(ResolutionError::Infeasible)) => match memory_cut(inst, us) {
            Some(why) => Err(ProblemError::Infeasible(why)),
            None => Ok(None),
        },
        Ok(Err(_)) | Err(_) => Ok(None),
    }
}

/// Whether the units' own memory can be spread over their allowed devices, even split
/// fractionally (the LP relaxation's memory rows), decided exactly as a maximum flow (source
/// to unit: its bytes; unit to each allowed device: unbounded; device to sink: its
/// capacity). When it cannot, the minimum cut names a set of devices whose units need more
/// than they hold together; that is the message.
fn memory_cut(inst: &Instance, us: &[Vec<usize>]) -> Option<String> {
    let nu = us.len();
    let (src, sink) = (nu + inst.d, nu + inst.d + 1);
    let mut g = Flow::new(nu + inst.d + 2);
    let mut need = vec![0u128; nu];
    for (i, u) in us.iter().enumerate() {
        need[i] = u.iter().map(|&o| u128::from(inst.memory[o])).sum();
        g.edge(src, i, need[i]);
        for k in (0..inst.d).filter(|&k| inst.allowed(u[0], k)) {
            g.edge(i, nu + k, u128::MAX / 4);
        }
    }
    for k in 0..inst.d {
        g.edge(nu + k, sink, u128::from(inst.capacity[k]));
    }
    let total: u128 = need.iter().sum();
    if g.max_flow(src, sink) >= total {
        return None;
    }
    let side = g.reachable(src);
    let devices: Vec<usize> = (0..inst.d).filter(|&k| side[nu + k]).collect();
    let held: u128 = devices.iter().map(|&k| u128::from(inst.capacity[k])).sum();
    let needed: u128 = (0..nu).filter(|&i| side[i]).map(|i| need[i]).sum();
    let names: Vec<&str> = devices.iter().map(|&k| inst.device_name(k)).collect();
    Some(format!(
        "the ops that can only run on {} need {needed} bytes of their own there, {} more than \
         those devices hold together ({held} bytes), however they are split",
        names.join(", "),
        needed.saturating_sub(held)
    ))
}

/// A flow network for [`memory_cut`] (Dinic's algorithm, with no recursion).
struct Flow {
    adj: Vec<Vec<usize>>,
    to: Vec<usize>,
    cap: Vec<u128>,
}

impl Flow {
    fn new(n: usize) -> Flow {
        Flow {
            adj: vec![Vec::new(); n],
            to: Vec::new(),
            cap: Vec::new(),
        }
    }

    /// An edge and its residual twin (`e ^ 1`).
    fn edge(&mut self, a: usize, b: usize, cap: u128) {
        self.adj[a].push(self.to.len());
        self.to.push(b);
        self.cap.push(cap);
        self.adj[b].push(self.to.len());
        self.to.push(a);
        self.cap.push(0);
    }

    fn levels(&self, s: usize) -> Vec<usize> {
        let mut level = vec![usize::MAX; self.adj.len()];
        level[s] = 0;
        let mut queue = std::collections::VecDeque::from([s]);
        while let Some(v) = queue.pop_front() {
            for &e in &self.adj[v] {
                let w = self.to[e];
                if self.cap[e] > 0 && level[w] == usize::MAX {
                    level[w] = level[v] + 1;
                    queue.push_back(w);
                }
            }
        }
        level
    }

    fn reachable(&self, s: usize) -> Vec<bool> {
        self.levels(s).iter().map(|&l| l != usize::MAX).collect()
    }

    fn max_flow(&mut self, s: usize, t: usize) -> u128 {
        let mut flow = 0u128;
        loop {
            let level = self.levels(s);
            if level[t] == usize::MAX {
                return flow;
            }
            let mut next = vec![0usize; self.adj.len()];
            // Blocking flow: walk the level graph with an explicit path of edges.
            let mut path: Vec<usize> = Vec::new();
            loop {
                let v = path.last().map_or(s, |&e| self.to[e]);
                if v == t {
                    let push = path.iter().map(|&e| self.cap[e]).min().unwrap_or(0);
                    for &e in &path {
                        self.cap[e] -= push;
                        self.cap[e ^ 1] += push;
                    }
                    flow += push;
                    path.clear();
                    continue;
                }
                let mut advanced = false;
                while next[v] < self.adj[v].len() {
                    let e = self.adj[v][next[v]];
                    let w = self.to[e];
                    if self.cap[e] > 0 && level[w] == level[v] + 1 {
                        path.push(e);
                        advanced = true;
                        break;
                    }
                    next[v] += 1;
                }
                if !advanced {
                    // A dead end: never try it again in this phase.
                    match path.pop() {
                        Some(e) => next[self.to[e ^ 1]] += 1,
                        None => break,
                    }
                }
            }
        }
    }
}
