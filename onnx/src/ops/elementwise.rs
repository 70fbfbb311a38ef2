//! Elementwise ONNX ops: unary math and activations, binary arithmetic, comparisons and
//! logic (numpy broadcasting), the variadic Sum/Mean/Max/Min, Clip, Cast, Where, and the
//! pass-through ops Identity and Dropout (inference).

use tessera_ir::{BinaryOp, ElemType, Op, UnaryOp, ValueId};

use super::{Node, Registry, cast_to, elem, input, inputs, known_input, opt_input, scalar};
use crate::import::Ctx;

pub(crate) fn register(r: &mut Registry) {
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
        let x = input(cx, n, 0)?;
        if fmod == 0 && elem(cx, x).is_float() {
            return Err("fmod = 0 is not defined for floating-point inputs (use fmod = 1)".into());
        }
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
        // Inference: the data passes through; the optional mask is all true.
        let x = input(cx, n, 0)?;
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

/// Clip: bounds are attributes before opset 11 and optional inputs after. Known bounds become
/// the `clip` op's attributes; bounds computed at run time become `max`/`min` ops.
fn clip(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let x = input(cx, n, 0)?;
    if cx.opset < 11 {
        let min = n.attr_f("min")?.map(f64::from);
        let max = n.attr_f("max")?.map(f64::from);
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
    let mut y = if bounds.iter().any(Option::is_some) || dynamic.iter().all(Option::is_none) {
        cx.emit1(
            Op::Clip {
                min: bounds[0],
                max: bounds[1],
            },
            &[x],
        )?
    } else {
        x
    };
    if let Some(lo) = dynamic[0] {
        y = cx.emit1(Op::Binary(BinaryOp::Max), &[y, lo])?;
    }
    if let Some(hi) = dynamic[1] {
        y = cx.emit1(Op::Binary(BinaryOp::Min), &[y, hi])?;
    }
    Ok(vec![y])
}
