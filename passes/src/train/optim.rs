//! Optimizers and learning-rate schedules: their text specs and the update ops, with
//! `torch.optim`'s formulas.

use tessera_ir::{BinaryOp as B, ElemType, UnaryOp as U, ValueId};

use crate::grad::{Bw, R};

/// An optimizer and its hyperparameters (`torch.optim`'s names and defaults).
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.SGD`.
    Sgd {
        /// Learning rate.
        lr: f64,
        /// Momentum factor (0: none).
        momentum: f64,
        /// Dampening of the momentum.
        dampening: f64,
        /// Nesterov momentum.
        nesterov: bool,
        /// L2 penalty added to the gradient.
        weight_decay: f64,
    },
    /// `torch.optim.Adam` (`decoupled: false`) or `torch.optim.AdamW` (`true`).
    Adam {
        /// Learning rate.
        lr: f64,
        /// First-moment decay.
        beta1: f64,
        /// Second-moment decay.
        beta2: f64,
        /// Added to the denominator.
        eps: f64,
        /// Weight decay: L2 added to the gradient (Adam) or decoupled (AdamW).
        weight_decay: f64,
        /// AdamW's decoupled weight decay.
        decoupled: bool,
    },
}

/// `name` or `name{key=value key=value}` (spaces or commas between entries).
fn split_spec(spec: &str) -> Result<(String, Vec<(String, String)>), String> {
    let spec = spec.trim();
    let (name, rest) = match spec.find('{') {
        Some(i) => {
            let body = spec[i + 1..]
                .strip_suffix('}')
                .ok_or_else(|| format!("`{spec}`: missing `}}` at the end"))?;
            (&spec[..i], body)
        }
        None => (spec, ""),
    };
    let mut entries = Vec::new();
    for item in rest.split([' ', ',']).filter(|s| !s.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("`{spec}`: `{item}` is not `key=value`"))?;
        if entries.iter().any(|(e, _): &(String, String)| e == k) {
            return Err(format!("`{spec}`: `{k}` is given twice"));
        }
        entries.push((k.to_string(), v.to_string()));
    }
    Ok((name.trim().to_string(), entries))
}

fn number(spec: &str, key: &str, v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("`{spec}`: {key}: `{v}` is not a finite number"))
}

fn unknown(spec: &str, key: &str, known: &[&str]) -> String {
    format!(
        "`{spec}`: unknown option `{key}` (expected one of: {})",
        known.join(", ")
    )
}

impl Optimizer {
    /// Parses `sgd{lr=0.1 momentum=0.9}`, `adam{...}`, `adamw{lr=1e-3 weight-decay=0.01}`.
    pub fn parse(spec: &str) -> Result<Optimizer, String> {
        let (name, entries) = split_spec(spec)?;
        let opt = match name.as_str() {
            "sgd" => {
                const KEYS: &[&str] = &["lr", "momentum", "dampening", "nesterov", "weight-decay"];
                let (mut lr, mut momentum, mut dampening, mut nesterov, mut wd) =
                    (1e-3, 0.0, 0.0, false, 0.0);
                for (k, v) in &entries {
                    match k.as_str() {
                        "lr" => lr = number(spec, k, v)?,
                        "momentum" => momentum = number(spec, k, v)?,
                        "dampening" => dampening = number(spec, k, v)?,
                        "weight-decay" => wd = number(spec, k, v)?,
                        "nesterov" => {
                            nesterov = match v.as_str() {
                                "true" => true,
                                "false" => false,
                                _ => {
                                    return Err(format!(
                                        "`{spec}`: nesterov: `{v}` is not `true` or `false`"
                                    ));
                                }
                            }
                        }
                        _ => return Err(unknown(spec, k, KEYS)),
                    }
                }
                if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                    return Err(format!(
                        "`{spec}`: nesterov momentum needs a momentum above 0 and zero dampening"
                    ));
                }
                Optimizer::Sgd {
                    lr,
                    momentum,
                    dampening,
                    nesterov,
                    weight_decay: wd,
                }
            }
            "adam" | "adamw" => {
                const KEYS: &[&str] = &["lr", "beta1", "beta2", "eps", "weight-decay"];
                let decoupled = name == "adamw";
                let (mut lr, mut beta1, mut beta2, mut eps) = (1e-3, 0.9, 0.999, 1e-8);
                let mut wd = if decoupled { 0.01 } else { 0.0 };
                for (k, v) in &entries {
                    match k.as_str() {
                        "lr" => lr = number(spec, k, v)?,
                        "beta1" => beta1 = number(spec, k, v)?,
                        "beta2" => beta2 = number(spec, k, v)?,
                        "eps" => eps = number(spec, k, v)?,
                        "weight-decay" => wd = number(spec, k, v)?,
                        _ => return Err(unknown(spec, k, KEYS)),
                    }
                }
                for (k, b) in [("beta1", beta1), ("beta2", beta2)] {
                    if !(0.0..1.0).contains(&b) {
                        return Err(format!("`{spec}`: {k} must be in [0, 1), not {b}"));
                    }
                }
                Optimizer::Adam {
                    lr,
                    beta1,
                    beta2,
                    eps,
                    weight_decay: wd,
                    decoupled,
                }
            }
            _ => {
                return Err(format!(
                    "unknown optimizer `{name}` (expected sgd, adam or adamw)"
                ));
            }
        };
        let lr = match opt {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => lr,
        };
        if lr < 0.0 {
            return Err(format!("`{spec}`: the learning rate must not be negative"));
        }
        Ok(opt)
    }

    /// The base learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Optimizer::Sgd { lr, .. } | Optimizer::Adam { lr, .. } => *lr,
        }
    }

    /// The names of the per-parameter state tensors, as `torch.optim` calls them.
    pub fn state_names(&self) -> &'static [&'static str] {
        match self {
            Optimizer::Sgd { momentum, .. } if *momentum != 0.0 => &["momentum_buffer"],
            Optimizer::Sgd { .. } => &[],
            Optimizer::Adam { .. } => &["exp_avg", "exp_avg_sq"],
        }
    }
}

/// A learning-rate schedule over the step number `t` (1 for the first step).
#[derive(Clone, Debug, PartialEq)]
pub enum Schedule {
    /// The optimizer's learning rate throughout.
    Constant,
    /// Linear warmup over the first `warmup` steps (`lr * t / warmup`), then a cosine decay
    /// from `lr` to `min_lr` over the steps up to `total`, `min_lr` after.
    WarmupCosine {
        /// Warmup steps.
        warmup: u64,
        /// The step at which the decay reaches `min_lr`.
        total: u64,
        /// The final learning rate.
        min_lr: f64,
    },
}

impl Schedule {
    /// Parses `constant` or `warmup-cosine{warmup=100 total=1000 min-lr=0}`.
    pub fn parse(spec: &str) -> Result<Schedule, String> {
        let (name, entries) = split_spec(spec)?;
        match name.as_str() {
            "constant" if entries.is_empty() => Ok(Schedule::Constant),
            "constant" => Err(format!("`{spec}`: `constant` takes no options")),
            "warmup-cosine" => {
                let (mut warmup, mut total, mut min_lr) = (0, None, 0.0);
                for (k, v) in &entries {
                    let n = || {
                        v.parse::<u64>()
                            .map_err(|_| format!("`{spec}`: {k}: `{v}` is not a step count"))
                    };
                    match k.as_str() {
                        "warmup" => warmup = n()?,
                        "total" => total = Some(n()?),
                        "min-lr" => min_lr = number(spec, k, v)?,
                        _ => return Err(unknown(spec, k, &["warmup", "total", "min-lr"])),
                    }
                }
                let total = total.ok_or_else(|| format!("`{spec}`: `total` is required"))?;
                if total <= warmup {
                    return Err(format!("`{spec}`: `total` must exceed `warmup`"));
                }
                Ok(Schedule::WarmupCosine {
                    warmup,
                    total,
                    min_lr,
                })
            }
            _ => Err(format!(
                "unknown schedule `{name}` (expected constant or warmup-cosine)"
            )),
        }
    }

    /// The learning rate at step `t` (an f64 scalar value), from the base rate `lr`.
    pub(crate) fn build(&self, bw: &mut Bw<'_>, lr: f64, t: ValueId) -> R<ValueId> {
        let f = ElemType::F64;
        match *self {
            Schedule::Constant => bw.scalar(lr, f),
            Schedule::WarmupCosine {
                warmup,
                total,
                min_lr,
            } => {
                // s = t - 1, the number of steps taken before this one.
                let s = bw.offset(t, -1.0)?;
                let span = (total - warmup) as f64;
                let p = bw.offset(s, -(warmup as f64))?;
                let p = bw.scale(p, 1.0 / span)?;
                let p = bw.op(
                    tessera_ir::Op::Clip {
                        min: Some(0.0),
                        max: Some(1.0),
                    },
                    &[p],
                )?;
                let c = bw.scale(p, std::f64::consts::PI)?;
                let c = bw.un(U::Cos, c)?;
                let c = bw.offset(c, 1.0)?;
                let c = bw.scale(c, 0.5 * (lr - min_lr))?;
                let decay = bw.offset(c, min_lr)?;
                if warmup == 0 {
                    return Ok(decay);
                }
                let warm = bw.scale(t, lr / warmup as f64)?;
                let in_warmup = bw.cmp_num(B::LessEqual, t, warmup as f64)?;
                bw.select(in_warmup, warm, decay)
            }
        }
    }
}

/// One parameter's update: the new parameter and the new values of its optimizer state.
pub(crate) struct Update {
    pub param: ValueId,
    pub state: Vec<ValueId>,
}

/// Builds the update of parameter `p` with gradient `g` and optimizer state `state` (in
/// [`Optimizer::state_names`] order), at step `t` (f64 scalar) with learning rate `lr` (f64
/// scalar).
pub(crate) fn update(
    bw: &mut Bw<'_>,
    opt: &Optimizer,
    p: ValueId,
    g: ValueId,
    state: &[ValueId],
    t: ValueId,
    lr: ValueId,
) -> R<Update> {
    let e = bw.elem(p);
    let lr_e = bw.cast(lr, e)?;
    match *opt {
        Optimizer::Sgd {
            momentum,
            dampening,
            nesterov,
            weight_decay,
            ..
        } => {
            let mut g = g;
            if weight_decay != 0.0 {
                let d = bw.scale(p, weight_decay)?;
                g = bw.add(g, d)?;
            }
            let mut new_state = Vec::new();
            if momentum != 0.0 {
                // The first step starts the buffer at the gradient (no dampening).
                let buf = bw.scale(state[0], momentum)?;
                let dg = bw.scale(g, 1.0 - dampening)?;
                let next = bw.add(buf, dg)?;
                let first = bw.cmp_num(B::Equal, t, 1.0)?;
                let buf = bw.select(first, g, next)?;
                new_state.push(buf);
                g = if nesterov {
                    let m = bw.scale(buf, momentum)?;
                    bw.add(g, m)?
                } else {
                    buf
                };
            }
            let step = bw.mul(g, lr_e)?;
            Ok(Update {
                param: bw.sub(p, step)?,
                state: new_state,
            })
        }
        Optimizer::Adam {
            beta1,
            beta2,
            eps,
            weight_decay,
            decoupled,
            ..
        } => {
            let mut g = g;
            let mut p0 = p;
            if weight_decay != 0.0 {
                if decoupled {
                    // p * (1 - lr * wd)
                    let f = bw.scale(lr, -weight_decay)?;
                    let f = bw.offset(f, 1.0)?;
                    let f = bw.cast(f, e)?;
                    p0 = bw.mul(p, f)?;
                } else {
                    let d = bw.scale(p, weight_decay)?;
                    g = bw.add(g, d)?;
                }
            }
            let m = bw.scale(state[0], beta1)?;
            let dm = bw.scale(g, 1.0 - beta1)?;
            let m = bw.add(m, dm)?;
            let v = bw.scale(state[1], beta2)?;
            let gg = bw.mul(g, g)?;
            let dv = bw.scale(gg, 1.0 - beta2)?;
            let v = bw.add(v, dv)?;
            // Bias corrections in f64, as torch computes them in Python floats.
            let f = ElemType::F64;
            let b1 = bw.scalar(beta1, f)?;
            let b2 = bw.scalar(beta2, f)?;
            let one = bw.scalar(1.0, f)?;
            let b1t = bw.bin(B::Pow, b1, t)?;
            let b2t = bw.bin(B::Pow, b2, t)?;
            let bc1 = bw.sub(one, b1t)?;
            let bc2 = bw.sub(one, b2t)?;
            let step_size = bw.div(lr, bc1)?;
            let step_size = bw.cast(step_size, e)?;
            let bc2_sqrt = bw.un(U::Sqrt, bc2)?;
            let bc2_sqrt = bw.cast(bc2_sqrt, e)?;
            // p - step_size * m / (sqrt(v) / sqrt(bc2) + eps)
            let sv = bw.un(U::Sqrt, v)?;
            let denom = bw.div(sv, bc2_sqrt)?;
            let denom = bw.offset(denom, eps)?;
            let r = bw.div(m, denom)?;
            let r = bw.mul(r, step_size)?;
            Ok(Update {
                param: bw.sub(p0, r)?,
                state: vec![m, v],
            })
        }
    }
}

/// Scales every gradient so that their global L2 norm is at most `max_norm`
/// (`torch.nn.utils.clip_grad_norm_`: the factor `max_norm / (norm + 1e-6)`, capped at 1).
pub(crate) fn clip_by_norm(bw: &mut Bw<'_>, grads: &[ValueId], max_norm: f64) -> R<Vec<ValueId>> {
    let f = ElemType::F64;
    let mut total: Option<ValueId> = None;
    for &g in grads {
        let s = bw.op(
            tessera_ir::Op::Reduce {
                kind: tessera_ir::ReduceKind::SumSquare,
                axes: vec![],
                keep_dims: false,
            },
            &[g],
        )?;
        let s = bw.cast(s, f)?;
        total = Some(match total {
            None => s,
            Some(t) => bw.add(t, s)?,
        });
    }
    let Some(total) = total else {
        return Ok(vec![]);
    };
    let norm = bw.un(U::Sqrt, total)?;
    let d = bw.offset(norm, 1e-6)?;
    let m = bw.scalar(max_norm, f)?;
    let coef = bw.div(m, d)?;
    let one = bw.scalar(1.0, f)?;
    let coef = bw.bin(B::Min, coef, one)?;
    grads
        .iter()
        .map(|&g| {
            let c = bw.cast(coef, bw.elem(g))?;
            bw.mul(g, c)
        })
        .collect()
}
