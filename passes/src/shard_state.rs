//! `shard-state`: optimizer state that a data-parallel step updates split over a mesh stays
//! split between steps (ZeRO stage 1: Rajbhandari et al., "ZeRO: Memory Optimizations Toward
//! Training Trillion Parameter Models", SC 2020, section 5.1, "optimizer state
//! partitioning").
//!
//! When placement runs a training step's optimizer split by rows over a mesh (the gradients
//! reduce-scattered, each device updating its rows), a state that only the update reads (an
//! Adam moment, a momentum buffer) is read as `all-slice %m` (each device keeps its block of
//! the whole state) and its next value is written as `all-gather %m'` (the blocks made whole
//! again), so that every device holds all of it between steps. Neither collective is needed:
//! each device can keep its own block from one step to the next. For a state slot whose
//! every reader is an `all-slice` on one mesh `@M` (one sharding), and whose next value is
//! an `all-gather` on `@M` of a value with that sharding read by nothing else, the pass
//! - gives the state input that sharding and holds the slot on `@M`
//!   ([`tessera_ir::StateSlot::mesh`]): each device keeps its block between steps;
//! - makes the `all-slice` readers read the input itself, and the output the gathered
//!   value, then removes both collectives.
//!
//! A parameter is read whole by the forward as well, so it keeps its all-gather (ZeRO-1
//! gathers parameters after the update); a state already split or never split is left alone.
//! The rewrite is exact: in the IR's global view a split value is the whole tensor.

use std::collections::BTreeMap;

use tessera_ir::{Graph, Op, OpId, Sharding, ValueDef, ValueId};

use crate::pass::{Options, Pass, PassError, PassInfo, Statistics};

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "shard-state",
    summary: "Keep optimizer state that a step updates split over a mesh split between steps (ZeRO-1)",
    options: &[],
    create: |_: &Options| Ok(Box::new(ShardState)),
};

struct ShardState;

impl Pass for ShardState {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let n = shard_state(graph);
        stats.add(
            "sharded",
            "state slots kept split over a mesh between steps",
            n as u64,
        );
        Ok(n > 0)
    }
}

/// One slot to rewrite: the `all-slice` ops that read its input, its mesh and sharding, and
/// the `all-gather` that makes its next value whole.
struct Rewrite {
    input: ValueId,
    slot: usize,
    output: usize,
    slices: Vec<OpId>,
    mesh: String,
    sharding: Sharding,
    gather: OpId,
    split_next: ValueId,
}

/// Keeps the state slots of `graph` that qualify (see the module doc) split between steps;
/// returns how many.
pub fn shard_state(graph: &mut Graph) -> usize {
    if graph.state.is_empty() || graph.meshes.is_empty() {
        return 0;
    }
    let mut users: BTreeMap<ValueId, Vec<OpId>> = BTreeMap::new();
    for &o in graph.ops() {
        for &v in &graph.op(o).operands {
            users.entry(v).or_default().push(o);
        }
    }
    let names = tessera_ir::text::output_names(graph);
    let mut rewrites = Vec::new();
    for (k, slot) in graph.state.iter().enumerate() {
        if slot.mesh.is_some() {
            continue;
        }
        let Some(&input) = graph.inputs().get(slot.input) else {
            continue;
        };
        let Some(output) = names.iter().position(|n| *n == slot.next) else {
            continue;
        };
        if graph.outputs().contains(&input) {
            continue;
        }
        // Every reader an all-slice on one mesh, with one sharding.
        let readers = users.get(&input).map(Vec::as_slice).unwrap_or_default();
        let mut split: Option<(String, Sharding)> = None;
        let all_slices = !readers.is_empty()
            && readers.iter().all(|&o| {
                let data = graph.op(o);
                let (Op::AllSlice { .. }, Some(d), [r]) =
                    (&data.op, data.device.as_deref(), data.results.as_slice())
                else {
                    return false;
                };
                let (Some(mesh), Some(sh)) = (d.strip_prefix('@'), &graph.value(*r).sharding)
                else {
                    return false;
                };
                let this = (mesh.to_string(), sh.clone());
                split.get_or_insert_with(|| this.clone()) == &this
            });
        let Some((mesh, sharding)) = split.filter(|_| all_slices) else {
            continue;
        };
        // The next value: an all-gather there of a value split the same way, read by nothing
        // but this output.
        let next = graph.outputs()[output];
        let ValueDef::Result(gather, _) = graph.value(next).def else {
            continue;
        };
        let data = graph.op(gather);
        let (Op::AllGather { .. }, [split_next]) = (&data.op, data.operands.as_slice()) else {
            continue;
        };
        let on_mesh = data.device.as_deref().and_then(|d| d.strip_prefix('@')) == Some(&mesh);
        let same = graph.value(*split_next).sharding.as_ref() == Some(&sharding)
            && graph.value_mesh(*split_next).map(|m| m.name.as_str()) == Some(&mesh);
        let only_output = users.get(&next).is_none_or(Vec::is_empty)
            && graph.outputs().iter().filter(|&&o| o == next).count() == 1;
        if !(on_mesh && same && only_output) {
            continue;
        }
        rewrites.push(Rewrite {
            input,
            slot: k,
            output,
            slices: readers.to_vec(),
            mesh,
            sharding,
            gather,
            split_next: *split_next,
        });
    }
    for r in &rewrites {
        graph.value_mut(r.input).sharding = Some(r.sharding.clone());
        graph.state[r.slot].mesh = Some(r.mesh.clone());
        for &s in &r.slices {
            let sliced = graph.op(s).results[0];
            graph.replace_all_uses(sliced, r.input);
            graph.remove_op(s);
        }
        // The output keeps its name (the slot's `next`), even where its value named it.
        let mut outputs: Vec<(ValueId, Option<String>)> = graph
            .outputs()
            .iter()
            .copied()
            .zip(graph.output_names().iter().cloned())
            .collect();
        let next = graph.state[r.slot].next.clone();
        outputs[r.output] = (r.split_next, Some(next));
        graph.set_named_outputs(outputs);
        graph.remove_op(r.gather);
    }
    rewrites.len()
}
