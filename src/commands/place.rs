//! `tessera place` (solve a placement problem) and `tessera explain` (why an op is where it is).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tessera_place::explain::render;
use tessera_place::{Instance, Objective, Plan, Problem};

/// Runs `tessera place`.
pub fn run(
    problem: &Path,
    objective: Objective,
    strategy: &str,
    output: Option<&Path>,
    explain: bool,
) -> Result<()> {
    let p = Problem::load(problem)?;
    let inst = Instance::new(p).with_context(|| format!("{}", problem.display()))?;
    let start = Instant::now();
    let plan = tessera_place::solve(&inst, strategy, objective, explain)
        .with_context(|| format!("{}", problem.display()))?;
    let elapsed = start.elapsed().as_secs_f64();
    eprintln!(
        "{}: {} chose {}; {} {} (lower bound {}, gap {:.1}%); solved in {:.3} s",
        problem.display(),
        plan.strategy,
        plan.chosen,
        plan.objective,
        tessera_targets::sim::seconds(plan.value),
        tessera_targets::sim::seconds(plan.lower_bound.value),
        plan.gap * 100.0,
        elapsed
    );
    let json = plan.try_to_json()?;
    match output {
        Some(path) => super::write_atomically(path, json.as_bytes()),
        None => super::print_stdout(&json),
    }
}

/// Runs `tessera explain`.
pub fn explain(plan: &Path, ops: &[String]) -> Result<()> {
    let text =
        std::fs::read_to_string(plan).with_context(|| format!("cannot read {}", plan.display()))?;
    let plan_data = Plan::parse(&text, &plan.display().to_string())?;
    if plan_data.explanations.is_empty() {
        bail!(
            "{}: the plan has no explanations (it was made with --no-explain)",
            plan.display()
        );
    }
    let mut out = String::new();
    if ops.is_empty() {
        for e in &plan_data.explanations {
            out.push_str(&render(e));
        }
    } else {
        for name in ops {
            let Some(e) = plan_data.explanation(name) else {
                let names: Vec<&str> = plan_data
                    .explanations
                    .iter()
                    .map(|e| e.op.as_str())
                    .collect();
                let hint = tessera_passes::closest(name, &names)
                    .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
                bail!("{}: no op named `{name}` in the plan{hint}", plan.display());
            };
            out.push_str(&render(e));
        }
    }
    super::print_stdout(&out)
}
