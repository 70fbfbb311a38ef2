//! The placement problem a graph and a target give (`tessera compile
//! --emit-placement-problem`, and the `place` pass).
//!
//! - **Devices**: the target's devices that compute; devices with no compute and no memory
//!   (switches) become routers. Devices with identical descriptions (apart from name,
//!   capacity and GPU `arch`, which do not change op times) share a kind, so op times are listed once per kind; the kind is the target's
//!   `kind` when that is unambiguous, else `kind-N`. (A plugin whose cost hooks tell devices
//!   of one description apart by name is costed by the first of them.)
//! - **Ops**: every op except `const`, in body order, named by its model location (`loc`), else
//!   its first result's name, else its handle, made unique with `#N`. Times come from the
//!   [`CostModel`] (calibration and plugin hooks included); a kind the op is unsupported on is
//!   left out, and a time over a problem's range (1e6 s) is an error naming the op. Memory is the op's constant operands (weights, counted for every op that uses
//!   them) plus its results: an upper bound on what the simulator finds live, so a plan within
//!   capacity is within capacity in the simulator too. An op with a `device(...)` is pinned.
//! - **Graph inputs and outputs** are ops too (`input:NAME`, `output:NAME`), pinned to the host
//!   with no time, as in the simulator: inputs start on the host and outputs end there.
//!   State inputs (a training step's parameters and optimizer state) are not: like weights
//!   they count in the memory of the ops that read them, and their next values, written in
//!   place, neither take memory of their own nor go to the host.
//! - **Edges**: one per (producer, consumer) pair of ops and operand, with the value's bytes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tessera_ir::{Graph, Op, OpId, ValueDef, ValueId};
use tessera_targets::sim::{collective_piece_bytes, describe_op, shard_factor};
use tessera_targets::{CostModel, OpTime};

use crate::problem::{self, Carried, Edge, OpSpec, Problem, VERSION};

/// A problem built from a graph, with the graph op behind each problem op.
#[derive(Clone, Debug)]
pub struct Built {
    /// The problem.
    pub problem: Problem,
    /// For each problem op, the graph op (`None` for the `input:`/`output:` ops).
    pub graph_ops: Vec<Option<OpId>>,
    /// For each target device, its index among the problem's devices (`None` for routers).
    pub device_index: Vec<Option<usize>>,
}

/// Why a graph gives no problem.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A shape is not static, or a value is too large.
    #[error("{op}: {message}")]
    Op {
        /// The op, described.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// An op is pinned to a device that cannot run it.
    #[error("{op} cannot run on {device}: {reason}")]
    Unsupported {
        /// The op.
        op: String,
        /// The device it is pinned to.
        device: String,
        /// Why it cannot run there.
        reason: String,
    },
    /// An annotation names no device of the target.
    #[error("{op} is placed on `{device}`, which target `{target}` does not have")]
    UnknownDevice {
        /// The op.
        op: String,
        /// The device named.
        device: String,
        /// The target.
        target: String,
    },
}

fn bytes_of(graph: &Graph, v: ValueId, op: &dyn Fn() -> String) -> Result<u64, BuildError> {
    graph.ty(v).size_bytes().ok_or_else(|| BuildError::Op {
        op: op(),
        message: format!(
            "the size of `{}` depends on a symbolic shape ({}); bind the input shapes \
             (--input-shape)",
            graph.value(v).name.clone().unwrap_or_else(|| v.to_string()),
            graph.ty(v)
        ),
    })
}

/// An op's modelled time on devices of kind `kind`, checked against the range of a placement
/// problem ([`tessera_targets::limits::MAX_SECONDS`]): a time the cost model makes too large
/// (a huge op on a slow device) is an error naming the op, not a problem `Instance` refuses.
fn check_seconds(seconds: f64, kind: &str, op: &dyn Fn() -> String) -> Result<(), BuildError> {
    if tessera_targets::limits::is_seconds(seconds) {
        return Ok(());
    }
    Err(BuildError::Op {
        op: op(),
        message: format!(
            "its modelled time on `{kind}` devices is {seconds} s; a placement problem's times \
             must be 0 or up to {:e} s",
            tessera_targets::limits::MAX_SECONDS
        ),
    })
}

/// The problem op of an op on the graph's device mesh (`device("@mesh")`, from the `shard`
/// pass): pinned to the mesh's first device and running on all of them at once (`spmd`),
/// each for its share of the work (the simulator's rule: the op's shard factor), or for the
/// collective's time; `memory` is left for the caller, which divides it by the shard factor.
fn mesh_op(
    graph: &Graph,
    op: OpId,
    cost: &CostModel<'_>,
    class_names: &[String],
    representative: &[usize],
    index: &dyn Fn(&str) -> Option<usize>,
) -> Result<OpSpec, BuildError> {
    let data = graph.op(op);
    let describe = || describe_op(graph, op);
    let Some(mesh) = graph.op_mesh(op) else {
        return Err(BuildError::Op {
            op: describe(),
            message: "placed on a mesh the graph does not declare".into(),
        });
    };
    let devs: Vec<usize> = mesh
        .devices
        .iter()
        .map(|name| {
            index(name).ok_or_else(|| BuildError::UnknownDevice {
                op: describe(),
                device: name.clone(),
                target: cost.spec().name.clone(),
            })
        })
        .collect::<Result<_, _>>()?;
    let mut time = BTreeMap::new();
    if data.op.collective_axes().is_some() {
        let bytes = collective_piece_bytes(graph, op).map_err(|e| BuildError::Op {
            op: describe(),
            message: e.to_string(),
        })?;
        let t = cost
            .collective_time(&data.op, mesh, &devs, bytes)
            .map_err(|e| BuildError::Op {
                op: describe(),
                message: e.to_string(),
            })?;
        for c in class_names {
            check_seconds(t, c, &describe)?;
            time.insert(c.clone(), t);
        }
    } else {
        let parts = shard_factor(graph, op);
        for (c, &rep) in representative.iter().enumerate() {
            let t = cost
                .op_time_sharded(graph, op, rep, parts)
                .map_err(|e| BuildError::Op {
                    op: describe(),
                    message: e.to_string(),
                })?;
            if let OpTime::Time { seconds, .. } = t {
                check_seconds(seconds, &class_names[c], &describe)?;
                time.insert(class_names[c].clone(), seconds);
            }
        }
    }
    Ok(OpSpec {
        name: String::new(),
        kind: data.op.name().to_string(),
        time,
        memory: 0,
        colocate: None,
        pin: mesh.devices.first().cloned(),
        spmd: mesh.devices.iter().skip(1).cloned().collect(),
        splits: Vec::new(),
    })
}

/// An op's name in the problem before deduplication: its model location, else its first
/// result's name, else its handle.
fn base_name(graph: &Graph, op: OpId) -> String {
    let data = graph.op(op);
    data.loc
        .clone()
        .or_else(|| {
            data.results
                .first()
                .and_then(|&v| graph.value(v).name.clone())
        })
        .unwrap_or_else(|| op.to_string())
}

/// Puts each backward op (one with `grad_of`, made by the `grad` pass) in one colocation
/// group with the forward op it differentiates, as PipeDream keeps a layer's forward and
/// backward on one stage: the weights, the activations the backward reads and the weight's
/// gradient then stay on one device, and the contiguous splits of the `dp` strategy cut the
/// step between layers. In a microbatched step (`train{microbatches=M}`, see
/// [`crate::pipeline`]), the copies of one model node's forward op (the same `loc`), one per
/// microbatch, join one group with their backward ops: pipeline parallelism, each stage
/// running every microbatch of its layers (replicas of a layer on several devices would hold
/// its weights twice and need their updates synchronized, which the problem does not
/// charge). A weight (constant or state) several members of a group read counts once, in the
/// first member's memory, as the one device holds it once. A group is left out (its ops
/// stay free) when no device could take it:
/// no device kind runs all its members, its pins disagree, or its memory exceeds every
/// device's capacity. Ops on the mesh and graph inputs are never grouped.
fn colocate_backward_ops(
    graph: &Graph,
    producer: &[Option<(usize, u32)>],
    graph_ops: &[Option<OpId>],
    weights_of: &BTreeMap<usize, Vec<(ValueId, u64)>>,
    ops: &mut [OpSpec],
    devices: &[problem::Device],
) {
    // The forward op of each group, and its members (forward op first), by forward op.
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut root: HashMap<usize, usize> = HashMap::new();
    for (me, gop) in graph_ops.iter().enumerate() {
        let Some(op) = gop else { continue };
        let Some(v) = graph.op(*op).grad_of else {
            continue;
        };
        let Some((fwd, _)) = producer.get(v.index()).copied().flatten() else {
            continue;
        };
        if graph_ops[fwd].is_none() || !ops[fwd].spmd.is_empty() || !ops[me].spmd.is_empty() {
            continue;
        }
        let r = root.get(&fwd).copied().unwrap_or(fwd);
        root.insert(me, r);
        groups.entry(r).or_insert_with(|| vec![r]).push(me);
    }
    // A microbatched step's copies of one model op (forward ops of one microbatch each, with
    // the same model node) share a group: a pipeline stage runs every microbatch of its
    // layers, whose weights it alone holds.
    let (micro, count) = crate::pipeline::microbatches(graph);
    if count > 1 {
        let mut by_node: BTreeMap<&str, usize> = BTreeMap::new();
        for (me, gop) in graph_ops.iter().enumerate() {
            let Some(op) = *gop else { continue };
            let data = graph.op(op);
            let (Some(loc), None, Some(crate::pipeline::Micro::One(_))) =
                (data.loc.as_deref(), data.grad_of, micro.get(&op))
            else {
                continue;
            };
            // Locations the `train` pass gives ops of its own (the loss, the optimizer, the
            // running statistics) or of a model op without a name are no model node.
            if loc.starts_with("loss")
                || loc.starts_with("optimizer")
                || loc == "batch-norm"
                || loc == "dropout"
            {
                continue;
            }
            if !ops[me].spmd.is_empty() {
                continue;
            }
            let r = root.get(&me).copied().unwrap_or(me);
            match by_node.get(loc) {
                None => {
                    by_node.insert(loc, r);
                }
                Some(&r0) if r0 != r => {
                    let moved = groups.remove(&r).unwrap_or_else(|| vec![r]);
                    for &o in &moved {
                        root.insert(o, r0);
                    }
                    groups.entry(r0).or_insert_with(|| vec![r0]).extend(moved);
                }
                Some(_) => {}
            }
        }
    }
    for (fwd, members) in groups {
        // A weight several members read is resident once on their one device (as the
        // simulator counts it): only the first member keeps it in its memory.
        let mut held: BTreeSet<ValueId> = BTreeSet::new();
        let mut shared: Vec<(usize, u64)> = Vec::new();
        for &o in &members {
            let again: u64 = weights_of
                .get(&o)
                .into_iter()
                .flatten()
                .filter(|(v, _)| !held.insert(*v))
                .map(|(_, b)| b)
                .sum();
            shared.push((o, again));
        }
        // The device kinds every member runs on, the pins, the memory.
        let runs_on = |k: usize| {
            let kind = &devices[k].kind;
            members.iter().all(|&o| ops[o].time.contains_key(kind))
        };
        let pins: BTreeSet<&str> = members
            .iter()
            .filter_map(|&o| ops[o].pin.as_deref())
            .collect();
        let memory = shared.iter().fold(0u64, |m, &(o, again)| {
            m.saturating_add(ops[o].memory.saturating_sub(again))
        });
        let fits = (0..devices.len()).any(|k| {
            runs_on(k) && devices[k].memory >= memory && pins.iter().all(|&p| p == devices[k].name)
        });
        if !fits {
            continue;
        }
        let name = format!("grad:{}", ops[fwd].name);
        for (o, again) in shared {
            ops[o].colocate = Some(name.clone());
            ops[o].memory = ops[o].memory.saturating_sub(again);
        }
    }
}

/// The split alternatives of `op` over every group (see [`crate::alternatives`]): per group
/// and rule, the share's time on the group's device class and the bytes each device keeps
/// (weights whole or split as the rule says, each once; results split or whole as their
/// layout; a state's next value, written in place, not counted).
#[allow(clippy::too_many_arguments)]
fn split_specs(
    graph: &Graph,
    op: OpId,
    cost: &CostModel<'_>,
    groups: &[problem::DeviceGroup],
    group_class: &[(u64, usize)],
    class_names: &[String],
    representative: &[usize],
    weight: &dyn Fn(ValueId) -> bool,
    state_nexts: &BTreeSet<ValueId>,
) -> Result<Vec<problem::SplitSpec>, BuildError> {
    let data = graph.op(op);
    let describe = || describe_op(graph, op);
    let mut by_k: BTreeMap<u64, Vec<crate::alternatives::Rule>> = BTreeMap::new();
    let mut out = Vec::new();
    for (g, &(k, c)) in groups.iter().zip(group_class) {
        let rules = by_k
            .entry(k)
            .or_insert_with(|| crate::alternatives::rules(graph, op, k, weight));
        if rules.is_empty() {
            continue;
        }
        let time_of = |parts: u64| -> Result<Option<f64>, BuildError> {
            let t = cost
                .op_time_sharded(graph, op, representative[c], parts)
                .map_err(|e| BuildError::Op {
                    op: describe(),
                    message: e.to_string(),
                })?;
            let OpTime::Time { seconds, .. } = t else {
                return Ok(None);
            };
            check_seconds(seconds, &class_names[c], &describe)?;
            Ok(Some(seconds))
        };
        let (Some(share), Some(all)) = (time_of(k)?, time_of(1)?) else {
            continue;
        };
        for rule in rules.iter() {
            let mut seconds = if rule.shares { share } else { all };
            if rule.reduces {
                seconds += reduction_collectives(graph, op, cost, &g.devices, k, &describe)?;
            }
            let mut memory = 0u64;
            let mut seen: BTreeSet<ValueId> = BTreeSet::new();
            for (i, &v) in data.operands.iter().enumerate() {
                if weight(v) && seen.insert(v) {
                    let bytes = bytes_of(graph, v, &describe)?;
                    let split = rule.splits_operand(i);
                    memory = memory.saturating_add(if split { bytes.div_ceil(k) } else { bytes });
                }
            }
            for (r, &v) in data.results.iter().enumerate() {
                if state_nexts.contains(&v) {
                    continue;
                }
                let bytes = bytes_of(graph, v, &describe)?;
                let split = matches!(rule.outputs.get(r), Some(crate::split::Layout::Split(_)));
                memory = memory.saturating_add(if split { bytes.div_ceil(k) } else { bytes });
            }
            out.push(problem::SplitSpec {
                group: g.name.clone(),
                axis: rule.axis.clone(),
                time: BTreeMap::from([(class_names[c].clone(), seconds)]),
                memory,
                inputs: (0..data.operands.len())
                    .map(|i| rule.input(i).to_string())
                    .collect(),
                outputs: rule.outputs.iter().map(ToString::to_string).collect(),
            });
        }
    }
    Ok(out)
}

/// Seconds of the collectives that combine an op's partial reductions over its split axis on
/// the devices `members` (`k` of them, ring order), each the size of the result with the
/// reduced axes reduced: a softmax's all-gather of the `k` blocks' maxima and all-reduce of
/// the sums; a layer norm's two all-reduces (sums, then sums of squared deviations).
fn reduction_collectives(
    graph: &Graph,
    op: OpId,
    cost: &CostModel<'_>,
    members: &[String],
    k: u64,
    describe: &dyn Fn() -> String,
) -> Result<f64, BuildError> {
    let data = graph.op(op);
    let (axes, layer_norm) = match data.op {
        Op::Softmax { axis } | Op::LogSoftmax { axis } => (axis..axis + 1, false),
        Op::LayerNorm { axis, .. } => (axis..graph.ty(data.results[0]).rank(), true),
        _ => return Ok(0.0),
    };
    let result = bytes_of(graph, data.results[0], describe)?;
    let extent: u64 = graph.ty(data.results[0]).shape[axes]
        .iter()
        .map(|d| d.as_static().unwrap_or(1))
        .product();
    let reduced = (result / extent.max(1)) as f64;
    let ring: Vec<usize> = members
        .iter()
        .filter_map(|m| cost.spec().devices.iter().position(|d| &d.name == m))
        .collect();
    let err = |e: tessera_targets::TargetError| BuildError::Op {
        op: describe(),
        message: e.to_string(),
    };
    let sum = cost.all_reduce_time(&ring, reduced).map_err(err)?;
    if layer_norm {
        return Ok(2.0 * sum);
    }
    let gather = cost
        .all_gather_time(&ring, reduced * k as f64)
        .map_err(err)?;
    Ok(gather + sum)
}

/// What a built problem offers beyond placing ops whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildOptions {
    /// Device groups and each op's split alternatives over them ([`crate::alternatives`]).
    pub splits: bool,
}

/// The problem of placing `graph` on `cost`'s target.
pub fn build(graph: &Graph, cost: &CostModel<'_>) -> Result<Built, BuildError> {
    build_with(graph, cost, &BuildOptions::default())
}

/// [`build`], with split alternatives when `options` asks.
pub fn build_with(
    graph: &Graph,
    cost: &CostModel<'_>,
    options: &BuildOptions,
) -> Result<Built, BuildError> {
    let spec = cost.spec();
    // Devices and their kinds.
    let mut device_index = vec![None; spec.devices.len()];
    let mut devices = Vec::new();
    let mut routers = Vec::new();
    let mut class_keys: Vec<String> = Vec::new();
    let mut class_of = Vec::new(); // per problem device: class index
    let mut representative = Vec::new(); // per class: a target device index
    for (i, d) in spec.devices.iter().enumerate() {
        if d.compute.is_empty() && d.memory_bytes == 0 {
            routers.push(d.name.clone());
            continue;
        }
        let key = format!(
            "{:?}",
            (
                &d.kind,
                &d.compute,
                d.memory_bandwidth.to_bits(),
                &d.supported_ops,
                &d.lowering,
                &d.efficiency,
                d.op_overhead.to_bits()
            )
        );
        let c = match class_keys.iter().position(|k| *k == key) {
            Some(c) => c,
            None => {
                class_keys.push(key);
                representative.push(i);
                class_keys.len() - 1
            }
        };
        device_index[i] = Some(devices.len());
        class_of.push(c);
        devices.push(problem::Device {
            name: d.name.clone(),
            kind: String::new(),
            memory: d.memory_bytes,
            unsupported_ops: Vec::new(),
            overlap: d.overlap,
        });
    }
    // Class names: the target kind, or kind-N when several classes share it.
    let class_kind: Vec<&str> = representative
        .iter()
        .map(|&i| spec.devices[i].kind.as_str())
        .collect();
    let class_names: Vec<String> = (0..representative.len())
        .map(|c| {
            let kind = class_kind[c];
            let same: Vec<usize> = (0..representative.len())
                .filter(|&x| class_kind[x] == kind)
                .collect();
            if same.len() == 1 {
                kind.to_string()
            } else {
                let n = same.iter().position(|&x| x == c).unwrap_or(0);
                format!("{kind}-{n}")
            }
        })
        .collect();
    for (pd, dev) in devices.iter_mut().enumerate() {
        dev.kind = class_names[class_of[pd]].clone();
    }
    let by_name = spec.device_map();
    let host = device_index
        .get(by_name.get(spec.host.as_str()).copied().unwrap_or(0))
        .copied()
        .flatten()
        .unwrap_or(0);
    let host_name = devices
        .get(host)
        .map(|d| d.name.clone())
        .unwrap_or_default();
    let zero_time: BTreeMap<String, f64> = class_names.iter().map(|c| (c.clone(), 0.0)).collect();
    let links: Vec<problem::Link> = spec.links.iter().map(problem::Link::from).collect();
    let groups = if options.splits {
        let names: Vec<String> = devices.iter().map(|d| d.name.clone()).collect();
        let kinds: Vec<String> = devices.iter().map(|d| d.kind.clone()).collect();
        crate::alternatives::device_groups(&names, &kinds, &routers, &links)
    } else {
        Vec::new()
    };
    // Per group: its size and the class of its devices.
    let group_class: Vec<(u64, usize)> = groups
        .iter()
        .map(|g| {
            let first = devices
                .iter()
                .position(|d| d.name == g.devices[0])
                .unwrap_or(0);
            (g.devices.len() as u64, class_of[first])
        })
        .collect();

    let mut ops: Vec<OpSpec> = Vec::new();
    let mut graph_ops: Vec<Option<OpId>> = Vec::new();
    let mut edges: Vec<Edge> = Vec::new();
    // Looked up only, never iterated: hash sets and maps (a million names stay fast).
    let mut used_names: HashSet<String> = HashSet::new();
    // Per base name, the suffix to try next: every `base#j` below it is taken, so the probe
    // never starts over (many ops sharing one model name stay linear).
    let mut next_suffix: HashMap<String, usize> = HashMap::new();
    let mut unique = |base: String| -> String {
        let mut name = base.clone();
        if used_names.contains(&name) {
            let k = next_suffix.entry(base.clone()).or_insert(1);
            loop {
                name = format!("{base}#{k}");
                *k += 1;
                if !used_names.contains(&name) {
                    break;
                }
            }
        }
        used_names.insert(name.clone());
        name
    };
    // Where each value is produced: (problem op, result index).
    let mut producer: Vec<Option<(usize, u32)>> = vec![None; graph.num_values()];
    let (state_inputs, state_nexts) = graph.state_values();
    for (i, &v) in graph.inputs().iter().enumerate() {
        if state_inputs.contains(&v) {
            // Resident where used, as a constant is (below).
            continue;
        }
        let name = graph
            .value(v)
            .name
            .clone()
            .unwrap_or_else(|| format!("input{i}"));
        let memory = bytes_of(graph, v, &|| format!("graph input `{name}`"))?;
        producer[v.index()] = Some((ops.len(), 0));
        ops.push(OpSpec {
            name: unique(format!("input:{name}")),
            kind: "input".into(),
            time: zero_time.clone(),
            memory,
            colocate: None,
            pin: Some(host_name.clone()),
            spmd: Vec::new(),
            splits: Vec::new(),
        });
        graph_ops.push(None);
    }
    // The weights (constants, state inputs) each problem op counts in its memory.
    let mut weights_of: BTreeMap<usize, Vec<(ValueId, u64)>> = BTreeMap::new();
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        let describe = || describe_op(graph, op);
        let me = ops.len();
        let mut memory = 0u64;
        let mut seen_inputs: BTreeSet<ValueId> = BTreeSet::new();
        let mut weights: Vec<(ValueId, u64)> = Vec::new();
        for (operand, &v) in data.operands.iter().enumerate() {
            match graph.value(v).def {
                ValueDef::Result(p, _) if matches!(graph.op(p).op, Op::Const(_)) => {
                    if seen_inputs.insert(v) {
                        let b = bytes_of(graph, v, &describe)?;
                        memory = memory.saturating_add(b);
                        weights.push((v, b));
                    }
                }
                ValueDef::Input(_) if state_inputs.contains(&v) => {
                    if seen_inputs.insert(v) {
                        let b = bytes_of(graph, v, &describe)?;
                        memory = memory.saturating_add(b);
                        weights.push((v, b));
                    }
                }
                _ => {
                    if let Some((from, tensor)) = producer.get(v.index()).copied().flatten()
                        && seen_inputs.insert(v)
                    {
                        edges.push(Edge {
                            from,
                            to: me,
                            bytes: bytes_of(graph, v, &describe)?,
                            tensor,
                            operand: operand as u32,
                        });
                    }
                }
            }
        }
        for (r, &v) in data.results.iter().enumerate() {
            // A state's next value is written into the state's buffer (donated).
            if !state_nexts.contains(&v) {
                memory = memory.saturating_add(bytes_of(graph, v, &describe)?);
            }
            producer[v.index()] = Some((me, r as u32));
        }
        weights_of.insert(me, weights);
        if graph.op_mesh(op).is_some() {
            let spec_op = mesh_op(graph, op, cost, &class_names, &representative, &|name| {
                by_name
                    .get(name)
                    .copied()
                    .and_then(|i| device_index[i].map(|_| i))
            })?;
            ops.push(OpSpec {
                name: unique(base_name(graph, op)),
                memory: memory.div_ceil(shard_factor(graph, op).max(1)),
                ..spec_op
            });
            graph_ops.push(Some(op));
            continue;
        }
        let mut time = BTreeMap::new();
        let mut refusals: BTreeMap<usize, String> = BTreeMap::new();
        for (c, &rep) in representative.iter().enumerate() {
            let t = cost.op_time(graph, op, rep).map_err(|e| BuildError::Op {
                op: describe(),
                message: e.to_string(),
            })?;
            match t {
                OpTime::Time { seconds, .. } => {
                    check_seconds(seconds, &class_names[c], &describe)?;
                    time.insert(class_names[c].clone(), seconds);
                }
                OpTime::Unsupported(why) => {
                    refusals.insert(c, why);
                }
            }
        }
        let pin = match &data.device {
            Some(name) => match by_name
                .get(name.as_str())
                .copied()
                .and_then(|i| device_index[i])
            {
                Some(pd) => {
                    if let Some(why) = refusals.get(&class_of[pd]) {
                        return Err(BuildError::Unsupported {
                            op: describe(),
                            device: name.clone(),
                            reason: why.clone(),
                        });
                    }
                    Some(name.clone())
                }
                None => {
                    return Err(BuildError::UnknownDevice {
                        op: describe(),
                        device: name.clone(),
                        target: spec.name.clone(),
                    });
                }
            },
            None => None,
        };
        let splits = if pin.is_none() && !groups.is_empty() {
            let weight = |v: ValueId| match graph.value(v).def {
                ValueDef::Result(p, _) => matches!(graph.op(p).op, Op::Const(_)),
                ValueDef::Input(_) => state_inputs.contains(&v),
            };
            split_specs(
                graph,
                op,
                cost,
                &groups,
                &group_class,
                &class_names,
                &representative,
                &weight,
                &state_nexts,
            )?
        } else {
            Vec::new()
        };
        ops.push(OpSpec {
            name: unique(base_name(graph, op)),
            kind: data.op.name().to_string(),
            time,
            memory,
            colocate: None,
            pin,
            spmd: Vec::new(),
            splits,
        });
        graph_ops.push(Some(op));
    }
    colocate_backward_ops(
        graph,
        &producer,
        &graph_ops,
        &weights_of,
        &mut ops,
        &devices,
    );
    for (i, &v) in graph.outputs().iter().enumerate() {
        if state_nexts.contains(&v) {
            // Stays where it was computed, in the state's buffer.
            continue;
        }
        let name = graph
            .value(v)
            .name
            .clone()
            .unwrap_or_else(|| format!("output{i}"));
        let me = ops.len();
        if let Some((from, tensor)) = producer.get(v.index()).copied().flatten() {
            edges.push(Edge {
                from,
                to: me,
                bytes: bytes_of(graph, v, &|| format!("graph output `{name}`"))?,
                tensor,
                operand: 0,
            });
        }
        ops.push(OpSpec {
            name: unique(format!("output:{name}")),
            kind: "output".into(),
            time: zero_time.clone(),
            memory: 0,
            colocate: None,
            pin: Some(host_name.clone()),
            spmd: Vec::new(),
            splits: Vec::new(),
        });
        graph_ops.push(None);
    }
    // Each state's readers (the ops that count it among their weights) and the writer of its
    // next value.
    let output_names = tessera_ir::text::output_names(graph);
    let mut carried = Vec::new();
    for slot in &graph.state {
        let (Some(&input), Some(k)) = (
            graph.inputs().get(slot.input),
            output_names.iter().position(|n| *n == slot.next),
        ) else {
            continue;
        };
        let Some((writer, _)) = producer.get(graph.outputs()[k].index()).copied().flatten() else {
            continue;
        };
        let readers: Vec<usize> = weights_of
            .iter()
            .filter(|(_, ws)| ws.iter().any(|&(v, _)| v == input))
            .map(|(&o, _)| o)
            .collect();
        if !readers.is_empty() {
            carried.push(Carried {
                name: slot.next.clone(),
                readers,
                writer,
            });
        }
    }
    let problem = Problem {
        version: VERSION,
        name: format!("{} on {}", graph.name, spec.name),
        devices,
        routers,
        links,
        ops,
        edges,
        groups,
        carried,
    };
    Ok(Built {
        problem,
        graph_ops,
        device_index,
    })
}
