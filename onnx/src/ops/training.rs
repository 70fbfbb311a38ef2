//! The `ai.onnx.preview.training` domain: the optimizers `Adagrad`, `Momentum` and `Adam`,
//! each expanded into elementwise IR ops, one update per optimized tensor, with the formulas
//! of the ONNX specification (and its reference implementation), the learning rate `R`
//! (float scalar) and the update count `T` (i64 scalar) computed in each tensor's element
//! type; and `Gradient`, the gradients of a scalar `y` with respect to the tensors `xs`,
//! built by tessera's autodiff (`tessera_passes::grad::differentiate`) from the graph
//! imported so far.

use tessera_ir::{BinaryOp as B, ElemType, Op, UnaryOp as U, ValueId};

use super::{Builder, Node, cast_to, input, scalar};
use crate::import::Ctx;

/// The domain of these ops.
pub(crate) const DOMAIN: &str = "ai.onnx.preview.training";

/// The supported ops of [`DOMAIN`] (opset 1) and their builders.
pub(crate) const OPS: &[(&str, Builder)] = &[
    ("Adagrad", adagrad),
    ("Momentum", momentum),
    ("Adam", adam),
    ("Gradient", gradient),
];

/// `Gradient{xs, y}`: one output per name of `xs`, the gradient of `y` with respect to it.
/// `y` must be a floating-point scalar computed from them earlier in the graph.
fn gradient(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let xs = node
        .attr_strings("xs")?
        .ok_or("attribute `xs` is required")?;
    let y = node.attr_s("y")?.ok_or("attribute `y` is required")?;
    if node.num_outputs() > xs.len() {
        return Err(format!(
            "Gradient gives one output per entry of xs ({}), not {}",
            xs.len(),
            node.num_outputs()
        ));
    }
    let wrt: Vec<ValueId> = xs
        .iter()
        .map(|n| cx.lookup(n).map_err(|e| format!("xs: {e}")))
        .collect::<Result<_, _>>()?;
    let loss = cx.lookup(&y).map_err(|e| format!("y: {e}"))?;
    tessera_passes::grad::differentiate(&mut cx.g, loss, &wrt).map_err(|e| e.message)
}

fn bin(cx: &mut Ctx<'_>, b: B, x: ValueId, y: ValueId) -> Result<ValueId, String> {
    cx.emit1(Op::Binary(b), &[x, y])
}

fn num(cx: &mut Ctx<'_>, e: ElemType, x: f64) -> Result<ValueId, String> {
    scalar(cx, e, x)
}

/// `a * x + y` for a number `a`.
fn axpy(cx: &mut Ctx<'_>, a: f64, x: ValueId, y: ValueId) -> Result<ValueId, String> {
    let e = cx.ty(x).elem;
    let a = num(cx, e, a)?;
    let ax = bin(cx, B::Mul, a, x)?;
    bin(cx, B::Add, ax, y)
}

/// The inputs after `R, T`, split into `groups` equal lists; checks the float types.
fn groups(cx: &mut Ctx<'_>, node: &Node<'_>, groups: usize) -> Result<Vec<Vec<ValueId>>, String> {
    let n = node.num_inputs();
    if n < 2 + groups || !(n - 2).is_multiple_of(groups) {
        return Err(format!(
            "{} takes R, T and {groups} lists of equal length; got {n} inputs",
            node.op_type()
        ));
    }
    let k = (n - 2) / groups;
    if node.num_outputs() > k * (groups - 1) {
        return Err(format!(
            "{} gives {} outputs for {k} tensors",
            node.op_type(),
            k * (groups - 1)
        ));
    }
    let mut out = Vec::with_capacity(groups);
    for g in 0..groups {
        let mut list = Vec::with_capacity(k);
        for i in 0..k {
            let v = input(cx, node, 2 + g * k + i)?;
            if !cx.ty(v).elem.is_float() {
                return Err(format!("input {} must be floating point", 2 + g * k + i));
            }
            list.push(v);
        }
        out.push(list);
    }
    Ok(out)
}

/// `R` and `T` (as `T` and as a float) in element type `e`.
fn rate_and_count(
    cx: &mut Ctx<'_>,
    node: &Node<'_>,
    e: ElemType,
) -> Result<(ValueId, ValueId, ValueId), String> {
    let r = input(cx, node, 0)?;
    let t = input(cx, node, 1)?;
    if cx.ty(r).num_elements() != Some(1) || cx.ty(t).num_elements() != Some(1) {
        return Err("R and T must be scalars".into());
    }
    let r = cast_to(cx, r, e)?;
    let tf = cast_to(cx, t, e)?;
    Ok((r, t, tf))
}

/// `norm_coefficient * X + G`.
fn regularized(
    cx: &mut Ctx<'_>,
    node: &Node<'_>,
    x: ValueId,
    g: ValueId,
) -> Result<ValueId, String> {
    let c = f64::from(node.attr_f_or("norm_coefficient", 0.0)?);
    if c == 0.0 { Ok(g) } else { axpy(cx, c, x, g) }
}

fn adagrad(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let lists = groups(cx, node, 3)?;
    let decay = f64::from(node.attr_f_or("decay_factor", 0.0)?);
    let eps = f64::from(node.attr_f_or("epsilon", 0.0)?);
    let (mut xs, mut hs) = (Vec::new(), Vec::new());
    for ((&x, &g), &h) in lists[0].iter().zip(&lists[1]).zip(&lists[2]) {
        let e = cx.ty(x).elem;
        let (r, _, tf) = rate_and_count(cx, node, e)?;
        // r / (1 + T * decay_factor)
        let one = num(cx, e, 1.0)?;
        let d = axpy(cx, decay, tf, one)?;
        let r = bin(cx, B::Div, r, d)?;
        let g = regularized(cx, node, x, g)?;
        let gg = bin(cx, B::Mul, g, g)?;
        let h_new = bin(cx, B::Add, h, gg)?;
        let s = cx.emit1(Op::Unary(U::Sqrt), &[h_new])?;
        let epsv = num(cx, e, eps)?;
        let s = bin(cx, B::Add, s, epsv)?;
        let step = bin(cx, B::Mul, r, g)?;
        let step = bin(cx, B::Div, step, s)?;
        xs.push(bin(cx, B::Sub, x, step)?);
        hs.push(h_new);
    }
    xs.extend(hs);
    Ok(xs)
}

fn momentum(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let lists = groups(cx, node, 3)?;
    let req =
        |v: Option<f32>, what: &str| v.ok_or_else(|| format!("attribute `{what}` is required"));
    let alpha = f64::from(req(node.attr_f("alpha")?, "alpha")?);
    let beta = f64::from(req(node.attr_f("beta")?, "beta")?);
    let mode = node.attr_s("mode")?.ok_or("attribute `mode` is required")?;
    let nesterov = match mode.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => return Err(format!("mode `{m}` is neither `standard` nor `nesterov`")),
    };
    let (mut xs, mut vs) = (Vec::new(), Vec::new());
    for ((&x, &g), &v) in lists[0].iter().zip(&lists[1]).zip(&lists[2]) {
        let e = cx.ty(x).elem;
        let (r, t, _) = rate_and_count(cx, node, e)?;
        let g = regularized(cx, node, x, g)?;
        // beta, or 1 at the first update (T == 0)
        let zero = scalar(cx, cx.ty(t).elem, 0.0)?;
        let later = bin(cx, B::Greater, t, zero)?;
        let b = num(cx, e, beta)?;
        let one = num(cx, e, 1.0)?;
        let b = cx.emit1(Op::Select, &[later, b, one])?;
        let bg = bin(cx, B::Mul, b, g)?;
        let v_new = axpy(cx, alpha, v, bg)?;
        let dir = if nesterov {
            axpy(cx, alpha, v_new, g)?
        } else {
            v_new
        };
        let step = bin(cx, B::Mul, r, dir)?;
        xs.push(bin(cx, B::Sub, x, step)?);
        vs.push(v_new);
    }
    xs.extend(vs);
    Ok(xs)
}

fn adam(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let lists = groups(cx, node, 4)?;
    let alpha = f64::from(node.attr_f_or("alpha", 0.9)?);
    let beta = f64::from(node.attr_f_or("beta", 0.999)?);
    let eps = f64::from(node.attr_f_or("epsilon", 0.0)?);
    let post = f64::from(node.attr_f_or("norm_coefficient_post", 0.0)?);
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    for (((&x, &g), &v), &h) in lists[0].iter().zip(&lists[1]).zip(&lists[2]).zip(&lists[3]) {
        let e = cx.ty(x).elem;
        let (r, t, tf) = rate_and_count(cx, node, e)?;
        let g = regularized(cx, node, x, g)?;
        let ga = num(cx, e, 1.0 - alpha)?;
        let ga = bin(cx, B::Mul, ga, g)?;
        let v_new = axpy(cx, alpha, v, ga)?;
        let gg = bin(cx, B::Mul, g, g)?;
        let gb = num(cx, e, 1.0 - beta)?;
        let gb = bin(cx, B::Mul, gb, gg)?;
        let h_new = axpy(cx, beta, h, gb)?;
        let s = cx.emit1(Op::Unary(U::Sqrt), &[h_new])?;
        let epsv = num(cx, e, eps)?;
        let s = bin(cx, B::Add, s, epsv)?;
        // R * sqrt(1 - beta^T) / (1 - alpha^T) when T > 0, else R
        let one = num(cx, e, 1.0)?;
        let a = num(cx, e, alpha)?;
        let b = num(cx, e, beta)?;
        let at = bin(cx, B::Pow, a, tf)?;
        let bt = bin(cx, B::Pow, b, tf)?;
        let ca = bin(cx, B::Sub, one, at)?;
        let cb = bin(cx, B::Sub, one, bt)?;
        let cb = cx.emit1(Op::Unary(U::Sqrt), &[cb])?;
        let adj = bin(cx, B::Mul, r, cb)?;
        let adj = bin(cx, B::Div, adj, ca)?;
        let zero = scalar(cx, cx.ty(t).elem, 0.0)?;
        let later = bin(cx, B::Greater, t, zero)?;
        let r = cx.emit1(Op::Select, &[later, adj, r])?;
        let q = bin(cx, B::Div, v_new, s)?;
        let step = bin(cx, B::Mul, r, q)?;
        let x_new = bin(cx, B::Sub, x, step)?;
        let x_new = if post == 0.0 {
            x_new
        } else {
            let f = num(cx, e, 1.0 - post)?;
            bin(cx, B::Mul, f, x_new)?
        };
        xs.push(x_new);
        vs.push(v_new);
        hs.push(h_new);
    }
    xs.extend(vs);
    xs.extend(hs);
    Ok(xs)
}
