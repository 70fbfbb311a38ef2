//! Microbatches: the model's forward ops run once per microbatch, each on its slice of the
//! batch (GPipe's micro-batches, Huang et al. 2019; PyTorch's gradient accumulation).
//!
//! The step keeps the model's batch inputs whole (`[B, ...]`); each of the `M` microbatches
//! reads rows `i*B/M .. (i+1)*B/M` of every batch input (a `slice`) and runs its own copy of
//! every op that depends on the batch, typed for `B/M` rows. Ops that do not depend on the
//! batch (constants, a weight's transpose, position embeddings) are not copied: every
//! microbatch reads the one value. The loss is then built per microbatch and summed (the
//! `train` pass divides each by the whole batch's count), so the backward graph has one part
//! per microbatch, and a parameter's gradient is the sum of its
//! microbatches' contributions (the gradient pass adds the contributions of every use).
//!
//! **Which axis is the batch.** Axis 0 of the batch inputs; for every other value the axis
//! its producer carries it to (a reshape: the result axis whose leading extents multiply to
//! the operand's before its batch axis; a transpose: where the permutation takes it;
//! broadcasting ops: aligned from the right). A copy's result type must be the model's with
//! exactly that axis divided by `M`: a value that stops depending on the batch or mixes rows
//! (a reduction over the batch axis, a softmax or layer norm across it, a slice, concat or
//! gather along it, a shape read) would change meaning with the microbatch, and is an error
//! naming the op.
//!
//! Batch normalization (still in its inference form here) is copied like any per-sample op;
//! the `train` pass then gives each copy its microbatch's statistics and chains the running
//! statistics' updates through the copies in microbatch order.
//!
//! Models whose shapes are baked in (an ONNX export with a static batch: `reshape` to
//! `[2, 16, 2, 16]`) are rebatched this way without re-exporting.

use std::collections::{BTreeMap, BTreeSet};

use tessera_ir::{Dim, Graph, Op, OpId, TensorType, ValueId, infer::infer};

use crate::grad::describe_op;

/// The copies of the batch-dependent ops, per microbatch.
pub(crate) struct Microbatches {
    /// Per microbatch, the value each batch-dependent model value has in it.
    pub copies: Vec<BTreeMap<ValueId, ValueId>>,
}

/// The batch axis each operand carries (`None`: it does not depend on the batch).
type Carried = BTreeMap<ValueId, usize>;

/// Copies the ops of `graph` that depend on `batch_inputs` once per microbatch (see the
/// module doc), appended to the body, and removes the originals; the model's outputs are
/// cleared (the caller builds the step's). Errors name the input or op that cannot be split.
pub(crate) fn microbatch(
    graph: &mut Graph,
    batch_inputs: &[ValueId],
    m: u64,
) -> Result<Microbatches, String> {
    let mut batch: Option<u64> = None;
    let mut carried: Carried = BTreeMap::new();
    for &v in batch_inputs {
        let ty = graph.ty(v);
        let name = graph.value(v).name.clone().unwrap_or_else(|| v.to_string());
        let b = ty.shape.first().and_then(Dim::as_static).ok_or_else(|| {
            format!("microbatches: batch input `{name}` ({ty}) has no static batch axis 0")
        })?;
        if b < m || !b.is_multiple_of(m) {
            return Err(format!(
                "microbatches={m}: batch input `{name}` has {b} rows, which {m} microbatches \
                 do not divide"
            ));
        }
        if batch.is_some_and(|x| x != b) {
            return Err(format!(
                "microbatches: batch input `{name}` has {b} rows, another batch input {}",
                batch.unwrap_or(0)
            ));
        }
        batch = Some(b);
        carried.insert(v, 0);
    }
    let batch = batch.ok_or("microbatches: the model has no batch input")?;
    // The batch-dependent ops, with the op and result types each copy gets.
    let mut plan: Vec<(OpId, Op, Vec<TensorType>)> = Vec::new();
    let mut types: BTreeMap<ValueId, TensorType> = batch_inputs
        .iter()
        .map(|&v| {
            let mut t = graph.ty(v).clone();
            t.shape[0] = Dim::Static(batch / m);
            (v, t)
        })
        .collect();
    for &o in graph.ops() {
        let data = graph.op(o);
        let axes: Vec<Option<usize>> = data
            .operands
            .iter()
            .map(|v| carried.get(v).copied())
            .collect();
        if axes.iter().all(Option::is_none) {
            continue;
        }
        let fail = |why: String| format!("microbatches: {} {why}", describe_op(graph, o));
        let old: Vec<TensorType> = data.operands.iter().map(|&v| graph.ty(v).clone()).collect();
        let op = per_microbatch(&data.op, &axes, &old, m).map_err(&fail)?;
        let new: Vec<TensorType> = data
            .operands
            .iter()
            .map(|&v| {
                types
                    .get(&v)
                    .cloned()
                    .unwrap_or_else(|| graph.ty(v).clone())
            })
            .collect();
        let refs: Vec<&TensorType> = new.iter().collect();
        let results = infer(graph, &op, &refs)
            .map_err(|e| fail(format!("cannot run on a microbatch: {e}")))?;
        for (&r, t) in data.results.iter().zip(&results) {
            let axis = batch_axis(graph.ty(r), t, m).ok_or_else(|| {
                fail(format!(
                    "mixes the samples of a batch ({} for the batch, {t} for a microbatch): \
                     its value would depend on how the batch is cut",
                    graph.ty(r)
                ))
            })?;
            carried.insert(r, axis);
            types.insert(r, t.clone());
        }
        plan.push((o, op, results));
    }
    // The copies: each microbatch's slices of the batch inputs, then its ops. Their names
    // avoid every name in use (the outputs', the live values'), as `fresh_name` does, from
    // one set made once (a lookup per copy would scan the graph for each).
    let mut taken: BTreeSet<String> = tessera_ir::text::output_names(graph).into_iter().collect();
    taken.extend(
        graph
            .inputs()
            .iter()
            .chain(graph.ops().iter().flat_map(|&o| graph.op(o).results.iter()))
            .filter_map(|&v| graph.value(v).name.clone()),
    );
    let mut copies = Vec::with_capacity(m as usize);
    let rows = batch / m;
    for i in 0..m {
        let mut map: BTreeMap<ValueId, ValueId> = BTreeMap::new();
        for &v in batch_inputs {
            let slice = Op::Slice {
                axes: vec![0],
                starts: vec![(i * rows) as i64],
                ends: vec![((i + 1) * rows) as i64],
                steps: vec![1],
            };
            let id = graph.push_op(slice, vec![v], vec![types[&v].clone()]);
            let r = graph.op(id).results[0];
            name_copy(graph, &mut taken, v, r, i);
            map.insert(v, r);
        }
        for (o, op, results) in &plan {
            let data = graph.op(*o).clone();
            let operands: Vec<ValueId> = data
                .operands
                .iter()
                .map(|v| map.get(v).copied().unwrap_or(*v))
                .collect();
            let id = graph.push_op(op.clone(), operands, results.clone());
            graph.op_mut(id).loc = data.loc.clone();
            for (k, &r) in data.results.iter().enumerate() {
                let copy = graph.op(id).results[k];
                name_copy(graph, &mut taken, r, copy, i);
                map.insert(r, copy);
            }
        }
        copies.push(map);
    }
    // The originals: only other originals and the model's outputs read them.
    graph.set_named_outputs(Vec::new());
    for (o, _, _) in plan.iter().rev() {
        graph.remove_op(*o);
    }
    Ok(Microbatches { copies })
}

/// `mb<i>/<name>` for the copy of a named value (`_1`, `_2`, ... appended while `taken` has
/// it), which `taken` then holds.
fn name_copy(graph: &mut Graph, taken: &mut BTreeSet<String>, from: ValueId, to: ValueId, i: u64) {
    if let Some(n) = graph.value(from).name.clone() {
        let base = format!("mb{i}/{n}");
        let name = if taken.contains(&base) {
            (1..)
                .map(|k| format!("{base}_{k}"))
                .find(|c| !taken.contains(c))
                .unwrap_or(base)
        } else {
            base
        };
        taken.insert(name.clone());
        graph.set_name(to, name);
    }
}

/// The axis where `micro` is `full` with the extent divided by `m`, every other axis equal.
pub(crate) fn batch_axis(full: &TensorType, micro: &TensorType, m: u64) -> Option<usize> {
    if full.elem != micro.elem || full.rank() != micro.rank() {
        return None;
    }
    let mut found = None;
    for (k, (a, b)) in full.shape.iter().zip(&micro.shape).enumerate() {
        if a == b {
            continue;
        }
        match (a.as_static(), b.as_static()) {
            (Some(x), Some(y)) if found.is_none() && y * m == x => found = Some(k),
            _ => return None,
        }
    }
    found
}

/// The op a microbatch runs for `op`, whose operand `i` carries the batch on `axes[i]` and
/// had type `old[i]` for the whole batch; an error says why the op mixes samples.
fn per_microbatch(
    op: &Op,
    axes: &[Option<usize>],
    old: &[TensorType],
    m: u64,
) -> Result<Op, String> {
    let a0 = axes.first().copied().flatten();
    let along = |axis: usize, what: &str| -> Result<Op, String> {
        if a0 == Some(axis) {
            Err(format!("{what} along the batch axis {axis}"))
        } else {
            Ok(op.clone())
        }
    };
    match op {
        Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::Cast { .. }
        | Op::Clip { .. }
        | Op::Dropout { .. }
        | Op::MatMul
        | Op::Gemm { .. }
        | Op::Einsum { .. }
        | Op::Reduce { .. }
        | Op::Transpose { .. } => Ok(op.clone()),
        // Inference batch norm (per-sample with its constant statistics; the `train` pass
        // gives each microbatch's copy its own batch statistics afterwards).
        Op::BatchNorm { .. } if axes[1..].iter().all(Option::is_none) && a0 == Some(0) => {
            Ok(op.clone())
        }
        Op::Conv(_)
        | Op::ConvTranspose { .. }
        | Op::Pool(_)
        | Op::InstanceNorm { .. }
        | Op::Lrn { .. }
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. } => {
            if a0 == Some(0) && axes[1..].iter().all(Option::is_none) {
                Ok(op.clone())
            } else {
                Err("reads the batch other than as axis 0 of its input".into())
            }
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => along(*axis, "normalizes"),
        Op::CumSum { axis, .. } => along(*axis, "sums"),
        Op::ArgReduce { axis, .. } | Op::TopK { axis, .. } => along(*axis, "compares"),
        Op::Split { axis, .. } => along(*axis, "splits"),
        Op::Gather { axis } => along(*axis, "gathers"),
        // Elements pair up by position: every operand must carry the batch, on one axis
        // other than the indexed one.
        Op::GatherElements { axis } | Op::ScatterElements { axis, .. } => match a0 {
            Some(a) if a != *axis && axes.iter().all(|&x| x == Some(a)) => Ok(op.clone()),
            _ => Err(format!(
                "indexes along axis {axis} with operands that do not all carry the batch on \
                 another axis"
            )),
        },
        Op::Concat { axis } => {
            if axes.contains(&Some(*axis)) {
                Err(format!("joins along the batch axis {axis}"))
            } else {
                Ok(op.clone())
            }
        }
        Op::LayerNorm { axis, .. } => match a0 {
            Some(a) if a < *axis && axes[1..].iter().all(Option::is_none) => Ok(op.clone()),
            _ => Err("normalizes across the batch axis".into()),
        },
        Op::Trilu { .. } => match a0 {
            Some(a) if a + 2 < old[0].rank() => Ok(op.clone()),
            _ => Err("reads the batch axis as a matrix axis".into()),
        },
        Op::Slice {
            axes: sliced,
            starts,
            ends,
            steps,
        } => {
            let Some(a) = a0 else {
                return Ok(op.clone());
            };
            match sliced.iter().position(|&x| x == a) {
                None => Ok(op.clone()),
                Some(k) => {
                    let extent = old[0].shape[a].as_static().unwrap_or(0);
                    let whole = starts[k] == 0 && steps[k] == 1 && ends[k] >= extent as i64;
                    if whole {
                        Ok(op.clone())
                    } else {
                        Err(format!("slices the batch axis {a}"))
                    }
                }
            }
        }
        Op::Pad { pads, .. } => match a0 {
            Some(a)
                if pads.get(a).is_none_or(|&p| p != 0)
                    || pads.get(a + old[0].rank()).is_none_or(|&p| p != 0) =>
            {
                Err(format!("pads the batch axis {a}"))
            }
            _ => Ok(op.clone()),
        },
        Op::Tile { repeats } => match a0 {
            Some(a) if repeats.get(a).is_none_or(|&r| r != 1) => {
                Err(format!("repeats the batch axis {a}"))
            }
            _ => Ok(op.clone()),
        },
        Op::Resize { sizes, .. } => match a0 {
            Some(a)
                if sizes.get(a).is_some()
                    && old[0].shape[a].as_static() == sizes.get(a).copied() =>
            {
                let mut op = op.clone();
                if let Op::Resize { sizes, .. } = &mut op {
                    sizes[a] /= m;
                }
                Ok(op)
            }
            _ => Err("resizes the batch axis".into()),
        },
        Op::Reshape { shape } => {
            let a = a0.ok_or("reshapes a batch-dependent shape")?;
            let dims = old[0]
                .static_dims()
                .ok_or("needs static operand extents to find the batch axis")?;
            let before: u64 = dims[..a].iter().product();
            let mut prefix = 1u64;
            for (j, d) in shape.iter().enumerate() {
                let e = d.as_static().ok_or("needs a static result shape")?;
                if prefix == before && e.is_multiple_of(m) && e >= m {
                    let mut shape = shape.clone();
                    shape[j] = Dim::Static(e / m);
                    return Ok(Op::Reshape { shape });
                }
                prefix = prefix.saturating_mul(e);
                if prefix > before {
                    break;
                }
            }
            Err(format!(
                "reshapes the batch axis {a} of {} into no axis that {m} microbatches divide",
                old[0]
            ))
        }
        Op::Expand { shape } => {
            let a = a0.ok_or("broadcasts a batch-dependent shape")?;
            let r_in = old[0].rank();
            let r_out = r_in.max(shape.len());
            let at = a + r_out - r_in;
            let mut shape = shape.clone();
            if let Some(k) = at.checked_sub(r_out - shape.len())
                && shape[k] == old[0].shape[a]
                && let Some(e) = shape[k].as_static()
            {
                shape[k] = Dim::Static(e / m);
            }
            Ok(Op::Expand { shape })
        }
        _ => Err(format!(
            "is not known to treat the samples of a batch apart (`{}` on a batch-dependent \
             operand)",
            op.name()
        )),
    }
}
