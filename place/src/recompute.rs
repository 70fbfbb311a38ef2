//! Activation recomputation (rematerialization) in a placed, microbatched training step.
//!
//! A pipeline stage keeps each microbatch's forward activations until that microbatch's
//! backward reads them: GPipe keeps all `M` microbatches' at once, 1F1B up to the pipeline
//! depth. Recomputation keeps only what enters the stage (its inputs from other stages, the
//! batch's rows, the weights) and runs the stage's forward of a microbatch again just before
//! its backward needs it: GPipe's re-materialization (Huang et al., NeurIPS 2019, "each
//! accelerator only stores output activations at the partition boundaries"; the same idea as
//! Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", with the stage as the
//! segment). Megatron-LM calls it full recomputation (Korthikanti et al. 2022). It trades a
//! stage's forward time, once more per microbatch, for its activations.
//!
//! **The rewrite** ([`recompute`]), per place (a device, or a device mesh) of the given set,
//! and per microbatch `i` (as [`crate::pipeline`] finds microbatches):
//! - the *forward ops* of the stage are those on the place that belong to microbatch `i` and
//!   have no gradient link (not backward), other than transfers;
//! - a forward op is *recomputed* when one of its results is read by a backward op of
//!   microbatch `i` on the same place, or by a recomputed op there: the cone of the backward's
//!   reads back to the stage's boundary;
//! - each recomputed op gets a copy (same op, attributes, place, results' types and
//!   shardings; results named `<name>.recomputed`) whose operands are the copies where those
//!   exist and the original values otherwise (the boundary: values from other places, shared
//!   ops, weights, inputs), and the backward ops read the copies instead;
//! - each copy goes into the body just before the first op that reads it (its own copied
//!   operands before it), so a stage recomputes a microbatch's forward at that microbatch's
//!   backward, in the schedule's order.
//!
//! The originals' results are then read only by the forward, and freed once it has passed; the
//! copies live from the backward's start to their last reader. Every op is deterministic (the
//! IR's dropout is a function of the element's index), so the step's numbers do not change,
//! bit for bit. Collectives of a tensor-parallel stage are copied like any op: every rank of
//! the mesh runs the copies in the same body order.

use std::collections::{BTreeMap, BTreeSet};

use tessera_ir::{Graph, Op, OpId, ValueDef, ValueId};

use crate::pipeline::{Micro, microbatches};

/// Recomputes, on every place in `places` (every place when `None`), each microbatch's
/// forward activations at its backward (see the module doc). Returns how many ops were
/// copied (0 when the graph is not a microbatched step or nothing is read back).
pub fn recompute(graph: &mut Graph, places: Option<&BTreeSet<String>>) -> usize {
    let (micro, count) = microbatches(graph);
    if count == 0 {
        return 0;
    }
    let body: Vec<OpId> = graph.ops().to_vec();
    let position: BTreeMap<OpId, usize> = body.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    // Each op's (place, microbatch), for the forward ops of one microbatch on a place taken
    // and for the backward ops of one microbatch.
    let mut forward: BTreeMap<OpId, (String, u32)> = BTreeMap::new();
    let mut backward: BTreeMap<OpId, (String, u32)> = BTreeMap::new();
    for &op in &body {
        let data = graph.op(op);
        let (Some(place), Some(Micro::One(i))) = (data.device.as_ref(), micro.get(&op)) else {
            continue;
        };
        if data.grad_of.is_some() {
            backward.insert(op, (place.clone(), *i));
        } else if !matches!(data.op, Op::Transfer { .. } | Op::Const(_))
            && places.is_none_or(|p| p.contains(place))
        {
            forward.insert(op, (place.clone(), *i));
        }
    }
    // Which forward ops are recomputed: a reverse sweep, so that every reader of an op is
    // decided before the op.
    let mut copied: BTreeSet<OpId> = BTreeSet::new();
    for &op in body.iter().rev() {
        let reader = backward
            .get(&op)
            .or_else(|| copied.contains(&op).then(|| forward.get(&op)).flatten());
        let Some(at) = reader else {
            continue;
        };
        for &v in &graph.op(op).operands {
            if let Some(p) = producer(graph, v)
                && forward.get(&p) == Some(at)
            {
                copied.insert(p);
            }
        }
    }
    if copied.is_empty() {
        return 0;
    }
    // An operand of an op of `at` (place, microbatch): the copy made there, else itself.
    let read = |graph: &Graph, copy_of: &BTreeMap<ValueId, ValueId>, at, v| match (
        producer(graph, v),
        copy_of.get(&v),
    ) {
        (Some(p), Some(&c)) if forward.get(&p) == Some(at) => c,
        _ => v,
    };
    // The copies, in body order (operands before their readers), each with its original.
    let mut copy_of: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    let mut original: BTreeMap<OpId, OpId> = BTreeMap::new();
    for &op in body.iter().filter(|o| copied.contains(o)) {
        let data = graph.op(op).clone();
        let at = &forward[&op];
        let operands = data
            .operands
            .iter()
            .map(|&v| read(graph, &copy_of, at, v))
            .collect();
        let types = data.results.iter().map(|&r| graph.ty(r).clone()).collect();
        let c = graph.create_detached_op(data.op.clone(), operands, types);
        let results = graph.op(c).results.clone();
        {
            let cd = graph.op_mut(c);
            cd.device = data.device.clone();
            cd.loc = data.loc.clone();
        }
        for (&r, &n) in data.results.iter().zip(&results) {
            graph.value_mut(n).sharding = graph.value(r).sharding.clone();
            if let Some(name) = graph.value(r).name.clone() {
                graph.set_name(n, format!("{name}.recomputed"));
            }
            copy_of.insert(r, n);
        }
        original.insert(c, op);
    }
    // The backward ops of the same place and microbatch read the copies.
    for &op in &body {
        let Some(at) = backward.get(&op) else {
            continue;
        };
        let redirected: Vec<ValueId> = graph
            .op(op)
            .operands
            .iter()
            .map(|&v| read(graph, &copy_of, at, v))
            .collect();
        graph.op_mut(op).operands = redirected;
    }
    // The body: each copy just before the first op that reads it, its copied operands first
    // (in their originals' body order).
    let mut placed: BTreeSet<OpId> = BTreeSet::new();
    let mut order = Vec::with_capacity(body.len() + original.len());
    let copy_producer = |graph: &Graph, v: ValueId| {
        producer(graph, v)
            .filter(|p| original.contains_key(p))
            .map(|p| (position[&original[&p]], p))
    };
    for &op in &body {
        let mut due: BTreeSet<(usize, OpId)> = BTreeSet::new();
        let mut stack: Vec<(usize, OpId)> = graph
            .op(op)
            .operands
            .iter()
            .filter_map(|&v| copy_producer(graph, v))
            .collect();
        while let Some((pos, c)) = stack.pop() {
            if placed.contains(&c) || !due.insert((pos, c)) {
                continue;
            }
            stack.extend(
                graph
                    .op(c)
                    .operands
                    .iter()
                    .filter_map(|&v| copy_producer(graph, v)),
            );
        }
        for (_, c) in due {
            placed.insert(c);
            order.push(c);
        }
        order.push(op);
    }
    graph.set_ops(order);
    original.len()
}

/// The op that makes `v`, if an op does.
fn producer(graph: &Graph, v: ValueId) -> Option<OpId> {
    match graph.value(v).def {
        ValueDef::Result(p, _) => Some(p),
        ValueDef::Input(_) => None,
    }
}
