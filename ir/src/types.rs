//! Element types, dimensions and tensor types.

use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    /// IEEE 754 binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary64.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer.
    U8,
    /// Boolean, one byte per element (0 or 1).
    Bool,
}

impl ElemType {
    /// Every element type, in a fixed order (used by tests and generators).
    pub const ALL: [ElemType; 10] = [
        ElemType::F16,
        ElemType::BF16,
        ElemType::F32,
        ElemType::F64,
        ElemType::I8,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::U8,
        ElemType::Bool,
    ];

    /// The text-format name: `f32`, `i64`, `bool`, ...
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F16 => "f16",
            ElemType::BF16 => "bf16",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
            ElemType::I8 => "i8",
            ElemType::I16 => "i16",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::U8 => "u8",
            ElemType::Bool => "bool",
        }
    }

    /// NumPy's `.npy` type descriptor (little-endian): `<f4`, `|i1`, `|b1`, ... NumPy has no
    /// bfloat16: bf16 is `|V2`, two raw bytes per element.
    pub fn npy_descr(self) -> &'static str {
        match self {
            ElemType::F16 => "<f2",
            ElemType::BF16 => "|V2",
            ElemType::F32 => "<f4",
            ElemType::F64 => "<f8",
            ElemType::I8 => "|i1",
            ElemType::I16 => "<i2",
            ElemType::I32 => "<i4",
            ElemType::I64 => "<i8",
            ElemType::U8 => "|u1",
            ElemType::Bool => "|b1",
        }
    }

    /// Parses a text-format name.
    pub fn from_name(name: &str) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Size of one element in bytes.
    pub fn size_bytes(self) -> usize {
        match self {
            ElemType::I8 | ElemType::U8 | ElemType::Bool => 1,
            ElemType::F16 | ElemType::BF16 | ElemType::I16 => 2,
            ElemType::F32 | ElemType::I32 => 4,
            ElemType::F64 | ElemType::I64 => 8,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ElemType::F16 | ElemType::BF16 | ElemType::F32 | ElemType::F64
        )
    }

    /// True for the integer types (signed and unsigned; not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            ElemType::I8 | ElemType::I16 | ElemType::I32 | ElemType::I64 | ElemType::U8
        )
    }

    /// True for floating-point and integer types (everything but bool).
    pub fn is_numeric(self) -> bool {
        self != ElemType::Bool
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of a tensor shape: a known extent or a named symbol.
///
/// Symbols (`N`, `seq`) stand for an extent fixed per run; every use of the same
/// symbol in one graph denotes the same extent.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A known extent.
    Static(u64),
    /// A named symbolic extent.
    Sym(String),
}

impl Dim {
    /// The static extent, if known.
    pub fn as_static(&self) -> Option<u64> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// A symbolic dimension.
    pub fn sym(name: impl Into<String>) -> Dim {
        Dim::Sym(name.into())
    }
}

impl From<u64> for Dim {
    fn from(n: u64) -> Dim {
        Dim::Static(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// A shape: one [`Dim`] per axis. Rank 0 is a scalar.
pub type Shape = Vec<Dim>;

/// The type of a tensor value: element type and shape.
///
/// Printed as `f32[N, 3, 224, 224]`; a scalar is `f32[]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    /// Element type.
    pub elem: ElemType,
    /// Shape.
    pub shape: Shape,
}

impl TensorType {
    /// A tensor type.
    pub fn new(elem: ElemType, shape: Shape) -> TensorType {
        TensorType { elem, shape }
    }

    /// A tensor type with a fully static shape.
    pub fn fixed(elem: ElemType, dims: &[u64]) -> TensorType {
        TensorType {
            elem,
            shape: dims.iter().map(|&d| Dim::Static(d)).collect(),
        }
    }

    /// The rank (number of axes).
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The static extents, or `None` when some dimension is symbolic.
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.shape.iter().map(Dim::as_static).collect()
    }

    /// The number of elements, when the shape is static and the count fits in `u64`.
    pub fn num_elements(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, d| acc.checked_mul(d.as_static()?))
    }

    /// The size in bytes, when the shape is static and the size fits in `u64`.
    pub fn size_bytes(&self) -> Option<u64> {
        self.num_elements()?
            .checked_mul(self.elem.size_bytes() as u64)
    }

    /// The same shape with another element type.
    pub fn with_elem(&self, elem: ElemType) -> TensorType {
        TensorType {
            elem,
            shape: self.shape.clone(),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.elem)?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// A scalar attribute value (fill values, padding values).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An integer (also used for bool: 0 or 1).
    Int(i64),
    /// A floating-point number.
    Float(f64),
}

impl Scalar {
    /// The value as `f64` (integers convert, possibly rounding).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }

    /// The value as `i64` (floats truncate toward zero, saturating).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Int(i) => i,
            Scalar::Float(x) => x as i64,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => f.write_str(&format_f64(*x)),
        }
    }
}

/// Formats a float so that it reads back to the same bits and always looks like a float
/// (`1.0`, `1e-5`, `nan`, `inf`, `-inf`).
pub fn format_f64(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else {
        // `{:?}` is the shortest representation that round-trips, and keeps a `.0` or exponent.
        format!("{x:?}")
    }
}

/// Formats an `f32` like [`format_f64`], with the shortest representation that reads back as
/// the same `f32`.
pub fn format_f32(x: f32) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else if x.is_infinite() {
        if x > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        }
    } else {
        format!("{x:?}")
    }
}
