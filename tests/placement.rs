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
                let c = compile(graph.clone(), target, None, 2, &settings)
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
