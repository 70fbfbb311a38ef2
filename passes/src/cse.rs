//! `cse`: merges ops that compute the same thing (same op and attributes, same operands,
//! same device, same result shardings) into the first of them. Every IR op is pure, so this is always sound.

use std::collections::BTreeMap;

use tessera_ir::{Graph, Sharding, ValueId};

use crate::pass::{Options, Pass, PassError, PassInfo, Statistics};
use crate::util::Substitution;

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "cse",
    summary: "Merge ops that compute the same values",
    options: &[],
    create: |_: &Options| Ok(Box::new(Cse)),
};

struct Cse;

impl Pass for Cse {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        // The key spells out the op with its attributes (`Debug` prints every field, and
        // floats by their exact shortest form), operands, device and result shardings.
        type Key = (String, Vec<ValueId>, Option<String>, Vec<Option<Sharding>>);
        let mut seen: BTreeMap<Key, Vec<ValueId>> = BTreeMap::new();
        let mut subst = Substitution::default();
        let mut keep = Vec::with_capacity(graph.ops().len());
        let mut merged = 0u64;
        for o in graph.ops().to_vec() {
            subst.apply_to_op(graph, o);
            let data = graph.op(o);
            let shardings = data
                .results
                .iter()
                .map(|&r| graph.value(r).sharding.clone())
                .collect();
            let key = (
                format!("{:?}", data.op),
                data.operands.clone(),
                data.device.clone(),
                shardings,
            );
            match seen.get(&key) {
                Some(first) => {
                    for (&r, &f) in data.results.iter().zip(first) {
                        subst.insert(r, f);
                    }
                    merged += 1;
                }
                None => {
                    seen.insert(key, data.results.clone());
                    keep.push(o);
                }
            }
        }
        graph.set_ops(keep);
        subst.apply_to_outputs(graph);
        stats.add(
            "ops-merged",
            "ops merged into an identical earlier op",
            merged,
        );
        Ok(merged > 0)
    }
}
