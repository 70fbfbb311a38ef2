//! Applying a [`Region`]: placement on the mesh, sharding annotations, split constants and
//! the collectives.
//!
//! - Every region op gets `device("@<mesh>")`; every split value the sharding of its axis
//!   over all mesh axes.
//! - A constant operand that must be split is annotated in place when the region op is its
//!   only user; otherwise the op gets its own `const` op of the same constant (no data is
//!   copied), annotated.
//! - A row-parallel closer's result is a partial sum: an `all-reduce` over all mesh axes
//!   follows it and takes over its uses (and its name; the partial sum is renamed
//!   `<name>.partial`). A closing `gemm` with a C operand loses it, and an `add` of C after
//!   the all-reduce takes its place, so that C is added once.
//! - A value gathered in data mode gets an `all-gather` right after its definition, which
//!   takes over its uses outside the region (and its name; the split value is renamed
//!   `<name>.shard`).

use std::collections::BTreeSet;

use tessera_ir::{BinaryOp, Graph, Mesh, Op, OpId, Sharding, ValueDef, ValueId};

use crate::propagate::{Region, Uses};

/// The sharding of a rank-`rank` value split along `axis` over every axis of `mesh`.
pub fn split_along(mesh: &Mesh, rank: usize, axis: usize) -> Sharding {
    let mut s = Sharding::replicated(rank);
    s.axes[axis] = (0..mesh.shape.len() as u32).collect();
    s
}

fn all_axes(mesh: &Mesh) -> Vec<u32> {
    (0..mesh.shape.len() as u32).collect()
}

/// The body position of `op`.
fn position(g: &Graph, op: OpId) -> usize {
    g.ops()
        .iter()
        .position(|&o| o == op)
        .unwrap_or(g.ops().len())
}

/// Names used by values of `g`.
fn names(g: &Graph) -> BTreeSet<String> {
    (0..g.num_values())
        .filter_map(|i| g.value(ValueId::from_index(i)).name.clone())
        .collect()
}

/// Moves `from`'s name to `to` and renames `from` to `<name>.<suffix>` when that is free.
fn hand_over_name(g: &mut Graph, from: ValueId, to: ValueId, suffix: &str) {
    let Some(name) = g.value(from).name.clone() else {
        return;
    };
    let taken = names(g);
    let renamed = format!("{name}.{suffix}");
    g.value_mut(from).name = (!taken.contains(&renamed)).then_some(renamed);
    g.value_mut(to).name = Some(name);
}

/// Applies `region` to `g` on `mesh` (which `g` must declare). Returns the number of
/// collectives inserted.
pub fn apply(g: &mut Graph, region: &Region, mesh: &Mesh) -> usize {
    let device = mesh.device_name();
    for &o in &region.ops {
        g.op_mut(o).device = Some(device.clone());
    }
    for (&v, &axis) in &region.split {
        let rank = g.ty(v).rank();
        g.value_mut(v).sharding = Some(split_along(mesh, rank, axis));
    }
    for &(o, i, axis) in &region.const_splits {
        split_const(g, o, i, axis, mesh);
    }
    let mut collectives = 0;
    for &o in &region.closers {
        close(g, o, mesh);
        collectives += 1;
    }
    let region_ops: BTreeSet<OpId> = region.ops.iter().copied().collect();
    for &v in &region.gathers {
        gather(g, v, &region_ops, mesh);
        collectives += 1;
    }
    collectives
}

/// Splits constant operand `i` of `o` along `axis`.
fn split_const(g: &mut Graph, o: OpId, i: usize, axis: usize, mesh: &Mesh) {
    let v = g.op(o).operands[i];
    let want = split_along(mesh, g.ty(v).rank(), axis);
    if g.value(v).sharding.as_ref() == Some(&want) {
        return;
    }
    let uses = Uses::new(g);
    let only_here = uses.users(v) == [o]
        && g.op(o).operands.iter().filter(|&&x| x == v).count() == 1
        && !uses.is_output(v)
        && g.value(v).sharding.is_none();
    if only_here {
        g.value_mut(v).sharding = Some(want);
        return;
    }
    let ValueDef::Result(def, _) = g.value(v).def else {
        return;
    };
    let op = g.op(def).op.clone();
    let ty = g.ty(v).clone();
    let copy = g.insert_op(position(g, o), op, vec![], vec![ty]);
    let r = g.op(copy).results[0];
    g.value_mut(r).sharding = Some(want);
    g.op_mut(o).operands[i] = r;
}

/// Follows the row-parallel `o` with an all-reduce (and the add of its C, for a gemm).
fn close(g: &mut Graph, o: OpId, mesh: &Mesh) {
    let partial = g.op(o).results[0];
    let ty = g.ty(partial).clone();
    let c = match g.op(o).op {
        Op::Gemm { .. } if g.op(o).operands.len() == 3 => g.op_mut(o).operands.pop(),
        _ => None,
    };
    let mut at = position(g, o) + 1;
    let device = Some(mesh.device_name());
    let reduce = g.insert_op(
        at,
        Op::AllReduce {
            axes: all_axes(mesh),
        },
        vec![partial],
        vec![ty.clone()],
    );
    g.op_mut(reduce).device = device.clone();
    let mut last = g.op(reduce).results[0];
    if let Some(c) = c {
        at += 1;
        let add = g.insert_op(at, Op::Binary(BinaryOp::Add), vec![last, c], vec![ty]);
        g.op_mut(add).device = device;
        g.op_mut(add).loc = g.op(o).loc.clone();
        last = g.op(add).results[0];
    }
    redirect(g, partial, last, |op| op == reduce);
    hand_over_name(g, partial, last, "partial");
}

/// Gathers `v` after its definition for its uses outside `region` and as an output.
fn gather(g: &mut Graph, v: ValueId, region: &BTreeSet<OpId>, mesh: &Mesh) {
    let at = match g.value(v).def {
        ValueDef::Result(def, _) => position(g, def) + 1,
        ValueDef::Input(_) => 0,
    };
    let ty = g.ty(v).clone();
    let op = g.insert_op(
        at,
        Op::AllGather {
            axes: all_axes(mesh),
        },
        vec![v],
        vec![ty],
    );
    g.op_mut(op).device = Some(mesh.device_name());
    let whole = g.op(op).results[0];
    redirect(g, v, whole, |o| o == op || region.contains(&o));
    hand_over_name(g, v, whole, "shard");
}

/// Replaces `from` with `to` in the operands of every op not `kept`, and in the outputs.
fn redirect(g: &mut Graph, from: ValueId, to: ValueId, kept: impl Fn(OpId) -> bool) {
    let ops: Vec<OpId> = g.ops().to_vec();
    for o in ops {
        if kept(o) {
            continue;
        }
        for operand in &mut g.op_mut(o).operands {
            if *operand == from {
                *operand = to;
            }
        }
    }
    let outputs: Vec<ValueId> = g
        .outputs()
        .iter()
        .map(|&x| if x == from { to } else { x })
        .collect();
    g.replace_output_values(outputs);
}
