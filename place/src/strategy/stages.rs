//! The `stages` strategy: pipeline stages over device groups, each stage data or tensor
//! parallel over its own group. The configurations of Alpa's inter-operator pass (Zheng et
//! al., OSDI 2022: the model cut into stages, each on a submesh) and of HetPipe (Park et al.,
//! USENIX ATC 2020: pipelines over GPUs of different generations), enumerated rather than
//! searched: for problems with two or more disjoint device groups (the tilings `compile` offers
//! a training step), every chain of groups (the groups in order, and in reverse; the first
//! 2, 3, ... of them) is cut into contiguous stages, one per group.
//!
//! **The cut.** The ops are taken in units ([`units`]: a colocation group, which for a
//! training step is a forward op with its backward ops, or a single op). Units of several ops
//! are *anchors*, in problem order (a topological order); every other unit *follows* one:
//! the latest anchor any producer of it follows (an optimizer update follows the layer whose
//! gradient it reads, the loss the last layer), or, with no producer, the earliest anchor a
//! consumer follows. (With no unit of several ops, every unit is an anchor.) An anchor's work
//! on a group is the time of its units and of those following it, each its cheapest option
//! on the group (a split or a replicated run; or whole on the group's fastest device),
//! and its memory that option's bytes. The cut is the one that minimizes the slowest stage's
//! work, each stage's on its own group (so a stage on slower devices gets less work:
//! PipeDream's balanced stages, Narayanan et al., SOSP 2019, with heterogeneous times) within
//! each group's memory: a bisection on the slowest stage's time, each trial filling stages
//! in order (a stage takes anchors while its work and memory stay within bounds). Megatron-LM's
//! uniform cut (an equal number of anchors, for a transformer equal layers, per stage) is
//! [`Cut::Uniform`], and a cut balanced as if every stage ran at the first stage's speed
//! (PipeDream's planner assumes identical devices) [`Cut::Homogeneous`]: the baselines of
//! `benches/parallel.rs`, and configurations beside the balanced cut too (the homogeneous
//! one where it cuts differently), since the simulator, not the cut's model, has the last
//! word.
//!
//! **The plan.** Each unit then goes to its stage's group with the option there that costs
//! least with the reshards from its producers (the `split` strategy's everything-on-one-group
//! start, per stage), and the configurations are compared by the model's latency of the step
//! (a training step's time: the next step waits for the state it writes), whatever the
//! objective; the best is the plan. The `split` strategy's local search does not run on it:
//! `compile` simulates the best few beside the other plans and the simulator decides.

use crate::eval::{Objective, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::split::{on_places, unit_options};
use crate::strategy::{Solution, SolveOptions, better, units};

/// How a chain of groups is cut into stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Least work on the slowest stage, each stage's work timed on its own group.
    Balanced,
    /// An equal number of anchors per stage (Megatron-LM's equal layers).
    Uniform,
    /// Least work on the slowest stage with every stage's work timed on the first stage's
    /// group, as a planner for identical devices (PipeDream's) cuts; memory on each own.
    Homogeneous,
}

/// One configuration: the places the stages run on, in order, and each anchor's stage.
#[derive(Clone, Debug, PartialEq)]
pub struct Staged {
    /// The places (indices into [`Instance::place_devices`]: a device, or `d + g` for device
    /// group `g`), stage by stage.
    pub chain: Vec<usize>,
    /// The first anchor of each stage, in problem order (`cuts[0] == 0`).
    pub cuts: Vec<usize>,
    /// Each stage's work on its place, as the cut counted it (its anchors and their
    /// followers, each by its cheapest option there).
    pub work: Vec<f64>,
    /// The plan.
    pub solution: Solution,
}

/// One configuration the strategy tried: its chain, and its plan with the plan's score, or
/// why it has none.
#[derive(Clone, Debug)]
pub struct Config {
    /// The places, stage by stage.
    pub chain: Vec<usize>,
    /// How the chain is cut.
    pub cut: Cut,
    /// The configuration, when the anchors could be cut into stages that fit.
    pub staged: Option<Staged>,
    /// The plan's score (the objective, then the other), or why it has none.
    pub outcome: Result<(f64, f64), String>,
    /// The plan's latency, then its period: what configurations are ranked by (see
    /// [`ranked`]).
    pub step: (f64, f64),
}

/// Every configuration of [`chains`] with the balanced cut, the uniform one, and the
/// homogeneous one where that cuts differently from both (on a chain of unlike places it can
/// simulate faster than the balanced cut, whose stage times are only the model's), each
/// scored by `opts`' objective.
pub fn configurations(inst: &Instance, opts: &SolveOptions) -> Vec<Config> {
    chains(inst)
        .into_iter()
        .flat_map(|chain| {
            let balanced = staged(inst, &chain, Cut::Balanced);
            let uniform = staged(inst, &chain, Cut::Uniform);
            let homogeneous = staged(inst, &chain, Cut::Homogeneous).filter(|h| {
                [&balanced, &uniform]
                    .iter()
                    .all(|other| other.as_ref().is_none_or(|o| o.cuts != h.cuts))
            });
            let mut out = vec![
                (chain.clone(), Cut::Balanced, balanced),
                (chain.clone(), Cut::Uniform, uniform),
            ];
            if homogeneous.is_some() {
                out.push((chain, Cut::Homogeneous, homogeneous));
            }
            out
        })
        .map(|(chain, cut, staged)| {
            let mut step = (f64::INFINITY, f64::INFINITY);
            let outcome = match &staged {
                None => Err("the stages cannot hold every layer within memory".to_string()),
                Some(s) => match violation(inst, &s.solution.assign) {
                    Some(why) => Err(why),
                    None => {
                        let ev = crate::eval::evaluate(inst, &s.solution.assign, &s.solution.order);
                        step = crate::strategy::score(&ev, Objective::Latency);
                        Ok(crate::strategy::score(&ev, opts.objective))
                    }
                },
            };
            Config {
                chain,
                cut,
                staged,
                outcome,
                step,
            }
        })
        .collect()
}

/// A configuration as the plan's list of attempts shows it: `stages 4 x 2 [gpu0 gpu1 |
/// gpu2 gpu3 | ...]: work 11.6 | 11.6 | 11.5 | 11.6 ms` (each stage's devices, and the work
/// the cut gave it on them).
pub fn describe(inst: &Instance, c: &Config) -> String {
    let stages: Vec<String> = c
        .chain
        .iter()
        .map(|&p| {
            inst.place_devices[p]
                .iter()
                .map(|&k| inst.device_name(k))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let size = c.chain.first().map_or(0, |&p| inst.place_devices[p].len());
    let cut = match c.cut {
        Cut::Balanced => "balanced",
        Cut::Uniform => "uniform",
        Cut::Homogeneous => "homogeneous",
    };
    let mut out = format!(
        "stages {} x {size} [{}], {cut} cut",
        c.chain.len(),
        stages.join(" | ")
    );
    if let Some(s) = &c.staged {
        let work: Vec<String> = s
            .work
            .iter()
            .map(|&t| tessera_targets::sim::seconds(t))
            .collect();
        out.push_str(&format!(": work {}", work.join(" | ")));
    }
    out
}

/// Whether `auto` runs the strategy on `inst`: a chain to cut, and layers to cut it between
/// (colocation units of several ops, a training step's forward ops with their backward
/// ops; an inference graph's contiguous stages are the `dp` strategy's).
pub fn applies(inst: &Instance) -> bool {
    inst.groups.iter().any(|g| g.len() > 1) && !chains(inst).is_empty()
}

/// The `stages` strategy (see the module doc): the best configuration by the objective.
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if chains(inst).is_empty() {
        return Err(ProblemError::Unsolved(
            "stages: the problem has no two devices besides the host nor two disjoint device \
             groups of one size"
                .into(),
        ));
    }
    best(configurations(inst, opts))
}

/// A plan with its score (the objective, then the other).
pub type Scored = ((f64, f64), Solution);

/// The best of `configs` by [`ranked`]'s order, or why none has a plan.
pub fn best(configs: Vec<Config>) -> Result<Solution, ProblemError> {
    ranked(configs).map(|mut r| r.swap_remove(0).1)
}

/// The plans of `configs` best first by the model's latency of the step, then its period,
/// whatever the objective (equal ones in their order, each assignment once), each with its
/// score; or why none has a plan. A training step's time is its latency: the next step
/// waits for the state this one writes, so only the microbatches within a step overlap,
/// which the latency's list schedule counts and the period (the busiest device) does not.
pub fn ranked(configs: Vec<Config>) -> Result<Vec<Scored>, ProblemError> {
    // (the step's latency and period, the score, the plan)
    let mut found: Vec<((f64, f64), Scored)> = Vec::new();
    let mut why = None;
    for c in configs {
        match (c.outcome, c.staged) {
            (Ok(v), Some(s)) => {
                if found
                    .iter()
                    .all(|(_, (_, f))| f.assign != s.solution.assign)
                {
                    found.push((c.step, (v, s.solution)));
                }
            }
            (Err(w), _) => why = Some(w),
            (Ok(_), None) => {}
        }
    }
    if found.is_empty() {
        return Err(ProblemError::Infeasible(format!(
            "stages: no configuration fits: {}",
            why.unwrap_or_else(|| "no chain holds every stage".into())
        )));
    }
    // A stable sort: ties keep the configurations' order.
    found.sort_by(|a, b| {
        if better(a.0, b.0) {
            std::cmp::Ordering::Less
        } else if better(b.0, a.0) {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    });
    Ok(found.into_iter().map(|(_, scored)| scored).collect())
}

/// The chains a configuration may run on, as places, stage by stage: per group size with two
/// or more disjoint groups (taken in order, first fit), those groups (`d + g`); the devices
/// other than the host (the device the graph's inputs are pinned to), and the devices of each
/// kind (stages of one device each); of each line of two or more, the first 2, 4, 8, ... and
/// all of them, in order and in reverse order.
pub fn chains(inst: &Instance) -> Vec<Vec<usize>> {
    let mut lines: Vec<Vec<usize>> = Vec::new();
    let mut by_size: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for g in 0..inst.problem.groups.len() {
        by_size
            .entry(inst.place_devices[inst.d + g].len())
            .or_default()
            .push(g);
    }
    for groups in by_size.values() {
        let tiles = crate::apply::disjoint_groups(inst, groups);
        lines.push(tiles.into_iter().map(|g| inst.d + g).collect());
    }
    // The devices but the host (where the graph's inputs are pinned), of whatever kinds:
    // HetPipe's stages on GPUs of different generations; and the devices of each kind.
    let host: Vec<usize> = inst.input_devices().collect();
    lines.push((0..inst.d).filter(|k| !host.contains(k)).collect());
    let mut by_kind: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for k in 0..inst.d {
        by_kind
            .entry(inst.problem.devices[k].kind.as_str())
            .or_default()
            .push(k);
    }
    for line in by_kind.into_values() {
        if !lines.contains(&line) {
            lines.push(line);
        }
    }
    let mut out = Vec::new();
    for line in lines {
        let n = line.len();
        let mut lengths: Vec<usize> = std::iter::successors(Some(2usize), |&p| Some(p * 2))
            .take_while(|&p| p < n)
            .collect();
        if n >= 2 {
            lengths.push(n);
        }
        for p in lengths {
            let forward = line[..p].to_vec();
            let mut backward = forward.clone();
            backward.reverse();
            for chain in [forward, backward] {
                if !out.contains(&chain) {
                    out.push(chain);
                }
            }
        }
    }
    out
}

/// The anchors (unit indices, in order) and, per unit, the anchor it follows (an index
/// into the anchors); see the module doc.
pub fn anchors(inst: &Instance, units: &[Vec<usize>]) -> (Vec<usize>, Vec<usize>) {
    let mut unit_of = vec![0; inst.n];
    for (i, u) in units.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    let several = units.iter().any(|u| u.len() > 1);
    let mut anchors = Vec::new();
    // Per unit: the index of the anchor it follows.
    let mut follows: Vec<Option<usize>> = vec![None; units.len()];
    for (i, u) in units.iter().enumerate() {
        if !several || u.len() > 1 {
            follows[i] = Some(anchors.len());
            anchors.push(i);
            continue;
        }
        follows[i] = u
            .iter()
            .flat_map(|&o| &inst.in_edges[o])
            .filter_map(|&e| follows[unit_of[inst.problem.edges[e].from]])
            .max();
    }
    for i in (0..units.len()).rev() {
        if follows[i].is_none() {
            follows[i] = units[i]
                .iter()
                .flat_map(|&o| &inst.out_edges[o])
                .filter_map(|&e| follows[unit_of[inst.problem.edges[e].to]])
                .min();
        }
    }
    let follows = follows.into_iter().map(|f| f.unwrap_or(0)).collect();
    (anchors, follows)
}

/// A unit's work and memory on `place`: its cheapest option there (on a group, a split
/// alternative or a replicated run, or whole on one of the group's devices); `None` when it
/// has none. A unit pinned elsewhere costs the place nothing.
fn unit_cost(inst: &Instance, unit: &[usize], place: usize) -> Option<(f64, u64)> {
    let members = &inst.place_devices[place];
    let mut best: Option<(f64, u64)> = None;
    for c in unit_options(inst, unit) {
        let p = inst.place_of(unit[0], c[0]);
        if p != place && !members.contains(&p) {
            continue;
        }
        let time: f64 = unit
            .iter()
            .zip(&c)
            .map(|(&o, &x)| inst.option_times(o, x).iter().copied().fold(0.0, f64::max))
            .sum();
        let memory = unit.iter().zip(&c).fold(0u64, |m, (&o, &x)| {
            m.saturating_add(inst.option_memory(o, x))
        });
        if best.is_none_or(|(t, _)| time < t) {
            best = Some((time, memory));
        }
    }
    if best.is_none()
        && unit
            .iter()
            .all(|&o| (0..inst.d).any(|k| inst.allowed(o, k)))
    {
        let pinned_elsewhere = (0..inst.d)
            .filter(|&k| inst.allowed(unit[0], k))
            .all(|k| !members.contains(&k));
        if pinned_elsewhere {
            return Some((0.0, 0));
        }
    }
    best
}

/// The configuration over `chain` (places, stage by stage: device groups' `d + g`, or
/// devices for stages of one device each) with the given cut, or `None`
/// when the anchors cannot be cut into stages that fit (an anchor no stage's group runs, or
/// memory).
pub fn staged(inst: &Instance, chain: &[usize], cut: Cut) -> Option<Staged> {
    let units = units(inst);
    let (anchors, follows) = anchors(inst, &units);
    if anchors.is_empty() || chain.is_empty() {
        return None;
    }
    // work[s][a], memory[s][a]: anchor a's (with its followers) on stage s's place.
    let p = chain.len();
    let mut work = vec![vec![0.0; anchors.len()]; p];
    let mut memory = vec![vec![0u64; anchors.len()]; p];
    for (s, &place) in chain.iter().enumerate() {
        if place >= inst.place_devices.len() {
            return None;
        }
        for (i, u) in units.iter().enumerate() {
            let a = follows[i];
            match unit_cost(inst, u, place) {
                Some((t, m)) => {
                    work[s][a] += t;
                    memory[s][a] = memory[s][a].saturating_add(m);
                }
                None => work[s][a] = f64::INFINITY,
            }
        }
    }
    // What each stage's every device holds at most.
    let capacity: Vec<u64> = chain
        .iter()
        .map(|&place| {
            inst.place_devices[place]
                .iter()
                .map(|&k| inst.capacity[k].saturating_sub(inst.base_memory[k]))
                .min()
                .unwrap_or(0)
        })
        .collect();
    let cuts = match cut {
        Cut::Uniform => {
            let n = anchors.len();
            let cuts: Vec<usize> = (0..p).map(|s| s * n / p).collect();
            let fits = (0..p).all(|s| {
                let end = cuts.get(s + 1).copied().unwrap_or(n);
                let (t, m) = (cuts[s]..end).fold((0.0, 0u64), |(t, m), a| {
                    (t + work[s][a], m.saturating_add(memory[s][a]))
                });
                t.is_finite() && m <= capacity[s]
            });
            if !fits {
                return None;
            }
            cuts
        }
        Cut::Balanced => balanced(&work, &memory, &capacity)?,
        Cut::Homogeneous => balanced(&vec![work[0].clone(); p], &memory, &capacity)?,
    };
    // Each anchor's stage: the last stage whose first anchor is at or before it.
    let stage_of_anchor: Vec<usize> = (0..anchors.len())
        .map(|a| cuts.partition_point(|&c| c <= a).saturating_sub(1))
        .collect();
    let mut stage_work = vec![0.0; p];
    for (a, &s) in stage_of_anchor.iter().enumerate() {
        stage_work[s] += work[s][a];
    }
    let solution = on_places(inst, |i| chain[stage_of_anchor[follows[i]]]);
    Some(Staged {
        chain: chain.to_vec(),
        cuts,
        work: stage_work,
        solution,
    })
}

/// Stages fill in order: stage `s` takes anchors while its work stays within `limit` and its
/// memory within its capacity. The first anchor of each stage (a stage may be empty), or
/// `None` when the anchors do not all fit: whether they fit only grows with `limit`.
fn fill(
    work: &[Vec<f64>],
    memory: &[Vec<u64>],
    capacity: &[u64],
    limit: f64,
) -> Option<Vec<usize>> {
    let n = work.first().map_or(0, Vec::len);
    let mut cuts = Vec::with_capacity(work.len());
    let mut a = 0;
    for s in 0..work.len() {
        cuts.push(a);
        let (mut t, mut m) = (0.0, 0u64);
        while a < n {
            let (t2, m2) = (t + work[s][a], m.saturating_add(memory[s][a]));
            if t2 > limit || m2 > capacity[s] {
                break;
            }
            (t, m) = (t2, m2);
            a += 1;
        }
    }
    (a == n).then_some(cuts)
}

/// The cut with the least work on the slowest stage (see the module doc), by bisection on
/// that work: [`fill`] succeeds for every limit at or above the best cut's slowest stage.
/// `None` when no cut fits, or when the best leaves a stage empty (then a shorter chain's
/// configuration is the same plan).
fn balanced(work: &[Vec<f64>], memory: &[Vec<u64>], capacity: &[u64]) -> Option<Vec<usize>> {
    let total: f64 = work
        .iter()
        .map(|w| w.iter().sum::<f64>())
        .filter(|t: &f64| t.is_finite())
        .fold(0.0, f64::max);
    let mut hi = total;
    let mut best = fill(work, memory, capacity, hi)?;
    let mut lo = 0.0;
    for _ in 0..64 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        match fill(work, memory, capacity, mid) {
            Some(c) => {
                hi = mid;
                best = c;
            }
            None => lo = mid,
        }
    }
    let n = work.first().map_or(0, Vec::len);
    let empty = best
        .iter()
        .zip(best.iter().skip(1).chain(std::iter::once(&n)))
        .any(|(a, b)| a >= b);
    (!empty).then_some(best)
}
