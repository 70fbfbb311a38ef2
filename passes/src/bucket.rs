//! `bucket-all-reduce`: the gradients a data-parallel step all-reduces go in buckets, one
//! `all-reduce` per bucket, as PyTorch DDP does (Li et al., "PyTorch Distributed:
//! Experiences on Accelerating Data Parallel Training", VLDB 2020, section 3.2.3).
//!
//! A *gradient all-reduce* is an `all-reduce` on a mesh (an op with a device) whose every user
//! is an optimizer op (the `train` pass's `optimizer/<parameter>` locations): a parameter's
//! gradient summed over the replicas before its update. Those of one mesh, mesh axes and
//! element type are taken in DDP's order, the parameters in reverse (the backward makes the
//! last layer's gradients first; the parameter of a gradient is the one its first user's
//! location names, and gradients of no known parameter follow in body order), and filled
//! into buckets of at most `max-bytes` bytes (a larger gradient is a bucket of its own). A
//! bucket of two or more becomes: each gradient reshaped to one axis, their `concat` and one
//! `all-reduce` of it, right after the last of its gradients is made (so the all-reduce starts
//! as soon as its last gradient exists and runs while the rest of the backward does), then,
//! just before the first op that reads one of the sums, a `split` into the pieces, each
//! reshaped back. The body is then put back in a
//! topological order that moves as little as possible (an op moves only after what it now
//! needs).
//!
//! A gradient *reduce-scatter* (the optimizer split by parameter rows, each device updating its
//! rows, as ZeRO does; Rajbhandari et al., SC 2020) is bucketed the same way, in buckets of
//! their own: each gradient reshaped to `[k, n / k]` for the `k` devices (row `i` is what
//! device `i` keeps), put side by side, one `reduce-scatter` of the bucket's rows, then each
//! device's piece of each gradient reshaped back to its rows.
//!
//! A gradient all-reduce whose operand depends on another one's result is left alone, so no
//! bucket can wait on another. The rewrite is exact: the sum of a concatenation is the
//! concatenation of the sums.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use tessera_ir::{Dim, ElemType, Graph, Op, OpId, Sharding, TensorType, ValueDef, ValueId};

use crate::pass::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};

/// PyTorch DDP's default `bucket_cap_mb`, 25 MiB.
pub const DEFAULT_BUCKET_BYTES: u64 = 25 * 1024 * 1024;

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "bucket-all-reduce",
    summary: "Sum a data-parallel step's gradients in buckets, one all-reduce each (PyTorch DDP)",
    options: &[OptionInfo {
        name: "max-bytes",
        kind: OptionKind::UInt,
        default: "26214400",
        doc: "the most bytes of gradients in one bucket (DDP's bucket_cap_mb, 25 MiB)",
    }],
    create: |o: &Options| {
        Ok(Box::new(Bucket {
            max_bytes: o.uint("max-bytes"),
        }))
    },
};

struct Bucket {
    max_bytes: u64,
}

impl Pass for Bucket {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let made = bucket_all_reduces(graph, self.max_bytes)?;
        stats.add(
            "buckets",
            "all-reduces of two or more gradients made",
            made.buckets as u64,
        );
        stats.add(
            "bucketed",
            "gradient all-reduces merged into them",
            made.merged as u64,
        );
        Ok(made.buckets > 0)
    }
}

/// What [`bucket_all_reduces`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buckets {
    /// Buckets of two or more gradients made (each one `all-reduce`).
    pub buckets: usize,
    /// Gradient all-reduces they replaced.
    pub merged: usize,
}

/// One gradient all-reduce or reduce-scatter.
struct Candidate {
    op: OpId,
    operand: ValueId,
    result: ValueId,
    bytes: u64,
    elements: u64,
    /// For a reduce-scatter the devices each gradient's rows are cut among (`None` for an
    /// all-reduce), the mesh, its axes, the element type: what one bucket shares.
    key: (Option<u64>, String, Vec<u32>, ElemType),
    /// DDP's order: (no known parameter, reverse parameter index, body position).
    order: (bool, std::cmp::Reverse<usize>, usize),
}

/// Puts the gradient all-reduces of `graph` in buckets of at most `max_bytes` bytes (see the
/// module doc).
pub fn bucket_all_reduces(graph: &mut Graph, max_bytes: u64) -> Result<Buckets, PassError> {
    let body: Vec<OpId> = graph.ops().to_vec();
    let position: BTreeMap<OpId, usize> = body.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let mut users: BTreeMap<ValueId, Vec<OpId>> = BTreeMap::new();
    for &o in &body {
        for &v in &graph.op(o).operands {
            users.entry(v).or_default().push(o);
        }
    }
    let outputs: BTreeSet<ValueId> = graph.outputs().iter().copied().collect();
    // The parameters, in the order of the state inputs.
    let param_index: BTreeMap<&str, usize> = graph
        .inputs()
        .iter()
        .enumerate()
        .filter_map(|(i, &v)| graph.value(v).name.as_deref().map(|n| (n, i)))
        .collect();
    let mut candidates: Vec<Candidate> = Vec::new();
    for (pos, &o) in body.iter().enumerate() {
        let data = graph.op(o);
        let (Some(device), [operand], [result]) =
            (&data.device, &data.operands[..], &data.results[..])
        else {
            continue;
        };
        let replicated = |v: ValueId| {
            graph
                .value(v)
                .sharding
                .as_ref()
                .is_none_or(|s| s.is_replicated())
        };
        let (axes, scatter) = match &data.op {
            // Of whole values only: a bucket is flat and unsharded.
            Op::AllReduce { axes } if replicated(*operand) && replicated(*result) => (axes, None),
            Op::AllReduce { .. } => continue,
            // Blocks of the sum's rows: each gradient cut along its first axis only.
            Op::ReduceScatter { axes } => {
                let Some((mesh, sharding)) =
                    graph.op_mesh(o).zip(graph.value(*result).sharding.as_ref())
                else {
                    continue;
                };
                let rows_only = sharding.axes.first() == Some(axes)
                    && sharding.axes[1..].iter().all(Vec::is_empty);
                if !rows_only {
                    continue;
                }
                (axes, Some(mesh.size_of(axes.iter().copied())))
            }
            _ => continue,
        };
        let Some(us) = users.get(result) else {
            continue;
        };
        let optimizer = |u: &OpId| {
            graph
                .op(*u)
                .loc
                .as_deref()
                .and_then(|l| l.strip_prefix("optimizer/"))
        };
        if outputs.contains(result) || !us.iter().all(|u| optimizer(u).is_some()) {
            continue;
        }
        let ty = graph.ty(*result);
        let (Some(elements), Some(bytes)) = (ty.num_elements(), ty.size_bytes()) else {
            continue;
        };
        let param = us
            .first()
            .and_then(optimizer)
            .and_then(|p| param_index.get(p).copied());
        if scatter.is_some_and(|k| k == 0 || !elements.is_multiple_of(k)) {
            continue;
        }
        candidates.push(Candidate {
            op: o,
            operand: *operand,
            result: *result,
            bytes,
            elements,
            key: (scatter, device.clone(), axes.clone(), ty.elem),
            order: (param.is_none(), std::cmp::Reverse(param.unwrap_or(0)), pos),
        });
    }
    if candidates.len() < 2 {
        return Ok(Buckets::default());
    }
    // Which candidates each op depends on (a bit per candidate), in body order.
    let index: BTreeMap<OpId, usize> = candidates
        .iter()
        .enumerate()
        .map(|(i, c)| (c.op, i))
        .collect();
    let words = candidates.len().div_ceil(64);
    let mut depends: BTreeMap<OpId, Vec<u64>> = BTreeMap::new();
    let mut independent = vec![true; candidates.len()];
    for &o in &body {
        let mut bits = vec![0u64; words];
        for &v in &graph.op(o).operands {
            if let ValueDef::Result(p, _) = graph.value(v).def
                && let Some(d) = depends.get(&p)
            {
                for (b, x) in bits.iter_mut().zip(d) {
                    *b |= x;
                }
            }
        }
        if let Some(&i) = index.get(&o) {
            independent[i] = bits.iter().all(|&b| b == 0);
            bits[i / 64] |= 1 << (i % 64);
        }
        depends.insert(o, bits);
    }
    drop(depends);
    let mut order: Vec<usize> = (0..candidates.len()).filter(|&i| independent[i]).collect();
    order.sort_by(|&a, &b| {
        let (ca, cb) = (&candidates[a], &candidates[b]);
        ca.key.cmp(&cb.key).then(ca.order.cmp(&cb.order))
    });
    // Fill buckets in that order, one key at a time.
    let mut buckets: Vec<Vec<usize>> = Vec::new();
    let mut bytes = 0u64;
    for (n, &i) in order.iter().enumerate() {
        let c = &candidates[i];
        let same_key = n > 0 && candidates[order[n - 1]].key == c.key;
        match buckets.last_mut() {
            Some(b) if same_key && bytes.saturating_add(c.bytes) <= max_bytes => {
                b.push(i);
                bytes += c.bytes;
            }
            _ => {
                buckets.push(vec![i]);
                bytes = c.bytes;
            }
        }
    }
    buckets.retain(|b| b.len() >= 2);
    if buckets.is_empty() {
        return Ok(Buckets::default());
    }
    let mut names: BTreeSet<String> = (0..graph.num_values())
        .filter_map(|i| {
            let v = ValueId::from_index(i);
            graph
                .is_valid_value(v)
                .then(|| graph.value(v).name.clone())
                .flatten()
        })
        .collect();
    let fresh = |names: &mut BTreeSet<String>, base: String| {
        let mut name = base.clone();
        let mut n = 1;
        while names.contains(&name) {
            name = format!("{base}#{n}");
            n += 1;
        }
        names.insert(name.clone());
        name
    };
    // A bucket is made right after the op that makes its last gradient (before the body's
    // first op when every gradient is an input) and taken apart right before the first reader
    // of a sum (at the end when only outputs read them); each op then moves only as far as
    // it must.
    let mut after: BTreeMap<Option<usize>, Vec<OpId>> = BTreeMap::new();
    let mut before: BTreeMap<usize, Vec<OpId>> = BTreeMap::new();
    let mut removed: BTreeSet<OpId> = BTreeSet::new();
    let mut merged = 0;
    for (b, members) in buckets.iter().enumerate() {
        let (scatter, device, axes, elem) = candidates[members[0]].key.clone();
        let loc = Some(format!("gradient-bucket{b}"));
        // What goes after the last gradient (the bucket made and summed), and what goes
        // before the first reader of a sum (the pieces taken out): a device runs its ops in
        // body order, so taking the pieces out earlier would hold it up until the sum exists.
        let mut send: Vec<OpId> = Vec::new();
        let mut receive: Vec<OpId> = Vec::new();
        let mut op = |g: &mut Graph, op: Op, operands: Vec<ValueId>, types: Vec<TensorType>| {
            let taking_out = matches!(op, Op::Split { .. }) || !receive.is_empty();
            let id = g.create_detached_op(op, operands, types);
            g.op_mut(id).device = Some(device.clone());
            g.op_mut(id).loc = loc.clone();
            if taking_out {
                receive.push(id);
            } else {
                send.push(id);
            }
            g.op(id).results.clone()
        };
        // An all-reduce's bucket is the gradients flattened end to end. A reduce-scatter's
        // is `[k, n / k]` per gradient (row `i` the rows device `i` keeps), put side by side,
        // so that scattering the bucket's rows gives each device its rows of every gradient.
        let k = scatter.unwrap_or(1);
        let shape_of = |n: u64| match scatter {
            Some(k) => vec![Dim::Static(k), Dim::Static(n / k)],
            None => vec![Dim::Static(n)],
        };
        let axis = usize::from(scatter.is_some());
        // The sharding of a `[k, n / k]` piece: its rows over the devices.
        let rows = scatter.map(|_| {
            let mut sh = Sharding::replicated(2);
            sh.axes[0] = axes.clone();
            sh
        });
        let flat = |n: u64| TensorType::new(elem, shape_of(n));
        let mut pieces = Vec::new();
        for &i in members {
            let c = &candidates[i];
            let shape = shape_of(c.elements);
            pieces.push(
                op(
                    graph,
                    Op::Reshape { shape },
                    vec![c.operand],
                    vec![flat(c.elements)],
                )[0],
            );
        }
        let total: u64 = members.iter().map(|&i| candidates[i].elements).sum();
        let joined = op(graph, Op::Concat { axis }, pieces, vec![flat(total)])[0];
        graph.set_name(joined, fresh(&mut names, format!("bucket{b}")));
        let collective = match scatter {
            Some(_) => Op::ReduceScatter { axes: axes.clone() },
            None => Op::AllReduce { axes: axes.clone() },
        };
        let summed = op(graph, collective, vec![joined], vec![flat(total)])[0];
        graph.set_name(summed, fresh(&mut names, format!("bucket{b}.sum")));
        graph.value_mut(summed).sharding = rows.clone();
        let sizes: Vec<u64> = members
            .iter()
            .map(|&i| candidates[i].elements / k)
            .collect();
        let types = members
            .iter()
            .map(|&i| flat(candidates[i].elements))
            .collect();
        let parts = op(graph, Op::Split { axis, sizes }, vec![summed], types);
        for (&i, part) in members.iter().zip(parts) {
            let c = &candidates[i];
            graph.value_mut(part).sharding = rows.clone();
            let ty = graph.ty(c.result).clone();
            let shape = ty.shape.clone();
            let back = op(graph, Op::Reshape { shape }, vec![part], vec![ty])[0];
            graph.value_mut(back).sharding = graph.value(c.result).sharding.clone();
            // The sum keeps its name (the all-reduce that made it goes).
            if let Some(name) = graph.value(c.result).name.clone() {
                names.remove(&name);
                graph.set_name(back, fresh(&mut names, name));
            }
            graph.replace_all_uses(c.result, back);
            removed.insert(c.op);
        }
        merged += members.len();
        let last = members
            .iter()
            .filter_map(|&i| match graph.value(candidates[i].operand).def {
                ValueDef::Result(p, _) => position.get(&p).copied(),
                ValueDef::Input(_) => None,
            })
            .max();
        let first_reader = members
            .iter()
            .flat_map(|&i| users.get(&candidates[i].result).into_iter().flatten())
            .filter_map(|u| position.get(u).copied())
            .min()
            .unwrap_or(body.len());
        after.entry(last).or_default().extend(send);
        before.entry(first_reader).or_default().extend(receive);
    }
    // The provisional order, then the topological order nearest to it.
    let mut provisional: Vec<OpId> = after.remove(&None).unwrap_or_default();
    for (i, &o) in body.iter().enumerate() {
        if let Some(made) = before.remove(&i) {
            provisional.extend(made);
        }
        if !removed.contains(&o) {
            provisional.push(o);
        }
        if let Some(made) = after.remove(&Some(i)) {
            provisional.extend(made);
        }
    }
    provisional.extend(before.into_values().flatten());
    for o in &removed {
        graph.remove_op(*o);
    }
    let sorted = stable_topological(graph, &provisional).ok_or_else(|| {
        PassError::new("bucket-all-reduce: the bucketed graph has a cycle (a bug)")
    })?;
    graph.set_ops(sorted);
    Ok(Buckets {
        buckets: buckets.len(),
        merged,
    })
}

/// The topological order of `ops` that keeps each op as early in `ops` as its operands allow
/// (Kahn's algorithm, the earliest ready op first); `None` on a cycle.
fn stable_topological(graph: &Graph, ops: &[OpId]) -> Option<Vec<OpId>> {
    let position: BTreeMap<OpId, usize> = ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    let mut waiting = vec![0usize; ops.len()];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); ops.len()];
    for (i, &o) in ops.iter().enumerate() {
        let producers: BTreeSet<usize> = graph
            .op(o)
            .operands
            .iter()
            .filter_map(|&v| match graph.value(v).def {
                ValueDef::Result(p, _) => position.get(&p).copied(),
                ValueDef::Input(_) => None,
            })
            .collect();
        waiting[i] = producers.len();
        for p in producers {
            dependents[p].push(i);
        }
    }
    let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = (0..ops.len())
        .filter(|&i| waiting[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut out = Vec::with_capacity(ops.len());
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        out.push(ops[i]);
        for &d in &dependents[i] {
            waiting[d] -= 1;
            if waiting[d] == 0 {
                ready.push(std::cmp::Reverse(d));
            }
        }
    }
    (out.len() == ops.len()).then_some(out)
}
