//! Splitting benchmark: placement with split alternatives (`compile --split-alternatives`,
//! solved by `auto`) against placement without them, a Megatron-style manual tensor-parallel
//! plan and one device, on every model of `common/models.rs` and every built-in target.
//!
//! `cargo bench -p tessera --bench splitting [-- --only NAME,...]` prints two markdown tables
//! (throughput objective: the period; latency objective: one sample's latency), the README's
//! "Splitting" section holds a run. The values are the placement model's (split plans cannot
//! be realized as graphs and simulated yet). Columns:
//! - `one device`: `single` on the problem without splits (every op on the best device that
//!   holds it all);
//! - `no split`: `auto` on the problem without splits;
//! - `Megatron TP`: every op on the group of all devices of the most numerous kind, each
//!   taking, in op order, the alternative that reads its operands as they arrive (a matmul or
//!   gemm by rows after a split input, else by columns; the embedding by vocabulary; attention
//!   by heads), else the replicated one; inputs and outputs on the host;
//! - `tessera`: `auto` on the problem with splits, its lower bound (valid for every plan,
//!   split or not), gap and solve time.

#[path = "common/models.rs"]
mod common_models;

use std::time::Instant;

use common_models::models;
use tessera_place::build::{BuildOptions, build, build_with};
use tessera_place::eval::{evaluate, problem_order, violation};
use tessera_place::split::{Layout, in_layout, out_layout};
use tessera_place::strategy::{self, SolveOptions};
use tessera_place::{Instance, Objective, lower_bound};
use tessera_targets::{CostModel, Target, TargetSpec};

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
                    .find(|&a| spec[a].axis != "replicated" && as_arrives(a))
            })
            .or_else(|| named("replicated"))
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

fn row(name: &str, spec: &TargetSpec, graph: &tessera_ir::Graph, objective: Objective) -> String {
    let target: std::sync::Arc<dyn Target> = std::sync::Arc::new(spec.clone());
    let cost = CostModel::new(target.as_ref(), None);
    let (Ok(plain), Ok(splits)) = (
        build(graph, &cost),
        build_with(graph, &cost, &BuildOptions { splits: true }),
    ) else {
        return format!("| {name} | {} | cannot build | | | | | | |", spec.name);
    };
    let opts = SolveOptions { objective };
    let value = |inst: &Instance, assign: &[usize]| {
        violation(inst, assign)
            .is_none()
            .then(|| evaluate(inst, assign, &problem_order(inst)).value(objective))
    };
    let (one, no_split) = match Instance::new(plain.problem) {
        Ok(inst) => (
            strategy::run("single", &inst, &opts)
                .ok()
                .and_then(|s| value(&inst, &s.0.assign)),
            strategy::run("auto", &inst, &opts)
                .ok()
                .map(|s| s.0.value(&inst, objective)),
        ),
        Err(_) => (None, None),
    };
    let Ok(inst) = Instance::new(splits.problem) else {
        return format!("| {name} | {} | infeasible | | | | | | |", spec.name);
    };
    let manual = megatron(&inst).and_then(|a| value(&inst, &a));
    let start = Instant::now();
    let found = strategy::run("auto", &inst, &opts);
    let solve = start.elapsed().as_secs_f64();
    let bound = lower_bound(&inst, objective).map(|b| b.value).ok();
    let (tessera, chosen) = match &found {
        Ok((s, chosen, _)) => (Some(s.value(&inst, objective)), chosen.clone()),
        Err(_) => (None, "none".into()),
    };
    let splits_used = found
        .as_ref()
        .map(|(s, _, _)| s.assign.iter().filter(|&&x| x >= inst.d).count())
        .unwrap_or(0);
    let gap = match (tessera, bound) {
        (Some(t), Some(b)) if t > 0.0 => format!("{:.1}%", (t - b).max(0.0) / t * 100.0),
        _ => String::new(),
    };
    format!(
        "| {name} | {} | {} | {} | {} | {} ({chosen}, {splits_used} split) | {} | {gap} | {solve:.2} |",
        spec.name,
        fmt(one),
        fmt(no_split),
        if inst.problem.groups.is_empty() {
            "no group".into()
        } else {
            fmt(manual)
        },
        fmt(tessera),
        fmt(bound),
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
            "| model | target | one device | no split | Megatron TP | tessera (chosen, ops split) | lower bound | gap | solve (s) |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (name, graph) in &models {
            for spec in &targets {
                println!("{}", row(name, spec, graph, objective));
            }
        }
    }
}
