//! `tessera train DIR|MODEL`: runs N steps of a training step (the graph the `train` pass
//! builds), feeding each step's state outputs back as the next step's state inputs, and
//! writes the loss curve, the trained weights, the whole state and (for an ONNX model) the
//! model with its trained initializers.
//!
//! The step runs JIT-compiled (the program of `tessera compile --train -o DIR`, or the model
//! compiled here for `--target`) or, with `--interpret`, in the reference interpreter. The
//! state stays in memory between steps: each step's outputs become the next step's inputs
//! without leaving the process.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tessera_ir::{Graph, StateInit, Tensor, TensorType, interp, text};
use tessera_passes::{OptionValue, PassSpec, Pipeline};

use super::InputShape;
use super::run::Binding;
use crate::cli::{Microbatches, TrainArgs};
use crate::npy;
use tessera_mlir::{Buffer, OutBuf};

/// The source model `compile --train -o DIR` keeps in DIR, for `model.onnx`.
pub const SOURCE_MODEL: &str = "source.onnx";

/// What `tessera train` was asked to do.
pub struct TrainRequest<'a> {
    /// A compiled directory or a model.
    pub path: &'a Path,
    /// `--input NAME=FILE.npy`.
    pub bindings: &'a [Binding],
    /// Steps to run.
    pub steps: u64,
    /// `--output-dir`.
    pub output_dir: &'a Path,
    /// `--resume`.
    pub resume: Option<&'a Path>,
    /// Run in the interpreter.
    pub interpret: bool,
    /// `--seed`: the value of the step's `seed` input (dropout) unless `--input` gives it.
    pub seed: i64,
    /// `--opt-level`: LLVM's optimization level for the JIT.
    pub opt_level: usize,
    /// With a model: the target.
    pub target: &'a str,
    /// `--target-path`.
    pub target_path: &'a [PathBuf],
    /// With a model: the pipeline after the `train` pass.
    pub passes: &'a str,
    /// `--input-shape`.
    pub shapes: &'a [InputShape],
    /// The training options.
    pub train: &'a TrainArgs,
}

/// The `train` pass of the training options, for `model` (loaded as `graph`): for an ONNX
/// model, the parameters are its floating-point initializers (constants that the model's
/// `Constant` nodes made do not train).
pub fn train_pass(
    args: &TrainArgs,
    microbatches: u64,
    model: &Path,
    graph: &Graph,
) -> Result<PassSpec> {
    let mut spec = PassSpec::new("train").map_err(|e| anyhow!("{}", e.message))?;
    let mut set = |k: &str, v: OptionValue| {
        spec.options.replace(k, v);
    };
    set("loss", OptionValue::Str(args.loss.clone()));
    if let Some(o) = &args.loss_output {
        set("loss-output", OptionValue::Str(o.clone()));
    }
    set("labels", OptionValue::Str(args.labels.clone()));
    if let Some(p) = &args.prediction {
        set("prediction", OptionValue::Str(p.clone()));
    }
    set("optimizer", OptionValue::Str(args.optimizer.clone()));
    set("schedule", OptionValue::Str(args.schedule.clone()));
    set(
        "clip-norm",
        OptionValue::Float(args.clip_norm.unwrap_or(0.0)),
    );
    set("label-smoothing", OptionValue::Float(args.label_smoothing));
    set(
        "ignore-index",
        OptionValue::Str(args.ignore_index.to_string()),
    );
    set("bn-momentum", OptionValue::Float(args.bn_momentum));
    set("microbatches", OptionValue::UInt(microbatches));
    if let Some(f) = &args.freeze {
        set("freeze", OptionValue::Str(f.clone()));
    }
    if tessera_onnx::is_onnx_path(model) {
        let inits = tessera_onnx::initializer_names(model)?;
        let floats: Vec<&str> = graph
            .consts()
            .filter(|(_, c)| c.ty.elem.is_float())
            .map(|(_, c)| c.name.as_str())
            .collect();
        let params: Vec<&str> = inits
            .iter()
            .map(String::as_str)
            .filter(|n| floats.contains(n))
            .collect();
        set("params", OptionValue::Str(params.join(",")));
    }
    tessera_passes::train::spec_from_options(&spec.options)
        .map_err(|e| anyhow!("{}: --train: {e}", model.display()))?;
    Ok(spec)
}

/// The state between steps.
enum Resident {
    /// By input index, for the interpreter.
    Tensors(BTreeMap<usize, Tensor>),
    /// Every input's buffer (state and the current batch), for the JIT.
    Buffers(Vec<Buffer>),
}

/// How a step runs.
enum Exec {
    Interp(Graph),
    Jit(tessera_mlir::Runner),
}

/// The step graph and how to run it.
struct Step {
    /// The step graph (inputs, state slots, outputs).
    graph: Graph,
    exec: Exec,
    /// The ONNX model the parameters came from, if any.
    source: Option<PathBuf>,
}

/// Runs `tessera train`.
pub fn run(req: &TrainRequest<'_>) -> Result<()> {
    let step = if req.path.is_dir() {
        load_dir(req)?
    } else {
        build_from_model(req)?
    };
    if step.graph.state.is_empty() {
        bail!(
            "{}: not a training step (it has no state inputs); compile it with --train",
            req.path.display()
        );
    }
    train(req, &step)
}

fn load_dir(req: &TrainRequest<'_>) -> Result<Step> {
    let dir = req.path;
    if req.train.train {
        bail!(
            "{}: a compiled directory holds its training step already; drop --train",
            dir.display()
        );
    }
    let placed = dir.join("placed.tir");
    let graph = text::load(&placed)
        .with_context(|| format!("{}: not a compiled directory", dir.display()))?;
    let exec = if req.interpret {
        Exec::Interp(graph.clone())
    } else {
        tessera_mlir::jit::retain_freed_memory();
        Exec::Jit(
            tessera_mlir::Runner::load(dir, req.opt_level, tessera_mlir::GpuDevices::OnCpu)
                .with_context(|| format!("{}: loading the compiled program", dir.display()))?,
        )
    };
    let source = dir.join(SOURCE_MODEL);
    Ok(Step {
        graph,
        exec,
        source: source.is_file().then_some(source),
    })
}

fn build_from_model(req: &TrainRequest<'_>) -> Result<Step> {
    let path = req.path;
    if !req.train.train {
        bail!(
            "{}: give a compiled directory (tessera compile --train -o DIR), or --train and its options to compile the model here",
            path.display()
        );
    }
    let target = super::targets::resolve(req.target, req.target_path).context("--target")?;
    tessera_targets::set_default_target(Some(target.clone()));
    let microbatches = match req.train.microbatches {
        Microbatches::Count(m) => m,
        Microbatches::Auto => bail!(
            "{}: --microbatches auto: the count is chosen by `tessera compile --train` (it \
             places and simulates the step for each); give `tessera train MODEL` a number",
            path.display()
        ),
    };
    let graph = super::load_model_for(path, req.shapes, true)?;
    let mut pipeline =
        Pipeline::parse(req.passes).with_context(|| format!("--passes `{}`", req.passes))?;
    pipeline
        .passes
        .insert(0, train_pass(req.train, microbatches, path, &graph)?);
    let flags = crate::instrument::PassFlags::default();
    let (graph, _) = super::opt::run_pipeline(graph, &pipeline, &flags, path)?;
    let source = tessera_onnx::is_onnx_path(path).then(|| path.to_path_buf());
    if req.interpret {
        return Ok(Step {
            exec: Exec::Interp(graph.clone()),
            graph,
            source,
        });
    }
    let (graph, runner) = super::run::jit(
        graph,
        &*target,
        path,
        req.opt_level,
        tessera_mlir::GpuDevices::OnCpu,
    )?;
    Ok(Step {
        graph,
        exec: Exec::Jit(runner),
        source,
    })
}

/// One batch input's batches: one, or each of a stack (split once, when read).
struct Batches(Vec<Tensor>);

impl Batches {
    fn get(&self, step: u64) -> Tensor {
        self.0[(step % self.0.len() as u64) as usize].clone()
    }
}

/// The batches of a stack along its leading axis.
fn unstack(t: &Tensor) -> Result<Vec<Tensor>> {
    let n = t.shape()[0];
    let shape = t.shape()[1..].to_vec();
    let bytes = t.to_le_bytes();
    let per = bytes.len() / n.max(1);
    bytes
        .chunks_exact(per.max(1))
        .take(n)
        .map(|b| Tensor::from_le_bytes(t.elem(), &shape, b).map_err(|e| anyhow!("{e}")))
        .collect()
}

fn input_name(g: &Graph, i: usize) -> String {
    let v = g.inputs()[i];
    g.value(v).name.clone().unwrap_or_else(|| format!("#{i}"))
}

fn train(req: &TrainRequest<'_>, step: &Step) -> Result<()> {
    let g = &step.graph;
    let n = g.inputs().len();
    let is_state: Vec<bool> = (0..n)
        .map(|i| g.state.iter().any(|s| s.input == i))
        .collect();
    // Batch inputs, from the bindings.
    let mut batches: BTreeMap<usize, Batches> = BTreeMap::new();
    for b in req.bindings {
        let Some(i) = (0..n).find(|&i| input_name(g, i) == b.name) else {
            let names: Vec<String> = (0..n)
                .filter(|&i| !is_state[i])
                .map(|i| format!("`{}`", input_name(g, i)))
                .collect();
            bail!(
                "--input {}: the step has no batch input of that name (its batch inputs are {})",
                b.name,
                names.join(", ")
            );
        };
        if is_state[i] {
            bail!(
                "--input {}: that is a state input (a parameter or optimizer state); it comes from the model or --resume",
                b.name
            );
        }
        if batches.contains_key(&i) {
            bail!("--input {}: given twice", b.name);
        }
        let t = npy::read(&b.file)?;
        let want = g.ty(g.inputs()[i]);
        let shape: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        let dims = want.static_dims().ok_or_else(|| {
            anyhow!(
                "input `{}` is {want}: bind its symbols with --input-shape when compiling",
                b.name
            )
        })?;
        let stacked = if shape == dims {
            false
        } else if shape.len() == dims.len() + 1 && shape[1..] == dims[..] && shape[0] > 0 {
            true
        } else {
            bail!(
                "{}: input `{}` has shape {}, but a batch is {want} (or a stack of them)",
                b.file.display(),
                b.name,
                npy::shape_string(t.shape())
            );
        };
        if t.elem() != want.elem {
            bail!(
                "{}: input `{}` holds {}, the step takes {}",
                b.file.display(),
                b.name,
                t.elem(),
                want.elem
            );
        }
        let parts = if stacked { unstack(&t)? } else { vec![t] };
        batches.insert(i, Batches(parts));
    }
    // Dropout's seed: from --seed unless given as an input.
    if let Some(i) = (0..n).find(|&i| !is_state[i] && input_name(g, i) == "seed")
        && !batches.contains_key(&i)
        && g.ty(g.inputs()[i]) == &TensorType::new(tessera_ir::ElemType::I64, vec![])
    {
        let seed = Tensor::I64(ndarray::arr0(req.seed).into_dyn());
        batches.insert(i, Batches(vec![seed]));
    }
    let missing: Vec<String> = (0..n)
        .filter(|&i| !is_state[i] && !batches.contains_key(&i))
        .map(|i| format!("`{}`", input_name(g, i)))
        .collect();
    if !missing.is_empty() {
        bail!(
            "give every batch input with --input: missing {}",
            missing.join(", ")
        );
    }

    // The state: from --resume, else the initial values.
    let mut state: BTreeMap<usize, Tensor> = BTreeMap::new();
    let resumed = match req.resume {
        Some(dir) => {
            let path = dir.join("state.safetensors");
            Some(
                tessera_mlir::weights::read(&path)
                    .with_context(|| format!("--resume: {}", path.display()))?,
            )
        }
        None => None,
    };
    for slot in &g.state {
        let ty = g.ty(g.inputs()[slot.input]).clone();
        let t = match &resumed {
            Some(saved) => {
                let t = saved.get(&slot.next).ok_or_else(|| {
                    anyhow!(
                        "--resume: state.safetensors has no `{}` (written by another training step?)",
                        slot.next
                    )
                })?;
                if t.ty() != ty {
                    bail!(
                        "--resume: `{}` is {} in state.safetensors, the step takes {ty}",
                        slot.next,
                        t.ty()
                    );
                }
                t.clone()
            }
            None => initial(g, slot.init, &ty)?,
        };
        state.insert(slot.input, t);
    }
    let names = text::output_names(g);
    let loss_at = names.iter().position(|n| n == "loss").unwrap_or(0);
    let next_at: Vec<(usize, usize)> = g
        .state
        .iter()
        .map(|s| {
            names
                .iter()
                .position(|n| *n == s.next)
                .map(|o| (s.input, o))
                .ok_or_else(|| anyhow!("the step has no output `{}`", s.next))
        })
        .collect::<Result<_>>()?;
    let first_step = g
        .state
        .iter()
        .find(|s| s.next == "step")
        .and_then(|s| state.get(&s.input))
        .map_or(0, |t| t.to_f64_vec().first().copied().unwrap_or(0.0) as u64);

    std::fs::create_dir_all(req.output_dir)
        .with_context(|| format!("cannot create {}", req.output_dir.display()))?;
    let mut csv = match req.resume {
        Some(dir) => std::fs::read_to_string(dir.join("loss.csv")).unwrap_or_default(),
        None => String::new(),
    };
    if csv.is_empty() {
        csv.push_str("step,loss\n");
    }
    let bar = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
        let b = indicatif::ProgressBar::new(req.steps);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    // The state stays resident: tensors for the interpreter, the compiled program's own
    // buffers for the JIT (donated state is updated in place there; see `tessera_mlir::
    // manifest::Donated`).
    let mut resident = match &step.exec {
        Exec::Interp(_) => Resident::Tensors(state),
        Exec::Jit(_) => Resident::Buffers(
            (0..n)
                .map(|i| match state.remove(&i) {
                    Some(t) => Buffer::from_tensor(&t),
                    None => Buffer::from_tensor(&batches[&i].get(0)),
                })
                .collect(),
        ),
    };
    let mut inputs: Vec<Tensor> = Vec::with_capacity(n);
    let mut times: Vec<f64> = Vec::with_capacity(req.steps as usize);
    for k in 0..req.steps {
        let clock = std::time::Instant::now();
        let global = first_step + k;
        let loss = match (&step.exec, &mut resident) {
            (Exec::Interp(graph), Resident::Tensors(state)) => {
                // The state moves into the step's inputs; the step's outputs replace it.
                inputs.clear();
                for i in 0..n {
                    inputs.push(match state.remove(&i) {
                        Some(t) => t,
                        None => batches[&i].get(global),
                    });
                }
                let outputs = interp::run(graph, &inputs)
                    .map_err(|e| anyhow!("step {}: the interpreter failed: {e}", global + 1))?;
                let loss = outputs.get(loss_at).cloned();
                let mut outputs: Vec<Option<Tensor>> = outputs.into_iter().map(Some).collect();
                for &(input, o) in &next_at {
                    let t = outputs
                        .get_mut(o)
                        .and_then(Option::take)
                        .ok_or_else(|| anyhow!("step {}: output {o} is missing", global + 1))?;
                    state.insert(input, t);
                }
                loss
            }
            (Exec::Jit(runner), Resident::Buffers(bufs)) => {
                for (&i, b) in &batches {
                    bufs[i] = Buffer::from_tensor(&b.get(global));
                }
                let mut outputs: Vec<Option<OutBuf>> = runner
                    .run_buffers(bufs)
                    .with_context(|| format!("step {}: running", global + 1))?
                    .into_iter()
                    .map(Some)
                    .collect();
                let loss = match outputs.get(loss_at).and_then(Option::as_ref) {
                    Some(OutBuf::Input(i)) => Some(bufs[*i].to_tensor()?),
                    Some(OutBuf::Buffer(b)) => Some(b.to_tensor()?),
                    None => None,
                };
                for &(input, o) in &next_at {
                    match outputs.get_mut(o).and_then(Option::take) {
                        // Updated in place.
                        Some(OutBuf::Input(i)) if i == input => {}
                        Some(OutBuf::Input(i)) => bufs[input] = bufs[i].clone(),
                        Some(OutBuf::Buffer(b)) => bufs[input] = b,
                        None => bail!("step {}: output {o} is missing", global + 1),
                    }
                }
                loss
            }
            _ => bail!("internal: the resident state does not match the executor"),
        };
        times.push(clock.elapsed().as_secs_f64() * 1e3);
        let loss = loss
            .and_then(|t| t.to_f64_vec().first().copied())
            .ok_or_else(|| anyhow!("step {}: no loss", global + 1))?;
        let line = format!("{},{}", global + 1, tessera_ir::format_f32(loss as f32));
        let _ = writeln!(csv, "{line}");
        match &bar {
            Some(b) => {
                b.set_message(format!("loss {}", tessera_ir::format_f32(loss as f32)));
                b.inc(1);
            }
            None => eprintln!(
                "step {}: loss {}",
                global + 1,
                tessera_ir::format_f32(loss as f32)
            ),
        }
    }
    let state: BTreeMap<usize, Tensor> = match resident {
        Resident::Tensors(state) => state,
        Resident::Buffers(bufs) => g
            .state
            .iter()
            .map(|s| Ok((s.input, bufs[s.input].to_tensor()?)))
            .collect::<Result<_>>()?,
    };
    if let Some(b) = bar {
        b.finish();
    }
    // The first step includes the JIT's code generation; the median is the steady state.
    let first = times.first().copied().unwrap_or(0.0);
    times.sort_by(f64::total_cmp);
    eprintln!(
        "train: {} steps, median step {:.3} ms (first {:.3} ms){}",
        req.steps,
        times[times.len() / 2],
        first,
        match &step.exec {
            Exec::Interp(_) => " in the interpreter".to_string(),
            Exec::Jit(r) => format!(", {}", r.start_note()),
        }
    );

    // Outputs.
    let out = req.output_dir;
    super::write_atomically(&out.join("loss.csv"), csv.as_bytes())?;
    let (all, weights) = state_files(g, |slot| Ok(state[&slot.input].clone()))?;
    write_safetensors(&out.join("weights.safetensors"), &weights)?;
    write_safetensors(&out.join("state.safetensors"), &all)?;
    if let Some(src) = &step.source {
        let model = std::fs::read(src).with_context(|| format!("cannot read {}", src.display()))?;
        let trained = tessera_onnx::replace_initializers(&model, &weights)
            .map_err(|e| anyhow!("{}: writing the trained model: {e}", src.display()))?;
        super::write_atomically(&out.join("model.onnx"), &trained)?;
    }
    Ok(())
}

/// What `state.safetensors` holds (every slot's value, by its next-value name) and what
/// `weights.safetensors` holds (the parameters', by weight name), for slot values `value`.
pub(crate) type StateFiles = (BTreeMap<String, Tensor>, BTreeMap<String, Tensor>);

pub(crate) fn state_files(
    g: &Graph,
    value: impl Fn(&tessera_ir::StateSlot) -> Result<Tensor>,
) -> Result<StateFiles> {
    let mut all = BTreeMap::new();
    let mut weights = BTreeMap::new();
    for slot in &g.state {
        let t = value(slot)?;
        if let StateInit::Const(c) = slot.init {
            weights.insert(g.constant(c).name.clone(), t.clone());
        }
        all.insert(slot.next.clone(), t);
    }
    Ok((all, weights))
}

/// The initial value of a state slot.
pub(crate) fn initial(g: &Graph, init: StateInit, ty: &TensorType) -> Result<Tensor> {
    match init {
        StateInit::Const(c) => {
            let k = g.constant(c);
            Tensor::from_typed_le_bytes(&k.ty, &k.data).map_err(|e| anyhow!("@{}: {e}", k.name))
        }
        StateInit::Zeros => {
            let dims: Vec<usize> = ty
                .static_dims()
                .ok_or_else(|| anyhow!("a state input is {ty}: its shape must be static"))?
                .iter()
                .map(|&d| d as usize)
                .collect();
            Tensor::zeros(ty.elem, &dims).map_err(|e| anyhow!("{e}"))
        }
    }
}

/// Writes named tensors as a safetensors file (the weights file's format), atomically.
pub(crate) fn write_safetensors(path: &Path, tensors: &BTreeMap<String, Tensor>) -> Result<()> {
    let data = tensors
        .iter()
        .map(|(k, t)| {
            (
                k.clone(),
                (t.ty(), tessera_ir::Bytes::from(t.to_le_bytes())),
            )
        })
        .collect();
    let bytes = tessera_mlir::weights::serialize(&data)
        .with_context(|| format!("writing {}", path.display()))?;
    super::write_atomically(path, &bytes)
}
