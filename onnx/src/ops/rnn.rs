//! Recurrent ONNX ops: RNN, GRU and LSTM, unrolled over the (static) sequence into
//! matmuls and elementwise ops.
//!
//! Each direction's input projection `X @ W^T + bias` is one matmul over the whole sequence;
//! the recurrence is one matmul per step. Gate orders follow the spec: GRU `z, r, h`;
//! LSTM `i, o, f, c` with peepholes `i, o, f`.

use tessera_ir::{BinaryOp, Dim, ElemType, Op, Scalar, UnaryOp, ValueId};

use super::Arity;
use super::{Node, Registry, input, opt_input, reshape, scalar, slice_axis, transpose};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("GRU", &[(1, 3, 6)]),
    ("LSTM", &[(1, 3, 8)]),
    ("RNN", &[(1, 3, 6)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("RNN", 7, |cx, n| recurrent(cx, n, Cell::Rnn));
    r.add("GRU", 7, |cx, n| recurrent(cx, n, Cell::Gru));
    r.add("LSTM", 7, |cx, n| recurrent(cx, n, Cell::Lstm));
}

/// The longest sequence that is unrolled.
const MAX_STEPS: u64 = 1 << 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> u64 {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation function of the `activations` attribute, with its parameters.
#[derive(Clone, Copy)]
enum Act {
    Unary(UnaryOp),
    /// `alpha * x + beta`.
    Affine(f64, f64),
    /// `alpha * tanh(beta * x)`.
    ScaledTanh(f64, f64),
    /// `x` if `x > alpha` else 0.
    ThresholdedRelu(f64),
}

/// Parses the activation list, consuming `activation_alpha` / `activation_beta` in order.
fn activations(n: &Node<'_>, cell: Cell, dirs: usize) -> Result<Vec<Act>, String> {
    let defaults = cell.default_activations();
    let names: Vec<String> = match n.attr_strings("activations")? {
        Some(v) => v,
        None => defaults
            .iter()
            .cycle()
            .take(defaults.len() * dirs)
            .map(|s| s.to_string())
            .collect(),
    };
    let names: Vec<String> = if names.len() == defaults.len() && dirs == 2 {
        names.iter().chain(&names).cloned().collect()
    } else {
        names
    };
    if names.len() != defaults.len() * dirs {
        return Err(format!(
            "attribute `activations` has {} entries, expected {} per direction",
            names.len(),
            defaults.len()
        ));
    }
    let alphas = n.attr_floats("activation_alpha")?.unwrap_or_default();
    let betas = n.attr_floats("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (0, 0);
    let mut alpha = |default: f64| {
        ai += 1;
        alphas.get(ai - 1).map_or(default, |&a| f64::from(a))
    };
    let mut beta = |default: f64| {
        bi += 1;
        betas.get(bi - 1).map_or(default, |&b| f64::from(b))
    };
    names
        .iter()
        .map(|name| {
            Ok(match name.to_ascii_lowercase().as_str() {
                "relu" => Act::Unary(UnaryOp::Relu),
                "tanh" => Act::Unary(UnaryOp::Tanh),
                "sigmoid" => Act::Unary(UnaryOp::Sigmoid),
                "softsign" => Act::Unary(UnaryOp::Softsign),
                "softplus" => Act::Unary(UnaryOp::Softplus),
                "elu" => Act::Unary(UnaryOp::Elu { alpha: alpha(1.0) }),
                "leakyrelu" => Act::Unary(UnaryOp::LeakyRelu { alpha: alpha(0.01) }),
                "hardsigmoid" => Act::Unary(UnaryOp::HardSigmoid {
                    alpha: alpha(0.2),
                    beta: beta(0.5),
                }),
                "affine" => Act::Affine(alpha(1.0), beta(0.0)),
                "scaledtanh" => Act::ScaledTanh(alpha(1.0), beta(1.0)),
                "thresholdedrelu" => Act::ThresholdedRelu(alpha(1.0)),
                _ => return Err(format!("activation `{name}` is not supported")),
            })
        })
        .collect()
}

/// The per-node settings shared by every step.
struct Rec {
    cell: Cell,
    elem: ElemType,
    hidden: u64,
    clip: Option<f64>,
    linear_before_reset: bool,
    input_forget: bool,
}

impl Rec {
    fn scalar(&self, cx: &mut Ctx<'_>, x: f64) -> Result<ValueId, String> {
        scalar(cx, self.elem, x)
    }

    /// `act(clip(x))`: the clip bounds the gates' inputs to their activations.
    fn activate(&self, cx: &mut Ctx<'_>, act: Act, x: ValueId) -> Result<ValueId, String> {
        let x = match self.clip {
            Some(c) => cx.emit1(
                Op::Clip {
                    min: Some(-c),
                    max: Some(c),
                },
                &[x],
            )?,
            None => x,
        };
        self.apply(cx, act, x)
    }

    /// `act(x)`.
    fn apply(&self, cx: &mut Ctx<'_>, act: Act, x: ValueId) -> Result<ValueId, String> {
        match act {
            Act::Unary(u) => cx.emit1(Op::Unary(u), &[x]),
            Act::Affine(a, b) => {
                let (a, b) = (self.scalar(cx, a)?, self.scalar(cx, b)?);
                let ax = bin(cx, BinaryOp::Mul, x, a)?;
                bin(cx, BinaryOp::Add, ax, b)
            }
            Act::ScaledTanh(a, b) => {
                let (a, b) = (self.scalar(cx, a)?, self.scalar(cx, b)?);
                let bx = bin(cx, BinaryOp::Mul, x, b)?;
                let t = cx.emit1(Op::Unary(UnaryOp::Tanh), &[bx])?;
                bin(cx, BinaryOp::Mul, t, a)
            }
            Act::ThresholdedRelu(a) => {
                let (a, zero) = (self.scalar(cx, a)?, self.scalar(cx, 0.0)?);
                let keep = bin(cx, BinaryOp::Greater, x, a)?;
                cx.emit1(Op::Select, &[keep, x, zero])
            }
        }
    }
}

fn bin(cx: &mut Ctx<'_>, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId, String> {
    cx.emit1(Op::Binary(op), &[a, b])
}

/// Row `d` of a `[D, ...]` tensor, without the leading axis.
fn direction_slice(cx: &mut Ctx<'_>, v: ValueId, d: usize) -> Result<ValueId, String> {
    let part = slice_axis(cx, v, 0, d as i64, d as i64 + 1)?;
    let shape = cx.ty(part).shape[1..].to_vec();
    reshape(cx, part, shape)
}

/// The inputs of one direction.
struct DirInputs {
    /// `X @ W^T + bias`, one `[B, gates*H]` value per step.
    xw: Vec<ValueId>,
    /// `R^T` (`[H, gates*H]`); for GRU split into the `z, r` and the `h` columns.
    rt: Vec<ValueId>,
    /// GRU: the recurrent bias of the `h` gate.
    rb_h: Option<ValueId>,
    /// LSTM peepholes `i, o, f`.
    peep: Option<[ValueId; 3]>,
    acts: Vec<Act>,
}

fn recurrent(cx: &mut Ctx<'_>, n: &Node<'_>, cell: Cell) -> Result<Vec<ValueId>, String> {
    let (dirs, reverse) = match n.attr_s("direction")?.as_deref() {
        None | Some("forward") => (1, false),
        Some("reverse") => (1, true),
        Some("bidirectional") => (2, false),
        Some(other) => {
            return Err(format!(
                "direction = \"{other}\" is not one of forward, reverse, bidirectional"
            ));
        }
    };
    let layout = n.attr_i_or("layout", 0)?;
    if layout != 0 && layout != 1 {
        return Err(format!("layout = {layout} is not 0 or 1"));
    }
    let batch_major = layout == 1;
    let acts = activations(n, cell, dirs)?;

    let mut x = input(cx, n, 0)?;
    if cx.ty(x).rank() != 3 {
        return Err(format!("input X must have rank 3, got {}", cx.ty(x)));
    }
    if batch_major {
        x = transpose(cx, x, vec![1, 0, 2])?;
    }
    let elem = cx.ty(x).elem;
    let seq = cx.ty(x).shape[0]
        .as_static()
        .ok_or("the sequence length of X is symbolic; bind it with --input-shape")?;
    if seq == 0 || seq > MAX_STEPS {
        return Err(format!(
            "the sequence length of X is {seq}; unrolling supports 1 to {MAX_STEPS} steps"
        ));
    }
    let batch = cx.ty(x).shape[1].clone();
    let w = input(cx, n, 1)?;
    let r = input(cx, n, 2)?;
    for (v, what) in [(w, "W"), (r, "R")] {
        let ty = cx.ty(v);
        if ty.rank() != 3 || ty.shape[0] != Dim::Static(dirs as u64) {
            return Err(format!(
                "input {what} must have shape [{dirs}, ...] for this direction, got {ty}"
            ));
        }
    }
    let hidden = match n.attr_i("hidden_size")? {
        Some(h) => u64::try_from(h)
            .ok()
            .filter(|&h| h > 0)
            .ok_or_else(|| format!("attribute `hidden_size` must be positive, got {h}"))?,
        None => cx.ty(r).shape[2]
            .as_static()
            .ok_or("the hidden size (last extent of R) is symbolic")?,
    };
    // R is [dirs, gates * hidden, hidden]: its last extent bounds the hidden size (an
    // attribute of 2^62 overflowed the gate sizes computed from it: found by fuzzing).
    match cx.ty(r).shape[2].as_static() {
        Some(e) if e == hidden => {}
        Some(e) => {
            return Err(format!(
                "attribute `hidden_size` is {hidden}, but R's last extent is {e}"
            ));
        }
        None => return Err("the hidden size (last extent of R) is symbolic".into()),
    }
    // Sequence lengths: none, all equal to the sequence length, or a per-batch mask.
    let lens = match opt_input(cx, n, 4)? {
        Some(lens) => match super::known_input(cx, n, 4)
            .as_ref()
            .and_then(super::tensor_ints)
        {
            Some(known) if known.iter().all(|&l| l == seq as i64) => None,
            _ => {
                let b = vec![batch.clone(), Dim::Static(1)];
                Some(reshape(cx, lens, b)?)
            }
        },
        None => None,
    };
    let rec = Rec {
        cell,
        elem,
        hidden,
        clip: n.attr_f("clip")?.map(f64::from),
        linear_before_reset: n.attr_i_or("linear_before_reset", 0)? != 0,
        input_forget: n.attr_i_or("input_forget", 0)? != 0,
    };
    let b = opt_input(cx, n, 3)?;
    let p = if cell == Cell::Lstm {
        opt_input(cx, n, 7)?
    } else {
        None
    };
    let g = cell.gates();
    for (v, what, per_dir) in [(b, "B", 2 * g * hidden), (p, "P", 3 * hidden)] {
        let want = [Dim::Static(dirs as u64), Dim::Static(per_dir)];
        if let Some(v) = v
            && cx.ty(v).shape != want
        {
            return Err(format!(
                "input {what} must have shape [{dirs}, {per_dir}], got {}",
                cx.ty(v)
            ));
        }
    }
    // Initial states [D, B, H] (batch-major: [B, D, H]).
    let initial = |cx: &mut Ctx<'_>, i: usize| -> Result<Option<ValueId>, String> {
        match opt_input(cx, n, i)? {
            Some(v) if batch_major => transpose(cx, v, vec![1, 0, 2]).map(Some),
            other => Ok(other),
        }
    };
    let h0 = initial(cx, 5)?;
    let c0 = if cell == Cell::Lstm {
        initial(cx, 6)?
    } else {
        None
    };
    let zeros = cx.emit1(
        Op::Fill {
            shape: vec![batch.clone(), Dim::Static(hidden)],
            elem,
            value: Scalar::Float(0.0),
        },
        &[],
    )?;

    let per_dir = acts.len() / dirs;
    let (mut ys, mut hs, mut cs) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..dirs {
        let inputs = DirInputs {
            xw: project(cx, &rec, x, w, b, d, seq)?,
            rt: {
                let rd = direction_slice(cx, r, d)?;
                let rt = transpose(cx, rd, vec![1, 0])?;
                if cell == Cell::Gru {
                    let sizes = vec![2 * hidden, hidden];
                    cx.emit(Op::Split { axis: 1, sizes }, &[rt])?
                } else {
                    vec![rt]
                }
            },
            rb_h: match (cell, b) {
                (Cell::Gru, Some(b)) => {
                    let bd = direction_slice(cx, b, d)?;
                    let h = hidden as i64;
                    Some(slice_axis(cx, bd, 0, 5 * h, 6 * h)?)
                }
                _ => None,
            },
            peep: match p {
                Some(p) => {
                    let pd = direction_slice(cx, p, d)?;
                    let h = hidden as i64;
                    Some([
                        slice_axis(cx, pd, 0, 0, h)?,
                        slice_axis(cx, pd, 0, h, 2 * h)?,
                        slice_axis(cx, pd, 0, 2 * h, 3 * h)?,
                    ])
                }
                None => None,
            },
            acts: acts[d * per_dir..(d + 1) * per_dir].to_vec(),
        };
        let state = |cx: &mut Ctx<'_>, s: Option<ValueId>| -> Result<ValueId, String> {
            match s {
                Some(s) => direction_slice(cx, s, d),
                None => Ok(zeros),
            }
        };
        let mut h = state(cx, h0)?;
        let mut c = state(cx, c0)?;
        let mut outs = vec![zeros; seq as usize];
        let backward = reverse || d == 1;
        for step in 0..seq as usize {
            let t = if backward {
                seq as usize - 1 - step
            } else {
                step
            };
            let (h_new, c_new) = cell_step(cx, &rec, &inputs, inputs.xw[t], h, c)?;
            match lens {
                // Steps at or past a sequence's length keep its state and output zeros;
                // backward, such a sequence starts at its own last step.
                Some(lens) => {
                    let tv = scalar(cx, cx.ty(lens).elem, t as f64)?;
                    let live = bin(cx, BinaryOp::Less, tv, lens)?;
                    h = cx.emit1(Op::Select, &[live, h_new, h])?;
                    if cell == Cell::Lstm {
                        c = cx.emit1(Op::Select, &[live, c_new, c])?;
                    }
                    outs[t] = cx.emit1(Op::Select, &[live, h_new, zeros])?;
                }
                None => {
                    (h, c) = (h_new, c_new);
                    outs[t] = h;
                }
            }
        }
        // Y of this direction: [S, 1, B, H].
        let y_shape = vec![
            Dim::Static(1),
            Dim::Static(1),
            batch.clone(),
            Dim::Static(hidden),
        ];
        let steps = outs
            .into_iter()
            .map(|o| reshape(cx, o, y_shape.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        ys.push(cx.emit1(Op::Concat { axis: 0 }, &steps)?);
        let last_shape = vec![Dim::Static(1), batch.clone(), Dim::Static(hidden)];
        hs.push(reshape(cx, h, last_shape.clone())?);
        if cell == Cell::Lstm {
            cs.push(reshape(cx, c, last_shape)?);
        }
    }
    let y = cx.emit1(Op::Concat { axis: 1 }, &ys)?;
    let y_h = cx.emit1(Op::Concat { axis: 0 }, &hs)?;
    let mut outs = vec![y, y_h];
    if cell == Cell::Lstm {
        outs.push(cx.emit1(Op::Concat { axis: 0 }, &cs)?);
    }
    if batch_major {
        outs[0] = transpose(cx, outs[0], vec![2, 0, 1, 3])?;
        for o in &mut outs[1..] {
            *o = transpose(cx, *o, vec![1, 0, 2])?;
        }
    }
    Ok(outs)
}

/// `X @ W[d]^T + bias` for every step (`[B, gates*H]` each). The bias is `Wb + Rb`, except
/// for GRU's `h` gate, whose recurrent bias is added inside the step.
fn project(
    cx: &mut Ctx<'_>,
    rec: &Rec,
    x: ValueId,
    w: ValueId,
    b: Option<ValueId>,
    d: usize,
    seq: u64,
) -> Result<Vec<ValueId>, String> {
    let g = (rec.cell.gates() * rec.hidden) as i64;
    let wd = direction_slice(cx, w, d)?;
    let wt = transpose(cx, wd, vec![1, 0])?;
    let mut xw = cx.emit1(Op::MatMul, &[x, wt])?;
    if let Some(b) = b {
        let bd = direction_slice(cx, b, d)?;
        let wb = slice_axis(cx, bd, 0, 0, g)?;
        let rb = if rec.cell == Cell::Gru {
            let zr = slice_axis(cx, bd, 0, g, g + 2 * rec.hidden as i64)?;
            let zeros = cx.emit1(
                Op::Fill {
                    shape: vec![Dim::Static(rec.hidden)],
                    elem: rec.elem,
                    value: Scalar::Float(0.0),
                },
                &[],
            )?;
            cx.emit1(Op::Concat { axis: 0 }, &[zr, zeros])?
        } else {
            slice_axis(cx, bd, 0, g, 2 * g)?
        };
        let bias = bin(cx, BinaryOp::Add, wb, rb)?;
        xw = bin(cx, BinaryOp::Add, xw, bias)?;
    }
    let batch = cx.ty(x).shape[1].clone();
    let steps = cx.emit(
        Op::Split {
            axis: 0,
            sizes: vec![1; seq as usize],
        },
        &[xw],
    )?;
    steps
        .into_iter()
        .map(|s| reshape(cx, s, vec![batch.clone(), Dim::Static(g as u64)]))
        .collect()
}

/// One step: the new hidden state and (LSTM) cell state.
fn cell_step(
    cx: &mut Ctx<'_>,
    rec: &Rec,
    inp: &DirInputs,
    xw: ValueId,
    h: ValueId,
    c: ValueId,
) -> Result<(ValueId, ValueId), String> {
    let hid = rec.hidden;
    let acts = &inp.acts;
    let split =
        |cx: &mut Ctx<'_>, v: ValueId, sizes: Vec<u64>| cx.emit(Op::Split { axis: 1, sizes }, &[v]);
    match rec.cell {
        Cell::Rnn => {
            let hr = cx.emit1(Op::MatMul, &[h, inp.rt[0]])?;
            let pre = bin(cx, BinaryOp::Add, xw, hr)?;
            Ok((rec.activate(cx, acts[0], pre)?, c))
        }
        Cell::Gru => {
            let x_parts = split(cx, xw, vec![2 * hid, hid])?;
            let r_parts = &inp.rt;
            let hzr = cx.emit1(Op::MatMul, &[h, r_parts[0]])?;
            let zr = bin(cx, BinaryOp::Add, x_parts[0], hzr)?;
            let zr = rec.activate(cx, acts[0], zr)?;
            let zr = split(cx, zr, vec![hid, hid])?;
            let (z, r) = (zr[0], zr[1]);
            let mut hh = if rec.linear_before_reset {
                cx.emit1(Op::MatMul, &[h, r_parts[1]])?
            } else {
                let rh = bin(cx, BinaryOp::Mul, r, h)?;
                cx.emit1(Op::MatMul, &[rh, r_parts[1]])?
            };
            if let Some(rb) = inp.rb_h {
                hh = bin(cx, BinaryOp::Add, hh, rb)?;
            }
            if rec.linear_before_reset {
                hh = bin(cx, BinaryOp::Mul, r, hh)?;
            }
            let pre = bin(cx, BinaryOp::Add, x_parts[1], hh)?;
            let cand = rec.activate(cx, acts[1], pre)?;
            // (1 - z) * cand + z * h
            let diff = bin(cx, BinaryOp::Sub, h, cand)?;
            let zd = bin(cx, BinaryOp::Mul, z, diff)?;
            Ok((bin(cx, BinaryOp::Add, cand, zd)?, c))
        }
        Cell::Lstm => {
            let hr = cx.emit1(Op::MatMul, &[h, inp.rt[0]])?;
            let pre = bin(cx, BinaryOp::Add, xw, hr)?;
            let g = split(cx, pre, vec![hid; 4])?;
            let (mut i, mut o, mut f, cc) = (g[0], g[1], g[2], g[3]);
            if let Some([pi, _, pf]) = inp.peep {
                let pic = bin(cx, BinaryOp::Mul, pi, c)?;
                i = bin(cx, BinaryOp::Add, i, pic)?;
                let pfc = bin(cx, BinaryOp::Mul, pf, c)?;
                f = bin(cx, BinaryOp::Add, f, pfc)?;
            }
            let i = rec.activate(cx, acts[0], i)?;
            let f = if rec.input_forget {
                let one = rec.scalar(cx, 1.0)?;
                bin(cx, BinaryOp::Sub, one, i)?
            } else {
                rec.activate(cx, acts[0], f)?
            };
            let cand = rec.activate(cx, acts[1], cc)?;
            let fc = bin(cx, BinaryOp::Mul, f, c)?;
            let ic = bin(cx, BinaryOp::Mul, i, cand)?;
            let c_new = bin(cx, BinaryOp::Add, fc, ic)?;
            if let Some([_, po, _]) = inp.peep {
                let poc = bin(cx, BinaryOp::Mul, po, c_new)?;
                o = bin(cx, BinaryOp::Add, o, poc)?;
            }
            let o = rec.activate(cx, acts[0], o)?;
            // The cell state itself is not clipped (as onnxruntime does).
            let hc = rec.apply(cx, acts[2], c_new)?;
            Ok((bin(cx, BinaryOp::Mul, o, hc)?, c_new))
        }
    }
}
