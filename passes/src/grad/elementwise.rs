//! Rules of the elementwise ops: unary functions, binary arithmetic (with broadcasting undone
//! by summing), `select`, `cast`, `clip`.

use tessera_ir::{BinaryOp as B, Op, OpData, UnaryOp as U, ValueId};

use super::{Bw, R, g0};

/// `d/dx f(x) * g` for every differentiable unary function.
pub(crate) fn unary(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let x = data.operands[0];
    let y = data.results[0];
    let Op::Unary(u) = data.op else {
        return Err(bw.err("internal error: not a unary op"));
    };
    let dx = match u {
        U::Abs => {
            let s = bw.un(U::Sign, x)?;
            bw.mul(g, s)?
        }
        U::Neg => bw.un(U::Neg, g)?,
        U::Exp => bw.mul(g, y)?,
        U::Log => bw.div(g, x)?,
        U::Sqrt => {
            let t = bw.div(g, y)?;
            bw.scale(t, 0.5)?
        }
        U::Reciprocal => {
            let yy = bw.mul(y, y)?;
            let t = bw.mul(g, yy)?;
            bw.un(U::Neg, t)?
        }
        U::Sin => {
            let c = bw.un(U::Cos, x)?;
            bw.mul(g, c)?
        }
        U::Cos => {
            let s = bw.un(U::Sin, x)?;
            let t = bw.mul(g, s)?;
            bw.un(U::Neg, t)?
        }
        U::Tan => {
            let yy = bw.mul(y, y)?;
            let d = bw.offset(yy, 1.0)?;
            bw.mul(g, d)?
        }
        U::Asin | U::Acos => {
            // 1 / sqrt(1 - x^2), negated for acos.
            let xx = bw.mul(x, x)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let r = bw.sub(one, xx)?;
            let s = bw.un(U::Sqrt, r)?;
            let t = bw.div(g, s)?;
            if u == U::Acos { bw.un(U::Neg, t)? } else { t }
        }
        U::Atan => {
            let xx = bw.mul(x, x)?;
            let d = bw.offset(xx, 1.0)?;
            bw.div(g, d)?
        }
        U::Tanh => {
            let yy = bw.mul(y, y)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let d = bw.sub(one, yy)?;
            bw.mul(g, d)?
        }
        U::Sigmoid => {
            let one = bw.scalar(1.0, bw.elem(x))?;
            let c = bw.sub(one, y)?;
            let d = bw.mul(y, c)?;
            bw.mul(g, d)?
        }
        U::Erf => {
            let xx = bw.mul(x, x)?;
            let n = bw.un(U::Neg, xx)?;
            let e = bw.un(U::Exp, n)?;
            let d = bw.scale(e, std::f64::consts::FRAC_2_SQRT_PI)?;
            bw.mul(g, d)?
        }
        U::Relu => {
            let c = bw.cmp_num(B::Greater, x, 0.0)?;
            bw.mask(c, g)?
        }
        U::Softplus => {
            let s = bw.un(U::Sigmoid, x)?;
            bw.mul(g, s)?
        }
        U::Softsign => {
            let a = bw.un(U::Abs, x)?;
            let d = bw.offset(a, 1.0)?;
            let dd = bw.mul(d, d)?;
            bw.div(g, dd)?
        }
        U::Mish => {
            // d/dx x tanh(sp(x)) = tanh(sp) + x (1 - tanh(sp)^2) sigmoid(x)
            let sp = bw.un(U::Softplus, x)?;
            let t = bw.un(U::Tanh, sp)?;
            let tt = bw.mul(t, t)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let c = bw.sub(one, tt)?;
            let s = bw.un(U::Sigmoid, x)?;
            let xs = bw.mul(x, s)?;
            let r = bw.mul(xs, c)?;
            let d = bw.add(t, r)?;
            bw.mul(g, d)?
        }
        U::HardSwish => {
            // 0 below -3, x/3 + 1/2 on [-3, 3], 1 above (PyTorch's choice at the ends).
            let mid = bw.scale(x, 1.0 / 3.0)?;
            let mid = bw.offset(mid, 0.5)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let upper = bw.cmp_num(B::LessEqual, x, 3.0)?;
            let d = bw.select(upper, mid, one)?;
            let lower = bw.cmp_num(B::GreaterEqual, x, -3.0)?;
            let d = bw.mask(lower, d)?;
            bw.mul(g, d)?
        }
        U::Gelu { tanh: false } => {
            // Phi(x) + x phi(x)
            let e = bw.elem(x);
            let xs = bw.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            let erf = bw.un(U::Erf, xs)?;
            let cdf = bw.offset(erf, 1.0)?;
            let cdf = bw.scale(cdf, 0.5)?;
            let xx = bw.mul(x, x)?;
            let h = bw.scale(xx, -0.5)?;
            let ex = bw.un(U::Exp, h)?;
            let k = bw.scalar(1.0 / (2.0 * std::f64::consts::PI).sqrt(), e)?;
            let pdf = bw.mul(ex, k)?;
            let xp = bw.mul(x, pdf)?;
            let d = bw.add(cdf, xp)?;
            bw.mul(g, d)?
        }
        U::Gelu { tanh: true } => {
            // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3c x^2), t = tanh(k (x + c x^3))
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let c = 0.044715;
            let xx = bw.mul(x, x)?;
            let x3 = bw.mul(xx, x)?;
            let cx3 = bw.scale(x3, c)?;
            let inner = bw.add(x, cx3)?;
            let inner = bw.scale(inner, k)?;
            let t = bw.un(U::Tanh, inner)?;
            let a = bw.offset(t, 1.0)?;
            let a = bw.scale(a, 0.5)?;
            let tt = bw.mul(t, t)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let sech = bw.sub(one, tt)?;
            let poly = bw.scale(xx, 3.0 * c)?;
            let poly = bw.offset(poly, 1.0)?;
            let poly = bw.scale(poly, 0.5 * k)?;
            let b = bw.mul(x, sech)?;
            let b = bw.mul(b, poly)?;
            let d = bw.add(a, b)?;
            bw.mul(g, d)?
        }
        U::Elu { alpha } => {
            // 1 for x > 0, y + alpha below.
            let pos = bw.cmp_num(B::Greater, x, 0.0)?;
            let neg = bw.offset(y, alpha)?;
            let one = bw.scalar(1.0, bw.elem(x))?;
            let d = bw.select(pos, one, neg)?;
            bw.mul(g, d)?
        }
        U::LeakyRelu { alpha } => {
            let pos = bw.cmp_num(B::Greater, x, 0.0)?;
            let neg = bw.scale(g, alpha)?;
            bw.select(pos, g, neg)?
        }
        U::Selu { alpha, gamma } => {
            let pos = bw.cmp_num(B::Greater, x, 0.0)?;
            let ex = bw.un(U::Exp, x)?;
            let neg = bw.scale(ex, alpha * gamma)?;
            let one = bw.scalar(gamma, bw.elem(x))?;
            let d = bw.select(pos, one, neg)?;
            bw.mul(g, d)?
        }
        U::HardSigmoid { alpha, beta } => {
            let lin = bw.scale(x, alpha)?;
            let lin = bw.offset(lin, beta)?;
            let lo = bw.cmp_num(B::Greater, lin, 0.0)?;
            let hi = bw.cmp_num(B::Less, lin, 1.0)?;
            let inside = bw.bin(B::And, lo, hi)?;
            let ga = bw.scale(g, alpha)?;
            bw.mask(inside, ga)?
        }
        U::Sign | U::Ceil | U::Floor | U::Round | U::Not | U::IsNan => {
            return Err(bw.err("internal error: no rule for a piecewise-constant op"));
        }
    };
    Ok(vec![Some(dx)])
}

/// Binary arithmetic: the two partial derivatives, each summed back to its operand's shape.
pub(crate) fn binary(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let (x, y) = (data.operands[0], data.operands[1]);
    let out = data.results[0];
    let Op::Binary(b) = data.op else {
        return Err(bw.err("internal error: not a binary op"));
    };
    let (dx, dy) = match b {
        B::Add => (Some(g), Some(g)),
        B::Sub => {
            let n = if want[1] {
                Some(bw.un(U::Neg, g)?)
            } else {
                None
            };
            (Some(g), n)
        }
        B::Mul => {
            let dx = if want[0] { Some(bw.mul(g, y)?) } else { None };
            let dy = if want[1] { Some(bw.mul(g, x)?) } else { None };
            (dx, dy)
        }
        B::Div => {
            let dx = if want[0] { Some(bw.div(g, y)?) } else { None };
            let dy = if want[1] {
                // -g * out / y
                let t = bw.mul(g, out)?;
                let t = bw.div(t, y)?;
                Some(bw.un(U::Neg, t)?)
            } else {
                None
            };
            (dx, dy)
        }
        B::Pow => {
            let dx = if want[0] {
                // g * y * x^(y - 1), 0 where y == 0 (PyTorch)
                let ym1 = bw.offset(y, -1.0)?;
                let p = bw.bin(B::Pow, x, ym1)?;
                let t = bw.mul(p, y)?;
                let t = bw.mul(g, t)?;
                let nz = bw.cmp_num(B::Equal, y, 0.0)?;
                let zero = bw.scalar(0.0, bw.elem(g))?;
                Some(bw.select(nz, zero, t)?)
            } else {
                None
            };
            let dy = if want[1] {
                // g * out * log(x), 0 where x == 0 and y >= 0 (PyTorch)
                let l = bw.un(U::Log, x)?;
                let t = bw.mul(out, l)?;
                let t = bw.mul(g, t)?;
                let xz = bw.cmp_num(B::Equal, x, 0.0)?;
                let yp = bw.cmp_num(B::GreaterEqual, y, 0.0)?;
                let both = bw.bin(B::And, xz, yp)?;
                let zero = bw.scalar(0.0, bw.elem(g))?;
                Some(bw.select(both, zero, t)?)
            } else {
                None
            };
            (dx, dy)
        }
        B::Max | B::Min => {
            // The larger (smaller) operand takes the gradient; ties split it in half.
            let wins = if b == B::Max { B::Greater } else { B::Less };
            let e = bw.elem(g);
            let strict = bw.bin(wins, x, y)?;
            let tie = bw.bin(B::Equal, x, y)?;
            let one = bw.scalar(1.0, e)?;
            let half = bw.scalar(0.5, e)?;
            let zero = bw.scalar(0.0, e)?;
            let wx = bw.select(strict, one, zero)?;
            let wx = bw.select(tie, half, wx)?;
            let dx = if want[0] { Some(bw.mul(g, wx)?) } else { None };
            let dy = if want[1] {
                let wy = bw.sub(one, wx)?;
                Some(bw.mul(g, wy)?)
            } else {
                None
            };
            (dx, dy)
        }
        B::Prelu => {
            let pos = bw.cmp_num(B::Greater, x, 0.0)?;
            let dx = if want[0] {
                let gs = bw.mul(g, y)?;
                Some(bw.select(pos, g, gs)?)
            } else {
                None
            };
            let dy = if want[1] {
                let gx = bw.mul(g, x)?;
                let zero = bw.scalar(0.0, bw.elem(g))?;
                Some(bw.select(pos, zero, gx)?)
            } else {
                None
            };
            (dx, dy)
        }
        _ => return Err(bw.err("internal error: no rule for this binary op")),
    };
    let xs = bw.ty(x).shape;
    let ys = bw.ty(y).shape;
    let dx = match (dx, want[0]) {
        (Some(d), true) => Some(bw.sum_to(d, &xs)?),
        _ => None,
    };
    let dy = match (dy, want[1]) {
        (Some(d), true) => Some(bw.sum_to(d, &ys)?),
        _ => None,
    };
    Ok(vec![dx, dy])
}

/// `select(c, x, y)`: the gradient goes to `x` where `c`, to `y` elsewhere.
pub(crate) fn select(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let (c, x, y) = (data.operands[0], data.operands[1], data.operands[2]);
    let zero = bw.scalar(0.0, bw.elem(g))?;
    let dx = if want[1] {
        let d = bw.select(c, g, zero)?;
        let s = bw.ty(x).shape;
        Some(bw.sum_to(d, &s)?)
    } else {
        None
    };
    let dy = if want[2] {
        let d = bw.select(c, zero, g)?;
        let s = bw.ty(y).shape;
        Some(bw.sum_to(d, &s)?)
    } else {
        None
    };
    Ok(vec![None, dx, dy])
}

/// A cast between float types: the gradient cast back.
pub(crate) fn cast(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let to = bw.elem(data.operands[0]);
    Ok(vec![Some(bw.cast(g, to)?)])
}

/// `clip`: the gradient passes where `min <= x <= max`.
pub(crate) fn clip(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let x = data.operands[0];
    let Op::Clip { min, max } = data.op else {
        return Err(bw.err("internal error: not a clip"));
    };
    let mut d = g;
    if let Some(lo) = min {
        let c = bw.cmp_num(B::GreaterEqual, x, lo)?;
        d = bw.mask(c, d)?;
    }
    if let Some(hi) = max {
        let c = bw.cmp_num(B::LessEqual, x, hi)?;
        d = bw.mask(c, d)?;
    }
    Ok(vec![Some(d)])
}
