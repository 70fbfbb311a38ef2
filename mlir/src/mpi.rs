//! `--emit mpi`: one native executable for a multi-device program, run by `mpirun -np K`.
//!
//! Rank `r` runs the `r`-th device that has work (the host always has a rank: it reads the
//! inputs and writes the outputs). Every step function of every device goes into one MLIR
//! module, next to one `@rank<r>` function per rank that calls its device's steps in the
//! manifest's order and moves tensors with the MPI dialect's blocking `mpi.send` / `mpi.recv`
//! on the cut edges. All ranks walk the same global order (inputs first, then step by step:
//! the producer sends each result to every rank that needs it, in rank order, right after
//! the step; the receivers receive it at that same position), so every send meets its
//! receive and the program cannot deadlock. Each MPI operation is a call of a private
//! function per operation and message type (`MpiCalls`): the module is bufferized and its
//! buffers freed ([`pipelines::CPU_MPI_BUFFERS`], then
//! [`crate::dealloc::free_after_last_use`]: each right after its last use) while those
//! functions are only declared, since buffer deallocation cannot take MPI's ops; then they
//! get their bodies ([`Mlir::define_functions`]) and the module goes on to LLVM IR
//! ([`pipelines::CPU_MPI_LOWER`], the MPI dialect lowered for MPICH, named by the
//! `dlti.map` module attribute), in-process. `program.mlir` is the module with those
//! functions defined. clang-22 compiles it with a generated C `main` (MPI init, reading the
//! inputs' `.npy` files and the weights file, writing the outputs as `.npy`) and links
//! MPICH. The C main allocates the program's buffers (MLIR's generic allocation functions)
//! and counts them: each rank reports on stderr the most bytes its buffers held at once,
//! what they hold at exit (nothing, unless a buffer leaks) and how many it allocated.
//!
//! Usage: `mpirun -np K DIR/program INPUT.npy... OUTDIR` (inputs in the manifest's order; the
//! weights are read from `weights.safetensors` next to the program). The host rank makes
//! OUTDIR (and its missing parents) first, and writes `OUTDIR/<name>.npy` for every output, under the output's name made file-safe
//! ([`tessera_ir::names::file_stems`], as `tessera run --output-dir` names them).
//!
//! A training step ([`Training`]) runs as `mpirun -np K DIR/program --input NAME=FILE.npy...
//! --steps N --output-dir OUT`: every rank runs its part of N steps; the host reads the
//! batches (or stacks of them). Each state slot stays from one step to the next on the ranks
//! whose steps read it (the host when none does): each reads its initial value, takes it as
//! an argument of its rank function and returns its next value (sent to it in the global
//! order by the rank that makes it, when that is another one), copied into the slot's buffer
//! after the step. After the last step the host receives the state it does not hold and
//! writes `loss.csv`, `weights.safetensors`, `state.safetensors` and `model.onnx` from
//! templates the compile wrote next to the program.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use tessera_ir::{ElemType, TensorType};

use crate::lower::{Program, tensor_ty};
use crate::manifest::Arg;
use crate::run::parse_type;
use crate::{Error, Mlir, PipelineOptions, pipelines};

fn err(message: impl Into<String>) -> Error {
    Error::Run {
        message: message.into(),
    }
}

/// The ranks: devices with work, and the host, in the program's device order.
pub fn ranks(program: &Program) -> Vec<String> {
    let m = &program.manifest;
    let mut out: Vec<String> = m.devices.iter().map(|d| d.name.clone()).collect();
    if !out.contains(&m.host) {
        out.insert(0, m.host.clone());
    }
    out
}

/// Where a value lives: a graph input, a weight, or a step's result.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Input(String),
    Weight(String),
    Step(usize, usize),
}

/// Where argument `a` comes from on device `dev` (a per-device weight is that device's
/// block); `None` for the mesh index, which is a constant.
fn key(a: &Arg, dev: &str) -> Option<Key> {
    Some(match a {
        Arg::Input { input, .. } => Key::Input(input.clone()),
        Arg::Weight {
            weight,
            per_device: true,
            ..
        } => Key::Weight(format!("{weight}@{dev}")),
        Arg::Weight { weight, .. } => Key::Weight(weight.clone()),
        Arg::Step { step, result, .. } => Key::Step(*step, *result),
        Arg::MeshIndex { .. } => return None,
    })
}

/// The element type a tensor travels as (MPI has no bool or 16-bit float type here).
fn wire(e: ElemType) -> ElemType {
    match e {
        ElemType::Bool => ElemType::I8,
        ElemType::F16 | ElemType::BF16 => ElemType::I16,
        e => e,
    }
}

/// `v`, a tensor of type `t` with extents `d`, as the rank-1 tensor type `ft` of as many
/// elements (code appended to `b`; `name` names the result when one is needed). LLVM 22's
/// MPI lowering counts only the first extent of a memref, so messages travel flat.
fn to_flat(b: &mut String, name: String, v: String, d: &[u64], t: &str, ft: &str) -> String {
    let op = match d.len() {
        1 => return v,
        0 => format!("tensor.expand_shape {v} [] output_shape [1] : {t} into {ft}"),
        _ => format!("tensor.collapse_shape {v} {} : {t} into {ft}", all_dims(d)),
    };
    let _ = writeln!(b, "    {name} = {op}");
    name
}

/// The inverse of [`to_flat`]: `v` of the rank-1 type `ft` as type `t` with extents `d`.
fn from_flat(b: &mut String, name: String, v: String, d: &[u64], t: &str, ft: &str) -> String {
    let op = match d.len() {
        1 => return v,
        0 => format!("tensor.collapse_shape {v} [] : {ft} into {t}"),
        _ => {
            let dims: Vec<String> = d.iter().map(u64::to_string).collect();
            format!(
                "tensor.expand_shape {v} {} output_shape [{}] : {ft} into {t}",
                all_dims(d),
                dims.join(", ")
            )
        }
    };
    let _ = writeln!(b, "    {name} = {op}");
    name
}

/// The reassociation of every axis of `d` into one: `[[0, 1, ...]]`.
fn all_dims(d: &[u64]) -> String {
    let axes: Vec<String> = (0..d.len()).map(|i| i.to_string()).collect();
    format!("[[{}]]", axes.join(", "))
}

/// An MPI operation of the rank functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum MpiOp {
    /// `(buffer, tag, destination)`.
    Send,
    /// `(buffer, tag, source)`.
    Recv,
    /// `(send buffer, receive buffer)`, summed over the world's communicator.
    AllReduceSum,
}

/// The MPI operations the rank functions call, one private function per operation and
/// message type (messages are flat: `memref<Nx...>`). The functions are declared while the
/// module is bufferized and deallocated ([`pipelines::CPU_MPI_BUFFERS`]: MPI's ops declare
/// no memory effects, which buffer deallocation cannot take), and defined, with the MPI
/// dialect's op on the world's communicator, before it lowers to LLVM.
#[derive(Default)]
struct MpiCalls(BTreeMap<String, (MpiOp, String)>);

impl MpiOp {
    /// The function's name stem, its parameters (names and types, `mt` the message's
    /// memref type) and its MPI op.
    fn signature(self, mt: &str) -> (&'static str, Vec<(&'static str, String)>, String) {
        let i32 = || "i32".to_string();
        match self {
            MpiOp::Send => (
                "send",
                vec![("%buf", mt.to_string()), ("%tag", i32()), ("%peer", i32())],
                format!("mpi.send(%buf, %tag, %peer, %comm) : {mt}, i32, i32"),
            ),
            MpiOp::Recv => (
                "recv",
                vec![("%buf", mt.to_string()), ("%tag", i32()), ("%peer", i32())],
                format!("mpi.recv(%buf, %tag, %peer, %comm) : {mt}, i32, i32"),
            ),
            MpiOp::AllReduceSum => (
                "allreduce_sum",
                vec![("%in", mt.to_string()), ("%out", mt.to_string())],
                format!("mpi.allreduce(%in, %out, MPI_SUM, %comm) : {mt}, {mt}"),
            ),
        }
    }
}

impl MpiCalls {
    /// Appends to `b` a call of `op` on `args` (`mt` the message's memref type).
    fn call(&mut self, b: &mut String, op: MpiOp, args: &[&str], mt: &str) {
        let (kind, params, _) = op.signature(mt);
        let shape: String = mt
            .trim_start_matches("memref<")
            .trim_end_matches('>')
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let name = format!("tessera_mpi_{kind}_{shape}");
        let tys: Vec<&str> = params.iter().map(|(_, t)| t.as_str()).collect();
        let _ = writeln!(
            b,
            "    func.call @{name}({}) : ({}) -> ()",
            args.join(", "),
            tys.join(", ")
        );
        self.0.insert(name, (op, mt.to_string()));
    }

    /// The functions' declarations (`defined`: their definitions), module-level text.
    fn functions(&self, defined: bool) -> String {
        let mut s = String::new();
        for (name, (op, mt)) in &self.0 {
            let (_, params, body) = op.signature(mt);
            if defined {
                let params: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
                let _ = writeln!(
                    s,
                    "  func.func private @{name}({}) {{\n    %comm = mpi.comm_world : !mpi.comm\n    {body}\n    return\n  }}",
                    params.join(", ")
                );
            } else {
                let tys: Vec<&str> = params.iter().map(|(_, t)| t.as_str()).collect();
                let _ = writeln!(s, "  func.func private @{name}({})", tys.join(", "));
            }
        }
        s
    }
}

struct RankFn {
    text: String,
    /// Weight names, then input names (the host's, and a training step's state on the ranks
    /// that hold it), as the function's arguments.
    weights: Vec<(String, TensorType)>,
    inputs: Vec<(String, TensorType)>,
    /// Output types: the host's outputs, and on a rank that holds state its next values.
    outputs: Vec<TensorType>,
    /// Which of the manifest's outputs each of `outputs` is.
    returns: Vec<usize>,
}

/// The `@rank<r>` functions.
fn rank_functions(
    program: &Program,
    ranks: &[String],
    training: Option<&Training>,
) -> Result<(Vec<RankFn>, MpiCalls), Error> {
    let m = &program.manifest;
    let host = &m.host;
    let rank_of = |d: &str| ranks.iter().position(|x| x == d);
    let host_rank = rank_of(host).ok_or_else(|| err("the host has no rank"))?;
    // What each device needs: args of its steps, and (host) the outputs. A collective's
    // argument is each mesh device's own partial, never moved.
    let mut needs: BTreeMap<&str, BTreeSet<Key>> = BTreeMap::new();
    let mut types: BTreeMap<Key, TensorType> = BTreeMap::new();
    for st in &m.steps {
        for d in st.runners() {
            for a in &st.args {
                let Some(k) = key(a, d) else { continue };
                types.entry(k.clone()).or_insert(parse_type(a.ty())?);
                if st.collective.is_none() {
                    needs.entry(d).or_default().insert(k);
                }
            }
        }
    }
    // A training step's state stays on the ranks that read it, from one step to the next
    // (on the host when no rank does): each takes it as an argument and returns its next
    // value, sent to it by the rank that makes it when that is another one.
    let holders = state_holders(m, ranks, training, &needs, host_rank);
    // The ranks that hold slot `j`'s value, the host alone for what is no state.
    let holding = |j: Option<usize>| j.map_or_else(|| vec![host_rank], |j| holders[j].clone());
    let owners = |oi: usize| -> Vec<usize> {
        holding(training.and_then(|tr| tr.slots.iter().position(|s| s.output == oi)))
    };
    for (oi, o) in m.outputs.iter().enumerate() {
        let Some(k) = key(&o.source, host) else {
            continue;
        };
        types.entry(k.clone()).or_insert(parse_type(o.source.ty())?);
        for r in owners(oi) {
            needs
                .entry(ranks[r].as_str())
                .or_default()
                .insert(k.clone());
        }
    }
    for st in &m.steps {
        for (k, r) in st.results.iter().enumerate() {
            types
                .entry(Key::Step(st.id, k))
                .or_insert(parse_type(&r.ty)?);
        }
    }
    let mut tag = 0u32;
    let mut bodies: Vec<String> = vec![String::new(); ranks.len()];
    let mut envs: Vec<BTreeMap<Key, String>> = vec![BTreeMap::new(); ranks.len()];
    let mut next = vec![0usize; ranks.len()];
    let mut fresh = |r: usize| {
        next[r] += 1;
        format!("%t{}", next[r])
    };
    let mut fns: Vec<RankFn> = ranks
        .iter()
        .map(|_| RankFn {
            text: String::new(),
            weights: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            returns: Vec::new(),
        })
        .collect();
    // Arguments: the weights each rank needs; the host's inputs.
    for (r, d) in ranks.iter().enumerate() {
        for k in needs.get(d.as_str()).into_iter().flatten() {
            if let Key::Weight(w) = k {
                let ty = types[k].clone();
                let name = format!("%w{}", fns[r].weights.len());
                envs[r].insert(k.clone(), name);
                fns[r].weights.push((w.clone(), ty));
            }
        }
    }
    for (ii, i) in m.inputs.iter().enumerate() {
        // A state held split: each holder's block (the type its steps read).
        let ty = match (&i.held, types.get(&Key::Input(i.name.clone()))) {
            (Some(_), Some(t)) => t.clone(),
            _ => parse_type(&i.ty)?,
        };
        for r in holding(training.and_then(|tr| tr.slots.iter().position(|s| s.input == ii))) {
            let name = format!("%in{}", fns[r].inputs.len());
            envs[r].insert(Key::Input(i.name.clone()), name);
            fns[r].inputs.push((i.name.clone(), ty.clone()));
        }
    }
    // Moves a value from rank `src` to rank `dst` (both emit their half).
    let mut calls = MpiCalls::default();
    let mut transfer = |bodies: &mut Vec<String>,
                        envs: &mut Vec<BTreeMap<Key, String>>,
                        calls: &mut MpiCalls,
                        fresh: &mut dyn FnMut(usize) -> String,
                        k: &Key,
                        src: usize,
                        dst: usize|
     -> Result<(), Error> {
        let ty = &types[k];
        let w = wire(ty.elem);
        let d = ty.static_dims().unwrap_or_default();
        let n: u64 = d.iter().product();
        // Messages travel flat (see `to_flat`).
        let wty = ty.with_elem(w);
        let flat = TensorType::fixed(w, &[n]);
        let tt = tensor_ty(ty).map_err(|e| err(e.0))?;
        let wt = tensor_ty(&wty).map_err(|e| err(e.0))?;
        let ft = tensor_ty(&flat).map_err(|e| err(e.0))?;
        let mt = ft.replacen("tensor", "memref", 1);
        let t = tag;
        tag += 1;
        // Sender: convert the element type, flatten, send.
        let v = envs[src][k].clone();
        let b = &mut bodies[src];
        let conv = if w == ty.elem {
            v
        } else {
            let c = fresh(src);
            let op = if ty.elem == ElemType::Bool {
                "arith.extui"
            } else {
                "arith.bitcast"
            };
            let _ = writeln!(b, "    {c} = {op} {v} : {tt} to {wt}");
            c
        };
        let sent = to_flat(b, fresh(src), conv, &d, &wt, &ft);
        let mb = fresh(src);
        let tg = fresh(src);
        let ds = fresh(src);
        let _ = writeln!(
            b,
            "    {mb} = bufferization.to_buffer {sent} read_only : {ft} to {mt}"
        );
        let _ = writeln!(b, "    {tg} = arith.constant {t} : i32");
        let _ = writeln!(b, "    {ds} = arith.constant {dst} : i32");
        calls.call(b, MpiOp::Send, &[&mb, &tg, &ds], &mt);
        // Receiver: receive, reshape, convert back.
        let b = &mut bodies[dst];
        let buf = fresh(dst);
        let tg = fresh(dst);
        let sr = fresh(dst);
        let got = fresh(dst);
        let _ = writeln!(b, "    {buf} = memref.alloc() : {mt}");
        let _ = writeln!(b, "    {tg} = arith.constant {t} : i32");
        let _ = writeln!(b, "    {sr} = arith.constant {src} : i32");
        calls.call(b, MpiOp::Recv, &[&buf, &tg, &sr], &mt);
        let _ = writeln!(
            b,
            "    {got} = bufferization.to_tensor {buf} restrict : {mt} to {ft}"
        );
        let shaped = from_flat(b, fresh(dst), got, &d, &wt, &ft);
        let value = if w == ty.elem {
            shaped
        } else {
            let c = fresh(dst);
            let op = if ty.elem == ElemType::Bool {
                "arith.trunci"
            } else {
                "arith.bitcast"
            };
            let _ = writeln!(b, "    {c} = {op} {shaped} : {wt} to {tt}");
            c
        };
        envs[dst].insert(k.clone(), value);
        Ok(())
    };
    // Inputs the other ranks need, from the host.
    for i in &m.inputs {
        let k = Key::Input(i.name.clone());
        for (r, d) in ranks.iter().enumerate() {
            if !envs[r].contains_key(&k) && needs.get(d.as_str()).is_some_and(|n| n.contains(&k)) {
                transfer(
                    &mut bodies,
                    &mut envs,
                    &mut calls,
                    &mut fresh,
                    &k,
                    host_rank,
                    r,
                )?;
            }
        }
    }
    for st in &m.steps {
        if let Some(kind) = &st.collective {
            // Every rank takes part (the all-reduce is over the world's communicator): an
            // all-reduce sums the mesh devices' partials (the other ranks add
            // zeros); an all-gather is the all-reduce of every device's block placed in a
            // zero tensor of the whole shape. Every rank then holds the result. A
            // reduce-scatter is an all-reduce and an all-to-all an all-gather here: the
            // consumers cut their blocks from the whole result.
            let Some(Arg::Step { step, result, .. }) = st.args.first() else {
                return Err(err(format!(
                    "step {}: a collective without its argument",
                    st.id
                )));
            };
            let k_in = Key::Step(*step, *result);
            let part_ty = types[&k_in].clone();
            let ty = parse_type(&st.results[0].ty)?;
            // MLIR 22's MPI lowering has no MPI datatype for these (it passes a null one).
            if matches!(ty.elem, ElemType::Bool | ElemType::F16 | ElemType::BF16) {
                return Err(err(format!(
                    "step {}: a {kind} of {} tensors does not lower to MPI",
                    st.id, ty.elem
                )));
            }
            let tt = tensor_ty(&ty).map_err(|e| err(e.0))?;
            let pt = tensor_ty(&part_ty).map_err(|e| err(e.0))?;
            let dims = ty.static_dims().unwrap_or_default();
            let ft = tensor_ty(&TensorType::fixed(ty.elem, &[dims.iter().product()]))
                .map_err(|e| err(e.0))?;
            let mt = ft.replacen("tensor", "memref", 1);
            let mm = m.mesh_of(&st.device).ok_or_else(|| {
                err(format!(
                    "step {}: no mesh {} in the manifest",
                    st.id, st.device
                ))
            })?;
            let mesh = mm.to_ir();
            let zero = crate::lower::zero_literal(ty.elem);
            for r in 0..ranks.len() {
                let mine = match (envs[r].get(&k_in).cloned(), kind.as_str()) {
                    (Some(v), "all-gather" | "all-to-all") => {
                        let mi = mesh
                            .devices
                            .iter()
                            .position(|d| *d == ranks[r])
                            .ok_or_else(|| {
                                err(format!("step {}: {} is not on the mesh", st.id, ranks[r]))
                            })?;
                        let sharding = tessera_ir::Sharding {
                            axes: st.sharding.clone().unwrap_or_default(),
                        };
                        let offs = crate::lower::spmd::block_offsets(&mesh, &sharding, &ty, mi)
                            .map_err(|e| err(e.0))?;
                        let sizes = part_ty.static_dims().unwrap_or_default();
                        let z = fresh(r);
                        let p = fresh(r);
                        let _ =
                            writeln!(bodies[r], "    {z} = arith.constant dense<{zero}> : {tt}");
                        let _ = writeln!(
                            bodies[r],
                            "    {p} = tensor.insert_slice {v} into {z}[{}] [{}] [{}] : {pt} into {tt}",
                            offs.iter()
                                .map(u64::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            sizes
                                .iter()
                                .map(u64::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            vec!["1"; sizes.len()].join(", ")
                        );
                        p
                    }
                    (Some(v), _) => v,
                    (None, _) => {
                        let z = fresh(r);
                        let _ =
                            writeln!(bodies[r], "    {z} = arith.constant dense<{zero}> : {tt}");
                        z
                    }
                };
                // MPI_Allreduce on the world's communicator, straight from the MPI dialect
                // (MLIR 22's `shard.all_reduce` lowered through a fresh `MPI_Comm_split` per
                // call, never freed: a training run aborted after 2048 collectives).
                // The message flat, as every message travels (`to_flat`).
                let flat = to_flat(&mut bodies[r], fresh(r), mine, &dims, &tt, &ft);
                let (mb, buf, got) = (fresh(r), fresh(r), fresh(r));
                let _ = writeln!(
                    bodies[r],
                    "    {mb} = bufferization.to_buffer {flat} read_only : {ft} to {mt}"
                );
                let _ = writeln!(bodies[r], "    {buf} = memref.alloc() : {mt}");
                calls.call(&mut bodies[r], MpiOp::AllReduceSum, &[&mb, &buf], &mt);
                let _ = writeln!(
                    bodies[r],
                    "    {got} = bufferization.to_tensor {buf} restrict : {mt} to {ft}"
                );
                let out = from_flat(&mut bodies[r], fresh(r), got, &dims, &tt, &ft);
                envs[r].insert(Key::Step(st.id, 0), out);
            }
            continue;
        }
        let devs = st.runners();
        let first_rank = rank_of(devs[0]).ok_or_else(|| err(format!("{} has no rank", devs[0])))?;
        let res_tys: Vec<TensorType> = st
            .results
            .iter()
            .map(|x| parse_type(&x.ty))
            .collect::<Result<_, _>>()?;
        let res_s: Vec<String> = res_tys
            .iter()
            .map(|t| tensor_ty(t).map_err(|e| err(e.0)))
            .collect::<Result<_, _>>()?;
        for (mi, d) in devs.iter().enumerate() {
            let r = rank_of(d).ok_or_else(|| err(format!("{d} has no rank")))?;
            let mut args = Vec::new();
            let mut arg_tys = Vec::new();
            for a in &st.args {
                match key(a, d) {
                    None => {
                        let c = fresh(r);
                        let _ = writeln!(
                            bodies[r],
                            "    {c} = arith.constant dense<{mi}> : tensor<i64>"
                        );
                        args.push(c);
                        arg_tys.push("tensor<i64>".to_string());
                    }
                    Some(k) => {
                        let v = envs[r].get(&k).cloned().ok_or_else(|| {
                            err(format!("step {} on {d}: {k:?} is not there", st.id))
                        })?;
                        args.push(v);
                        arg_tys.push(tensor_ty(&types[&k]).map_err(|e| err(e.0))?);
                    }
                }
            }
            let call = format!(
                "call @{}({}) : ({}) -> ({})",
                st.function,
                args.join(", "),
                arg_tys.join(", "),
                res_s.join(", ")
            );
            let b_res = fresh(r);
            match res_tys.len() {
                0 => {
                    let _ = writeln!(bodies[r], "    {call}");
                }
                1 => {
                    let _ = writeln!(bodies[r], "    {b_res} = {call}");
                    envs[r].insert(Key::Step(st.id, 0), b_res.clone());
                }
                n => {
                    let _ = writeln!(bodies[r], "    {b_res}:{n} = {call}");
                    for k in 0..n {
                        envs[r].insert(Key::Step(st.id, k), format!("{b_res}#{k}"));
                    }
                }
            }
        }
        // The results other ranks need come from the step's first device (on a mesh, every
        // device holds them: values leaving a mesh are whole).
        for (dst, d) in ranks.iter().enumerate() {
            for k in 0..res_tys.len() {
                let key = Key::Step(st.id, k);
                if envs[dst].contains_key(&key) {
                    continue;
                }
                if needs.get(d.as_str()).is_some_and(|n| n.contains(&key)) {
                    transfer(
                        &mut bodies,
                        &mut envs,
                        &mut calls,
                        &mut fresh,
                        &key,
                        first_rank,
                        dst,
                    )?;
                }
            }
        }
    }
    // Each rank's results: the host's outputs, the next values of the state it holds.
    let mut rets: Vec<Vec<String>> = vec![Vec::new(); ranks.len()];
    let mut ret_tys: Vec<Vec<String>> = vec![Vec::new(); ranks.len()];
    for (oi, o) in m.outputs.iter().enumerate() {
        let k = key(&o.source, host).ok_or_else(|| err(format!("output {}", o.name)))?;
        for r in owners(oi) {
            let v = envs[r]
                .get(&k)
                .cloned()
                .ok_or_else(|| err(format!("output {} is not on {}", o.name, ranks[r])))?;
            rets[r].push(v);
            let ty = types[&k].clone();
            ret_tys[r].push(tensor_ty(&ty).map_err(|e| err(e.0))?);
            fns[r].outputs.push(ty);
            fns[r].returns.push(oi);
        }
    }
    for (r, f) in fns.iter_mut().enumerate() {
        let mut params = Vec::new();
        for (i, (_, t)) in f.weights.iter().enumerate() {
            params.push(format!(
                "%w{i}: {} {{bufferization.writable = false}}",
                tensor_ty(t).map_err(|e| err(e.0))?
            ));
        }
        for (i, (_, t)) in f.inputs.iter().enumerate() {
            params.push(format!(
                "%in{i}: {} {{bufferization.writable = false}}",
                tensor_ty(t).map_err(|e| err(e.0))?
            ));
        }
        let results = ret_tys[r].join(", ");
        let mut s = format!(
            "  func.func @rank{r}({}) -> ({results}) attributes {{llvm.emit_c_interface}} {{\n",
            params.join(", ")
        );
        s.push_str(&bodies[r]);
        if !rets[r].is_empty() {
            let _ = writeln!(
                s,
                "    return {} : {}",
                rets[r].join(", "),
                ret_tys[r].join(", ")
            );
        } else {
            s.push_str("    return\n");
        }
        s.push_str("  }\n");
        f.text = s;
    }
    Ok((fns, calls))
}

/// The ranks that hold each state slot of a training program (none without one): those
/// whose steps read it, or the host when none does.
fn state_holders(
    m: &crate::manifest::Manifest,
    ranks: &[String],
    training: Option<&Training>,
    needs: &BTreeMap<&str, BTreeSet<Key>>,
    host_rank: usize,
) -> Vec<Vec<usize>> {
    let Some(tr) = training else {
        return Vec::new();
    };
    tr.slots
        .iter()
        .map(|s| {
            let k = m.inputs.get(s.input).map(|i| Key::Input(i.name.clone()));
            let mut hs: Vec<usize> = ranks
                .iter()
                .enumerate()
                .filter(|(_, d)| {
                    k.as_ref()
                        .is_some_and(|k| needs.get(d.as_str()).is_some_and(|n| n.contains(k)))
                })
                .map(|(r, _)| r)
                .collect();
            if hs.is_empty() {
                hs.push(host_rank);
            }
            hs
        })
        .collect()
}

/// The MLIR module of the whole MPI program: every device's steps, the rank functions, and
/// the MPI functions they call, declared or (`defined`) with their MPI ops.
fn module(program: &Program, fns: &[RankFn], calls: &MpiCalls, defined: bool) -> String {
    let mut s = String::from(
        "module attributes {dlti.map = #dlti.map<\"MPI:Implementation\" = \"MPICH\">} {\n",
    );
    for text in program.kernels.iter().chain(program.step_texts.values()) {
        s.push_str(text);
    }
    for f in fns {
        s.push_str(&f.text);
    }
    s.push_str(&calls.functions(defined));
    s.push_str("}\n");
    s
}

/// The `.npy` descriptor the C driver reads and writes; it has no raw (`|V2`) bf16.
fn npy_descr(e: ElemType) -> Result<&'static str, Error> {
    match e {
        ElemType::BF16 => Err(err("bf16 inputs and outputs have no .npy type")),
        _ => Ok(e.npy_descr()),
    }
}

fn shape_c(t: &TensorType) -> Vec<u64> {
    t.static_dims().unwrap_or_default()
}

/// Writes a file atomically (ir's writer: a temporary file renamed over it).
fn write_atomically(path: &Path, data: &[u8]) -> Result<(), Error> {
    tessera_ir::text::write_atomically(path, |f| std::io::Write::write_all(f, data))
        .map_err(|e| err(format!("{}: {e}", path.display())))
}

/// The executable's input arguments in its usage line: ` <input>.npy` per graph input.
pub fn input_args(program: &Program) -> String {
    program
        .manifest
        .inputs
        .iter()
        .map(|i| format!(" {}.npy", i.name))
        .collect()
}

/// A training step's program (a graph with state): `--steps N` runs the step N times, each
/// step's next state the next step's state. The files it reads and writes next to the
/// executable are [`TRAIN_STATE`], [`TRAIN_WEIGHTS`] and [`TRAIN_MODEL`], made by the compile:
/// it patches their bytes in place to write its outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Training {
    /// The loss among the graph's outputs.
    pub loss: usize,
    /// The state, in the graph's order.
    pub slots: Vec<TrainSlot>,
    /// Whether [`TRAIN_MODEL`] exists (a step compiled from an ONNX model).
    pub model: bool,
}

/// One state slot of a [`Training`] program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrainSlot {
    /// Its input among the graph's inputs.
    pub input: usize,
    /// The output that holds its next value.
    pub output: usize,
    /// Byte offset and length of its value in [`TRAIN_STATE`] (its initial value, read before
    /// the first step; the written `state.safetensors` holds the last one there).
    pub state: (usize, usize),
    /// For a parameter (a state initialized from a weight), where [`TRAIN_WEIGHTS`] holds it.
    pub weight: Option<(usize, usize)>,
    /// For a parameter, where [`TRAIN_MODEL`] holds its `raw_data`.
    pub model: Option<(usize, usize)>,
}

/// The initial state of a training program, in `tessera train`'s `state.safetensors` format
/// (by each slot's next-value name); the program writes `OUT/state.safetensors` from it.
pub const TRAIN_STATE: &str = "train-state.safetensors";
/// The initial parameters (by weight name): the program writes `OUT/weights.safetensors` from it.
pub const TRAIN_WEIGHTS: &str = "train-weights.safetensors";
/// The source model with `raw_data` initializers: the program writes `OUT/model.onnx` from it.
pub const TRAIN_MODEL: &str = "train-model.onnx";

/// The generated C `main`.
fn main_c(
    program: &Program,
    ranks: &[String],
    fns: &[RankFn],
    weight_offsets: &BTreeMap<String, (usize, usize)>,
    training: Option<&Training>,
) -> Result<String, Error> {
    let mut c = String::from(include_str!("mpi_main.c"));
    let k = ranks.len();
    let _ = writeln!(c, "\n/* ---- generated for this program ---- */");
    for (r, f) in fns.iter().enumerate() {
        let n = usize::from(!f.outputs.is_empty()) + f.weights.len() + f.inputs.len();
        let params = vec!["int64_t *"; n];
        let _ = writeln!(
            c,
            "extern void _mlir_ciface_rank{r}({});",
            if params.is_empty() {
                "void".to_string()
            } else {
                params.join(", ")
            }
        );
    }
    let names: Vec<String> = ranks.to_vec();
    let _ = writeln!(
        c,
        "\nint main(int argc, char **argv) {{\n  int rank = 0, size = 0;\n  MPI_Init(&argc, &argv);\n  MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n  MPI_Comm_size(MPI_COMM_WORLD, &size);\n  if (size != {k}) {{\n    if (rank == 0) fprintf(stderr, \"%s: this program has {k} ranks ({}); run it with mpirun -np {k}\\n\", argv[0]);\n    MPI_Finalize();\n    return 2;\n  }}",
        names.join(", ")
    );
    let ninputs = program.manifest.inputs.len();
    let out_dir = match training {
        None => {
            let _ = writeln!(
                c,
                "  if (argc != {}) {{\n    if (rank == 0) fprintf(stderr, \"usage: mpirun -np {k} %s{} OUTDIR\\n\", argv[0]);\n    MPI_Finalize();\n    return 2;\n  }}",
                ninputs + 2,
                c_text(&input_args(program), true)
            );
            format!("argv[{}]", ninputs + 1)
        }
        Some(tr) => {
            let batch: Vec<String> = batch_inputs(program, tr)
                .map(|i| format!("\"{}\"", c_text(&i.name, false)))
                .collect();
            let nknown = batch.len();
            let known = if batch.is_empty() {
                "\"\"".to_string()
            } else {
                batch.join(", ")
            };
            let _ = writeln!(
                c,
                "  static const char *const known[] = {{{known}}};\n  long steps = 0;\n  long long seed = 0;\n  const char *outdir = NULL;\n  int bad = 0;\n  for (int i = 1; i < argc; i++) {{\n    if (!strcmp(argv[i], \"--steps\") && i + 1 < argc) {{\n      char *end;\n      steps = strtol(argv[++i], &end, 10);\n      bad |= *end != 0 || steps < 1 || steps > 1000000000;\n    }} else if (!strcmp(argv[i], \"--output-dir\") && i + 1 < argc) {{\n      outdir = argv[++i];\n    }} else if (!strcmp(argv[i], \"--seed\") && i + 1 < argc) {{\n      char *end;\n      seed = strtoll(argv[++i], &end, 10);\n      bad |= *end != 0;\n    }} else if (!strcmp(argv[i], \"--input\") && i + 1 < argc && strchr(argv[i + 1], '=')) {{\n      i++;\n      bad |= !known_input(argv, i, known, {nknown}, rank == 0);\n    }} else {{\n      bad = 1;\n    }}\n  }}\n  if (bad || steps < 1 || !outdir) {{\n    if (rank == 0) fprintf(stderr, \"usage: mpirun -np {k} %s{} --steps N --output-dir OUT [--seed N]\\n\", argv[0]);\n    MPI_Finalize();\n    return 2;\n  }}\n  static char state_path[4096], weights_out[4096], model_path[4096], path[4200];\n  beside(argv[0], \"{TRAIN_STATE}\", state_path, sizeof state_path);\n  beside(argv[0], \"{TRAIN_WEIGHTS}\", weights_out, sizeof weights_out);\n  beside(argv[0], \"{TRAIN_MODEL}\", model_path, sizeof model_path);",
                c_text(&train_input_args(program, tr), true)
            );
            "outdir".to_string()
        }
    };
    let _ = writeln!(c, "  const char *weights = weights_path(argv[0]);");
    let host_rank = ranks
        .iter()
        .position(|d| *d == program.manifest.host)
        .ok_or_else(|| err("the host has no rank"))?;
    // The host makes the output directory first, as `tessera train` and `tessera run` do.
    let _ = writeln!(c, "  if (rank == {host_rank}) make_dirs({out_dir});");
    let layouts = training
        .map(|tr| held_layouts(program, ranks, tr))
        .transpose()?
        .unwrap_or_default();
    // Per state slot, the ranks that send it to the host after the last step: the first
    // that holds it, when the host does not; every holder of a block of a state held split.
    let senders: Vec<Vec<usize>> = training
        .map(|tr| {
            tr.slots
                .iter()
                .enumerate()
                .map(|(j, s)| {
                    let name = program.manifest.inputs.get(s.input).map(|i| &i.name);
                    let holds = |f: &RankFn| f.inputs.iter().any(|(n, _)| Some(n) == name);
                    match &layouts[j] {
                        Some(l) => l.blocks.iter().map(|b| b.0).collect(),
                        None if holds(&fns[host_rank]) => Vec::new(),
                        None => fns.iter().position(holds).into_iter().collect(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = writeln!(c, "  switch (rank) {{");
    let input_index = |name: &str| program.manifest.inputs.iter().position(|i| i.name == name);
    // The driver's descriptors index at most 16 dimensions.
    for f in fns {
        let types = f.weights.iter().chain(&f.inputs).map(|(_, t)| t);
        if let Some(t) = types.chain(&f.outputs).find(|t| t.rank() > 16) {
            return Err(err(format!(
                "a tensor of rank {} ({t}): the MPI driver handles rank 16 at most",
                t.rank()
            )));
        }
    }
    for (r, f) in fns.iter().enumerate() {
        let _ = writeln!(c, "  case {r}: {{ /* {} */", ranks[r]);
        let mut args = Vec::new();
        for (i, (w, t)) in f.weights.iter().enumerate() {
            let (off, len) = weight_offsets
                .get(w)
                .copied()
                .ok_or_else(|| err(format!("weight {w} is not in the weights file")))?;
            let d = shape_c(t);
            let _ = writeln!(
                c,
                "    static const int64_t ws{i}[] = {{{}}};\n    int64_t *w{i} = descriptor(read_weight(weights, {off}, {len}), {}, ws{i});",
                dims_list(&d),
                d.len()
            );
            args.push(format!("w{i}"));
        }
        // Each state slot's buffer (the step reads it; its next value is copied in after
        // each step) and a staging buffer (next values may alias the state they replace).
        let mut slot_bufs: Vec<(usize, &TrainSlot, u64)> = Vec::new();
        // Batch inputs read as stacks: (input, bytes of one batch).
        let mut stacks: Vec<(usize, u64)> = Vec::new();
        for (i, (name, t)) in f.inputs.iter().enumerate() {
            let d = shape_c(t);
            let at = input_index(name);
            let slot = training.and_then(|tr| {
                tr.slots
                    .iter()
                    .position(|s| Some(s.input) == at)
                    .map(|j| (j, &tr.slots[j]))
            });
            let clean = c_text(name, false);
            let source = match (training, slot) {
                (_, Some((j, s))) => {
                    let here = t.size_bytes().unwrap_or(0);
                    slot_bufs.push((j, s, here));
                    let block = layouts[j]
                        .as_ref()
                        .and_then(|l| l.blocks.iter().find(|b| b.0 == r).map(|b| (l, b)));
                    match block {
                        // This rank's block of a state held split, cut from the whole.
                        Some((l, (_, offs))) => {
                            let _ = writeln!(
                                c,
                                "    unsigned char *st{j} = xmalloc({here});\n    {{\n      unsigned char *whole = read_weight(state_path, {}, {});\n      static const int64_t wd[] = {{{}}}, bo[] = {{{}}}, bd[] = {{{}}};\n      block_copy(whole, st{j}, {}, wd, bo, bd, {}, 1);\n      free(whole);\n    }}",
                                s.state.0,
                                s.state.1,
                                dims_list(&l.whole),
                                dims_list(offs),
                                dims_list(&d),
                                d.len(),
                                l.esize
                            );
                        }
                        None => {
                            let _ = writeln!(
                                c,
                                "    unsigned char *st{j} = read_weight(state_path, {}, {});",
                                s.state.0, s.state.1
                            );
                        }
                    }
                    let _ = writeln!(c, "    unsigned char *nx{j} = xmalloc({here});");
                    format!("st{j}")
                }
                (Some(_), None) if name == "seed" && t.elem == ElemType::I64 && d.is_empty() => {
                    // Dropout's seed: `--input seed=FILE`, else `--seed N` (default 0).
                    let _ = writeln!(
                        c,
                        "    int64_t *seedv = xmalloc(sizeof(int64_t));\n    *seedv = seed;\n    for (int a = 1; a + 1 < argc; a++)\n      if (!strcmp(argv[a], \"--input\") && !strncmp(argv[a + 1], \"seed=\", 5))\n        seedv = read_npy(argv[a + 1] + 5, \"<i8\", 0, NULL, 8, \"seed\");"
                    );
                    "seedv".to_string()
                }
                (Some(_), None) => {
                    // A batch, or a stack of batches (step `s` takes batch `s` mod their
                    // number, as `tessera train` does).
                    let bytes = t.size_bytes().unwrap_or(0);
                    let _ = writeln!(
                        c,
                        "    static const int64_t bs{i}[] = {{{}}};\n    long bn{i} = 1;\n    unsigned char *bt{i} = read_stack(input_file(argc, argv, \"{clean}\"), \"{}\", {}, bs{i}, {bytes}, \"{clean}\", &bn{i});",
                        dims_list(&d),
                        npy_descr(t.elem)?,
                        d.len(),
                    );
                    stacks.push((i, bytes));
                    format!("bt{i}")
                }
                (None, None) => format!(
                    "read_npy(argv[{}], \"{}\", {}, is{i}, {}, \"{clean}\")",
                    i + 1,
                    npy_descr(t.elem)?,
                    d.len(),
                    t.size_bytes().unwrap_or(0),
                ),
            };
            let _ = writeln!(
                c,
                "    static const int64_t is{i}[] = {{{}}};\n    int64_t *in{i} = descriptor({source}, {}, is{i});",
                dims_list(&d),
                d.len()
            );
            args.push(format!("in{i}"));
        }
        // After each step: its returned buffers freed, once their values are copied out.
        let free = if f.outputs.is_empty() {
            String::new()
        } else {
            format!(
                "{{\n        static const int rr[] = {{{}}};\n        int64_t *const aa[] = {{{}}};\n        free_results(res, {}, rr, aa, {});\n      }}",
                f.outputs
                    .iter()
                    .map(|t| t.rank().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if args.is_empty() {
                    "NULL".to_string()
                } else {
                    args.join(", ")
                },
                f.outputs.len(),
                args.len()
            )
        };
        let call = if f.outputs.is_empty() {
            format!("_mlir_ciface_rank{r}({});", args.join(", "))
        } else {
            let words: usize = f.outputs.iter().map(|t| 3 + 2 * t.rank()).sum();
            let _ = writeln!(c, "    static int64_t res[{words}];");
            let mut all = vec!["res".to_string()];
            all.extend(args);
            format!("_mlir_ciface_rank{r}({});", all.join(", "))
        };
        // Where each output's descriptor starts in `res`.
        let mut at = Vec::new();
        let mut next = 0;
        for t in &f.outputs {
            at.push(next);
            next += 3 + 2 * t.rank();
        }
        // By the manifest's output index: its descriptor's start and its type.
        let returned: BTreeMap<usize, (usize, &TensorType)> = f
            .returns
            .iter()
            .zip(at.iter().zip(&f.outputs))
            .map(|(&oi, (&a, t))| (oi, (a, t)))
            .collect();
        let Some(tr) = training else {
            let _ = writeln!(c, "    {call}");
            let stems = tessera_ir::names::file_stems(
                program.manifest.outputs.iter().map(|o| o.name.as_str()),
            );
            for (i, (t, stem)) in f.outputs.iter().zip(&stems).enumerate() {
                let d = shape_c(t);
                let _ = writeln!(
                    c,
                    "    static const int64_t os{i}[] = {{{}}};\n    if (write_npy({out_dir}, \"{stem}\", \"{}\", {}, os{i}, res + {}, {})) {{ MPI_Abort(MPI_COMM_WORLD, 1); }}",
                    dims_list(&d),
                    npy_descr(t.elem)?,
                    d.len(),
                    at[i],
                    crate::jit::elem_bytes(t.elem)
                );
            }
            let _ = writeln!(c, "    {free}\n    break;\n  }}");
            continue;
        };
        if r != host_rank {
            // A rank that is not the host runs its part of every step, keeps the state it
            // holds (each step's next value copied into its buffer) and, after the last
            // step, sends the host the state the host does not hold.
            let _ = writeln!(c, "    for (long s = 0; s < steps; s++) {{\n      {call}");
            copy_next_state(&mut c, &returned, &slot_bufs)?;
            let _ = writeln!(c, "      {free}\n    }}");
            for &(j, _, here) in &slot_bufs {
                if senders[j].contains(&r) {
                    let _ = writeln!(c, "    send_bytes(st{j}, {here}, {host_rank});");
                }
            }
            let _ = writeln!(c, "    break;\n  }}");
            continue;
        }
        let mut call = call;
        for (i, bytes) in &stacks {
            call = format!(
                "in{i}[0] = in{i}[1] = (int64_t)(intptr_t)(bt{i} + (size_t)(s % bn{i}) * {bytes});\n      {call}"
            );
        }
        train_host_loop(
            &mut c,
            tr,
            &returned,
            &slot_bufs,
            (&senders, &layouts, host_rank),
            &call,
            &free,
        )?;
        let _ = writeln!(c, "    break;\n  }}");
    }
    let names: Vec<String> = ranks
        .iter()
        .map(|d| format!("\"{}\"", c_text(d, false)))
        .collect();
    let _ = writeln!(
        c,
        "  }}\n  static const char *const rank_device[] = {{{}}};\n  report_buffers(rank, rank_device[rank]);\n  MPI_Finalize();\n  return 0;\n}}",
        names.join(", ")
    );
    Ok(c)
}

/// `name` inside a C string literal that is also a `printf` format: quotes, backslashes and
/// control characters escaped, `%` doubled when `format`.
fn c_text(name: &str, format: bool) -> String {
    let mut out = String::new();
    for ch in name.chars() {
        match ch {
            '"' | '\\' => {
                out.push('\\');
                out.push(ch);
            }
            '%' if format => out.push_str("%%"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\{:03o}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The usage line's inputs of a training program: `--input NAME=NAME.npy` per batch input.
pub fn train_input_args(program: &Program, training: &Training) -> String {
    batch_inputs(program, training)
        .map(|i| format!(" --input {0}={0}.npy", i.name))
        .collect()
}

/// The inputs of a training program that are not state: the batch's (and dropout's seed).
fn batch_inputs<'a>(
    program: &'a Program,
    training: &'a Training,
) -> impl Iterator<Item = &'a crate::manifest::Input> {
    program
        .manifest
        .inputs
        .iter()
        .enumerate()
        .filter(|(i, _)| !training.slots.iter().any(|s| s.input == *i))
        .map(|(_, i)| i)
}

/// Copies the next values of the state slots `held` from the step's results into their
/// buffers (through the staging buffers: a next value may alias the state it replaces).
fn copy_next_state(
    c: &mut String,
    returned: &BTreeMap<usize, (usize, &TensorType)>,
    held: &[(usize, &TrainSlot, u64)],
) -> Result<(), Error> {
    for &(j, s, _) in held {
        let &(at, t) = returned
            .get(&s.output)
            .ok_or_else(|| err("a state's next value is not among its rank's outputs"))?;
        let _ = writeln!(
            c,
            "      copy_out(res + {at}, {}, {}, nx{j});",
            t.rank(),
            crate::jit::elem_bytes(t.elem)
        );
    }
    for &(j, _, here) in held {
        let _ = writeln!(c, "      memcpy(st{j}, nx{j}, {here});");
    }
    Ok(())
}

/// A state slot held split (ZeRO-1): the whole tensor's extents, a block's, the rank and
/// offsets of each mesh device's block, in the mesh's order.
struct HeldLayout {
    whole: Vec<u64>,
    block: Vec<u64>,
    block_bytes: u64,
    esize: usize,
    blocks: Vec<(usize, Vec<u64>)>,
}

/// The layout of each state slot of `tr` that the program holds split (`None` for one held
/// whole).
fn held_layouts(
    program: &Program,
    ranks: &[String],
    tr: &Training,
) -> Result<Vec<Option<HeldLayout>>, Error> {
    let m = &program.manifest;
    tr.slots
        .iter()
        .map(|s| {
            let Some(input) = m.inputs.get(s.input) else {
                return Ok(None);
            };
            let Some(h) = &input.held else {
                return Ok(None);
            };
            let (mesh, sharding) = m
                .held_layout(h)
                .ok_or_else(|| err(format!("state {} is held on an unknown mesh", input.name)))?;
            let ty = parse_type(&input.ty)?;
            let local =
                crate::lower::spmd::local_type(&mesh, &sharding, &ty).map_err(|e| err(e.0))?;
            let blocks = mesh
                .devices
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let r = ranks
                        .iter()
                        .position(|x| x == d)
                        .ok_or_else(|| err(format!("{d} has no rank")))?;
                    let offs = crate::lower::spmd::block_offsets(&mesh, &sharding, &ty, i)
                        .map_err(|e| err(e.0))?;
                    Ok((r, offs))
                })
                .collect::<Result<_, Error>>()?;
            Ok(Some(HeldLayout {
                whole: shape_c(&ty),
                block: shape_c(&local),
                block_bytes: local.size_bytes().unwrap_or(0),
                esize: crate::jit::elem_bytes(ty.elem),
                blocks,
            }))
        })
        .collect()
}

/// The host's steps of a training program: run the step, print and keep its loss, copy the
/// next values of the state it holds into their buffers; after the last step, receive the
/// state the other ranks hold; then write `loss.csv`, `weights.safetensors`,
/// `state.safetensors` and (from a model) `model.onnx` into the output directory.
fn train_host_loop(
    c: &mut String,
    tr: &Training,
    returned: &BTreeMap<usize, (usize, &TensorType)>,
    held: &[(usize, &TrainSlot, u64)],
    (senders, layouts, host_rank): (&[Vec<usize>], &[Option<HeldLayout>], usize),
    call: &str,
    free: &str,
) -> Result<(), Error> {
    let &(loss_at, loss_ty) = returned
        .get(&tr.loss)
        .ok_or_else(|| err("the loss is not among the host's outputs"))?;
    let ctype = match loss_ty.elem {
        ElemType::F32 => "float",
        ElemType::F64 => "double",
        e => {
            return Err(err(format!(
                "the loss is {e}: an MPI training program needs f32 or f64"
            )));
        }
    };
    let _ = writeln!(
        c,
        "    size_t csv_size = 32 + (size_t)steps * 48, csv_len = 0;\n    char *csv = xmalloc(csv_size);\n    csv_len += snprintf(csv, csv_size, \"step,loss\\n\");\n    for (long s = 0; s < steps; s++) {{\n      {call}\n      const int64_t *ld = res + {};\n      float loss = (float)((const {ctype} *)(intptr_t)ld[1])[ld[2]];\n      char num[48];\n      loss_text(num, sizeof num, loss);\n      csv_len += snprintf(csv + csv_len, csv_size - csv_len, \"%ld,%s\\n\", s + 1, num);\n      fprintf(stderr, \"step %ld: loss %s\\n\", s + 1, num);",
        loss_at
    );
    copy_next_state(c, returned, held)?;
    let _ = writeln!(c, "      {free}\n    }}");
    // The state the other ranks hold, after the last step: whole from the first that holds
    // it, or a state held split as every holder's block (the host's own among them).
    for (j, s) in tr.slots.iter().enumerate() {
        let from = senders.get(j).map(Vec::as_slice).unwrap_or_default();
        match layouts.get(j).and_then(Option::as_ref) {
            Some(l) => {
                let mine = held.iter().any(|h| h.0 == j);
                let whole = if mine {
                    format!("wh{j}")
                } else {
                    format!("st{j}")
                };
                let _ = writeln!(c, "    unsigned char *{whole} = xmalloc({});", s.state.1);
                let _ = writeln!(
                    c,
                    "    {{\n      static const int64_t wd[] = {{{}}}, bd[] = {{{}}};",
                    dims_list(&l.whole),
                    dims_list(&l.block)
                );
                for (rr, offs) in &l.blocks {
                    let _ = writeln!(
                        c,
                        "      {{\n        static const int64_t bo[] = {{{}}};",
                        dims_list(offs)
                    );
                    if *rr == host_rank {
                        let _ = writeln!(
                            c,
                            "        block_copy({whole}, st{j}, {}, wd, bo, bd, {}, 0);\n      }}",
                            l.whole.len(),
                            l.esize
                        );
                    } else {
                        let _ = writeln!(
                            c,
                            "        unsigned char *b = xmalloc({0});\n        recv_bytes(b, {0}, {rr});\n        block_copy({whole}, b, {1}, wd, bo, bd, {2}, 0);\n        free(b);\n      }}",
                            l.block_bytes,
                            l.whole.len(),
                            l.esize
                        );
                    }
                }
                let _ = writeln!(c, "    }}");
                if mine {
                    let _ = writeln!(c, "    st{j} = wh{j};");
                }
            }
            None => {
                if let [from] = from {
                    let _ = writeln!(
                        c,
                        "    unsigned char *st{j} = xmalloc({});\n    recv_bytes(st{j}, {}, {from});",
                        s.state.1, s.state.1
                    );
                }
            }
        }
    }
    let slots: Vec<(usize, &TrainSlot)> = tr.slots.iter().enumerate().collect();
    let _ = writeln!(
        c,
        "    snprintf(path, sizeof path, \"%s/loss.csv\", outdir);\n    if (write_file(path, (const unsigned char *)csv, csv_len)) MPI_Abort(MPI_COMM_WORLD, 1);"
    );
    // (file, its template, which slots, where) for each output file.
    type Part = (usize, (usize, usize));
    let state: Vec<Part> = slots.iter().map(|&(j, s)| (j, s.state)).collect();
    let weights: Vec<Part> = slots
        .iter()
        .filter_map(|&(j, s)| s.weight.map(|w| (j, w)))
        .collect();
    let model: Vec<Part> = slots
        .iter()
        .filter_map(|&(j, s)| s.model.map(|m| (j, m)))
        .collect();
    let mut files = vec![
        ("state.safetensors", "state_path", state),
        ("weights.safetensors", "weights_out", weights),
    ];
    if tr.model {
        files.push(("model.onnx", "model_path", model));
    }
    for (n, (file, tmpl, parts)) in files.into_iter().enumerate() {
        let list = |f: &dyn Fn(&Part) -> String| {
            let v: Vec<String> = parts.iter().map(f).collect();
            if v.is_empty() {
                "0".to_string()
            } else {
                v.join(", ")
            }
        };
        let _ = writeln!(
            c,
            "    static const long po{n}[] = {{{}}};\n    static const size_t pl{n}[] = {{{}}};\n    unsigned char *const pb{n}[] = {{{}}};\n    snprintf(path, sizeof path, \"%s/{file}\", outdir);\n    if (patch_write({tmpl}, path, {}, po{n}, pl{n}, pb{n})) MPI_Abort(MPI_COMM_WORLD, 1);",
            list(&|(_, (o, _))| o.to_string()),
            list(&|(_, (_, l))| l.to_string()),
            if parts.is_empty() {
                "NULL".to_string()
            } else {
                parts
                    .iter()
                    .map(|(j, _)| format!("st{j}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            parts.len()
        );
    }
    Ok(())
}

fn dims_list(d: &[u64]) -> String {
    if d.is_empty() {
        // C needs a non-empty initializer; rank-0 descriptors read none of it.
        return "0".into();
    }
    d.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
}

/// Byte offsets (from the start of the file) and lengths of every tensor in a safetensors
/// file's bytes.
pub fn safetensors_offsets(bytes: &[u8]) -> Result<BTreeMap<String, (usize, usize)>, Error> {
    let (header, meta) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| err(format!("weights file: {e}")))?;
    let base = 8 + header;
    Ok(meta
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (a, b) = info.data_offsets;
            (name, (base + a, b - a))
        })
        .collect())
}

/// Builds the executable `out`; writes its MLIR module and C driver next to it
/// (`program.mlir`, `program.c`) for inspection.
pub fn build(
    mlir: &Mlir,
    program: &Program,
    weights_file: &[u8],
    out: &Path,
    options: &PipelineOptions,
    training: Option<&Training>,
) -> Result<(), Error> {
    if let Some(st) = program.steps.iter().find(|st| !st.donated.is_empty()) {
        // The rank functions pass tensors between steps; donated state is a buffer argument.
        return Err(err(format!(
            "step {} updates state in place: lower without `donate_state` for the MPI program",
            st.id
        )));
    }
    let ranks = ranks(program);
    let (fns, calls) = rank_functions(program, &ranks, training)?;
    // The whole program, its MPI functions defined, is the one to read.
    let text = module(program, &fns, &calls, true);
    let what = "mpi program";
    let dir = out.parent().unwrap_or(Path::new("."));
    // The module first, worth reading when the build fails. The pipeline's input is the
    // same module with the MPI functions declared only (see `MpiCalls`).
    write_atomically(&dir.join("program.mlir"), text.as_bytes())?;
    let mut m = mlir.parse(&module(program, &fns, &calls, false), what)?;
    mlir.run_pipeline(&mut m, pipelines::CPU_MPI_BUFFERS, options, what)?;
    // `define_functions` verifies the module these two steps leave.
    crate::dealloc::free_after_last_use(&m);
    let defs = format!("module {{\n{}}}\n", calls.functions(true));
    mlir.define_functions(&mut m, &defs, what)?;
    mlir.run_pipeline(&mut m, pipelines::CPU_MPI_LOWER, options, what)?;
    let ll = mlir.to_llvm_ir(&m, what)?;
    let offsets = if weights_file.is_empty() {
        BTreeMap::new()
    } else {
        safetensors_offsets(weights_file)?
    };
    let c = main_c(program, &ranks, &fns, &offsets, training)?;
    let tmp = tempfile::Builder::new()
        .prefix(".tessera-mpi-")
        .tempdir_in(dir)
        .map_err(|e| err(format!("{}: {e}", dir.display())))?;
    let llp = tmp.path().join("program.ll");
    let cp = tmp.path().join("program.c");
    std::fs::write(&llp, ll).map_err(|e| err(format!("{}: {e}", llp.display())))?;
    std::fs::write(&cp, &c).map_err(|e| err(format!("{}: {e}", cp.display())))?;
    for (name, data) in [
        ("program.mlir", text.as_bytes()),
        ("program.c", c.as_bytes()),
    ] {
        let p = tmp.path().join(format!("keep-{name}"));
        std::fs::write(&p, data).map_err(|e| err(format!("{}: {e}", p.display())))?;
        std::fs::rename(&p, dir.join(name)).map_err(|e| err(format!("{}: {e}", dir.display())))?;
    }
    let exe = tmp.path().join("program");
    let utils = crate::native::llvm_prefix().join("lib");
    crate::native::run_tool(
        Command::new("mpicc")
            .arg(format!("-cc={}", crate::native::clang().display()))
            // For this machine's CPU, as the JIT and libraries compile: the schedule's
            // `llvm.fmuladd`s then fuse the same way in all three, so their numbers agree.
            .args(["-O2", "-march=native", "-Wno-override-module"])
            .arg(&cp)
            .arg(&llp)
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", utils.display()))
            .arg(format!("-Wl,-rpath,{}", utils.display()))
            .args(["-lmlir_c_runner_utils", "-lm"]),
    )?;
    std::fs::rename(&exe, out).map_err(|e| err(format!("{}: {e}", out.display())))
}
