//! Extraction on random graphs saturated with every rule: the greedy and the exact
//! extractors both give graphs that verify and compute what the original computes, and the
//! exact one (when it finishes) is never costlier than the greedy one or than the original.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::tensor;
use egg::Runner;
use proptest::prelude::*;
use tessera_eqsat::analysis::TypeAnalysis;
use tessera_eqsat::convert::{emit, region_to_egraph};
use tessera_eqsat::extract::{Exact, ExactBudget, Extraction, exact_ilp, greedy_dag};
use tessera_eqsat::ir::{ElemType::F32, Graph, Op, OpId, ValueId, interp, text, verify};
use tessera_eqsat::lang::TNode;
use tessera_eqsat::rules::all_rules;

/// A random graph over `n x n` values: each step applies one of a few ops to earlier values.
fn random_graph(n: usize, steps: &[(u8, usize, usize)]) -> String {
    let t = format!("f32[{n}, {n}]");
    let mut body = String::new();
    let mut vals = vec!["%x".to_string(), "%y".to_string()];
    for (i, &(kind, a, b)) in steps.iter().enumerate() {
        let (a, b) = (&vals[a % vals.len()], &vals[b % vals.len()]);
        let line = match kind % 7 {
            0 => format!("  %v{i} = add {a}, {b} : {t}\n"),
            1 => format!("  %v{i} = mul {a}, {b} : {t}\n"),
            2 => format!("  %v{i} = relu {a} : {t}\n"),
            3 => format!("  %v{i} = neg {a} : {t}\n"),
            4 => format!("  %v{i} = matmul {a}, {b} : {t}\n"),
            5 => format!("  %v{i} = transpose {a} {{perm = [1, 0]}} : {t}\n"),
            _ => format!("  %v{i} = sub {a}, {b} : {t}\n"),
        };
        body.push_str(&line);
        vals.push(format!("%v{i}"));
    }
    let last = vals.last().cloned().unwrap_or_default();
    let other = vals[vals.len() / 2].clone();
    format!("graph @g(%x: {t}, %y: {t}) {{\n{body}  return {last}, {other}\n}}\n")
}

fn extract_graph(
    graph: &Graph,
    ex: &Extraction,
    region: &tessera_eqsat::convert::Region,
    egraph: &tessera_eqsat::analysis::TEGraph,
) -> Graph {
    let mut out = Graph::new("g");
    let mut map = Vec::new();
    for &i in graph.inputs() {
        map.push(out.add_input(graph.value(i).name.clone(), graph.ty(i).clone()));
    }
    let inputs: Vec<ValueId> = region
        .inputs
        .iter()
        .map(|v| {
            map[graph
                .inputs()
                .iter()
                .position(|x| x == v)
                .expect("graph input")]
        })
        .collect();
    let roots: Vec<_> = region.roots.iter().map(|&r| egraph.find(r)).collect();
    let values = emit(
        egraph,
        ex,
        &roots,
        &inputs,
        &mut out,
        &mut BTreeMap::new(),
        &BTreeMap::new(),
    )
    .expect("emits");
    let by_old: BTreeMap<ValueId, ValueId> = region.outputs.iter().copied().zip(values).collect();
    let outs: Vec<ValueId> = graph
        .outputs()
        .iter()
        .map(|v| {
            by_old
                .get(v)
                .copied()
                .unwrap_or_else(|| map[graph.inputs().iter().position(|x| x == v).expect("input")])
        })
        .collect();
    out.set_outputs(outs);
    out
}

fn close(a: &[tessera_eqsat::ir::Tensor], b: &[tessera_eqsat::ir::Tensor]) -> bool {
    a.iter().zip(b).all(|(x, y)| {
        x.to_f64_vec().iter().zip(y.to_f64_vec()).all(|(p, q)| {
            *p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-3 * (1.0 + q.abs())
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn extractors_agree_with_the_interpreter(
        n in 1usize..4,
        steps in proptest::collection::vec((0u8..7, 0usize..16, 0usize..16), 1..9),
        seed: u64,
    ) {
        let src = random_graph(n, &steps);
        let graph = text::parse(&src, None).expect("parses");
        prop_assume!(verify::verify(&graph).is_ok());
        let ops: Vec<OpId> = graph.ops().to_vec();
        let outputs: BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
        let region = region_to_egraph(&graph, &ops, &|v| outputs.contains(&v), 64, 0, false);
        let rules = all_rules();
        let runner: Runner<TNode, TypeAnalysis> = Runner::new(TypeAnalysis::new(Vec::new(), Vec::new(), 0))
            .with_egraph(region.egraph)
            .with_iter_limit(6)
            .with_node_limit(400)
            .run(rules.iter().map(|r| &r.rewrite));
        let egraph = runner.egraph;
        let roots: Vec<_> = region.roots.iter().map(|&r| egraph.find(r)).collect();
        // A cost that makes choices matter: every op costs by kind.
        let cost = |_: &tessera_eqsat::analysis::TEGraph, node: &TNode| match node {
            TNode::Op(k, _) => match *k {
                "matmul" => 10.0,
                "gemm" => 9.0,
                "transpose" => 3.0,
                _ => 1.0,
            },
            _ => 0.0,
        };
        let inputs = [tensor(F32, &[n, n], seed), tensor(F32, &[n, n], seed ^ 0x55)];
        let want = interp::run(&graph, &inputs).expect("runs");
        let region_view = tessera_eqsat::convert::Region {
            egraph: tessera_eqsat::analysis::TEGraph::new(TypeAnalysis::new(Vec::new(), Vec::new(), 0)),
            inputs: region.inputs.clone(),
            outputs: region.outputs.clone(),
            roots: region.roots.clone(),
            original: Vec::new(),
        };
        let greedy = greedy_dag(&egraph, &roots, cost).expect("greedy extracts");
        let g = extract_graph(&graph, &greedy, &region_view, &egraph);
        prop_assert!(verify::verify(&g).is_ok(), "{}", text::print(&g));
        let got = interp::run(&g, &inputs).expect("greedy graph runs");
        prop_assert!(close(&got, &want), "greedy:\n{}\noriginal:\n{src}", text::print(&g));
        let original_cost: f64 = ops
            .iter()
            .map(|&o| match graph.op(o).op {
                Op::MatMul => 10.0,
                Op::Transpose { .. } => 3.0,
                _ => 1.0,
            })
            .sum();
        {
            let Exact::Found(exact) = exact_ilp(&egraph, &roots, cost, 2000, ExactBudget::Unlimited, None)
            else {
                panic!("the exact extraction finishes on small e-graphs");
            };
            // Given the greedy cost, the LP bound may prove it optimal: then it is.
            if let Exact::GreedyOptimal =
                exact_ilp(&egraph, &roots, cost, 2000, ExactBudget::Unlimited, Some(greedy.cost))
            {
                prop_assert!(
                    (exact.cost - greedy.cost).abs() <= 1e-9 * greedy.cost.max(1e-12),
                    "greedy {} called optimal, exact {}",
                    greedy.cost,
                    exact.cost
                );
            }
            prop_assert!(exact.cost <= greedy.cost + 1e-9, "exact {} > greedy {}", exact.cost, greedy.cost);
            prop_assert!(exact.cost <= original_cost + 1e-9);
            let e = extract_graph(&graph, &exact, &region_view, &egraph);
            prop_assert!(verify::verify(&e).is_ok(), "{}", text::print(&e));
            let got = interp::run(&e, &inputs).expect("exact graph runs");
            prop_assert!(close(&got, &want), "exact:\n{}\noriginal:\n{src}", text::print(&e));
        }
    }
}
