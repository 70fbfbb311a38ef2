//! Pipeline schedules: the order in which each device runs the forward and backward ops of a
//! microbatched training step (`train{microbatches=M}`), GPipe's or 1F1B's.
//!
//! - **GPipe** (Huang et al. 2019): every microbatch's forward, then every microbatch's
//!   backward, each in microbatch order. A stage keeps all `M` microbatches' activations
//!   until their backward.
//! - **1F1B** (PipeDream-Flush: Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN
//!   Training"): stage `s` of `P` runs `min(P - s - 1, M)` forwards (the warm-up), then
//!   alternates one forward and one backward, then the remaining backwards. The step time is
//!   GPipe's, `(M + P - 1)` slots with equal stages (the bubble `(P - 1) / (M + P - 1)`), but
//!   a stage holds at most `P - s` microbatches' activations.
//!
//! The schedule is the body order (each device runs its ops in body order: the simulator and
//! the lowering follow it), so it is data every later stage shares.
//!
//! **What the schedule reads from the graph.** A microbatch's ops are those that depend on
//! exactly one microbatch's rows: a `slice` of a batch input (a graph input that is not
//! state) along axis 0 whose start is a multiple of its length seeds microbatch
//! `start / length` (through the `transfer`s placement puts in between; only in a graph
//! with state, a training step), and every op inherits the microbatches of its operands. Ops
//! with a gradient link (`grad-of`, from the `grad` pass) are backward, the others forward.
//! Ops of no microbatch (weight transposes, the labels' count, the seed of the loss's
//! gradient) come first in their device's order, as every microbatch may need them; ops of
//! several microbatches (gradient sums, the optimizer update) come last. Within one slot (a microbatch's forward or backward on one device), ops keep the
//! upward-rank order of [`crate::pass::rank_order`]. A device's stage is its place among the
//! devices that run microbatch 0's forward, by the first such op in the body.
//!
//! The devices' orders are merged into one body order: every device's next op in its order
//! is taken once its operands are made; when no device's next op can be (a placement that
//! makes a stage wait for itself), the waiting op earliest in its device's order is taken.

use std::collections::BTreeMap;

use tessera_ir::{Graph, Op, OpId, ValueDef};

use crate::build::Built;
use crate::problem::Instance;

/// A pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// All forwards, then all backwards.
    GPipe,
    /// One forward, one backward, after a warm-up of forwards.
    OneFOneB,
}

impl Schedule {
    /// Parses `gpipe` or `1f1b`.
    pub fn parse(s: &str) -> Option<Schedule> {
        match s {
            "gpipe" => Some(Schedule::GPipe),
            "1f1b" => Some(Schedule::OneFOneB),
            _ => None,
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            Schedule::GPipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
        }
    }

    /// Slot of each (phase, microbatch) on stage `stage` of `stages` with `m` microbatches:
    /// `(forward slots, backward slots)`, by microbatch.
    pub fn slots(self, stage: usize, stages: usize, m: usize) -> (Vec<usize>, Vec<usize>) {
        match self {
            Schedule::GPipe => ((0..m).collect(), (m..2 * m).collect()),
            Schedule::OneFOneB => {
                let warm = stages.saturating_sub(stage + 1).min(m);
                let mut f = vec![0; m];
                let mut b = vec![0; m];
                let mut next = 0;
                let mut take = |v: &mut Vec<usize>, i: usize| {
                    v[i] = next;
                    next += 1;
                };
                for i in 0..warm {
                    take(&mut f, i);
                }
                for k in 0..m - warm {
                    take(&mut f, warm + k);
                    take(&mut b, k);
                }
                for i in m - warm..m {
                    take(&mut b, i);
                }
                (f, b)
            }
        }
    }
}

/// Which microbatches an op depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Micro {
    /// None: the op is shared by every microbatch.
    None,
    /// Only this one.
    One(u32),
    /// Several (a gradient sum, the update).
    Many,
}

fn join(a: Micro, b: Micro) -> Micro {
    match (a, b) {
        (Micro::None, x) | (x, Micro::None) => x,
        (Micro::One(i), Micro::One(j)) if i == j => a,
        _ => Micro::Many,
    }
}

/// The microbatch of every op of `graph` (see the module doc) and how many there are.
pub(crate) fn microbatches(graph: &Graph) -> (BTreeMap<OpId, Micro>, usize) {
    let mut of: BTreeMap<OpId, Micro> = BTreeMap::new();
    let mut count = 0usize;
    // Only a training step (a graph with state) has microbatches.
    if graph.state.is_empty() {
        return (of, count);
    }
    let (state, _) = graph.state_values();
    // The batch input a value is, through `transfer`s (placement moves inputs to devices).
    let input_of = |mut v: tessera_ir::ValueId| loop {
        match graph.value(v).def {
            ValueDef::Input(_) => return (!state.contains(&v)).then_some(v),
            ValueDef::Result(p, _) => match graph.op(p).op {
                Op::Transfer { .. } => v = graph.op(p).operands[0],
                _ => return None,
            },
        }
    };
    for &op in graph.ops() {
        let data = graph.op(op);
        let seed = match &data.op {
            Op::Slice {
                axes,
                starts,
                ends,
                steps,
            } if axes == &[0] && steps == &[1] => {
                // Rows `start..end`, inside the input's static extent, a whole number of
                // slices from its start.
                let extent = input_of(data.operands[0])
                    .and_then(|v| graph.ty(v).shape.first().and_then(|d| d.as_static()));
                let (start, end) = (starts[0], ends[0]);
                match (extent, end.checked_sub(start)) {
                    (Some(extent), Some(len))
                        if len > 0 && start >= 0 && end <= extent as i64 && start % len == 0 =>
                    {
                        Some((start / len) as u32)
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        let m = match seed {
            Some(i) => {
                count = count.max(i as usize + 1);
                Micro::One(i)
            }
            None => data
                .operands
                .iter()
                .filter_map(|&v| match graph.value(v).def {
                    ValueDef::Result(p, _) => of.get(&p).copied(),
                    ValueDef::Input(_) => None,
                })
                .fold(Micro::None, join),
        };
        of.insert(op, m);
    }
    (of, count)
}

/// How many microbatches `graph` runs (0 or 1: it is not microbatched).
pub fn microbatch_count(graph: &Graph) -> usize {
    microbatches(graph).1
}

/// The body order `schedule` gives the placed step `built` (problem op indices, as
/// [`crate::pass::rank_order`] gives them), or `None` when the graph has no microbatches.
pub fn pipeline_order(
    graph: &Graph,
    built: &Built,
    inst: &Instance,
    assign: &[usize],
    schedule: Schedule,
) -> Option<Vec<usize>> {
    let (micro, m) = microbatches(graph);
    if m == 0 {
        return None;
    }
    let n = inst.n;
    let device = |o: usize| inst.place_devices[inst.place_of(o, assign[o])][0];
    let heft = crate::pass::rank_order(inst, assign);
    let mut heft_pos = vec![0usize; n];
    for (i, &o) in heft.iter().enumerate() {
        heft_pos[o] = i;
    }
    let graph_op = |o: usize| built.graph_ops.get(o).copied().flatten();
    let phase_of = |o: usize| -> (Micro, bool) {
        match graph_op(o) {
            Some(op) => (
                micro.get(&op).copied().unwrap_or(Micro::None),
                graph.op(op).grad_of.is_some(),
            ),
            None => (Micro::None, !inst.in_edges[o].is_empty()),
        }
    };
    // Stages: devices running microbatch 0's forward, by their first such op in the body.
    let body_pos: BTreeMap<OpId, usize> = graph
        .ops()
        .iter()
        .enumerate()
        .map(|(i, &op)| (op, i))
        .collect();
    let mut first: BTreeMap<usize, usize> = BTreeMap::new();
    for o in 0..n {
        if phase_of(o) == (Micro::One(0), false) {
            let pos = graph_op(o)
                .and_then(|op| body_pos.get(&op).copied())
                .unwrap_or(usize::MAX);
            let e = first.entry(device(o)).or_insert(pos);
            *e = (*e).min(pos);
        }
    }
    let mut by_first: Vec<(usize, usize)> = first.iter().map(|(&d, &p)| (p, d)).collect();
    by_first.sort_unstable();
    let stages = by_first.len().max(1);
    let stage: BTreeMap<usize, usize> = by_first
        .iter()
        .enumerate()
        .map(|(s, &(_, d))| (d, s))
        .collect();
    let slots: Vec<(Vec<usize>, Vec<usize>)> =
        (0..stages).map(|s| schedule.slots(s, stages, m)).collect();
    let key = |o: usize| -> (u8, usize, usize) {
        let (mb, backward) = phase_of(o);
        match mb {
            // Shared work (weight transposes, the labels' count, the loss gradient's seed)
            // every microbatch may need: first. A graph output (no graph op, operands in):
            // last.
            Micro::None if graph_op(o).is_some() || !backward => (0, 0, heft_pos[o]),
            Micro::One(i) => {
                let s = stage.get(&device(o)).copied().unwrap_or(stages - 1);
                let (f, b) = &slots[s];
                let slot = if backward {
                    b[i as usize]
                } else {
                    f[i as usize]
                };
                (1, slot, heft_pos[o])
            }
            _ => (2, 0, heft_pos[o]),
        }
    };
    // Each device's order, then merged.
    let mut seqs: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for o in 0..n {
        seqs.entry(device(o)).or_default().push(o);
    }
    let mut seqs: Vec<Vec<usize>> = seqs.into_values().collect();
    for s in &mut seqs {
        s.sort_by_key(|&o| key(o));
    }
    let mut missing: Vec<usize> = (0..n).map(|o| inst.in_edges[o].len()).collect();
    let mut done = vec![false; n];
    let mut head = vec![0usize; seqs.len()];
    let mut order = Vec::with_capacity(n);
    let emit = |o: usize, order: &mut Vec<usize>, done: &mut [bool], missing: &mut [usize]| {
        order.push(o);
        done[o] = true;
        for &e in &inst.out_edges[o] {
            missing[inst.problem.edges[e].to] -= 1;
        }
    };
    while order.len() < n {
        let mut progress = false;
        for (d, seq) in seqs.iter().enumerate() {
            loop {
                while head[d] < seq.len() && done[seq[head[d]]] {
                    head[d] += 1;
                }
                match seq.get(head[d]) {
                    Some(&o) if missing[o] == 0 => {
                        emit(o, &mut order, &mut done, &mut missing);
                        progress = true;
                    }
                    _ => break,
                }
            }
        }
        if !progress {
            // No device's next op is ready: take the ready op earliest in its device's order.
            let pick = seqs
                .iter()
                .enumerate()
                .filter_map(|(d, seq)| {
                    seq[head[d]..]
                        .iter()
                        .position(|&o| !done[o] && missing[o] == 0)
                        .map(|k| (k, d, seq[head[d] + k]))
                })
                .min();
            match pick {
                Some((_, _, o)) => emit(o, &mut order, &mut done, &mut missing),
                // Unreachable for a DAG; keep every op rather than loop.
                None => return None,
            }
        }
    }
    Some(order)
}
