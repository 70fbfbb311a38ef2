//! Concrete tensors: the values the reference interpreter computes with.

use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

use crate::types::{ElemType, TensorType};

/// A concrete tensor: an n-d array of one of the IR's element types.
#[derive(Clone, Debug, PartialEq)]
pub enum Tensor {
    /// f16 data.
    F16(ArrayD<f16>),
    /// bf16 data.
    BF16(ArrayD<bf16>),
    /// f32 data.
    F32(ArrayD<f32>),
    /// f64 data.
    F64(ArrayD<f64>),
    /// i8 data.
    I8(ArrayD<i8>),
    /// i16 data.
    I16(ArrayD<i16>),
    /// i32 data.
    I32(ArrayD<i32>),
    /// i64 data.
    I64(ArrayD<i64>),
    /// u8 data.
    U8(ArrayD<u8>),
    /// bool data.
    Bool(ArrayD<bool>),
}

/// Applies `$body` to the array inside any [`Tensor`] variant, binding it as `$a`.
#[macro_export]
macro_rules! with_tensor {
    ($t:expr, $a:ident => $body:expr) => {
        match $t {
            $crate::Tensor::F16($a) => $body,
            $crate::Tensor::BF16($a) => $body,
            $crate::Tensor::F32($a) => $body,
            $crate::Tensor::F64($a) => $body,
            $crate::Tensor::I8($a) => $body,
            $crate::Tensor::I16($a) => $body,
            $crate::Tensor::I32($a) => $body,
            $crate::Tensor::I64($a) => $body,
            $crate::Tensor::U8($a) => $body,
            $crate::Tensor::Bool($a) => $body,
        }
    };
}

/// The data given to [`Tensor::from_le_bytes`] does not match the type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tensor of type {ty} needs {expected} bytes, got {actual}")]
pub struct DataSizeError {
    /// The type asked for (printed).
    pub ty: String,
    /// Bytes needed.
    pub expected: u64,
    /// Bytes given.
    pub actual: u64,
}

/// A shape too large to hold in this machine's address space (see [`checked_byte_size`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a tensor of type {ty} is too large for this machine: {reason}")]
pub struct TooLargeError {
    /// The type (printed).
    pub ty: String,
    /// Which limit it exceeds.
    pub reason: String,
}

/// Why [`Tensor::from_le_bytes`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TensorError {
    /// The data has the wrong length.
    #[error(transparent)]
    DataSize(#[from] DataSizeError),
    /// The shape cannot be held in memory.
    #[error(transparent)]
    TooLarge(#[from] TooLargeError),
    /// The type has a symbolic extent, so no data can match it.
    #[error("a tensor of type {0} has a symbolic extent")]
    NotStatic(String),
}

/// The byte size of a dense tensor of `elem` with the given extents, when such a tensor can
/// exist on this machine; this is the single size rule of the IR, shared by the verifier (a
/// value type that breaks it is an error), [`Tensor`]'s constructors and the interpreter.
///
/// The rule (the one `ndarray` and `Vec` impose): the product of the **non-zero** extents must
/// fit in `isize`, and so must that product times the element size. Extents of zero do not
/// make a shape small enough: `[0, 2^32, 2^32]` breaks the rule although it has no elements.
/// Returns the actual byte size (0 when an extent is 0).
pub fn checked_byte_size(
    elem: ElemType,
    extents: impl IntoIterator<Item = u64>,
) -> Result<u64, String> {
    let limit = isize::MAX as u64;
    let mut nonzero: u64 = 1;
    let mut empty = false;
    for d in extents {
        if d == 0 {
            empty = true;
            continue;
        }
        nonzero = match nonzero.checked_mul(d) {
            Some(n) if n <= limit => n,
            _ => return Err(format!("its non-zero extents multiply past {limit}")),
        };
    }
    let bytes = match nonzero.checked_mul(elem.size_bytes() as u64) {
        Some(b) if b <= limit => b,
        _ => return Err(format!("its data would take more than {limit} bytes")),
    };
    Ok(if empty { 0 } else { bytes })
}

fn check_shape(elem: ElemType, shape: &[usize]) -> Result<usize, TooLargeError> {
    let bytes = checked_byte_size(elem, shape.iter().map(|&d| d as u64)).map_err(|reason| {
        TooLargeError {
            ty: fixed_ty(elem, shape).to_string(),
            reason,
        }
    })?;
    // Fits isize, hence usize.
    Ok(bytes as usize)
}

fn fixed_ty(elem: ElemType, shape: &[usize]) -> TensorType {
    let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    TensorType::fixed(elem, &dims)
}

impl Tensor {
    /// The element type.
    pub fn elem(&self) -> ElemType {
        match self {
            Tensor::F16(_) => ElemType::F16,
            Tensor::BF16(_) => ElemType::BF16,
            Tensor::F32(_) => ElemType::F32,
            Tensor::F64(_) => ElemType::F64,
            Tensor::I8(_) => ElemType::I8,
            Tensor::I16(_) => ElemType::I16,
            Tensor::I32(_) => ElemType::I32,
            Tensor::I64(_) => ElemType::I64,
            Tensor::U8(_) => ElemType::U8,
            Tensor::Bool(_) => ElemType::Bool,
        }
    }

    /// The extents.
    pub fn shape(&self) -> &[usize] {
        with_tensor!(self, a => a.shape())
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        with_tensor!(self, a => a.len())
    }

    /// True when the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The static tensor type of this tensor.
    pub fn ty(&self) -> TensorType {
        let dims: Vec<u64> = self.shape().iter().map(|&d| d as u64).collect();
        TensorType::fixed(self.elem(), &dims)
    }

    /// A tensor of zeros (false for bool), or an error when the shape breaks the size rule
    /// of [`checked_byte_size`].
    pub fn zeros(elem: ElemType, shape: &[usize]) -> Result<Tensor, TooLargeError> {
        check_shape(elem, shape)?;
        let s = IxDyn(shape);
        Ok(match elem {
            ElemType::F16 => Tensor::F16(ArrayD::from_elem(s, f16::ZERO)),
            ElemType::BF16 => Tensor::BF16(ArrayD::from_elem(s, bf16::ZERO)),
            ElemType::F32 => Tensor::F32(ArrayD::zeros(s)),
            ElemType::F64 => Tensor::F64(ArrayD::zeros(s)),
            ElemType::I8 => Tensor::I8(ArrayD::zeros(s)),
            ElemType::I16 => Tensor::I16(ArrayD::zeros(s)),
            ElemType::I32 => Tensor::I32(ArrayD::zeros(s)),
            ElemType::I64 => Tensor::I64(ArrayD::zeros(s)),
            ElemType::U8 => Tensor::U8(ArrayD::zeros(s)),
            ElemType::Bool => Tensor::Bool(ArrayD::from_elem(s, false)),
        })
    }

    /// Decodes the little-endian bytes of a value of type `ty` (a constant's data), which
    /// must have a static shape; see [`Tensor::from_le_bytes`].
    pub fn from_typed_le_bytes(ty: &TensorType, bytes: &[u8]) -> Result<Tensor, TensorError> {
        let not_static = || TensorError::NotStatic(ty.to_string());
        let dims: Vec<usize> = ty
            .static_dims()
            .ok_or_else(not_static)?
            .into_iter()
            .map(|d| usize::try_from(d).map_err(|_| not_static()))
            .collect::<Result<_, _>>()?;
        Tensor::from_le_bytes(ty.elem, &dims, bytes)
    }

    /// Decodes little-endian, row-major bytes (bool: one byte per element, nonzero is true).
    /// Fails when `bytes` has the wrong length or the shape breaks the size rule of
    /// [`checked_byte_size`].
    pub fn from_le_bytes(
        elem: ElemType,
        shape: &[usize],
        bytes: &[u8],
    ) -> Result<Tensor, TensorError> {
        let expected = check_shape(elem, shape)?;
        if bytes.len() != expected {
            return Err(DataSizeError {
                ty: fixed_ty(elem, shape).to_string(),
                expected: expected as u64,
                actual: bytes.len() as u64,
            }
            .into());
        }
        let s = IxDyn(shape);
        let shape_err = |e: ndarray::ShapeError| TooLargeError {
            ty: fixed_ty(elem, shape).to_string(),
            reason: e.to_string(),
        };
        macro_rules! decode {
            ($variant:ident, $t:ty, $w:literal) => {{
                let v: Vec<$t> = bytes
                    .chunks_exact($w)
                    .map(|c| {
                        let mut b = [0u8; $w];
                        b.copy_from_slice(c);
                        <$t>::from_le_bytes(b)
                    })
                    .collect();
                Tensor::$variant(ArrayD::from_shape_vec(s, v).map_err(shape_err)?)
            }};
        }
        Ok(match elem {
            ElemType::F16 => decode!(F16, f16, 2),
            ElemType::BF16 => decode!(BF16, bf16, 2),
            ElemType::F32 => decode!(F32, f32, 4),
            ElemType::F64 => decode!(F64, f64, 8),
            ElemType::I8 => decode!(I8, i8, 1),
            ElemType::I16 => decode!(I16, i16, 2),
            ElemType::I32 => decode!(I32, i32, 4),
            ElemType::I64 => decode!(I64, i64, 8),
            ElemType::U8 => decode!(U8, u8, 1),
            ElemType::Bool => Tensor::Bool(
                ArrayD::from_shape_vec(s, bytes.iter().map(|&b| b != 0).collect())
                    .map_err(shape_err)?,
            ),
        })
    }

    /// Encodes as little-endian, row-major bytes (bool: one byte per element).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        macro_rules! encode {
            ($a:expr) => {
                $a.iter().flat_map(|x| x.to_le_bytes()).collect()
            };
        }
        match self {
            Tensor::F16(a) => encode!(a),
            Tensor::BF16(a) => encode!(a),
            Tensor::F32(a) => encode!(a),
            Tensor::F64(a) => encode!(a),
            Tensor::I8(a) => encode!(a),
            Tensor::I16(a) => encode!(a),
            Tensor::I32(a) => encode!(a),
            Tensor::I64(a) => encode!(a),
            Tensor::U8(a) => encode!(a),
            Tensor::Bool(a) => a.iter().map(|&b| u8::from(b)).collect(),
        }
    }

    /// Every element as `f64` (bool as 0/1), row-major. Handy for comparisons in tests.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        match self {
            Tensor::F16(a) => a.iter().map(|x| x.to_f64()).collect(),
            Tensor::BF16(a) => a.iter().map(|x| x.to_f64()).collect(),
            Tensor::F32(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::F64(a) => a.iter().copied().collect(),
            Tensor::I8(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::I16(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::I32(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::I64(a) => a.iter().map(|&x| x as f64).collect(),
            Tensor::U8(a) => a.iter().map(|&x| f64::from(x)).collect(),
            Tensor::Bool(a) => a.iter().map(|&x| f64::from(u8::from(x))).collect(),
        }
    }
}
