//! Shared machinery of the interpreter: element traits, dispatch macros, broadcasting, shape
//! arithmetic and small array helpers.

use std::borrow::Cow;
use std::fmt::Debug;

use half::{bf16, f16};
use ndarray::{ArrayD, ArrayView2, ArrayViewD, ArrayViewMut2, IxDyn, Zip};

use super::{Bindings, InterpError};
use crate::tensor::Tensor;
use crate::types::{Dim, ElemType, Scalar};

/// Result type of the interpreter's internals.
pub(crate) type R<T> = Result<T, InterpError>;

/// Returns an [`InterpError`] built with `format!`.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::interp::InterpError::msg(format!($($t)*)))
    };
}

/// Builds an [`InterpError`] with `format!`.
macro_rules! ierr {
    ($($t:tt)*) => {
        $crate::interp::InterpError::msg(format!($($t)*))
    };
}

/// Runs `$body` with `$T` aliased to the Rust type of any element type.
macro_rules! dispatch_any {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            $crate::ElemType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::ElemType::BF16 => {
                type $T = half::bf16;
                $body
            }
            $crate::ElemType::F32 => {
                type $T = f32;
                $body
            }
            $crate::ElemType::F64 => {
                type $T = f64;
                $body
            }
            $crate::ElemType::I8 => {
                type $T = i8;
                $body
            }
            $crate::ElemType::I16 => {
                type $T = i16;
                $body
            }
            $crate::ElemType::I32 => {
                type $T = i32;
                $body
            }
            $crate::ElemType::I64 => {
                type $T = i64;
                $body
            }
            $crate::ElemType::U8 => {
                type $T = u8;
                $body
            }
            $crate::ElemType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}

/// Runs `$body` with `$T` aliased to a [`Num`] type (f32, f64 and the integers); other
/// element types give an error.
macro_rules! dispatch_num {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            $crate::ElemType::F32 => {
                type $T = f32;
                $body
            }
            $crate::ElemType::F64 => {
                type $T = f64;
                $body
            }
            $crate::ElemType::I8 => {
                type $T = i8;
                $body
            }
            $crate::ElemType::I16 => {
                type $T = i16;
                $body
            }
            $crate::ElemType::I32 => {
                type $T = i32;
                $body
            }
            $crate::ElemType::I64 => {
                type $T = i64;
                $body
            }
            $crate::ElemType::U8 => {
                type $T = u8;
                $body
            }
            other => Err($crate::interp::InterpError::msg(format!(
                "not defined for element type {other}"
            ))),
        }
    };
}

/// Runs `$body` with `$T` aliased to a [`Float`] type (f32 or f64); other element types give
/// an error.
macro_rules! dispatch_float {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            $crate::ElemType::F32 => {
                type $T = f32;
                $body
            }
            $crate::ElemType::F64 => {
                type $T = f64;
                $body
            }
            other => Err($crate::interp::InterpError::msg(format!(
                "expects a floating-point operand, got element type {other}"
            ))),
        }
    };
}

pub(crate) use {bail, dispatch_any, dispatch_float, dispatch_num, ierr};

/// A value in transit through a cast: every element type converts to and from one of these
/// without loss (integers fit `i64`, floats fit `f64`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum CastVal {
    /// An integer.
    I(i64),
    /// A float.
    F(f64),
    /// A bool.
    B(bool),
}

/// Any element type.
pub(crate) trait AnyElem:
    Copy + PartialEq + PartialOrd + Debug + Send + Sync + 'static
{
    /// The IR element type.
    const ELEM: ElemType;
    /// The array inside a tensor of this type.
    fn get(t: &Tensor) -> Option<&ArrayD<Self>>;
    /// Wraps an array as a tensor.
    fn wrap(a: ArrayD<Self>) -> Tensor;
    /// Zero (false).
    fn zero() -> Self;
    /// The value of a scalar attribute, with cast semantics.
    fn from_scalar(s: Scalar) -> Self;
    /// This value for a cast.
    fn to_cast(self) -> CastVal;
    /// A cast value converted to this type (float to int truncates, saturating; NaN gives 0;
    /// int to int wraps; anything to bool is `!= 0`).
    fn from_cast(v: CastVal) -> Self;
}

/// The numeric element types the interpreter computes in natively: f32, f64 and the
/// integers (f16/bf16 are computed in f32).
pub(crate) trait Num: AnyElem {
    /// True for f32 and f64.
    const IS_FLOAT: bool;
    /// True for signed types.
    const SIGNED: bool;
    /// One.
    fn one() -> Self;
    /// As f64 (exact for floats; integers may round above 2^53).
    fn to_f64(self) -> f64;
    /// From f64 with `as` semantics (integers: truncate, saturate, NaN to 0).
    fn from_f64(x: f64) -> Self;
    /// Wrapping sum.
    fn wadd(self, o: Self) -> Self;
    /// Wrapping difference.
    fn wsub(self, o: Self) -> Self;
    /// Wrapping product.
    fn wmul(self, o: Self) -> Self;
    /// Quotient; `None` for integer division by zero.
    fn ndiv(self, o: Self) -> Option<Self>;
    /// Remainder with the sign of the divisor; `None` for integer division by zero.
    fn pymod(self, o: Self) -> Option<Self>;
    /// Remainder with the sign of the dividend; `None` for integer division by zero.
    fn cmod(self, o: Self) -> Option<Self>;
    /// Power; `None` for a negative integer exponent.
    fn npow(self, o: Self) -> Option<Self>;
    /// `self << o` as [`crate::BinaryOp::ShiftLeft`] defines it; `None` for floats.
    fn shl(self, o: Self) -> Option<Self>;
    /// `self >> o` as [`crate::BinaryOp::ShiftRight`] defines it; `None` for floats.
    fn shr(self, o: Self) -> Option<Self>;
    /// NaN test (false for integers).
    fn is_nan(self) -> bool;
    /// Smallest value (-inf for floats).
    fn lowest() -> Self;
    /// Largest value (+inf for floats).
    fn highest() -> Self;
    /// Absolute value (wrapping for integers).
    fn nabs(self) -> Self;
    /// Negation (wrapping for integers).
    fn wneg(self) -> Self;
    /// Sign in {-1, 0, 1} (NaN stays NaN).
    fn nsign(self) -> Self;
    /// `c = alpha * a @ b` (c is overwritten).
    fn gemm(alpha: Self, a: ArrayView2<Self>, b: ArrayView2<Self>, c: &mut ArrayViewMut2<Self>);

    /// Maximum; NaN wins.
    fn max_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() { self } else { o }
        } else if o > self {
            o
        } else {
            self
        }
    }

    /// Minimum; NaN wins.
    fn min_nan(self, o: Self) -> Self {
        if self.is_nan() || o.is_nan() {
            if self.is_nan() { self } else { o }
        } else if o < self {
            o
        } else {
            self
        }
    }
}

/// f32 and f64.
pub(crate) trait Float:
    Num
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
{
    /// `e^x`.
    fn exp(self) -> Self;
    /// Natural log.
    fn ln(self) -> Self;
    /// `ln(1 + x)`.
    fn ln_1p(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Arc sine.
    fn asin(self) -> Self;
    /// Arc cosine.
    fn acos(self) -> Self;
    /// Arc tangent.
    fn atan(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Round up.
    fn ceil(self) -> Self;
    /// Round down.
    fn floor(self) -> Self;
    /// Round half to even.
    fn round_even(self) -> Self;
    /// `|x|`.
    fn fabs(self) -> Self;
    /// Error function (computed in f64).
    fn erf(self) -> Self;
    /// Constant conversion.
    fn c(x: f64) -> Self {
        Self::from_f64(x)
    }
}

macro_rules! impl_any_common {
    ($t:ty, $variant:ident) => {
        const ELEM: ElemType = ElemType::$variant;
        fn get(t: &Tensor) -> Option<&ArrayD<Self>> {
            match t {
                Tensor::$variant(a) => Some(a),
                _ => None,
            }
        }
        fn wrap(a: ArrayD<Self>) -> Tensor {
            Tensor::$variant(a)
        }
    };
}

macro_rules! impl_int {
    ($t:ty, $variant:ident, $signed:expr) => {
        impl AnyElem for $t {
            impl_any_common!($t, $variant);
            fn zero() -> Self {
                0
            }
            fn from_scalar(s: Scalar) -> Self {
                match s {
                    Scalar::Int(i) => i as $t,
                    Scalar::Float(x) => x as $t,
                }
            }
            fn to_cast(self) -> CastVal {
                CastVal::I(self as i64)
            }
            fn from_cast(v: CastVal) -> Self {
                match v {
                    CastVal::I(i) => i as $t,
                    CastVal::F(x) => x as $t,
                    CastVal::B(b) => b as $t,
                }
            }
        }
        impl Num for $t {
            const IS_FLOAT: bool = false;
            const SIGNED: bool = $signed;
            fn one() -> Self {
                1
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn ndiv(self, o: Self) -> Option<Self> {
                if o == 0 {
                    None
                } else {
                    Some(self.wrapping_div(o))
                }
            }
            fn pymod(self, o: Self) -> Option<Self> {
                if o == 0 {
                    return None;
                }
                let r = self.wrapping_rem(o);
                #[allow(unused_comparisons)]
                let fix = r != 0 && ((r < 0) != (o < 0));
                Some(if fix { r.wrapping_add(o) } else { r })
            }
            fn cmod(self, o: Self) -> Option<Self> {
                if o == 0 {
                    None
                } else {
                    Some(self.wrapping_rem(o))
                }
            }
            fn npow(self, o: Self) -> Option<Self> {
                #[allow(unused_comparisons)]
                if o < 0 {
                    return None;
                }
                let mut e = o as u64;
                let mut base = self;
                let mut acc: $t = 1;
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                Some(acc)
            }
            #[allow(unused_comparisons)]
            fn shl(self, o: Self) -> Option<Self> {
                let inside = o >= 0 && (o as i128) < i128::from(<$t>::BITS);
                Some(if inside {
                    self.wrapping_shl(o as u32)
                } else {
                    0
                })
            }
            #[allow(unused_comparisons)]
            fn shr(self, o: Self) -> Option<Self> {
                let inside = o >= 0 && (o as i128) < i128::from(<$t>::BITS);
                Some(if inside {
                    self >> (o as u32)
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                })
            }
            fn is_nan(self) -> bool {
                false
            }
            fn lowest() -> Self {
                <$t>::MIN
            }
            fn highest() -> Self {
                <$t>::MAX
            }
            #[allow(unused_comparisons)]
            fn nabs(self) -> Self {
                if self < 0 {
                    (0 as $t).wrapping_sub(self)
                } else {
                    self
                }
            }
            fn wneg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[allow(unused_comparisons)]
            fn nsign(self) -> Self {
                if self > 0 {
                    1
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            fn gemm(
                alpha: Self,
                a: ArrayView2<Self>,
                b: ArrayView2<Self>,
                c: &mut ArrayViewMut2<Self>,
            ) {
                let k = a.ncols();
                for ((i, j), out) in c.indexed_iter_mut() {
                    let mut s: $t = 0;
                    for p in 0..k {
                        s = s.wrapping_add(a[[i, p]].wrapping_mul(b[[p, j]]));
                    }
                    *out = s.wrapping_mul(alpha);
                }
            }
        }
    };
}

impl_int!(i8, I8, true);
impl_int!(i16, I16, true);
impl_int!(i32, I32, true);
impl_int!(i64, I64, true);
impl_int!(u8, U8, false);

macro_rules! impl_float {
    ($t:ty, $variant:ident) => {
        impl AnyElem for $t {
            impl_any_common!($t, $variant);
            fn zero() -> Self {
                0.0
            }
            fn from_scalar(s: Scalar) -> Self {
                match s {
                    Scalar::Int(i) => i as $t,
                    Scalar::Float(x) => x as $t,
                }
            }
            fn to_cast(self) -> CastVal {
                CastVal::F(self as f64)
            }
            fn from_cast(v: CastVal) -> Self {
                match v {
                    CastVal::I(i) => i as $t,
                    CastVal::F(x) => x as $t,
                    CastVal::B(b) => u8::from(b) as $t,
                }
            }
        }
        impl Num for $t {
            const IS_FLOAT: bool = true;
            const SIGNED: bool = true;
            fn one() -> Self {
                1.0
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn wadd(self, o: Self) -> Self {
                self + o
            }
            fn wsub(self, o: Self) -> Self {
                self - o
            }
            fn wmul(self, o: Self) -> Self {
                self * o
            }
            fn ndiv(self, o: Self) -> Option<Self> {
                Some(self / o)
            }
            fn pymod(self, o: Self) -> Option<Self> {
                // Python's float `%`: the exact fmod, moved into the divisor's sign.
                let r = self % o;
                Some(if r != 0.0 && (r < 0.0) != (o < 0.0) {
                    r + o
                } else if r == 0.0 {
                    <$t>::copysign(0.0, o)
                } else {
                    r
                })
            }
            fn cmod(self, o: Self) -> Option<Self> {
                Some(self % o)
            }
            fn npow(self, o: Self) -> Option<Self> {
                Some(self.powf(o))
            }
            fn shl(self, _: Self) -> Option<Self> {
                None
            }
            fn shr(self, _: Self) -> Option<Self> {
                None
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn lowest() -> Self {
                <$t>::NEG_INFINITY
            }
            fn highest() -> Self {
                <$t>::INFINITY
            }
            fn nabs(self) -> Self {
                self.abs()
            }
            fn wneg(self) -> Self {
                -self
            }
            fn nsign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self * 0.0
                }
            }
            fn gemm(
                alpha: Self,
                a: ArrayView2<Self>,
                b: ArrayView2<Self>,
                c: &mut ArrayViewMut2<Self>,
            ) {
                if c.is_empty() {
                    return;
                }
                if a.ncols() == 0 {
                    c.fill(0.0);
                    return;
                }
                ndarray::linalg::general_mat_mul(alpha, &a, &b, 0.0, c);
            }
        }
        impl Float for $t {
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            fn asin(self) -> Self {
                <$t>::asin(self)
            }
            fn acos(self) -> Self {
                <$t>::acos(self)
            }
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn fabs(self) -> Self {
                <$t>::abs(self)
            }
            fn erf(self) -> Self {
                erf64(self as f64) as $t
            }
        }
    };
}

impl_float!(f32, F32);
impl_float!(f64, F64);

macro_rules! impl_half {
    ($t:ty, $variant:ident) => {
        impl AnyElem for $t {
            impl_any_common!($t, $variant);
            fn zero() -> Self {
                <$t>::ZERO
            }
            fn from_scalar(s: Scalar) -> Self {
                <$t>::from_f64(s.as_f64())
            }
            fn to_cast(self) -> CastVal {
                CastVal::F(self.to_f64())
            }
            fn from_cast(v: CastVal) -> Self {
                match v {
                    CastVal::I(i) => <$t>::from_f64(i as f64),
                    CastVal::F(x) => <$t>::from_f64(x),
                    CastVal::B(b) => {
                        if b {
                            <$t>::ONE
                        } else {
                            <$t>::ZERO
                        }
                    }
                }
            }
        }
    };
}

impl_half!(f16, F16);
impl_half!(bf16, BF16);

impl AnyElem for bool {
    impl_any_common!(bool, Bool);
    fn zero() -> Self {
        false
    }
    fn from_scalar(s: Scalar) -> Self {
        s.as_f64() != 0.0
    }
    fn to_cast(self) -> CastVal {
        CastVal::B(self)
    }
    fn from_cast(v: CastVal) -> Self {
        match v {
            CastVal::I(i) => i != 0,
            CastVal::F(x) => x != 0.0,
            CastVal::B(b) => b,
        }
    }
}

/// The error function, to full f64 precision.
///
/// Uses `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (1*3*...*(2n+1))`, a series of
/// positive terms (no cancellation); beyond |x| = 6 erf is 1 to f64 precision.
pub(crate) fn erf64(x: f64) -> f64 {
    if x.is_nan() || x == 0.0 {
        return x;
    }
    let ax = x.abs();
    if ax >= 6.0 {
        return 1f64.copysign(x);
    }
    let x2 = ax * ax;
    let mut term = ax;
    let mut sum = ax;
    let mut n = 0.0;
    for _ in 0..1000 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    let r = std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum;
    r.min(1.0).copysign(x)
}

/// The array of a tensor of element type `T`, or an error naming both types.
pub(crate) fn arr<T: AnyElem>(t: &Tensor) -> R<&ArrayD<T>> {
    T::get(t).ok_or_else(|| ierr!("expected element type {}, got {}", T::ELEM, t.elem()))
}

/// Errors unless both tensors have the same element type.
pub(crate) fn same_elem(a: &Tensor, b: &Tensor) -> R<()> {
    if a.elem() != b.elem() {
        bail!("operand element types differ: {} vs {}", a.elem(), b.elem());
    }
    Ok(())
}

/// Errors unless every tensor has the element type of the first.
pub(crate) fn all_same_elem(ts: &[&Tensor]) -> R<()> {
    for w in ts.windows(2) {
        same_elem(w[0], w[1])?;
    }
    Ok(())
}

/// The operands as a fixed-size array, or an error on the wrong count.
pub(crate) fn exact<'a, const N: usize>(xs: &[&'a Tensor]) -> R<[&'a Tensor; N]> {
    <[&Tensor; N]>::try_from(xs).map_err(|_| {
        ierr!(
            "expected {N} operand{}, got {}",
            if N == 1 { "" } else { "s" },
            xs.len()
        )
    })
}

/// Errors unless the operand count is in `lo..=hi`.
pub(crate) fn arity(xs: &[&Tensor], lo: usize, hi: usize) -> R<()> {
    if xs.len() < lo || xs.len() > hi {
        bail!("expected {lo} to {hi} operands, got {}", xs.len());
    }
    Ok(())
}

thread_local! {
    /// The memory limit of the evaluation running on this thread (see [`super::RunOptions`]).
    static MEMORY_LIMIT: std::cell::Cell<u64> =
        const { std::cell::Cell::new(super::DEFAULT_MEMORY_LIMIT) };
}

/// The memory limit in force on this thread.
pub(crate) fn memory_limit() -> u64 {
    MEMORY_LIMIT.with(|l| l.get())
}

/// Sets the memory limit of this thread until the returned guard is dropped.
pub(crate) fn with_memory_limit(limit: u64) -> impl Drop {
    struct Restore(u64);
    impl Drop for Restore {
        fn drop(&mut self) {
            MEMORY_LIMIT.with(|l| l.set(self.0));
        }
    }
    Restore(MEMORY_LIMIT.with(|l| l.replace(limit)))
}

/// Checks that `count` items of `item_bytes` bytes each fit the memory limit; `what` names
/// the buffer in the error.
pub(crate) fn check_alloc(count: usize, item_bytes: usize, what: &str) -> R<()> {
    let bytes = (count as u128) * (item_bytes as u128);
    let limit = memory_limit();
    if bytes > u128::from(limit) {
        bail!(
            "{what} needs {bytes} bytes, more than the interpreter's memory limit of {limit} bytes"
        );
    }
    Ok(())
}

/// The element count of a shape. Fails when the shape breaks the IR's size rule
/// ([`crate::tensor::checked_byte_size`], taken with 8-byte elements, the widest) or when the
/// elements, at one byte each, would exceed the memory limit. Call it before allocating
/// anything of that shape.
pub(crate) fn numel(shape: &[usize]) -> R<usize> {
    crate::tensor::checked_byte_size(ElemType::F64, shape.iter().map(|&d| d as u64))
        .map_err(|why| ierr!("shape {shape:?} is too large: {why}"))?;
    // Cannot overflow: the non-zero extents multiply to at most isize::MAX / 8.
    let n = shape.iter().product::<usize>();
    check_alloc(n, 1, &format!("a tensor of shape {shape:?}"))?;
    Ok(n)
}

/// [`numel`], and checks that a tensor of `elem` with that shape fits the memory limit.
pub(crate) fn numel_of(shape: &[usize], elem: ElemType) -> R<usize> {
    let n = numel(shape)?;
    check_alloc(
        n,
        elem.size_bytes(),
        &format!("a {elem} tensor of shape {shape:?}"),
    )?;
    Ok(n)
}

/// A `u64` attribute as `usize`.
pub(crate) fn to_usize(x: u64) -> R<usize> {
    usize::try_from(x).map_err(|_| ierr!("extent {x} does not fit in usize"))
}

/// Resolves attribute dims against symbol bindings.
pub(crate) fn resolve_dims(dims: &[Dim], b: &Bindings) -> R<Vec<usize>> {
    dims.iter()
        .map(|d| match d {
            Dim::Static(n) => to_usize(*n),
            Dim::Sym(s) => match b.get(s) {
                Some(&n) => to_usize(n),
                None => Err(ierr!("symbolic dimension {s} is not bound")),
            },
        })
        .collect()
}

/// Numpy broadcast of two shapes ([`crate::infer::broadcast`] on concrete extents).
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize]) -> R<Vec<usize>> {
    let dims = |s: &[usize]| -> Vec<Dim> { s.iter().map(|&d| Dim::Static(d as u64)).collect() };
    let out = crate::infer::broadcast(&dims(a), &dims(b))
        .map_err(|e| ierr!("cannot broadcast shapes {a:?} and {b:?}: {}", e.message))?;
    out.iter()
        .map(|d| match d {
            Dim::Static(n) => to_usize(*n),
            Dim::Sym(s) => Err(ierr!("internal: broadcasting gave the symbol {s}")),
        })
        .collect()
}

/// A broadcast view of `a` with `shape`.
pub(crate) fn bview<'a, T>(a: &'a ArrayD<T>, shape: &[usize]) -> R<ArrayViewD<'a, T>> {
    a.broadcast(IxDyn(shape))
        .ok_or_else(|| ierr!("cannot broadcast shape {:?} to {:?}", a.shape(), shape))
}

/// Broadcasting elementwise map of two arrays.
pub(crate) fn zip2<A: Copy, B: Copy, C>(
    a: &ArrayD<A>,
    b: &ArrayD<B>,
    mut f: impl FnMut(A, B) -> C,
) -> R<ArrayD<C>> {
    let shape = broadcast_shapes(a.shape(), b.shape())?;
    let n = numel(&shape)?;
    check_alloc(n, size_of::<C>(), &format!("a tensor of shape {shape:?}"))?;
    let (av, bv) = (bview(a, &shape)?, bview(b, &shape)?);
    Ok(Zip::from(&av).and(&bv).map_collect(|&x, &y| f(x, y)))
}

/// The elements of a view in row-major order, borrowed when the view is contiguous.
pub(crate) fn row_major<'a, T: Clone>(v: ArrayViewD<'a, T>) -> Cow<'a, [T]> {
    match v.to_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(v.iter().cloned().collect()),
    }
}

/// An array from a row-major vector.
pub(crate) fn from_vec<T>(shape: &[usize], v: Vec<T>) -> R<ArrayD<T>> {
    ArrayD::from_shape_vec(IxDyn(shape), v)
        .map_err(|e| ierr!("internal error building shape {shape:?}: {e}"))
}

/// Row-major strides of a shape.
pub(crate) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Generic gather along every axis: `out[o0, o1, ...] = x[maps[0][o0], maps[1][o1], ...]`,
/// or `fill` where any map entry is `None`. The output shape is the map lengths.
pub(crate) fn remap<T: Copy>(x: &ArrayD<T>, maps: &[Vec<Option<usize>>], fill: T) -> R<ArrayD<T>> {
    let src = row_major(x.view());
    let st = strides_of(x.shape());
    let shape: Vec<usize> = maps.iter().map(Vec::len).collect();
    let total = numel(&shape)?;
    check_alloc(
        total,
        size_of::<T>(),
        &format!("a tensor of shape {shape:?}"),
    )?;
    let offs: Vec<Vec<Option<usize>>> = maps
        .iter()
        .zip(&st)
        .map(|(m, &s)| m.iter().map(|i| i.map(|i| i * s)).collect())
        .collect();
    let mut out = Vec::with_capacity(total);
    if total > 0 {
        let r = shape.len();
        if r == 0 {
            out.push(src[0]);
        } else {
            let mut idx = vec![0usize; r - 1];
            loop {
                let mut base = Some(0usize);
                for (d, &i) in idx.iter().enumerate() {
                    base = match (base, offs[d][i]) {
                        (Some(b), Some(o)) => Some(b + o),
                        _ => None,
                    };
                }
                match base {
                    None => out.extend(std::iter::repeat_n(fill, shape[r - 1])),
                    Some(b) => out.extend(offs[r - 1].iter().map(|o| match o {
                        Some(o) => src[b + o],
                        None => fill,
                    })),
                }
                // Odometer over the leading axes.
                let mut d = r - 1;
                loop {
                    if d == 0 {
                        return from_vec(&shape, out);
                    }
                    d -= 1;
                    idx[d] += 1;
                    if idx[d] < shape[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
    }
    from_vec(&shape, out)
}

/// Checks a normalized axis.
pub(crate) fn check_axis(axis: usize, rank: usize) -> R<()> {
    if axis >= rank {
        bail!("axis {axis} out of range for rank {rank}");
    }
    Ok(())
}

/// Converts any integer tensor to `i64` indices.
pub(crate) fn indices_i64(t: &Tensor) -> R<ArrayD<i64>> {
    Ok(match t {
        Tensor::I8(a) => a.mapv(i64::from),
        Tensor::I16(a) => a.mapv(i64::from),
        Tensor::I32(a) => a.mapv(i64::from),
        Tensor::I64(a) => a.clone(),
        Tensor::U8(a) => a.mapv(i64::from),
        other => bail!(
            "indices must have an integer element type, got {}",
            other.elem()
        ),
    })
}

/// Normalizes a possibly negative index against an extent.
pub(crate) fn norm_index(i: i64, extent: usize, what: &str, axis: usize) -> R<usize> {
    let e = extent as i64;
    let j = if i < 0 { i + e } else { i };
    if j < 0 || j >= e {
        bail!("{what} {i} out of range for axis {axis} of extent {extent}");
    }
    Ok(j as usize)
}
