//! Elementwise ops: unary and binary functions (numpy broadcasting through the generic's
//! maps), `select`, `cast` and `clip`, with the interpreter's semantics: integer division
//! truncates, `mod` takes the divisor's sign, `max`/`min` propagate NaN, float-to-integer
//! casts truncate and saturate (NaN gives 0), and 16-bit floats compute transcendental
//! functions in f32.

use tessera_ir::{BinaryOp, ElemType, UnaryOp};

use super::body::{Body, LResult, elem, err};

fn is_unsigned(e: ElemType) -> bool {
    matches!(e, ElemType::U8 | ElemType::Bool)
}

/// `x != x`, for floats.
fn is_nan(b: &mut Body, e: ElemType, x: &str) -> String {
    b.assign(format!("arith.cmpf uno, {x}, {x} : {}", elem(e)))
}

fn select(b: &mut Body, c: &str, x: &str, y: &str, e: ElemType) -> String {
    b.assign(format!("arith.select {c}, {x}, {y} : {}", elem(e)))
}

/// Binary arithmetic by name on floats (`addf`) or integers (`addi`).
fn arith(b: &mut Body, e: ElemType, float: &str, int: &str, x: &str, y: &str) -> String {
    let op = if e.is_float() { float } else { int };
    b.assign(format!("arith.{op} {x}, {y} : {}", elem(e)))
}

fn cmp(b: &mut Body, e: ElemType, pred: &str, x: &str, y: &str) -> String {
    if e.is_float() {
        // Ordered comparisons: false when either side is NaN, as in the interpreter.
        let p = match pred {
            "eq" => "oeq",
            "lt" => "olt",
            "le" => "ole",
            "gt" => "ogt",
            "ge" => "oge",
            _ => "one",
        };
        b.assign(format!("arith.cmpf {p}, {x}, {y} : {}", elem(e)))
    } else {
        let p = match (pred, is_unsigned(e)) {
            ("eq", _) => "eq",
            ("lt", false) => "slt",
            ("le", false) => "sle",
            ("gt", false) => "sgt",
            ("ge", false) => "sge",
            ("lt", true) => "ult",
            ("le", true) => "ule",
            ("gt", true) => "ugt",
            ("ge", true) => "uge",
            _ => "ne",
        };
        b.assign(format!("arith.cmpi {p}, {x}, {y} : {}", elem(e)))
    }
}

/// Runs `f` in f32 for 16-bit floats (extend, compute, truncate), directly otherwise.
fn in_f32(
    b: &mut Body,
    e: ElemType,
    x: &str,
    f: impl FnOnce(&mut Body, ElemType, &str) -> LResult<String>,
) -> LResult<String> {
    if matches!(e, ElemType::F16 | ElemType::BF16) {
        let w = b.assign(format!("arith.extf {x} : {} to f32", elem(e)));
        let r = f(b, ElemType::F32, &w)?;
        Ok(b.assign(format!("arith.truncf {r} : f32 to {}", elem(e))))
    } else {
        f(b, e, x)
    }
}

fn math(b: &mut Body, e: ElemType, f: &str, x: &str) -> String {
    b.assign(format!("math.{f} {x} : {}", elem(e)))
}

/// A `pow` exponent that is a whole number from 2 to 4, which [`power`] computes as
/// products (as onnxruntime does for 2 and 3): GPT-2's GELU cubes its input.
pub fn small_power(y: f64) -> Option<u32> {
    [2.0, 3.0, 4.0]
        .iter()
        .position(|&n| n == y)
        .map(|k| k as u32 + 2)
}

/// `x` to the whole power `n` ([`small_power`]) as `x * x * ...`, left to right, for
/// `f32` and `f64`; 16-bit floats compute it in `f32`.
pub fn power(b: &mut Body, e: ElemType, x: &str, n: u32) -> LResult<String> {
    in_f32(b, e, x, |b, e, x| {
        let ty = elem(e);
        let mut r = x.to_string();
        for _ in 1..n {
            r = b.assign(format!("arith.mulf {r}, {x} : {ty}"));
        }
        Ok(r)
    })
}

/// `e^x`: [`exp_f32`] for `f32`, `math.exp` (libm's) otherwise.
fn exp(b: &mut Body, e: ElemType, x: &str) -> String {
    if e == ElemType::F32 {
        exp_f32(b, x)
    } else {
        math(b, e, "exp", x)
    }
}

/// `ln 2` in two parts: `LN2_HI` has 16 significant bits, so `k * LN2_HI` is exact in `f32`
/// for every `k` [`exp_f32`] uses (|k| <= 150), and `LN2_HI + LN2_LO` is `ln 2` to `f64`.
const LN2_HI: f64 = 0.693_145_751_953_125;
const LN2_LO: f64 = std::f64::consts::LN_2 - LN2_HI;

/// `e^x` of an `f32` without libm's `expf`: `k = round(x / ln 2)`, `r = x - k ln 2` (in
/// two parts, exact to `f32`), `e^r` by its Taylor series to `r^7/7!` (|r| <= ln 2 / 2, so
/// the first term left out is below `6e-9` of the sum) by Horner's rule with fused
/// multiply-adds, times `2^k` as two powers of two made from their bits (`2^(k/2)` and the
/// rest, so that neither over- nor underflows: subnormal results round once). Within 0.91
/// ulp of the exact value on `[-87, 88.7]` (checked against `f64` on two million points;
/// 1.2 with a multiply and an add per step), `+inf` above `ln(f32::MAX)`, 0 below -104, NaN
/// for NaN. No branch, no call: loops over it can vectorize.
fn exp_f32(b: &mut Body, x: &str) -> String {
    let e = ElemType::F32;
    let f =
        |b: &mut Body, op: &str, l: &str, r: &str| b.assign(format!("arith.{op} {l}, {r} : f32"));
    // Clamped first (NaN to -104: `fptosi` of NaN is poison), the edges chosen below. An
    // `x` below -104, whose result is 0 (a masked softmax's), is computed as 0 instead: at
    // -104 the last product is subnormal, and the CPU takes a microcode assist of about a
    // hundred cycles for each (BERT tiny's masked softmax took 20 us, not 3).
    let lo = b.scalar(e, -104.0);
    let hi = b.scalar(e, 89.0);
    let zero = b.scalar(e, 0.0);
    let under = b.assign(format!("arith.cmpf olt, {x}, {lo} : f32"));
    let xs = select(b, &under, &zero, x, e);
    let xc = f(b, "maxnumf", &xs, &lo);
    let xc = f(b, "minnumf", &xc, &hi);
    let log2e = b.scalar(e, std::f64::consts::LOG2_E);
    let t = f(b, "mulf", &xc, &log2e);
    let k = b.assign(format!("math.roundeven {t} : f32"));
    let ln2_hi = b.scalar(e, LN2_HI);
    let ln2_lo = b.scalar(e, LN2_LO);
    let kh = f(b, "mulf", &k, &ln2_hi);
    let r = f(b, "subf", &xc, &kh);
    let kl = f(b, "mulf", &k, &ln2_lo);
    let r = f(b, "subf", &r, &kl);
    let mut fact = 1.0f64;
    let coef: Vec<f64> = (0..8)
        .map(|i| {
            if i > 1 {
                fact *= i as f64;
            }
            1.0 / fact
        })
        .collect();
    let mut p = b.scalar(e, coef[7]);
    for &c in coef[..7].iter().rev() {
        let k = b.scalar(e, c);
        p = b.assign(format!("math.fma {p}, {r}, {k} : f32"));
    }
    // 2^k = 2^k1 * 2^k2, k1 = floor(k / 2): each an f32 whose exponent bits are k_i + 127.
    let ki = b.assign(format!("arith.fptosi {k} : f32 to i32"));
    let one = b.assign("arith.constant 1 : i32");
    let bias = b.assign("arith.constant 127 : i32");
    let shift = b.assign("arith.constant 23 : i32");
    let k1 = b.assign(format!("arith.shrsi {ki}, {one} : i32"));
    let k2 = b.assign(format!("arith.subi {ki}, {k1} : i32"));
    let mut scaled = p;
    for kk in [k1, k2] {
        let biased = b.assign(format!("arith.addi {kk}, {bias} : i32"));
        let bits = b.assign(format!("arith.shli {biased}, {shift} : i32"));
        let s = b.assign(format!("arith.bitcast {bits} : i32 to f32"));
        scaled = f(b, "mulf", &scaled, &s);
    }
    // The edges: overflow to +inf, underflow to 0, NaN as it came.
    let max = b.scalar(e, 88.722_839_355_468_75);
    let inf = b.scalar(e, f64::INFINITY);
    let over = b.assign(format!("arith.cmpf ogt, {x}, {max} : f32"));
    let r = select(b, &over, &inf, &scaled, e);
    let r = select(b, &under, &zero, &r, e);
    let nan = is_nan(b, e, x);
    select(b, &nan, x, &r, e)
}

/// Where [`tanh_f32`] changes from its series to its exponential form.
const TANH_SERIES_BELOW: f64 = 0.625;

/// The first terms of tanh's Taylor series, `tanh x = x (1 - x^2/3 + 2 x^4/15 - ...)`, as
/// the coefficients of the powers of `x^2` (the series' exact rationals, from the
/// Bernoulli numbers).
const TANH_SERIES: [f64; 9] = [
    1.0,
    -1.0 / 3.0,
    2.0 / 15.0,
    -17.0 / 315.0,
    62.0 / 2835.0,
    -1382.0 / 155_925.0,
    21844.0 / 6_081_075.0,
    -929_569.0 / 638_512_875.0,
    6_404_582.0 / 10_854_718_875.0,
];

/// `tanh` of an `f32` without libm's `tanhf` (which computes `expm1f`, 20-30 ns a call): for
/// `a = |x|` below [`TANH_SERIES_BELOW`] its Taylor series ([`TANH_SERIES`], Horner's rule
/// in `a^2`), above it `1 - 2 / (exp(2a) + 1)` (one `expf`; no cancellation where the result
/// is above one half, and 1 once `exp` overflows), with `x`'s sign. Both sides are within
/// 1.5 ulp of the true value (checked against `f64` on 600,000 points of `[0, 20]`);
/// NaN stays NaN and `-0` stays `-0`. The code has no branch, so loops over it vectorize.
fn tanh_f32(b: &mut Body, x: &str) -> String {
    let e = ElemType::F32;
    let a = math(b, e, "absf", x);
    let z = b.assign(format!("arith.mulf {a}, {a} : f32"));
    let mut p = b.scalar(e, TANH_SERIES[TANH_SERIES.len() - 1]);
    for &c in TANH_SERIES[..TANH_SERIES.len() - 1].iter().rev() {
        let k = b.scalar(e, c);
        let pz = b.assign(format!("arith.mulf {p}, {z} : f32"));
        p = b.assign(format!("arith.addf {pz}, {k} : f32"));
    }
    let series = b.assign(format!("arith.mulf {a}, {p} : f32"));
    let two = b.scalar(e, 2.0);
    let one = b.scalar(e, 1.0);
    let a2 = b.assign(format!("arith.mulf {a}, {two} : f32"));
    let t = exp_f32(b, &a2);
    let t1 = b.assign(format!("arith.addf {t}, {one} : f32"));
    let q = b.assign(format!("arith.divf {two}, {t1} : f32"));
    let expo = b.assign(format!("arith.subf {one}, {q} : f32"));
    let cut = b.scalar(e, TANH_SERIES_BELOW);
    let small = b.assign(format!("arith.cmpf olt, {a}, {cut} : f32"));
    let r = select(b, &small, &series, &expo, e);
    b.assign(format!("math.copysign {r}, {x} : f32"))
}

/// `erf x`: [`erf_f32`] for `f32`, `math.erf` (libm's) otherwise.
fn erf(b: &mut Body, e: ElemType, x: &str) -> String {
    if e == ElemType::F32 {
        erf_f32(b, x)
    } else {
        math(b, e, "erf", x)
    }
}

/// `R(a) = erfc(a) e^(a^2)` on `1 <= a <= 4` as a polynomial in `t = (1/a - 0.625) / 0.375`,
/// `t^0` first: fitted by least squares for relative error (`scripts/fit-erf.py` derives
/// them), within `8e-8` of `R`.
const ERFC_SCALED: [f64; 9] = [
    0.305_952_979_492_408_35,
    0.143_356_283_968_776_98,
    -0.024_242_541_419_657_638,
    0.002_309_780_337_584_620_4,
    0.000_458_476_447_085_637_37,
    -0.000_354_495_608_849_262_8,
    0.000_126_537_398_225_263_5,
    -1.952_546_538_237_569_6e-5,
    -3.940_291_763_511_343e-6,
];

/// `erf` of an `f32` without libm's `erff` (a call per element, which keeps loops over it
/// scalar): for `a = |x| < 1`, `a + a P(a^2)` with `P` erf's Taylor series over `a`, less
/// one, to `a^21` (the first term left out is below `1.1e-9` of the sum), by Horner's rule
/// with fused multiply-adds, the last one adding `a` (so the rounding of `P` counts only at
/// its own, smaller, size); for `1 <= a`, `1 - e^(-a^2) R(a)` with `R` [`ERFC_SCALED`] and
/// `a` clamped to 4 (past which `erf` rounds to 1); `x`'s sign; NaN stays NaN. Within one
/// ulp of the true value (0.997 at worst on 300,000 points of `[-6, 6]` and 2,000 down to
/// `1e-38`, against `f64`). No branch: loops over it vectorize.
fn erf_f32(b: &mut Body, x: &str) -> String {
    let e = ElemType::F32;
    let fma =
        |b: &mut Body, p: &str, q: &str, r: &str| b.assign(format!("math.fma {p}, {q}, {r} : f32"));
    let a = math(b, e, "absf", x);
    let z = b.assign(format!("arith.mulf {a}, {a} : f32"));
    // erf(a) / a = 2/sqrt(pi) sum_n (-1)^n z^n / (n! (2n + 1)), its first term less one.
    let mut fact = 1.0f64;
    let series: Vec<f64> = (0..11)
        .map(|n| {
            if n > 0 {
                fact *= f64::from(n);
            }
            let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
            let c = std::f64::consts::FRAC_2_SQRT_PI * sign / (fact * f64::from(2 * n + 1));
            if n == 0 { c - 1.0 } else { c }
        })
        .collect();
    let mut p = b.scalar(e, series[series.len() - 1]);
    for &c in series[..series.len() - 1].iter().rev() {
        let k = b.scalar(e, c);
        p = fma(b, &p, &z, &k);
    }
    let small = fma(b, &a, &p, &a);
    let one = b.scalar(e, 1.0);
    let four = b.scalar(e, 4.0);
    let ac = b.assign(format!("arith.maximumf {a}, {one} : f32"));
    let ac = b.assign(format!("arith.minimumf {ac}, {four} : f32"));
    let u = b.assign(format!("arith.divf {one}, {ac} : f32"));
    let mid = b.scalar(e, 0.625);
    let scale = b.scalar(e, 1.0 / 0.375);
    let t = b.assign(format!("arith.subf {u}, {mid} : f32"));
    let t = b.assign(format!("arith.mulf {t}, {scale} : f32"));
    let mut q = b.scalar(e, ERFC_SCALED[ERFC_SCALED.len() - 1]);
    for &c in ERFC_SCALED[..ERFC_SCALED.len() - 1].iter().rev() {
        let k = b.scalar(e, c);
        q = fma(b, &q, &t, &k);
    }
    let sq = b.assign(format!("arith.mulf {ac}, {ac} : f32"));
    let nsq = b.assign(format!("arith.negf {sq} : f32"));
    let ex = exp_f32(b, &nsq);
    let nex = b.assign(format!("arith.negf {ex} : f32"));
    let large = fma(b, &nex, &q, &one);
    let is_small = b.assign(format!("arith.cmpf olt, {a}, {one} : f32"));
    let r = select(b, &is_small, &small, &large, e);
    let r = b.assign(format!("math.copysign {r}, {x} : f32"));
    let nan = is_nan(b, e, x);
    select(b, &nan, x, &r, e)
}

/// The scalar result of a unary op on `x` of element type `e`.
pub fn unary(b: &mut Body, op: &UnaryOp, e: ElemType, x: &str) -> LResult<String> {
    use UnaryOp as U;
    let ty = elem(e);
    match op {
        U::Not => {
            let t = b.int("i1", 1);
            return Ok(b.assign(format!("arith.xori {x}, {t} : i1")));
        }
        U::IsNan => {
            return Ok(if e.is_float() {
                is_nan(b, e, x)
            } else {
                b.int("i1", 0)
            });
        }
        U::Abs if !e.is_float() => {
            if is_unsigned(e) {
                return Ok(x.to_string());
            }
            return Ok(b.assign(format!("math.absi {x} : {ty}")));
        }
        U::Neg if !e.is_float() => {
            let z = b.scalar(e, 0.0);
            return Ok(b.assign(format!("arith.subi {z}, {x} : {ty}")));
        }
        U::Sign if !e.is_float() => {
            let z = b.scalar(e, 0.0);
            let one = b.scalar(e, 1.0);
            let gt = cmp(b, e, "gt", x, &z);
            let pos = select(b, &gt, &one, &z, e);
            if is_unsigned(e) {
                return Ok(pos);
            }
            let m = b.scalar(e, -1.0);
            let lt = cmp(b, e, "lt", x, &z);
            return Ok(select(b, &lt, &m, &pos, e));
        }
        U::Relu if !e.is_float() => {
            let z = b.scalar(e, 0.0);
            let lt = cmp(b, e, "lt", x, &z);
            return Ok(select(b, &lt, &z, x, e));
        }
        _ if !e.is_float() => {
            return err(format!("{} needs a float operand, not {ty}", op_name(op)));
        }
        _ => {}
    }
    match op {
        U::Abs => return Ok(math(b, e, "absf", x)),
        U::Neg => return Ok(b.assign(format!("arith.negf {x} : {ty}"))),
        U::Relu => {
            let z = b.scalar(e, 0.0);
            let lt = cmp(b, e, "lt", x, &z);
            return Ok(select(b, &lt, &z, x, e));
        }
        U::Sign => {
            let z = b.scalar(e, 0.0);
            let one = b.scalar(e, 1.0);
            let m = b.scalar(e, -1.0);
            let gt = cmp(b, e, "gt", x, &z);
            let lt = cmp(b, e, "lt", x, &z);
            // zero (and NaN) times 0 keeps the interpreter's `x * 0`.
            let keep = b.assign(format!("arith.mulf {x}, {z} : {ty}"));
            let r = select(b, &lt, &m, &keep, e);
            return Ok(select(b, &gt, &one, &r, e));
        }
        _ => {}
    }
    in_f32(b, e, x, |b, e, x| {
        let ty = elem(e);
        let c = |b: &mut Body, v: f64| b.scalar(e, v);
        Ok(match op {
            U::Exp => exp(b, e, x),
            U::Log => math(b, e, "log", x),
            U::Sqrt => math(b, e, "sqrt", x),
            U::Reciprocal => {
                let one = c(b, 1.0);
                b.assign(format!("arith.divf {one}, {x} : {ty}"))
            }
            U::Sin => math(b, e, "sin", x),
            U::Cos => math(b, e, "cos", x),
            U::Tan => math(b, e, "tan", x),
            U::Asin => math(b, e, "asin", x),
            U::Acos => math(b, e, "acos", x),
            U::Atan => math(b, e, "atan", x),
            U::Tanh if e == ElemType::F32 => tanh_f32(b, x),
            U::Tanh => math(b, e, "tanh", x),
            U::Erf => erf(b, e, x),
            U::Ceil => math(b, e, "ceil", x),
            U::Floor => math(b, e, "floor", x),
            U::Round => math(b, e, "roundeven", x),
            U::Sigmoid => {
                // 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) otherwise (no overflow).
                // One exponential: `t = exp(-|x|)` is `exp(-x)` on the first side and
                // `exp(x)` on the second.
                let one = c(b, 1.0);
                let z = c(b, 0.0);
                let a = math(b, e, "absf", x);
                let n = b.assign(format!("arith.negf {a} : {ty}"));
                let t = exp(b, e, &n);
                let d = b.assign(format!("arith.addf {one}, {t} : {ty}"));
                let p = b.assign(format!("arith.divf {one}, {d} : {ty}"));
                let q = b.assign(format!("arith.divf {t}, {d} : {ty}"));
                let ge = cmp(b, e, "ge", x, &z);
                select(b, &ge, &p, &q, e)
            }
            U::Softplus => softplus(b, e, x),
            U::Softsign => {
                let one = c(b, 1.0);
                let a = math(b, e, "absf", x);
                let d = b.assign(format!("arith.addf {one}, {a} : {ty}"));
                b.assign(format!("arith.divf {x}, {d} : {ty}"))
            }
            U::Mish => {
                let sp = softplus(b, e, x);
                let t = math(b, e, "tanh", &sp);
                b.assign(format!("arith.mulf {x}, {t} : {ty}"))
            }
            U::HardSwish => {
                let three = c(b, 3.0);
                let six = c(b, 6.0);
                let z = c(b, 0.0);
                let r = b.assign(format!("arith.addf {x}, {three} : {ty}"));
                let lt = cmp(b, e, "lt", &r, &z);
                let r = select(b, &lt, &z, &r, e);
                let gt = cmp(b, e, "gt", &r, &six);
                let r = select(b, &gt, &six, &r, e);
                let m = b.assign(format!("arith.mulf {x}, {r} : {ty}"));
                b.assign(format!("arith.divf {m}, {six} : {ty}"))
            }
            U::Gelu { tanh: false } => {
                let half = c(b, 0.5);
                let one = c(b, 1.0);
                let k = c(b, std::f64::consts::FRAC_1_SQRT_2);
                let s = b.assign(format!("arith.mulf {x}, {k} : {ty}"));
                let er = erf(b, e, &s);
                let p = b.assign(format!("arith.addf {one}, {er} : {ty}"));
                let h = b.assign(format!("arith.mulf {half}, {x} : {ty}"));
                b.assign(format!("arith.mulf {h}, {p} : {ty}"))
            }
            U::Gelu { tanh: true } => {
                let half = c(b, 0.5);
                let one = c(b, 1.0);
                let k = c(b, (2.0 / std::f64::consts::PI).sqrt());
                let c3 = c(b, 0.044715);
                let x2 = b.assign(format!("arith.mulf {x}, {x} : {ty}"));
                let x3 = b.assign(format!("arith.mulf {x2}, {x} : {ty}"));
                let cx3 = b.assign(format!("arith.mulf {c3}, {x3} : {ty}"));
                let inner = b.assign(format!("arith.addf {x}, {cx3} : {ty}"));
                let ki = b.assign(format!("arith.mulf {k}, {inner} : {ty}"));
                let t = math(b, e, "tanh", &ki);
                let p = b.assign(format!("arith.addf {one}, {t} : {ty}"));
                let h = b.assign(format!("arith.mulf {half}, {x} : {ty}"));
                b.assign(format!("arith.mulf {h}, {p} : {ty}"))
            }
            U::Elu { alpha } | U::Selu { alpha, .. } => {
                let a = c(b, *alpha);
                let one = c(b, 1.0);
                let z = c(b, 0.0);
                let ex = exp(b, e, x);
                let em = b.assign(format!("arith.subf {ex}, {one} : {ty}"));
                let neg = b.assign(format!("arith.mulf {a}, {em} : {ty}"));
                let gt = cmp(b, e, "gt", x, &z);
                let r = select(b, &gt, x, &neg, e);
                if let U::Selu { gamma, .. } = op {
                    let g = c(b, *gamma);
                    b.assign(format!("arith.mulf {g}, {r} : {ty}"))
                } else {
                    r
                }
            }
            U::LeakyRelu { alpha } => {
                let a = c(b, *alpha);
                let z = c(b, 0.0);
                let neg = b.assign(format!("arith.mulf {a}, {x} : {ty}"));
                let ge = cmp(b, e, "ge", x, &z);
                select(b, &ge, x, &neg, e)
            }
            U::HardSigmoid { alpha, beta } => {
                let a = c(b, *alpha);
                let bt = c(b, *beta);
                let z = c(b, 0.0);
                let one = c(b, 1.0);
                let m = b.assign(format!("arith.mulf {a}, {x} : {ty}"));
                let r = b.assign(format!("arith.addf {m}, {bt} : {ty}"));
                let lt = cmp(b, e, "lt", &r, &z);
                let r = select(b, &lt, &z, &r, e);
                let gt = cmp(b, e, "gt", &r, &one);
                select(b, &gt, &one, &r, e)
            }
            other => return err(format!("no lowering for {}", op_name(other))),
        })
    })
}

/// `ln(1 + exp(x))` computed without overflow: `max(x, 0) + log1p(exp(-|x|))`.
fn softplus(b: &mut Body, e: ElemType, x: &str) -> String {
    let ty = elem(e);
    let z = b.scalar(e, 0.0);
    let a = math(b, e, "absf", x);
    let na = b.assign(format!("arith.negf {a} : {ty}"));
    let ex = exp(b, e, &na);
    let l = math(b, e, "log1p", &ex);
    let m = b.assign(format!("arith.maximumf {x}, {z} : {ty}"));
    b.assign(format!("arith.addf {m}, {l} : {ty}"))
}

fn op_name(op: &UnaryOp) -> String {
    tessera_ir::Op::Unary(*op).name().to_string()
}

/// The scalar result of a binary op; `e` is the operands' element type.
pub fn binary(b: &mut Body, op: &BinaryOp, e: ElemType, x: &str, y: &str) -> LResult<String> {
    use BinaryOp as B;
    let ty = elem(e);
    let uns = is_unsigned(e);
    Ok(match op {
        B::Add => arith(b, e, "addf", "addi", x, y),
        B::Sub => arith(b, e, "subf", "subi", x, y),
        B::Mul => arith(b, e, "mulf", "muli", x, y),
        B::Div => arith(b, e, "divf", if uns { "divui" } else { "divsi" }, x, y),
        B::Fmod => arith(b, e, "remf", if uns { "remui" } else { "remsi" }, x, y),
        B::Mod => {
            if uns {
                arith(b, e, "remf", "remui", x, y)
            } else {
                // r = x rem y; if r != 0 and sign(r) != sign(y): r + y.
                let r = arith(b, e, "remf", "remsi", x, y);
                let z = b.scalar(e, 0.0);
                let rz = cmp(b, e, "ne", &r, &z);
                let rn = cmp(b, e, "lt", &r, &z);
                let yn = cmp(b, e, "lt", y, &z);
                let differ = b.assign(format!("arith.xori {rn}, {yn} : i1"));
                let fix = b.assign(format!("arith.andi {rz}, {differ} : i1"));
                let ry = arith(b, e, "addf", "addi", &r, y);
                let fixed = select(b, &fix, &ry, &r, e);
                if e.is_float() {
                    // A zero remainder takes the divisor's sign.
                    let zs = b.assign(format!("math.copysign {z}, {y} : {ty}"));
                    let iz = cmp(b, e, "eq", &r, &z);
                    select(b, &iz, &zs, &fixed, e)
                } else {
                    fixed
                }
            }
        }
        B::Pow => {
            if e.is_float() {
                in_f32_2(b, e, x, y, |b, e, x, y| {
                    Ok(b.assign(format!("math.powf {x}, {y} : {}", elem(e))))
                })?
            } else {
                ipow(b, e, x, y)
            }
        }
        B::Max | B::Min => {
            let is_max = matches!(op, B::Max);
            if e.is_float() {
                b.assign(format!(
                    "arith.{} {x}, {y} : {ty}",
                    if is_max { "maximumf" } else { "minimumf" }
                ))
            } else {
                let f = match (is_max, uns) {
                    (true, false) => "maxsi",
                    (true, true) => "maxui",
                    (false, false) => "minsi",
                    (false, true) => "minui",
                };
                b.assign(format!("arith.{f} {x}, {y} : {ty}"))
            }
        }
        B::Prelu => {
            let z = b.scalar(e, 0.0);
            let ge = cmp(b, e, "ge", x, &z);
            let m = arith(b, e, "mulf", "muli", y, x);
            select(b, &ge, x, &m, e)
        }
        B::And => b.assign(format!("arith.andi {x}, {y} : i1")),
        B::Or => b.assign(format!("arith.ori {x}, {y} : i1")),
        B::Xor => b.assign(format!("arith.xori {x}, {y} : i1")),
        B::Equal => cmp(b, e, "eq", x, y),
        B::Less => cmp(b, e, "lt", x, y),
        B::LessEqual => cmp(b, e, "le", x, y),
        B::Greater => cmp(b, e, "gt", x, y),
        B::GreaterEqual => cmp(b, e, "ge", x, y),
        B::ShiftLeft | B::ShiftRight => shift(b, *op, e, x, y),
    })
}

/// `x << y` or `x >> y` (integers) as [`BinaryOp::ShiftLeft`] and [`BinaryOp::ShiftRight`]
/// define them. MLIR's shifts are poison for amounts of the bit width or more, so the amount
/// is made valid first: `inside` is `y < width` unsigned (a negative `y` reads as a huge
/// unsigned one); outside it, an arithmetic right shift by `width - 1` gives what the sign
/// alone gives (-1 or 0), and the other shifts give 0.
fn shift(b: &mut Body, op: BinaryOp, e: ElemType, x: &str, y: &str) -> String {
    let ty = elem(e);
    let width = b.scalar(e, f64::from(int_width(e)));
    let inside = b.assign(format!("arith.cmpi ult, {y}, {width} : {ty}"));
    let zero = b.scalar(e, 0.0);
    if op == BinaryOp::ShiftRight && !is_unsigned(e) {
        let top = b.scalar(e, f64::from(int_width(e) - 1));
        let amount = select(b, &inside, y, &top, e);
        return b.assign(format!("arith.shrsi {x}, {amount} : {ty}"));
    }
    let amount = select(b, &inside, y, &zero, e);
    let f = if op == BinaryOp::ShiftLeft {
        "shli"
    } else {
        "shrui"
    };
    let r = b.assign(format!("arith.{f} {x}, {amount} : {ty}"));
    select(b, &inside, &r, &zero, e)
}

/// Integer power by squaring with wrapping products, over every bit of the exponent (an
/// `scf.for` of the type's width; `math.ipowi` would need `convert-math-to-funcs`, whose
/// unstructured control flow one-shot bufferization rejects). A negative exponent (an
/// error in the interpreter) reads as its unsigned bits.
fn ipow(b: &mut Body, e: ElemType, x: &str, y: &str) -> String {
    let ty = elem(e);
    let one = b.scalar(e, 1.0);
    let zero = b.scalar(e, 0.0);
    let lo = b.index(0);
    let hi = b.index(i64::from(int_width(e)));
    let step = b.index(1);
    let res = b.fresh();
    let (i, acc, base, ex) = (b.fresh(), b.fresh(), b.fresh(), b.fresh());
    b.line(format!(
        "{res}:3 = scf.for {i} = {lo} to {hi} step {step} iter_args({acc} = {one}, {base} = {x}, \
         {ex} = {y}) -> ({ty}, {ty}, {ty}) {{"
    ));
    let bit = b.assign(format!("arith.andi {ex}, {one} : {ty}"));
    let odd = b.assign(format!("arith.cmpi ne, {bit}, {zero} : {ty}"));
    let m = b.assign(format!("arith.muli {acc}, {base} : {ty}"));
    let acc2 = select(b, &odd, &m, &acc, e);
    let base2 = b.assign(format!("arith.muli {base}, {base} : {ty}"));
    let ex2 = b.assign(format!("arith.shrui {ex}, {one} : {ty}"));
    b.line(format!(
        "  scf.yield {acc2}, {base2}, {ex2} : {ty}, {ty}, {ty}"
    ));
    b.line("}");
    format!("{res}#0")
}

fn in_f32_2(
    b: &mut Body,
    e: ElemType,
    x: &str,
    y: &str,
    f: impl FnOnce(&mut Body, ElemType, &str, &str) -> LResult<String>,
) -> LResult<String> {
    if matches!(e, ElemType::F16 | ElemType::BF16) {
        let wx = b.assign(format!("arith.extf {x} : {} to f32", elem(e)));
        let wy = b.assign(format!("arith.extf {y} : {} to f32", elem(e)));
        let r = f(b, ElemType::F32, &wx, &wy)?;
        Ok(b.assign(format!("arith.truncf {r} : f32 to {}", elem(e))))
    } else {
        f(b, e, x, y)
    }
}

/// Converts a scalar between element types with the interpreter's rules.
pub fn cast(b: &mut Body, from: ElemType, to: ElemType, x: &str) -> String {
    if from == to {
        return x.to_string();
    }
    let (f, t) = (elem(from), elem(to));
    if to == ElemType::Bool {
        let z = b.scalar(from, 0.0);
        return if from.is_float() {
            b.assign(format!("arith.cmpf une, {x}, {z} : {f}"))
        } else {
            b.assign(format!("arith.cmpi ne, {x}, {z} : {f}"))
        };
    }
    match (from.is_float(), to.is_float()) {
        (true, true) => {
            let (wf, wt) = (float_width(from), float_width(to));
            if wf == wt {
                // f16 <-> bf16: through f32.
                let w = b.assign(format!("arith.extf {x} : {f} to f32"));
                b.assign(format!("arith.truncf {w} : f32 to {t}"))
            } else if wf < wt {
                b.assign(format!("arith.extf {x} : {f} to {t}"))
            } else {
                b.assign(format!("arith.truncf {x} : {f} to {t}"))
            }
        }
        (false, true) => {
            let op = if is_unsigned(from) {
                "uitofp"
            } else {
                "sitofp"
            };
            b.assign(format!("arith.{op} {x} : {f} to {t}"))
        }
        (true, false) => {
            // Truncate toward zero, saturating at the type's range; NaN gives 0.
            let (lo, hi) = int_range(to);
            let wide = if float_width(from) < 32 {
                b.assign(format!("arith.extf {x} : {f} to f32"))
            } else {
                x.to_string()
            };
            let fe = if float_width(from) < 32 {
                ElemType::F32
            } else {
                from
            };
            let fw = elem(fe);
            let lo_c = b.scalar(fe, lo);
            let hi_c = b.scalar(fe, hi);
            let c1 = b.assign(format!("arith.maximumf {wide}, {lo_c} : {fw}"));
            let c2 = b.assign(format!("arith.minimumf {c1}, {hi_c} : {fw}"));
            let op = if is_unsigned(to) { "fptoui" } else { "fptosi" };
            let v = b.assign(format!("arith.{op} {c2} : {fw} to {t}"));
            // Saturation at the top: i64::MAX is not representable in f64, so clamp there.
            let ge = b.assign(format!("arith.cmpf oge, {wide}, {hi_c} : {fw}"));
            let top = b.scalar(to, hi);
            let v = select(b, &ge, &top, &v, to);
            let nan = is_nan(b, fe, &wide);
            let z = b.scalar(to, 0.0);
            select(b, &nan, &z, &v, to)
        }
        (false, false) => {
            let (wf, wt) = (int_width(from), int_width(to));
            if wf == wt {
                x.to_string()
            } else if wf > wt {
                b.assign(format!("arith.trunci {x} : {f} to {t}"))
            } else if is_unsigned(from) {
                b.assign(format!("arith.extui {x} : {f} to {t}"))
            } else {
                b.assign(format!("arith.extsi {x} : {f} to {t}"))
            }
        }
    }
}

fn float_width(e: ElemType) -> u32 {
    match e {
        ElemType::F16 | ElemType::BF16 => 16,
        ElemType::F32 => 32,
        _ => 64,
    }
}

fn int_width(e: ElemType) -> u32 {
    match e {
        ElemType::Bool => 1,
        ElemType::I8 | ElemType::U8 => 8,
        ElemType::I16 => 16,
        ElemType::I32 => 32,
        _ => 64,
    }
}

fn int_range(e: ElemType) -> (f64, f64) {
    match e {
        ElemType::U8 => (0.0, 255.0),
        ElemType::I8 => (-128.0, 127.0),
        ElemType::I16 => (-32768.0, 32767.0),
        ElemType::I32 => (i32::MIN as f64, i32::MAX as f64),
        _ => (i64::MIN as f64, i64::MAX as f64),
    }
}

/// Clamp with optional bounds.
pub fn clip(b: &mut Body, e: ElemType, x: &str, min: Option<f64>, max: Option<f64>) -> String {
    let mut v = x.to_string();
    if let Some(lo) = min {
        let c = b.scalar(e, lo);
        let lt = cmp(b, e, "lt", &v, &c);
        v = select(b, &lt, &c, &v, e);
    }
    if let Some(hi) = max {
        let c = b.scalar(e, hi);
        let gt = cmp(b, e, "gt", &v, &c);
        v = select(b, &gt, &c, &v, e);
    }
    v
}

/// Comparison helper for other lowerings (`eq`, `ne`, `lt`, `le`, `gt`, `ge`).
pub fn compare(b: &mut Body, e: ElemType, pred: &str, x: &str, y: &str) -> String {
    cmp(b, e, pred, x, y)
}

/// `select` helper for other lowerings.
pub fn pick(b: &mut Body, c: &str, x: &str, y: &str, e: ElemType) -> String {
    select(b, c, x, y, e)
}
