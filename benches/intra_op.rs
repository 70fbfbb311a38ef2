//! Alpa's intra-operator integer program against tessera's `split` local search, on the split
//! problems `compile` builds (one per device group; of the graph after `unfuse-split`):
//! which method chooses the splits is decided by this measurement (issue 18).
//!
//! `cargo bench -p tessera --bench intra_op [-- --only NAME,...]` prints two markdown tables
//! (throughput objective, then latency): per model, target and device group, the value the
//! placement model gives the plan of
//! - `local search`: the `split` strategy's search from its own starts only
//!   (`split::solve_local`: the best whole plan, two greedy plans, everything on a group op by
//!   op);
//! - `intra-op`: the integer program alone (every op on the group; `*` when branch and bound
//!   did not prove it optimal within its node limit), with its size;
//! - `split`: the strategy as `compile` runs it, the same search with the program's plan as
//!   its last start (so never worse than `local search`);
//!
//! and each one's solve time.

#[path = "common/models.rs"]
mod common_models;

use std::time::Instant;

use common_models::models;
use tessera_place::apply::{SplitMode, split_problems};
use tessera_place::build::{BuildOptions, build_with};
use tessera_place::strategy::{Solution, SolveOptions, intra_op, split};
use tessera_place::{Instance, Objective};
use tessera_targets::{CostModel, Target};

fn fmt(v: f64) -> String {
    if v >= 1e-3 {
        format!("{:.3} ms", v * 1e3)
    } else {
        format!("{:.1} us", v * 1e6)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let only: Option<Vec<String>> = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_string).collect());
    let models: Vec<_> = models()
        .into_iter()
        .filter(|(n, _)| only.as_ref().is_none_or(|o| o.contains(n)))
        .map(|(n, mut g)| {
            tessera_passes::unfuse_split(&mut g, &mut tessera_passes::Statistics::default())
                .expect("unfuse-split");
            (n, g)
        })
        .collect();
    for objective in [Objective::Throughput, Objective::Latency] {
        println!("\n### {objective} objective: the model's value of each plan, lower is better\n");
        table(&models, SolveOptions { objective });
    }
}

fn table(models: &[(String, tessera_ir::Graph)], opts: SolveOptions) {
    println!(
        "| model | target | group | local search | s | intra-op | variables | s | split | s |"
    );
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, graph) in models {
        for spec in tessera_targets::builtin_targets() {
            let target: std::sync::Arc<dyn Target> = std::sync::Arc::new(spec.clone());
            let cost = CostModel::new(target.as_ref(), None);
            let Ok(built) = build_with(graph, &cost, &BuildOptions { splits: true }) else {
                continue;
            };
            let Ok(full) = Instance::new(built.problem) else {
                continue;
            };
            for p in split_problems(&full, SplitMode::Auto, &[], false) {
                let group = p.groups[0].name.clone();
                let Ok(inst) = Instance::new(p) else { continue };
                let clock = Instant::now();
                let local = split::solve_local(&inst, &opts);
                let t_local = clock.elapsed().as_secs_f64();
                let clock = Instant::now();
                let program = intra_op::on_group(&inst, 0);
                let t_program = clock.elapsed().as_secs_f64();
                let value = |s: &Solution| fmt(s.value(&inst, opts.objective));
                let (program_cell, vars) = match &program {
                    Ok(p) => {
                        let s = Solution::in_problem_order(&inst, p.assign.clone());
                        let mark = if p.optimal { "" } else { " *" };
                        (format!("{}{mark}", value(&s)), p.vars.to_string())
                    }
                    Err(e) => (format!("error: {e}"), String::new()),
                };
                let clock = Instant::now();
                let both = split::solve(&inst, &opts)
                    .map_or_else(|e| format!("error: {e}"), |s| value(&s));
                let t_both = clock.elapsed().as_secs_f64();
                println!(
                    "| {name} | {} | {group} | {} | {t_local:.2} | {program_cell} | {vars} | {t_program:.2} | {both} | {t_both:.2} |",
                    spec.name,
                    local.map_or_else(|e| format!("error: {e}"), |s| value(&s)),
                );
            }
        }
    }
}
