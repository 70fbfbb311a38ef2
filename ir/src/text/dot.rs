//! Graphviz DOT of a graph: one node per op (constants left out: they are weights, shown as a
//! count on their users), graph inputs and outputs as ovals, an edge per value use labelled
//! with its type, and one cluster per device (`device("...")`, a mesh's `@name` included), so
//! a placed graph shows where each op runs. The output depends only on the graph.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::graph::{Graph, ValueDef};
use crate::op::Op;

/// A DOT string literal.
fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// The graph as Graphviz DOT (`dot -Tsvg` renders it).
pub fn to_dot(graph: &Graph) -> String {
    let names = super::value_names(graph);
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", quote(&graph.name));
    s.push_str("  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n");
    s.push_str("  edge [fontname=\"monospace\", fontsize=8];\n");
    for (i, &v) in graph.inputs().iter().enumerate() {
        let _ = writeln!(
            s,
            "  in{i} [shape=oval, label={}];",
            quote(&format!("%{}\n{}", names[v.index()], graph.ty(v)))
        );
    }
    // Ops by device, in body order.
    let mut clusters: BTreeMap<Option<&str>, Vec<String>> = BTreeMap::new();
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        let results: Vec<String> = data
            .results
            .iter()
            .map(|r| format!("%{}", names[r.index()]))
            .collect();
        let weights = data
            .operands
            .iter()
            .filter(|&&v| matches!(graph.value(v).def, ValueDef::Result(p, _) if matches!(graph.op(p).op, Op::Const(_))))
            .count();
        let mut label = format!("{} = {}", results.join(", "), data.op.name());
        if weights > 0 {
            let _ = write!(
                label,
                "\n{weights} weight{}",
                if weights == 1 { "" } else { "s" }
            );
        }
        if let Some(loc) = &data.loc {
            let _ = write!(label, "\n{loc}");
        }
        clusters
            .entry(data.device.as_deref())
            .or_default()
            .push(format!("{} [label={}];", op, quote(&label)));
    }
    for (k, (device, nodes)) in clusters.iter().enumerate() {
        match device {
            Some(d) => {
                let _ = writeln!(s, "  subgraph cluster_{k} {{\n    label={};", quote(d));
                s.push_str("    style=rounded; color=gray40;\n");
                for n in nodes {
                    let _ = writeln!(s, "    {n}");
                }
                s.push_str("  }\n");
            }
            None => {
                for n in nodes {
                    let _ = writeln!(s, "  {n}");
                }
            }
        }
    }
    for (i, &v) in graph.outputs().iter().enumerate() {
        let _ = writeln!(
            s,
            "  out{i} [shape=oval, label={}];",
            quote(&format!("output {i}\n{}", graph.ty(v)))
        );
    }
    // Edges: every use of a value an op or an input defines.
    let source = |v: crate::graph::ValueId| -> Option<String> {
        match graph.value(v).def {
            ValueDef::Input(i) => Some(format!("in{i}")),
            ValueDef::Result(p, _) if matches!(graph.op(p).op, Op::Const(_)) => None,
            ValueDef::Result(p, _) => Some(p.to_string()),
        }
    };
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        for &v in &data.operands {
            if let Some(from) = source(v) {
                let _ = writeln!(
                    s,
                    "  {from} -> {op} [label={}];",
                    quote(&graph.ty(v).to_string())
                );
            }
        }
    }
    for (i, &v) in graph.outputs().iter().enumerate() {
        if let Some(from) = source(v) {
            let _ = writeln!(s, "  {from} -> out{i};");
        }
    }
    s.push_str("}\n");
    s
}
