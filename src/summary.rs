//! Printed summaries: of a tensor, which `tessera run` shows for each output
//! ([`summarize`]), and of a compile, which `tessera compile` prints and writes to
//! `summary.txt` ([`compile_summary`]).
//!
//! The compile summary keeps two sets of numbers apart and names each: the **placement
//! model**'s (the objective value of the chosen plan, the problem's lower bound, and the gap
//! computed from those two, `(value - bound) / value`) and the **simulator**'s (latency,
//! period and throughput of the placed graph, and the busiest resource's busy time, which no
//! period can undercut). When the simulated period is longer than that busy time the `why`
//! line says what the busiest resource waited for ([`crate::report::analysis`]). Transfers are
//! counted both ways: the `transfer` ops of the placed graph, and the values the simulator
//! moves per sample (those ops' operands, plus graph inputs and outputs and mesh pieces, which
//! need no op).

use std::fmt::Write;
use std::path::Path;

use tessera_ir::{ElemType, Op, Tensor, format_f64};
use tessera_place::alternatives::REPLICATED;
use tessera_place::{Objective, Plan};
use tessera_targets::TargetSpec;
use tessera_targets::sim::{bytes, rate, seconds};

use crate::commands::compile::Compiled;
use crate::report::analysis::{SimNotes, TransferCount};

/// `auto chose X for throughput: V per sample by the placement model, whose lower bound is B
/// (component); gap G = (V - B) / V`, then the pinned ops and how `auto` selected.
pub fn placement_line(plan: &Plan, pinned: usize) -> String {
    let (per, what) = match plan.objective {
        Objective::Throughput => (" per sample", "throughput"),
        Objective::Latency => ("", "latency"),
    };
    let mut s = format!(
        "{} chose {} for {what}: {}{per} by the placement model, whose lower bound is {} ({}); \
         gap {}",
        plan.strategy,
        plan.chosen,
        seconds(plan.value),
        seconds(plan.lower_bound.value),
        plan.lower_bound.binding(),
        gap_text(plan.value, plan.lower_bound.value)
    );
    if pinned > 0 {
        let _ = write!(s, "; {pinned} ops pinned by device annotations");
    }
    if let Some(why) = plan.selected_by.as_deref()
        && !why.ends_with(": 1")
    {
        s.push_str("; the simulator preferred it to the model's best");
    }
    s
}

/// The gap of `value` to its lower `bound`, with how it is computed from the two:
/// `35.1% = (3.241 us - 2.104 us) / 3.241 us`.
pub fn gap_text(value: f64, bound: f64) -> String {
    format!(
        "{} = ({} - {}) / {}",
        gap_percent(value, bound),
        seconds(value),
        seconds(bound),
        seconds(value)
    )
}

/// `(value - bound) / value` as a percentage with one decimal (`0.0%` for a zero value).
pub fn gap_percent(value: f64, bound: f64) -> String {
    let g = if value > 0.0 {
        ((value - bound) / value).max(0.0)
    } else {
        0.0
    };
    format!("{:.1}%", 100.0 * g)
}

/// What the transfers per sample are, against the placed graph's `transfer` ops: `17 per
/// sample (values the simulator moves between devices): 16 for transfer ops, 1 for graph
/// outputs to the host; the placed graph has 16 transfer ops`.
pub fn transfers_text(t: &TransferCount) -> String {
    let mut s = format!(
        "{} per sample (values the simulator moves between devices)",
        t.per_sample
    );
    if !t.by_reason.is_empty() {
        let parts: Vec<String> = t
            .by_reason
            .iter()
            .map(|(why, n)| format!("{n} for {why}"))
            .collect();
        let _ = write!(s, ": {}", parts.join(", "));
    }
    let _ = write!(
        s,
        "; the placed graph has {} transfer op{}",
        t.ops,
        if t.ops == 1 { "" } else { "s" }
    );
    s
}

/// The text `tessera compile` prints and writes to `summary.txt`.
pub fn compile_summary(model: &Path, spec: &TargetSpec, c: &Compiled) -> String {
    let mut s = String::new();
    let ops = c
        .graph
        .ops()
        .iter()
        .filter(|&&op| !matches!(c.graph.op(op).op, Op::Const(_)))
        .count();
    let _ = writeln!(
        s,
        "compiled {} for {} ({} devices, {} links): {ops} ops",
        model.display(),
        spec.name,
        spec.devices.len(),
        spec.links.len()
    );
    let _ = writeln!(s, "placement    {}", c.placement);
    if let Some(line) = stages_line(&c.plan) {
        let _ = writeln!(s, "stages       {line}");
    }
    if let Some(p) = &c.pipeline {
        use crate::commands::compile::schedule_name;
        let tried: Vec<String> = p
            .tried
            .iter()
            .map(|t| {
                let recomputing = match &t.recomputed {
                    (0, _) => String::new(),
                    (n, on) => format!(" recomputing {n} ops on {}", on.join(", ")),
                };
                format!(
                    "{}{recomputing} {}, peak {}",
                    schedule_name(t.schedule),
                    seconds(t.step),
                    bytes(t.peak)
                )
            })
            .collect();
        let recomputing = match p.recomputed {
            0 => String::new(),
            n => format!(", recomputing {n} ops"),
        };
        let _ = writeln!(
            s,
            "pipeline     {} over {} microbatches{recomputing}; simulated step and largest \
             device peak: {}",
            schedule_name(p.chosen),
            p.microbatches,
            tried.join("; ")
        );
    }
    if let Some(line) = mesh_line(c) {
        let _ = writeln!(s, "mesh         {line}");
    }
    if let Some(line) = split_state_line(&c.graph) {
        let _ = writeln!(s, "zero-1       {line}");
    }
    if let Some(line) = step_bound_line(c) {
        let _ = writeln!(s, "step bound   {line}");
    }
    simulation(&mut s, &c.report, &c.notes);
    s
}

/// For a plan of the `stages` strategy, the configuration it is (each stage's devices and the
/// work the cut gave it) and how many were weighed: why this stage boundary and this degree.
fn stages_line(plan: &Plan) -> Option<String> {
    if plan.chosen != "stages" {
        return None;
    }
    let configs: Vec<&tessera_place::plan::AttemptRecord> = plan
        .attempts
        .iter()
        .filter(|a| a.strategy.starts_with("stages "))
        .collect();
    let close = |v: f64| (v - plan.value).abs() <= 1e-9 * plan.value.abs().max(1e-30);
    let this = configs.iter().find(|a| a.value.is_some_and(close))?;
    let why = if this.strategy.contains(", uniform cut") {
        "as many layers on each stage"
    } else {
        "the cut that balances each stage's work on its own devices"
    };
    Some(format!(
        "{}: {why}; kept of {} configurations weighed (plan.json's attempts give each with \
         the model's value)",
        this.strategy
            .strip_prefix("stages ")
            .unwrap_or(&this.strategy),
        configs.len()
    ))
}

/// The device meshes of a plan that splits ops (one per group it splits over), and how many
/// ops split along each axis.
fn mesh_line(c: &Compiled) -> Option<String> {
    if c.graph.meshes.is_empty() {
        return None;
    }
    let meshes = c
        .graph
        .meshes
        .iter()
        .map(|m| format!("@{} = {:?} ({})", m.name, m.shape, m.devices.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let mut axes = c.plan.split_axes();
    if axes.is_empty() {
        // A mesh from the `shard` pass.
        return Some(meshes);
    }
    let replicated = axes.remove(REPLICATED).unwrap_or(0);
    let split: usize = axes.values().sum();
    Some(format!(
        "{meshes}: {split} ops split ({}){}; `tessera explain plan.json` says why",
        axes.iter()
            .map(|(a, n)| format!("{a} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        if replicated > 0 {
            format!(
                ", {replicated} replicated on {}",
                if c.graph.meshes.len() > 1 {
                    "them"
                } else {
                    "it"
                }
            )
        } else {
            String::new()
        }
    ))
}

/// The state a training step keeps split between steps (`--zero-stage 1`), per mesh: how
/// many slots and their bytes, whole and on each device.
fn split_state_line(g: &tessera_ir::Graph) -> Option<String> {
    // Per mesh: slots, whole bytes, bytes on each device.
    let mut per_mesh: std::collections::BTreeMap<&str, (usize, u64, u64)> = Default::default();
    for slot in &g.state {
        let (Some(name), Some(&v)) = (&slot.mesh, g.inputs().get(slot.input)) else {
            continue;
        };
        let (Some(mesh), Some(sh)) = (g.mesh_named(name), &g.value(v).sharding) else {
            continue;
        };
        let whole = g.ty(v).size_bytes().unwrap_or(0);
        let e = per_mesh.entry(name.as_str()).or_default();
        e.0 += 1;
        e.1 += whole;
        e.2 += whole / mesh.shard_count(sh).max(1);
    }
    if per_mesh.is_empty() {
        return None;
    }
    let meshes: Vec<String> = per_mesh
        .iter()
        .map(|(m, (n, whole, piece))| {
            format!(
                "{n} on @{m} ({} whole, {} on each device)",
                bytes(*whole),
                bytes(*piece)
            )
        })
        .collect();
    Some(format!(
        "optimizer state held split between steps, each device updating and keeping its \
         rows: {} of {} state slots, {}",
        per_mesh.values().map(|e| e.0).sum::<usize>(),
        g.state.len(),
        meshes.join("; ")
    ))
}

/// The simulator's part of the compile summary.
fn simulation(s: &mut String, r: &tessera_targets::SimReport, notes: &SimNotes) {
    let _ = writeln!(s, "latency      {}", seconds(r.latency));
    let _ = writeln!(
        s,
        "throughput   {} (1 / the period {}, measured over {} samples; latency and period \
         are the simulator's)",
        if r.throughput.is_finite() {
            format!("{}samples/s", rate(r.throughput))
        } else {
            "unbounded".to_string()
        },
        seconds(r.period),
        r.samples
    );
    if r.bottleneck.is_empty() {
        let _ = writeln!(s, "busiest      nothing is busy");
    } else {
        let _ = write!(
            s,
            "busiest      {}: busy {} per sample, the floor of any period; ",
            r.bottleneck,
            seconds(r.bound_period)
        );
        match &notes.period {
            Some(p) => {
                let _ = writeln!(
                    s,
                    "the period is {} longer",
                    seconds(r.period - r.bound_period)
                );
                let _ = writeln!(s, "why          {}", p.why());
            }
            None => {
                let _ = writeln!(s, "the period equals it");
            }
        }
    }
    let _ = writeln!(s, "transfers    {}", transfers_text(&notes.transfers));
    let _ = r.write_tables(s);
}

/// How many leading values the summary shows.
pub const FIRST_VALUES: usize = 8;

/// Summarises a tensor in two lines: statistics, then the first values.
///
/// ```text
///   min 0.0123  max 0.4567  mean 0.1  (20 values)
///   first: [0.1, 0.2, 0.3, ...]
/// ```
/// NaNs are counted and left out of min/max/mean; bool tensors show how many are true.
pub fn summarize(t: &Tensor) -> String {
    let values = t.to_f64_vec();
    let elem = t.elem();
    let mut out = String::new();
    let n = values.len();
    if n == 0 {
        out.push_str("  (no values)\n");
        return out;
    }
    if elem == ElemType::Bool {
        let trues = values.iter().filter(|&&v| v != 0.0).count();
        let _ = writeln!(out, "  true {trues}  false {}  ({n} values)", n - trues);
    } else {
        let finite_or_inf: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let nans = n - finite_or_inf.len();
        if finite_or_inf.is_empty() {
            let _ = writeln!(out, "  all {n} values are nan");
        } else {
            let min = finite_or_inf.iter().copied().fold(f64::INFINITY, f64::min);
            let max = finite_or_inf
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            let mean = finite_or_inf.iter().sum::<f64>() / finite_or_inf.len() as f64;
            let _ = write!(
                out,
                "  min {}  max {}  mean {}  ({n} values",
                number(elem, min),
                number(elem, max),
                short(mean)
            );
            if nans > 0 {
                let _ = write!(out, ", {nans} nan");
            }
            out.push_str(")\n");
        }
    }
    let first: Vec<String> = values
        .iter()
        .take(FIRST_VALUES)
        .map(|&v| number(elem, v))
        .collect();
    let more = if n > FIRST_VALUES { ", ..." } else { "" };
    let _ = writeln!(out, "  first: [{}{more}]", first.join(", "));
    out
}

/// An element printed the way its type reads: integers without a fraction, bools as
/// true/false, floats short.
fn number(elem: ElemType, v: f64) -> String {
    match elem {
        ElemType::Bool => (v != 0.0).to_string(),
        e if e.is_int() => format!("{v:.0}"),
        _ => short(v),
    }
}

/// A float with at most 6 significant digits, as `format_f64` would print it.
fn short(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format_f64(v);
    }
    let rounded: f64 = format!("{v:.5e}").parse().unwrap_or(v);
    format_f64(rounded)
}

/// For a training step (state carried from step to step), the lower bound on the simulated
/// step and its gap: `22.108 ms (recurrence: ...); gap 18.6% = (...) / ... of the
/// simulated step`. The placement model's bound (the `placement` line) is on its busiest
/// resource, which lets steps overlap; the simulator's steps wait for each other's state.
fn step_bound_line(c: &Compiled) -> Option<String> {
    let b = &c.plan.lower_bound;
    let recurrence = b.recurrence?;
    let why = if recurrence >= b.value {
        "recurrence: the longest chain from a state's readers to the writer of its next value, \
         each op at its fastest, which the next step waits for"
            .to_string()
    } else {
        format!("{}: the placement model's bound", b.binding())
    };
    Some(format!(
        "{} ({why}); gap {} of the simulated step",
        seconds(b.step()),
        gap_text(c.report.period, b.step())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn t32(v: Vec<f32>) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).expect("shape"))
    }

    #[test]
    fn floats() {
        let s = summarize(&t32(vec![1.0, -2.0, 0.1, f32::NAN]));
        assert!(s.contains("min -2.0  max 1.0  mean -0.3"), "{s}");
        assert!(s.contains("(4 values, 1 nan)"), "{s}");
        assert!(s.contains("first: [1.0, -2.0, 0.1, nan]"), "{s}");
    }

    #[test]
    fn many_values_are_cut() {
        let s = summarize(&t32((0..20).map(|i| i as f32).collect()));
        assert!(
            s.contains("first: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, ...]"),
            "{s}"
        );
    }

    #[test]
    fn ints_and_bools() {
        let i = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![3, -1, 5]).expect("shape"));
        assert!(
            summarize(&i).contains("min -1  max 5  mean 2.33333"),
            "{}",
            summarize(&i)
        );
        let b = Tensor::Bool(
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).expect("shape"),
        );
        assert!(
            summarize(&b).contains("true 2  false 1"),
            "{}",
            summarize(&b)
        );
        assert!(
            summarize(&b).contains("first: [true, false, true]"),
            "{}",
            summarize(&b)
        );
    }

    #[test]
    fn gaps_and_transfers_read_from_their_numbers() {
        assert_eq!(
            gap_text(3.241e-6, 2.104e-6),
            "35.1% = (3.241 us - 2.104 us) / 3.241 us"
        );
        assert_eq!(gap_percent(0.0, 0.0), "0.0%");
        assert_eq!(gap_percent(1.0, 1.0), "0.0%");
        let t = TransferCount {
            ops: 16,
            per_sample: 17,
            by_reason: vec![
                ("transfer ops".into(), 16),
                ("graph outputs to the host".into(), 1),
            ],
        };
        assert_eq!(
            transfers_text(&t),
            "17 per sample (values the simulator moves between devices): 16 for transfer ops, \
             1 for graph outputs to the host; the placed graph has 16 transfer ops"
        );
        let none = TransferCount {
            ops: 1,
            ..TransferCount::default()
        };
        assert_eq!(
            transfers_text(&none),
            "0 per sample (values the simulator moves between devices); the placed graph has 1 \
             transfer op"
        );
    }

    #[test]
    fn empty_and_all_nan() {
        assert!(summarize(&t32(vec![])).contains("no values"));
        assert!(summarize(&t32(vec![f32::NAN])).contains("all 1 values are nan"));
    }
}
