//! The pass on the ONNX test models (`testdata/models/onnx/*`, imported and specialized on
//! their sample inputs): with every strategy and two targets, the output verifies and the
//! reference interpreter gives bit-identical outputs before and after.

#[path = "../shard/tests/common/mod.rs"]
mod shard_common;

mod common;

use common::onnx_models as models;
use shard_common::{same_bits, shard};
use tessera_ir::interp;
use tessera_shard::Strategy;

#[test]
fn every_model_keeps_its_results_and_verifies() {
    let targets = ["mcm-2x2", "gpu-8"];
    let models = models();
    assert!(models.len() >= 8, "only {} models", models.len());
    let mut failures = Vec::new();
    let mut changed = 0;
    for (name, graph, inputs) in &models {
        let want = interp::run(graph, inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for target_name in targets {
            let target = tessera_targets::resolve(target_name, &[]).expect("built-in target");
            for strategy in [Strategy::Auto, Strategy::Tensor, Strategy::Data] {
                let mut g = graph.clone();
                let (did, _) = shard(&mut g, &*target, &[], strategy);
                let at = format!("{name} on {target_name} with {strategy:?}");
                if let Err(es) = tessera_ir::verify::verify(&g) {
                    failures.push(format!("{at}: does not verify: {}", es[0]));
                    continue;
                }
                match interp::run(&g, inputs) {
                    Ok(got) if same_bits(&want, &got) => {}
                    Ok(_) => failures.push(format!("{at}: outputs changed")),
                    Err(e) => failures.push(format!("{at}: {e}")),
                }
                changed += usize::from(did);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The forced strategies split something in several models.
    assert!(changed >= 4, "only {changed} runs changed a model");
}
