//! Splitting benchmark: `tessera compile` with splitting (`--split auto`, the default) against
//! compile without it (`--split off`), a Megatron-style manual tensor-parallel plan and one
//! device, on every model of `common/models.rs` and every built-in target.
//!
//! `cargo bench -p tessera --bench splitting [-- --only NAME,...]` prints two markdown tables
//! (throughput objective: the period; latency objective: one sample's latency), the README's
//! "Splitting" section holds a run. Every value is the simulator's, of the placed graph (split
//! plans applied: mesh, shardings, collectives), but `tessera, model` (the placement model's
//! value of the plan compile kept) and the lower bound. Columns:
//! - `one device`: compile with `--strategy single --split off` (every op on the best device
//!   that holds it all);
//! - `no split`: compile with `--split off`;
//! - `Megatron TP`: every op on the group of all devices of the most numerous kind, each
//!   taking, in op order, the alternative that reads its operands as they arrive (a matmul or
//!   gemm by rows after a split input, else by columns; the embedding by vocabulary; attention
//!   by heads; softmax by heads, layer norm replicated), else the replicated one; inputs and
//!   outputs on the host; of the graph with fused projections unfused (`unfuse-split`), as
//!   Megatron-LM splits query, key and value;
//! - `tessera`: compile (`--split auto`), with the number of ops split (not counting ops
//!   replicated over the mesh), its lower bound (valid for every plan, split or not), the gap
//!   of the simulated value to it and the whole compile's time (placement and the
//!   simulations of its candidates).

#[path = "common/models.rs"]
mod common_models;

use std::time::Instant;

use common_models::models;
use tessera::commands::compile::{Compiled, PlaceSettings, compile, realize};
use tessera_place::alternatives::REPLICATED;
use tessera_place::apply::SplitMode;
use tessera_place::build::{BuildOptions, build_with};
use tessera_place::eval::violation;
use tessera_place::split::{Layout, in_layout, out_layout};
use tessera_place::{Instance, Objective};
use tessera_targets::{CostModel, Target, TargetSpec};

/// Samples in each simulated stream: compile's default, as many as the steady state needs.
const SAMPLES: Option<usize> = None;

/// The Megatron-style plan (see the module doc), or `None` without a group.
fn megatron(inst: &Instance) -> Option<Vec<usize>> {
    let g = (0..inst.problem.groups.len())
        .max_by_key(|&g| (inst.place_devices[inst.d + g].len(), usize::MAX - g))?;
    let place = inst.d + g;
    let first = inst.place_devices[place][0];
    let mut assign = vec![usize::MAX; inst.n];
    for o in 0..inst.n {
        let here: Vec<usize> = (0..inst.alts[o].len())
            .filter(|&a| inst.alts[o][a].allowed && inst.alts[o][a].group == g)
            .collect();
        if here.is_empty() {
            let whole = if inst.allowed(o, first) {
                first
            } else {
                (0..inst.d).find(|&k| inst.allowed(o, k))?
            };
            assign[o] = whole;
            continue;
        }
        // Does alternative `a` read every operand as it arrives?
        let as_arrives = |a: usize| {
            inst.in_edges[o].iter().all(|&e| {
                let edge = &inst.problem.edges[e];
                let u = edge.from;
                let from = out_layout(inst, u, assign[u], edge.tensor);
                let need = in_layout(inst, o, inst.d + a, edge.operand);
                inst.place_of(u, assign[u]) == place
                    && (from == need
                        || (from == Layout::Replicated && matches!(need, Layout::Split(_))))
            })
        };
        let spec = &inst.problem.ops[o].splits;
        let named = |name: &str| here.iter().copied().find(|&a| spec[a].axis == name);
        // Megatron-LM splits attention's softmax by heads and replicates layer norms: no
        // partial reductions.
        let normalizes = matches!(
            inst.problem.ops[o].kind.as_str(),
            "softmax" | "log-softmax" | "layer-norm"
        );
        if normalizes {
            let pick = named("heads")
                .filter(|&a| as_arrives(a))
                .or_else(|| named(REPLICATED))
                .unwrap_or(here[0]);
            assign[o] = inst.d + pick;
            continue;
        }
        let preferred = [
            named("rows"),
            named("columns"),
            named("vocab"),
            named("heads"),
        ];
        let pick = preferred
            .into_iter()
            .flatten()
            .find(|&a| as_arrives(a))
            .or_else(|| {
                here.iter()
                    .copied()
                    .find(|&a| spec[a].axis != REPLICATED && as_arrives(a))
            })
            .or_else(|| named(REPLICATED))
            .unwrap_or(here[0]);
        assign[o] = inst.d + pick;
    }
    Some(assign)
}

fn fmt(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 1e-3 => format!("{:.3} ms", v * 1e3),
        Some(v) => format!("{:.1} us", v * 1e6),
        None => "over memory".into(),
    }
}

/// A compile's simulated value for `objective`, and the compile.
fn compiled(
    graph: &tessera_ir::Graph,
    target: &dyn Target,
    strategy: &str,
    split: SplitMode,
    objective: Objective,
) -> Option<(f64, Compiled)> {
    let settings = PlaceSettings {
        strategy,
        objective,
        split,
        ..PlaceSettings::default()
    };
    let c = compile(graph.clone(), target, None, SAMPLES, &settings).ok()?;
    Some((simulated(&c.report, objective), c))
}

fn simulated(r: &tessera_targets::SimReport, objective: Objective) -> f64 {
    match objective {
        Objective::Throughput => r.period,
        Objective::Latency => r.latency,
    }
}

fn row(name: &str, spec: &TargetSpec, graph: &tessera_ir::Graph, objective: Objective) -> String {
    let target: std::sync::Arc<dyn Target> = std::sync::Arc::new(spec.clone());
    let cost = CostModel::new(target.as_ref(), None);
    // Megatron-LM splits query, key and value as three column-parallel products: its plan
    // is of the graph with fused projections unfused.
    let mut unfused = graph.clone();
    tessera_passes::unfuse_split(&mut unfused, &mut tessera_passes::Statistics::default())
        .expect("unfuse-split");
    let Ok(splits) = build_with(&unfused, &cost, &BuildOptions { splits: true }) else {
        return format!("| {name} | {} | cannot build | | | | | | | |", spec.name);
    };
    let one = compiled(graph, target.as_ref(), "single", SplitMode::Off, objective).map(|c| c.0);
    let no_split = compiled(graph, target.as_ref(), "auto", SplitMode::Off, objective).map(|c| c.0);
    let Ok(inst) = Instance::new(splits.problem.clone()) else {
        return format!("| {name} | {} | infeasible | | | | | | | |", spec.name);
    };
    // The Megatron-style plan, simulated when the model finds it within memory.
    let manual = megatron(&inst).and_then(|a| {
        violation(&inst, &a).is_none().then_some(())?;
        let (_, report, _, _) = realize(
            &unfused,
            &splits,
            &inst,
            &a,
            &cost,
            SAMPLES,
            tessera::commands::compile::StepSettings::default(),
        )
        .ok()?;
        Some(simulated(&report, objective))
    });
    let start = Instant::now();
    let found = compiled(graph, target.as_ref(), "auto", SplitMode::Auto, objective);
    let solve = start.elapsed().as_secs_f64();
    let Some((tessera, c)) = found else {
        return format!(
            "| {name} | {} | {} | {} | {} | none | | | | {solve:.2} |",
            spec.name,
            fmt(one),
            fmt(no_split),
            fmt(manual)
        );
    };
    let split_ops: usize = c
        .plan
        .split_axes()
        .iter()
        .filter(|&(&a, _)| a != REPLICATED)
        .map(|(_, n)| n)
        .sum();
    let bound = c.plan.lower_bound.value;
    let gap = if tessera > 0.0 {
        format!("{:.1}%", (tessera - bound).max(0.0) / tessera * 100.0)
    } else {
        String::new()
    };
    format!(
        "| {name} | {} | {} | {} | {} | {} ({split_ops}) | {} | {} | {gap} | {solve:.2} |",
        spec.name,
        fmt(one),
        fmt(no_split),
        if inst.problem.groups.is_empty() {
            "no group".into()
        } else {
            fmt(manual)
        },
        fmt(Some(tessera)),
        fmt(Some(c.plan.value)),
        fmt(Some(bound)),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_string).collect());
    let targets = tessera_targets::builtin_targets();
    let models: Vec<_> = models()
        .into_iter()
        .filter(|(n, _)| only.as_ref().is_none_or(|o| o.contains(n)))
        .collect();
    for objective in [Objective::Throughput, Objective::Latency] {
        let what = match objective {
            Objective::Throughput => "period (throughput objective)",
            Objective::Latency => "latency (latency objective)",
        };
        println!("\n### {what}, lower is better\n");
        println!(
            "| model | target | one device | no split | Megatron TP | tessera (ops split) | tessera, model | lower bound | gap | compile (s) |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (name, graph) in &models {
            for spec in &targets {
                println!("{}", row(name, spec, graph, objective));
            }
        }
    }
}
