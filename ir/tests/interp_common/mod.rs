//! Helpers shared by the interpreter tests: tensor builders and table-style checks.
#![allow(dead_code)]

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};
use tessera_ir::interp::eval_op;
use tessera_ir::{Op, Tensor};

fn arr<T: Clone>(shape: &[usize], v: &[T]) -> ArrayD<T> {
    ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).expect("test tensor shape")
}

pub fn f32t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(arr(shape, v))
}
pub fn f64t(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::F64(arr(shape, v))
}
pub fn f16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F16(arr(
        shape,
        &v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
    ))
}
pub fn bf16t(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::BF16(arr(
        shape,
        &v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>(),
    ))
}
pub fn i8t(shape: &[usize], v: &[i8]) -> Tensor {
    Tensor::I8(arr(shape, v))
}
pub fn i32t(shape: &[usize], v: &[i32]) -> Tensor {
    Tensor::I32(arr(shape, v))
}
pub fn i64t(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::I64(arr(shape, v))
}
pub fn u8t(shape: &[usize], v: &[u8]) -> Tensor {
    Tensor::U8(arr(shape, v))
}
pub fn boolt(shape: &[usize], v: &[bool]) -> Tensor {
    Tensor::Bool(arr(shape, v))
}

/// Asserts that two tensors have the same element type and shape and (nearly) equal values:
/// exact for integers and bool, relative 1e-5 for floats (1e-2 for f16/bf16); NaN equals NaN.
pub fn assert_close(actual: &Tensor, expected: &Tensor, what: &str) {
    assert_eq!(actual.elem(), expected.elem(), "{what}: element type");
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    let tol = match expected.elem() {
        tessera_ir::ElemType::F16 | tessera_ir::ElemType::BF16 => 1e-2,
        tessera_ir::ElemType::F32 => 1e-5,
        tessera_ir::ElemType::F64 => 1e-12,
        _ => 0.0,
    };
    for (i, (a, e)) in actual
        .to_f64_vec()
        .iter()
        .zip(expected.to_f64_vec())
        .enumerate()
    {
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            *a == e
        } else {
            (a - e).abs() <= tol * (1.0 + e.abs())
        };
        assert!(
            ok,
            "{what}: element {i} is {a}, expected {e}\nactual: {actual:?}"
        );
    }
}

/// Evaluates `op` and compares every result.
pub fn check_n(op: Op, inputs: &[Tensor], expected: &[Tensor]) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let what = format!("{op:?}");
    let out = eval_op(&op, &refs).unwrap_or_else(|e| panic!("{what} failed: {e}"));
    assert_eq!(out.len(), expected.len(), "{what}: result count");
    for (a, e) in out.iter().zip(expected) {
        assert_close(a, e, &what);
    }
}

/// Evaluates a one-result `op` and compares.
pub fn check(op: Op, inputs: &[Tensor], expected: Tensor) {
    check_n(op, inputs, &[expected]);
}

/// Evaluates `op`, expects an error and checks that its text contains `needle`.
pub fn check_err(op: Op, inputs: &[Tensor], needle: &str) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    match eval_op(&op, &refs) {
        Ok(r) => panic!("{op:?} should fail with {needle:?}, got {r:?}"),
        Err(e) => {
            let s = e.to_string();
            assert!(
                s.contains(needle),
                "{op:?}: error {s:?} does not contain {needle:?}"
            );
        }
    }
}

/// A small deterministic pseudo-random generator (LCG) for test data in [-1, 1).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }
    pub fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
}
