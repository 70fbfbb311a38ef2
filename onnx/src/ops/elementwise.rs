//! Elementwise ONNX ops: unary math and activations, binary arithmetic, comparisons and
//! logic (numpy broadcasting), the variadic Sum/Mean/Max/Min, Clip, Cast, Where, and the
//! pass-through ops Identity and Dropout (inference).

use tessera_ir::{BinaryOp, ElemType, Op, UnaryOp, ValueId};

use super::{Arity, VARIADIC};
use super::{
    Node, Registry, bin, cast_to, elem, input, inputs, known_input, opt_input, scalar, un,
};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("Abs", &[(1, 1, 1)]),
    ("Acos", &[(7, 1, 1)]),
    ("Acosh", &[(9, 1, 1)]),
    ("Add", &[(1, 2, 2)]),
    ("And", &[(1, 2, 2)]),
    ("Asin", &[(7, 1, 1)]),
    ("Asinh", &[(9, 1, 1)]),
    ("Atan", &[(7, 1, 1)]),
    ("Atanh", &[(9, 1, 1)]),
    ("BitShift", &[(11, 2, 2)]),
    ("Cast", &[(1, 1, 1)]),
    ("CastLike", &[(15, 2, 2)]),
    ("Ceil", &[(1, 1, 1)]),
    ("Celu", &[(12, 1, 1)]),
    ("Clip", &[(1, 1, 1), (11, 1, 3)]),
    ("Cos", &[(7, 1, 1)]),
    ("Cosh", &[(9, 1, 1)]),
    ("Div", &[(1, 2, 2)]),
    ("Dropout", &[(1, 1, 1), (12, 1, 3)]),
    ("Elu", &[(1, 1, 1)]),
    ("Equal", &[(1, 2, 2)]),
    ("Erf", &[(9, 1, 1)]),
    ("Exp", &[(1, 1, 1)]),
    ("Floor", &[(1, 1, 1)]),
    ("Gelu", &[(20, 1, 1)]),
    ("Greater", &[(1, 2, 2)]),
    ("GreaterOrEqual", &[(12, 2, 2)]),
    ("HardSigmoid", &[(1, 1, 1)]),
    ("HardSwish", &[(14, 1, 1)]),
    ("Identity", &[(1, 1, 1)]),
    ("IsInf", &[(10, 1, 1)]),
    ("IsNaN", &[(9, 1, 1)]),
    ("LeakyRelu", &[(1, 1, 1)]),
    ("Less", &[(1, 2, 2)]),
    ("LessOrEqual", &[(12, 2, 2)]),
    ("Log", &[(1, 1, 1)]),
    ("Max", &[(1, 1, VARIADIC)]),
    ("Mean", &[(1, 1, VARIADIC)]),
    ("Min", &[(1, 1, VARIADIC)]),
    ("Mish", &[(18, 1, 1)]),
    ("Mod", &[(10, 2, 2)]),
    ("Mul", &[(1, 2, 2)]),
    ("Neg", &[(1, 1, 1)]),
    ("Not", &[(1, 1, 1)]),
    ("Or", &[(1, 2, 2)]),
    ("PRelu", &[(1, 2, 2)]),
    ("Pow", &[(1, 2, 2)]),
    ("Reciprocal", &[(1, 1, 1)]),
    ("Relu", &[(1, 1, 1)]),
    ("Round", &[(11, 1, 1)]),
    ("Selu", &[(1, 1, 1)]),
    ("Shrink", &[(9, 1, 1)]),
    ("Sigmoid", &[(1, 1, 1)]),
    ("Sign", &[(9, 1, 1)]),
    ("Sin", &[(7, 1, 1)]),
    ("Sinh", &[(9, 1, 1)]),
    ("Softplus", &[(1, 1, 1)]),
    ("Softsign", &[(1, 1, 1)]),
    ("Sqrt", &[(1, 1, 1)]),
    ("Sub", &[(1, 2, 2)]),
    ("Sum", &[(1, 1, VARIADIC)]),
    ("Swish", &[(24, 1, 1)]),
    ("Tan", &[(7, 1, 1)]),
    ("Tanh", &[(1, 1, 1)]),
    ("ThresholdedRelu", &[(10, 1, 1)]),
    ("Where", &[(9, 3, 3)]),
    ("Xor", &[(1, 2, 2)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    macro_rules! unary {
        ($($name:literal => $op:expr),* $(,)?) => {
            $(r.add($name, 1, |cx, n| {
                let x = input(cx, n, 0)?;
                Ok(vec![cx.emit1(Op::Unary($op), &[x])?])
            });)*
        };
    }
    unary! {
        "Abs" => UnaryOp::Abs, "Neg" => UnaryOp::Neg, "Sign" => UnaryOp::Sign,
        "Exp" => UnaryOp::Exp, "Log" => UnaryOp::Log, "Sqrt" => UnaryOp::Sqrt,
        "Reciprocal" => UnaryOp::Reciprocal, "Sin" => UnaryOp::Sin, "Cos" => UnaryOp::Cos,
        "Tan" => UnaryOp::Tan, "Asin" => UnaryOp::Asin, "Acos" => UnaryOp::Acos,
        "Atan" => UnaryOp::Atan, "Tanh" => UnaryOp::Tanh, "Sigmoid" => UnaryOp::Sigmoid,
        "Erf" => UnaryOp::Erf, "Relu" => UnaryOp::Relu, "Ceil" => UnaryOp::Ceil,
        "Floor" => UnaryOp::Floor, "Round" => UnaryOp::Round, "Softplus" => UnaryOp::Softplus,
        "Softsign" => UnaryOp::Softsign, "Mish" => UnaryOp::Mish, "HardSwish" => UnaryOp::HardSwish,
        "Not" => UnaryOp::Not, "IsNaN" => UnaryOp::IsNan,
    }
    r.add("Sinh", 9, |cx, n| hyperbolic(cx, n, Hyperbolic::Sinh));
    r.add("Cosh", 9, |cx, n| hyperbolic(cx, n, Hyperbolic::Cosh));
    r.add("Asinh", 9, |cx, n| hyperbolic(cx, n, Hyperbolic::Asinh));
    r.add("Acosh", 9, |cx, n| hyperbolic(cx, n, Hyperbolic::Acosh));
    r.add("Atanh", 9, |cx, n| hyperbolic(cx, n, Hyperbolic::Atanh));
    r.add("IsInf", 10, is_inf);
    r.add("Swish", 24, |cx, n| {
        // Swish-24: `x * sigmoid(alpha * x)`, alpha default 1.
        let alpha = f64::from(n.attr_f_or("alpha", 1.0)?);
        let x = input(cx, n, 0)?;
        let a = scalar(cx, elem(cx, x), alpha)?;
        let ax = bin(cx, BinaryOp::Mul, a, x)?;
        let s = un(cx, UnaryOp::Sigmoid, ax)?;
        Ok(vec![bin(cx, BinaryOp::Mul, x, s)?])
    });
    r.add("ThresholdedRelu", 10, |cx, n| {
        // ThresholdedRelu-10: `x if x > alpha else 0`, alpha default 1.
        let alpha = f64::from(n.attr_f_or("alpha", 1.0)?);
        let x = input(cx, n, 0)?;
        let a = scalar(cx, elem(cx, x), alpha)?;
        let zero = scalar(cx, elem(cx, x), 0.0)?;
        let keep = bin(cx, BinaryOp::Greater, x, a)?;
        Ok(vec![cx.emit1(Op::Select, &[keep, x, zero])?])
    });
    r.add("Celu", 12, |cx, n| {
        // Celu-12: `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`, which is
        // `alpha * elu(x / alpha)` with elu's alpha 1.
        let alpha = f64::from(n.attr_f_or("alpha", 1.0)?);
        if alpha == 0.0 {
            return Err("attribute `alpha` must not be 0".into());
        }
        let x = input(cx, n, 0)?;
        let a = scalar(cx, elem(cx, x), alpha)?;
        let xa = bin(cx, BinaryOp::Div, x, a)?;
        let e = un(cx, UnaryOp::Elu { alpha: 1.0 }, xa)?;
        Ok(vec![bin(cx, BinaryOp::Mul, a, e)?])
    });
    r.add("Shrink", 9, |cx, n| {
        // Shrink-9: `x + bias if x < -lambd`, `x - bias if x > lambd`, else 0.
        let lambd = f64::from(n.attr_f_or("lambd", 0.5)?);
        let bias = f64::from(n.attr_f_or("bias", 0.0)?);
        let x = input(cx, n, 0)?;
        let t = elem(cx, x);
        let (lo, hi) = (scalar(cx, t, -lambd)?, scalar(cx, t, lambd)?);
        let (b, zero) = (scalar(cx, t, bias)?, scalar(cx, t, 0.0)?);
        let below = bin(cx, BinaryOp::Less, x, lo)?;
        let above = bin(cx, BinaryOp::Greater, x, hi)?;
        let plus = bin(cx, BinaryOp::Add, x, b)?;
        let minus = bin(cx, BinaryOp::Sub, x, b)?;
        let upper = cx.emit1(Op::Select, &[above, minus, zero])?;
        Ok(vec![cx.emit1(Op::Select, &[below, plus, upper])?])
    });
    r.add("CastLike", 15, |cx, n| {
        // CastLike-15/19/21: Cast to the element type of input 1 (`saturate` only matters
        // for float8 targets, which the IR lacks).
        let x = input(cx, n, 0)?;
        let like = input(cx, n, 1)?;
        let to = elem(cx, like);
        Ok(vec![cast_to(cx, x, to)?])
    });
    r.add("Gelu", 20, |cx, n| {
        let x = input(cx, n, 0)?;
        let tanh = match n.attr_s("approximate")?.as_deref() {
            None | Some("none") => false,
            Some("tanh") => true,
            Some(other) => {
                return Err(format!(
                    "approximate = \"{other}\" is not one of \"none\", \"tanh\""
                ));
            }
        };
        Ok(vec![cx.emit1(Op::Unary(UnaryOp::Gelu { tanh }), &[x])?])
    });
    r.add("Elu", 1, |cx, n| {
        let alpha = f64::from(n.attr_f_or("alpha", 1.0)?);
        let x = input(cx, n, 0)?;
        Ok(vec![cx.emit1(Op::Unary(UnaryOp::Elu { alpha }), &[x])?])
    });
    r.add("LeakyRelu", 1, |cx, n| {
        let alpha = f64::from(n.attr_f_or("alpha", 0.01)?);
        let x = input(cx, n, 0)?;
        Ok(vec![
            cx.emit1(Op::Unary(UnaryOp::LeakyRelu { alpha }), &[x])?,
        ])
    });
    r.add("Selu", 1, |cx, n| {
        let alpha = f64::from(n.attr_f_or("alpha", 1.673_263_2)?);
        let gamma = f64::from(n.attr_f_or("gamma", 1.050_701)?);
        let x = input(cx, n, 0)?;
        Ok(vec![
            cx.emit1(Op::Unary(UnaryOp::Selu { alpha, gamma }), &[x])?,
        ])
    });
    r.add("HardSigmoid", 1, |cx, n| {
        let alpha = f64::from(n.attr_f_or("alpha", 0.2)?);
        let beta = f64::from(n.attr_f_or("beta", 0.5)?);
        let x = input(cx, n, 0)?;
        Ok(vec![cx.emit1(
            Op::Unary(UnaryOp::HardSigmoid { alpha, beta }),
            &[x],
        )?])
    });

    macro_rules! binary {
        ($($name:literal => $op:expr),* $(,)?) => {
            $(r.add($name, 1, |cx, n| binary(cx, n, $op));)*
        };
    }
    binary! {
        "Add" => BinaryOp::Add, "Sub" => BinaryOp::Sub, "Mul" => BinaryOp::Mul, "Div" => BinaryOp::Div,
        "And" => BinaryOp::And, "Or" => BinaryOp::Or, "Xor" => BinaryOp::Xor,
        "Equal" => BinaryOp::Equal, "Less" => BinaryOp::Less, "LessOrEqual" => BinaryOp::LessEqual,
        "Greater" => BinaryOp::Greater, "GreaterOrEqual" => BinaryOp::GreaterEqual,
        "PRelu" => BinaryOp::Prelu,
    }
    r.add("Pow", 1, |cx, n| {
        // The exponent may have another element type than the base; compute in the base's.
        let x = input(cx, n, 0)?;
        let y = input(cx, n, 1)?;
        let y = cast_to(cx, y, elem(cx, x))?;
        Ok(vec![cx.emit1(Op::Binary(BinaryOp::Pow), &[x, y])?])
    });
    r.add("Mod", 10, |cx, n| {
        let fmod = n.attr_i_or("fmod", 0)?;
        // fmod = 0 is Python's `%` (the sign of the divisor), which is the IR's `mod` for
        // integers and floats alike; fmod = 1 is C's `fmod` (the sign of the dividend).
        binary(
            cx,
            n,
            if fmod == 0 {
                BinaryOp::Mod
            } else {
                BinaryOp::Fmod
            },
        )
    });

    r.add("BitShift", 11, |cx, n| {
        let op = match n.attr_s("direction")?.as_deref() {
            Some("LEFT") => BinaryOp::ShiftLeft,
            Some("RIGHT") => BinaryOp::ShiftRight,
            Some(d) => {
                return Err(format!(
                    "direction = \"{d}\" is not one of \"LEFT\", \"RIGHT\""
                ));
            }
            None => return Err("attribute `direction` is required".into()),
        };
        binary(cx, n, op)
    });

    r.add("Sum", 1, |cx, n| variadic(cx, n, BinaryOp::Add));
    r.add("Max", 1, |cx, n| variadic(cx, n, BinaryOp::Max));
    r.add("Min", 1, |cx, n| variadic(cx, n, BinaryOp::Min));
    r.add("Mean", 1, |cx, n| {
        let sum = variadic(cx, n, BinaryOp::Add)?[0];
        let count = scalar(cx, elem(cx, sum), n.num_inputs() as f64)?;
        Ok(vec![cx.emit1(Op::Binary(BinaryOp::Div), &[sum, count])?])
    });

    r.add("Clip", 1, clip);
    r.add("Cast", 1, |cx, n| {
        let to = n.attr_i("to")?.ok_or("attribute `to` is required")?;
        let to = crate::decode::elem_type(
            i32::try_from(to).map_err(|_| format!("bad element type code {to}"))?,
        )?;
        let x = input(cx, n, 0)?;
        Ok(vec![cast_to(cx, x, to)?])
    });
    r.add("Where", 1, |cx, n| {
        let (c, x, y) = (input(cx, n, 0)?, input(cx, n, 1)?, input(cx, n, 2)?);
        Ok(vec![cx.emit1(Op::Select, &[c, x, y])?])
    });
    r.add("Identity", 1, |cx, n| Ok(vec![input(cx, n, 0)?]));
    r.add("Dropout", 1, |cx, n| {
        // Inference: the data passes through; the optional mask is all true. Training mode
        // (opset 12+: input 2 true) drops at random unless the ratio (input 1) is 0.
        let x = input(cx, n, 0)?;
        if cx.training {
            let ratio = dropout_ratio(cx, n)?;
            if ratio > 0.0 {
                let outs = cx.emit(Op::Dropout { ratio }, &[x])?;
                return Ok(outs[..n.num_outputs().clamp(1, 2)].to_vec());
            }
        }
        if dropout_training(cx, n)? {
            return Err("training-mode Dropout is not supported".into());
        }
        let mut outs = vec![x];
        if n.num_outputs() > 1 {
            let shape = cx.ty(x).shape.clone();
            outs.push(cx.emit1(
                Op::Fill {
                    shape,
                    elem: ElemType::Bool,
                    value: tessera_ir::Scalar::Int(1),
                },
                &[],
            )?);
        }
        Ok(outs)
    });
}

/// A Dropout node's ratio: input 1 (opset 12+) or the `ratio` attribute, 0.5 by default.
fn dropout_ratio(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<f64, String> {
    let ratio = if n.has_input(1) {
        let t = known_input(cx, n, 1).ok_or("input 1 (ratio) must be known at import time")?;
        t.to_f64_vec()
            .first()
            .copied()
            .ok_or("input 1 (ratio) is empty")?
    } else {
        n.attr_f("ratio")?.map_or(0.5, f64::from)
    };
    if !(0.0..=1.0).contains(&ratio) {
        return Err(format!("the ratio must be in [0, 1], got {ratio}"));
    }
    Ok(ratio)
}

/// Whether a Dropout node (opset 12+: `Dropout(data, ratio, training_mode)`) drops values:
/// `training_mode` is true and the ratio (default 0.5) is not 0. An unknown training mode or
/// an unknown ratio in training mode is an error.
fn dropout_training(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<bool, String> {
    if !n.has_input(2) {
        return Ok(false);
    }
    let mode =
        known_input(cx, n, 2).ok_or("input 2 (training_mode) must be known at import time")?;
    if mode.to_f64_vec().first().is_none_or(|&m| m == 0.0) {
        return Ok(false);
    }
    if !n.has_input(1) {
        return Ok(true);
    }
    let ratio = known_input(cx, n, 1).ok_or("training-mode Dropout is not supported")?;
    Ok(ratio.to_f64_vec().first().is_none_or(|&r| r != 0.0))
}

fn binary(cx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>, String> {
    if n.attr_i("broadcast")?.is_some_and(|b| b != 0) && n.attr_i("axis")?.is_some() {
        return Err(
            "legacy broadcasting with an `axis` attribute (opset < 7) is not supported".into(),
        );
    }
    let x = input(cx, n, 0)?;
    let y = input(cx, n, 1)?;
    Ok(vec![cx.emit1(Op::Binary(op), &[x, y])?])
}

/// Folds a variadic op into a chain of binary ops, left to right.
fn variadic(cx: &mut Ctx<'_>, n: &Node<'_>, op: BinaryOp) -> Result<Vec<ValueId>, String> {
    let xs = inputs(cx, n)?;
    let (first, rest) = xs.split_first().ok_or("needs at least one input")?;
    let mut acc = *first;
    for &x in rest {
        acc = cx.emit1(Op::Binary(op), &[acc, x])?;
    }
    Ok(vec![acc])
}

/// ONNX Clip is `min(max(x, min), max)`, so `min > max` makes every value `max`: the IR's
/// `clip` requires `min <= max`, and `[max, max]` gives the same result.
fn ordered_bounds(min: Option<f64>, max: Option<f64>) -> (Option<f64>, Option<f64>) {
    match (min, max) {
        (Some(lo), Some(hi)) if lo > hi => (Some(hi), Some(hi)),
        other => other,
    }
}

/// Clip: bounds are attributes before opset 11 and optional inputs after. Known bounds become
/// the `clip` op's attributes; bounds computed at run time become `max`/`min` ops.
fn clip(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    if cx.opset < 11 {
        let min = n.attr_f("min")?.map(f64::from);
        let max = n.attr_f("max")?.map(f64::from);
        let (min, max) = ordered_bounds(min, max);
        return Ok(vec![cx.emit1(Op::Clip { min, max }, &[x])?]);
    }
    let mut bounds = [None, None];
    let mut dynamic = [None, None];
    for (i, slot) in bounds.iter_mut().enumerate() {
        match known_input(cx, n, i + 1) {
            Some(t) if t.len() == 1 => *slot = Some(t.to_f64_vec()[0]),
            _ => dynamic[i] = opt_input(cx, n, i + 1)?,
        }
    }
    if dynamic.iter().all(Option::is_none) {
        let (min, max) = ordered_bounds(bounds[0], bounds[1]);
        return Ok(vec![cx.emit1(Op::Clip { min, max }, &[x])?]);
    }
    // A bound computed at run time: the lower bound first, then the upper one.
    let mut y = x;
    if let Some(lo) = dynamic[0] {
        y = cx.emit1(Op::Binary(BinaryOp::Max), &[y, lo])?;
    } else if bounds[0].is_some() {
        y = cx.emit1(
            Op::Clip {
                min: bounds[0],
                max: None,
            },
            &[y],
        )?;
    }
    if let Some(hi) = dynamic[1] {
        y = cx.emit1(Op::Binary(BinaryOp::Min), &[y, hi])?;
    } else if bounds[1].is_some() {
        y = cx.emit1(
            Op::Clip {
                min: None,
                max: bounds[1],
            },
            &[y],
        )?;
    }
    Ok(vec![y])
}

/// The hyperbolic functions the IR lacks, composed from exp, log and sqrt (ONNX opset 9):
/// `sinh = (e^x - e^-x) / 2`, `cosh = (e^x + e^-x) / 2`, `asinh = ln(x + sqrt(x^2 + 1))`,
/// `acosh = ln(x + sqrt(x^2 - 1))`, `atanh = ln((1 + x) / (1 - x)) / 2`.
#[derive(Clone, Copy)]
enum Hyperbolic {
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
}

fn hyperbolic(cx: &mut Ctx<'_>, n: &Node<'_>, f: Hyperbolic) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    let t = elem(cx, x);
    if !t.is_float() {
        return Err(format!("input must be floating-point, got {t}"));
    }
    let one = scalar(cx, t, 1.0)?;
    let half = scalar(cx, t, 0.5)?;
    let y = match f {
        Hyperbolic::Sinh | Hyperbolic::Cosh => {
            let ep = un(cx, UnaryOp::Exp, x)?;
            let nx = un(cx, UnaryOp::Neg, x)?;
            let en = un(cx, UnaryOp::Exp, nx)?;
            let op = if matches!(f, Hyperbolic::Sinh) {
                BinaryOp::Sub
            } else {
                BinaryOp::Add
            };
            let s = bin(cx, op, ep, en)?;
            bin(cx, BinaryOp::Mul, s, half)?
        }
        Hyperbolic::Asinh | Hyperbolic::Acosh => {
            let x2 = bin(cx, BinaryOp::Mul, x, x)?;
            let op = if matches!(f, Hyperbolic::Asinh) {
                BinaryOp::Add
            } else {
                BinaryOp::Sub
            };
            let r = bin(cx, op, x2, one)?;
            let r = un(cx, UnaryOp::Sqrt, r)?;
            let s = bin(cx, BinaryOp::Add, x, r)?;
            un(cx, UnaryOp::Log, s)?
        }
        Hyperbolic::Atanh => {
            let num = bin(cx, BinaryOp::Add, one, x)?;
            let den = bin(cx, BinaryOp::Sub, one, x)?;
            let q = bin(cx, BinaryOp::Div, num, den)?;
            let l = un(cx, UnaryOp::Log, q)?;
            bin(cx, BinaryOp::Mul, l, half)?
        }
    };
    Ok(vec![y])
}

/// IsInf-10: true where `x` is +inf (when `detect_positive`, default 1) or -inf (when
/// `detect_negative`, default 1); compares with the infinities.
fn is_inf(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let pos = n.attr_i_or("detect_positive", 1)? != 0;
    let neg = n.attr_i_or("detect_negative", 1)? != 0;
    let x = input(cx, n, 0)?;
    let t = elem(cx, x);
    if !t.is_float() {
        return Err(format!("input must be floating-point, got {t}"));
    }
    let y = match (pos, neg) {
        (true, true) => {
            let a = un(cx, UnaryOp::Abs, x)?;
            let inf = scalar(cx, t, f64::INFINITY)?;
            bin(cx, BinaryOp::Equal, a, inf)?
        }
        (true, false) | (false, true) => {
            let inf = scalar(
                cx,
                t,
                if pos {
                    f64::INFINITY
                } else {
                    f64::NEG_INFINITY
                },
            )?;
            bin(cx, BinaryOp::Equal, x, inf)?
        }
        (false, false) => {
            let shape = cx.ty(x).shape.clone();
            cx.emit1(
                Op::Fill {
                    shape,
                    elem: ElemType::Bool,
                    value: tessera_ir::Scalar::Int(0),
                },
                &[],
            )?
        }
    };
    Ok(vec![y])
}
