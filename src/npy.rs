//! NumPy `.npy` files as [`Tensor`]s: the input and output format of `tessera run`.
//!
//! The header is written by the `npyz` crate and parsed here: the header dictionary is a
//! Python literal, read by a small parser of its own (strings, integers, booleans, `None`,
//! tuples, lists, dicts) that checks everything before anything is sized by it: duplicate
//! keys are an error, and the shape must pass the IR's size rule
//! ([`tessera_ir::checked_byte_size`]), so no later arithmetic on it can overflow. The data is
//! decoded here too, straight from the bytes after the header.
//!
//! | numpy dtype                        | tessera element type |
//! |------------------------------------|----------------------|
//! | `f2`, `f4`, `f8`                   | `f16`, `f32`, `f64`  |
//! | `i1`, `i2`, `i4`, `i8`             | `i8` .. `i64`        |
//! | `u1`                               | `u8`                 |
//! | `b1` (`bool`)                      | `bool`               |
//! | `V2` (2-byte raw, see below)       | `bf16`               |
//!
//! Both byte orders are read (big-endian data is swapped); files are always written
//! little-endian, in C order.
//!
//! **bf16.** numpy has no bfloat16 dtype. The `ml_dtypes` package adds one, and `np.save`
//! stores such arrays as 2-byte raw records (`V2`). tessera reads a `V2` array as the raw
//! little-endian bits of bf16 values, and writes bf16 tensors the same way (`|V2`). In Python,
//! `np.load(path).view(ml_dtypes.bfloat16)` turns such a file back into numbers, and
//! `np.save(path, x.astype(ml_dtypes.bfloat16))` writes one. A `V2` file is accepted only for a
//! bf16 input, and an `f4` file is not converted to bf16: convert it in numpy first.
//!
//! **Fortran order** (`fortran_order: True`) is accepted and converted to C order on reading.
//!
//! Other dtypes (unsigned integers wider than one byte, complex numbers, strings, objects,
//! structured arrays) are rejected with an error that names the dtype.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail, ensure};
use npyz::{DType, Endianness, TypeChar, TypeStr, WriterBuilder};
use tessera_ir::{Dim, ElemType, Tensor, TensorType, checked_byte_size};

/// The header of an `.npy` file, as far as tessera cares: element type, shape, order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The element type the dtype maps to.
    pub elem: ElemType,
    /// The extents.
    pub shape: Vec<usize>,
    /// True when the data is stored in Fortran (column-major) order.
    pub fortran_order: bool,
    /// True when multi-byte elements are stored big-endian.
    big_endian: bool,
}

/// Reads an `.npy` file into a tensor of whatever element type its dtype maps to.
pub fn read(path: &Path) -> Result<Tensor> {
    let bytes = read_file(path)?;
    decode(&bytes).with_context(|| path.display().to_string())
}

/// Reads an `.npy` file for a value of type `expected`: the element type must match, and so
/// must the rank and every static dimension (symbolic dimensions accept any extent).
///
/// `what` names the value in error messages (for example "input `x`").
pub fn read_expecting(path: &Path, expected: &TensorType, what: &str) -> Result<Tensor> {
    let bytes = read_file(path)?;
    let (header, data) = parse_header(&bytes).with_context(|| path.display().to_string())?;
    check_type(&header, expected)
        .with_context(|| format!("{}: does not fit {what} of type {expected}", path.display()))?;
    decode_data(&header, data).with_context(|| path.display().to_string())
}

/// Writes a tensor as an `.npy` file (little-endian, C order), atomically: the data goes to a
/// temporary file in the same folder that is then renamed over `path`.
///
/// Permissions: a new file gets those of a plain create (on Unix `0o666` less the process
/// umask, as `File::create` gives); a file that is replaced keeps its permissions.
pub fn write(path: &Path, tensor: &Tensor) -> Result<()> {
    tessera_ir::text::write_atomically(path, |f| {
        let mut w = std::io::BufWriter::new(f);
        encode(tensor, &mut w).map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        w.flush()
    })
    .with_context(|| format!("cannot write {}", path.display()))
}

/// Encodes a tensor as `.npy` bytes (little-endian, C order).
pub fn encode(tensor: &Tensor, w: &mut impl Write) -> Result<()> {
    let descr = tensor.elem().npy_descr();
    let type_str: TypeStr = descr
        .parse()
        .map_err(|e| anyhow!("bad dtype {descr}: {e}"))?;
    let shape: Vec<u64> = tensor.shape().iter().map(|&d| d as u64).collect();
    let w = npyz::WriteOptions::new_header_only()
        .dtype(DType::new_scalar(type_str))
        .shape(&shape)
        .writer(w)
        .write_header_only()?;
    // `to_le_bytes` walks the array in logical (row-major) order whatever its memory layout.
    w.write_all(&tensor.to_le_bytes())?;
    Ok(())
}

/// Decodes `.npy` bytes into a tensor.
pub fn decode(bytes: &[u8]) -> Result<Tensor> {
    let (header, data) = parse_header(bytes)?;
    decode_data(&header, data)
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

/// Parses and checks the header; returns it with the data bytes that follow it.
fn parse_header(bytes: &[u8]) -> Result<(Header, &[u8])> {
    let (text, data_start) = header_text(bytes)?;
    let dict = match PyParser::new(&text).document() {
        Ok(PyVal::Dict(d)) => d,
        Ok(_) => bail!("corrupt .npy header: it is not a Python dict"),
        Err(e) => bail!("corrupt .npy header: {e}"),
    };
    let mut descr = None;
    let mut fortran = None;
    let mut shape = None;
    for (key, val) in dict {
        let slot = match key.as_str() {
            "descr" => &mut descr,
            "fortran_order" => &mut fortran,
            "shape" => &mut shape,
            other => bail!("corrupt .npy header: unexpected key '{other}'"),
        };
        ensure!(
            slot.is_none(),
            "corrupt .npy header: the key '{key}' appears twice"
        );
        *slot = Some(val);
    }
    let missing = |k: &str| anyhow!("corrupt .npy header: the key '{k}' is missing");
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran_order = match fortran.ok_or_else(|| missing("fortran_order"))? {
        PyVal::Bool(b) => b,
        _ => bail!("corrupt .npy header: 'fortran_order' is not True or False"),
    };
    let dims: Vec<u64> = match shape.ok_or_else(|| missing("shape"))? {
        PyVal::Seq(items) => items
            .iter()
            .map(|v| match v {
                PyVal::Int(n) => u64::try_from(*n).map_err(|_| {
                    anyhow!("corrupt .npy header: the shape has the invalid extent {n}")
                }),
                _ => bail!("corrupt .npy header: the shape holds something other than integers"),
            })
            .collect::<Result<_>>()?,
        _ => bail!("corrupt .npy header: 'shape' is not a tuple"),
    };
    let ts: TypeStr = match descr {
        PyVal::Str(d) => d
            .parse()
            .map_err(|e| anyhow!("unsupported dtype '{d}': {e}"))?,
        _ => {
            bail!("unsupported dtype: structured and sub-array dtypes have no tessera element type")
        }
    };
    let elem = elem_of(&ts)?;
    // The size rule bounds every product of extents, so nothing below can overflow.
    checked_byte_size(elem, dims.iter().copied()).map_err(|why| {
        anyhow!(
            "corrupt .npy header: shape {} of {elem} is too large for this machine: {why}",
            shape_string_u64(&dims)
        )
    })?;
    let shape = dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| anyhow!("dimension {d} is too large")))
        .collect::<Result<Vec<usize>>>()?;
    let header = Header {
        elem,
        shape,
        fortran_order,
        big_endian: ts.endianness() == Endianness::Big,
    };
    Ok((header, &bytes[data_start..]))
}

fn shape_string_u64(shape: &[u64]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

/// Checks the magic string and the header length; returns the header text and where the
/// data starts.
fn header_text(bytes: &[u8]) -> Result<(String, usize)> {
    ensure!(
        bytes.len() >= 10 && &bytes[..6] == b"\x93NUMPY",
        "not a .npy file (it does not start with the .npy magic string)"
    );
    let major = bytes[6];
    let (len, start): (usize, usize) = match major {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        2 | 3 => {
            ensure!(bytes.len() >= 12, "corrupt .npy file: truncated header");
            let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
            (
                usize::try_from(n).map_err(|_| anyhow!("header too large"))?,
                12,
            )
        }
        v => bail!("unsupported .npy format version {v}"),
    };
    let end = start
        .checked_add(len)
        .ok_or_else(|| anyhow!("header too large"))?;
    ensure!(
        end <= bytes.len(),
        "corrupt .npy file: truncated header: it claims {len} bytes, the file has {}",
        bytes.len() - start
    );
    // Versions 1 and 2 are latin-1, version 3 UTF-8; the parts that matter are ASCII.
    let text = String::from_utf8_lossy(&bytes[start..end]).into_owned();
    Ok((text, end))
}

/// A Python literal, as far as `.npy` headers use them.
#[derive(Debug)]
enum PyVal {
    Str(String),
    Int(i128),
    Bool(bool),
    None,
    /// A tuple or a list.
    Seq(Vec<PyVal>),
    /// A dict with string keys, in order (duplicates kept, for the caller to reject).
    Dict(Vec<(String, PyVal)>),
}

/// How deeply header literals may nest.
const MAX_PY_DEPTH: usize = 32;

/// A recursive-descent parser of Python literals.
struct PyParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> PyParser<'a> {
    fn new(text: &'a str) -> Self {
        PyParser {
            s: text.as_bytes(),
            i: 0,
        }
    }

    /// One literal followed by nothing but whitespace.
    fn document(&mut self) -> std::result::Result<PyVal, String> {
        let v = self.value(0)?;
        self.ws();
        if self.i != self.s.len() {
            return Err(format!("unexpected text after the dict at byte {}", self.i));
        }
        Ok(v)
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> std::result::Result<(), String> {
        match self.peek() {
            Some(x) if x == c => {
                self.i += 1;
                Ok(())
            }
            Some(x) => Err(format!(
                "expected '{}' at byte {}, found '{}'",
                c as char, self.i, x as char
            )),
            None => Err(format!(
                "expected '{}', found the end of the header",
                c as char
            )),
        }
    }

    fn value(&mut self, depth: usize) -> std::result::Result<PyVal, String> {
        if depth > MAX_PY_DEPTH {
            return Err(format!("literals nested more than {MAX_PY_DEPTH} deep"));
        }
        match self.peek() {
            None => Err("unexpected end of the header".into()),
            Some(b'\'' | b'"') => self.string().map(PyVal::Str),
            Some(b'(') => self.seq(b')', depth).map(PyVal::Seq),
            Some(b'[') => self.seq(b']', depth).map(PyVal::Seq),
            Some(b'{') => self.dict(depth).map(PyVal::Dict),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.int().map(PyVal::Int),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len() && self.s[self.i].is_ascii_alphanumeric() {
                    self.i += 1;
                }
                match &self.s[start..self.i] {
                    b"True" => Ok(PyVal::Bool(true)),
                    b"False" => Ok(PyVal::Bool(false)),
                    b"None" => Ok(PyVal::None),
                    w => Err(format!(
                        "unexpected word '{}' at byte {start}",
                        String::from_utf8_lossy(w)
                    )),
                }
            }
            Some(c) => Err(format!("unexpected '{}' at byte {}", c as char, self.i)),
        }
    }

    fn string(&mut self) -> std::result::Result<String, String> {
        let quote = self.s[self.i];
        let start = self.i;
        self.i += 1;
        let mut out = Vec::new();
        loop {
            match self.s.get(self.i).copied() {
                None => return Err(format!("unterminated string at byte {start}")),
                Some(c) if c == quote => {
                    self.i += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    let Some(&e) = self.s.get(self.i + 1) else {
                        return Err(format!("unterminated string at byte {start}"));
                    };
                    out.push(e);
                    self.i += 2;
                }
                Some(c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }

    fn int(&mut self) -> std::result::Result<i128, String> {
        let start = self.i;
        let neg = self.s[self.i] == b'-';
        if neg {
            self.i += 1;
        }
        let digits = self.i;
        let mut n: i128 = 0;
        while let Some(&c) = self.s.get(self.i).filter(|c| c.is_ascii_digit()) {
            n = n
                .checked_mul(10)
                .and_then(|n| n.checked_add(i128::from(c - b'0')))
                .ok_or_else(|| format!("integer at byte {start} is too large"))?;
            self.i += 1;
        }
        if self.i == digits {
            return Err(format!("expected digits at byte {}", self.i));
        }
        // Python 2 long suffix, as old numpy versions wrote.
        if matches!(self.s.get(self.i), Some(b'L' | b'l')) {
            self.i += 1;
        }
        Ok(if neg { -n } else { n })
    }

    /// Items up to `close`, comma-separated, with an optional trailing comma.
    fn seq(&mut self, close: u8, depth: usize) -> std::result::Result<Vec<PyVal>, String> {
        self.i += 1; // the opening bracket
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.i += 1;
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            if self.peek() == Some(b',') {
                self.i += 1;
            } else {
                self.expect(close)?;
                return Ok(items);
            }
        }
    }

    fn dict(&mut self, depth: usize) -> std::result::Result<Vec<(String, PyVal)>, String> {
        self.i += 1; // `{`
        let mut items = Vec::new();
        loop {
            match self.peek() {
                Some(b'}') => {
                    self.i += 1;
                    return Ok(items);
                }
                Some(b'\'' | b'"') => {}
                _ => return Err(format!("expected a string key at byte {}", self.i)),
            }
            let key = self.string()?;
            self.expect(b':')?;
            items.push((key, self.value(depth + 1)?));
            if self.peek() == Some(b',') {
                self.i += 1;
            } else {
                self.expect(b'}')?;
                return Ok(items);
            }
        }
    }
}

/// The tessera element type of a numpy scalar dtype.
fn elem_of(ts: &TypeStr) -> Result<ElemType> {
    let size = ts.size_field();
    let elem = match (ts.type_char(), size) {
        (TypeChar::Float, 2) => Some(ElemType::F16),
        (TypeChar::Float, 4) => Some(ElemType::F32),
        (TypeChar::Float, 8) => Some(ElemType::F64),
        (TypeChar::Int, 1) => Some(ElemType::I8),
        (TypeChar::Int, 2) => Some(ElemType::I16),
        (TypeChar::Int, 4) => Some(ElemType::I32),
        (TypeChar::Int, 8) => Some(ElemType::I64),
        (TypeChar::Uint, 1) => Some(ElemType::U8),
        (TypeChar::Bool, 1) => Some(ElemType::Bool),
        (TypeChar::RawData, 2) => Some(ElemType::BF16),
        _ => None,
    };
    elem.ok_or_else(|| anyhow!("unsupported dtype '{ts}' ({}): tessera reads f2 f4 f8 i1 i2 i4 i8 u1 b1, and V2 as bf16", dtype_name(ts)))
}

/// A readable numpy name for a dtype, for messages.
fn dtype_name(ts: &TypeStr) -> String {
    let size = ts.size_field();
    match ts.type_char() {
        TypeChar::Float => format!("float{}", size * 8),
        TypeChar::Int => format!("int{}", size * 8),
        TypeChar::Uint => format!("uint{}", size * 8),
        TypeChar::Bool => "bool".to_string(),
        TypeChar::Complex => format!("complex{}", size * 8),
        TypeChar::RawData => format!("{size}-byte raw data"),
        TypeChar::ByteStr | TypeChar::UnicodeStr => "string".to_string(),
        TypeChar::Object => "Python objects".to_string(),
        TypeChar::TimeDelta => "timedelta64".to_string(),
        TypeChar::DateTime => "datetime64".to_string(),
        _ => "unknown".to_string(),
    }
}

/// The numpy dtype that holds an element type (for messages).
fn numpy_name(elem: ElemType) -> &'static str {
    match elem {
        ElemType::F16 => "float16",
        ElemType::BF16 => "ml_dtypes.bfloat16 (saved as V2)",
        ElemType::F32 => "float32",
        ElemType::F64 => "float64",
        ElemType::I8 => "int8",
        ElemType::I16 => "int16",
        ElemType::I32 => "int32",
        ElemType::I64 => "int64",
        ElemType::U8 => "uint8",
        ElemType::Bool => "bool",
    }
}

fn check_type(header: &Header, expected: &TensorType) -> Result<()> {
    ensure!(
        header.elem == expected.elem,
        "the file holds {} ({}), expected {} ({})",
        header.elem,
        numpy_name(header.elem),
        expected.elem,
        numpy_name(expected.elem)
    );
    let got = shape_string(&header.shape);
    ensure!(
        header.shape.len() == expected.rank(),
        "the file has shape {got} (rank {}), expected rank {} ({expected})",
        header.shape.len(),
        expected.rank()
    );
    for (axis, (&n, d)) in header.shape.iter().zip(&expected.shape).enumerate() {
        if let Dim::Static(want) = d {
            ensure!(
                n as u64 == *want,
                "the file has shape {got}, expected {expected}: axis {axis} is {n}, not {want}"
            );
        }
    }
    Ok(())
}

/// Formats a concrete shape as `[2, 16]`.
pub fn shape_string(shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", dims.join(", "))
}

fn decode_data(header: &Header, data: &[u8]) -> Result<Tensor> {
    let width = header.elem.size_bytes();
    let count = header
        .shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| {
            anyhow!(
                "shape {} has too many elements",
                shape_string(&header.shape)
            )
        })?;
    let need = count
        .checked_mul(width)
        .ok_or_else(|| anyhow!("shape {} is too large", shape_string(&header.shape)))?;
    ensure!(
        data.len() >= need,
        "corrupt .npy file: truncated data: shape {} of {} needs {need} bytes, the file has {}",
        shape_string(&header.shape),
        header.elem,
        data.len()
    );
    ensure!(
        data.len() == need,
        "corrupt .npy file: {} unexpected bytes after the data (shape {} of {} needs {need} bytes)",
        data.len() - need,
        shape_string(&header.shape),
        header.elem
    );
    if header.elem == ElemType::Bool
        && let Some(b) = data.iter().find(|&&b| b > 1)
    {
        bail!("corrupt .npy file: invalid bool byte {b:#04x} (bool data must be 0 or 1)");
    }
    let swapped;
    let le: &[u8] = if header.big_endian && width > 1 {
        swapped = data
            .chunks_exact(width)
            .flat_map(|c| c.iter().rev().copied())
            .collect::<Vec<u8>>();
        &swapped
    } else {
        data
    };
    if !header.fortran_order || header.shape.len() < 2 {
        return Ok(Tensor::from_le_bytes(header.elem, &header.shape, le)?);
    }
    // Fortran order: the data is the C-order layout of the reversed shape; reversing the
    // axes of that array gives the logical array, which is then copied to C order.
    let reversed: Vec<usize> = header.shape.iter().rev().copied().collect();
    let t = Tensor::from_le_bytes(header.elem, &reversed, le)?;
    Ok(to_c_order(reverse_axes(t)))
}

fn reverse_axes(t: Tensor) -> Tensor {
    match t {
        Tensor::F16(a) => Tensor::F16(a.reversed_axes()),
        Tensor::BF16(a) => Tensor::BF16(a.reversed_axes()),
        Tensor::F32(a) => Tensor::F32(a.reversed_axes()),
        Tensor::F64(a) => Tensor::F64(a.reversed_axes()),
        Tensor::I8(a) => Tensor::I8(a.reversed_axes()),
        Tensor::I16(a) => Tensor::I16(a.reversed_axes()),
        Tensor::I32(a) => Tensor::I32(a.reversed_axes()),
        Tensor::I64(a) => Tensor::I64(a.reversed_axes()),
        Tensor::U8(a) => Tensor::U8(a.reversed_axes()),
        Tensor::Bool(a) => Tensor::Bool(a.reversed_axes()),
    }
}

fn to_c_order(t: Tensor) -> Tensor {
    match t {
        Tensor::F16(a) => Tensor::F16(a.as_standard_layout().into_owned()),
        Tensor::BF16(a) => Tensor::BF16(a.as_standard_layout().into_owned()),
        Tensor::F32(a) => Tensor::F32(a.as_standard_layout().into_owned()),
        Tensor::F64(a) => Tensor::F64(a.as_standard_layout().into_owned()),
        Tensor::I8(a) => Tensor::I8(a.as_standard_layout().into_owned()),
        Tensor::I16(a) => Tensor::I16(a.as_standard_layout().into_owned()),
        Tensor::I32(a) => Tensor::I32(a.as_standard_layout().into_owned()),
        Tensor::I64(a) => Tensor::I64(a.as_standard_layout().into_owned()),
        Tensor::U8(a) => Tensor::U8(a.as_standard_layout().into_owned()),
        Tensor::Bool(a) => Tensor::Bool(a.as_standard_layout().into_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use ndarray::{ArrayD, IxDyn};

    fn arr<T: Clone>(shape: &[usize], v: Vec<T>) -> ArrayD<T> {
        ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape matches")
    }

    fn roundtrip(t: &Tensor) -> Tensor {
        let mut buf = Vec::new();
        encode(t, &mut buf).expect("encode");
        decode(&buf).expect("decode")
    }

    /// A hand-made `.npy` file (format 1.0) with the given header dict and data.
    fn npy_bytes(dict: &str, data: &[u8]) -> Vec<u8> {
        let mut text = dict.to_string();
        // Pad so that magic (6) + version (2) + length (2) + text is a multiple of 64.
        while !(10 + text.len() + 1).is_multiple_of(64) {
            text.push(' ');
        }
        text.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&u16::try_from(text.len()).expect("short").to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn err_of(bytes: &[u8]) -> String {
        format!("{:#}", decode(bytes).expect_err("should fail"))
    }

    #[test]
    fn every_element_type_round_trips() {
        let cases = vec![
            Tensor::F16(arr(&[2], vec![f16::from_f32(1.5), f16::from_f32(-2.0)])),
            Tensor::BF16(arr(&[2], vec![bf16::from_f32(1.5), bf16::from_f32(-3.0)])),
            Tensor::F32(arr(&[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, f32::NAN])),
            Tensor::F64(arr(&[1, 1, 2], vec![0.25, -1e300])),
            Tensor::I8(arr(&[3], vec![-128, 0, 127])),
            Tensor::I16(arr(&[2], vec![-30000, 30000])),
            Tensor::I32(arr(&[2], vec![i32::MIN, i32::MAX])),
            Tensor::I64(arr(&[2], vec![i64::MIN, 7])),
            Tensor::U8(arr(&[2, 2], vec![0, 1, 254, 255])),
            Tensor::Bool(arr(&[3], vec![true, false, true])),
            Tensor::F32(arr(&[], vec![42.0])),
            Tensor::I64(arr(&[0, 3], vec![])),
        ];
        for t in &cases {
            let back = roundtrip(t);
            assert_eq!(back.elem(), t.elem());
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.to_le_bytes(), t.to_le_bytes(), "{t:?}");
        }
    }

    #[test]
    fn writes_the_numpy_header() {
        let mut buf = Vec::new();
        encode(&Tensor::F32(arr(&[2, 3], vec![0.0; 6])), &mut buf).expect("encode");
        assert_eq!(&buf[..8], b"\x93NUMPY\x01\x00");
        let text = String::from_utf8_lossy(&buf[10..]);
        assert!(text.contains("'descr': '<f4'"), "{text}");
        assert!(text.contains("'fortran_order': False"), "{text}");
        assert!(text.contains("'shape': (2, 3"), "{text}");
        assert_eq!(buf.len() % 64, 24); // the header is 64-aligned, the data is 24 bytes
    }

    #[test]
    fn reads_fortran_order() {
        // The 2x3 array [[1, 2, 3], [4, 5, 6]] stored column by column.
        let data: Vec<u8> = [1i32, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let bytes = npy_bytes(
            "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }",
            &data,
        );
        let t = decode(&bytes).expect("decode");
        assert_eq!(t, Tensor::I32(arr(&[2, 3], vec![1, 2, 3, 4, 5, 6])));
        assert!(matches!(&t, Tensor::I32(a) if a.is_standard_layout()));
    }

    #[test]
    fn reads_big_endian() {
        let data: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        let bytes = npy_bytes(
            "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",
            &data,
        );
        assert_eq!(
            decode(&bytes).expect("decode"),
            Tensor::F32(arr(&[2], vec![1.5, -2.0]))
        );
    }

    #[test]
    fn reads_v2_as_bf16() {
        let data: Vec<u8> = [bf16::from_f32(2.0)]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let bytes = npy_bytes(
            "{'descr': '<V2', 'fortran_order': False, 'shape': (1,), }",
            &data,
        );
        assert_eq!(
            decode(&bytes).expect("decode"),
            Tensor::BF16(arr(&[1], vec![bf16::from_f32(2.0)]))
        );
    }

    #[test]
    fn rejects_unsupported_dtypes() {
        let bytes = npy_bytes(
            "{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }",
            &[0, 0],
        );
        assert!(
            err_of(&bytes).contains("unsupported dtype '<u2' (uint16)"),
            "{}",
            err_of(&bytes)
        );
        let bytes = npy_bytes(
            "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }",
            &[0; 8],
        );
        assert!(err_of(&bytes).contains("complex64"), "{}", err_of(&bytes));
        let bytes = npy_bytes(
            "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }",
            &[0; 4],
        );
        assert!(err_of(&bytes).contains("structured"), "{}", err_of(&bytes));
    }

    #[test]
    fn rejects_corrupt_files() {
        assert!(err_of(b"").contains("magic"));
        assert!(err_of(b"hello, this is not numpy").contains("magic"));
        let good = npy_bytes(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
            &[0; 8],
        );
        assert!(decode(&good).is_ok());
        // Truncated data.
        assert!(err_of(&good[..good.len() - 1]).contains("truncated data"));
        // Truncated header.
        assert!(err_of(&good[..20]).contains("truncated header"));
        // Trailing garbage.
        let mut long = good.clone();
        long.push(0);
        assert!(err_of(&long).contains("unexpected bytes"));
        // Garbage header text.
        let bad = npy_bytes("{'descr': '<f4', 'fortran_order': Fals", &[]);
        assert!(
            err_of(&bad).contains("corrupt .npy header"),
            "{}",
            err_of(&bad)
        );
        // Overflowing shape.
        let huge = npy_bytes(
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
            &[],
        );
        assert!(err_of(&huge).contains("too large"), "{}", err_of(&huge));
        // Bool bytes other than 0 and 1.
        let b = npy_bytes(
            "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }",
            &[1, 7],
        );
        assert!(err_of(&b).contains("invalid bool"), "{}", err_of(&b));
        // Bad version.
        let mut v = good.clone();
        v[6] = 9;
        assert!(err_of(&v).contains("version 9"));
    }

    #[test]
    fn checks_the_expected_type() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.npy");
        write(&path, &Tensor::F32(arr(&[2, 16], vec![0.0; 32]))).expect("write");
        let ty = |elem, dims: &[Dim]| TensorType::new(elem, dims.to_vec());

        let ok = read_expecting(
            &path,
            &ty(ElemType::F32, &[Dim::sym("N"), Dim::Static(16)]),
            "input `x`",
        );
        assert_eq!(ok.expect("fits").shape(), &[2, 16]);

        let e = read_expecting(
            &path,
            &ty(ElemType::F64, &[Dim::sym("N"), Dim::Static(16)]),
            "input `x`",
        )
        .expect_err("dtype");
        let msg = format!("{e:#}");
        assert!(msg.contains("x.npy") && msg.contains("input `x`"), "{msg}");
        assert!(
            msg.contains("holds f32 (float32), expected f64 (float64)"),
            "{msg}"
        );

        let e = read_expecting(&path, &ty(ElemType::F32, &[Dim::Static(16)]), "input `x`")
            .expect_err("rank");
        assert!(
            format!("{e:#}").contains("rank 2), expected rank 1"),
            "{e:#}"
        );

        let e = read_expecting(
            &path,
            &ty(ElemType::F32, &[Dim::sym("N"), Dim::Static(8)]),
            "input `x`",
        )
        .expect_err("dim");
        assert!(format!("{e:#}").contains("axis 1 is 16, not 8"), "{e:#}");

        let e = read_expecting(
            &dir.path().join("nope.npy"),
            &ty(ElemType::F32, &[]),
            "input `x`",
        )
        .expect_err("missing");
        assert!(
            format!("{e:#}").contains("cannot read") && format!("{e:#}").contains("nope.npy"),
            "{e:#}"
        );
    }

    #[test]
    fn reads_files_written_by_numpy() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models");
        let x = read(&dir.join("mlp.input.npy")).expect("numpy input");
        assert_eq!((x.elem(), x.shape()), (ElemType::F32, &[4usize, 16][..]));
        let y = read(&dir.join("mlp.expected.npy")).expect("numpy output");
        assert_eq!(y.shape(), &[4, 10]);
        // Softmax rows sum to one.
        let v = y.to_f64_vec();
        for row in v.chunks(10) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        }
        // Re-encoding keeps the data bytes (the header text differs in spacing only).
        let mut buf = Vec::new();
        encode(&x, &mut buf).expect("encode");
        let numpy = fs::read(dir.join("mlp.input.npy")).expect("read");
        assert_eq!(buf.len(), numpy.len());
        assert_eq!(buf[buf.len() - 256..], numpy[numpy.len() - 256..]);
    }

    #[test]
    fn write_replaces_atomically_and_leaves_no_temp_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("y.npy");
        write(&path, &Tensor::I64(arr(&[1], vec![1]))).expect("write");
        write(&path, &Tensor::I64(arr(&[2], vec![2, 3]))).expect("overwrite");
        assert_eq!(
            read(&path).expect("read"),
            Tensor::I64(arr(&[2], vec![2, 3]))
        );
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("y.npy")]);
    }
}
