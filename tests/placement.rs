//! Placement end to end: every ONNX test model compiled for every built-in target, with both
//! objectives, gives a feasible plan whose simulated numbers are reported, whose lower bound
//! is below its value, and whose placed (and scheduled) IR computes exactly what the model
//! computes in the reference interpreter.

use std::path::Path;

use tessera::commands::compile::{PlaceSettings, compile, summary};
use tessera_place::Objective;

mod common;

use common::onnx_models;

#[test]
fn every_model_on_every_builtin_target_places_feasibly_and_computes_the_same() {
    let models = onnx_models();
    assert!(models.len() >= 8, "expected the ONNX test corpus");
    let targets = tessera_targets::builtin_targets();
    let mut reported = 0;
    for (name, graph, inputs) in &models {
        let reference = tessera_ir::interp::run(graph, inputs)
            .unwrap_or_else(|e| panic!("{name}: reference run: {e}"));
        for target in &targets {
            for objective in [Objective::Throughput, Objective::Latency] {
                let what = format!("{name} on {} for {objective}", target.name);
                let settings = PlaceSettings {
                    objective,
                    ..PlaceSettings::default()
                };
                let c = compile(graph.clone(), target, None, Some(2), &settings)
                    .unwrap_or_else(|e| panic!("{what}: {e:#}"));
                let plan = &c.plan;
                assert!(plan.value.is_finite() && plan.value >= 0.0, "{what}");
                assert!(
                    plan.lower_bound.value <= plan.value * (1.0 + 1e-9),
                    "{what}: bound {} above value {}",
                    plan.lower_bound.value,
                    plan.value
                );
                for d in &plan.devices {
                    assert!(d.memory <= d.capacity, "{what}: {} overflows", d.name);
                }
                for d in &c.report.devices {
                    assert!(
                        d.peak_memory <= d.capacity,
                        "{what}: simulated peak on {} overflows",
                        d.name
                    );
                }
                // Every op got a device of the target.
                for &op in c.graph.ops() {
                    let dev = c.graph.op(op).device.as_deref();
                    if !matches!(c.graph.op(op).op, tessera_ir::Op::Const(_)) {
                        assert!(
                            dev.is_some_and(|d| target.device(d).is_some()),
                            "{what}: {op} on {dev:?}"
                        );
                    }
                }
                let text = summary(Path::new(name), target, &c);
                assert!(
                    text.contains("\nlatency ") && text.contains("\nthroughput "),
                    "{what}: {text}"
                );
                reported += 1;
                let outputs = tessera_ir::interp::run(&c.graph, inputs)
                    .unwrap_or_else(|e| panic!("{what}: placed run: {e}"));
                assert_eq!(outputs, reference, "{what}: outputs differ");
            }
        }
    }
    assert_eq!(reported, models.len() * targets.len() * 2);
}

/// Problems with split alternatives (`--split-alternatives`): every test model's on every
/// built-in target validates, and the `split` strategy places it feasibly within its bound;
/// GPT-2 tiny offers the splits tensor parallelism needs (vocab-parallel embedding,
/// column- and row-parallel linear layers, heads through reshape and transpose,
/// replicated layer norms).
#[test]
fn every_model_offers_split_alternatives_that_solve() {
    use tessera_place::build::{BuildOptions, build_with};
    use tessera_place::strategy::{self, SolveOptions};
    use tessera_place::{Instance, lower_bound, violation};
    use tessera_targets::{CostModel, Target};
    let options = BuildOptions { splits: true };
    let mut seen: std::collections::BTreeSet<(String, String)> = Default::default();
    for (name, graph, _) in onnx_models() {
        // A mesh of chiplets, GPUs behind a switch, and a CPU with GPUs of two kinds.
        for spec in tessera_targets::builtin_targets()
            .into_iter()
            .filter(|t| ["mcm-4x4", "gpu-8", "hetero-cpu-gpu"].contains(&t.name.as_str()))
        {
            let target: std::sync::Arc<dyn Target> = std::sync::Arc::new(spec.clone());
            let cost = CostModel::new(target.as_ref(), None);
            let built = build_with(&graph, &cost, &options)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}", spec.name));
            let p = &built.problem;
            // A group per block of two or more devices of one kind.
            let shared_kind = p
                .devices
                .iter()
                .any(|d| p.devices.iter().filter(|e| e.kind == d.kind).count() > 1);
            assert_eq!(!p.groups.is_empty(), shared_kind, "{name} on {}", spec.name);
            if name == "gpt2_tiny" && spec.name == "mcm-4x4" {
                for op in &p.ops {
                    for s in &op.splits {
                        seen.insert((
                            op.kind.clone(),
                            format!("{} {:?}->{:?}", s.axis, s.inputs, s.outputs),
                        ));
                    }
                }
            }
            let inst = Instance::new(built.problem.clone())
                .unwrap_or_else(|e| panic!("{name} on {}: {e}", spec.name));
            let opts = SolveOptions {
                objective: Objective::Throughput,
            };
            let (sol, _, _) = strategy::run("split", &inst, &opts)
                .unwrap_or_else(|e| panic!("{name} on {}: {e}", spec.name));
            assert_eq!(
                violation(&inst, &sol.assign),
                None,
                "{name} on {}",
                spec.name
            );
            let bound = lower_bound(&inst, Objective::Throughput).expect("bound");
            let value = sol.value(&inst, Objective::Throughput);
            assert!(
                bound.value <= value * (1.0 + 1e-9),
                "{name} on {}: bound {} above {value}",
                spec.name,
                bound.value
            );
        }
    }
    let has = |kind: &str, what: &str| seen.contains(&(kind.to_string(), what.to_string()));
    let shown: Vec<String> = seen.iter().map(|(k, w)| format!("{k}: {w}")).collect();
    for (kind, what) in [
        // A weight's layout is how its resident copy is cut.
        ("gather", r#"vocab ["S0", "R"]->["P"]"#),
        ("gemm", r#"columns ["R", "S1"]->["S1"]"#),
        ("gemm", r#"rows ["S1", "S0"]->["P"]"#),
        ("matmul", r#"heads ["S1", "S1"]->["S1"]"#),
        ("transpose", r#"heads ["S2"]->["S1"]"#),
        ("layer-norm", r#"replicated ["R", "R", "R"]->["R"]"#),
        ("softmax", r#"heads ["S1"]->["S1"]"#),
    ] {
        assert!(
            has(kind, what),
            "gpt2_tiny lacks {kind} {what}; it has:\n{}",
            shown.join("\n")
        );
    }
}
