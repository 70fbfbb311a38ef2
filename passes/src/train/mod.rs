//! The `train` pass: a model's graph into its training step, an ordinary graph
//!
//! ```text
//! (inputs..., labels, parameters..., optimizer state..., step)
//!     -> (loss, parameters'..., optimizer state'..., step')
//! ```
//!
//! - **Parameters** are the model's floating-point constants (all of them, or those named in
//!   `params`), minus those matching `freeze`. Each becomes a graph input named after the
//!   constant, a *state* input ([`tessera_ir::StateSlot`]) whose initial value is the
//!   constant and whose next value is the output of the same name.
//! - **Loss**: `cross-entropy` of the `prediction` output (logits `[N, C, ...]`) against the
//!   class indices in a new `labels` input, with `ignore-index` and `label-smoothing` as
//!   PyTorch defines them; `mse` against a `labels` input of the prediction's type; or
//!   `output`, an output the model computes itself (`loss-output`).
//! - **Gradients**: [`crate::grad::differentiate`] with respect to the parameters, clipped by
//!   global norm when `clip-norm` is above 0.
//! - **Optimizer**: `sgd`, `adam` or `adamw` with `torch.optim`'s update rules and state
//!   (`<param>.momentum_buffer`, `<param>.exp_avg`, `<param>.exp_avg_sq`: state inputs
//!   starting at zeros), and a learning-rate `schedule`; the step count `step` (i64, starting
//!   at 0) is a state input too, and `t = step + 1` is the step being taken.
//!
//! - **Batch normalization** trains in training mode: a `batch-norm` whose statistics are
//!   constants normalizes with the batch's mean and biased variance instead, and those
//!   constants (its running statistics) become state inputs updated with `bn-momentum`
//!   (PyTorch's 0.1 by default) and the unbiased variance, as PyTorch does.
//!
//! - **Dropout** trains in training mode: every `dropout` op keeps each element with
//!   probability `1 - ratio` (scaled by `1 / (1 - ratio)`), its mask drawn by a counter-based
//!   generator keyed by a new `seed` input (i64 scalar) and the step count (see `dropout.rs`).
//!
//! The model's own outputs are dropped (a training step returns the loss and the state),
//! and `dce` removes what only they needed.

use regex::Regex;
use tessera_ir::{
    Dim, ElemType, Graph, Op, OpId, Scalar, StateInit, StateSlot, TensorType, ValueDef, ValueId,
};

use crate::grad::{Bw, differentiate, find_value};
use crate::pass::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};

mod dropout;
mod loss;
mod microbatch;
pub mod optim;

pub use optim::{Optimizer, Schedule};

/// The loss of a training step.
#[derive(Clone, Debug, PartialEq)]
pub enum Loss {
    /// Cross-entropy against class indices.
    CrossEntropy {
        /// Labels equal to this are ignored.
        ignore_index: i64,
        /// Label smoothing in [0, 1].
        smoothing: f64,
    },
    /// Mean squared error.
    Mse,
    /// An output of the model, by name.
    Output(String),
}

/// What the `train` pass builds.
#[derive(Clone, Debug)]
pub struct TrainSpec {
    /// The loss.
    pub loss: Loss,
    /// The model output the loss reads (default: the first).
    pub prediction: Option<String>,
    /// The name of the labels input added for `cross-entropy` and `mse`.
    pub labels: String,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The learning-rate schedule.
    pub schedule: Schedule,
    /// Clip gradients to this global L2 norm (0: no clipping).
    pub clip_norm: f64,
    /// Only these constants train (`None`: every floating-point constant).
    pub params: Option<Vec<String>>,
    /// Constants whose name matches this do not train.
    pub freeze: Option<Regex>,
    /// The momentum of batch normalization's running statistics (PyTorch's convention:
    /// the weight of the batch's statistics).
    pub bn_momentum: f64,
    /// The batch runs as this many microbatches (1: whole), their gradients summed before
    /// the one optimizer update (see `microbatch.rs`).
    pub microbatches: u64,
}

/// What [`build_step`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepInfo {
    /// The trained parameters, by name, in input order.
    pub params: Vec<String>,
    /// The frozen floating-point constants.
    pub frozen: Vec<String>,
    /// Ops added for the backward graph, loss and optimizer.
    pub added_ops: usize,
    /// Dropout ops given their training form (the step then has a `seed` input).
    pub dropouts: usize,
}

/// Turns `graph` into its training step (see the module doc).
pub fn build_step(graph: &mut Graph, spec: &TrainSpec) -> Result<StepInfo, String> {
    let names = tessera_ir::text::output_names(graph);
    let find_output = |name: &str| -> Result<ValueId, String> {
        names
            .iter()
            .position(|n| n == name)
            .map(|i| graph.outputs()[i])
            .ok_or_else(|| {
                format!(
                    "the model has no output named `{name}` (outputs: {})",
                    names.join(", ")
                )
            })
    };
    let prediction = match &spec.prediction {
        Some(p) => find_output(p)?,
        None => *graph.outputs().first().ok_or("the model has no output")?,
    };
    let model_loss = match &spec.loss {
        Loss::Output(name) => Some(find_output(name)?),
        _ => None,
    };
    let before = graph.ops().len();
    // The model's batch inputs (microbatches cut them).
    let model_inputs: Vec<ValueId> = graph.inputs().to_vec();

    // Parameters: float constants read by const ops, in first-use order.
    let mut order: Vec<tessera_ir::ConstId> = Vec::new();
    let mut readers: std::collections::BTreeMap<tessera_ir::ConstId, Vec<OpId>> =
        std::collections::BTreeMap::new();
    for &o in graph.ops() {
        if let Op::Const(c) = graph.op(o).op {
            if !graph.constant(c).ty.elem.is_float() {
                continue;
            }
            if !readers.contains_key(&c) {
                order.push(c);
            }
            readers.entry(c).or_default().push(o);
        }
    }
    if let Some(list) = &spec.params {
        for n in list {
            if !graph.consts().any(|(_, k)| &k.name == n) {
                return Err(format!("no constant named `{n}` to train"));
            }
        }
    }
    // The labels input comes right after the model's inputs.
    let labels = match &spec.loss {
        Loss::Output(_) => None,
        Loss::CrossEntropy { .. } => {
            let pt = graph.ty(prediction).clone();
            if pt.rank() < 2 {
                return Err(format!(
                    "cross-entropy needs logits [N, C, ...]; the prediction is {pt}"
                ));
            }
            let mut shape = pt.shape.clone();
            shape.remove(1);
            Some(add_input(
                graph,
                &spec.labels,
                TensorType::new(ElemType::I64, shape),
            )?)
        }
        Loss::Mse => {
            let pt = graph.ty(prediction).clone();
            Some(add_input(graph, &spec.labels, pt)?)
        }
    };
    // Batch normalization trains on batch statistics: its running statistics (constants
    // read as its mean and variance operands) are state, not parameters.
    let norms = batch_norms(graph);
    let stats: Vec<tessera_ir::ConstId> = norms.iter().flat_map(|n| [n.1, n.2]).collect();
    let mut info = StepInfo::default();
    let mut params: Vec<(tessera_ir::ConstId, ValueId)> = Vec::new();
    for c in order {
        if stats.contains(&c) {
            continue;
        }
        let name = graph.constant(c).name.clone();
        if spec.params.as_ref().is_some_and(|l| !l.contains(&name)) {
            continue;
        }
        if spec.freeze.as_ref().is_some_and(|r| r.is_match(&name)) {
            info.frozen.push(name);
            continue;
        }
        let ty = graph.constant(c).ty.clone();
        let input = graph.add_input(None, ty);
        for &o in &readers[&c] {
            let r = graph.op(o).results[0];
            graph.replace_all_uses(r, input);
            graph.remove_op(o);
            // The name the const op's result had is free now.
            graph.value_mut(r).name = None;
        }
        let vname = fresh_name(graph, &name);
        graph.set_name(input, vname);
        params.push((c, input));
        info.params.push(name);
    }
    // Microbatches copy the model's batch-dependent ops, batch norms included (each copy
    // then normalizes with its microbatch's statistics and updates the running ones in turn,
    // as M forward passes in PyTorch do).
    let micro = if spec.microbatches > 1 {
        if matches!(spec.loss, Loss::Output(_)) {
            return Err(
                "microbatches: loss=output reads a loss the model computes over the whole \
                 batch; use cross-entropy or mse"
                    .into(),
            );
        }
        Some(microbatch::microbatch(
            graph,
            &model_inputs,
            spec.microbatches,
        )?)
    } else {
        None
    };
    let norms = if micro.is_some() {
        batch_norms(graph)
    } else {
        norms
    };
    let running = batch_stats(graph, &norms, spec.bn_momentum)?;
    if params.is_empty() {
        return Err(
            "nothing to train: the model has no floating-point constants (or all are frozen)"
                .into(),
        );
    }

    // Optimizer state, then the step count, as state inputs.
    let state_names = spec.optimizer.state_names();
    let mut states: Vec<Vec<(ValueId, String)>> = Vec::with_capacity(params.len());
    for (c, p) in &params {
        let name = graph.constant(*c).name.clone();
        let ty = graph.ty(*p).clone();
        let mut state = Vec::new();
        for s in state_names {
            let sname = format!("{name}.{s}");
            state.push((add_input(graph, &sname, ty.clone())?, sname));
        }
        states.push(state);
    }
    let step = add_input(graph, "step", TensorType::new(ElemType::I64, vec![]))?;
    info.dropouts = dropout::train_dropouts(graph, step)?;

    let mut bw = Bw::plain(graph, "loss");
    let loss = if let Some(mb) = &micro {
        // Each microbatch's loss on its rows of the labels; the step's loss is their sum,
        // each divided so that the sum is the whole batch's loss.
        let labels = labels.ok_or("internal error: no labels input")?;
        let m = spec.microbatches;
        // Microbatch `i` makes rows `i*R/M .. (i+1)*R/M` of the prediction's `R` (its batch
        // axis is 0, checked below; a model may flatten batch and sequence into it), and is
        // compared with the same rows of the labels.
        let full = bw.ty(prediction);
        let lt = bw.ty(labels);
        let rows = full.shape.first().and_then(Dim::as_static).unwrap_or(0) / m;
        if lt.shape.first() != full.shape.first() {
            return Err(format!(
                "microbatches: the labels ({lt}) and the prediction ({full}) differ in rows"
            ));
        }
        // Cross-entropy divides every microbatch's sum by the whole batch's count of labels
        // (a function of the labels alone, known before any forward op): the step's loss and
        // gradients are the whole batch's even when microbatches ignore different numbers of
        // labels (the mean of per-microbatch means would weigh those unequally). Mean squared
        // error: the mean of equal-sized microbatches' means.
        let count = match &spec.loss {
            Loss::CrossEntropy { ignore_index, .. } => Some(
                loss::counted(&mut bw, labels, *ignore_index, full.elem).map_err(|e| e.message)?,
            ),
            _ => None,
        };
        let mut total: Option<ValueId> = None;
        for (i, copy) in mb.copies.iter().enumerate() {
            bw.at(format!("loss/mb{i}"));
            let p = copy
                .get(&prediction)
                .copied()
                .filter(|&p| microbatch::batch_axis(&full, &bw.ty(p), m) == Some(0))
                .ok_or_else(|| {
                    format!("microbatches: the prediction ({full}) is not split by rows")
                })?;
            let i = i as i64;
            let rows = rows as i64;
            let slice = Op::Slice {
                axes: vec![0],
                starts: vec![i * rows],
                ends: vec![(i + 1) * rows],
                steps: vec![1],
            };
            let l = bw.op(slice, &[labels]).map_err(|e| e.message)?;
            let loss = match (&spec.loss, count) {
                (
                    Loss::CrossEntropy {
                        ignore_index,
                        smoothing,
                    },
                    Some(count),
                ) => loss::cross_entropy_parts(&mut bw, p, l, *ignore_index, *smoothing)
                    .and_then(|(sum, _)| bw.div(sum, count)),
                _ => loss::mse(&mut bw, p, l).and_then(|x| bw.scale(x, 1.0 / m as f64)),
            }
            .map_err(|e| e.message)?;
            total = Some(match total {
                None => loss,
                Some(t) => bw.add(t, loss).map_err(|e| e.message)?,
            });
        }
        total.ok_or("internal error: no microbatch")?
    } else {
        match (&spec.loss, labels) {
            (Loss::Output(_), _) => model_loss.ok_or("internal error: no loss output")?,
            (
                Loss::CrossEntropy {
                    ignore_index,
                    smoothing,
                },
                Some(labels),
            ) => loss::cross_entropy(&mut bw, prediction, labels, *ignore_index, *smoothing)
                .map_err(|e| e.message)?,
            (Loss::Mse, Some(labels)) => {
                loss::mse(&mut bw, prediction, labels).map_err(|e| e.message)?
            }
            _ => return Err("internal error: no labels input".into()),
        }
    };
    let lt = graph.ty(loss).clone();
    if lt.shape.iter().any(|d| *d != Dim::Static(1)) || !lt.elem.is_float() {
        return Err(format!(
            "the loss must be a floating-point scalar, not {lt}"
        ));
    }
    let wrt: Vec<ValueId> = params.iter().map(|p| p.1).collect();
    let mut grads = differentiate(graph, loss, &wrt).map_err(|e| e.message)?;

    let mut bw = Bw::plain(graph, "optimizer");
    if spec.clip_norm > 0.0 {
        bw.at("optimizer/clip");
        grads = optim::clip_by_norm(&mut bw, &grads, spec.clip_norm).map_err(|e| e.message)?;
    }
    bw.at("optimizer/step");
    let one = bw
        .op(
            Op::Fill {
                shape: vec![],
                elem: ElemType::I64,
                value: Scalar::Int(1),
            },
            &[],
        )
        .map_err(|e| e.message)?;
    let next_step = bw.add(step, one).map_err(|e| e.message)?;
    let t = bw.cast(next_step, ElemType::F64).map_err(|e| e.message)?;
    let lr = spec
        .schedule
        .build(&mut bw, spec.optimizer.lr(), t)
        .map_err(|e| e.message)?;
    let mut outputs: Vec<(ValueId, Option<String>)> = vec![(loss, Some("loss".into()))];
    let mut slots: Vec<(ValueId, StateInit, String)> = Vec::new();
    let mut state_outputs = Vec::new();
    for (((c, p), &g), state) in params.iter().zip(&grads).zip(states) {
        let name = bw.g.constant(*c).name.clone();
        bw.at(format!("optimizer/{name}"));
        let vals: Vec<ValueId> = state.iter().map(|s| s.0).collect();
        let up =
            optim::update(&mut bw, &spec.optimizer, *p, g, &vals, t, lr).map_err(|e| e.message)?;
        outputs.push((up.param, Some(name.clone())));
        slots.push((*p, StateInit::Const(*c), name));
        for ((v, sname), nv) in state.into_iter().zip(up.state) {
            state_outputs.push((nv, Some(sname.clone())));
            slots.push((v, StateInit::Zeros, sname));
        }
    }
    for (input, c, next) in running {
        let name = graph.constant(c).name.clone();
        outputs.push((next, Some(name.clone())));
        slots.push((input, StateInit::Const(c), name));
    }
    outputs.extend(state_outputs);
    outputs.push((next_step, Some("step".into())));
    slots.push((step, StateInit::Zeros, "step".into()));
    info.added_ops = graph.ops().len().saturating_sub(before);
    graph.set_named_outputs(outputs);
    graph.state = slots
        .into_iter()
        .map(|(v, init, next)| {
            let ValueDef::Input(i) = graph.value(v).def else {
                unreachable!("state values are inputs")
            };
            StateSlot {
                input: i,
                init,
                next,
                mesh: None,
            }
        })
        .collect();
    graph.state.sort_by_key(|s| s.input);
    crate::dce::dce(graph, &mut Statistics::default());
    Ok(info)
}

/// The constant `v` is the value of, if it is a floating-point constant's `const` op.
fn const_of(graph: &Graph, v: ValueId) -> Option<tessera_ir::ConstId> {
    let ValueDef::Result(o, 0) = graph.value(v).def else {
        return None;
    };
    match graph.op(o).op {
        Op::Const(c) if graph.constant(c).ty.elem.is_float() => Some(c),
        _ => None,
    }
}

/// The `batch-norm` ops whose mean and variance are floating-point constants (their running
/// statistics), with those constants, in body order.
fn batch_norms(graph: &Graph) -> Vec<(OpId, tessera_ir::ConstId, tessera_ir::ConstId)> {
    let mut norms = Vec::new();
    for &o in graph.ops() {
        let d = graph.op(o);
        if let Op::BatchNorm { .. } = d.op
            && let (Some(m), Some(v)) = (
                const_of(graph, d.operands[3]),
                const_of(graph, d.operands[4]),
            )
        {
            norms.push((o, m, v));
        }
    }
    norms
}

/// Each `batch-norm` of `norms` normalizes with its batch's statistics (mean and biased
/// variance over every axis but 1, computed right before it), and its running statistics
/// become state inputs updated as PyTorch does: `(1 - m) * running + m * batch`, with the
/// unbiased variance. Returns (state input, constant, next value) per running statistic.
/// Norms that share their constants (one per microbatch, in microbatch order) share one
/// state: each updates the value the one before it made.
fn batch_stats(
    graph: &mut Graph,
    norms: &[(OpId, tessera_ir::ConstId, tessera_ir::ConstId)],
    momentum: f64,
) -> Result<Vec<(ValueId, tessera_ir::ConstId, ValueId)>, String> {
    let mut out: Vec<(ValueId, tessera_ir::ConstId, ValueId)> = Vec::new();
    for &(o, cm, cv) in norms {
        let data = graph.op(o).clone();
        let x = data.operands[0];
        let xt = graph.ty(x).clone();
        let dims = xt
            .static_dims()
            .ok_or_else(|| format!("batch-norm in training needs static shapes, not {xt}"))?;
        let r = dims.len();
        let count: u64 = dims
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, d)| d)
            .product();
        let loc = data.loc.clone().unwrap_or_else(|| "batch-norm".into());
        let before = graph.ops().len();
        let mut bw = Bw::plain(graph, loc);
        let e = |m: crate::grad::GradError| m.message;
        let axes: Vec<usize> = std::iter::once(0).chain(2..r).collect();
        let mean = bw
            .reduce(tessera_ir::ReduceKind::Mean, x, axes.clone(), true)
            .map_err(e)?;
        let xc = bw.sub(x, mean).map_err(e)?;
        let sq = bw.mul(xc, xc).map_err(e)?;
        let var = bw
            .reduce(tessera_ir::ReduceKind::Mean, sq, axes, true)
            .map_err(e)?;
        let c = vec![Dim::Static(dims[1])];
        let mean = bw.reshape(mean, &c).map_err(e)?;
        let var = bw.reshape(var, &c).map_err(e)?;
        // The statistics' ops go right before the normalization.
        move_new_ops_before(graph, before, o)?;
        graph.op_mut(o).operands[3] = mean;
        graph.op_mut(o).operands[4] = var;
        // The running statistics: state inputs and their updates.
        let mut bw = Bw::plain(graph, "optimizer/running-stats");
        let unbiased = if count > 1 {
            count as f64 / (count - 1) as f64
        } else {
            1.0
        };
        for (cst, batch, scale) in [(cm, mean, 1.0), (cv, var, unbiased)] {
            let earlier = out.iter().position(|r| r.1 == cst);
            let current = match earlier {
                Some(k) => out[k].2,
                None => {
                    let name = bw.g.constant(cst).name.clone();
                    let ty = bw.g.constant(cst).ty.clone();
                    add_input(bw.g, &name, ty)?
                }
            };
            let old = bw.scale(current, 1.0 - momentum).map_err(e)?;
            let new = bw.scale(batch, momentum * scale).map_err(e)?;
            let next = bw.add(old, new).map_err(e)?;
            match earlier {
                Some(k) => out[k].2 = next,
                None => out.push((current, cst, next)),
            }
        }
    }
    Ok(out)
}

/// Moves the ops appended since the body had `before` ops to just before op `at` (ops a
/// rewrite computes for `at` from its operands).
fn move_new_ops_before(graph: &mut Graph, before: usize, at: OpId) -> Result<(), String> {
    let mut order: Vec<OpId> = graph.ops().to_vec();
    let added: Vec<OpId> = order.split_off(before);
    let i = order
        .iter()
        .position(|&q| q == at)
        .ok_or_else(|| format!("internal error: {} not in the body", graph.op(at).op.name()))?;
    order.splice(i..i, added);
    graph.set_ops(order);
    Ok(())
}

/// `base`, or `base_1`, `base_2`, ... when a live value already has that name.
fn fresh_name(graph: &Graph, base: &str) -> String {
    let taken = |n: &str| find_value(graph, n).is_some();
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken(n))
        .unwrap_or_else(|| base.to_string())
}

fn add_input(graph: &mut Graph, name: &str, ty: TensorType) -> Result<ValueId, String> {
    if find_value(graph, name).is_some_and(|v| matches!(graph.value(v).def, ValueDef::Input(_))) {
        return Err(format!("the model already has an input named `{name}`"));
    }
    let v = graph.add_input(None, ty);
    let n = fresh_name(graph, name);
    graph.set_name(v, n);
    Ok(v)
}

const OPTIONS: &[OptionInfo] = &[
    OptionInfo {
        name: "loss",
        kind: OptionKind::Str,
        default: "cross-entropy",
        doc: "cross-entropy (class indices), mse, or output (a loss the model computes: loss-output)",
    },
    OptionInfo {
        name: "loss-output",
        kind: OptionKind::Str,
        default: "",
        doc: "the model output that is the loss, with loss=output",
    },
    OptionInfo {
        name: "prediction",
        kind: OptionKind::Str,
        default: "",
        doc: "the model output the loss reads (default: the first)",
    },
    OptionInfo {
        name: "labels",
        kind: OptionKind::Str,
        default: "labels",
        doc: "the name of the labels input",
    },
    OptionInfo {
        name: "ignore-index",
        kind: OptionKind::Str,
        default: "-100",
        doc: "cross-entropy: labels equal to this are ignored",
    },
    OptionInfo {
        name: "label-smoothing",
        kind: OptionKind::Float,
        default: "0",
        doc: "cross-entropy: label smoothing in [0, 1]",
    },
    OptionInfo {
        name: "optimizer",
        kind: OptionKind::Str,
        default: "sgd{lr=0.01}",
        doc: "sgd{lr momentum dampening nesterov weight-decay}, adam{lr beta1 beta2 eps weight-decay}, adamw{...}",
    },
    OptionInfo {
        name: "schedule",
        kind: OptionKind::Str,
        default: "constant",
        doc: "constant, or warmup-cosine{warmup total min-lr}",
    },
    OptionInfo {
        name: "clip-norm",
        kind: OptionKind::Float,
        default: "0",
        doc: "clip the gradients to this global L2 norm (0: off)",
    },
    OptionInfo {
        name: "params",
        kind: OptionKind::Str,
        default: "",
        doc: "comma-separated constants to train (default: every floating-point constant)",
    },
    OptionInfo {
        name: "bn-momentum",
        kind: OptionKind::Float,
        default: "0.1",
        doc: "batch normalization: the weight of a batch's statistics in the running ones (PyTorch's momentum)",
    },
    OptionInfo {
        name: "microbatches",
        kind: OptionKind::UInt,
        default: "1",
        doc: "run the batch as this many microbatches (rows of the batch inputs), gradients summed before one update",
    },
    OptionInfo {
        name: "freeze",
        kind: OptionKind::Str,
        default: "",
        doc: "a regular expression: constants whose name matches it do not train",
    },
];

/// The registry record of `train`.
pub const INFO: PassInfo = PassInfo {
    name: "train",
    summary: "Builds the training step: parameters as state inputs, loss, backward graph, optimizer update",
    options: OPTIONS,
    create,
};

/// The [`TrainSpec`] of `train`'s options.
pub fn spec_from_options(options: &Options) -> Result<TrainSpec, String> {
    let loss = match options.string("loss") {
        "cross-entropy" => {
            let ii = options.string("ignore-index");
            let ignore_index = ii
                .parse::<i64>()
                .map_err(|_| format!("ignore-index: `{ii}` is not an integer"))?;
            let smoothing = options.float("label-smoothing");
            if !(0.0..=1.0).contains(&smoothing) {
                return Err(format!(
                    "label-smoothing must be in [0, 1], not {smoothing}"
                ));
            }
            Loss::CrossEntropy {
                ignore_index,
                smoothing,
            }
        }
        "mse" => Loss::Mse,
        "output" => {
            let name = options.string("loss-output");
            if name.is_empty() {
                return Err("loss=output needs loss-output=NAME".into());
            }
            Loss::Output(name.to_string())
        }
        other => {
            return Err(format!(
                "unknown loss `{other}` (expected cross-entropy, mse or output)"
            ));
        }
    };
    let clip_norm = options.float("clip-norm");
    if clip_norm < 0.0 {
        return Err("clip-norm must not be negative".into());
    }
    let freeze = match options.string("freeze") {
        "" => None,
        r => Some(Regex::new(r).map_err(|e| format!("freeze: {e}"))?),
    };
    let params = match options.string("params") {
        "" => None,
        l => Some(
            l.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ),
    };
    let prediction = match options.string("prediction") {
        "" => None,
        p => Some(p.to_string()),
    };
    Ok(TrainSpec {
        loss,
        prediction,
        labels: options.string("labels").to_string(),
        optimizer: Optimizer::parse(options.string("optimizer"))?,
        schedule: Schedule::parse(options.string("schedule"))?,
        clip_norm,
        params,
        freeze,
        bn_momentum: {
            let m = options.float("bn-momentum");
            if !(0.0..=1.0).contains(&m) {
                return Err(format!("bn-momentum must be in [0, 1], not {m}"));
            }
            m
        },
        microbatches: match options.uint("microbatches") {
            0 => return Err("microbatches must be at least 1".into()),
            m => m,
        },
    })
}

fn create(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    let spec = spec_from_options(options).map_err(PassError::new)?;
    Ok(Box::new(TrainPass { spec }))
}

struct TrainPass {
    spec: TrainSpec,
}

impl Pass for TrainPass {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let info = build_step(graph, &self.spec).map_err(PassError::new)?;
        stats.add(
            "parameters",
            "constants made trainable parameters",
            info.params.len() as u64,
        );
        stats.add(
            "frozen",
            "floating-point constants frozen",
            info.frozen.len() as u64,
        );
        stats.add(
            "step-ops",
            "ops added for the loss, backward graph and optimizer",
            info.added_ops as u64,
        );
        stats.add(
            "dropouts",
            "dropout ops given their training form",
            info.dropouts as u64,
        );
        Ok(true)
    }
}
