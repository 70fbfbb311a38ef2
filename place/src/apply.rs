//! A plan with split alternatives applied to its graph: each device group some op splits
//! over becomes a device mesh of the graph (a ring of its devices, one mesh axis; `@split`
//! when the plan uses one group, `@split0`, `@split1`, ... in group order when it uses
//! several, Alpa's submeshes: one per pipeline stage, say), every split op runs on its
//! group's mesh (`device("@<mesh>")`, SPMD), each result carries the sharding of its layout,
//! and where a value's layout is not the one its user needs, collectives change it
//! ([`crate::split`]'s layouts):
//!
//! - `P` (a partial sum) is summed by an `all-reduce` before anything reads it whole, and
//!   by a `reduce-scatter` before a split op reads it as `S<b>`;
//! - `S<a>` becomes whole (`R`) by an `all-gather`, and `S<b>` by an `all-to-all`;
//! - a whole value (`R`, on the mesh or from a device or graph input off it) that a split
//!   op needs as `S<b>` is cut by an `all-slice` (each device keeps its block: no data moves);
//! - a constant that a split op reads split is a `const` op of its own with that sharding
//!   (the lowering writes each device's block into the weights file); a constant read split
//!   two ways gets a copy for the second way, since the weights file holds one block of a
//!   constant per device.
//!
//! A softmax (or log-softmax) split along its own axis is written out as its partial
//! reductions ([`softmax_over_split_axis`]): each device the maxima of its block, an
//! `all-gather` of them and their maximum, the exponentials against it, each device's partial
//! sum and an `all-reduce` of the sums. A layer norm split along its first normalized axis
//! likewise ([`layer_norm_over_split_axis`]): the sums, then the sums of squared deviations,
//! each all-reduced.
//!
//! Each conversion is made once per value, mesh and layout, just before its first user, and
//! every later user of that layout reads it. A value leaving its mesh (to an op placed whole,
//! to another mesh, or as a graph output) is made whole on its mesh first; it then leaves
//! from the mesh's first device (the simulator's and the lowering's convention), and another
//! mesh that needs it split cuts it (`all-slice`). The plan's ops placed whole get
//! their device as without splits.
//!
//! These are the collectives the cost model of the plan ([`crate::split`]) charges, so the
//! simulator of the applied graph times what the model did, but for the route of an
//! all-to-all: the simulator's ring steps between neighbours, the model's direct transfers
//! between every pair (the same on a switch, not on a ring or a mesh). (The lowering runs a
//! reduce-scatter as the all-reduce and an all-to-all as the all-gather that make the whole
//! tensor, each device then cutting its block: the same values, more traffic; MLIR 22 lowers
//! only the all-reduce to MPI.)

use std::collections::BTreeMap;

use tessera_ir::{
    BinaryOp, Constant, Dim, Graph, Mesh, Op, OpId, ReduceKind, Sharding, TensorType, UnaryOp,
    ValueDef, ValueId,
};

use crate::alternatives::REPLICATED;
use crate::build::Built;
use crate::problem::Instance;
use crate::problem::Problem;
use crate::split::Layout;

/// The name of the mesh a split plan declares.
pub const MESH: &str = "split";

/// Why a plan cannot be applied to its graph.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Two device groups the plan splits over share a device (each becomes a mesh, and a
    /// device holds one block of a split weight).
    #[error("the plan splits ops over device groups `{0}` and `{1}`, which share a device")]
    Overlap(String, String),
    /// The graph already has a device mesh (from the `shard` pass).
    #[error("the graph already declares device mesh @{0}")]
    HasMesh(String),
    /// The plan and the graph disagree.
    #[error("{0}")]
    Mismatch(String),
}

/// What applying a plan did (the collectives it inserted are in the graph).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Ops placed on the mesh (split, or replicated over it).
    pub split_ops: usize,
}

/// Where a value is and how it is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    /// Off every mesh: whole, on one device.
    Whole,
    /// On the graph's mesh of this index, in this layout.
    Mesh(usize, Layout),
}

/// Writes the plan `assign` (options of `inst`, whose problem is `built`'s) on `graph`: every
/// op placed whole gets its device; the split ops go on a mesh of their group, with their
/// results' shardings and the collectives between layouts (module doc). Run it on the graph
/// in its final order: the conversions go just before their first users.
pub fn apply_plan(
    graph: &mut Graph,
    built: &Built,
    inst: &Instance,
    assign: &[usize],
) -> Result<Applied, ApplyError> {
    let mut groups: Vec<usize> = assign
        .iter()
        .enumerate()
        .filter(|&(_, &x)| x >= inst.d)
        .map(|(o, &x)| inst.alts[o][x - inst.d].group)
        .collect();
    groups.sort_unstable();
    groups.dedup();
    // Whole ops first: their devices as without splits.
    crate::pass::write_devices(graph, built, inst, assign);
    if groups.is_empty() {
        return Ok(Applied::default());
    }
    if let Some(m) = graph.meshes.first() {
        return Err(ApplyError::HasMesh(m.name.clone()));
    }
    for (i, &a) in groups.iter().enumerate() {
        for &b in &groups[i + 1..] {
            let (da, db) = (
                &inst.place_devices[inst.d + a],
                &inst.place_devices[inst.d + b],
            );
            if da.iter().any(|k| db.contains(k)) {
                let name = |g: usize| inst.problem.groups[g].name.clone();
                return Err(ApplyError::Overlap(name(a), name(b)));
            }
        }
    }
    // One mesh per group, in group order.
    let mut mesh_of_group: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, &group) in groups.iter().enumerate() {
        let members: Vec<String> = inst.place_devices[inst.d + group]
            .iter()
            .map(|&k| inst.device_name(k).to_string())
            .collect();
        graph.meshes.push(Mesh {
            name: if groups.len() == 1 {
                MESH.to_string()
            } else {
                format!("{MESH}{i}")
            },
            shape: vec![members.len() as u32],
            devices: members,
        });
        mesh_of_group.insert(group, i);
    }
    let on_mesh: Vec<String> = graph.meshes.iter().map(Mesh::device_name).collect();
    let ways: Vec<u64> = graph
        .meshes
        .iter()
        .map(|m| m.devices.len() as u64)
        .collect();
    let mut applied = Applied::default();
    // The mesh of each split op and the layouts of its operands.
    let mut wants: BTreeMap<OpId, (usize, Vec<Layout>)> = BTreeMap::new();
    let mut home: BTreeMap<ValueId, Home> = BTreeMap::new();
    for (o, &x) in assign.iter().enumerate() {
        if x < inst.d {
            continue;
        }
        let Some(op) = built.graph_ops.get(o).copied().flatten() else {
            return Err(ApplyError::Mismatch(format!(
                "problem op {} is split but stands for no graph op",
                inst.op_name(o)
            )));
        };
        let alt = &inst.alts[o][x - inst.d];
        let m = mesh_of_group[&alt.group];
        let data = graph.op(op);
        if alt.inputs.len() != data.operands.len() || alt.outputs.len() != data.results.len() {
            return Err(ApplyError::Mismatch(format!(
                "problem op {}: its split lists {} operand and {} result layouts, the graph \
                 op has {} and {}",
                inst.op_name(o),
                alt.inputs.len(),
                alt.outputs.len(),
                data.operands.len(),
                data.results.len()
            )));
        }
        // Every split axis names an axis of its value.
        let ranks = data
            .operands
            .iter()
            .zip(&alt.inputs)
            .chain(data.results.iter().zip(&alt.outputs));
        for (&v, layout) in ranks {
            if let Layout::Split(a) = *layout
                && a as usize >= graph.ty(v).rank()
            {
                return Err(ApplyError::Mismatch(format!(
                    "problem op {}: its split cuts axis {a} of {v}, which has rank {}",
                    inst.op_name(o),
                    graph.ty(v).rank()
                )));
            }
        }
        wants.insert(op, (m, alt.inputs.clone()));
        let results = data.results.clone();
        for (&r, &layout) in results.iter().zip(&alt.outputs) {
            home.insert(r, Home::Mesh(m, layout));
            if let Layout::Split(a) = layout {
                graph.value_mut(r).sharding = Some(split_on(graph.ty(r).rank(), a));
            }
        }
        graph.op_mut(op).device = Some(on_mesh[m].clone());
        applied.split_ops += 1;
    }
    let mut conv = Conversions {
        names: (0..graph.num_values())
            .filter_map(|i| graph.value(ValueId::from_index(i)).name.clone())
            .collect(),
        on_mesh,
        split_from: Default::default(),
        made: BTreeMap::new(),
        const_axis: BTreeMap::new(),
    };
    let body = graph.ops().to_vec();
    let mut out: Vec<OpId> = Vec::with_capacity(body.len());
    for &op in &body {
        if matches!(graph.op(op).op, Op::Const(_)) {
            out.push(op);
            continue;
        }
        let operands = graph.op(op).operands.clone();
        for (i, &v) in operands.iter().enumerate() {
            let want = wants.get(&op).map(|(m, w)| (*m, w[i]));
            let from = home.get(&v).copied().unwrap_or(Home::Whole);
            let nv = conv.convert(graph, &mut out, v, from, want)?;
            graph.op_mut(op).operands[i] = nv;
        }
        // A softmax or layer norm split along its (first) reduced axis: partial reductions
        // and their collectives.
        if let Op::Softmax { axis } | Op::LogSoftmax { axis } | Op::LayerNorm { axis, .. } =
            graph.op(op).op
            && let Some(&(m, ref w)) = wants.get(&op)
            && w.first() == Some(&Layout::Split(axis as u32))
        {
            let old = graph.op(op).results[0];
            let new = if matches!(graph.op(op).op, Op::LayerNorm { .. }) {
                layer_norm_over_split_axis(graph, &mut out, op, &conv.on_mesh[m])?
            } else {
                softmax_over_split_axis(graph, &mut out, op, ways[m], &conv.on_mesh[m])
            };
            graph.replace_all_uses(old, new);
            if let Some(name) = graph.value_mut(old).name.take() {
                graph.set_name(new, name);
            }
            home.insert(new, Home::Mesh(m, Layout::Split(axis as u32)));
            continue;
        }
        out.push(op);
    }
    // Graph outputs end whole on the host, under the names they had.
    let names = tessera_ir::text::output_names(graph);
    let mut outputs: Vec<(ValueId, Option<String>)> = graph
        .outputs()
        .iter()
        .copied()
        .zip(graph.output_names().to_vec())
        .collect();
    for ((v, name), old) in outputs.iter_mut().zip(names) {
        let from = home.get(v).copied().unwrap_or(Home::Whole);
        let nv = conv.convert(graph, &mut out, *v, from, None)?;
        if nv != *v {
            *v = nv;
            *name = Some(old);
        }
    }
    graph.set_named_outputs(outputs);
    // A `const` op every user of which now reads a split copy goes.
    let mut used: std::collections::BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
    for &op in &out {
        used.extend(graph.op(op).operands.iter().copied());
    }
    out.retain(|&op| {
        let data = graph.op(op);
        !(matches!(data.op, Op::Const(_))
            && data
                .results
                .iter()
                .all(|r| conv.split_from.contains(r) && !used.contains(r)))
    });
    graph.set_ops(out);
    Ok(applied)
}

/// Softmax (or log-softmax) `op` over its axis `a`, whose operand is split `k` ways along
/// it, as partial reductions on the mesh `on_mesh` (ops appended to `out`; returns the
/// result, split the same way). In the global view, with the axis of extent `n` viewed as
/// `[k, n/k]` (each device's block one row):
/// `m = reduce-max` of each block, an `all-gather` of the `k` maxima and their `reduce-max`
/// `M`; `e = exp(x - M)`; `s = reduce-sum(e)` (each device a partial sum), an `all-reduce`;
/// `e / s` (log-softmax: `x - M - log(s)`); back to the operand's shape.
fn softmax_over_split_axis(
    g: &mut Graph,
    out: &mut Vec<OpId>,
    op: OpId,
    k: u64,
    on_mesh: &str,
) -> ValueId {
    let data = g.op(op).clone();
    let (Op::Softmax { axis: a } | Op::LogSoftmax { axis: a }) = data.op else {
        unreachable!("a softmax");
    };
    let log = matches!(data.op, Op::LogSoftmax { .. });
    let x = data.operands[0];
    let ty = g.ty(x).clone();
    let n = ty.shape[a].as_static().expect("a split axis is static");
    let rank = ty.rank() + 1;
    let with = |inner: &[u64]| -> TensorType {
        let mut shape = ty.shape[..a].to_vec();
        shape.extend(inner.iter().map(|&d| Dim::Static(d)));
        shape.extend(ty.shape[a + 1..].iter().cloned());
        TensorType::new(ty.elem, shape)
    };
    let mut push = |g: &mut Graph, op: Op, operands: Vec<ValueId>, ty: TensorType, split: bool| {
        let split = split.then_some(a as u32);
        mesh_op(g, out, (op, operands, ty), split, on_mesh, &data.loc)
    };
    let blocks = with(&[k, n / k]);
    let shape = |t: &TensorType| t.shape.clone();
    let xr = push(
        g,
        Op::Reshape {
            shape: shape(&blocks),
        },
        vec![x],
        blocks.clone(),
        true,
    );
    let reduce = |kind, axes: Vec<usize>| Op::Reduce {
        kind,
        axes,
        keep_dims: true,
    };
    let m = push(
        g,
        reduce(ReduceKind::Max, vec![a + 1]),
        vec![xr],
        with(&[k, 1]),
        true,
    );
    let maxima = push(
        g,
        Op::AllGather { axes: vec![0] },
        vec![m],
        with(&[k, 1]),
        false,
    );
    let big_m = push(
        g,
        reduce(ReduceKind::Max, vec![a]),
        vec![maxima],
        with(&[1, 1]),
        false,
    );
    let d = push(
        g,
        Op::Binary(BinaryOp::Sub),
        vec![xr, big_m],
        blocks.clone(),
        true,
    );
    let e = push(g, Op::Unary(UnaryOp::Exp), vec![d], blocks.clone(), true);
    // Each device's sum of its block: a partial sum of the whole, typed whole.
    let part = push(
        g,
        reduce(ReduceKind::Sum, vec![a, a + 1]),
        vec![e],
        with(&[1, 1]),
        false,
    );
    let sum = push(
        g,
        Op::AllReduce { axes: vec![0] },
        vec![part],
        with(&[1, 1]),
        false,
    );
    let y = if log {
        let l = push(g, Op::Unary(UnaryOp::Log), vec![sum], with(&[1, 1]), false);
        push(
            g,
            Op::Binary(BinaryOp::Sub),
            vec![d, l],
            blocks.clone(),
            true,
        )
    } else {
        push(
            g,
            Op::Binary(BinaryOp::Div),
            vec![e, sum],
            blocks.clone(),
            true,
        )
    };
    debug_assert_eq!(g.ty(y).rank(), rank);
    let result = g.ty(data.results[0]).clone();
    push(
        g,
        Op::Reshape {
            shape: shape(&result),
        },
        vec![y],
        result,
        true,
    )
}

/// Appends op `op` of `operands` and one result of type `ty` to `out`, on the mesh `on_mesh`
/// with location `loc`, its result split along `split` (whole when `None`); returns it.
fn mesh_op(
    g: &mut Graph,
    out: &mut Vec<OpId>,
    (op, operands, ty): (Op, Vec<ValueId>, TensorType),
    split: Option<u32>,
    on_mesh: &str,
    loc: &Option<String>,
) -> ValueId {
    let id = g.create_detached_op(op, operands, vec![ty]);
    g.op_mut(id).device = Some(on_mesh.to_string());
    g.op_mut(id).loc = loc.clone();
    let r = g.op(id).results[0];
    if let Some(a) = split {
        g.value_mut(r).sharding = Some(split_on(g.ty(r).rank(), a));
    }
    out.push(id);
    r
}

/// Layer norm `op` over axes `a..` of `x`, split along `a` (its scale and bias as the plan
/// reads them), as partial sums on the mesh `on_mesh` (ops appended to `out`; returns the
/// result, split along `a`): `mean = all-reduce(reduce-sum(x)) / n`, `d = x - mean`,
/// `var = all-reduce(reduce-sum(d * d)) / n`, `d / sqrt(var + epsilon) * scale + bias`.
fn layer_norm_over_split_axis(
    g: &mut Graph,
    out: &mut Vec<OpId>,
    op: OpId,
    on_mesh: &str,
) -> Result<ValueId, ApplyError> {
    let data = g.op(op).clone();
    let Op::LayerNorm { axis: a, epsilon } = data.op else {
        unreachable!("a layer norm");
    };
    let x = data.operands[0];
    let ty = g.ty(x).clone();
    let axes: Vec<usize> = (a..ty.rank()).collect();
    let n: u64 = ty.shape[a..]
        .iter()
        .map(|d| d.as_static().unwrap_or(1))
        .product();
    let mut reduced = ty.clone();
    for d in &mut reduced.shape[a..] {
        *d = Dim::Static(1);
    }
    let scalar = TensorType::new(ty.elem, Vec::new());
    let bytes = |v: f64| -> Result<Vec<u8>, ApplyError> {
        match ty.elem {
            tessera_ir::ElemType::F32 => Ok((v as f32).to_le_bytes().to_vec()),
            tessera_ir::ElemType::F64 => Ok(v.to_le_bytes().to_vec()),
            e => Err(ApplyError::Mismatch(format!(
                "layer norm {op} of {e}: split along its normalized axis only for f32 and f64"
            ))),
        }
    };
    let loc = data.loc.clone().unwrap_or_else(|| format!("{op}"));
    let constant = |g: &mut Graph, out: &mut Vec<OpId>, what: &str, v: f64| {
        let name = unique_const_name(g, format!("{loc}.{what}"));
        let c = g.add_const(Constant {
            name: name.clone(),
            ty: scalar.clone(),
            data: bytes(v)?.into(),
        });
        let id = g.create_detached_op(Op::Const(c), Vec::new(), vec![scalar.clone()]);
        out.push(id);
        let r = g.op(id).results[0];
        g.set_name(r, name);
        Ok::<_, ApplyError>(r)
    };
    let inv_n = constant(g, out, "inv_n", 1.0 / n as f64)?;
    let eps = constant(g, out, "epsilon", epsilon)?;
    let mut push = |g: &mut Graph, op: Op, operands: Vec<ValueId>, split: bool| {
        let t = if split { ty.clone() } else { reduced.clone() };
        let split = split.then_some(a as u32);
        mesh_op(g, out, (op, operands, t), split, on_mesh, &data.loc)
    };
    let sum = |axes: &[usize]| Op::Reduce {
        kind: ReduceKind::Sum,
        axes: axes.to_vec(),
        keep_dims: true,
    };
    let bin = Op::Binary;
    // Each device's sum of its block: a partial sum of the whole, typed whole.
    let part = push(g, sum(&axes), vec![x], false);
    let total = push(g, Op::AllReduce { axes: vec![0] }, vec![part], false);
    let mean = push(g, bin(BinaryOp::Mul), vec![total, inv_n], false);
    let d = push(g, bin(BinaryOp::Sub), vec![x, mean], true);
    let sq = push(g, bin(BinaryOp::Mul), vec![d, d], true);
    let part = push(g, sum(&axes), vec![sq], false);
    let total = push(g, Op::AllReduce { axes: vec![0] }, vec![part], false);
    let var = push(g, bin(BinaryOp::Mul), vec![total, inv_n], false);
    let var = push(g, bin(BinaryOp::Add), vec![var, eps], false);
    let sd = push(g, Op::Unary(UnaryOp::Sqrt), vec![var], false);
    let y = push(g, bin(BinaryOp::Div), vec![d, sd], true);
    let mut y = push(g, bin(BinaryOp::Mul), vec![y, data.operands[1]], true);
    if let Some(&b) = data.operands.get(2) {
        y = push(g, bin(BinaryOp::Add), vec![y, b], true);
    }
    Ok(y)
}

/// The sharding of a rank-`rank` value split along tensor axis `axis` over the one mesh axis.
fn split_on(rank: usize, axis: u32) -> Sharding {
    let mut s = Sharding::replicated(rank);
    if let Some(a) = s.axes.get_mut(axis as usize) {
        *a = vec![0];
    }
    s
}

/// The conversions made so far, by value and layout, and the body they go into.
struct Conversions {
    /// The value names taken.
    names: std::collections::BTreeSet<String>,
    /// Each mesh's `device(...)` name, by mesh index.
    on_mesh: Vec<String>,
    /// (value, mesh and layout there; `None` for whole off every mesh) -> the value so.
    made: BTreeMap<(ValueId, Option<(usize, Layout)>), ValueId>,
    /// Constant values some user now reads split.
    split_from: std::collections::BTreeSet<ValueId>,
    /// A constant's split axis in the weights file, and the copies made for other axes.
    const_axis: BTreeMap<tessera_ir::ConstId, (u32, BTreeMap<u32, tessera_ir::ConstId>)>,
}

impl Conversions {
    /// `v` (at `from`) as its user needs it: `want` on a mesh (its index and the layout),
    /// or whole off every mesh (`None`).
    fn convert(
        &mut self,
        g: &mut Graph,
        out: &mut Vec<OpId>,
        v: ValueId,
        from: Home,
        want: Option<(usize, Layout)>,
    ) -> Result<ValueId, ApplyError> {
        if let ValueDef::Result(def, _) = g.value(v).def
            && let Op::Const(c) = g.op(def).op
        {
            return Ok(match want {
                Some((m, Layout::Split(a))) => self.split_const(g, out, v, c, m, a),
                _ => v,
            });
        }
        use Layout::{Partial, Replicated, Split};
        match (from, want) {
            // Whole values go anywhere whole.
            (Home::Whole | Home::Mesh(_, Replicated), None | Some((_, Replicated))) => Ok(v),
            (Home::Mesh(a, x), Some((b, y))) if a == b && x == y => Ok(v),
            (_, Some((_, Partial))) => Err(ApplyError::Mismatch(format!(
                "value {v} is read as a partial sum"
            ))),
            (Home::Whole | Home::Mesh(_, Replicated), Some((b, Split(y)))) => {
                Ok(self.collective(g, out, v, Op::AllSlice { axes: vec![0] }, b, Some(y)))
            }
            // Partial sums to blocks of the sum: half an all-reduce's traffic.
            (Home::Mesh(a, Partial), Some((b, Split(y)))) if a == b => {
                let op = Op::ReduceScatter { axes: vec![0] };
                Ok(self.collective(g, out, v, op, a, Some(y)))
            }
            // One split to another: each device sends the others the parts they keep.
            (Home::Mesh(a, Split(_)), Some((b, Split(y)))) if a == b => {
                let op = Op::AllToAll { axes: vec![0] };
                Ok(self.collective(g, out, v, op, a, Some(y)))
            }
            // Anything else leaves its mesh whole first.
            (Home::Mesh(a, Partial), _) => {
                let whole = self.collective(g, out, v, Op::AllReduce { axes: vec![0] }, a, None);
                self.convert(g, out, whole, Home::Mesh(a, Replicated), want)
            }
            (Home::Mesh(a, Split(_)), _) => {
                let whole = self.collective(g, out, v, Op::AllGather { axes: vec![0] }, a, None);
                self.convert(g, out, whole, Home::Mesh(a, Replicated), want)
            }
        }
    }

    /// `v` through `op` on mesh `m`, its result split along `axis` (`None`: whole), made
    /// once per value, mesh and result layout.
    fn collective(
        &mut self,
        g: &mut Graph,
        out: &mut Vec<OpId>,
        v: ValueId,
        op: Op,
        m: usize,
        axis: Option<u32>,
    ) -> ValueId {
        let layout = match axis {
            Some(a) => Layout::Split(a),
            None => Layout::Replicated,
        };
        let key = (v, Some((m, layout)));
        if let Some(&r) = self.made.get(&key) {
            return r;
        }
        let suffix = match op {
            Op::AllReduce { .. } => "sum",
            Op::AllGather { .. } => "whole",
            Op::ReduceScatter { .. } => "scatter",
            Op::AllToAll { .. } => "to",
            _ => "block",
        };
        let ty = g.ty(v).clone();
        let c = g.create_detached_op(op, vec![v], vec![ty]);
        g.op_mut(c).device = Some(self.on_mesh[m].clone());
        if let ValueDef::Result(def, _) = g.value(v).def {
            g.op_mut(c).loc = g.op(def).loc.clone();
        }
        let r = g.op(c).results[0];
        if let Some(a) = axis {
            g.value_mut(r).sharding = Some(split_on(g.ty(r).rank(), a));
        }
        if let Some(name) = g.value(v).name.clone() {
            let name = match axis {
                Some(a) => format!("{name}.{suffix}{a}"),
                None => format!("{name}.{suffix}"),
            };
            let name = unique_name(&self.names, name);
            self.names.insert(name.clone());
            g.set_name(r, name);
        }
        out.push(c);
        self.made.insert(key, r);
        r
    }

    /// The constant value `v` (of constant `c`) split along `axis` on mesh `m`: a `const` op
    /// of its own with that sharding (on that mesh when the graph has several), of a copy of
    /// the constant when `c` is already split another way.
    fn split_const(
        &mut self,
        g: &mut Graph,
        out: &mut Vec<OpId>,
        v: ValueId,
        c: tessera_ir::ConstId,
        m: usize,
        axis: u32,
    ) -> ValueId {
        let key = (v, Some((m, Layout::Split(axis))));
        if let Some(&r) = self.made.get(&key) {
            return r;
        }
        self.split_from.insert(v);
        let (first, copies) = self
            .const_axis
            .entry(c)
            .or_insert_with(|| (axis, BTreeMap::new()));
        let c = if *first == axis {
            c
        } else if let Some(&copy) = copies.get(&axis) {
            copy
        } else {
            let k = g.constant(c);
            let copy = Constant {
                name: unique_const_name(g, format!("{}.split{axis}", k.name)),
                ty: k.ty.clone(),
                data: k.data.clone(),
            };
            let id = g.add_const(copy);
            copies.insert(axis, id);
            id
        };
        let ty = g.ty(v).clone();
        let op = g.create_detached_op(Op::Const(c), vec![], vec![ty]);
        if self.on_mesh.len() > 1 {
            g.op_mut(op).device = Some(self.on_mesh[m].clone());
        }
        let r = g.op(op).results[0];
        g.value_mut(r).sharding = Some(split_on(g.ty(r).rank(), axis));
        out.push(op);
        self.made.insert(key, r);
        r
    }
}

/// `name`, or `name.N` for the first N not in `taken`.
fn unique_name(taken: &std::collections::BTreeSet<String>, name: String) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (1..)
        .map(|i| format!("{name}.{i}"))
        .find(|n| !taken.contains(n))
        .unwrap_or(name)
}

/// `name`, or `name.N` for the first N that no constant of `g` uses (a copy is made once
/// per constant and axis: the scan is not repeated per use).
fn unique_const_name(g: &Graph, name: String) -> String {
    let taken: std::collections::BTreeSet<String> = (0..g.num_consts())
        .map(|i| g.constant(tessera_ir::ConstId::from_index(i)).name.clone())
        .collect();
    unique_name(&taken, name)
}

/// Whether `compile` splits ops over device groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitMode {
    /// Every op runs whole on one device.
    #[default]
    Off,
    /// The planner chooses, per op, whole or split (the no-split plans compete too).
    Auto,
    /// Every op that has a split alternative takes one (a replicated run does not count).
    Force,
}

impl SplitMode {
    /// The name `--split` takes.
    pub fn name(self) -> &'static str {
        match self {
            SplitMode::Off => "off",
            SplitMode::Auto => "auto",
            SplitMode::Force => "force",
        }
    }
}

impl std::fmt::Display for SplitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SplitMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(SplitMode::Off),
            "auto" => Ok(SplitMode::Auto),
            "force" => Ok(SplitMode::Force),
            _ => Err(format!(
                "unknown split mode `{s}` (expected off, auto or force)"
            )),
        }
    }
}

/// The problems a split plan may come from (a problem with split alternatives, [`crate::build::build_with`]):
/// one per device group of `inst`'s problem, each keeping only that group and the
/// alternatives over it; with `tilings`, besides, one per group size that has two or more
/// disjoint groups (of any device kinds: HetPipe's stages on GPUs of different
/// generations), keeping all of them (every op may split over any one: a pipeline of
/// stages, each data or tensor parallel over its own group, Alpa's submeshes). With [`SplitMode::Force`], an op that has an alternative other than a
/// replicated run keeps only those alternatives and may not run whole; a colocation group is
/// forced as one: when a member splits and every member has an alternative on the groups (a
/// member that cannot split then runs replicated), else not at all. With `axes` (not empty),
/// only alternatives that split one of those axes (the names of
/// [`crate::alternatives::rules`]: `batch`, `columns`, `rows`, `heads`, `hidden`, `vocab`,
/// `channels`, `contracted`, `axis<N>`) are offered. A problem over which no op splits is
/// left out. Of the single groups of one device kind and size, only the one nearest the host
/// (the device the first graph input is pinned to; fewest link hops on the problem's routes
/// from it in total, then the first) gives a problem: alike groups differ only in their
/// transfers to and from the rest, and each problem is a full search.
pub fn split_problems(
    inst: &Instance,
    mode: SplitMode,
    axes: &[String],
    tilings: bool,
) -> Vec<Problem> {
    let problem = &inst.problem;
    let host = inst.input_devices().next();
    let hops = |k: usize| -> u64 {
        match host {
            Some(h) if h != k => match inst.route_channels(h, k).count() {
                0 => u64::from(u32::MAX),
                n => n as u64,
            },
            _ => 0,
        }
    };
    // (kind, size) -> (total hops, group index), and every group of that kind and size.
    let mut nearest: BTreeMap<(&str, usize), (u64, usize)> = BTreeMap::new();
    let mut alike: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..problem.groups.len() {
        let members = &inst.place_devices[inst.d + i];
        let kind = members
            .first()
            .map_or("", |&k| problem.devices[k].kind.as_str());
        let total: u64 = members.iter().map(|&k| hops(k)).sum();
        let e = nearest.entry((kind, members.len())).or_insert((total, i));
        if total < e.0 {
            *e = (total, i);
        }
        alike.entry(members.len()).or_default().push(i);
    }
    let kept: std::collections::BTreeSet<usize> = nearest.values().map(|&(_, i)| i).collect();
    let mut out = Vec::new();
    for i in 0..problem.groups.len() {
        if kept.contains(&i) {
            out.extend(restricted(inst, &[i], mode, axes));
        }
    }
    if tilings {
        for (size, groups) in &alike {
            let tiles = disjoint_groups(inst, groups);
            if tiles.len() >= 2 {
                out.extend(restricted(inst, &tiles, mode, axes).map(|mut p| {
                    p.name = format!("{} on {} groups of {size}", problem.name, tiles.len());
                    p
                }));
            }
        }
    }
    out
}

/// Of the device groups `groups` (indices, in order), those that share no device with an
/// earlier one kept (first fit): a tiling of their devices.
pub fn disjoint_groups(inst: &Instance, groups: &[usize]) -> Vec<usize> {
    let mut used = std::collections::BTreeSet::new();
    groups
        .iter()
        .copied()
        .filter(|&g| {
            let members = &inst.place_devices[inst.d + g];
            let free = members.iter().all(|k| !used.contains(k));
            if free {
                used.extend(members.iter().copied());
            }
            free
        })
        .collect()
}

/// `inst`'s problem with only the groups `keep` and the alternatives over them (see
/// [`split_problems`]); `None` when no op splits over them.
fn restricted(
    inst: &Instance,
    keep: &[usize],
    mode: SplitMode,
    axes: &[String],
) -> Option<Problem> {
    let problem = &inst.problem;
    let names: std::collections::BTreeSet<&str> = keep
        .iter()
        .map(|&i| problem.groups[i].name.as_str())
        .collect();
    let mut p = problem.clone();
    p.groups = keep.iter().map(|&i| problem.groups[i].clone()).collect();
    let mut splits_any = false;
    for op in &mut p.ops {
        op.splits.retain(|s| {
            names.contains(s.group.as_str()) && (axes.is_empty() || axes.contains(&s.axis))
        });
        splits_any |= op.splits.iter().any(|s| s.axis != REPLICATED);
    }
    if mode == SplitMode::Force {
        // A colocation group is one unit: forced onto the group when a member splits
        // and every member can run there (split or replicated), else left as it is.
        let mut units: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
        // `p` is `problem` with fewer alternatives: the same ops in the same order.
        for o in &p.ops {
            if let Some(c) = &o.colocate {
                let (split, all) = (
                    o.splits.iter().any(|s| s.axis != REPLICATED),
                    !o.splits.is_empty(),
                );
                let e = units.entry(c.as_str()).or_insert((false, true));
                e.0 |= split;
                e.1 &= all;
            }
        }
        let units: BTreeMap<String, bool> = units
            .into_iter()
            .map(|(c, (split, all))| (c.to_string(), split && all))
            .collect();
        for op in &mut p.ops {
            let split = op.splits.iter().any(|s| s.axis != REPLICATED);
            let forced = match &op.colocate {
                Some(c) => units.get(c).copied().unwrap_or(false),
                None => split,
            };
            if forced {
                if split {
                    op.splits.retain(|s| s.axis != REPLICATED);
                }
                op.time.clear();
            }
        }
    }
    if !splits_any {
        return None;
    }
    p.name = format!(
        "{} on {}",
        problem.name,
        p.groups
            .iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Some(p)
}
