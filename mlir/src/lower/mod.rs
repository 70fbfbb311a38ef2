//! The lowering of a placed graph to MLIR, one module per device.
//!
//! 1. **Steps.** The body is cut into *steps*: maximal runs of ops on one device that need
//!    nothing another device computes later ([`partition`]). Steps are numbered in an order
//!    that respects every dependency, so running them in that order (one device after the
//!    other, in one process) or concurrently with blocking point-to-point messages (one MPI
//!    rank per device, see [`crate::mpi`]) computes the graph.
//! 2. **Functions.** Each step becomes `func.func @step<N>` in its device's module: tensors in
//!    (the step's inputs: graph inputs, other steps' results, weights), tensors out. Every op
//!    lowers to upstream dialects on tensors (linalg, tensor, arith, math); a `transfer`
//!    op is the identity on the receiving side (the move itself is the manifest's business).
//!    An op that computes is a call of its *kernel*, a private function shared by every op
//!    with the same code ([`kernel`]).
//! 3. **Weights.** Constants of more than [`INLINE_LIMIT`] elements are not printed: they are
//!    function arguments, and the manifest names the tensor in `weights.safetensors` that
//!    feeds each one. Smaller constants are `arith.constant dense<"0x...">` (exact bits).
//! 4. **Modules.** A device's module carries the target's description of that device as
//!    DLTI (`dlti.target_system_spec`), and `tessera.target` / `tessera.device` attributes.

mod body;
mod elementwise;
mod index;
mod kernel;
mod linalg;
mod nn;
mod reduce;
mod region;
mod resize;
mod shape;
pub mod spmd;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tessera_ir::{ConstId, ElemType, Graph, Mesh, Op, OpId, TensorType, ValueDef, ValueId};
use tessera_targets::TargetSpec;

use body::{Body, LResult, Val, dims, quote};
pub use body::{LowerError, tensor_ty};
use kernel::Kernels;

use crate::manifest::{Arg, Manifest, ManifestDevice, ManifestStep, Output, StepResult, Transfer};

/// Constants with at most this many elements are printed inline; larger ones are weights.
pub const INLINE_LIMIT: u64 = 64;

/// One step: ops of one device run together, as one function.
#[derive(Clone, Debug)]
pub struct Step {
    /// Its position in the execution order.
    pub id: usize,
    /// The device that runs it.
    pub device: String,
    /// Its ops, in body order (constants excluded: they are materialized where used).
    pub ops: Vec<OpId>,
    /// Values it needs from outside (graph inputs, other steps' results), in first-use order,
    /// then the donated state inputs it only writes.
    pub inputs: Vec<ValueId>,
    /// Large constants it reads (the `const` ops' results), as weight arguments (after
    /// `inputs`), in first-use order.
    pub weights: Vec<ValueId>,
    /// Values it computes that other steps or the graph's outputs need, in definition order.
    pub outputs: Vec<ValueId>,
    /// A collective over the mesh (`Op::collective_axes`): a collective step (its one op), not a
    /// function.
    pub collective: bool,
    /// State updated in place ([`donate`]): pairs of a state input this step reads (one of
    /// `inputs`, then a `memref` argument) and its next value, which the step writes into
    /// that argument's buffer instead of returning it (it is not among `outputs`).
    pub donated: Vec<(ValueId, ValueId)>,
}

impl Step {
    /// What the step gives back: its outputs and the next values it writes in place.
    fn returned(&self) -> BTreeSet<ValueId> {
        self.outputs
            .iter()
            .copied()
            .chain(self.donated.iter().map(|&(_, n)| n))
            .collect()
    }
}

/// The lowered program: a module per device, the manifest, and the weights it names.
#[derive(Clone, Debug)]
pub struct Program {
    /// Device name to MLIR text, for every device with work, in target order.
    pub modules: Vec<(String, String)>,
    /// The dataflow between device programs.
    pub manifest: Manifest,
    /// The steps.
    pub steps: Vec<Step>,
    /// The weights file's tensors by name (a constant split over a mesh has one block per
    /// mesh device, `<name>@<device>`).
    pub weights: BTreeMap<String, (TensorType, tessera_ir::Bytes)>,
    /// Each function step's function text, by step id (for the MPI program, which holds
    /// every step once).
    pub step_texts: BTreeMap<usize, String>,
    /// Every kernel's function text, by number ([`kernel`]): the functions the steps call.
    pub kernels: Vec<String>,
}

/// The device an op runs on: its placement, or `default` for an unplaced op.
fn device_of(g: &Graph, op: OpId, default: &str) -> String {
    g.op(op)
        .device
        .clone()
        .unwrap_or_else(|| default.to_string())
}

fn is_const(g: &Graph, v: ValueId) -> Option<ConstId> {
    match g.value(v).def {
        ValueDef::Result(op, _) => match g.op(op).op {
            Op::Const(c) => Some(c),
            _ => None,
        },
        _ => None,
    }
}

fn is_large(g: &Graph, c: ConstId) -> bool {
    g.constant(c).ty.num_elements().unwrap_or(0) > INLINE_LIMIT
}

/// Cuts the body into steps (see the module doc). `default` is the device of unplaced ops.
pub fn partition(g: &Graph, default: &str) -> Result<Vec<Step>, LowerError> {
    let mut steps: Vec<Step> = Vec::new();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let mut step_of: BTreeMap<ValueId, usize> = BTreeMap::new();
    for &op in g.ops() {
        let data = g.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        let dev = device_of(g, op, default);
        let collective = data.op.collective_axes().is_some();
        if let Some(name) = dev.strip_prefix('@') {
            let Some(mesh) = g.mesh_named(name) else {
                return Err(LowerError(format!(
                    "op {op} ({}) runs on mesh {dev}, which the graph does not declare",
                    data.op.name()
                )));
            };
            if let Some(axes) = data.op.collective_axes() {
                // A collective step makes the whole tensor, which another collective would
                // take for one device's part.
                if let Some(&v) = data.operands.first()
                    && let ValueDef::Result(src, _) = g.value(v).def
                    && g.op(src).op.collective_axes().is_some()
                {
                    return Err(LowerError(format!(
                        "op {op} ({}) reads the result of op {src} ({}): a collective of a \
                         collective's result does not lower",
                        data.op.name(),
                        g.op(src).op.name()
                    )));
                }
                let all: Vec<u32> = (0..mesh.shape.len() as u32).collect();
                if *axes != all {
                    return Err(LowerError(format!(
                        "op {op} ({}) works over mesh axes {axes:?} of {dev}: only collectives \
                         over the whole mesh lower",
                        data.op.name()
                    )));
                }
                // A reduce-scatter or an all-to-all is lowered as the all-reduce or the
                // all-gather that makes the whole tensor (every device then cuts its block
                // from it, as from any whole value): the result it leaves is correct, the
                // traffic is not the collective's own (MLIR 22's shard-to-MPI lowering has
                // only all-reduce).
                let whole_result = matches!(data.op, Op::AllReduce { .. } | Op::AllGather { .. });
                if whole_result && !spmd::sharding_of(g, data.results[0]).is_replicated() {
                    return Err(LowerError(format!(
                        "op {op} ({}): its result must be whole on every device",
                        data.op.name()
                    )));
                }
            }
        } else if collective || matches!(data.op, Op::AllSlice { .. }) {
            return Err(LowerError(format!(
                "op {op} ({}) is on {dev}, not on a mesh",
                data.op.name()
            )));
        }
        let need = data
            .operands
            .iter()
            .filter_map(|v| step_of.get(v).copied())
            .max();
        let s = match open.get(&dev) {
            Some(&s) if !collective && need.is_none_or(|n| n <= s) => s,
            _ => {
                let id = steps.len();
                steps.push(Step {
                    id,
                    device: dev.clone(),
                    ops: Vec::new(),
                    inputs: Vec::new(),
                    weights: Vec::new(),
                    outputs: Vec::new(),
                    collective,
                    donated: Vec::new(),
                });
                if collective {
                    // The mesh's next ops start a new step after it.
                    open.remove(&dev);
                } else {
                    open.insert(dev.clone(), id);
                }
                id
            }
        };
        steps[s].ops.push(op);
        for &r in &data.results {
            step_of.insert(r, s);
        }
    }
    // Inputs, weights and outputs.
    let graph_outputs: BTreeSet<ValueId> = g.outputs().iter().copied().collect();
    let mut used_elsewhere: BTreeSet<ValueId> = graph_outputs.clone();
    for st in &steps {
        for &op in &st.ops {
            for &v in &g.op(op).operands {
                if step_of.get(&v).is_some_and(|&s| s != st.id) {
                    used_elsewhere.insert(v);
                }
            }
        }
    }
    for st in &mut steps {
        let id = st.id;
        fill_io(
            g,
            st,
            |v| step_of.get(&v) == Some(&id),
            |r| used_elsewhere.contains(&r),
        );
    }
    Ok(steps)
}

/// Fills `st`'s inputs (what its ops read that is not `inside` it and not a constant, in
/// first-use order), weights (the large constants they read) and outputs (the results that
/// `leave` it, in definition order).
fn fill_io(
    g: &Graph,
    st: &mut Step,
    inside: impl Fn(ValueId) -> bool,
    leave: impl Fn(ValueId) -> bool,
) {
    let mut seen = BTreeSet::new();
    for &op in &st.ops {
        for &v in &g.op(op).operands {
            if let Some(c) = is_const(g, v) {
                if is_large(g, c) && seen.insert(v) {
                    st.weights.push(v);
                }
            } else if !inside(v) && seen.insert(v) {
                st.inputs.push(v);
            }
        }
        for &r in &g.op(op).results {
            if leave(r) {
                st.outputs.push(r);
            }
        }
    }
}

/// Marks the state a step can update in place. State slot `s` (input `x`, next value `n`)
/// is donated to the step `t` that computes `n` when:
/// - `t` is a function on one device (not on a mesh, not a collective);
/// - no later step reads `x`, and `x` is not itself a graph output (its buffer is
///   overwritten when `t` ends); `t` takes `x` as an argument even when its ops do not
///   read it (the old value was read by earlier steps, on other devices);
/// - no other step reads `n` (it leaves `t` only through `x`'s buffer);
/// - neither `n` nor anything else `t` returns may share `x`'s buffer: the write happens
///   after every op of `t`, but a returned view of `x` would be copied out after it. A value
///   may share its operand's buffer unless its op always makes a new tensor (the
///   elementwise, contraction, normalization, pooling and gather ops).
///
/// The step then takes `x` as a `memref`, reads it as a tensor, and ends by writing `n` into
/// it; one-shot bufferization orders every read of `x` before that write.
fn donate(g: &Graph, steps: &mut [Step]) {
    let names = tessera_ir::text::output_names(g);
    let mut step_of: BTreeMap<ValueId, usize> = BTreeMap::new();
    for st in steps.iter() {
        for &op in &st.ops {
            for &r in &g.op(op).results {
                step_of.insert(r, st.id);
            }
        }
    }
    let outputs: BTreeSet<ValueId> = g.outputs().iter().copied().collect();
    let mut taken: BTreeSet<ValueId> = BTreeSet::new();
    for slot in &g.state {
        let Some(&x) = g.inputs().get(slot.input) else {
            continue;
        };
        let Some(&n) = names
            .iter()
            .position(|o| *o == slot.next)
            .and_then(|o| g.outputs().get(o))
        else {
            continue;
        };
        let Some(&t) = step_of.get(&n) else { continue };
        let st = &steps[t];
        let ok = n != x
            && !taken.contains(&n)
            && !outputs.contains(&x)
            && !st.collective
            && !st.device.starts_with('@')
            && steps[t + 1..].iter().all(|o| !o.inputs.contains(&x))
            && steps.iter().all(|o| o.id == t || !o.inputs.contains(&n));
        if !ok {
            continue;
        }
        let shared = may_share(g, st, x);
        if shared.contains(&n) || st.outputs.iter().any(|v| shared.contains(v)) {
            continue;
        }
        taken.insert(n);
        let st = &mut steps[t];
        st.outputs.retain(|&v| v != n);
        if !st.inputs.contains(&x) {
            st.inputs.push(x);
        }
        st.donated.push((x, n));
    }
}

/// The values of step `st` whose buffer may be `x`'s (see [`donate`]).
fn may_share(g: &Graph, st: &Step, x: ValueId) -> BTreeSet<ValueId> {
    let mut set = BTreeSet::from([x]);
    for &op in &st.ops {
        let data = g.op(op);
        let fresh = matches!(
            data.op,
            Op::Unary(_)
                | Op::Binary(_)
                | Op::Select
                | Op::Cast { .. }
                | Op::Clip { .. }
                | Op::MatMul
                | Op::Gemm { .. }
                | Op::Conv(_)
                | Op::ConvTranspose { .. }
                | Op::LayerNorm { .. }
                | Op::BatchNorm { .. }
                | Op::Pool(_)
                | Op::Gather { .. }
        );
        if !fresh && data.operands.iter().any(|v| set.contains(v)) {
            set.extend(data.results.iter().copied());
        }
    }
    set
}

/// What [`lower`] needs besides the graph.
pub struct LowerOptions<'a> {
    /// The target, for DLTI and the default device.
    pub target: &'a TargetSpec,
    /// The model file or graph name, recorded in the manifest.
    pub model: String,
    /// Update state in place ([`donate`]): a training step's parameters and optimizer state
    /// are written into their input buffers. Off for the MPI program, whose ranks pass
    /// tensors between steps.
    pub donate_state: bool,
}

/// The name of the step function.
pub fn step_fn(id: usize) -> String {
    format!("step{id}")
}

/// The mesh a step runs on, when it runs SPMD (`device("@<mesh>")`).
fn step_mesh<'g>(g: &'g Graph, st: &Step) -> Option<&'g Mesh> {
    g.mesh_of_device(&st.device)
}

/// The type a value has where step `st` uses it: its block for a mesh step (split values
/// arriving whole are cut inside the function, see [`spmd`]), the whole value elsewhere.
fn arrival_type(g: &Graph, v: ValueId, producer_on_mesh: bool) -> LResult<TensorType> {
    match (producer_on_mesh, g.value_mesh(v)) {
        (true, Some(mesh)) => spmd::local_type(mesh, &spmd::sharding_of(g, v), g.ty(v)),
        _ => Ok(g.ty(v).clone()),
    }
}

/// Weights packed into panels, by value: the panel width ([`tessera_ir::panels`]).
type Packed = BTreeMap<ValueId, u64>;

/// Weights of at least this many bytes are packed into panels; smaller ones stay in the
/// cache whatever their layout.
const PACK_BYTES: u64 = 256 << 10;

/// The weights that are packed into panels ([`tessera_ir::panels`]) for the products that
/// read them: a constant `f32` `[K, N]` of at least [`PACK_BYTES`] that every op of the
/// graph reading it reads as `B`, the second operand only, of a matmul with a `>= 2`-D first
/// operand or of a gemm that does not transpose `B`, on a `cpu` device and on no mesh. The
/// panel width is [`crate::schedule::panel_width`] of the first such product's rows.
fn packed_weights(g: &Graph, target: &TargetSpec) -> Packed {
    let cpu = |op: OpId| {
        let d = g.op(op).device.as_deref().unwrap_or(&target.host);
        g.op_mesh(op).is_none()
            && target
                .devices
                .iter()
                .any(|x| x.name == d && x.lowering == "cpu")
    };
    // Each weight's rows for the first product that reads it, or `None` once any reader
    // is not a product that can read it packed.
    let mut rows: BTreeMap<ValueId, Option<u64>> = BTreeMap::new();
    for &op in g.ops() {
        let data = g.op(op);
        for (i, &v) in data.operands.iter().enumerate() {
            let Some(c) = is_const(g, v) else { continue };
            let k = g.constant(c);
            let ok_weight = k.ty.elem == tessera_ir::ElemType::F32
                && k.ty.rank() == 2
                && k.data.len() as u64 >= PACK_BYTES;
            if !ok_weight {
                continue;
            }
            let a = data.operands.first().map(|&x| g.ty(x));
            let m = match (&data.op, a) {
                (Op::MatMul, Some(a)) if i == 1 && a.rank() >= 2 => {
                    a.static_dims().map(|d| d[d.len() - 2])
                }
                (
                    Op::Gemm {
                        trans_a,
                        trans_b: false,
                        ..
                    },
                    Some(a),
                ) if i == 1 => a.static_dims().map(|d| if *trans_a { d[1] } else { d[0] }),
                _ => None,
            };
            let only_b = data.operands.iter().filter(|&&x| x == v).count() == 1;
            let m = m.filter(|_| only_b && cpu(op));
            let e = rows.entry(v).or_insert(m);
            if m.is_none() {
                *e = None;
            }
        }
    }
    rows.into_iter()
        .filter_map(|(v, m)| {
            let c = is_const(g, v)?;
            let n = g.constant(c).ty.static_dims()?[1];
            Some((v, crate::schedule::panel_width(m?, n)))
        })
        .collect()
}

/// A weight packed into panels of `p` columns: its name in the weights file
/// (`<constant>@panels<p>`) and its type ([`linalg::panels_type`]).
fn panels_weight(g: &Graph, c: ConstId, p: u64) -> (String, TensorType) {
    let k = g.constant(c);
    let d = k.ty.static_dims().unwrap_or_default();
    let (rows, cols) = (
        d.first().copied().unwrap_or(0),
        d.get(1).copied().unwrap_or(0),
    );
    (
        tessera_ir::panels::name(&k.name, p),
        linalg::panels_type(rows, cols, p),
    )
}

/// The weights file's name of a constant used in a step (per mesh device when split there).
fn weight_name(g: &Graph, st: &Step, v: ValueId, c: ConstId) -> (String, bool) {
    let name = g.constant(c).name.clone();
    let split = step_mesh(g, st).is_some() && !spmd::sharding_of(g, v).is_replicated();
    (name, split)
}

/// A state input held split on a mesh between runs ([`tessera_ir::StateSlot::mesh`]): that
/// mesh.
fn held_mesh(g: &Graph, v: ValueId) -> Option<&Mesh> {
    let ValueDef::Input(i) = g.value(v).def else {
        return None;
    };
    let slot = g.state.iter().find(|s| s.input == i)?;
    g.mesh_named(slot.mesh.as_deref()?)
}

/// How state input `v` is held split, for the manifest.
fn held(g: &Graph, v: ValueId) -> Option<crate::manifest::Held> {
    held_mesh(g, v).map(|m| crate::manifest::Held {
        mesh: format!("@{}", m.name),
        sharding: spmd::sharding_of(g, v).axes,
    })
}

/// Lowers a placed graph (static shapes) to one MLIR module per device.
pub fn lower(g: &Graph, opts: &LowerOptions<'_>) -> Result<Program, LowerError> {
    let target = opts.target;
    check_static(g)?;
    let default = target.host.clone();
    let mut steps = partition(g, &default)?;
    if opts.donate_state {
        donate(g, &mut steps);
    }
    let mut step_of: BTreeMap<ValueId, (usize, usize)> = BTreeMap::new();
    for st in &steps {
        for (k, &v) in st.outputs.iter().enumerate() {
            step_of.insert(v, (st.id, k));
        }
    }
    let on_mesh = |s: usize| steps[s].device.starts_with('@') && !steps[s].collective;
    let packed = packed_weights(g, target);
    let mut weights: BTreeMap<String, (TensorType, tessera_ir::Bytes)> = BTreeMap::new();
    let mut funcs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut kernels = Kernels::default();
    let mut dev_kernels: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    let mut step_texts = BTreeMap::new();
    let mut mstep = Vec::new();
    for st in &steps {
        let mesh = step_mesh(g, st);
        let at = |e: LowerError| LowerError(format!("step {}: {}", st.id, e.0));
        let mut args = Vec::new();
        if mesh.is_some() && !st.collective {
            args.push(Arg::MeshIndex {
                mesh_index: st.device.clone(),
            });
        }
        for &v in &st.inputs {
            let arg = match g.value(v).def {
                // A state held split: each device of its mesh reads its own block.
                ValueDef::Input(i) => match held_mesh(g, v) {
                    Some(m) if st.collective || mesh.is_none_or(|x| x.name != m.name) => {
                        return Err(LowerError(format!(
                            "step {}: state {} is held split on mesh @{}, but the step runs                              on {}",
                            st.id,
                            input_name(g, i),
                            m.name,
                            st.device
                        )));
                    }
                    Some(_) => Arg::Input {
                        input: input_name(g, i),
                        ty: arrival_type(g, v, true).map_err(at)?.to_string(),
                        per_device: true,
                    },
                    None => Arg::Input {
                        input: input_name(g, i),
                        ty: g.ty(v).to_string(),
                        per_device: false,
                    },
                },
                _ => {
                    let (s, k) = step_of[&v];
                    let from_mesh = on_mesh(s);
                    let ty = if st.device == steps[s].device || st.collective {
                        arrival_type(g, v, from_mesh).map_err(at)?
                    } else {
                        // Leaving the mesh: the value must be whole on every device.
                        let t = arrival_type(g, v, from_mesh).map_err(at)?;
                        if from_mesh && t != *g.ty(v) {
                            return Err(LowerError(format!(
                                "step {}: value {} leaves mesh {} split ({}); it needs an \
                                 all-reduce or all-gather first",
                                st.id,
                                value_name(g, v),
                                steps[s].device,
                                t
                            )));
                        }
                        t
                    };
                    // A value leaving a mesh (whole on every device) comes from its first.
                    let from = match g.mesh_of_device(&steps[s].device) {
                        Some(m) if st.device != steps[s].device => {
                            m.devices.first().cloned().unwrap_or_default()
                        }
                        _ => steps[s].device.clone(),
                    };
                    let transfer =
                        (from != st.device && steps[s].device != st.device).then(|| Transfer {
                            from: from.clone(),
                            to: st.device.clone(),
                            bytes: ty.size_bytes().unwrap_or(0),
                        });
                    Arg::Step {
                        step: s,
                        result: k,
                        ty: ty.to_string(),
                        transfer,
                    }
                }
            };
            args.push(arg);
        }
        for &v in &st.weights {
            let Some(c) = is_const(g, v) else { continue };
            let (name, split) = weight_name(g, st, v, c);
            let k = g.constant(c);
            match (split, mesh) {
                (true, Some(m)) => {
                    let sh = spmd::sharding_of(g, v);
                    let mut local = k.ty.clone();
                    for (i, dev) in m.devices.iter().enumerate() {
                        let (t, data) = spmd::slice_bytes(m, &sh, &k.ty, &k.data, i).map_err(at)?;
                        local = t.clone();
                        let key = format!("{name}@{dev}");
                        if weights
                            .get(&key)
                            .is_some_and(|(_, d)| d.as_ref() != data.as_slice())
                        {
                            return Err(LowerError(format!(
                                "constant {name} is split two ways on mesh {}",
                                st.device
                            )));
                        }
                        weights.insert(key, (t, tessera_ir::Bytes::from(data)));
                    }
                    args.push(Arg::Weight {
                        weight: name,
                        ty: local.to_string(),
                        per_device: true,
                    });
                }
                _ => {
                    let (name, ty) = match packed.get(&v) {
                        Some(&p) => panels_weight(g, c, p),
                        None => (name, k.ty.clone()),
                    };
                    // A weight read by several steps is packed once.
                    if !weights.contains_key(&name) {
                        let data = match packed.get(&v) {
                            Some(&p) => {
                                let d = dims(&k.ty)?;
                                tessera_ir::Bytes::from(tessera_ir::panels::pack(
                                    &k.data, d[0], d[1], p,
                                ))
                            }
                            None => k.data.clone(),
                        };
                        weights.insert(name.clone(), (ty.clone(), data));
                    }
                    args.push(Arg::Weight {
                        weight: name,
                        ty: ty.to_string(),
                        per_device: false,
                    });
                }
            }
        }
        let results: Vec<StepResult> = st
            .outputs
            .iter()
            .map(|&v| {
                Ok(StepResult {
                    ty: arrival_type(g, v, mesh.is_some() && !st.collective)?.to_string(),
                    value: value_name(g, v),
                })
            })
            .collect::<LResult<_>>()
            .map_err(at)?;
        if !st.collective {
            let (text, used) = lower_step(g, st, &mut kernels, &packed).map_err(at)?;
            let runners = match mesh {
                Some(m) => m.devices.clone(),
                None => vec![st.device.clone()],
            };
            for d in runners {
                funcs.entry(d.clone()).or_default().push(text.clone());
                dev_kernels.entry(d).or_default().extend(&used);
            }
            step_texts.insert(st.id, text);
        }
        mstep.push(ManifestStep {
            id: st.id,
            device: st.device.clone(),
            function: if st.collective {
                String::new()
            } else {
                step_fn(st.id)
            },
            mesh: mesh.map(|m| m.devices.clone()),
            collective: st.collective.then(|| g.op(st.ops[0]).op.name().to_string()),
            sharding: match &g.op(st.ops[0]).op {
                Op::AllGather { .. } | Op::AllToAll { .. } if st.collective => {
                    Some(spmd::sharding_of(g, g.op(st.ops[0]).operands[0]).axes)
                }
                _ => None,
            },
            args,
            results,
            donated: st
                .donated
                .iter()
                .map(|&(x, n)| crate::manifest::Donated {
                    input: match g.value(x).def {
                        ValueDef::Input(i) => input_name(g, i),
                        ValueDef::Result(..) => value_name(g, x),
                    },
                    value: value_name(g, n),
                })
                .collect(),
        });
    }
    // A donated next value is its state input's buffer once the step has run.
    let donated_to: BTreeMap<ValueId, usize> = steps
        .iter()
        .flat_map(|st| st.donated.iter())
        .filter_map(|&(x, n)| match g.value(x).def {
            ValueDef::Input(i) => Some((n, i)),
            ValueDef::Result(..) => None,
        })
        .collect();
    let mut outputs = Vec::new();
    let output_names = tessera_ir::text::output_names(g);
    // The outputs that are the next values of state held split, and how it is held.
    let held_next: BTreeMap<usize, crate::manifest::Held> = g
        .state
        .iter()
        .filter_map(|slot| {
            let h = held(g, *g.inputs().get(slot.input)?)?;
            Some((output_names.iter().position(|n| *n == slot.next)?, h))
        })
        .collect();
    for (i, (&v, name)) in g.outputs().iter().zip(output_names).enumerate() {
        let ty = g.ty(v).to_string();
        let source = match (g.value(v).def, donated_to.get(&v)) {
            (ValueDef::Input(k), _) | (_, Some(&k)) => Arg::Input {
                input: input_name(g, k),
                ty: ty.clone(),
                per_device: false,
            },
            _ => match is_const(g, v) {
                Some(c) => {
                    let k = g.constant(c);
                    weights.insert(k.name.clone(), (k.ty.clone(), k.data.clone()));
                    Arg::Weight {
                        weight: k.name.clone(),
                        ty: ty.clone(),
                        per_device: false,
                    }
                }
                None if held_next.contains_key(&i) => {
                    // The next value of a state held split: each mesh device's block.
                    let (s, k) = step_of[&v];
                    Arg::Step {
                        step: s,
                        result: k,
                        ty: arrival_type(g, v, on_mesh(s))?.to_string(),
                        transfer: None,
                    }
                }
                None => {
                    let (s, k) = step_of[&v];
                    let from = match g.mesh_of_device(&steps[s].device) {
                        Some(m) if on_mesh(s) => {
                            if arrival_type(g, v, true)? != *g.ty(v) {
                                return Err(LowerError(format!(
                                    "output {} leaves mesh {} split; it needs an all-reduce or \
                                     all-gather first",
                                    name, steps[s].device
                                )));
                            }
                            m.devices.first().cloned().unwrap_or_default()
                        }
                        _ => steps[s].device.clone(),
                    };
                    Arg::Step {
                        step: s,
                        result: k,
                        ty: ty.clone(),
                        transfer: (from != target.host && !steps[s].collective).then(|| Transfer {
                            from,
                            to: target.host.clone(),
                            bytes: g.ty(v).size_bytes().unwrap_or(0),
                        }),
                    }
                }
            },
        };
        outputs.push(Output {
            index: i,
            name,
            source,
            held: held_next.get(&i).cloned(),
        });
    }
    let mut modules = Vec::new();
    let mut devices = Vec::new();
    for d in &target.devices {
        let Some(steps) = funcs.remove(&d.name) else {
            continue;
        };
        // The kernels its steps call, then the steps.
        let mut fs: Vec<String> = dev_kernels
            .remove(&d.name)
            .unwrap_or_default()
            .into_iter()
            .map(|n| kernels.text(n).to_string())
            .collect();
        fs.extend(steps);
        modules.push((d.name.clone(), module_text(target, d, &fs)));
        devices.push(ManifestDevice {
            name: d.name.clone(),
            kind: d.kind.clone(),
            lowering: d.lowering.clone(),
            arch: (d.lowering == "nvptx").then(|| {
                d.arch
                    .clone()
                    .unwrap_or_else(|| crate::pipelines::DEFAULT_NVPTX_ARCH.to_string())
            }),
            module: format!("{}.mlir", d.name),
            rank: target.device_index(&d.name).unwrap_or(0),
            library: None,
        });
    }
    if let Some((name, _)) = funcs.into_iter().next() {
        return Err(LowerError(format!(
            "ops are placed on device `{name}`, which target {} does not have",
            target.name
        )));
    }
    let manifest = Manifest {
        format: crate::manifest::FORMAT.to_string(),
        model: opts.model.clone(),
        graph: g.name.clone(),
        target: target.name.clone(),
        host: target.host.clone(),
        weights: if weights.is_empty() {
            None
        } else {
            Some(crate::manifest::WEIGHTS_FILE.to_string())
        },
        inputs: g
            .inputs()
            .iter()
            .enumerate()
            .map(|(i, &v)| crate::manifest::Input {
                name: input_name(g, i),
                ty: g.ty(v).to_string(),
                held: held(g, v),
            })
            .collect(),
        outputs,
        devices,
        steps: mstep,
        meshes: g
            .meshes
            .iter()
            .map(|m| crate::manifest::ManifestMesh {
                name: m.name.clone(),
                shape: m.shape.clone(),
                devices: m.devices.clone(),
            })
            .collect(),
    };
    Ok(Program {
        modules,
        manifest,
        steps,
        weights,
        step_texts,
        kernels: kernels.into_texts(),
    })
}

/// Every value the program computes must have a static type.
fn check_static(g: &Graph) -> Result<(), LowerError> {
    for (i, &v) in g.inputs().iter().enumerate() {
        if g.ty(v).static_dims().is_none() {
            return Err(LowerError(format!(
                "graph input `{}` has type {}: lowering needs static shapes (bind them with \
                 --input-shape)",
                input_name(g, i),
                g.ty(v)
            )));
        }
    }
    for &op in g.ops() {
        let data = g.op(op);
        for &r in &data.results {
            if g.ty(r).static_dims().is_none() {
                return Err(LowerError(format!(
                    "op {op} ({}){}: result type {} is not static: lowering needs static \
                     shapes (bind the inputs' with --input-shape)",
                    data.op.name(),
                    data.loc
                        .as_deref()
                        .map(|l| format!(" at {l:?}"))
                        .unwrap_or_default(),
                    g.ty(r)
                )));
            }
        }
    }
    Ok(())
}

fn input_name(g: &Graph, i: usize) -> String {
    let v = g.inputs()[i];
    g.value(v)
        .name
        .clone()
        .unwrap_or_else(|| format!("input{i}"))
}

fn value_name(g: &Graph, v: ValueId) -> String {
    g.value(v).name.clone().unwrap_or_else(|| v.to_string())
}

fn module_text(target: &TargetSpec, d: &tessera_targets::Device, funcs: &[String]) -> String {
    let mut entries = vec![
        format!("\"kind\" = {}", quote(&d.kind)),
        format!("\"lowering\" = {}", quote(&d.lowering)),
        format!("\"memory_bytes\" = {} : i64", d.memory_bytes),
        format!("\"memory_bandwidth\" = {:.6e} : f64", d.memory_bandwidth),
    ];
    for (ty, peak) in &d.compute {
        entries.push(format!(
            "{} = {:.6e} : f64",
            quote(&format!("peak_ops_{ty}")),
            peak
        ));
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "module @{} attributes {{dlti.target_system_spec = #dlti.target_system_spec<{} = #dlti.target_device_spec<{}>>, tessera.device = {}, tessera.target = {}}} {{",
        sym(&d.name),
        quote(&d.name),
        entries.join(", "),
        quote(&d.name),
        quote(&target.name)
    );
    for f in funcs {
        s.push_str(f);
    }
    s.push_str("}\n");
    s
}

/// A symbol name MLIR accepts bare (`[A-Za-z_][A-Za-z0-9_$.]*`), else quoted.
fn sym(name: &str) -> String {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_$.".contains(c));
    if ok { name.to_string() } else { quote(name) }
}

/// The most ops one function holds: a longer step is cut into parts of this many ops, each a
/// function the step calls ([`lower_step`]).
pub const PART_OPS: usize = 64;

/// What a function made from a step's ops is.
enum Form<'a> {
    /// The step's own function, with its ops.
    Step,
    /// A part of a longer step: a private function of some of its ops.
    Part,
    /// A longer step's own function: it calls its parts (name, ops) in order.
    Parent(&'a [(String, Step)]),
}

/// The text of one step's function (and its parts' before it), and the kernels they call
/// (added to `kernels`).
///
/// A step of more than [`PART_OPS`] ops is cut into runs of that many, each a private
/// function (`@step0_part3`) taking what its ops read from outside it and returning what the
/// later parts or the step return; the step's function calls them in order. LLVM's code
/// generation takes time superlinear in a function's size, and a step of a deep model would
/// otherwise be one function as long as the model, however small its kernels. Each part's
/// intermediates are freed when it returns.
fn lower_step(
    g: &Graph,
    st: &Step,
    kernels: &mut Kernels,
    packed: &Packed,
) -> LResult<(String, BTreeSet<usize>)> {
    if st.ops.len() <= PART_OPS {
        return lower_function(g, st, kernels, packed, &step_fn(st.id), Form::Step);
    }
    let parts: Vec<(String, Step)> = split_step(g, st)
        .into_iter()
        .enumerate()
        .map(|(k, p)| (format!("{}_part{k}", step_fn(st.id)), p))
        .collect();
    let mut text = String::new();
    let mut used = BTreeSet::new();
    for (name, p) in &parts {
        let (t, u) = lower_function(g, p, kernels, packed, name, Form::Part)?;
        text.push_str(&t);
        used.extend(u);
    }
    let (t, u) = lower_function(
        g,
        st,
        kernels,
        packed,
        &step_fn(st.id),
        Form::Parent(&parts),
    )?;
    text.push_str(&t);
    used.extend(u);
    Ok((text, used))
}

/// A long step's ops in runs of [`PART_OPS`], each with what it reads from outside it (the
/// step's inputs, earlier parts' results, weights) and what it gives the later parts and the
/// step's outputs (its donated next values among them), as steps of their own.
fn split_step(g: &Graph, st: &Step) -> Vec<Step> {
    let chunks: Vec<&[OpId]> = st.ops.chunks(PART_OPS).collect();
    let mut part_of: BTreeMap<ValueId, usize> = BTreeMap::new();
    for (k, ops) in chunks.iter().enumerate() {
        for &op in *ops {
            for &r in &g.op(op).results {
                part_of.insert(r, k);
            }
        }
    }
    let mut needed: BTreeSet<(usize, ValueId)> = BTreeSet::new();
    for (k, ops) in chunks.iter().enumerate() {
        for &op in *ops {
            for &v in &g.op(op).operands {
                if part_of.get(&v).is_some_and(|&p| p != k) {
                    needed.insert((part_of[&v], v));
                }
            }
        }
    }
    let returned = st.returned();
    chunks
        .iter()
        .enumerate()
        .map(|(k, ops)| {
            let mut p = Step {
                id: st.id,
                device: st.device.clone(),
                ops: ops.to_vec(),
                inputs: Vec::new(),
                weights: Vec::new(),
                outputs: Vec::new(),
                collective: false,
                donated: Vec::new(),
            };
            fill_io(
                g,
                &mut p,
                |v| part_of.get(&v) == Some(&k),
                |r| needed.contains(&(k, r)) || returned.contains(&r),
            );
            p
        })
        .collect()
}

/// Whether an op may join the fused group of the op whose result it reads: an elementwise
/// op of one result (see [`fusion_groups`]).
fn joins_producer(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast { .. } | Op::Clip { .. }
    )
}

/// The longest fused group, in ops: a kernel's size stays bounded, as a step part's does.
const GROUP_OPS: usize = 16;

/// A group that [`fusion_groups`] is growing, from its sink back.
struct Growing {
    /// Its ops, the sink first.
    ops: Vec<OpId>,
    /// Whether nothing more may join (its sink is no elementwise op).
    closed: bool,
    /// Whether an op that computes, not elementwise and not a reshape, has joined.
    headed: bool,
    /// What its ops that are not elementwise read: no elementwise op may make it, since the
    /// elementwise ops are one generic after the rest.
    head_reads: BTreeSet<ValueId>,
}

/// A step's ops in *fused groups*, each in step order, in the order their code goes (each
/// group where its last op is). A group is an op whose result the step needs elsewhere
/// (its *sink*) with ops that feed only it: walking back from the sink, an op joins when
/// every op of the step that reads its result is in the group and nothing else needs it
/// (not the step's outputs nor a donated next value).
/// - A sink that is an elementwise op takes producers: elementwise ops, reshapes, and one op
///   that computes otherwise (its *head*: a matmul, a convolution, a reduction, a softmax).
///   A sink of any other kind is a group of its own.
/// - The elementwise ops are one generic after the others ([`lower_fused`]), so none of them
///   may feed the head or a reshape.
///
/// So a group is a head, the reshapes of its result, and the elementwise ops after it (a
/// matmul and its bias, a GELU's products, pow and tanh), or elementwise ops alone: one
/// kernel, one loop nest for its elementwise ops, no tensor between them, and only the
/// sink's result leaves it. A group without a head leaves its reshapes in the step (views
/// of the step's values), so its kernel can be shared with the same code on other shapes.
/// Ops that hold regions, that only view or make constants, and ops of several results are
/// groups of their own; `fuse` false (a mesh step: its ops are lowered in the local view)
/// gives one op per group.
fn fusion_groups(g: &Graph, st: &Step, fuse: bool) -> Vec<Vec<OpId>> {
    if !fuse {
        return st.ops.iter().map(|&o| vec![o]).collect();
    }
    let mut readers: BTreeMap<ValueId, BTreeSet<OpId>> = BTreeMap::new();
    for &op in &st.ops {
        for &v in &g.op(op).operands {
            readers.entry(v).or_default().insert(op);
        }
    }
    let returned = st.returned();
    let mut groups: Vec<Growing> = Vec::new();
    let mut group_of: BTreeMap<OpId, usize> = BTreeMap::new();
    for &op in st.ops.iter().rev() {
        let data = g.op(op);
        let elementwise = joins_producer(&data.op);
        let reshape = matches!(data.op, Op::Reshape { .. });
        let may_join = data.results.len() == 1
            && (elementwise || (kernel::may_be_kernel(&data.op) && !data.op.has_regions()));
        let into = may_join
            .then(|| {
                let r = data.results[0];
                if returned.contains(&r) {
                    return None;
                }
                let mut ks = readers.get(&r)?.iter().map(|u| group_of.get(u).copied());
                let k = ks.next()??;
                let grp = &groups[k];
                let fits = if elementwise {
                    !grp.head_reads.contains(&r)
                } else {
                    reshape || !grp.headed
                };
                (ks.all(|x| x == Some(k)) && !grp.closed && fits && grp.ops.len() < GROUP_OPS)
                    .then_some(k)
            })
            .flatten();
        let k = into.unwrap_or_else(|| {
            groups.push(Growing {
                ops: Vec::new(),
                closed: !(may_join && elementwise),
                headed: false,
                head_reads: BTreeSet::new(),
            });
            groups.len() - 1
        });
        let grp = &mut groups[k];
        grp.ops.push(op);
        if !elementwise {
            grp.head_reads.extend(data.operands.iter().copied());
            grp.headed |= !reshape;
        }
        group_of.insert(op, k);
    }
    let mut out: Vec<Vec<OpId>> = Vec::new();
    for grp in groups {
        let mut ops = grp.ops;
        ops.reverse();
        if !grp.headed && ops.len() > 1 {
            let (views, rest): (Vec<OpId>, Vec<OpId>) = ops
                .into_iter()
                .partition(|&o| matches!(g.op(o).op, Op::Reshape { .. }));
            out.extend(views.into_iter().map(|o| vec![o]));
            ops = rest;
        }
        out.push(ops);
    }
    let at: BTreeMap<OpId, usize> = st.ops.iter().enumerate().map(|(i, &o)| (o, i)).collect();
    out.sort_by_key(|ops| at[&ops[ops.len() - 1]]);
    out
}

/// A fused group's ops (see [`fusion_groups`], two or more, in no mesh step) as one kernel
/// that the step calls where the group's last op is, with the group's distinct operands
/// from outside it as arguments (small constants inside) and its last op's results; the
/// call's location fuses the ops' model nodes. Adds the last op's results to `env` and the
/// kernel to `used`.
///
/// With a destination (the group's result a piece of a concatenation, see
/// [`in_place_pieces`]), the kernel writes its result into the destination's block instead
/// and returns the destination, whose new value this returns; `env` is then left as it is.
#[allow(clippy::too_many_arguments)]
fn lower_fused(
    b: &mut Body,
    g: &Graph,
    group: &[OpId],
    env: &mut BTreeMap<ValueId, Val>,
    weight_args: &BTreeMap<ValueId, Val>,
    kernels: &mut Kernels,
    used: &mut BTreeSet<usize>,
    dest: Option<(&kernel::Dest, Val)>,
) -> LResult<Option<Val>> {
    let at = |op: OpId, e: LowerError| op_error(g, op, e);
    for &op in group {
        let data = g.op(op);
        b.op_comment(op, data.op.name(), data.loc.as_deref());
    }
    let inside: BTreeSet<ValueId> = group
        .iter()
        .flat_map(|&op| g.op(op).results.iter().copied())
        .collect();
    let mut params: Vec<(ValueId, Val)> = Vec::new();
    for &op in group {
        for &v in &g.op(op).operands {
            if inside.contains(&v) || params.iter().any(|(p, _)| *p == v) {
                continue;
            }
            if let Some(val) = env.get(&v).or_else(|| weight_args.get(&v)) {
                params.push((v, val.clone()));
            } else if is_const(g, v).is_none() {
                return Err(at(
                    op,
                    LowerError(format!("operand {v} is not defined before it")),
                ));
            }
        }
    }
    let last = g.op(group[group.len() - 1]);
    let results = local_types(g, None, &last.results)?;
    let tys: Vec<TensorType> = params.iter().map(|(_, p)| p.ty.clone()).collect();
    let kinds: Vec<&str> = group.iter().map(|&op| g.op(op).op.name()).collect();
    let name = if kinds.len() <= 3 {
        kinds.join("_")
    } else {
        format!("{}_{}_etc", kinds[0], kinds[1])
    };
    // The head and reshapes first, then the elementwise ops as one generic over the last's
    // result.
    let (chain, head): (Vec<OpId>, Vec<OpId>) =
        group.iter().partition(|&&op| joins_producer(&g.op(op).op));
    let into = dest.as_ref().map(|d| d.0);
    let made = kernel::make(kernels, &name, &tys, &results, into, |kb, kargs| {
        let mut inner: BTreeMap<ValueId, Val> = BTreeMap::new();
        let operand = |kb: &mut Body, inner: &mut BTreeMap<ValueId, Val>, op, v| {
            if let Some(k) = params.iter().position(|(p, _)| *p == v) {
                return Ok(kargs[k].clone());
            }
            if let Some(val) = inner.get(&v) {
                return Ok(val.clone());
            }
            let c = is_const(g, v).expect("checked above");
            let val = inline_const(kb, g, c).map_err(|e| at(op, e))?;
            inner.insert(v, val.clone());
            Ok(val)
        };
        for &op in &head {
            let data = g.op(op);
            let mut args = Vec::new();
            for &v in &data.operands {
                args.push(operand(kb, &mut inner, op, v)?);
            }
            let tys = local_types(g, None, &data.results)?;
            let names = lower_op_code(kb, g, op, &args, &tys).map_err(|e| at(op, e))?;
            for ((&r, n), ty) in data.results.iter().zip(names).zip(tys) {
                inner.insert(r, Val { name: n, ty });
            }
        }
        let made: BTreeSet<ValueId> = chain.iter().map(|&op| g.op(op).results[0]).collect();
        // The chain's operands from before it, each once, in first-use order.
        let mut ins: Vec<(ValueId, Val)> = Vec::new();
        for &op in &chain {
            for &v in &g.op(op).operands {
                if !made.contains(&v) && !ins.iter().any(|(x, _)| *x == v) {
                    ins.push((v, operand(kb, &mut inner, op, v)?));
                }
            }
        }
        let refs: Vec<&Val> = ins.iter().map(|(_, val)| val).collect();
        let out = &results[0];
        let r = kb.elementwise(&refs, out, |kb, s| {
            let mut scalars: BTreeMap<ValueId, String> =
                ins.iter().map(|(v, _)| *v).zip(s.iter().cloned()).collect();
            let mut last = String::new();
            for &op in &chain {
                let data = g.op(op);
                let s: Vec<String> = data.operands.iter().map(|v| scalars[v].clone()).collect();
                let elems: Vec<ElemType> = data.operands.iter().map(|&v| g.ty(v).elem).collect();
                let out = g.ty(data.results[0]).elem;
                let exponent = data.operands.get(1).and_then(|&v| splat_value(g, v));
                last =
                    scalar_code(kb, &data.op, &elems, out, &s, exponent).map_err(|e| at(op, e))?;
                scalars.insert(data.results[0], last.clone());
            }
            Ok(last)
        })?;
        Ok(vec![r])
    })?;
    // A group ends in its elementwise generic: its kernel always computes.
    let (n, kname) = made.ok_or_else(|| {
        let sink = group[group.len() - 1];
        op_error(g, sink, LowerError("a fused group made no kernel".into()))
    })?;
    used.insert(n);
    let mut args: Vec<Val> = params.into_iter().map(|(_, p)| p).collect();
    let locs: Vec<&str> = group
        .iter()
        .filter_map(|&op| g.op(op).loc.as_deref())
        .collect();
    if let Some((d, buffer)) = dest {
        args.push(buffer);
        let made = b.with_fused_loc(&locs, |b| kernel::call_one(b, &kname, &args, &d.ty));
        return made
            .map(Some)
            .map_err(|e| op_error(g, group[group.len() - 1], e));
    }
    let names = b.with_fused_loc(&locs, |b| kernel::call(b, &kname, &args, &results))?;
    for ((&r, name), ty) in last.results.iter().zip(names).zip(results) {
        env.insert(r, Val { name, ty });
    }
    Ok(None)
}

/// A piece of a concatenation that its producer's kernel writes into the concatenation's
/// result in place (see [`in_place_pieces`]).
struct Piece {
    /// The concatenation.
    concat: OpId,
    /// Its result's type and the piece's offsets in it.
    dest: kernel::Dest,
}

/// A concatenation (`op`) whose result `so_far` holds its operands among `pieces` (their
/// kernels, before it, wrote them there): the other operands inserted into it by a kernel,
/// or `so_far` itself when there are none.
#[allow(clippy::too_many_arguments)]
fn concat_rest(
    b: &mut Body,
    g: &Graph,
    op: OpId,
    so_far: Val,
    pieces: &BTreeMap<ValueId, Piece>,
    env: &BTreeMap<ValueId, Val>,
    weight_args: &BTreeMap<ValueId, Val>,
    kernels: &mut Kernels,
    used: &mut BTreeSet<usize>,
) -> LResult<Val> {
    let rest: Vec<(ValueId, Vec<u64>)> = concat_offsets(g, op)?
        .into_iter()
        .filter(|(v, _)| !pieces.contains_key(v))
        .collect();
    if rest.is_empty() {
        return Ok(so_far);
    }
    let mut params: Vec<(ValueId, Val)> = Vec::new();
    for (v, _) in &rest {
        if params.iter().any(|(p, _)| p == v) {
            continue;
        }
        if let Some(val) = env.get(v).or_else(|| weight_args.get(v)) {
            params.push((*v, val.clone()));
        } else if is_const(g, *v).is_none() {
            return Err(LowerError(format!("operand {v} is not defined before it")));
        }
    }
    let tys: Vec<TensorType> = params
        .iter()
        .map(|(_, p)| p.ty.clone())
        .chain([so_far.ty.clone()])
        .collect();
    let out = std::slice::from_ref(&so_far.ty);
    let made = kernel::make(kernels, g.op(op).op.name(), &tys, out, None, |kb, kargs| {
        let mut inner: BTreeMap<ValueId, Val> = BTreeMap::new();
        let mut pieces = Vec::new();
        for (v, offsets) in &rest {
            let val = if let Some(k) = params.iter().position(|(p, _)| p == v) {
                kargs[k].clone()
            } else if let Some(val) = inner.get(v) {
                val.clone()
            } else {
                let c = is_const(g, *v).expect("checked above");
                let val = inline_const(kb, g, c)?;
                inner.insert(*v, val.clone());
                val
            };
            pieces.push((val, offsets.clone()));
        }
        let acc = kargs[params.len()].name.clone();
        Ok(vec![shape::concat_into(kb, acc, &pieces, &so_far.ty)?])
    })?;
    let (n, name) = made.ok_or_else(|| LowerError("a concatenation made no kernel".into()))?;
    used.insert(n);
    let mut args: Vec<Val> = params.into_iter().map(|(_, p)| p).collect();
    let ty = so_far.ty.clone();
    args.push(so_far);
    let loc = g.op(op).loc.as_deref();
    b.with_loc(loc, |b| kernel::call_one(b, &name, &args, &ty))
}

/// A concatenation's operands that have something along its axis, each with its offsets
/// in the result.
fn concat_offsets(g: &Graph, op: OpId) -> LResult<Vec<(ValueId, Vec<u64>)>> {
    let data = g.op(op);
    let Op::Concat { axis } = data.op else {
        return Err(LowerError(format!("op {op} is no concatenation")));
    };
    let shapes = data
        .operands
        .iter()
        .map(|&v| dims(g.ty(v)))
        .collect::<LResult<Vec<_>>>()?;
    Ok(data
        .operands
        .iter()
        .zip(shape::concat_offsets(&shapes, axis))
        .filter_map(|(&v, at)| Some((v, at?)))
        .collect())
}

/// The pieces of the step's concatenations that their producers write in place, by value.
///
/// A concatenation that is a group of its own takes each operand that is the result of
/// another group's kernel (a fused group, or one op that may be a kernel, of one result
/// and no regions), which nothing else reads, the step does not return, and the
/// concatenation reads once: that kernel gets the concatenation's result as a destination
/// ([`kernel::Dest`]) and writes its result into its block. The step makes the result
/// (`tensor.empty`) before the first such kernel and passes it from one to the next; the
/// concatenation then inserts only its other operands. SqueezeNet's fire modules and the
/// YOLO-shaped net's C2f blocks copied every piece once more (0.5 and 0.9 ms of
/// `memmove`, on one thread, in their steps' serial part on two).
fn in_place_pieces(
    g: &Graph,
    st: &Step,
    groups: &[Vec<OpId>],
) -> LResult<BTreeMap<ValueId, Piece>> {
    let mut readers: BTreeMap<ValueId, usize> = BTreeMap::new();
    for &op in &st.ops {
        for &v in &g.op(op).operands {
            *readers.entry(v).or_default() += 1;
        }
    }
    let returned = st.returned();
    // Each group's result, where its kernel may write it elsewhere.
    let mut sinks: BTreeSet<ValueId> = BTreeSet::new();
    for group in groups {
        let last = g.op(group[group.len() - 1]);
        let kernel = group.len() > 1
            || (kernel::may_be_kernel(&last.op)
                && !last.op.has_regions()
                && !matches!(last.op, Op::Concat { .. }));
        if let [r] = last.results[..]
            && kernel
        {
            sinks.insert(r);
        }
    }
    let mut pieces = BTreeMap::new();
    for group in groups {
        let [c] = group[..] else { continue };
        let data = g.op(c);
        if !matches!(data.op, Op::Concat { .. }) {
            continue;
        }
        let [out] = data.results[..] else { continue };
        let ty = g.ty(out).clone();
        for (v, offsets) in concat_offsets(g, c)? {
            // One read in the step: the concatenation's, of this operand alone.
            if readers.get(&v) == Some(&1) && sinks.contains(&v) && !returned.contains(&v) {
                pieces.insert(
                    v,
                    Piece {
                        concat: c,
                        dest: kernel::Dest {
                            ty: ty.clone(),
                            offsets,
                        },
                    },
                );
            }
        }
    }
    Ok(pieces)
}

/// An op's lowering error, naming the op, its kind and its model node.
fn op_error(g: &Graph, op: OpId, e: LowerError) -> LowerError {
    let data = g.op(op);
    let at = data
        .loc
        .as_deref()
        .map(|l| format!(" at {l:?}"))
        .unwrap_or_default();
    LowerError(format!("op {op} ({}){at}: {}", data.op.name(), e.0))
}

/// The text of a function made from a step's ops (see [`Form`]) named `name`, and the
/// kernels it calls.
fn lower_function(
    g: &Graph,
    st: &Step,
    kernels: &mut Kernels,
    packed: &Packed,
    name: &str,
    form: Form<'_>,
) -> LResult<(String, BTreeSet<usize>)> {
    let mesh = step_mesh(g, st);
    let mut used = BTreeSet::new();
    let mut b = Body::default();
    let mut env: BTreeMap<ValueId, Val> = BTreeMap::new();
    let mut params = Vec::new();
    let coord = "%coord".to_string();
    if mesh.is_some() {
        params.push(format!(
            "{coord}: tensor<i64> {{bufferization.writable = false}}"
        ));
    }
    // Values that arrive whole but are split here are cut after the parameters are read.
    let mut to_cut = Vec::new();
    for (k, &v) in st.inputs.iter().enumerate() {
        let name = format!("%arg{k}");
        // A collective's result arrives whole (its step makes the whole tensor), like a
        // value from off the mesh.
        let from_mesh = match g.value(v).def {
            ValueDef::Result(op, _) => {
                mesh.is_some()
                    && g.op(op).device.as_deref() == Some(st.device.as_str())
                    && g.op(op).op.collective_axes().is_none()
            }
            // A state held split on the mesh: each device's block.
            ValueDef::Input(_) => held_mesh(g, v).is_some(),
        };
        let ty = arrival_type(g, v, from_mesh)?;
        let tt = tensor_ty(&ty)?;
        if st.donated.iter().any(|&(x, _)| x == v) {
            // Donated state: its buffer, read as a tensor here and written at the end.
            let mt = memref_ty(&ty)?;
            params.push(format!("{name}_buf: {mt}"));
            b.line(format!(
                "{name} = bufferization.to_tensor {name}_buf restrict : {mt} to {tt}"
            ));
        } else {
            params.push(format!("{name}: {tt} {{bufferization.writable = false}}"));
        }
        // A step's parts cut what they read themselves.
        if mesh.is_some() && !from_mesh && !matches!(form, Form::Parent(_)) {
            to_cut.push(v);
        }
        env.insert(v, Val { name, ty });
    }
    let mut weight_args: BTreeMap<ValueId, Val> = BTreeMap::new();
    for (k, &v) in st.weights.iter().enumerate() {
        let Some(c) = is_const(g, v) else { continue };
        let name = format!("%arg{}", st.inputs.len() + k);
        let (wname, split) = weight_name(g, st, v, c);
        let (wname, ty) = match (split, mesh, packed.get(&v)) {
            (true, Some(m), _) => (
                wname,
                spmd::local_type(m, &spmd::sharding_of(g, v), &g.constant(c).ty)?,
            ),
            (_, _, Some(&p)) => panels_weight(g, c, p),
            _ => (wname, g.constant(c).ty.clone()),
        };
        let shown = if split {
            format!("{wname}@<device>")
        } else {
            wname
        };
        params.push(format!(
            "{name}: {} {{bufferization.writable = false, tessera.weight = {}}}",
            tensor_ty(&ty)?,
            quote(&shown)
        ));
        weight_args.insert(v, Val { name, ty });
    }
    if let Some(m) = mesh {
        for v in to_cut {
            let whole = env[&v].clone();
            let cut = spmd::slice_in_function(&mut b, m, &spmd::sharding_of(g, v), &whole, &coord)?;
            env.insert(v, cut);
        }
    }
    let mut consts: BTreeMap<ValueId, Val> = BTreeMap::new();
    if let Form::Parent(parts) = form {
        for (pname, p) in parts {
            let mut args = Vec::new();
            if mesh.is_some() {
                args.push(Val {
                    name: coord.clone(),
                    ty: TensorType::fixed(tessera_ir::ElemType::I64, &[]),
                });
            }
            for v in p.inputs.iter().chain(&p.weights) {
                let val = env.get(v).or_else(|| weight_args.get(v)).ok_or_else(|| {
                    LowerError(format!("{pname}: value {v} is not defined before it"))
                })?;
                args.push(val.clone());
            }
            let tys = local_types(g, mesh, &p.outputs)?;
            let names = kernel::call(&mut b, pname, &args, &tys)?;
            for ((&r, name), ty) in p.outputs.iter().zip(names).zip(tys) {
                env.insert(r, Val { name, ty });
            }
        }
    }
    let groups = match form {
        Form::Parent(_) => Vec::new(),
        _ => fusion_groups(g, st, mesh.is_none()),
    };
    let pieces = match mesh {
        None => in_place_pieces(g, st, &groups)?,
        Some(_) => BTreeMap::new(),
    };
    // Each concatenation's result so far, from the first of its pieces written in place.
    let mut buffers: BTreeMap<OpId, Val> = BTreeMap::new();
    let buffer = |b: &mut Body, buffers: &BTreeMap<OpId, Val>, p: &Piece| -> LResult<Val> {
        match buffers.get(&p.concat) {
            Some(v) => Ok(v.clone()),
            None => Ok(Val {
                name: b.empty(&p.dest.ty)?,
                ty: p.dest.ty.clone(),
            }),
        }
    };
    for group in &groups {
        let sink = g.op(group[group.len() - 1]);
        let piece = match sink.results[..] {
            [r] => pieces.get(&r),
            _ => None,
        };
        if group.len() > 1 {
            let dest = match piece {
                Some(p) => Some((&p.dest, buffer(&mut b, &buffers, p)?)),
                None => None,
            };
            let made = lower_fused(
                &mut b,
                g,
                group,
                &mut env,
                &weight_args,
                kernels,
                &mut used,
                dest,
            )?;
            if let (Some(v), Some(p)) = (made, piece) {
                buffers.insert(p.concat, v);
            }
            continue;
        }
        let op = group[0];
        let data = g.op(op);
        // The comment heads everything the op needs, its inline constants too.
        b.op_comment(op, data.op.name(), data.loc.as_deref());
        if let (Op::Concat { .. }, Some(so_far)) = (&data.op, buffers.get(&op)) {
            let val = concat_rest(
                &mut b,
                g,
                op,
                so_far.clone(),
                &pieces,
                &env,
                &weight_args,
                kernels,
                &mut used,
            )
            .map_err(|e| op_error(g, op, e))?;
            env.insert(data.results[0], val);
            continue;
        }
        // Each operand: a value of the step (an input, an op's result, a weight), or a small
        // constant, written where the op's code goes (a mesh step's in the step: its cut
        // needs the device's index).
        let mut srcs: Vec<(ValueId, Option<Val>)> = Vec::new();
        for &v in &data.operands {
            let val = if let Some(val) = env.get(&v).or_else(|| weight_args.get(&v)) {
                Some(val.clone())
            } else if is_const(g, v).is_none() {
                return Err(LowerError(format!(
                    "op {op} ({}): operand {v} is not defined before it",
                    data.op.name()
                )));
            } else if mesh.is_some() {
                Some(step_const(&mut b, g, mesh, &coord, &mut consts, v)?)
            } else {
                None
            };
            srcs.push((v, val));
        }
        let results = local_types(g, mesh, &data.results)?;
        let mut lower_one = |b: &mut Body| -> LResult<Vec<String>> {
            if let Some(m) = mesh {
                let args: Vec<Val> = srcs.iter().filter_map(|(_, v)| v.clone()).collect();
                if let Some(names) = spmd::lower_mesh_op(b, g, op, m, &args, &results, &coord)? {
                    return Ok(names);
                }
            }
            if kernel::may_be_kernel(&data.op) {
                // The kernel's arguments: the distinct operands the step has.
                let mut params: Vec<(ValueId, Val)> = Vec::new();
                for (v, val) in &srcs {
                    if let Some(val) = val
                        && !params.iter().any(|(p, _)| p == v)
                    {
                        params.push((*v, val.clone()));
                    }
                }
                let tys: Vec<TensorType> = params.iter().map(|(_, p)| p.ty.clone()).collect();
                let (kind, to) = (data.op.name(), piece.map(|p| &p.dest));
                let made = kernel::make(kernels, kind, &tys, &results, to, |kb, kargs| {
                    let mut inner: BTreeMap<ValueId, Val> = BTreeMap::new();
                    let mut args = Vec::new();
                    for (v, _) in &srcs {
                        if let Some(k) = params.iter().position(|(p, _)| p == v) {
                            args.push(kargs[k].clone());
                        } else if let Some(val) = inner.get(v) {
                            args.push(val.clone());
                        } else {
                            let c = is_const(g, *v).expect("checked above");
                            let val = inline_const(kb, g, c)?;
                            inner.insert(*v, val.clone());
                            args.push(val);
                        }
                    }
                    lower_op_code(kb, g, op, &args, &results)
                })?;
                if let Some((n, name)) = made {
                    used.insert(n);
                    let mut args: Vec<Val> = params.into_iter().map(|(_, p)| p).collect();
                    return b.with_loc(data.loc.as_deref(), |b| match piece {
                        Some(p) => {
                            args.push(buffer(b, &buffers, p)?);
                            kernel::call(b, &name, &args, std::slice::from_ref(&p.dest.ty))
                        }
                        None => kernel::call(b, &name, &args, &results),
                    });
                }
            }
            // The op's code stays in the step.
            let mut args = Vec::new();
            for (v, val) in &srcs {
                args.push(match val {
                    Some(val) => val.clone(),
                    None => step_const(b, g, mesh, &coord, &mut consts, *v)?,
                });
            }
            lower_op(b, g, op, &args, &results)
        };
        let names = lower_one(&mut b).map_err(|e| op_error(g, op, e))?;
        if let Some(p) = piece {
            let name = names.into_iter().next().ok_or_else(|| {
                op_error(g, op, LowerError("a call of one result made none".into()))
            })?;
            buffers.insert(
                p.concat,
                Val {
                    name,
                    ty: p.dest.ty.clone(),
                },
            );
            continue;
        }
        for ((&r, name), ty) in data.results.iter().zip(names).zip(results) {
            env.insert(r, Val { name, ty });
        }
    }
    // Every read of donated state is above: its next value goes into its buffer.
    for &(x, n) in &st.donated {
        let k =
            st.inputs.iter().position(|&v| v == x).ok_or_else(|| {
                LowerError(format!("donated state {x} is not an input of the step"))
            })?;
        let val = &env[&n];
        b.line(format!(
            "bufferization.materialize_in_destination {} in restrict writable %arg{k}_buf : ({}, {}) -> ()",
            val.name,
            tensor_ty(&val.ty)?,
            memref_ty(&val.ty)?
        ));
    }
    let mut rets = Vec::new();
    let mut ret_tys = Vec::new();
    for &v in &st.outputs {
        let val = &env[&v];
        rets.push(val.name.clone());
        ret_tys.push(tensor_ty(&val.ty)?);
    }
    let mut s = String::new();
    let (visibility, attrs) = match form {
        Form::Part => ("private ", kernel::ATTRIBUTES),
        _ => ("", "llvm.emit_c_interface"),
    };
    let _ = writeln!(
        s,
        "  func.func {visibility}@{name}({}) -> ({}) attributes {{{attrs}}} {{",
        params.join(", "),
        ret_tys.join(", ")
    );
    for l in b.into_lines() {
        let _ = writeln!(s, "  {l}");
    }
    if rets.is_empty() {
        let _ = writeln!(s, "    return");
    } else {
        let _ = writeln!(s, "    return {} : {}", rets.join(", "), ret_tys.join(", "));
    }
    s.push_str("  }\n");
    Ok((s, used))
}

/// The types of `values` in a function of a step: each device's block on a mesh.
fn local_types(g: &Graph, mesh: Option<&Mesh>, values: &[ValueId]) -> LResult<Vec<TensorType>> {
    values
        .iter()
        .map(|&r| match mesh {
            Some(m) => spmd::local_type(m, &spmd::sharding_of(g, r), g.ty(r)),
            None => Ok(g.ty(r).clone()),
        })
        .collect()
}

/// The buffer type of a static tensor type (`memref<2x3xf32>`).
fn memref_ty(t: &TensorType) -> LResult<String> {
    Ok(format!("memref{}", &tensor_ty(t)?["tensor".len()..]))
}

/// A small constant as `arith.constant`.
fn inline_const(b: &mut Body, g: &Graph, c: ConstId) -> LResult<Val> {
    let k = g.constant(c);
    let ty = k.ty.clone();
    let t = tensor_ty(&ty)?;
    let lit = dense_literal(&ty, &k.data)?;
    let name = b.assign(format!("arith.constant {lit} : {t}"));
    Ok(Val { name, ty })
}

/// The one number a constant operand holds in every element (`f32` or `f64`), if it is
/// a constant that does.
fn splat_value(g: &Graph, v: ValueId) -> Option<f64> {
    let k = g.constant(is_const(g, v)?);
    let width = match k.ty.elem {
        ElemType::F32 => 4,
        ElemType::F64 => 8,
        _ => return None,
    };
    let first = k.data.get(..width)?;
    if !k.data.len().is_multiple_of(width) || !k.data.chunks_exact(width).all(|c| c == first) {
        return None;
    }
    Some(match first.try_into() {
        Ok(b4) => f64::from(f32::from_le_bytes(b4)),
        Err(_) => f64::from_le_bytes(first.try_into().ok()?),
    })
}

/// A small constant operand `v` written in the step once (cut to the device's block in a
/// mesh step), and its value.
fn step_const(
    b: &mut Body,
    g: &Graph,
    mesh: Option<&Mesh>,
    coord: &str,
    consts: &mut BTreeMap<ValueId, Val>,
    v: ValueId,
) -> LResult<Val> {
    if let Some(val) = consts.get(&v) {
        return Ok(val.clone());
    }
    let c = is_const(g, v).ok_or_else(|| LowerError(format!("value {v} is not a constant")))?;
    let whole = inline_const(b, g, c)?;
    let val = match mesh {
        Some(m) => spmd::slice_in_function(b, m, &spmd::sharding_of(g, v), &whole, coord)?,
        None => whole,
    };
    consts.insert(v, val.clone());
    Ok(val)
}

/// The zero of an element type as a `dense<...>` splat literal.
pub fn zero_literal(e: tessera_ir::ElemType) -> String {
    body::scalar_literal(e, 0.0)
}

/// `dense<...>` for raw little-endian data: hex for numbers (exact), a nested list for bool.
pub fn dense_literal(ty: &TensorType, data: &[u8]) -> LResult<String> {
    let d = dims(ty)?;
    let n: u64 = d.iter().product();
    if n == 0 {
        return Ok("dense<>".to_string());
    }
    if ty.elem == tessera_ir::ElemType::Bool {
        fn nest(d: &[u64], data: &[u8], at: &mut usize, out: &mut String) {
            if d.is_empty() {
                out.push_str(if data[*at] != 0 { "true" } else { "false" });
                *at += 1;
                return;
            }
            out.push('[');
            for i in 0..d[0] {
                if i > 0 {
                    out.push_str(", ");
                }
                nest(&d[1..], data, at, out);
            }
            out.push(']');
        }
        let mut out = String::from("dense<");
        let mut at = 0;
        nest(&d, data, &mut at, &mut out);
        out.push('>');
        return Ok(out);
    }
    let mut hex = String::with_capacity(data.len() * 2 + 10);
    hex.push_str("dense<\"0x");
    for byte in data {
        let _ = write!(hex, "{byte:02X}");
    }
    hex.push_str("\">");
    Ok(hex)
}

/// Lowers one op; returns the SSA names of its results.
/// Lowers one op, its MLIR ops located at its model node (`loc("<node>")`).
fn lower_op(
    b: &mut Body,
    g: &Graph,
    op: OpId,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    b.with_loc(g.op(op).loc.as_deref(), |b| {
        lower_op_code(b, g, op, args, results)
    })
}

/// The scalar code of an elementwise op ([`joins_producer`]) on its operands' scalars `s`
/// (of element types `elems`), giving an `out` scalar; `exponent`, a `pow`'s constant
/// exponent, when it is one ([`splat_value`]): small whole powers are products.
fn scalar_code(
    b: &mut Body,
    op: &Op,
    elems: &[ElemType],
    out: ElemType,
    s: &[String],
    exponent: Option<f64>,
) -> LResult<String> {
    match op {
        Op::Binary(tessera_ir::BinaryOp::Pow)
            if let Some(n) = exponent.and_then(elementwise::small_power) =>
        {
            elementwise::power(b, elems[0], &s[0], n)
        }
        Op::Unary(u) => elementwise::unary(b, u, elems[0], &s[0]),
        Op::Binary(bo) => elementwise::binary(b, bo, elems[0], &s[0], &s[1]),
        Op::Select => Ok(elementwise::pick(b, &s[0], &s[1], &s[2], out)),
        Op::Cast { to } => Ok(elementwise::cast(b, elems[0], *to, &s[0])),
        Op::Clip { min, max } => Ok(elementwise::clip(b, out, &s[0], *min, *max)),
        other => body::err(format!("{} is not elementwise", other.name())),
    }
}

/// [`lower_op`]'s code, op by op.
fn lower_op_code(
    b: &mut Body,
    g: &Graph,
    op: OpId,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    let data = g.op(op);
    let out = &results[0];
    let one = |r: LResult<String>| r.map(|n| vec![n]);
    match &data.op {
        Op::Const(_) => body::err("constants are materialized where used"),
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast { .. } | Op::Clip { .. } => {
            let ins: Vec<&Val> = args.iter().collect();
            let elems: Vec<ElemType> = args.iter().map(|a| a.ty.elem).collect();
            let exponent = data.operands.get(1).and_then(|&v| splat_value(g, v));
            one(b.elementwise(&ins, out, |b, s| {
                scalar_code(b, &data.op, &elems, out.elem, s, exponent)
            }))
        }
        Op::Transfer { .. }
        | Op::AllReduce { .. }
        | Op::AllGather { .. }
        | Op::ReduceScatter { .. }
        | Op::AllToAll { .. } => {
            // Global view: the identity on the logical tensor (the move is the manifest's).
            Ok(vec![args[0].name.clone()])
        }
        Op::AllSlice { .. } => Err(LowerError("all-slice lowers only in a mesh step".into())),
        Op::Dropout { .. } => {
            // Inference semantics: the identity and an all-true mask.
            let ty = tensor_ty(&results[1])?;
            let mask = b.assign(format!("arith.constant dense<true> : {ty}"));
            Ok(vec![args[0].name.clone(), mask])
        }
        Op::Shape { .. } | Op::Size | Op::Fill { .. } => {
            // Static shapes make these constants: evaluate them now.
            let zeros: Vec<tessera_ir::Tensor> = args
                .iter()
                .map(|a| {
                    let d: Vec<usize> = dims(&a.ty)?.iter().map(|&x| x as usize).collect();
                    tessera_ir::Tensor::zeros(a.ty.elem, &d)
                        .map_err(|e| body::LowerError(e.to_string()))
                })
                .collect::<LResult<_>>()?;
            let refs: Vec<&tessera_ir::Tensor> = zeros.iter().collect();
            let vals = tessera_ir::interp::eval_op(&data.op, &refs)
                .map_err(|e| body::LowerError(e.to_string()))?;
            let mut names = Vec::new();
            for (v, t) in vals.iter().zip(results) {
                let lit = dense_literal(t, &v.to_le_bytes())?;
                names.push(b.assign(format!("arith.constant {lit} : {}", tensor_ty(t)?)));
            }
            Ok(names)
        }
        Op::MatMul
        | Op::Gemm { .. }
        | Op::Conv(_)
        | Op::ConvTranspose { .. }
        | Op::Einsum { .. } => {
            // A weight packed into panels arrives with one axis more than its operand.
            let panels = matches!(data.op, Op::MatMul | Op::Gemm { .. })
                && args.get(1).is_some_and(|a| a.ty.rank() == 3)
                && data.operands.get(1).is_some_and(|&v| g.ty(v).rank() == 2);
            linalg::lower(b, &data.op, args, results, panels)
        }
        Op::Reduce { .. }
        | Op::ArgReduce { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::CumSum { .. }
        | Op::TopK { .. } => reduce::lower(b, &data.op, args, results),
        Op::LayerNorm { .. }
        | Op::BatchNorm { .. }
        | Op::InstanceNorm { .. }
        | Op::Lrn { .. }
        | Op::Pool(_) => nn::lower(b, &data.op, args, results),
        Op::Resize { .. } => resize::lower(b, &data.op, args, results),
        Op::Gather { .. }
        | Op::GatherElements { .. }
        | Op::GatherNd { .. }
        | Op::ScatterElements { .. }
        | Op::ScatterNd { .. }
        | Op::Range { .. }
        | Op::RandomUniform { .. } => index::lower(b, &data.op, args, results),
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Expand { .. }
        | Op::Concat { .. }
        | Op::Split { .. }
        | Op::Slice { .. }
        | Op::Pad { .. }
        | Op::Tile { .. }
        | Op::Trilu { .. }
        | Op::DepthToSpace { .. }
        | Op::SpaceToDepth { .. } => shape::lower(b, &data.op, args, results),
        Op::If {
            then_branch,
            else_branch,
        } => region::lower_if(b, then_branch, else_branch, args, results),
        Op::Loop { carried, body, .. } => region::lower_loop(b, *carried, body, args, results),
        Op::Scan(s) => region::lower_scan(b, s, args, results),
    }
}

impl Program {
    /// The weights as tensors, by name.
    pub fn weight_tensors(&self) -> Result<BTreeMap<String, tessera_ir::Tensor>, LowerError> {
        self.weights
            .iter()
            .map(|(n, (ty, data))| {
                tessera_ir::Tensor::from_typed_le_bytes(ty, data)
                    .map(|t| (n.clone(), t))
                    .map_err(|e| LowerError(format!("weight {n}: {e}")))
            })
            .collect()
    }

    /// Device name to module text.
    pub fn module_map(&self) -> BTreeMap<String, String> {
        self.modules.iter().cloned().collect()
    }
}
