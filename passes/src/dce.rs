//! `dce`: removes ops none of whose results are used (by a live op or a graph output), and
//! constants no live op reads.

use std::collections::BTreeSet;

use tessera_ir::{Graph, Op, ValueId};

use crate::pass::{Options, Pass, PassError, PassInfo, Statistics};

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "dce",
    summary: "Remove ops whose results are unused, and unused constants",
    options: &[],
    create: |_: &Options| Ok(Box::new(Dce)),
};

struct Dce;

impl Pass for Dce {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        Ok(dce(graph, stats))
    }
}

/// Removes dead ops and unused constants; returns whether anything was removed.
pub fn dce(graph: &mut Graph, stats: &mut Statistics) -> bool {
    let mut live: BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
    let mut keep = Vec::with_capacity(graph.ops().len());
    for &o in graph.ops().iter().rev() {
        let data = graph.op(o);
        if data.results.iter().any(|r| live.contains(r)) {
            live.extend(data.operands.iter().copied());
            keep.push(o);
        }
    }
    keep.reverse();
    let removed_ops = graph.ops().len() - keep.len();
    graph.set_ops(keep);

    let used: BTreeSet<usize> = graph
        .ops()
        .iter()
        .filter_map(|&o| match graph.op(o).op {
            Op::Const(c) => Some(c.index()),
            _ => None,
        })
        .collect();
    let removed_consts = graph.retain_consts(|c, _| used.contains(&c.index()));

    stats.add("ops-removed", "dead ops removed", removed_ops as u64);
    stats.add(
        "consts-removed",
        "unused constants removed",
        removed_consts as u64,
    );
    removed_ops + removed_consts > 0
}
