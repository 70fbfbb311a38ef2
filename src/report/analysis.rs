//! What the summary and the report say about a simulation beyond its numbers, read from the
//! simulator's own timeline: what each simulated transfer moves (and so how the transfers per
//! sample relate to the placed graph's `transfer` ops), and, when the steady-state period is
//! longer than the busiest resource's busy time, why.
//!
//! **Transfers.** The simulator moves a value once to each device that uses it away from
//! where it is: the operand of every `transfer` op placement inserted, and also graph inputs
//! (which start on the host), graph outputs (which end there) and the pieces of values sent
//! onto or off a device mesh, which have no `transfer` op. [`TransferCount`] splits the
//! transfers of one sample by that.
//!
//! **The period.** No schedule is faster than its busiest resource (a device, or one
//! direction of a link); the simulated period can be slower, and [`PeriodExcess`] says why.
//! The simulator measures the period over the stream's steady state: from the middle
//! sample's completion to the last one's, divided by the samples between. That stretch of
//! time is covered by one *critical chain*: start from the task that completes the last
//! sample and step back, each time to the task that ended at the instant the current one
//! started (in a discrete-event simulation every start is some task's end). Each step is
//! classed by why its task started then: after other traffic on its own link direction
//! (*link contention*), after other work on its own device (*device queue*), or when its
//! input arrived from elsewhere (*dependency*). The chain's time per sample, by lane and by
//! class, adds up to the period, so the numbers can be checked against it; when the chain
//! runs through several samples it is a cycle of the pipeline (a device or link serving
//! sample after sample in its fixed order), and when it mostly follows dependencies the
//! samples are paced by a latency chain that the busiest resource is not on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tessera_ir::{Graph, Op, ValueId};
use tessera_targets::{Span, SpanKind, TargetSpec, Trace};

/// How the transfers of one sample relate to the placed graph.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransferCount {
    /// `transfer` ops in the placed graph.
    pub ops: usize,
    /// Transfers the simulator runs per sample: values moved over one route each.
    pub per_sample: usize,
    /// Those transfers by what they move (`transfer ops`, `graph inputs from the host`, ...),
    /// in a fixed order; only non-zero entries.
    pub by_reason: Vec<(String, usize)>,
}

/// Why the simulated period is longer than the busiest resource's busy time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeriodExcess {
    /// The busiest resource (a device, or a link direction `a -> b`).
    pub resource: String,
    /// Its busy seconds per sample.
    pub busy: f64,
    /// The simulated period.
    pub period: f64,
    /// The first and last sample (0-based, by completion) of the steady-state window.
    pub window: [usize; 2],
    /// Seconds per sample of the window (its length over the samples it spans): the period
    /// the simulator measured.
    pub measured: f64,
    /// The busiest resource's busy seconds per sample inside the window.
    pub busy_in_window: f64,
    /// The critical chain's seconds per sample by lane, longest first.
    pub by_lane: Vec<Share>,
    /// The critical chain's seconds per sample by class (`dependency`, `link contention`,
    /// `device queue`, `idle`), longest first.
    pub by_class: Vec<Share>,
    /// How many samples the chain runs through.
    pub chain_samples: usize,
    /// The chain's first steps, from the last completion back: `lane: what (sample, class)`.
    pub chain: Vec<String>,
    /// Steps of the chain in all.
    pub chain_steps: usize,
    /// The cause: `link contention`, `device queue`, `pipeline cycle` or `dependency chain`.
    pub cause: String,
}

/// A part of the critical chain's time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Share {
    /// A lane, or a class of step.
    pub name: String,
    /// Seconds per sample.
    pub seconds: f64,
}

/// What [`analyze`] finds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimNotes {
    /// The transfers of one sample.
    pub transfers: TransferCount,
    /// Why the period exceeds the busiest resource's busy time; `None` when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<PeriodExcess>,
}

/// A span's lane in words: the device (`chip0`) or link direction (`chip0 -> chip1`).
pub fn lane_name(spec: &TargetSpec, s: &Span) -> String {
    match s.channel() {
        None => spec.devices[s.lane].name.clone(),
        Some((l, forward)) => {
            let link = &spec.links[l];
            if forward {
                format!("{} -> {}", link.a, link.b)
            } else {
                format!("{} -> {}", link.b, link.a)
            }
        }
    }
}

/// Counts the transfers of the first sample of `trace` by what they move.
pub fn transfers(graph: &Graph, trace: &Trace) -> TransferCount {
    let mut ops_of: BTreeMap<ValueId, usize> = BTreeMap::new();
    let mut ops = 0;
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Transfer { .. }) {
            ops += 1;
            if let Some(&v) = data.operands.first() {
                *ops_of.entry(v).or_default() += 1;
            }
        }
    }
    // One transfer occupies every channel of its route: one span each, same start.
    let mut moves: BTreeMap<ValueId, Vec<u64>> = BTreeMap::new();
    for s in trace.spans.iter().filter(|s| s.sample == 0) {
        if let SpanKind::Transfer(v) = s.kind {
            let starts = moves.entry(v).or_default();
            if !starts.contains(&s.start.to_bits()) {
                starts.push(s.start.to_bits());
            }
        }
    }
    let mesh_users = |v: ValueId| {
        graph.ops().iter().any(|&op| {
            let d = graph.op(op);
            d.device.as_deref().is_some_and(|x| x.starts_with('@')) && d.operands.contains(&v)
        }) || matches!(graph.value(v).def, tessera_ir::ValueDef::Result(p, _)
            if graph.op(p).device.as_deref().is_some_and(|x| x.starts_with('@')))
    };
    let reasons = [
        "transfer ops",
        "graph inputs from the host",
        "graph outputs to the host",
        "onto or off the device mesh",
        "other values used away from their device",
    ];
    let mut counts = [0usize; 5];
    let mut per_sample = 0;
    for (&v, starts) in &moves {
        let m = starts.len();
        per_sample += m;
        let by_op = m.min(ops_of.get(&v).copied().unwrap_or(0));
        counts[0] += by_op;
        let rest = m - by_op;
        let class = if graph.inputs().contains(&v) {
            1
        } else if graph.outputs().contains(&v) {
            2
        } else if mesh_users(v) {
            3
        } else {
            4
        };
        counts[class] += rest;
    }
    TransferCount {
        ops,
        per_sample,
        by_reason: reasons
            .iter()
            .zip(counts)
            .filter(|&(_, n)| n > 0)
            .map(|(r, n)| (r.to_string(), n))
            .collect(),
    }
}

/// One task of the timeline: a span, its multi-channel siblings folded in.
struct Task<'a> {
    span: &'a Span,
    lanes: Vec<String>,
}

/// The chain steps kept in [`PeriodExcess::chain`].
const CHAIN_SHOWN: usize = 24;

/// Why `period` (the simulated period of the stream in `trace`, all its samples) exceeds
/// `busy`, the busy seconds per sample of `resource`; `None` when it does not.
pub fn period_excess(
    spec: &TargetSpec,
    graph: &Graph,
    trace: &Trace,
    resource: &str,
    busy: f64,
    period: f64,
) -> Option<PeriodExcess> {
    // Below a part in a million the two are the same number as printed.
    if resource.is_empty() || period <= busy * (1.0 + 1e-6) || trace.samples < 2 {
        return None;
    }
    let n = trace.samples;
    let names = tessera_ir::text::value_names(graph);
    // Tasks: a transfer on several channels is one task.
    let mut tasks: Vec<Task<'_>> = Vec::new();
    let mut seen: BTreeMap<(usize, u64, u64, String), usize> = BTreeMap::new();
    for s in &trace.spans {
        let lane = lane_name(spec, s);
        if s.channel().is_some() {
            let key = (
                s.sample,
                s.start.to_bits(),
                s.end.to_bits(),
                describe(graph, &names, s),
            );
            if let Some(&i) = seen.get(&key) {
                tasks[i].lanes.push(lane);
                continue;
            }
            seen.insert(key, tasks.len());
        }
        tasks.push(Task {
            span: s,
            lanes: vec![lane],
        });
    }
    let mut done = vec![0.0f64; n];
    for t in &tasks {
        if t.span.sample < n {
            done[t.span.sample] = done[t.span.sample].max(t.span.end);
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| done[a].total_cmp(&done[b]).then(a.cmp(&b)));
    let h = (n - 1) / 2;
    let (w0, w1) = (done[order[h]], done[order[n - 1]]);
    let per = (n - 1 - h) as f64;
    if w1 <= w0 {
        return None;
    }
    let eps = 1e-12 * w1;
    let on = |t: &Task<'_>, lane: &str| t.lanes.iter().any(|l| l == lane);
    let clip = |a: f64, b: f64| (b.min(w1) - a.max(w0)).max(0.0);
    let busy_in_window = tasks
        .iter()
        .filter(|t| on(t, resource))
        .map(|t| clip(t.span.start, t.span.end))
        .sum::<f64>()
        / per;
    // Tasks by end time, to find what ended at an instant.
    let mut by_end: Vec<usize> = (0..tasks.len()).collect();
    by_end.sort_by(|&a, &b| tasks[a].span.end.total_cmp(&tasks[b].span.end));
    let ended_at = |at: f64| -> &[usize] {
        let lo = by_end.partition_point(|&i| tasks[i].span.end < at - eps);
        let hi = by_end.partition_point(|&i| tasks[i].span.end <= at + eps);
        &by_end[lo..hi]
    };
    // What task `i` waited for: a task on another lane (its input) before one on its own
    // lanes (the work ahead of it there), the same sample first; with the class of the wait.
    let before = |i: usize| -> Option<(usize, &'static str)> {
        let t = &tasks[i];
        let mut best: Option<(u8, usize)> = None;
        for &j in ended_at(t.span.start) {
            if j == i {
                continue;
            }
            let own = t.lanes.iter().any(|l| on(&tasks[j], l));
            let rank = u8::from(own) * 2 + u8::from(tasks[j].span.sample != t.span.sample);
            if best.is_none_or(|(r, _)| rank < r) {
                best = Some((rank, j));
            }
        }
        let (rank, j) = best?;
        let class = match (rank >= 2, t.span.channel().is_some()) {
            (false, _) => "dependency",
            (true, true) => "link contention",
            (true, false) => "device queue",
        };
        Some((j, class))
    };
    let last = *ended_at(w1).last()?;
    let mut lanes: BTreeMap<String, f64> = BTreeMap::new();
    let mut classes: BTreeMap<&str, f64> = BTreeMap::new();
    let mut samples = std::collections::BTreeSet::new();
    let mut chain = Vec::new();
    let mut steps = 0;
    let mut cur = last;
    // Every step ends where the next one (back in time) starts: at most one per task.
    for _ in 0..tasks.len() {
        let t = &tasks[cur];
        let inside = clip(t.span.start, t.span.end);
        let prev = if t.span.start > eps {
            before(cur)
        } else {
            None
        };
        let class = prev.map_or("dependency", |(_, c)| c);
        *lanes.entry(t.lanes.join(", ")).or_default() += inside;
        *classes.entry(class).or_default() += inside;
        samples.insert(t.span.sample);
        steps += 1;
        if chain.len() < CHAIN_SHOWN {
            chain.push(format!(
                "{}: {} (sample {}, {class})",
                t.lanes.join(", "),
                describe(graph, &names, t.span),
                t.span.sample
            ));
        }
        if t.span.start <= w0 + eps {
            break;
        }
        match prev {
            Some((p, _)) => cur = p,
            None => {
                // Nothing ended as it started: the time back to the window's start is idle.
                *classes.entry("idle").or_default() += clip(w0, t.span.start);
                break;
            }
        }
    }
    let shares = |m: Vec<(String, f64)>| -> Vec<Share> {
        let mut v: Vec<Share> = m
            .into_iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(name, s)| Share {
                name,
                seconds: s / per,
            })
            .collect();
        v.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.name.cmp(&b.name)));
        v
    };
    let by_lane = shares(lanes.into_iter().collect());
    let by_class = shares(
        classes
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    );
    let top = by_class.first().map_or("dependency", |s| s.name.as_str());
    let cause = match top {
        "link contention" => "link contention",
        "device queue" => "device queue",
        _ if samples.len() > 1 => "pipeline cycle",
        _ => "dependency chain",
    }
    .to_string();
    Some(PeriodExcess {
        resource: resource.to_string(),
        busy,
        period,
        window: [order[h], order[n - 1]],
        measured: (w1 - w0) / per,
        busy_in_window,
        by_lane,
        by_class,
        chain_samples: samples.len(),
        chain,
        chain_steps: steps,
        cause,
    })
}

/// A span's task in words: `matmul node_linear (%logits)` or `transfer of %x`.
fn describe(graph: &Graph, names: &[String], s: &Span) -> String {
    match s.kind {
        SpanKind::Op(op) => format!(
            "{} {}",
            graph.op(op).op.name(),
            super::op_label(graph, names, op)
        ),
        SpanKind::Collective(op) => format!(
            "{} {}",
            graph.op(op).op.name(),
            super::op_label(graph, names, op)
        ),
        SpanKind::Transfer(v) => format!("transfer of %{}", names[v.index()]),
    }
}

/// The simulator's notes on a placed graph: its transfers and, when the period exceeds the
/// busiest resource's busy time, why (from the timeline of the whole simulated stream).
pub fn analyze(
    graph: &Graph,
    cost: &tessera_targets::CostModel<'_>,
    placement: &[usize],
    report: &tessera_targets::SimReport,
) -> Result<SimNotes, tessera_targets::SimError> {
    let spec = cost.spec();
    let excess = report.period > report.bound_period * (1.0 + 1e-6) && report.samples > 1;
    let trace = tessera_targets::trace(
        graph,
        cost,
        placement,
        if excess { report.samples } else { 1 },
    )?;
    Ok(SimNotes {
        transfers: transfers(graph, &trace),
        period: period_excess(
            spec,
            graph,
            &trace,
            &report.bottleneck,
            report.bound_period,
            report.period,
        ),
    })
}

impl PeriodExcess {
    /// Why, in one line: the critical chain of the steady state, per sample by lane, with the
    /// classes of its steps and the cause.
    pub fn why(&self) -> String {
        use tessera_targets::sim::seconds;
        let mut s = format!(
            "samples {} to {} complete {} apart, paced by a critical chain through {} \
             sample{}:",
            self.window[0],
            self.window[1],
            seconds(self.measured),
            self.chain_samples,
            if self.chain_samples == 1 { "" } else { "s" }
        );
        let lanes: Vec<String> = self
            .by_lane
            .iter()
            .take(4)
            .map(|l| format!("{} on {}", seconds(l.seconds), l.name))
            .collect();
        s.push(' ');
        s.push_str(&lanes.join(" + "));
        if self.by_lane.len() > 4 {
            let rest: f64 = self.by_lane[4..].iter().map(|l| l.seconds).sum();
            let _ =
                std::fmt::Write::write_fmt(&mut s, format_args!(" + {} elsewhere", seconds(rest)));
        }
        s.push_str(" per sample (");
        let classes: Vec<String> = self
            .by_class
            .iter()
            .map(|c| format!("{} {}", seconds(c.seconds), c.name))
            .collect();
        s.push_str(&classes.join(", "));
        let _ = std::fmt::Write::write_fmt(
            &mut s,
            format_args!(
                "); {} is busy {} per sample in that stretch; cause: {}",
                self.resource,
                seconds(self.busy_in_window),
                self.cause_words()
            ),
        );
        s
    }

    /// The cause in words.
    pub fn cause_words(&self) -> String {
        match self.cause.as_str() {
            "link contention" => {
                "link contention: transfers on the chain queue behind other traffic on a link \
                 direction"
            }
            "device queue" => {
                "a device queue: work on the chain waits behind other work on its device"
            }
            "pipeline cycle" => {
                "a pipeline cycle: the chain follows dependencies across samples, so the \
                 samples are paced by it, not by any one resource"
            }
            "dependency chain" => {
                "a dependency chain: each sample waits for its own chain of ops and transfers"
            }
            other => other,
        }
        .to_string()
    }
}
