//! Small helpers shared by passes.

use std::collections::BTreeMap;

use tessera_ir::{Graph, OpId, ValueId};

/// Pending replacements of values by other values, applied as a walk reaches each op (one
/// pass over the body instead of one per replacement).
#[derive(Default)]
pub(crate) struct Substitution {
    map: BTreeMap<ValueId, ValueId>,
}

impl Substitution {
    /// Records that uses of `from` become uses of `to`.
    pub(crate) fn insert(&mut self, from: ValueId, to: ValueId) {
        let to = self.resolve(to);
        self.map.insert(from, to);
    }

    /// The final replacement of `v` (itself when none).
    pub(crate) fn resolve(&self, mut v: ValueId) -> ValueId {
        while let Some(&n) = self.map.get(&v) {
            v = n;
        }
        v
    }

    /// Rewrites the operands of `op`.
    pub(crate) fn apply_to_op(&self, graph: &mut Graph, op: OpId) {
        if self.map.is_empty() {
            return;
        }
        let operands: Vec<ValueId> = graph
            .op(op)
            .operands
            .iter()
            .map(|&v| self.resolve(v))
            .collect();
        graph.op_mut(op).operands = operands;
    }

    /// Rewrites the graph outputs. Output names are the graph's interface (`run` names its
    /// files after them), so a replaced output's name moves to the replacing value, unless
    /// that value is a graph input or already another output (one value has one name); then
    /// the output takes the replacing value's name.
    pub(crate) fn apply_to_outputs(&self, graph: &mut Graph) {
        let outputs: Vec<ValueId> = graph.outputs().to_vec();
        let mut new: Vec<ValueId> = Vec::with_capacity(outputs.len());
        for (i, &v) in outputs.iter().enumerate() {
            let r = self.resolve(v);
            let claimed = new.contains(&r) || outputs[i + 1..].contains(&r);
            let is_input = matches!(graph.value(r).def, tessera_ir::ValueDef::Input(_));
            if r != v
                && !claimed
                && !is_input
                && let Some(name) = graph.value(v).name.clone()
            {
                graph.value_mut(v).name = None;
                graph.set_name(r, name);
            }
            new.push(r);
        }
        graph.replace_output_values(new);
    }

    /// Whether there is nothing to replace.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
