//! Between graphs and e-graphs: a region of a graph (a run of ops in body order) becomes an
//! e-graph whose inputs are the values it reads from outside; an extraction is emitted back
//! as ops appended to a new graph.

use std::collections::BTreeMap;

use egg::Id;

use crate::analysis::{TEGraph, TypeAnalysis, node_op};
use crate::extract::Extraction;
use crate::ir::{ConstId, Graph, Op, OpId, ValueDef, ValueId};
use crate::lang::{Attr, TNode, op_node};

/// A region turned into an e-graph.
pub struct Region {
    /// The e-graph, original nodes added.
    pub egraph: TEGraph,
    /// Values from outside the region, in `input<i>` order.
    pub inputs: Vec<ValueId>,
    /// Values the region defines that are used after it (or are graph outputs), in order.
    pub outputs: Vec<ValueId>,
    /// The class of each output.
    pub roots: Vec<Id>,
    /// Per original op: the id its node was added with (for explanations) and the op.
    pub original: Vec<(Id, OpId)>,
}

/// Builds the e-graph of `ops` (a run of non-`const` ops of `graph`, in body order).
/// `used_after[v]` tells whether value `v` is read after the region or is a graph output.
pub fn region_to_egraph(
    graph: &Graph,
    ops: &[OpId],
    used_after: &dyn Fn(ValueId) -> bool,
    fold_limit: usize,
    fresh: usize,
    explain: bool,
) -> Region {
    let consts: Vec<_> = (0..graph.num_consts())
        .map(|i| graph.constant(ConstId::from_index(i)).clone())
        .collect();
    let mut analysis = TypeAnalysis::new(Vec::new(), consts, fold_limit);
    analysis.set_fresh(fresh);
    let mut egraph = TEGraph::new(analysis);
    if explain {
        egraph = egraph.with_explanations_enabled();
    }
    let mut class: BTreeMap<ValueId, Id> = BTreeMap::new();
    let mut inputs: Vec<ValueId> = Vec::new();
    let mut original = Vec::new();
    let in_region: std::collections::BTreeSet<OpId> = ops.iter().copied().collect();
    for &op in ops {
        let data = graph.op(op);
        let mut operands = Vec::with_capacity(data.operands.len());
        for &v in &data.operands {
            let id = match class.get(&v) {
                Some(&id) => id,
                None => {
                    let leaf = match graph.value(v).def {
                        ValueDef::Result(p, _) if matches!(graph.op(p).op, Op::Const(_)) => {
                            let Op::Const(c) = graph.op(p).op else {
                                unreachable!()
                            };
                            TNode::Const(c.index() as u32)
                        }
                        _ => {
                            debug_assert!(match graph.value(v).def {
                                ValueDef::Result(p, _) => !in_region.contains(&p),
                                ValueDef::Input(_) => true,
                            });
                            egraph.analysis.inputs.push(graph.ty(v).clone());
                            inputs.push(v);
                            TNode::Input((inputs.len() - 1) as u32)
                        }
                    };
                    let id = egraph.add(leaf);
                    class.insert(v, id);
                    id
                }
            };
            operands.push(id);
        }
        let attr = (!crate::lang::is_plain(&data.op))
            .then(|| egraph.add(TNode::Attr(Box::new(Attr::new(data.op.clone())))));
        let id = egraph.add_uncanonical(op_node(&data.op, attr, &operands));
        original.push((id, op));
        if data.results.len() == 1 {
            class.insert(data.results[0], id);
        } else {
            for (i, &r) in data.results.iter().enumerate() {
                let g = egraph.add(TNode::Get(i as u32, [id]));
                class.insert(r, g);
            }
        }
    }
    egraph.rebuild();
    let mut outputs = Vec::new();
    let mut roots = Vec::new();
    for &op in ops {
        for &r in &graph.op(op).results {
            if used_after(r) {
                outputs.push(r);
                roots.push(egraph.find(class[&r]));
            }
        }
    }
    Region {
        egraph,
        inputs,
        outputs,
        roots,
        original,
    }
}

/// Where an extracted class came from: the original op's location and, for a backward op,
/// the forward value it differentiates (already a value of the new graph).
#[derive(Clone, Debug, Default)]
pub struct Origin {
    /// The original op's `loc`.
    pub loc: Option<String>,
    /// The original op's `grad_of`, when its forward value is already in the new graph.
    pub grad_of: Option<ValueId>,
    /// The class of the forward value, when it is inside the region: linked once emitted.
    pub grad_class: Option<Id>,
}

/// Why an extraction could not be emitted.
#[derive(Debug)]
pub struct EmitError;

/// Appends the extracted ops for `roots` to `out`, reading region inputs from `inputs` (new
/// graph values, by `input<i>`), adding constants through `consts` (by name, shared across
/// regions). Returns the value of each root. `locs` gives a class's origin (location, `grad_of`).
pub fn emit(
    egraph: &TEGraph,
    extraction: &Extraction,
    roots: &[Id],
    inputs: &[ValueId],
    out: &mut Graph,
    consts: &mut BTreeMap<String, ConstId>,
    locs: &BTreeMap<Id, Origin>,
) -> Result<Vec<ValueId>, EmitError> {
    let mut values: BTreeMap<Id, Vec<ValueId>> = BTreeMap::new();
    let mut on_stack: std::collections::BTreeSet<Id> = std::collections::BTreeSet::new();
    let mut result = Vec::with_capacity(roots.len());
    for &r in roots {
        let r = egraph.find(r);
        let vs = visit(
            egraph,
            extraction,
            r,
            inputs,
            out,
            consts,
            locs,
            &mut values,
            &mut on_stack,
        )?;
        result.push(*vs.first().ok_or(EmitError)?);
    }
    // Backward ops whose forward value this region emitted too.
    for (class, origin) in locs {
        let (Some(gc), Some(vs)) = (origin.grad_class, values.get(class)) else {
            continue;
        };
        let (Some(&v), Some(&fwd)) = (
            vs.first(),
            values.get(&egraph.find(gc)).and_then(|f| f.first()),
        ) else {
            continue;
        };
        if let ValueDef::Result(op, _) = out.value(v).def
            && matches!(out.value(fwd).def, ValueDef::Result(..))
            && out.op(op).grad_of.is_none()
        {
            out.op_mut(op).grad_of = Some(fwd);
        }
    }
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
fn visit(
    egraph: &TEGraph,
    ex: &Extraction,
    class: Id,
    inputs: &[ValueId],
    out: &mut Graph,
    consts: &mut BTreeMap<String, ConstId>,
    locs: &BTreeMap<Id, Origin>,
    values: &mut BTreeMap<Id, Vec<ValueId>>,
    on_stack: &mut std::collections::BTreeSet<Id>,
) -> Result<Vec<ValueId>, EmitError> {
    if let Some(v) = values.get(&class) {
        return Ok(v.clone());
    }
    if !on_stack.insert(class) {
        return Err(EmitError); // the choice has a cycle
    }
    let node = ex.choice.get(&class).ok_or(EmitError)?;
    let vs: Vec<ValueId> = match node {
        TNode::Input(i) => vec![*inputs.get(*i as usize).ok_or(EmitError)?],
        TNode::Const(c) => {
            let k = &egraph.analysis.consts[*c as usize];
            let id = match consts.get(&k.name) {
                Some(&id) => id,
                None => {
                    let id = out.add_const(k.clone());
                    consts.insert(k.name.clone(), id);
                    id
                }
            };
            let op = out.push_op(Op::Const(id), Vec::new(), vec![k.ty.clone()]);
            out.op(op).results.clone()
        }
        TNode::Attr(_) => return Err(EmitError),
        TNode::Get(i, [x]) => {
            let parent = visit(
                egraph,
                ex,
                egraph.find(*x),
                inputs,
                out,
                consts,
                locs,
                values,
                on_stack,
            )?;
            vec![*parent.get(*i as usize).ok_or(EmitError)?]
        }
        TNode::Op(..) => {
            let (op, operands) = node_op(egraph, node).ok_or(EmitError)?;
            let mut args = Vec::with_capacity(operands.len());
            for o in operands {
                let v = visit(
                    egraph,
                    ex,
                    egraph.find(o),
                    inputs,
                    out,
                    consts,
                    locs,
                    values,
                    on_stack,
                )?;
                args.push(*v.first().ok_or(EmitError)?);
            }
            let types = egraph[class].data.types.clone();
            if types.is_empty() {
                return Err(EmitError);
            }
            let id = out.push_op(op, args, types);
            if let Some(origin) = locs.get(&class) {
                out.op_mut(id).loc = origin.loc.clone();
                out.op_mut(id).grad_of = origin.grad_of;
            }
            out.op(id).results.clone()
        }
    };
    on_stack.remove(&class);
    values.insert(class, vs.clone());
    Ok(vs)
}
