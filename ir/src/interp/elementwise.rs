//! Elementwise ops: unary, binary, select, cast, clip.
//!
//! Choices where `op.rs` is silent:
//! - `abs`/`neg` of the most negative integer wrap (give the same value); `neg` of `u8` is an
//!   error; `sign` of NaN is NaN.
//! - `relu` keeps NaN.
//! - Integer `pow` with a negative exponent is an error (as in numpy); otherwise it wraps.
//! - Integer `mod`/`fmod` by zero is an error, like division.
//! - Comparisons accept every element type (bool compares false < true).
//! - `is-nan` is float-only.
//! - `cast` between integers wraps (two's complement), like numpy.
//! - `clip` bounds are converted to the element type with cast semantics; it applies the lower
//!   bound first, then the upper one (so `min > max` gives `max`, as numpy); NaN stays NaN.

use ndarray::{ArrayD, Zip};

use super::common::*;
use crate::op::{BinaryOp, UnaryOp};
use crate::tensor::Tensor;
use crate::types::ElemType;

/// Evaluates a unary op.
pub(crate) fn unary(u: UnaryOp, x: &Tensor) -> R<Tensor> {
    match u {
        UnaryOp::Not => Ok(Tensor::Bool(arr::<bool>(x)?.mapv(|v| !v))),
        UnaryOp::IsNan => {
            dispatch_float!(x.elem(), F => Ok(Tensor::Bool(arr::<F>(x)?.mapv(|v| v.is_nan()))))
        }
        UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu => {
            dispatch_num!(x.elem(), T => unary_num::<T>(u, arr::<T>(x)?).map(T::wrap))
        }
        _ => dispatch_float!(x.elem(), F => Ok(F::wrap(unary_float::<F>(u, arr::<F>(x)?)))),
    }
}

fn unary_num<T: Num>(u: UnaryOp, a: &ArrayD<T>) -> R<ArrayD<T>> {
    Ok(match u {
        UnaryOp::Abs => a.mapv(T::nabs),
        UnaryOp::Neg => {
            if !T::SIGNED {
                bail!("not defined for unsigned element type {}", T::ELEM);
            }
            a.mapv(T::wneg)
        }
        UnaryOp::Sign => a.mapv(T::nsign),
        _ => a.mapv(|v| if v < T::zero() { T::zero() } else { v }),
    })
}

fn unary_float<F: Float>(u: UnaryOp, a: &ArrayD<F>) -> ArrayD<F> {
    let zero = F::zero();
    let one = F::one();
    match u {
        UnaryOp::Exp => a.mapv(F::exp),
        UnaryOp::Log => a.mapv(F::ln),
        UnaryOp::Sqrt => a.mapv(F::sqrt),
        UnaryOp::Reciprocal => a.mapv(|v| one / v),
        UnaryOp::Sin => a.mapv(F::sin),
        UnaryOp::Cos => a.mapv(F::cos),
        UnaryOp::Tan => a.mapv(F::tan),
        UnaryOp::Asin => a.mapv(F::asin),
        UnaryOp::Acos => a.mapv(F::acos),
        UnaryOp::Atan => a.mapv(F::atan),
        UnaryOp::Tanh => a.mapv(F::tanh),
        UnaryOp::Sigmoid => a.mapv(sigmoid),
        UnaryOp::Erf => a.mapv(F::erf),
        UnaryOp::Ceil => a.mapv(F::ceil),
        UnaryOp::Floor => a.mapv(F::floor),
        UnaryOp::Round => a.mapv(F::round_even),
        UnaryOp::Softplus => a.mapv(softplus),
        UnaryOp::Softsign => a.mapv(|v| v / (one + v.fabs())),
        UnaryOp::Mish => a.mapv(|v| v * softplus(v).tanh()),
        UnaryOp::HardSwish => {
            let (three, six) = (F::c(3.0), F::c(6.0));
            a.mapv(|v| {
                let r = v + three;
                let r = if r < zero {
                    zero
                } else if r > six {
                    six
                } else {
                    r
                };
                v * r / six
            })
        }
        UnaryOp::Gelu { tanh: false } => {
            let half = F::c(0.5);
            let inv_sqrt2 = F::c(std::f64::consts::FRAC_1_SQRT_2);
            a.mapv(|v| half * v * (one + (v * inv_sqrt2).erf()))
        }
        UnaryOp::Gelu { tanh: true } => {
            let half = F::c(0.5);
            let k = F::c((2.0 / std::f64::consts::PI).sqrt());
            let c = F::c(0.044715);
            a.mapv(|v| half * v * (one + (k * (v + c * v * v * v)).tanh()))
        }
        UnaryOp::Elu { alpha } => {
            let alpha = F::c(alpha);
            a.mapv(|v| if v > zero { v } else { alpha * (v.exp() - one) })
        }
        UnaryOp::LeakyRelu { alpha } => {
            let alpha = F::c(alpha);
            a.mapv(|v| if v >= zero { v } else { alpha * v })
        }
        UnaryOp::Selu { alpha, gamma } => {
            let (alpha, gamma) = (F::c(alpha), F::c(gamma));
            a.mapv(|v| gamma * if v > zero { v } else { alpha * (v.exp() - one) })
        }
        UnaryOp::HardSigmoid { alpha, beta } => {
            let (alpha, beta) = (F::c(alpha), F::c(beta));
            a.mapv(|v| {
                let r = alpha * v + beta;
                if r < zero {
                    zero
                } else if r > one {
                    one
                } else {
                    r
                }
            })
        }
        // Handled by `unary`; kept total for clarity.
        UnaryOp::Abs => a.mapv(F::fabs),
        UnaryOp::Neg => a.mapv(|v| -v),
        UnaryOp::Sign => a.mapv(F::nsign),
        UnaryOp::Relu => a.mapv(|v| if v < zero { zero } else { v }),
        UnaryOp::Not | UnaryOp::IsNan => a.clone(),
    }
}

/// Numerically stable logistic function.
pub(crate) fn sigmoid<F: Float>(v: F) -> F {
    if v >= F::zero() {
        F::one() / (F::one() + (-v).exp())
    } else {
        let e = v.exp();
        e / (F::one() + e)
    }
}

/// Numerically stable `ln(1 + e^x)`.
fn softplus<F: Float>(v: F) -> F {
    let m = if v > F::zero() { v } else { F::zero() };
    m + (-v.fabs()).exp().ln_1p()
}

/// Evaluates a binary op (broadcasting).
pub(crate) fn binary(op: BinaryOp, a: &Tensor, b: &Tensor) -> R<Tensor> {
    same_elem(a, b)?;
    if op.is_logical() {
        let (x, y) = (bool_operand(a)?, bool_operand(b)?);
        let r = match op {
            BinaryOp::And => zip2(x, y, |p, q| p && q)?,
            BinaryOp::Or => zip2(x, y, |p, q| p || q)?,
            _ => zip2(x, y, |p, q| p != q)?,
        };
        return Ok(Tensor::Bool(r));
    }
    if op.is_comparison() {
        return dispatch_any!(a.elem(), T => compare::<T>(op, arr::<T>(a)?, arr::<T>(b)?).map(Tensor::Bool));
    }
    dispatch_num!(a.elem(), T => arith::<T>(op, arr::<T>(a)?, arr::<T>(b)?).map(T::wrap))
}

fn bool_operand(t: &Tensor) -> R<&ArrayD<bool>> {
    match t {
        Tensor::Bool(a) => Ok(a),
        other => bail!("logical ops need bool operands, got {}", other.elem()),
    }
}

fn compare<T: AnyElem>(op: BinaryOp, a: &ArrayD<T>, b: &ArrayD<T>) -> R<ArrayD<bool>> {
    match op {
        BinaryOp::Equal => zip2(a, b, |x, y| x == y),
        BinaryOp::Less => zip2(a, b, |x, y| x < y),
        BinaryOp::LessEqual => zip2(a, b, |x, y| x <= y),
        BinaryOp::Greater => zip2(a, b, |x, y| x > y),
        _ => zip2(a, b, |x, y| x >= y),
    }
}

/// A broadcasting map whose function may fail (returns `None`); the first failure becomes
/// the error `what`.
fn try_zip2<T: Num>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    what: &str,
    f: impl Fn(T, T) -> Option<T>,
) -> R<ArrayD<T>> {
    let mut failed = false;
    let r = zip2(a, b, |x, y| {
        f(x, y).unwrap_or_else(|| {
            failed = true;
            T::zero()
        })
    })?;
    if failed {
        bail!("{what}");
    }
    Ok(r)
}

fn arith<T: Num>(op: BinaryOp, a: &ArrayD<T>, b: &ArrayD<T>) -> R<ArrayD<T>> {
    match op {
        BinaryOp::Add => zip2(a, b, T::wadd),
        BinaryOp::Sub => zip2(a, b, T::wsub),
        BinaryOp::Mul => zip2(a, b, T::wmul),
        BinaryOp::Div => try_zip2(a, b, "integer division by zero", T::ndiv),
        BinaryOp::Pow => try_zip2(a, b, "negative exponent with an integer base", T::npow),
        BinaryOp::Mod => try_zip2(a, b, "integer modulo by zero", T::pymod),
        BinaryOp::Fmod => try_zip2(a, b, "integer modulo by zero", T::cmod),
        BinaryOp::Max => zip2(a, b, T::max_nan),
        BinaryOp::Min => zip2(a, b, T::min_nan),
        BinaryOp::Prelu => zip2(a, b, |x, s| if x >= T::zero() { x } else { s.wmul(x) }),
        BinaryOp::ShiftLeft => try_zip2(a, b, "shifts need integer operands", T::shl),
        BinaryOp::ShiftRight => try_zip2(a, b, "shifts need integer operands", T::shr),
        _ => bail!("internal: {} is not arithmetic", op.name()),
    }
}

/// `select(cond, x, y)`, all three broadcasting.
pub(crate) fn select(c: &Tensor, x: &Tensor, y: &Tensor) -> R<Tensor> {
    let c = match c {
        Tensor::Bool(a) => a,
        other => bail!("condition must be bool, got {}", other.elem()),
    };
    same_elem(x, y)?;
    dispatch_any!(x.elem(), T => {
        let (xa, ya) = (arr::<T>(x)?, arr::<T>(y)?);
        let shape = broadcast_shapes(&broadcast_shapes(c.shape(), xa.shape())?, ya.shape())?;
        numel_of(&shape, x.elem())?;
        let (cv, xv, yv) = (bview(c, &shape)?, bview(xa, &shape)?, bview(ya, &shape)?);
        Ok(T::wrap(Zip::from(&cv).and(&xv).and(&yv).map_collect(|&c, &x, &y| if c { x } else { y })))
    })
}

/// Converts to another element type (see the module doc and [`crate::Op::Cast`]).
pub(crate) fn cast(x: &Tensor, to: ElemType) -> R<Tensor> {
    if x.elem() == to {
        return Ok(x.clone());
    }
    dispatch_any!(x.elem(), S => {
        let a = arr::<S>(x)?;
        dispatch_any!(to, D => Ok(D::wrap(a.mapv(|v| D::from_cast(v.to_cast())))))
    })
}

/// Clamps to `[min, max]`.
pub(crate) fn clip(x: &Tensor, min: Option<f64>, max: Option<f64>) -> R<Tensor> {
    dispatch_num!(x.elem(), T => {
        let (lo, hi) = (min.map(T::from_f64), max.map(T::from_f64));
        Ok(T::wrap(arr::<T>(x)?.mapv(|v| {
            let v = match lo {
                Some(l) if v < l => l,
                _ => v,
            };
            match hi {
                Some(h) if v > h => h,
                _ => v,
            }
        })))
    })
}
