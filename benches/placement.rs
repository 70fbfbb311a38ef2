//! Placement benchmark: tessera's plan against the baselines on real model topologies, for
//! every built-in target, and the solve time on a 100,000-op synthetic DAG.
//!
//! `cargo bench -p tessera --bench placement` prints markdown tables (the README's
//! "Placement" section holds a run). Models: those of `common/models.rs`.
//!
//! Methods, all simulated by the same discrete-event simulator after the same scheduling:
//! - `tessera`: what `tessera compile` does (`auto` for the throughput objective, then the
//!   model's best four plans simulated and the simulator's best kept); its time column is
//!   that whole placement;
//! - `one device`: `single` (every op on the best single device that holds it);
//! - `round-robin`, `greedy`: the baselines of `tessera_place::strategy::baseline`;
//! - `METIS`: `gpmetis` (Debian's `metis`) splits the op graph (vertex weight: fastest time;
//!   edge weight: bytes) into one part per device, parts are mapped to devices greedily by
//!   traffic times hops, pinned ops stay pinned and ops a device cannot run go to their
//!   fastest device. Plans that overflow a device's memory are reported as `over memory`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

#[path = "common/models.rs"]
mod common_models;

use common_models::models;
use tessera::commands::compile::{PlaceSettings, compile};
use tessera_ir::Graph;
use tessera_place::build::build;
use tessera_place::eval::violation;
use tessera_place::pass::{apply_order, rank_order};
use tessera_place::problem::{Device, Edge, Link, OpSpec, Problem};
use tessera_place::{Instance, Objective};
use tessera_targets::{CostModel, SimOptions, TargetSpec, simulate};

/// gpmetis's partition of the problem's op graph into `k` parts, or `None` if gpmetis is
/// missing or fails.
fn metis_parts(inst: &Instance, k: usize) -> Option<Vec<usize>> {
    let n = inst.n;
    let mut adj: Vec<BTreeMap<usize, u64>> = vec![BTreeMap::new(); n];
    for e in &inst.problem.edges {
        let w = e.bytes / 1024 + 1;
        *adj[e.from].entry(e.to).or_insert(0) += w;
        *adj[e.to].entry(e.from).or_insert(0) += w;
    }
    let m: usize = adj.iter().map(|a| a.len()).sum::<usize>() / 2;
    let mut text = format!("{n} {m} 011\n");
    for (o, a) in adj.iter().enumerate() {
        let w = (inst.min_time(o) * 1e9).round().max(1.0) as u64;
        let _ = write!(text, "{w}");
        for (&v, &ew) in a {
            let _ = write!(text, " {} {}", v + 1, ew);
        }
        text.push('\n');
    }
    let dir = tempfile::tempdir().ok()?;
    let file = dir.path().join("g.metis");
    std::fs::write(&file, text).ok()?;
    let status = Command::new("gpmetis")
        .arg(&file)
        .arg(k.to_string())
        .output()
        .ok()?;
    if !status.status.success() {
        return None;
    }
    let parts = std::fs::read_to_string(dir.path().join(format!("g.metis.part.{k}"))).ok()?;
    parts
        .lines()
        .map(|l| l.trim().parse::<usize>().ok())
        .collect()
}

/// METIS parts mapped onto devices: parts by decreasing traffic, each to the free device
/// with the least traffic times hops to the parts already mapped; the part holding the most
/// ops pinned to the host goes to the host first.
fn metis_assignment(inst: &Instance) -> Option<Vec<usize>> {
    let usable: Vec<usize> = (0..inst.d)
        .filter(|&k| (0..inst.n).any(|o| inst.allowed(o, k)))
        .collect();
    let k = usable.len();
    let parts = if k == 1 {
        vec![0; inst.n]
    } else {
        metis_parts(inst, k)?
    };
    let mut traffic = vec![vec![0u64; k]; k];
    for e in &inst.problem.edges {
        let (a, b) = (parts[e.from], parts[e.to]);
        if a != b {
            traffic[a][b] += e.bytes;
            traffic[b][a] += e.bytes;
        }
    }
    let mut device_of = vec![usize::MAX; k];
    let mut free: Vec<usize> = usable.clone();
    // Pinned ops pull their part to their device.
    let mut pulls: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for (o, &part) in parts.iter().enumerate() {
        let allowed: Vec<usize> = (0..inst.d).filter(|&d| inst.allowed(o, d)).collect();
        if let [d] = allowed[..] {
            *pulls.entry((part, d)).or_insert(0) += 1;
        }
    }
    let mut pulls: Vec<((usize, usize), usize)> = pulls.into_iter().collect();
    pulls.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    for ((p, d), _) in pulls {
        if device_of[p] == usize::MAX && free.contains(&d) {
            device_of[p] = d;
            free.retain(|&x| x != d);
        }
    }
    let mut order: Vec<usize> = (0..k).collect();
    order.sort_by_key(|&p| std::cmp::Reverse(traffic[p].iter().sum::<u64>()));
    for p in order {
        if device_of[p] != usize::MAX {
            continue;
        }
        let best = free.iter().copied().min_by_key(|&d| {
            (0..k)
                .filter(|&q| device_of[q] != usize::MAX)
                .map(|q| traffic[p][q] * inst.hops[d * inst.d + device_of[q]] as u64)
                .sum::<u64>()
        })?;
        device_of[p] = best;
        free.retain(|&x| x != best);
    }
    Some(
        (0..inst.n)
            .map(|o| {
                let d = device_of[parts[o]];
                if inst.allowed(o, d) {
                    d
                } else {
                    tessera_place::strategy::baseline::fastest(inst, o)
                }
            })
            .collect(),
    )
}

/// Simulated (throughput, latency) of an assignment, or why there is none.
fn simulate_plan(
    graph: &Graph,
    cost: &CostModel<'_>,
    built: &tessera_place::build::Built,
    inst: &Instance,
    assign: &[usize],
) -> Result<(f64, f64), String> {
    if let Some(why) = violation(inst, assign) {
        return Err(if why.contains("bytes") {
            "over memory".into()
        } else {
            why
        });
    }
    let mut g = graph.clone();
    for (o, &d) in assign.iter().enumerate() {
        if let Some(op) = built.graph_ops[o] {
            g.op_mut(op).device = Some(inst.device_name(d).to_string());
        }
    }
    apply_order(&mut g, built, &rank_order(inst, assign));
    let devices =
        tessera_targets::placement_from_graph(&g, cost.spec(), None).map_err(|e| e.to_string())?;
    let r = simulate(&g, cost, &devices, &SimOptions { samples: Some(8) })
        .map_err(|e| e.to_string())?;
    Ok((r.throughput, r.latency))
}

fn fmt_thr(x: &Result<(f64, f64), String>) -> String {
    match x {
        Ok((t, _)) => format!("{t:.0}"),
        Err(e) if e == "over memory" => "over memory".into(),
        Err(_) => "n/a".into(),
    }
}

fn assignment_of(inst: &Instance, plan: &tessera_place::Plan) -> Vec<usize> {
    plan.assignment
        .iter()
        .map(|a| {
            (0..inst.d)
                .find(|&k| inst.device_name(k) == a.device)
                .unwrap_or(0)
        })
        .collect()
}

fn model_table(targets: &[TargetSpec]) -> String {
    let mut s = String::new();
    s.push_str(
        "| model | ops | target | tessera (samples/s) | chosen | latency (us) | gap | place (s) | one device | round-robin | greedy | METIS |\n\
         | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for (name, graph) in models() {
        for target in targets {
            let cost = CostModel::new(target, None);
            let Ok(built) = build(&graph, &cost) else {
                continue;
            };
            let Ok(inst) = Instance::new(built.problem.clone()) else {
                continue;
            };
            let ops = built.graph_ops.iter().filter(|o| o.is_some()).count();
            let start = Instant::now();
            // tessera's plan as `tessera compile` makes it: `auto`, then the model's best few
            // plans simulated, the simulator's best kept.
            let compiled = compile(
                graph.clone(),
                target,
                None,
                Some(8),
                &PlaceSettings::default(),
            );
            let solve = start.elapsed().as_secs_f64();
            let (ours, chosen, gap) = match &compiled {
                Ok(c) => (
                    Ok((c.report.throughput, c.report.latency)),
                    c.plan.chosen.clone(),
                    format!("{:.0}%", c.plan.gap * 100.0),
                ),
                Err(e) => (Err(e.to_string()), "-".into(), "-".into()),
            };
            let mut base = Vec::new();
            for strategy in ["single", "round-robin", "greedy"] {
                let r = tessera_place::solve(&inst, strategy, Objective::Throughput, false)
                    .map_err(|e| {
                        if e.to_string().contains("bytes") || e.to_string().contains("memory") {
                            "over memory".to_string()
                        } else {
                            e.to_string()
                        }
                    })
                    .and_then(|p| {
                        simulate_plan(&graph, &cost, &built, &inst, &assignment_of(&inst, &p))
                    });
                base.push(fmt_thr(&r));
            }
            let metis = match metis_assignment(&inst) {
                Some(a) => simulate_plan(&graph, &cost, &built, &inst, &a),
                None => Err("gpmetis missing".into()),
            };
            let _ = writeln!(
                s,
                "| {name} | {ops} | {} | {} | {chosen} | {} | {gap} | {solve:.3} | {} | {} | {} | {} |",
                target.name,
                fmt_thr(&ours),
                ours.as_ref()
                    .map_or("-".into(), |(_, l)| format!("{:.1}", l * 1e6)),
                base[0],
                base[1],
                base[2],
                fmt_thr(&metis),
            );
            eprintln!("{name} on {}: {solve:.3} s", target.name);
        }
    }
    s
}

/// A layered random DAG of `n` ops on the compute devices and links of `target`.
pub fn synthetic(n: usize, target: &TargetSpec) -> Problem {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let devices: Vec<Device> = target
        .devices
        .iter()
        .map(|d| Device {
            name: d.name.clone(),
            kind: d.kind.clone(),
            memory: d.memory_bytes,
            unsupported_ops: Vec::new(),
            overlap: d.overlap,
        })
        .collect();
    let kinds: Vec<String> = {
        let mut k: Vec<String> = devices.iter().map(|d| d.kind.clone()).collect();
        k.sort();
        k.dedup();
        k
    };
    let mut ops = Vec::with_capacity(n);
    let mut edges = Vec::new();
    let mut out_bytes: Vec<u64> = Vec::with_capacity(n);
    for o in 0..n {
        out_bytes.push(1024 * (1 + next() % 64));
        let base = (1 + next() % 100) as f64 * 1e-7;
        let time = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), base * (1.0 + i as f64 * 4.0)))
            .collect();
        ops.push(OpSpec {
            name: format!("op{o}"),
            kind: "matmul".into(),
            time,
            memory: 1000 + next() % 4000,
            colocate: None,
            pin: None,
            spmd: Vec::new(),
            splits: Vec::new(),
        });
        if o > 0 {
            let preds = 1 + next() % 3;
            for _ in 0..preds {
                let back = 1 + (next() % 64) as usize;
                let from = o.saturating_sub(back);
                edges.push(Edge {
                    from,
                    to: o,
                    bytes: out_bytes[from],
                    tensor: 0,
                    operand: 0,
                });
            }
        }
    }
    edges.sort_by_key(|e| (e.from, e.to));
    edges.dedup_by_key(|e| (e.from, e.to));
    Problem {
        version: 1,
        name: format!("synthetic {n}-op DAG on {}", target.name),
        devices,
        routers: Vec::new(),
        links: target.links.iter().map(Link::from).collect(),
        ops,
        edges,
        groups: Vec::new(),
        carried: Vec::new(),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let targets = tessera_targets::builtin_targets();
    let mcm = targets
        .iter()
        .find(|t| t.name == "mcm-4x4")
        .expect("mcm-4x4 is built in")
        .clone();
    println!("### Solve time on a 100,000-op synthetic DAG (mcm-4x4)\n");
    println!("| objective | strategy | chosen | value (us) | lower bound (us) | gap | solve (s) |");
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: |");
    let n = if quick { 10_000 } else { 100_000 };
    let inst = Instance::new(synthetic(n, &mcm)).expect("valid synthetic problem");
    for objective in [Objective::Throughput, Objective::Latency] {
        let start = Instant::now();
        match tessera_place::solve(&inst, "auto", objective, true) {
            Ok(p) => println!(
                "| {objective} | auto | {} | {:.1} | {:.1} | {:.1}% | {:.2} |",
                p.chosen,
                p.value * 1e6,
                p.lower_bound.value * 1e6,
                p.gap * 100.0,
                start.elapsed().as_secs_f64()
            ),
            Err(e) => println!("| {objective} | auto | error: {e} | | | | |"),
        }
    }
    if quick {
        return;
    }
    println!("\n### Models (throughput objective; simulated samples/s, higher is better)\n");
    print!("{}", model_table(&targets));
}
