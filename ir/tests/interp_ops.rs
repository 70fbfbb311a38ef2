//! Per-op tests of the reference interpreter with hand-computed expected values.

#![allow(clippy::cloned_ref_to_slice_refs)] // Table rows read better with `&[x.clone()]`.

mod interp_common;

use interp_common::*;
use tessera_ir::{
    ArgKind, BinaryOp, ConvAttrs, CoordTransform, DepthToSpaceMode, Dim, ElemType, NearestMode, Op,
    PadMode, PoolAttrs, PoolKind, ReduceKind, ResizeMode, Scalar, ScatterReduction, UnaryOp,
};

const NAN: f32 = f32::NAN;
const INF: f32 = f32::INFINITY;

fn un(u: UnaryOp) -> Op {
    Op::Unary(u)
}
fn bin(b: BinaryOp) -> Op {
    Op::Binary(b)
}

// ---------------------------------------------------------------- unary

#[test]
fn unary_float_table() {
    let x = |v: &[f32]| f32t(&[v.len()], v);
    check(
        un(UnaryOp::Exp),
        &[x(&[0.0, 1.0])],
        x(&[1.0, std::f32::consts::E]),
    );
    check(
        un(UnaryOp::Log),
        &[x(&[1.0, std::f32::consts::E])],
        x(&[0.0, 1.0]),
    );
    check(un(UnaryOp::Sqrt), &[x(&[4.0, 9.0])], x(&[2.0, 3.0]));
    check(un(UnaryOp::Reciprocal), &[x(&[2.0, 4.0])], x(&[0.5, 0.25]));
    check(un(UnaryOp::Sin), &[x(&[0.0])], x(&[0.0]));
    check(un(UnaryOp::Cos), &[x(&[0.0])], x(&[1.0]));
    check(un(UnaryOp::Tan), &[x(&[0.0])], x(&[0.0]));
    check(
        un(UnaryOp::Asin),
        &[x(&[1.0])],
        x(&[std::f32::consts::FRAC_PI_2]),
    );
    check(un(UnaryOp::Acos), &[x(&[1.0])], x(&[0.0]));
    check(
        un(UnaryOp::Atan),
        &[x(&[1.0])],
        x(&[std::f32::consts::FRAC_PI_4]),
    );
    check(un(UnaryOp::Tanh), &[x(&[0.0])], x(&[0.0]));
    check(
        un(UnaryOp::Sigmoid),
        &[x(&[0.0, -1000.0, 1000.0])],
        x(&[0.5, 0.0, 1.0]),
    );
    check(
        un(UnaryOp::Erf),
        &[x(&[0.0, 1.0, -1.0, 10.0])],
        x(&[0.0, 0.842_700_8, -0.842_700_8, 1.0]),
    );
    check(un(UnaryOp::Relu), &[x(&[-1.0, 2.0])], x(&[0.0, 2.0]));
    check(un(UnaryOp::Abs), &[x(&[-1.5, 2.0])], x(&[1.5, 2.0]));
    check(un(UnaryOp::Neg), &[x(&[-1.5, 2.0])], x(&[1.5, -2.0]));
    check(
        un(UnaryOp::Sign),
        &[x(&[-3.0, 0.0, 2.0])],
        x(&[-1.0, 0.0, 1.0]),
    );
    check(un(UnaryOp::Ceil), &[x(&[1.2, -1.2])], x(&[2.0, -1.0]));
    check(un(UnaryOp::Floor), &[x(&[1.8, -1.2])], x(&[1.0, -2.0]));
    // Ties to even.
    check(
        un(UnaryOp::Round),
        &[x(&[0.5, 1.5, 2.5, -0.5, 2.6])],
        x(&[0.0, 2.0, 2.0, -0.0, 3.0]),
    );
    check(
        un(UnaryOp::Softplus),
        &[x(&[0.0, 100.0])],
        x(&[std::f32::consts::LN_2, 100.0]),
    );
    check(un(UnaryOp::Softsign), &[x(&[1.0, -3.0])], x(&[0.5, -0.75]));
    check(un(UnaryOp::Mish), &[x(&[0.0])], x(&[0.0]));
    check(
        un(UnaryOp::HardSwish),
        &[x(&[-4.0, 0.0, 1.0, 4.0])],
        x(&[0.0, 0.0, 0.666_666_7, 4.0]),
    );
    check(
        un(UnaryOp::Gelu { tanh: false }),
        &[x(&[1.0, 0.0])],
        x(&[0.841_344_7, 0.0]),
    );
    check(
        un(UnaryOp::Gelu { tanh: true }),
        &[x(&[1.0])],
        x(&[0.841_192]),
    );
    check(
        un(UnaryOp::Elu { alpha: 1.0 }),
        &[x(&[-1.0, 2.0])],
        x(&[-0.632_120_56, 2.0]),
    );
    check(
        un(UnaryOp::LeakyRelu { alpha: 0.1 }),
        &[x(&[-2.0, 3.0])],
        x(&[-0.2, 3.0]),
    );
    check(
        un(UnaryOp::Selu {
            alpha: 2.0,
            gamma: 3.0,
        }),
        &[x(&[1.0, -1.0])],
        x(&[3.0, -3.792_723_4]),
    );
    check(
        un(UnaryOp::HardSigmoid {
            alpha: 0.5,
            beta: 0.5,
        }),
        &[x(&[-2.0, 0.0, 2.0])],
        x(&[0.0, 0.5, 1.0]),
    );
    check(
        un(UnaryOp::IsNan),
        &[x(&[NAN, 1.0, INF])],
        boolt(&[3], &[true, false, false]),
    );
    check(
        un(UnaryOp::Not),
        &[boolt(&[2], &[true, false])],
        boolt(&[2], &[false, true]),
    );
}

#[test]
fn unary_other_types() {
    check(
        un(UnaryOp::Abs),
        &[i32t(&[3], &[-3, 0, 4])],
        i32t(&[3], &[3, 0, 4]),
    );
    // The most negative integer wraps.
    check(un(UnaryOp::Abs), &[i8t(&[1], &[-128])], i8t(&[1], &[-128]));
    check(
        un(UnaryOp::Neg),
        &[i64t(&[2], &[5, -7])],
        i64t(&[2], &[-5, 7]),
    );
    check(
        un(UnaryOp::Sign),
        &[i8t(&[3], &[-9, 0, 9])],
        i8t(&[3], &[-1, 0, 1]),
    );
    check(
        un(UnaryOp::Relu),
        &[i32t(&[2], &[-9, 9])],
        i32t(&[2], &[0, 9]),
    );
    check(
        un(UnaryOp::Exp),
        &[f64t(&[1], &[1.0])],
        f64t(&[1], &[std::f64::consts::E]),
    );
    check(
        un(UnaryOp::Sqrt),
        &[f16t(&[2], &[4.0, 2.25])],
        f16t(&[2], &[2.0, 1.5]),
    );
    check(
        un(UnaryOp::Neg),
        &[bf16t(&[1], &[1.5])],
        bf16t(&[1], &[-1.5]),
    );
    // Empty tensors go through.
    check(un(UnaryOp::Exp), &[f32t(&[0, 3], &[])], f32t(&[0, 3], &[]));
    check(un(UnaryOp::Sign), &[f32t(&[1], &[NAN])], f32t(&[1], &[NAN]));
}

#[test]
fn unary_errors() {
    check_err(
        un(UnaryOp::Exp),
        &[i32t(&[1], &[1])],
        "exp: expects a floating-point operand, got element type i32",
    );
    check_err(
        un(UnaryOp::Neg),
        &[u8t(&[1], &[1])],
        "neg: not defined for unsigned element type u8",
    );
    check_err(
        un(UnaryOp::Not),
        &[f32t(&[1], &[1.0])],
        "not: expected element type bool, got f32",
    );
    check_err(
        un(UnaryOp::Abs),
        &[boolt(&[1], &[true])],
        "abs: not defined for element type bool",
    );
    check_err(un(UnaryOp::Exp), &[], "exp: expected 1 operand, got 0");
}

// ---------------------------------------------------------------- binary

#[test]
fn binary_broadcasting() {
    // Scalar.
    check(
        bin(BinaryOp::Add),
        &[f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]), f32t(&[], &[10.0])],
        f32t(&[2, 2], &[11.0, 12.0, 13.0, 14.0]),
    );
    // Column [2,1] against row [3].
    check(
        bin(BinaryOp::Mul),
        &[f32t(&[2, 1], &[1.0, 2.0]), f32t(&[3], &[1.0, 10.0, 100.0])],
        f32t(&[2, 3], &[1.0, 10.0, 100.0, 2.0, 20.0, 200.0]),
    );
    // Rank extension on both sides: [2,1,2] - [3,1].
    check(
        bin(BinaryOp::Sub),
        &[
            i64t(&[2, 1, 2], &[10, 20, 30, 40]),
            i64t(&[3, 1], &[1, 2, 3]),
        ],
        i64t(&[2, 3, 2], &[9, 19, 8, 18, 7, 17, 29, 39, 28, 38, 27, 37]),
    );
    // Empty axis.
    check(
        bin(BinaryOp::Add),
        &[f32t(&[0, 3], &[]), f32t(&[3], &[1.0, 2.0, 3.0])],
        f32t(&[0, 3], &[]),
    );
    check(
        bin(BinaryOp::Sub),
        &[f64t(&[2], &[1.5, 2.0]), f64t(&[2], &[0.25, 3.0])],
        f64t(&[2], &[1.25, -1.0]),
    );
    check(
        bin(BinaryOp::Add),
        &[f16t(&[2], &[1.5, 2.0]), f16t(&[2], &[0.25, 0.5])],
        f16t(&[2], &[1.75, 2.5]),
    );
    check(
        bin(BinaryOp::Mul),
        &[bf16t(&[2], &[1.5, 2.0]), bf16t(&[], &[4.0])],
        bf16t(&[2], &[6.0, 8.0]),
    );
}

#[test]
fn binary_integer_semantics() {
    // Wrapping.
    check(
        bin(BinaryOp::Add),
        &[i8t(&[2], &[127, -128]), i8t(&[2], &[1, -1])],
        i8t(&[2], &[-128, 127]),
    );
    check(
        bin(BinaryOp::Sub),
        &[u8t(&[1], &[0]), u8t(&[1], &[1])],
        u8t(&[1], &[255]),
    );
    check(
        bin(BinaryOp::Mul),
        &[i32t(&[1], &[65536]), i32t(&[1], &[65536])],
        i32t(&[1], &[0]),
    );
    // Division truncates toward zero.
    let a = i32t(&[4], &[7, -7, 7, -7]);
    let b = i32t(&[4], &[2, 2, -2, -2]);
    check(
        bin(BinaryOp::Div),
        &[a.clone(), b.clone()],
        i32t(&[4], &[3, -3, -3, 3]),
    );
    // Mod takes the divisor's sign, fmod the dividend's.
    check(
        bin(BinaryOp::Mod),
        &[a.clone(), b.clone()],
        i32t(&[4], &[1, 1, -1, -1]),
    );
    check(bin(BinaryOp::Fmod), &[a, b], i32t(&[4], &[1, -1, 1, -1]));
    check(
        bin(BinaryOp::Pow),
        &[i64t(&[2], &[2, 3]), i64t(&[2], &[10, 0])],
        i64t(&[2], &[1024, 1]),
    );
    check(
        bin(BinaryOp::Max),
        &[i32t(&[2], &[1, 5]), i32t(&[2], &[3, 2])],
        i32t(&[2], &[3, 5]),
    );
    check(
        bin(BinaryOp::Min),
        &[u8t(&[2], &[1, 5]), u8t(&[2], &[3, 2])],
        u8t(&[2], &[1, 2]),
    );
    check(
        bin(BinaryOp::Prelu),
        &[i32t(&[2], &[-2, 3]), i32t(&[1], &[4])],
        i32t(&[2], &[-8, 3]),
    );
}

#[test]
fn shifts_follow_onnx_bitshift() {
    // Within the width: wrapping left shifts (bits past the sign bit are dropped), arithmetic
    // right shifts on signed types, logical ones on unsigned types.
    check(
        bin(BinaryOp::ShiftLeft),
        &[i32t(&[3], &[1, -8, 1 << 30]), i32t(&[3], &[4, 1, 1])],
        i32t(&[3], &[16, -16, i32::MIN]),
    );
    check(
        bin(BinaryOp::ShiftRight),
        &[i32t(&[3], &[-8, -1, 64]), i32t(&[3], &[1, 1, 3])],
        i32t(&[3], &[-4, -1, 8]),
    );
    check(
        bin(BinaryOp::ShiftRight),
        &[u8t(&[2], &[255, 128]), u8t(&[2], &[1, 7])],
        u8t(&[2], &[127, 1]),
    );
    // A negative amount or one of the width or more: 0, or -1 for a right shift of a
    // negative value.
    check(
        bin(BinaryOp::ShiftLeft),
        &[i64t(&[3], &[5, 5, -1]), i64t(&[3], &[-1, 64, 100])],
        i64t(&[3], &[0, 0, 0]),
    );
    check(
        bin(BinaryOp::ShiftRight),
        &[i32t(&[4], &[-8, 8, -8, 8]), i32t(&[4], &[32, 32, -1, -1])],
        i32t(&[4], &[-1, 0, -1, 0]),
    );
    check(
        bin(BinaryOp::ShiftLeft),
        &[u8t(&[2], &[1, 1]), u8t(&[2], &[7, 8])],
        u8t(&[2], &[128, 0]),
    );
}

#[test]
fn binary_float_semantics() {
    let x = |v: &[f32]| f32t(&[v.len()], v);
    check(
        bin(BinaryOp::Div),
        &[x(&[1.0, -1.0, 0.0]), x(&[0.0, 0.0, 4.0])],
        x(&[INF, -INF, 0.0]),
    );
    check(
        bin(BinaryOp::Mod),
        &[x(&[5.5, -5.5]), x(&[-2.0, 2.0])],
        x(&[-0.5, 0.5]),
    );
    check(
        bin(BinaryOp::Fmod),
        &[x(&[5.5, -5.5]), x(&[-2.0, 2.0])],
        x(&[1.5, -1.5]),
    );
    check(
        bin(BinaryOp::Pow),
        &[x(&[2.0, 4.0]), x(&[3.0, 0.5])],
        x(&[8.0, 2.0]),
    );
    // NaN wins in max and min.
    check(
        bin(BinaryOp::Max),
        &[x(&[NAN, 1.0, 1.0]), x(&[0.0, NAN, 3.0])],
        x(&[NAN, NAN, 3.0]),
    );
    check(
        bin(BinaryOp::Min),
        &[x(&[NAN, 1.0, 1.0]), x(&[0.0, NAN, 3.0])],
        x(&[NAN, NAN, 1.0]),
    );
    check(
        bin(BinaryOp::Prelu),
        &[x(&[-2.0, 3.0]), x(&[0.5])],
        x(&[-1.0, 3.0]),
    );
}

#[test]
fn binary_logical_and_comparisons() {
    let p = boolt(&[4], &[true, true, false, false]);
    let q = boolt(&[4], &[true, false, true, false]);
    check(
        bin(BinaryOp::And),
        &[p.clone(), q.clone()],
        boolt(&[4], &[true, false, false, false]),
    );
    check(
        bin(BinaryOp::Or),
        &[p.clone(), q.clone()],
        boolt(&[4], &[true, true, true, false]),
    );
    check(
        bin(BinaryOp::Xor),
        &[p, q],
        boolt(&[4], &[false, true, true, false]),
    );
    let a = i64t(&[3], &[1, 2, 3]);
    let b = i64t(&[], &[2]);
    check(
        bin(BinaryOp::Equal),
        &[a.clone(), b.clone()],
        boolt(&[3], &[false, true, false]),
    );
    check(
        bin(BinaryOp::Less),
        &[a.clone(), b.clone()],
        boolt(&[3], &[true, false, false]),
    );
    check(
        bin(BinaryOp::LessEqual),
        &[a.clone(), b.clone()],
        boolt(&[3], &[true, true, false]),
    );
    check(
        bin(BinaryOp::Greater),
        &[a.clone(), b.clone()],
        boolt(&[3], &[false, false, true]),
    );
    check(
        bin(BinaryOp::GreaterEqual),
        &[a, b],
        boolt(&[3], &[false, true, true]),
    );
    check(
        bin(BinaryOp::Less),
        &[f16t(&[2], &[1.0, 3.0]), f16t(&[1], &[2.0])],
        boolt(&[2], &[true, false]),
    );
    check(
        bin(BinaryOp::Equal),
        &[f32t(&[1], &[NAN]), f32t(&[1], &[NAN])],
        boolt(&[1], &[false]),
    );
}

#[test]
fn binary_errors() {
    check_err(
        bin(BinaryOp::ShiftLeft),
        &[f32t(&[1], &[1.0]), f32t(&[1], &[1.0])],
        "shift-left: shifts need integer operands",
    );
    check_err(
        bin(BinaryOp::Div),
        &[i32t(&[2], &[1, 2]), i32t(&[2], &[1, 0])],
        "div: integer division by zero",
    );
    check_err(
        bin(BinaryOp::Mod),
        &[i64t(&[1], &[1]), i64t(&[1], &[0])],
        "mod: integer modulo by zero",
    );
    check_err(
        bin(BinaryOp::Pow),
        &[i32t(&[1], &[2]), i32t(&[1], &[-1])],
        "negative exponent",
    );
    check_err(
        bin(BinaryOp::Add),
        &[f32t(&[1], &[1.0]), i64t(&[1], &[1])],
        "add: operand element types differ: f32 vs i64",
    );
    check_err(
        bin(BinaryOp::Add),
        &[f16t(&[1], &[1.0]), f32t(&[1], &[1.0])],
        "add: operand element types differ: f16 vs f32",
    );
    check_err(
        bin(BinaryOp::Add),
        &[f32t(&[2], &[1.0, 2.0]), f32t(&[3], &[1.0, 2.0, 3.0])],
        "cannot broadcast shapes [2] and [3]",
    );
    check_err(
        bin(BinaryOp::Add),
        &[f32t(&[1], &[1.0])],
        "add: expected 2 operands, got 1",
    );
    check_err(
        bin(BinaryOp::And),
        &[i32t(&[1], &[1]), i32t(&[1], &[1])],
        "logical ops need bool operands",
    );
    check_err(
        bin(BinaryOp::Add),
        &[boolt(&[1], &[true]), boolt(&[1], &[true])],
        "not defined for element type bool",
    );
}

#[test]
fn select_cast_clip() {
    check(
        Op::Select,
        &[
            boolt(&[2], &[true, false]),
            f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[], &[0.0]),
        ],
        f32t(&[2, 2], &[1.0, 0.0, 3.0, 0.0]),
    );
    check_err(
        Op::Select,
        &[i32t(&[1], &[1]), f32t(&[1], &[1.0]), f32t(&[1], &[1.0])],
        "condition must be bool",
    );
    // Float to int truncates toward zero, saturating; NaN gives 0.
    check(
        Op::Cast { to: ElemType::I32 },
        &[f32t(&[5], &[-1.7, 2.9, NAN, 1e10, -1e10])],
        i32t(&[5], &[-1, 2, 0, i32::MAX, i32::MIN]),
    );
    check(
        Op::Cast { to: ElemType::Bool },
        &[i32t(&[3], &[0, 3, -1])],
        boolt(&[3], &[false, true, true]),
    );
    check(
        Op::Cast { to: ElemType::F32 },
        &[boolt(&[2], &[true, false])],
        f32t(&[2], &[1.0, 0.0]),
    );
    check(
        Op::Cast { to: ElemType::U8 },
        &[i32t(&[2], &[300, -1])],
        u8t(&[2], &[44, 255]),
    );
    check(
        Op::Cast { to: ElemType::F16 },
        &[f64t(&[2], &[0.5, 65504.0])],
        f16t(&[2], &[0.5, 65504.0]),
    );
    check(
        Op::Cast { to: ElemType::I64 },
        &[f16t(&[2], &[-2.5, 3.75])],
        i64t(&[2], &[-2, 3]),
    );
    check(
        Op::Cast { to: ElemType::F64 },
        &[i64t(&[1], &[-7])],
        f64t(&[1], &[-7.0]),
    );
    check(
        Op::Clip {
            min: Some(0.0),
            max: Some(1.0),
        },
        &[f32t(&[4], &[-2.0, 0.5, 3.0, NAN])],
        f32t(&[4], &[0.0, 0.5, 1.0, NAN]),
    );
    check(
        Op::Clip {
            min: None,
            max: Some(2.0),
        },
        &[i32t(&[3], &[-5, 1, 5])],
        i32t(&[3], &[-5, 1, 2]),
    );
    check(
        Op::Clip {
            min: Some(-1.0),
            max: None,
        },
        &[f64t(&[2], &[-5.0, 5.0])],
        f64t(&[2], &[-1.0, 5.0]),
    );
}

// ---------------------------------------------------------------- linalg

#[test]
fn matmul_shapes() {
    let a = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = f32t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    check(
        Op::MatMul,
        &[a, b],
        f32t(&[2, 2], &[58.0, 64.0, 139.0, 154.0]),
    );
    // 1-D @ 1-D: a scalar.
    check(
        Op::MatMul,
        &[f32t(&[3], &[1.0, 2.0, 3.0]), f32t(&[3], &[4.0, 5.0, 6.0])],
        f32t(&[], &[32.0]),
    );
    let m = f64t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    check(
        Op::MatMul,
        &[f64t(&[2], &[1.0, 2.0]), m.clone()],
        f64t(&[2], &[7.0, 10.0]),
    );
    check(
        Op::MatMul,
        &[m, f64t(&[2], &[1.0, 1.0])],
        f64t(&[2], &[3.0, 7.0]),
    );
    // Batch broadcasting: [2,1,2] @ [1,2,1] -> [2,1,1].
    check(
        Op::MatMul,
        &[
            f32t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[1, 2, 1], &[5.0, 6.0]),
        ],
        f32t(&[2, 1, 1], &[17.0, 39.0]),
    );
    // Batched a with a 2-D b (folded path): [2,1,2] @ [2,2].
    check(
        Op::MatMul,
        &[
            f32t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[2, 2], &[1.0, 0.0, 1.0, 1.0]),
        ],
        f32t(&[2, 1, 2], &[3.0, 2.0, 7.0, 4.0]),
    );
    // 2-D a against batched b: [2,2] @ [2,2,1].
    check(
        Op::MatMul,
        &[
            f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[2, 2, 1], &[1.0, 0.0, 0.0, 1.0]),
        ],
        f32t(&[2, 2, 1], &[1.0, 3.0, 2.0, 4.0]),
    );
    // K = 0 gives zeros.
    check(
        Op::MatMul,
        &[f32t(&[2, 0], &[]), f32t(&[0, 3], &[])],
        f32t(&[2, 3], &[0.0; 6]),
    );
    check(
        Op::MatMul,
        &[f32t(&[0, 2], &[]), f32t(&[2, 3], &[0.0; 6])],
        f32t(&[0, 3], &[]),
    );
    // Integers (wrapping).
    check(
        Op::MatMul,
        &[i32t(&[2, 2], &[1, 2, 3, 4]), i32t(&[2, 2], &[5, 6, 7, 8])],
        i32t(&[2, 2], &[19, 22, 43, 50]),
    );
    check(
        Op::MatMul,
        &[i8t(&[1, 2], &[100, 100]), i8t(&[2, 1], &[1, 1])],
        i8t(&[1, 1], &[-56]),
    );
    check(
        Op::MatMul,
        &[f16t(&[1, 2], &[0.5, 1.0]), f16t(&[2, 1], &[2.0, 3.0])],
        f16t(&[1, 1], &[4.0]),
    );
    check_err(
        Op::MatMul,
        &[f32t(&[2, 3], &[0.0; 6]), f32t(&[2, 3], &[0.0; 6])],
        "matmul: inner dimensions differ",
    );
    check_err(
        Op::MatMul,
        &[f32t(&[], &[1.0]), f32t(&[1], &[1.0])],
        "rank >= 1",
    );
    check_err(
        Op::MatMul,
        &[boolt(&[1], &[true]), boolt(&[1], &[true])],
        "not defined for element type bool",
    );
}

#[test]
fn gemm_variants() {
    let a = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    let gemm = |alpha, beta, ta, tb| Op::Gemm {
        alpha,
        beta,
        trans_a: ta,
        trans_b: tb,
    };
    check(
        gemm(1.0, 1.0, false, false),
        &[a.clone(), b.clone()],
        f32t(&[2, 2], &[19.0, 22.0, 43.0, 50.0]),
    );
    // A^T B = [[26, 30], [38, 44]]; times 2, plus 0.5 * [1, 2] per row.
    check(
        gemm(2.0, 0.5, true, false),
        &[a.clone(), b.clone(), f32t(&[2], &[1.0, 2.0])],
        f32t(&[2, 2], &[52.5, 61.0, 76.5, 89.0]),
    );
    // A B^T = [[17, 23], [39, 53]], plus a column C.
    check(
        gemm(1.0, 1.0, false, true),
        &[a.clone(), b.clone(), f32t(&[2, 1], &[100.0, 200.0])],
        f32t(&[2, 2], &[117.0, 123.0, 239.0, 253.0]),
    );
    check(
        gemm(1.0, 1.0, false, false),
        &[
            i64t(&[1, 2], &[1, 2]),
            i64t(&[2, 1], &[3, 4]),
            i64t(&[], &[5]),
        ],
        i64t(&[1, 1], &[16]),
    );
    check_err(
        gemm(1.0, 1.0, false, false),
        std::slice::from_ref(&a),
        "gemm: expected 2 to 3 operands, got 1",
    );
    check_err(
        gemm(1.0, 1.0, false, false),
        &[a, b, f32t(&[3], &[0.0; 3])],
        "does not broadcast",
    );
}

#[test]
fn einsum_equations() {
    let ein = |e: &str| Op::Einsum { equation: e.into() };
    let a = f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = f32t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    check(
        ein("ij,jk->ik"),
        &[a.clone(), b.clone()],
        f32t(&[2, 2], &[19.0, 22.0, 43.0, 50.0]),
    );
    check(
        ein("ij,kj->ik"),
        &[a.clone(), b.clone()],
        f32t(&[2, 2], &[17.0, 23.0, 39.0, 53.0]),
    );
    check(
        ein("ij,jk->ki"),
        &[a.clone(), b.clone()],
        f32t(&[2, 2], &[19.0, 43.0, 22.0, 50.0]),
    );
    check(ein("ii->"), std::slice::from_ref(&a), f32t(&[], &[5.0]));
    check(
        ein("ii->i"),
        std::slice::from_ref(&a),
        f32t(&[2], &[1.0, 4.0]),
    );
    check(
        ein("ij->ji"),
        std::slice::from_ref(&a),
        f32t(&[2, 2], &[1.0, 3.0, 2.0, 4.0]),
    );
    check(ein("ij->"), std::slice::from_ref(&a), f32t(&[], &[10.0]));
    check(
        ein("ij->j"),
        std::slice::from_ref(&a),
        f32t(&[2], &[4.0, 6.0]),
    );
    check(
        ein("i,j->ij"),
        &[f32t(&[2], &[1.0, 2.0]), f32t(&[3], &[1.0, 10.0, 100.0])],
        f32t(&[2, 3], &[1.0, 10.0, 100.0, 2.0, 20.0, 200.0]),
    );
    // Elementwise product with sum of a letter only in one operand (direct loop).
    check(
        ein("ij,i->i"),
        &[a.clone(), f32t(&[2], &[1.0, 2.0])],
        f32t(&[2], &[3.0, 14.0]),
    );
    // Batched: b=2 batches of [1,2]@[2,1].
    check(
        ein("bij,bjk->bik"),
        &[
            f32t(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[2, 2, 1], &[1.0, 1.0, 2.0, 0.0]),
        ],
        f32t(&[2, 1, 1], &[3.0, 6.0]),
    );
    check(
        ein("i,i,i->"),
        &[
            i32t(&[2], &[1, 2]),
            i32t(&[2], &[3, 4]),
            i32t(&[2], &[5, 6]),
        ],
        i32t(&[], &[63]),
    );
    check_err(
        ein("ij"),
        std::slice::from_ref(&a),
        "needs an explicit `->` output",
    );
    check_err(
        ein("...i->i"),
        std::slice::from_ref(&a),
        "ellipsis is not supported",
    );
    check_err(
        ein("ij,jk->ik"),
        &[a.clone(), f32t(&[3, 1], &[0.0; 3])],
        "letter 'j' has extents 2 and 3",
    );
    check_err(ein("ij,jk->ik"), &[a], "has 2 operand terms, got 1");
}

// ---------------------------------------------------------------- conv

fn conv_attrs(strides: &[u64], pads: &[u64], dilations: &[u64], groups: u64) -> ConvAttrs {
    ConvAttrs {
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        groups,
    }
}

#[test]
fn conv_1d_and_2d() {
    let x = f32t(&[1, 1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let w = f32t(&[1, 1, 3], &[1.0, 0.0, -1.0]);
    check(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[x.clone(), w.clone()],
        f32t(&[1, 1, 3], &[-2.0, -2.0, -2.0]),
    );
    // Padding 1 both sides, stride 2: windows [0,1,2], [2,3,4], [4,5,0].
    check(
        Op::Conv(conv_attrs(&[2], &[1, 1], &[1], 1)),
        &[x.clone(), w],
        f32t(&[1, 1, 3], &[-2.0, -2.0, 4.0]),
    );
    // Dilation 2: x[i] + x[i+2].
    check(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[2], 1)),
        &[x.clone(), f32t(&[1, 1, 2], &[1.0, 1.0])],
        f32t(&[1, 1, 3], &[4.0, 6.0, 8.0]),
    );
    // Asymmetric padding (begin 2, end 0), empty attribute lists default.
    check(
        Op::Conv(conv_attrs(&[], &[2, 0], &[], 1)),
        &[x, f32t(&[1, 1, 2], &[1.0, 10.0])],
        f32t(&[1, 1, 6], &[0.0, 10.0, 21.0, 32.0, 43.0, 54.0]),
    );
    // 2-D with bias.
    let x2 = f32t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let w2 = f32t(&[1, 1, 2, 2], &[1.0; 4]);
    check(
        Op::Conv(conv_attrs(&[1, 1], &[0, 0, 0, 0], &[1, 1], 1)),
        &[x2.clone(), w2.clone(), f32t(&[1], &[10.0])],
        f32t(&[1, 1, 2, 2], &[22.0, 26.0, 34.0, 38.0]),
    );
    // 2-D, pads 1, stride 2: output 2x2 over the zero-padded 5x5.
    check(
        Op::Conv(conv_attrs(&[2, 2], &[1, 1, 1, 1], &[1, 1], 1)),
        &[x2, w2],
        f32t(&[1, 1, 2, 2], &[1.0, 5.0, 11.0, 28.0]),
    );
    // 3-D: one window summing 1..8.
    check(
        Op::Conv(conv_attrs(&[1, 1, 1], &[0; 6], &[1, 1, 1], 1)),
        &[
            f64t(&[1, 1, 2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]),
            f64t(&[1, 1, 2, 2, 2], &[1.0; 8]),
        ],
        f64t(&[1, 1, 1, 1, 1], &[36.0]),
    );
}

#[test]
fn conv_channels_and_groups() {
    let x = f32t(&[1, 2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    // Two groups of one channel: scale channel 0 by 2 and channel 1 by 3.
    check(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 2)),
        &[x.clone(), f32t(&[2, 1, 1], &[2.0, 3.0])],
        f32t(&[1, 2, 3], &[2.0, 4.0, 6.0, 12.0, 15.0, 18.0]),
    );
    // One group: sum the channels.
    check(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[x.clone(), f32t(&[1, 2, 1], &[1.0, 1.0])],
        f32t(&[1, 1, 3], &[5.0, 7.0, 9.0]),
    );
    // Pointwise 2-D, 2 -> 3 channels, batch 2.
    let xb = f32t(&[2, 2, 1, 2], &[1.0, 2.0, 5.0, 6.0, 0.0, 1.0, 1.0, 0.0]);
    let w = f32t(&[3, 2, 1, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    check(
        Op::Conv(conv_attrs(&[1, 1], &[0; 4], &[1, 1], 1)),
        &[xb, w],
        f32t(
            &[2, 3, 1, 2],
            &[1.0, 2.0, 5.0, 6.0, 6.0, 8.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0],
        ),
    );
    check_err(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[x.clone(), f32t(&[1, 3, 1], &[0.0; 3])],
        "channels do not match groups",
    );
    check_err(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[x.clone(), f32t(&[1, 2, 4], &[0.0; 8])],
        "larger than the padded input",
    );
    check_err(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[i32t(&[1, 1, 1], &[1]), i32t(&[1, 1, 1], &[1])],
        "conv: expects a floating-point operand",
    );
    check_err(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[
            x.clone(),
            f32t(&[1, 2, 1], &[1.0; 2]),
            f32t(&[2], &[0.0; 2]),
        ],
        "bias must have shape [1]",
    );
    check_err(
        Op::Conv(conv_attrs(&[1], &[0, 0], &[1], 1)),
        &[x],
        "conv: expected 2 to 3 operands, got 1",
    );
}

#[test]
fn conv_transpose_cases() {
    let ct = |strides: &[u64], pads: &[u64], groups, op: &[u64]| Op::ConvTranspose {
        conv: conv_attrs(strides, pads, &[1], groups),
        output_padding: op.to_vec(),
    };
    let x = f32t(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    let w = f32t(&[1, 1, 2], &[1.0, 1.0]);
    check(
        ct(&[1], &[0, 0], 1, &[0]),
        &[x.clone(), w.clone()],
        f32t(&[1, 1, 4], &[1.0, 3.0, 5.0, 3.0]),
    );
    check(
        ct(&[2], &[0, 0], 1, &[0]),
        &[x.clone(), w.clone()],
        f32t(&[1, 1, 6], &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0]),
    );
    check(
        ct(&[2], &[1, 1], 1, &[0]),
        &[x.clone(), w.clone()],
        f32t(&[1, 1, 4], &[1.0, 2.0, 2.0, 3.0]),
    );
    check(
        ct(&[2], &[0, 0], 1, &[1]),
        &[x, w, f32t(&[1], &[0.5])],
        f32t(&[1, 1, 7], &[1.5, 1.5, 2.5, 2.5, 3.5, 3.5, 0.5]),
    );
    // Groups: channel 0 times 3, channel 1 times 4.
    check(
        ct(&[1], &[0, 0], 2, &[0]),
        &[f32t(&[1, 2, 1], &[1.0, 2.0]), f32t(&[2, 1, 1], &[3.0, 4.0])],
        f32t(&[1, 2, 1], &[3.0, 8.0]),
    );
    // One input channel to two output channels.
    check(
        ct(&[1], &[0, 0], 1, &[0]),
        &[
            f32t(&[1, 1, 2], &[1.0, 2.0]),
            f32t(&[1, 2, 1], &[1.0, -1.0]),
        ],
        f32t(&[1, 2, 2], &[1.0, 2.0, -1.0, -2.0]),
    );
}

fn pool(
    kind: PoolKind,
    kernel: &[u64],
    strides: &[u64],
    pads: &[u64],
    ceil: bool,
    include_pad: bool,
) -> Op {
    Op::Pool(PoolAttrs {
        kind,
        kernel: kernel.to_vec(),
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: vec![],
        ceil_mode: ceil,
        count_include_pad: include_pad,
    })
}

#[test]
fn pooling() {
    let x = f32t(&[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0]);
    check(
        pool(PoolKind::Max, &[2], &[2], &[0, 0], false, false),
        &[x.clone()],
        f32t(&[1, 1, 2], &[3.0, 5.0]),
    );
    check(
        pool(PoolKind::Max, &[2], &[2], &[0, 0], true, false),
        &[x],
        f32t(&[1, 1, 3], &[3.0, 5.0, 4.0]),
    );
    // ceil_mode drops a window that would start in the trailing padding: D=6, k=2, s=3,
    // pads [0, 1] -> ceil gives 3 windows, the last starting at 6 >= D, so 2 remain.
    let x6 = f32t(&[1, 1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    check(
        pool(PoolKind::Max, &[2], &[3], &[0, 1], true, false),
        &[x6],
        f32t(&[1, 1, 2], &[2.0, 5.0]),
    );
    // Average with padding: windows [p,1,2], [1,2,3], [2,3,p].
    let x3 = f32t(&[1, 1, 3], &[1.0, 2.0, 3.0]);
    check(
        pool(PoolKind::Avg, &[3], &[1], &[1, 1], false, true),
        &[x3.clone()],
        f32t(&[1, 1, 3], &[1.0, 2.0, 5.0 / 3.0]),
    );
    check(
        pool(PoolKind::Avg, &[3], &[1], &[1, 1], false, false),
        &[x3],
        f32t(&[1, 1, 3], &[1.5, 2.0, 2.5]),
    );
    // ceil_mode window past the end counts only taps inside the (padded) input.
    let x4 = f64t(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    check(
        pool(PoolKind::Avg, &[3], &[2], &[0, 0], true, true),
        &[x4],
        f64t(&[1, 1, 2], &[2.0, 3.5]),
    );
    // Padding never wins a max.
    check(
        pool(PoolKind::Max, &[2], &[1], &[1, 1], false, false),
        &[f32t(&[1, 1, 2], &[-1.0, -2.0])],
        f32t(&[1, 1, 3], &[-1.0, -1.0, -2.0]),
    );
    // 2-D with dilation 2: taps (0,0), (0,2), (2,0), (2,2) of 1..9.
    let x9 = f32t(
        &[1, 1, 3, 3],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    );
    let dil = |kind| {
        Op::Pool(PoolAttrs {
            kind,
            kernel: vec![2, 2],
            strides: vec![1, 1],
            pads: vec![0; 4],
            dilations: vec![2, 2],
            ceil_mode: false,
            count_include_pad: false,
        })
    };
    check(
        dil(PoolKind::Max),
        &[x9.clone()],
        f32t(&[1, 1, 1, 1], &[9.0]),
    );
    check(
        dil(PoolKind::Avg),
        &[x9.clone()],
        f32t(&[1, 1, 1, 1], &[5.0]),
    );
    // 2-D max 2x2 stride 1 on a two-channel int input.
    check(
        pool(PoolKind::Max, &[2, 2], &[1, 1], &[0; 4], false, false),
        &[i32t(&[1, 2, 2, 2], &[1, 5, 3, 2, -1, -5, -3, -2])],
        i32t(&[1, 2, 1, 1], &[5, -1]),
    );
    check_err(
        pool(PoolKind::Avg, &[1], &[1], &[0, 0], false, false),
        &[i32t(&[1, 1, 1], &[1])],
        "avg-pool: expects a floating-point operand",
    );
    check_err(
        pool(PoolKind::Max, &[1], &[1], &[0, 0], false, false),
        &[f32t(&[2, 2], &[0.0; 4])],
        "at least one spatial axis",
    );
}

// ---------------------------------------------------------------- reductions

fn red(kind: ReduceKind, axes: &[usize], keep: bool) -> Op {
    Op::Reduce {
        kind,
        axes: axes.to_vec(),
        keep_dims: keep,
    }
}

#[test]
fn reductions() {
    let x = f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    check(
        red(ReduceKind::Sum, &[1], false),
        &[x.clone()],
        f32t(&[2], &[6.0, 15.0]),
    );
    check(
        red(ReduceKind::Sum, &[1], true),
        &[x.clone()],
        f32t(&[2, 1], &[6.0, 15.0]),
    );
    check(
        red(ReduceKind::Sum, &[], false),
        &[x.clone()],
        f32t(&[], &[21.0]),
    );
    check(
        red(ReduceKind::Sum, &[], true),
        &[x.clone()],
        f32t(&[1, 1], &[21.0]),
    );
    check(
        red(ReduceKind::Mean, &[0], false),
        &[x.clone()],
        f32t(&[3], &[2.5, 3.5, 4.5]),
    );
    check(
        red(ReduceKind::Max, &[1], false),
        &[x.clone()],
        f32t(&[2], &[3.0, 6.0]),
    );
    check(
        red(ReduceKind::Min, &[0], true),
        &[x.clone()],
        f32t(&[1, 3], &[1.0, 2.0, 3.0]),
    );
    check(
        red(ReduceKind::Prod, &[1], false),
        &[x.clone()],
        f32t(&[2], &[6.0, 120.0]),
    );
    let y = f32t(&[2, 2], &[-1.0, 2.0, 3.0, -4.0]);
    check(
        red(ReduceKind::L1, &[], false),
        &[y.clone()],
        f32t(&[], &[10.0]),
    );
    check(
        red(ReduceKind::SumSquare, &[0], false),
        &[y.clone()],
        f32t(&[2], &[10.0, 20.0]),
    );
    check(
        red(ReduceKind::L2, &[], false),
        &[f32t(&[2], &[3.0, 4.0])],
        f32t(&[], &[5.0]),
    );
    check(
        red(ReduceKind::LogSumExp, &[], false),
        &[f32t(&[2], &[0.0, 0.0])],
        f32t(&[], &[std::f32::consts::LN_2]),
    );
    // Stable for large values.
    check(
        red(ReduceKind::LogSumExp, &[], false),
        &[f32t(&[2], &[1000.0, 1000.0])],
        f32t(&[], &[1_000.693_2]),
    );
    // NaN propagates through max.
    check(
        red(ReduceKind::Max, &[], false),
        &[f32t(&[3], &[1.0, NAN, 3.0])],
        f32t(&[], &[NAN]),
    );
    // Middle axis of a 3-D tensor, f64.
    check(
        red(ReduceKind::Sum, &[1], false),
        &[f64t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])],
        f64t(&[2, 2], &[4.0, 6.0, 12.0, 14.0]),
    );
    // Two axes.
    check(
        red(ReduceKind::Max, &[0, 2], false),
        &[f64t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])],
        f64t(&[2], &[6.0, 8.0]),
    );
    check(
        red(ReduceKind::Mean, &[0], false),
        &[f16t(&[2], &[1.0, 2.0])],
        f16t(&[], &[1.5]),
    );
}

#[test]
fn reductions_empty_and_integer() {
    let e = f32t(&[2, 0], &[]);
    check(
        red(ReduceKind::Sum, &[1], false),
        &[e.clone()],
        f32t(&[2], &[0.0, 0.0]),
    );
    check(
        red(ReduceKind::Max, &[1], false),
        &[e.clone()],
        f32t(&[2], &[-INF, -INF]),
    );
    check(
        red(ReduceKind::Min, &[1], false),
        &[e.clone()],
        f32t(&[2], &[INF, INF]),
    );
    check(
        red(ReduceKind::Prod, &[1], false),
        &[e.clone()],
        f32t(&[2], &[1.0, 1.0]),
    );
    check(
        red(ReduceKind::Mean, &[1], false),
        &[e.clone()],
        f32t(&[2], &[NAN, NAN]),
    );
    check(
        red(ReduceKind::LogSumExp, &[1], false),
        &[e.clone()],
        f32t(&[2], &[-INF, -INF]),
    );
    check(
        red(ReduceKind::L2, &[1], false),
        &[e.clone()],
        f32t(&[2], &[0.0, 0.0]),
    );
    // Reducing the non-empty axis of an empty tensor gives an empty result.
    check(red(ReduceKind::Sum, &[0], false), &[e], f32t(&[0], &[]));
    check(
        red(ReduceKind::Sum, &[0], false),
        &[i32t(&[0], &[])],
        i32t(&[], &[0]),
    );
    check(
        red(ReduceKind::Max, &[0], false),
        &[i32t(&[0], &[])],
        i32t(&[], &[i32::MIN]),
    );
    check(
        red(ReduceKind::Sum, &[], false),
        &[i8t(&[2], &[100, 100])],
        i8t(&[], &[-56]),
    );
    check(
        red(ReduceKind::Mean, &[], false),
        &[i32t(&[2], &[3, 4])],
        i32t(&[], &[3]),
    );
    check(
        red(ReduceKind::Mean, &[], false),
        &[i32t(&[2], &[-3, -4])],
        i32t(&[], &[-3]),
    );
    check(
        red(ReduceKind::L1, &[], false),
        &[i64t(&[2], &[-3, 4])],
        i64t(&[], &[7]),
    );
    check_err(
        red(ReduceKind::Mean, &[], false),
        &[i32t(&[0], &[])],
        "reduce-mean: mean of an empty set is undefined for i32",
    );
    check_err(
        red(ReduceKind::LogSumExp, &[], false),
        &[i32t(&[1], &[1])],
        "needs a floating-point operand",
    );
    check_err(
        red(ReduceKind::Sum, &[2], false),
        &[i32t(&[1], &[1])],
        "axis 2 out of range for rank 1",
    );
    check_err(
        red(ReduceKind::Sum, &[1, 0], false),
        &[i32t(&[1, 1], &[1])],
        "not strictly increasing",
    );
}

#[test]
fn arg_reductions() {
    let arg = |kind, axis, keep, last| Op::ArgReduce {
        kind,
        axis,
        keep_dims: keep,
        select_last: last,
    };
    let x = f32t(&[2, 3], &[1.0, 3.0, 3.0, 2.0, 1.0, 2.0]);
    check(
        arg(ArgKind::Max, 1, false, false),
        &[x.clone()],
        i64t(&[2], &[1, 0]),
    );
    check(
        arg(ArgKind::Max, 1, false, true),
        &[x.clone()],
        i64t(&[2], &[2, 2]),
    );
    check(
        arg(ArgKind::Min, 1, true, false),
        &[x.clone()],
        i64t(&[2, 1], &[0, 1]),
    );
    check(
        arg(ArgKind::Min, 0, false, false),
        &[x.clone()],
        i64t(&[3], &[0, 1, 1]),
    );
    check(
        arg(ArgKind::Max, 0, false, false),
        &[f32t(&[3], &[1.0, NAN, 3.0])],
        i64t(&[], &[1]),
    );
    check(
        arg(ArgKind::Max, 0, false, false),
        &[i32t(&[3], &[-1, 7, 7])],
        i64t(&[], &[1]),
    );
    check_err(
        arg(ArgKind::Max, 0, false, false),
        &[f32t(&[0], &[])],
        "axis 0 is empty",
    );
}

#[test]
fn softmax_and_cumsum() {
    let x = f32t(&[3], &[1.0, 2.0, 3.0]);
    check(
        Op::Softmax { axis: 0 },
        &[x.clone()],
        f32t(&[3], &[0.090_030_57, 0.244_728_48, 0.665_240_94]),
    );
    check(
        Op::LogSoftmax { axis: 0 },
        &[x],
        f32t(&[3], &[-2.407_606, -1.407_606, -0.407_606]),
    );
    // Along axis 0 of [2, 2]: columns normalized; large values stay finite.
    check(
        Op::Softmax { axis: 0 },
        &[f64t(&[2, 2], &[1000.0, 0.0, 1000.0, 0.0])],
        f64t(&[2, 2], &[0.5, 0.5, 0.5, 0.5]),
    );
    check_err(
        Op::Softmax { axis: 0 },
        &[i32t(&[1], &[1])],
        "softmax: expects a floating-point operand",
    );
    let cs = |exclusive, reverse| Op::CumSum {
        axis: 0,
        exclusive,
        reverse,
    };
    let v = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    check(
        cs(false, false),
        &[v.clone()],
        f32t(&[4], &[1.0, 3.0, 6.0, 10.0]),
    );
    check(
        cs(true, false),
        &[v.clone()],
        f32t(&[4], &[0.0, 1.0, 3.0, 6.0]),
    );
    check(
        cs(false, true),
        &[v.clone()],
        f32t(&[4], &[10.0, 9.0, 7.0, 4.0]),
    );
    check(cs(true, true), &[v], f32t(&[4], &[9.0, 7.0, 4.0, 0.0]));
    check(
        cs(false, false),
        &[i32t(&[2, 2], &[1, 2, 3, 4])],
        i32t(&[2, 2], &[1, 2, 4, 6]),
    );
    check(
        Op::CumSum {
            axis: 1,
            exclusive: false,
            reverse: false,
        },
        &[i64t(&[2, 2], &[1, 2, 3, 4])],
        i64t(&[2, 2], &[1, 3, 3, 7]),
    );
}

// ---------------------------------------------------------------- normalization

#[test]
fn normalizations() {
    // Rows [1,2,3] and [2,4,6] normalize to [-1.2247, 0, 1.2247]; then scale and bias.
    check(
        Op::LayerNorm {
            axis: 1,
            epsilon: 0.0,
        },
        &[
            f32t(&[2, 3], &[1.0, 2.0, 3.0, 2.0, 4.0, 6.0]),
            f32t(&[3], &[1.0, 1.0, 2.0]),
            f32t(&[3], &[0.0, 1.0, 0.0]),
        ],
        f32t(
            &[2, 3],
            &[
                -1.224_744_9,
                1.0,
                2.449_489_7,
                -1.224_744_9,
                1.0,
                2.449_489_7,
            ],
        ),
    );
    // Over both axes, scale only.
    check(
        Op::LayerNorm {
            axis: 0,
            epsilon: 0.0,
        },
        &[f64t(&[2, 2], &[1.0, 3.0, 1.0, 3.0]), f64t(&[], &[2.0])],
        f64t(&[2, 2], &[-2.0, 2.0, -2.0, 2.0]),
    );
    check(
        Op::BatchNorm { epsilon: 0.0 },
        &[
            f32t(&[1, 2, 2], &[1.0, 3.0, 2.0, 4.0]),
            f32t(&[2], &[1.0, 2.0]),
            f32t(&[2], &[0.0, 1.0]),
            f32t(&[2], &[2.0, 3.0]),
            f32t(&[2], &[4.0, 0.25]),
        ],
        f32t(&[1, 2, 2], &[-0.5, 0.5, -3.0, 5.0]),
    );
    check(
        Op::InstanceNorm { epsilon: 0.0 },
        &[
            f32t(&[1, 1, 4], &[1.0, 2.0, 3.0, 4.0]),
            f32t(&[1], &[2.0]),
            f32t(&[1], &[1.0]),
        ],
        f32t(
            &[1, 1, 4],
            &[-1.683_281_6, 0.105_572_81, 1.894_427_2, 3.683_281_6],
        ),
    );
    // LRN, size 3, alpha/size = 1: c0 sums c0..c1, c1 sums all, c2 sums c1..c2.
    check(
        Op::Lrn {
            size: 3,
            alpha: 3.0,
            beta: 1.0,
            bias: 1.0,
        },
        &[f32t(&[1, 3, 1], &[1.0, 2.0, 3.0])],
        f32t(&[1, 3, 1], &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]),
    );
    check_err(
        Op::BatchNorm { epsilon: 0.0 },
        &[
            f32t(&[1, 2], &[0.0; 2]),
            f32t(&[3], &[0.0; 3]),
            f32t(&[2], &[0.0; 2]),
            f32t(&[2], &[0.0; 2]),
            f32t(&[2], &[0.0; 2]),
        ],
        "scale must have shape [2]",
    );
    check_err(
        Op::LayerNorm {
            axis: 1,
            epsilon: 0.0,
        },
        &[f32t(&[2, 3], &[0.0; 6]), f32t(&[2], &[0.0; 2])],
        "does not broadcast to the normalized shape",
    );
}

// ---------------------------------------------------------------- shape ops

#[test]
fn reshape_transpose_expand() {
    let x = i32t(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    let st = |d: &[u64]| d.iter().map(|&n| Dim::Static(n)).collect::<Vec<_>>();
    check(
        Op::Reshape { shape: st(&[3, 2]) },
        &[x.clone()],
        i32t(&[3, 2], &[1, 2, 3, 4, 5, 6]),
    );
    check(
        Op::Reshape { shape: st(&[0, 5]) },
        &[f32t(&[5, 0], &[])],
        f32t(&[0, 5], &[]),
    );
    check_err(
        Op::Reshape { shape: st(&[4, 2]) },
        &[x.clone()],
        "cannot reshape [2, 3] (6 elements) to [4, 2] (8 elements)",
    );
    check_err(
        Op::Reshape {
            shape: vec![Dim::sym("N"), Dim::Static(2)],
        },
        &[x.clone()],
        "reshape: symbolic dimension N is not bound",
    );
    check(
        Op::Transpose { perm: vec![1, 0] },
        &[x.clone()],
        i32t(&[3, 2], &[1, 4, 2, 5, 3, 6]),
    );
    check(
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[f16t(&[1, 2, 2], &[1.0, 2.0, 3.0, 4.0])],
        f16t(&[2, 1, 2], &[1.0, 3.0, 2.0, 4.0]),
    );
    check_err(
        Op::Transpose { perm: vec![0, 0] },
        &[x.clone()],
        "is not a permutation",
    );
    // Expand both ways: [3,1] with [2,1,4] -> [2,3,4].
    let e = Op::Expand {
        shape: st(&[2, 1, 2]),
    };
    check(
        e,
        &[f32t(&[3, 1], &[1.0, 2.0, 3.0])],
        f32t(
            &[2, 3, 2],
            &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
        ),
    );
    check(
        Op::Expand { shape: st(&[1]) },
        &[boolt(&[2], &[true, false])],
        boolt(&[2], &[true, false]),
    );
    check_err(
        Op::Expand { shape: st(&[4]) },
        &[x],
        "cannot broadcast shapes [2, 3] and [4]",
    );
}

#[test]
fn concat_and_split() {
    check(
        Op::Concat { axis: 1 },
        &[i64t(&[2, 1], &[1, 2]), i64t(&[2, 2], &[3, 4, 5, 6])],
        i64t(&[2, 3], &[1, 3, 4, 2, 5, 6]),
    );
    check(
        Op::Concat { axis: 0 },
        &[
            f32t(&[0, 2], &[]),
            f32t(&[1, 2], &[1.0, 2.0]),
            f32t(&[1, 2], &[3.0, 4.0]),
        ],
        f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
    );
    check_err(
        Op::Concat { axis: 0 },
        &[f32t(&[1, 2], &[0.0; 2]), f32t(&[1, 3], &[0.0; 3])],
        "incompatible",
    );
    check_err(
        Op::Concat { axis: 0 },
        &[f32t(&[1], &[0.0]), i32t(&[1], &[0])],
        "operand element types differ: f32 vs i32",
    );
    check_err(Op::Concat { axis: 0 }, &[], "at least 1 operand");
    check_n(
        Op::Split {
            axis: 0,
            sizes: vec![2, 0, 3],
        },
        &[u8t(&[5], &[1, 2, 3, 4, 5])],
        &[u8t(&[2], &[1, 2]), u8t(&[0], &[]), u8t(&[3], &[3, 4, 5])],
    );
    check_n(
        Op::Split {
            axis: 1,
            sizes: vec![1, 1],
        },
        &[f32t(&[2, 2], &[1.0, 2.0, 3.0, 4.0])],
        &[f32t(&[2, 1], &[1.0, 3.0]), f32t(&[2, 1], &[2.0, 4.0])],
    );
    check_err(
        Op::Split {
            axis: 0,
            sizes: vec![1, 1],
        },
        &[f32t(&[3], &[0.0; 3])],
        "do not sum to the extent 3",
    );
}

#[test]
fn slices() {
    let v: Vec<i32> = (0..10).collect();
    let x = i32t(&[10], &v);
    let sl = |s: i64, e: i64, st: i64| Op::Slice {
        axes: vec![0],
        starts: vec![s],
        ends: vec![e],
        steps: vec![st],
    };
    check(sl(1, 8, 3), &[x.clone()], i32t(&[3], &[1, 4, 7]));
    check(sl(-3, -1, 1), &[x.clone()], i32t(&[2], &[7, 8]));
    check(sl(-100, 100, 4), &[x.clone()], i32t(&[3], &[0, 4, 8]));
    check(sl(-1, -11, -2), &[x.clone()], i32t(&[5], &[9, 7, 5, 3, 1]));
    check(sl(8, 1, -3), &[x.clone()], i32t(&[3], &[8, 5, 2]));
    check(
        sl(100, -100, -1),
        &[x.clone()],
        i32t(&[10], &[9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
    );
    check(sl(5, 5, 1), &[x.clone()], i32t(&[0], &[]));
    check(sl(2, 5, -1), &[x.clone()], i32t(&[0], &[]));
    check(sl(7, i64::MIN, -3), &[x.clone()], i32t(&[3], &[7, 4, 1]));
    check(sl(0, i64::MAX, 1), &[x.clone()], x.clone());
    // 2-D, slicing only axis 1 with a negative step.
    check(
        Op::Slice {
            axes: vec![1],
            starts: vec![-1],
            ends: vec![0],
            steps: vec![-1],
        },
        &[f32t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])],
        f32t(&[2, 2], &[3.0, 2.0, 6.0, 5.0]),
    );
    check_err(sl(0, 1, 0), &[x.clone()], "step 0 on axis 0");
    check_err(
        Op::Slice {
            axes: vec![1],
            starts: vec![0],
            ends: vec![1],
            steps: vec![1],
        },
        &[x],
        "axis 1 out of range for rank 1",
    );
}

#[test]
fn pads() {
    let x = f32t(&[3], &[1.0, 2.0, 3.0]);
    let pad = |pads: &[i64], mode, value| Op::Pad {
        pads: pads.to_vec(),
        mode,
        value,
    };
    check(
        pad(&[1, 2], PadMode::Constant, Scalar::Float(9.0)),
        &[x.clone()],
        f32t(&[6], &[9.0, 1.0, 2.0, 3.0, 9.0, 9.0]),
    );
    check(
        pad(&[2, 2], PadMode::Reflect, Scalar::Int(0)),
        &[x.clone()],
        f32t(&[7], &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]),
    );
    check(
        pad(&[2, 1], PadMode::Edge, Scalar::Int(0)),
        &[x.clone()],
        f32t(&[6], &[1.0, 1.0, 1.0, 2.0, 3.0, 3.0]),
    );
    check(
        pad(&[2, 2], PadMode::Wrap, Scalar::Int(0)),
        &[x.clone()],
        f32t(&[7], &[2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0]),
    );
    // Negative pads crop.
    check(
        pad(&[-1, 1], PadMode::Constant, Scalar::Int(0)),
        &[i32t(&[4], &[1, 2, 3, 4])],
        i32t(&[4], &[2, 3, 4, 0]),
    );
    check(
        pad(&[-1, -1], PadMode::Reflect, Scalar::Int(0)),
        &[x.clone()],
        f32t(&[1], &[2.0]),
    );
    // 2-D: one row of 7s before, one column after.
    check(
        pad(&[1, 0, 0, 1], PadMode::Constant, Scalar::Int(7)),
        &[i64t(&[1, 2], &[1, 2])],
        i64t(&[2, 3], &[7, 7, 7, 1, 2, 7]),
    );
    check(
        pad(&[1, 0], PadMode::Constant, Scalar::Int(1)),
        &[boolt(&[1], &[false])],
        boolt(&[2], &[true, false]),
    );
    check_err(
        pad(&[-2, -2], PadMode::Constant, Scalar::Int(0)),
        &[x.clone()],
        "negative extent",
    );
    check_err(
        pad(&[1], PadMode::Constant, Scalar::Int(0)),
        &[x],
        "pads has 1 entries, expected 2",
    );
    check_err(
        pad(&[1, 0], PadMode::Edge, Scalar::Int(0)),
        &[f32t(&[0], &[])],
        "cannot pad an empty axis",
    );
}

#[test]
fn tile_trilu_depth_space() {
    check(
        Op::Tile { repeats: vec![2] },
        &[i32t(&[2], &[1, 2])],
        i32t(&[4], &[1, 2, 1, 2]),
    );
    check(
        Op::Tile {
            repeats: vec![2, 2],
        },
        &[i32t(&[1, 2], &[1, 2])],
        i32t(&[2, 4], &[1, 2, 1, 2, 1, 2, 1, 2]),
    );
    check(
        Op::Tile { repeats: vec![0] },
        &[i32t(&[2], &[1, 2])],
        i32t(&[0], &[]),
    );
    let m = i32t(&[3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    check(
        Op::Trilu { upper: true, k: 0 },
        &[m.clone()],
        i32t(&[3, 3], &[1, 2, 3, 0, 5, 6, 0, 0, 9]),
    );
    check(
        Op::Trilu { upper: true, k: 1 },
        &[m.clone()],
        i32t(&[3, 3], &[0, 2, 3, 0, 0, 6, 0, 0, 0]),
    );
    check(
        Op::Trilu { upper: false, k: 0 },
        &[m.clone()],
        i32t(&[3, 3], &[1, 0, 0, 4, 5, 0, 7, 8, 9]),
    );
    check(
        Op::Trilu {
            upper: false,
            k: -1,
        },
        &[m],
        i32t(&[3, 3], &[0, 0, 0, 4, 0, 0, 7, 8, 0]),
    );
    check(
        Op::Trilu { upper: true, k: -5 },
        &[boolt(&[1, 2], &[true, true])],
        boolt(&[1, 2], &[true, true]),
    );
    let c8: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let x = f32t(&[1, 8, 1, 1], &c8);
    check(
        Op::DepthToSpace {
            block: 2,
            mode: DepthToSpaceMode::Dcr,
        },
        &[x.clone()],
        f32t(&[1, 2, 2, 2], &[0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]),
    );
    check(
        Op::DepthToSpace {
            block: 2,
            mode: DepthToSpaceMode::Crd,
        },
        &[x],
        f32t(&[1, 2, 2, 2], &c8),
    );
    check(
        Op::SpaceToDepth { block: 2 },
        &[f32t(&[1, 1, 2, 2], &[0.0, 1.0, 2.0, 3.0])],
        f32t(&[1, 4, 1, 1], &[0.0, 1.0, 2.0, 3.0]),
    );
    // A 4x2 image with one channel: block 2 gives 4 channels of 2x1.
    check(
        Op::SpaceToDepth { block: 2 },
        &[i32t(&[1, 1, 4, 2], &[0, 1, 2, 3, 4, 5, 6, 7])],
        i32t(&[1, 4, 2, 1], &[0, 4, 1, 5, 2, 6, 3, 7]),
    );
    check_err(
        Op::DepthToSpace {
            block: 2,
            mode: DepthToSpaceMode::Dcr,
        },
        &[f32t(&[1, 3, 1, 1], &[0.0; 3])],
        "not a multiple",
    );
    check_err(
        Op::SpaceToDepth { block: 2 },
        &[f32t(&[1, 1, 3, 2], &[0.0; 6])],
        "not multiples of the block size",
    );
}

#[test]
fn shape_size_fill_range() {
    let x = f32t(&[2, 3, 4], &[0.0; 24]);
    check(
        Op::Shape { start: 1, end: 3 },
        &[x.clone()],
        i64t(&[2], &[3, 4]),
    );
    check(
        Op::Shape { start: 0, end: 0 },
        &[x.clone()],
        i64t(&[0], &[]),
    );
    check(Op::Size, &[x.clone()], i64t(&[], &[24]));
    check_err(
        Op::Shape { start: 0, end: 4 },
        &[x],
        "out of range for rank 3",
    );
    let fill = |shape: Vec<Dim>, elem, value| Op::Fill { shape, elem, value };
    check(
        fill(vec![Dim::Static(2)], ElemType::I32, Scalar::Int(7)),
        &[],
        i32t(&[2], &[7, 7]),
    );
    check(
        fill(vec![], ElemType::F16, Scalar::Float(0.5)),
        &[],
        f16t(&[], &[0.5]),
    );
    check(
        fill(vec![Dim::Static(1)], ElemType::Bool, Scalar::Int(1)),
        &[],
        boolt(&[1], &[true]),
    );
    check(
        fill(vec![Dim::Static(1)], ElemType::U8, Scalar::Float(3.9)),
        &[],
        u8t(&[1], &[3]),
    );
    check_err(
        fill(vec![Dim::sym("B")], ElemType::I32, Scalar::Int(0)),
        &[],
        "fill: symbolic dimension B is not bound",
    );
    let range = |n: u64| Op::Range {
        size: Dim::Static(n),
    };
    check(
        range(4),
        &[i64t(&[], &[0]), i64t(&[], &[10]), i64t(&[], &[3])],
        i64t(&[4], &[0, 3, 6, 9]),
    );
    check(
        range(3),
        &[i32t(&[], &[5]), i32t(&[], &[-1]), i32t(&[], &[-2])],
        i32t(&[3], &[5, 3, 1]),
    );
    check(
        range(0),
        &[i32t(&[], &[5]), i32t(&[], &[1]), i32t(&[], &[1])],
        i32t(&[0], &[]),
    );
    check(
        range(2),
        &[f32t(&[], &[1.0]), f32t(&[], &[0.0]), f32t(&[], &[-0.5])],
        f32t(&[2], &[1.0, 0.5]),
    );
    check(
        range(3),
        &[f64t(&[], &[0.0]), f64t(&[], &[1.0]), f64t(&[], &[0.4])],
        f64t(&[3], &[0.0, 0.4, 0.8]),
    );
    check(
        Op::Range {
            size: Dim::sym("K"),
        },
        &[i64t(&[], &[0]), i64t(&[], &[3]), i64t(&[], &[1])],
        i64t(&[3], &[0, 1, 2]),
    );
    check_err(
        range(5),
        &[i64t(&[], &[0]), i64t(&[], &[10]), i64t(&[], &[3])],
        "produces 4 elements, but the size attribute is 5",
    );
    check_err(
        range(0),
        &[i64t(&[], &[0]), i64t(&[], &[10]), i64t(&[], &[0])],
        "range: delta is zero",
    );
    check_err(
        range(1),
        &[i64t(&[1], &[0]), i64t(&[], &[10]), i64t(&[], &[1])],
        "start must be a scalar",
    );
}

// ---------------------------------------------------------------- indexing

#[test]
fn a_gather_with_an_empty_result_does_not_loop_over_its_other_extents() {
    // [2^32, 4, 0] along axis 1: nothing to gather, but 2^34 (row, index) pairs; before the
    // early return the interpreter walked them all (found by fuzzing, through Upsample).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let x = tessera_ir::Tensor::F32(ndarray::ArrayD::zeros(ndarray::IxDyn(&[1 << 32, 4, 0])));
        let idx = i64t(&[4], &[3, 2, 1, 0]);
        let _ = tx.send(tessera_ir::interp::eval_op(
            &Op::Gather { axis: 1 },
            &[&x, &idx],
        ));
    });
    let out = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the gather finishes at once")
        .expect("runs");
    assert_eq!(out[0].shape(), &[1 << 32, 4, 0]);
}

#[test]
fn gathers() {
    let data = f32t(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    check(
        Op::Gather { axis: 0 },
        &[data.clone(), i32t(&[3], &[2, -1, 0])],
        f32t(&[3, 2], &[5.0, 6.0, 5.0, 6.0, 1.0, 2.0]),
    );
    check(
        Op::Gather { axis: 1 },
        &[data.clone(), i64t(&[1, 2], &[1, 0])],
        f32t(&[3, 1, 2], &[2.0, 1.0, 4.0, 3.0, 6.0, 5.0]),
    );
    // Scalar index drops the axis.
    check(
        Op::Gather { axis: 0 },
        &[data.clone(), i64t(&[], &[1])],
        f32t(&[2], &[3.0, 4.0]),
    );
    check(
        Op::Gather { axis: 0 },
        &[data.clone(), i64t(&[0], &[])],
        f32t(&[0, 2], &[]),
    );
    check_err(
        Op::Gather { axis: 0 },
        &[data.clone(), i64t(&[1], &[7])],
        "gather: index 7 out of range for axis 0 of extent 3",
    );
    check_err(
        Op::Gather { axis: 0 },
        &[data.clone(), i64t(&[1], &[-4])],
        "index -4 out of range",
    );
    check_err(
        Op::Gather { axis: 0 },
        &[data.clone(), f32t(&[1], &[0.0])],
        "indices must have an integer element type",
    );
    let d2 = i32t(&[2, 2], &[1, 2, 3, 4]);
    check(
        Op::GatherElements { axis: 1 },
        &[d2.clone(), i64t(&[2, 2], &[0, 0, 1, 0])],
        i32t(&[2, 2], &[1, 1, 4, 3]),
    );
    check(
        Op::GatherElements { axis: 0 },
        &[d2.clone(), i64t(&[1, 2], &[-1, 0])],
        i32t(&[1, 2], &[3, 2]),
    );
    check_err(
        Op::GatherElements { axis: 0 },
        &[d2.clone(), i64t(&[1, 1], &[2])],
        "index 2 out of range for axis 0 of extent 2",
    );
    let g = i32t(&[2, 2], &[0, 1, 2, 3]);
    check(
        Op::GatherNd { batch_dims: 0 },
        &[g.clone(), i64t(&[2, 2], &[0, 0, 1, 1])],
        i32t(&[2], &[0, 3]),
    );
    check(
        Op::GatherNd { batch_dims: 0 },
        &[g.clone(), i64t(&[2, 1], &[1, 0])],
        i32t(&[2, 2], &[2, 3, 0, 1]),
    );
    check(
        Op::GatherNd { batch_dims: 1 },
        &[
            i32t(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7]),
            i64t(&[2, 1], &[1, 0]),
        ],
        i32t(&[2, 2], &[2, 3, 4, 5]),
    );
    check_err(
        Op::GatherNd { batch_dims: 0 },
        &[g, i64t(&[1, 2], &[0, 2])],
        "index 2 out of range for axis 1 of extent 2",
    );
}

#[test]
fn scatters() {
    let se = |axis, reduction| Op::ScatterElements { axis, reduction };
    check(
        se(0, ScatterReduction::None),
        &[
            f32t(&[3, 3], &[0.0; 9]),
            i64t(&[2, 3], &[1, 0, 2, 0, 2, 1]),
            f32t(&[2, 3], &[1.0, 1.1, 1.2, 2.0, 2.1, 2.2]),
        ],
        f32t(&[3, 3], &[2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]),
    );
    let data = f32t(&[5], &[1.0, 2.0, 3.0, 4.0, 5.0]);
    let idx = i64t(&[2], &[1, -4]);
    let upd = f32t(&[2], &[1.5, 2.5]);
    check(
        se(0, ScatterReduction::None),
        &[data.clone(), idx.clone(), upd.clone()],
        f32t(&[5], &[1.0, 2.5, 3.0, 4.0, 5.0]),
    );
    check(
        se(0, ScatterReduction::Add),
        &[data.clone(), idx.clone(), upd.clone()],
        f32t(&[5], &[1.0, 6.0, 3.0, 4.0, 5.0]),
    );
    check(
        se(0, ScatterReduction::Mul),
        &[data.clone(), idx.clone(), upd.clone()],
        f32t(&[5], &[1.0, 7.5, 3.0, 4.0, 5.0]),
    );
    check(
        se(0, ScatterReduction::Max),
        &[data.clone(), idx.clone(), upd.clone()],
        f32t(&[5], &[1.0, 2.5, 3.0, 4.0, 5.0]),
    );
    check(
        se(0, ScatterReduction::Min),
        &[data.clone(), idx, upd],
        f32t(&[5], &[1.0, 1.5, 3.0, 4.0, 5.0]),
    );
    check_err(
        se(0, ScatterReduction::None),
        &[data.clone(), i64t(&[1], &[5]), f32t(&[1], &[0.0])],
        "index 5 out of range for axis 0 of extent 5",
    );
    check_err(
        se(0, ScatterReduction::None),
        &[data, i64t(&[1], &[0]), i32t(&[1], &[0])],
        "operand element types differ: f32 vs i32",
    );
    let sn = |reduction| Op::ScatterNd { reduction };
    check(
        sn(ScatterReduction::None),
        &[
            i32t(&[8], &[1, 2, 3, 4, 5, 6, 7, 8]),
            i64t(&[4, 1], &[4, 3, 1, 7]),
            i32t(&[4], &[9, 10, 11, 12]),
        ],
        i32t(&[8], &[1, 11, 3, 10, 9, 6, 7, 12]),
    );
    check(
        sn(ScatterReduction::Add),
        &[
            i32t(&[3], &[0, 0, 0]),
            i64t(&[2, 1], &[0, 0]),
            i32t(&[2], &[5, 6]),
        ],
        i32t(&[3], &[11, 0, 0]),
    );
    // Row slices of a 2-D tensor.
    check(
        sn(ScatterReduction::None),
        &[
            f32t(&[2, 2], &[0.0; 4]),
            i64t(&[1, 1], &[-1]),
            f32t(&[1, 2], &[7.0, 8.0]),
        ],
        f32t(&[2, 2], &[0.0, 0.0, 7.0, 8.0]),
    );
    check_err(
        sn(ScatterReduction::None),
        &[
            f32t(&[2, 2], &[0.0; 4]),
            i64t(&[1, 1], &[0]),
            f32t(&[2], &[7.0, 8.0]),
        ],
        "updates have shape [2], expected [1, 2]",
    );
    check_err(
        sn(ScatterReduction::Add),
        &[
            boolt(&[1], &[true]),
            i64t(&[1, 1], &[0]),
            boolt(&[1], &[true]),
        ],
        "not defined for element type bool",
    );
}

#[test]
fn top_k() {
    let tk = |k, largest| Op::TopK {
        k,
        axis: 0,
        largest,
    };
    let x = f32t(&[5], &[1.0, 3.0, 2.0, 3.0, 0.0]);
    check_n(
        tk(3, true),
        &[x.clone()],
        &[f32t(&[3], &[3.0, 3.0, 2.0]), i64t(&[3], &[1, 3, 2])],
    );
    check_n(
        tk(2, false),
        &[x.clone()],
        &[f32t(&[2], &[0.0, 1.0]), i64t(&[2], &[4, 0])],
    );
    check_n(
        tk(0, true),
        &[x.clone()],
        &[f32t(&[0], &[]), i64t(&[0], &[])],
    );
    let n = f32t(&[3], &[1.0, NAN, 2.0]);
    check_n(
        tk(2, true),
        &[n.clone()],
        &[f32t(&[2], &[NAN, 2.0]), i64t(&[2], &[1, 2])],
    );
    check_n(
        tk(3, false),
        &[n],
        &[f32t(&[3], &[1.0, 2.0, NAN]), i64t(&[3], &[0, 2, 1])],
    );
    check_n(
        Op::TopK {
            k: 1,
            axis: 1,
            largest: true,
        },
        &[i32t(&[2, 3], &[1, 9, 3, 7, 2, 7])],
        &[i32t(&[2, 1], &[9, 7]), i64t(&[2, 1], &[1, 0])],
    );
    check_n(
        tk(1, true),
        &[f16t(&[2], &[0.5, 1.5])],
        &[f16t(&[1], &[1.5]), i64t(&[1], &[1])],
    );
    check_err(
        tk(6, true),
        &[x],
        "top-k: k = 6 exceeds the extent 5 of axis 0",
    );
}

// ---------------------------------------------------------------- resize

fn rs(sizes: &[u64], mode: ResizeMode, coord: CoordTransform, nearest: NearestMode) -> Op {
    Op::Resize {
        sizes: sizes.to_vec(),
        mode,
        coord,
        nearest,
        cubic_coeff: -0.75,
    }
}

#[test]
fn resize_modes() {
    use CoordTransform::*;
    use NearestMode::*;
    use ResizeMode::*;
    // Asymmetric, floor: coordinates 0, 0.5, 1, 1.5.
    check(
        rs(&[4], Nearest, Asymmetric, Floor),
        &[f32t(&[2], &[1.0, 2.0])],
        f32t(&[4], &[1.0, 1.0, 2.0, 2.0]),
    );
    check(
        rs(&[4], Nearest, Asymmetric, Ceil),
        &[f32t(&[2], &[1.0, 2.0])],
        f32t(&[4], &[1.0, 2.0, 2.0, 2.0]),
    );
    // Half-pixel downsample: coordinates 0.5 and 2.5.
    let x4 = f32t(&[4], &[1.0, 2.0, 3.0, 4.0]);
    check(
        rs(&[2], Nearest, HalfPixel, RoundPreferFloor),
        &[x4.clone()],
        f32t(&[2], &[1.0, 3.0]),
    );
    check(
        rs(&[2], Nearest, HalfPixel, RoundPreferCeil),
        &[x4.clone()],
        f32t(&[2], &[2.0, 4.0]),
    );
    check(
        rs(&[4], Nearest, HalfPixel, RoundPreferCeil),
        &[i64t(&[2], &[5, 6])],
        i64t(&[4], &[5, 5, 6, 6]),
    );
    // Linear, half-pixel: coordinates -0.25, 0.25, 0.75, 1.25 clamped to [0, 1].
    check(
        rs(&[4], Linear, HalfPixel, Floor),
        &[f32t(&[2], &[1.0, 2.0])],
        f32t(&[4], &[1.0, 1.25, 1.75, 2.0]),
    );
    check(
        rs(&[3], Linear, AlignCorners, Floor),
        &[f32t(&[2], &[1.0, 3.0])],
        f32t(&[3], &[1.0, 2.0, 3.0]),
    );
    // PyTorch half-pixel maps to 0 when the output extent is 1.
    check(
        rs(&[1], Linear, PytorchHalfPixel, Floor),
        &[x4.clone()],
        f32t(&[1], &[1.0]),
    );
    check(
        rs(&[1], Linear, HalfPixel, Floor),
        &[x4.clone()],
        f32t(&[1], &[2.5]),
    );
    // 2-D bilinear, align corners; the batch and channel axes are untouched.
    check(
        rs(&[1, 1, 3, 3], Linear, AlignCorners, Floor),
        &[f64t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])],
        f64t(
            &[1, 1, 3, 3],
            &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0],
        ),
    );
    // Cubic, a = -0.75, half-pixel downsample: coordinates 0.5 and 2.5 with weights
    // [-0.09375, 0.59375, 0.59375, -0.09375], edge indices clamped.
    check(
        rs(&[2], Cubic, HalfPixel, Floor),
        &[f32t(&[4], &[1.0, 2.0, 4.0, 8.0])],
        f32t(&[2], &[1.3125, 6.1875]),
    );
    // Cubic at integer coordinates is the identity.
    check(
        rs(&[2], Cubic, Asymmetric, Floor),
        &[f32t(&[4], &[1.0, 2.0, 4.0, 8.0])],
        f32t(&[2], &[1.0, 4.0]),
    );
}

#[test]
fn resize_errors() {
    use CoordTransform::*;
    use NearestMode::*;
    use ResizeMode::*;
    check_err(
        rs(&[4], Linear, HalfPixel, Floor),
        &[i32t(&[2], &[1, 2])],
        "resize: expects a floating-point operand",
    );
    check_err(
        rs(&[4, 4], Linear, HalfPixel, Floor),
        &[f32t(&[2], &[1.0, 2.0])],
        "sizes has 2 entries, expected 1",
    );
}

// ---------------------------------------------------------------- communication

/// Global view: transfers and collectives pass the logical tensor on unchanged, for any
/// element type (an all-reduce's operand already is the logical sum).
#[test]
fn communication_is_identity_on_the_logical_tensor() {
    let x = f32t(&[2, 2], &[1.0, -2.0, 3.5, 0.0]);
    let ops = [
        Op::Transfer {
            from: "chip0".into(),
            to: "chip1".into(),
        },
        Op::AllReduce { axes: vec![0, 1] },
        Op::AllGather { axes: vec![1] },
    ];
    for op in ops {
        check(op.clone(), &[x.clone()], x.clone());
        let b = boolt(&[2], &[true, false]);
        check(op, &[b.clone()], b);
    }
}

// ---------------------------------------------------------------- random

fn random(shape: &[u64], elem: ElemType, salt: u64) -> Op {
    Op::RandomUniform {
        shape: shape.iter().map(|&d| Dim::Static(d)).collect(),
        elem,
        salt,
    }
}

fn draw(op: &Op, seed: i64, counter: i64) -> Vec<f64> {
    let (s, c) = (i64t(&[], &[seed]), i64t(&[], &[counter]));
    let out = tessera_ir::interp::eval_op(op, &[&s, &c]).expect("random-uniform");
    out[0].to_f64_vec()
}

/// The documented generator, bit for bit: values computed independently with numpy
/// (`tessera_uniform` of `testdata/training/make_training_refs.py`), as multiples of 2^-24.
#[test]
fn random_uniform_is_the_documented_generator() {
    for (seed, counter, salt, bits) in [
        (0, 0, 0, [2942985, 7939244, 10972381, 2315422, 15128258]),
        (5, 3, 1, [7394006, 358697, 14233128, 5523070, 10306141]),
        (-1, 7, 2, [9565132, 5988078, 13062046, 15356312, 13171651]),
    ] {
        let got = draw(&random(&[5], ElemType::F32, salt), seed, counter);
        let want: Vec<f64> = bits
            .iter()
            .map(|&b| f64::from(b) / f64::from(1 << 24))
            .collect();
        assert_eq!(got, want, "seed {seed} counter {counter} salt {salt}");
    }
    // Row-major: a [2, 3] draw is the [6] draw reshaped; f64 holds the same values.
    let flat = draw(&random(&[6], ElemType::F32, 4), 9, 1);
    assert_eq!(draw(&random(&[2, 3], ElemType::F32, 4), 9, 1), flat);
    assert_eq!(draw(&random(&[6], ElemType::F64, 4), 9, 1), flat);
    check_err(
        random(&[2], ElemType::F32, 0),
        &[i32t(&[], &[0]), i64t(&[], &[0])],
        "random-uniform: the seed must be an i64 scalar",
    );
}

/// Uniform on [0, 1): the mean, the fraction below each of a few thresholds (dropout's keep
/// rate) within five standard deviations of a binomial, and the streams of different seeds,
/// counters and salts uncorrelated.
#[test]
fn random_uniform_statistics() {
    let n = 200_000usize;
    let u = draw(&random(&[n as u64], ElemType::F32, 0), 0, 0);
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    let mean = u.iter().sum::<f64>() / n as f64;
    let sd_mean = (1.0 / 12.0 / n as f64).sqrt();
    assert!((mean - 0.5).abs() < 5.0 * sd_mean, "mean {mean}");
    for p in [0.1, 0.25, 0.5, 0.9] {
        let below = u.iter().filter(|&&x| x < p).count() as f64 / n as f64;
        let sd = (p * (1.0 - p) / n as f64).sqrt();
        assert!((below - p).abs() < 5.0 * sd, "P(u < {p}) = {below}");
    }
    let corr = |a: &[f64], b: &[f64]| {
        let c: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - 0.5) * (y - 0.5))
            .sum::<f64>();
        c / n as f64 * 12.0
    };
    let bound = 5.0 / (n as f64).sqrt();
    for (seed, counter, salt) in [(1, 0, 0), (0, 1, 0), (0, 0, 1)] {
        let v = draw(&random(&[n as u64], ElemType::F32, salt), seed, counter);
        assert_ne!(u[..8], v[..8]);
        let r = corr(&u, &v);
        assert!(
            r.abs() < bound,
            "seed {seed} counter {counter} salt {salt}: r = {r}"
        );
    }
    // Neighbouring elements are uncorrelated too.
    let r = corr(&u[..n - 1], &u[1..]);
    assert!(r.abs() < bound, "lag 1: r = {r}");
}

/// `dropout` outside training is the identity with an all-true mask.
#[test]
fn dropout_is_the_identity_at_inference() {
    check_n(
        Op::Dropout { ratio: 0.5 },
        &[f32t(&[3], &[1.0, -2.0, 3.0])],
        &[
            f32t(&[3], &[1.0, -2.0, 3.0]),
            boolt(&[3], &[true, true, true]),
        ],
    );
}
