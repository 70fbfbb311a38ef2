//! The `eqsat` pass: saturate each region of the graph with the rules, extract the cheapest
//! equivalent by the target's cost model, and keep it only if it is cheaper.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use egg::{Id, Language, Runner, StopReason};
use tessera_passes::{
    OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics, closest,
};
use tessera_targets::{CostModel, Target};

use crate::analysis::{TEGraph, node_op, node_types};
use crate::convert::{emit, region_to_egraph};
use crate::extract::{Exact, ExactBudget, UNUSABLE, exact_ilp, greedy_dag};
use crate::ir::{ConstId, Dim, Graph, Op, OpId, TensorType, ValueDef, ValueId};
use crate::lang::TNode;
use crate::rules::{Rule, all_rules};

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "eqsat",
    summary: "Equality saturation: rewrite with the rules, keep the cheapest form by the target's cost model",
    options: &[
        OptionInfo {
            name: "target",
            kind: OptionKind::Str,
            default: "",
            doc: "target whose cost model extracts (empty: the compile target, else cpu)",
        },
        OptionInfo {
            name: "device",
            kind: OptionKind::Str,
            default: "",
            doc: "cost every op on this device (empty: on its cheapest device)",
        },
        OptionInfo {
            name: "iter-limit",
            kind: OptionKind::UInt,
            default: "16",
            doc: "saturation iterations per region",
        },
        OptionInfo {
            name: "node-limit",
            kind: OptionKind::UInt,
            default: "20000",
            doc: "e-nodes per region before saturation stops",
        },
        OptionInfo {
            name: "time-limit-ms",
            kind: OptionKind::UInt,
            default: "2000",
            doc: "saturation time per region, in milliseconds",
        },
        OptionInfo {
            name: "region-ops",
            kind: OptionKind::UInt,
            default: "256",
            doc: "saturate runs of at most this many ops separately",
        },
        OptionInfo {
            name: "rules",
            kind: OptionKind::Str,
            default: "",
            doc: "only these rules, comma-separated (empty: every rule)",
        },
        OptionInfo {
            name: "explain",
            kind: OptionKind::Bool,
            default: "false",
            doc: "record the chain of rules behind each rewritten op (--explain prints it)",
        },
        OptionInfo {
            name: "exact-nodes",
            kind: OptionKind::UInt,
            default: "300",
            doc: "also extract exactly (integer programming) when a region has at most this many e-nodes",
        },
        OptionInfo {
            name: "fold-limit",
            kind: OptionKind::UInt,
            default: "4096",
            doc: "fold constant subterms of at most this many elements",
        },
    ],
    create,
};

fn create(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    let rules = options.string("rules").trim();
    let selected = if rules.is_empty() {
        None
    } else {
        let known: Vec<&str> = all_rules().iter().map(|r| r.name).collect();
        let mut set = BTreeSet::new();
        for name in rules.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if !known.contains(&name) {
                let hint = closest(name, &known)
                    .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
                return Err(PassError::new(format!("unknown rule `{name}`{hint}")));
            }
            set.insert(name.to_string());
        }
        Some(set)
    };
    Ok(Box::new(Eqsat {
        settings: Settings {
            target: options.string("target").to_string(),
            device: options.string("device").to_string(),
            iter_limit: options.uint("iter-limit") as usize,
            node_limit: options.uint("node-limit") as usize,
            time_limit: Duration::from_millis(options.uint("time-limit-ms")),
            region_ops: (options.uint("region-ops") as usize).max(1),
            rules: selected,
            explain: options.flag("explain"),
            fold_limit: options.uint("fold-limit") as usize,
            exact_nodes: options.uint("exact-nodes") as usize,
        },
    }))
}

/// Sets the target `eqsat` costs with when its `target` option is empty (the process's
/// compile target, shared with the other passes that cost: see
/// [`tessera_targets::set_default_target`]).
pub fn set_default_target(target: Option<std::sync::Arc<dyn Target>>) {
    tessera_targets::set_default_target(target);
}

/// The pass's settings (its options, resolved).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Target name (empty: `cpu`).
    pub target: String,
    /// Device name (empty: cheapest per op).
    pub device: String,
    /// Iterations per region.
    pub iter_limit: usize,
    /// E-nodes per region.
    pub node_limit: usize,
    /// Time per region.
    pub time_limit: Duration,
    /// Ops per region.
    pub region_ops: usize,
    /// The rules to use (`None`: all).
    pub rules: Option<BTreeSet<String>>,
    /// Record explanations.
    pub explain: bool,
    /// Constant folding limit in elements.
    pub fold_limit: usize,
    /// Extract exactly too when a region has at most this many usable e-nodes.
    pub exact_nodes: usize,
}

struct Eqsat {
    settings: Settings,
}

impl Pass for Eqsat {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let target = tessera_targets::pass_target(&self.settings.target)
            .map_err(|e| PassError::new(format!("target: {e}")))?;
        run_eqsat(graph, &*target, &self.settings, stats)
    }
}

/// Costs nodes with the target's cost model (each distinct op and operand types once).
pub struct NodeCost<'a> {
    model: CostModel<'a>,
    devices: Vec<usize>,
    cache: BTreeMap<String, f64>,
}

/// A type with every symbolic extent taken as 1, for costing graphs with unbound symbols.
fn concrete(ty: &TensorType) -> TensorType {
    TensorType::new(
        ty.elem,
        ty.shape
            .iter()
            .map(|d| match d {
                Dim::Static(n) => Dim::Static(*n),
                Dim::Sym(_) => Dim::Static(1),
            })
            .collect(),
    )
}

impl<'a> NodeCost<'a> {
    /// Costs on `device`, or on each op's cheapest device of the target when `None`.
    pub fn new(target: &'a dyn Target, device: Option<usize>) -> NodeCost<'a> {
        let devices = match device {
            Some(d) => vec![d],
            None => (0..target.spec().devices.len())
                .filter(|&d| !target.spec().devices[d].compute.is_empty())
                .collect(),
        };
        NodeCost {
            model: CostModel::new(target, None),
            devices,
            cache: BTreeMap::new(),
        }
    }

    /// Modelled seconds of `op` with these operand and result types (1 s when no candidate
    /// device can run it, so that such ops are kept only when there is no alternative).
    pub fn op_cost(&mut self, op: &Op, operands: &[&TensorType], results: &[TensorType]) -> f64 {
        if matches!(op, Op::Const(_)) {
            return 0.0;
        }
        let key = format!("{op:?}|{operands:?}");
        if let Some(&c) = self.cache.get(&key) {
            return c;
        }
        let mut g = Graph::new("cost");
        let args: Vec<ValueId> = operands
            .iter()
            .map(|t| g.add_input(None, concrete(t)))
            .collect();
        let id = g.push_op(op.clone(), args, results.iter().map(concrete).collect());
        let c = self
            .devices
            .iter()
            .filter_map(|&d| self.model.op_time(&g, id, d).ok().and_then(|t| t.seconds()))
            .fold(f64::INFINITY, f64::min);
        let c = if c.is_finite() { c } else { 1.0 };
        self.cache.insert(key, c);
        c
    }

    /// The cost of an e-node (leaves and result selectors cost nothing).
    pub fn node(&mut self, egraph: &TEGraph, node: &TNode) -> f64 {
        match node {
            TNode::Op(..) => {
                let Some((op, operands)) = node_op(egraph, node) else {
                    return UNUSABLE;
                };
                let Some(types) = node_types(egraph, node) else {
                    return UNUSABLE;
                };
                let tys: Option<Vec<&TensorType>> =
                    operands.iter().map(|&o| egraph[o].data.ty()).collect();
                match tys {
                    Some(tys) => self.op_cost(&op, &tys, &types),
                    None => UNUSABLE,
                }
            }
            _ => 0.0,
        }
    }
}

fn stop_name(r: &StopReason) -> &'static str {
    match r {
        StopReason::Saturated => "stop-saturated",
        StopReason::IterationLimit(_) => "stop-iteration-limit",
        StopReason::NodeLimit(_) => "stop-node-limit",
        StopReason::TimeLimit(_) => "stop-time-limit",
        StopReason::Other(_) => "stop-other",
    }
}

fn stop_doc(r: &StopReason) -> &'static str {
    match r {
        StopReason::Saturated => "regions saturated (no rule applied any more)",
        StopReason::IterationLimit(_) => "regions stopped by iter-limit",
        StopReason::NodeLimit(_) => "regions stopped by node-limit",
        StopReason::TimeLimit(_) => "regions stopped by time-limit-ms",
        StopReason::Other(_) => "regions stopped for another reason",
    }
}

/// Runs equality saturation on `graph` for `target`; returns whether the graph changed.
pub fn run_eqsat(
    graph: &mut Graph,
    target: &dyn Target,
    settings: &Settings,
    stats: &mut Statistics,
) -> Result<bool, PassError> {
    let device = if settings.device.is_empty() {
        None
    } else {
        Some(
            target
                .spec()
                .device_index(&settings.device)
                .ok_or_else(|| {
                    PassError::new(format!(
                        "target `{}` has no device `{}`",
                        target.spec().name,
                        settings.device
                    ))
                })?,
        )
    };
    let rules: Vec<Rule> = all_rules()
        .into_iter()
        .filter(|r| settings.rules.as_ref().is_none_or(|s| s.contains(r.name)))
        .collect();
    let mut costs = NodeCost::new(target, device);

    // Body order without consts; where each value is last read (outputs: never "before").
    let ops: Vec<OpId> = graph
        .ops()
        .iter()
        .copied()
        .filter(|&o| !matches!(graph.op(o).op, Op::Const(_)))
        .collect();
    let mut last_use: BTreeMap<ValueId, usize> = BTreeMap::new();
    for (i, &o) in ops.iter().enumerate() {
        for &v in &graph.op(o).operands {
            last_use.insert(v, i);
        }
    }
    for &v in graph.outputs() {
        last_use.insert(v, usize::MAX);
    }

    let mut out = Graph::new(graph.name.clone());
    let mut map: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    for &i in graph.inputs() {
        let v = out.add_input(graph.value(i).name.clone(), graph.ty(i).clone());
        map.insert(i, v);
    }
    let mut consts: BTreeMap<String, ConstId> = BTreeMap::new();
    let mut fresh = 0;
    let mut changed = false;
    let (mut before_total, mut after_total) = (0.0, 0.0);

    // Regions: runs of at most `region-ops` unplaced ops. An op that already has a device is
    // left as it is and ends the run (eqsat rewrites before placement, not across it); so is
    // a region op (`if`, `loop`, `scan`): eqsat does not enter nested graphs, and the op
    // stays one opaque unit.
    let mut segments: Vec<(usize, usize, bool)> = Vec::new(); // (start, end, kept as is)
    let mut start = 0;
    for (i, &o) in ops.iter().enumerate() {
        if graph.op(o).device.is_some() || graph.op(o).op.has_regions() {
            if start < i {
                segments.push((start, i, false));
            }
            segments.push((i, i + 1, true));
            start = i + 1;
        } else if i + 1 - start == settings.region_ops {
            segments.push((start, i + 1, false));
            start = i + 1;
        }
    }
    if start < ops.len() {
        segments.push((start, ops.len(), false));
    }
    for (begin, end, placed) in segments {
        let chunk = &ops[begin..end];
        if placed {
            copy_region(graph, chunk, &mut out, &mut map, &mut consts);
            continue;
        }
        let used_after = |v: ValueId| last_use.get(&v).is_some_and(|&u| u >= end);
        let mut region = region_to_egraph(
            graph,
            chunk,
            &used_after,
            settings.fold_limit,
            fresh,
            settings.explain,
        );
        let before: f64 = chunk
            .iter()
            .map(|&o| {
                let d = graph.op(o);
                let tys: Vec<&TensorType> = d.operands.iter().map(|&v| graph.ty(v)).collect();
                let res: Vec<TensorType> = d.results.iter().map(|&v| graph.ty(v).clone()).collect();
                costs.op_cost(&d.op, &tys, &res)
            })
            .sum();
        // The nodes the region started with: on equal cost, extraction keeps them (so that a
        // commuted add, say, does not replace the original for nothing).
        let initial: Vec<TNode> = region
            .egraph
            .classes()
            .flat_map(|c| c.nodes.iter().cloned())
            .collect();
        let placeholder = || crate::analysis::TypeAnalysis::new(Vec::new(), Vec::new(), 0);
        let mut runner: Runner<TNode, crate::analysis::TypeAnalysis> = Runner::new(placeholder())
            .with_egraph(std::mem::replace(
                &mut region.egraph,
                TEGraph::new(placeholder()),
            ))
            .with_iter_limit(settings.iter_limit)
            .with_node_limit(settings.node_limit)
            .with_time_limit(settings.time_limit);
        if settings.explain {
            runner = runner.with_explanations_enabled();
        }
        let runner = runner.run(rules.iter().map(|r| &r.rewrite));
        let mut egraph = runner.egraph;
        stats.add("regions", "regions saturated", 1);
        stats.add(
            "iterations",
            "saturation iterations, all regions",
            runner.iterations.len() as u64,
        );
        let applied: usize = runner
            .iterations
            .iter()
            .map(|it| it.applied.values().sum::<usize>())
            .sum();
        stats.add(
            "rules-applied",
            "rule applications, all regions",
            applied as u64,
        );
        stats.add(
            "egraph-nodes",
            "e-nodes at the end, all regions",
            egraph.total_number_of_nodes() as u64,
        );
        stats.add(
            "egraph-classes",
            "e-classes at the end, all regions",
            egraph.number_of_classes() as u64,
        );
        if let Some(reason) = &runner.stop_reason {
            stats.add(stop_name(reason), stop_doc(reason), 1);
        }
        fresh = egraph.analysis.fresh();
        let roots: Vec<Id> = region.roots.iter().map(|&r| egraph.find(r)).collect();
        let original: BTreeSet<TNode> = initial
            .into_iter()
            .map(|n| n.map_children(|c| egraph.find(c)))
            .collect();
        let mut node_cost = |eg: &TEGraph, n: &TNode| {
            let c = costs.node(eg, n);
            if original.contains(n) {
                c
            } else {
                c * (1.0 + 1e-6) + 1e-15
            }
        };
        let mut extraction = greedy_dag(&egraph, &roots, &mut node_cost);
        if settings.exact_nodes > 0 && egraph.total_number_of_nodes() <= settings.exact_nodes {
            stats.add(
                "exact-runs",
                "regions also extracted by integer programming",
                1,
            );
            match exact_ilp(
                &egraph,
                &roots,
                |eg, n| costs.node(eg, n),
                settings.exact_nodes,
                ExactBudget::BySize,
                extraction.as_ref().map(|g| g.cost),
            ) {
                Exact::Found(exact)
                    if extraction
                        .as_ref()
                        .is_none_or(|g| exact.cost < g.cost * (1.0 - 1e-9)) =>
                {
                    stats.add(
                        "exact-better",
                        "regions where the exact extraction beat the greedy one",
                        1,
                    );
                    extraction = Some(exact);
                }
                Exact::GreedyOptimal => stats.add(
                    "exact-greedy-optimal",
                    "regions whose greedy extraction met the LP bound (no search needed)",
                    1,
                ),
                Exact::GaveUp => stats.add(
                    "exact-gave-up",
                    "regions whose exact search found no solution within its node budget",
                    1,
                ),
                Exact::Found(_) | Exact::TooLarge => {}
            }
        }
        let inputs: Vec<ValueId> = region
            .inputs
            .iter()
            .map(|v| map.get(v).copied())
            .collect::<Option<_>>()
            .ok_or_else(|| PassError::new("a region reads a value defined after it"))?;
        let class_of_op: BTreeMap<OpId, Id> =
            region.original.iter().map(|&(id, op)| (op, id)).collect();
        let locs: BTreeMap<Id, crate::convert::Origin> = region
            .original
            .iter()
            .filter_map(|&(id, op)| {
                let data = graph.op(op);
                let grad_class = data.grad_of.and_then(|v| match graph.value(v).def {
                    ValueDef::Result(p, 0) => class_of_op.get(&p).map(|&gid| egraph.find(gid)),
                    _ => None,
                });
                let origin = crate::convert::Origin {
                    loc: data.loc.clone(),
                    grad_of: data.grad_of.and_then(|v| map.get(&v).copied()),
                    grad_class,
                };
                (origin.loc.is_some() || origin.grad_of.is_some() || origin.grad_class.is_some())
                    .then(|| (egraph.find(id), origin))
            })
            .collect();
        let rewritten = match &extraction {
            Some(ex) if ex.cost < before * (1.0 - 1e-9) => {
                let mark = out.ops().len();
                match emit(&egraph, ex, &roots, &inputs, &mut out, &mut consts, &locs) {
                    Ok(values) => {
                        for (old, new) in region.outputs.iter().zip(values) {
                            map.insert(*old, new);
                            if out.value(new).name.is_none()
                                && let Some(n) = &graph.value(*old).name
                                && matches!(out.value(new).def, ValueDef::Result(..))
                            {
                                out.set_name(new, n.clone());
                            }
                        }
                        before_total += before;
                        after_total += ex.cost;
                        true
                    }
                    Err(_) => {
                        // A cyclic choice: drop what was emitted and keep the region as is.
                        let keep: Vec<OpId> = out.ops()[..mark].to_vec();
                        out.set_ops(keep);
                        false
                    }
                }
            }
            _ => false,
        };
        if rewritten {
            changed = true;
            stats.add("regions-rewritten", "regions replaced by a cheaper form", 1);
            if settings.explain
                && let Some(ex) = &extraction
            {
                explain(&mut egraph, &region, ex, graph, stats);
            }
        } else {
            before_total += before;
            after_total += before;
            copy_region(graph, chunk, &mut out, &mut map, &mut consts);
        }
    }
    // Outputs that are constants (no region defines them).
    let mut outputs = Vec::with_capacity(graph.outputs().len());
    for &v in graph.outputs() {
        let nv = match map.get(&v) {
            Some(&nv) => nv,
            None => {
                let ValueDef::Result(p, _) = graph.value(v).def else {
                    return Err(PassError::new("an output has no value"));
                };
                let Op::Const(c) = graph.op(p).op else {
                    return Err(PassError::new("an output has no value"));
                };
                let id = const_into(graph, c, &mut out, &mut consts);
                let op = out.push_op(Op::Const(id), Vec::new(), vec![graph.ty(v).clone()]);
                out.op(op).results[0]
            }
        };
        outputs.push(nv);
    }
    out.set_named_outputs(
        outputs
            .into_iter()
            .zip(graph.output_names().iter().cloned())
            .collect(),
    );
    for (&old, &new) in graph.outputs().iter().zip(out.outputs().to_vec().iter()) {
        if let Some(n) = &graph.value(old).name
            && matches!(out.value(new).def, ValueDef::Result(..))
        {
            out.set_name(new, n.clone());
        }
    }
    stats.add(
        "cost-before-ns",
        "modelled time before, nanoseconds",
        (before_total * 1e9).round() as u64,
    );
    stats.add(
        "cost-after-ns",
        "modelled time after, nanoseconds",
        (after_total * 1e9).round() as u64,
    );
    if changed {
        // State inputs keep their slots; their initial constants come along.
        out.state = graph
            .state
            .iter()
            .map(|s| crate::ir::StateSlot {
                input: s.input,
                init: match s.init {
                    crate::ir::StateInit::Const(c) => {
                        crate::ir::StateInit::Const(const_into(graph, c, &mut out, &mut consts))
                    }
                    crate::ir::StateInit::Zeros => crate::ir::StateInit::Zeros,
                },
                next: s.next.clone(),
                mesh: s.mesh.clone(),
            })
            .collect();
        *graph = out;
    }
    Ok(changed)
}

fn const_into(
    graph: &Graph,
    c: ConstId,
    out: &mut Graph,
    consts: &mut BTreeMap<String, ConstId>,
) -> ConstId {
    let k = graph.constant(c);
    *consts
        .entry(k.name.clone())
        .or_insert_with(|| out.add_const(k.clone()))
}

/// Copies a region's ops unchanged (with the const ops they read).
fn copy_region(
    graph: &Graph,
    chunk: &[OpId],
    out: &mut Graph,
    map: &mut BTreeMap<ValueId, ValueId>,
    consts: &mut BTreeMap<String, ConstId>,
) {
    for &op in chunk {
        let data = graph.op(op);
        let mut args = Vec::with_capacity(data.operands.len());
        for &v in &data.operands {
            let nv = match map.get(&v) {
                Some(&nv) => nv,
                None => {
                    // A constant read for the first time.
                    let ValueDef::Result(p, _) = graph.value(v).def else {
                        continue;
                    };
                    let Op::Const(c) = graph.op(p).op else {
                        continue;
                    };
                    let id = const_into(graph, c, out, consts);
                    let cop = out.push_op(Op::Const(id), Vec::new(), vec![graph.ty(v).clone()]);
                    out.op_mut(cop).loc = graph.op(p).loc.clone();
                    let nv = out.op(cop).results[0];
                    if let Some(n) = &graph.value(v).name {
                        out.set_name(nv, n.clone());
                    }
                    map.insert(v, nv);
                    nv
                }
            };
            args.push(nv);
        }
        let types = data.results.iter().map(|&r| graph.ty(r).clone()).collect();
        let id = out.push_op(data.op.clone(), args, types);
        out.op_mut(id).loc = data.loc.clone();
        out.op_mut(id).device = data.device.clone();
        out.op_mut(id).grad_of = data.grad_of.and_then(|v| map.get(&v).copied());
        for (&old, &new) in data.results.iter().zip(out.op(id).results.clone().iter()) {
            if let Some(n) = &graph.value(old).name {
                out.set_name(new, n.clone());
            }
            map.insert(old, new);
        }
    }
}

/// Notes, for each original op whose class was extracted as a different node, the rules
/// that connect its original term to the extracted one (egg's explanation between the two
/// terms, so every step of the proof is named).
fn explain(
    egraph: &mut TEGraph,
    region: &crate::convert::Region,
    ex: &crate::extract::Extraction,
    graph: &Graph,
    stats: &mut Statistics,
) {
    let names = crate::ir::text::value_names(graph);
    let mut original_memo: BTreeMap<ValueId, Id> = BTreeMap::new();
    let mut original_expr: egg::RecExpr<TNode> = egg::RecExpr::default();
    for &(id, op) in &region.original {
        let class = egraph.find(id);
        let Some(chosen) = ex.choice.get(&class) else {
            continue;
        };
        let data = graph.op(op);
        let Some(&result) = data.results.first() else {
            continue;
        };
        let original_node = egraph
            .id_to_node(id)
            .clone()
            .map_children(|c| egraph.find(c));
        if *chosen == original_node {
            continue;
        }
        let Some(mut root) = original_term(
            graph,
            region,
            result,
            &mut original_expr,
            &mut original_memo,
        ) else {
            continue;
        };
        // A multi-result op's term is its node, not the `get` of its first result.
        if let TNode::Get(_, [op_node]) = original_expr[root] {
            root = op_node;
        }
        let Some(chosen_expr) = choice_term(egraph, ex, class) else {
            continue;
        };
        let left = prefix(&original_expr, root);
        let mut explanation = egraph.explain_equivalence(&left, &chosen_expr);
        // The rules applied at this op's own term; rewrites inside its operands are noted at
        // the ops that produce them.
        let mut rules: Vec<String> = Vec::new();
        for term in explanation.make_flat_explanation() {
            rules.extend(term.backward_rule.iter().map(|r| r.to_string()));
            rules.extend(term.forward_rule.iter().map(|r| r.to_string()));
        }
        rules.dedup();
        if rules.is_empty() {
            continue;
        }
        let value = names.get(result.index()).cloned().unwrap_or_default();
        let at = data
            .loc
            .as_ref()
            .map(|l| format!(" at {l:?}"))
            .unwrap_or_default();
        stats.note(format!(
            "%{value} = {}{at}: {} -> {}",
            data.op.name(),
            rules.join(" -> "),
            chosen
        ));
    }
}

/// The sub-expression of `expr` rooted at `root` (the nodes it reaches, renumbered).
fn prefix(expr: &egg::RecExpr<TNode>, root: Id) -> egg::RecExpr<TNode> {
    fn go(
        expr: &egg::RecExpr<TNode>,
        at: Id,
        out: &mut egg::RecExpr<TNode>,
        memo: &mut BTreeMap<Id, Id>,
    ) -> Id {
        if let Some(&id) = memo.get(&at) {
            return id;
        }
        let node = expr[at].clone().map_children(|c| go(expr, c, out, memo));
        let id = out.add(node);
        memo.insert(at, id);
        id
    }
    let mut out = egg::RecExpr::default();
    go(expr, root, &mut out, &mut BTreeMap::new());
    out
}

/// Adds the original term of value `v` (as the region's e-graph first held it) to `expr`.
fn original_term(
    graph: &Graph,
    region: &crate::convert::Region,
    v: ValueId,
    expr: &mut egg::RecExpr<TNode>,
    memo: &mut BTreeMap<ValueId, Id>,
) -> Option<Id> {
    if let Some(&id) = memo.get(&v) {
        return Some(id);
    }
    let id = if let Some(i) = region.inputs.iter().position(|&x| x == v) {
        expr.add(TNode::Input(i as u32))
    } else {
        let ValueDef::Result(op, index) = graph.value(v).def else {
            return None;
        };
        let data = graph.op(op);
        if let Op::Const(c) = data.op {
            expr.add(TNode::Const(c.index() as u32))
        } else {
            let mut operands = Vec::with_capacity(data.operands.len());
            for &o in &data.operands {
                operands.push(original_term(graph, region, o, expr, memo)?);
            }
            let attr = (!crate::lang::is_plain(&data.op)).then(|| {
                expr.add(TNode::Attr(Box::new(crate::lang::Attr::new(
                    data.op.clone(),
                ))))
            });
            let node = expr.add(crate::lang::op_node(&data.op, attr, &operands));
            if data.results.len() == 1 {
                node
            } else {
                expr.add(TNode::Get(index as u32, [node]))
            }
        }
    };
    memo.insert(v, id);
    Some(id)
}

/// The extracted term of `class`.
fn choice_term(
    egraph: &TEGraph,
    ex: &crate::extract::Extraction,
    class: Id,
) -> Option<egg::RecExpr<TNode>> {
    fn go(
        egraph: &TEGraph,
        ex: &crate::extract::Extraction,
        class: Id,
        out: &mut egg::RecExpr<TNode>,
        memo: &mut BTreeMap<Id, Id>,
        depth: usize,
    ) -> Option<Id> {
        let class = egraph.find(class);
        if let Some(&id) = memo.get(&class) {
            return Some(id);
        }
        if depth > 10_000 {
            return None;
        }
        let node = ex.choice.get(&class)?.clone();
        let mut kids = Vec::new();
        for &c in egg::Language::children(&node) {
            kids.push(go(egraph, ex, c, out, memo, depth + 1)?);
        }
        let mut i = 0;
        let node = node.map_children(|_| {
            i += 1;
            kids[i - 1]
        });
        let id = out.add(node);
        memo.insert(class, id);
        Some(id)
    }
    let mut out = egg::RecExpr::default();
    go(egraph, ex, class, &mut out, &mut BTreeMap::new(), 0)?;
    Some(out)
}

/// Saturates the whole of `graph` with `rules` (no regions, no folding beyond `fold_limit`)
/// and extracts with `cost`, whose third argument says whether the node was in the graph
/// before saturation. Returns the extracted graph and the number of rule applications, or
/// `None` when extraction fails. Tests use this to force the rewritten form out.
pub fn saturate_and_extract(
    graph: &Graph,
    rules: &[&Rule],
    iter_limit: usize,
    fold_limit: usize,
    mut cost: impl FnMut(&TEGraph, &TNode, bool) -> f64,
) -> Option<(Graph, usize)> {
    let ops: Vec<OpId> = graph
        .ops()
        .iter()
        .copied()
        .filter(|&o| !matches!(graph.op(o).op, Op::Const(_)))
        .collect();
    let outputs: BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
    let region = region_to_egraph(graph, &ops, &|v| outputs.contains(&v), fold_limit, 0, false);
    let before: BTreeSet<TNode> = region
        .egraph
        .classes()
        .flat_map(|c| c.nodes.iter().cloned())
        .collect();
    let runner: Runner<TNode, crate::analysis::TypeAnalysis> = Runner::new(
        crate::analysis::TypeAnalysis::new(Vec::new(), Vec::new(), 0),
    )
    .with_egraph(region.egraph)
    .with_iter_limit(iter_limit)
    .with_node_limit(100_000)
    .run(rules.iter().map(|r| &r.rewrite));
    let applied = runner
        .iterations
        .iter()
        .map(|it| it.applied.values().sum::<usize>())
        .sum();
    let egraph = runner.egraph;
    let original: BTreeSet<TNode> = before
        .into_iter()
        .map(|n| egg::Language::map_children(n, |c| egraph.find(c)))
        .collect();
    let roots: Vec<Id> = region.roots.iter().map(|&r| egraph.find(r)).collect();
    let ex = greedy_dag(&egraph, &roots, |eg, n| cost(eg, n, original.contains(n)))?;
    let mut out = Graph::new(graph.name.clone());
    let mut map = Vec::new();
    for &i in graph.inputs() {
        map.push(out.add_input(graph.value(i).name.clone(), graph.ty(i).clone()));
    }
    let region_inputs: Vec<ValueId> = region
        .inputs
        .iter()
        .map(|&v| graph.inputs().iter().position(|&x| x == v).map(|i| map[i]))
        .collect::<Option<_>>()?;
    let mut consts = BTreeMap::new();
    let values = emit(
        &egraph,
        &ex,
        &roots,
        &region_inputs,
        &mut out,
        &mut consts,
        &BTreeMap::new(),
    )
    .ok()?;
    let by_old: BTreeMap<ValueId, ValueId> = region.outputs.iter().copied().zip(values).collect();
    let outs: Vec<ValueId> = graph
        .outputs()
        .iter()
        .map(|v| {
            by_old
                .get(v)
                .copied()
                .or_else(|| graph.inputs().iter().position(|x| x == v).map(|i| map[i]))
        })
        .collect::<Option<_>>()?;
    out.set_named_outputs(
        outs.into_iter()
            .zip(graph.output_names().iter().cloned())
            .collect(),
    );
    Some((out, applied))
}
