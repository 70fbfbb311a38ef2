//! NumPy `.npy` files as [`Tensor`]s: the input and output format of `tessera run`.
//!
//! The header is parsed and written by the `npyz` crate; the data is decoded here, straight
//! from the bytes after the header.
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
use npyz::{DType, Endianness, NpyHeader, Order, TypeChar, TypeStr, WriterBuilder};
use tessera_ir::{Dim, ElemType, Tensor, TensorType};

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
pub fn write(path: &Path, tensor: &Tensor) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".tessera-")
        .suffix(".npy.tmp")
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        encode(tensor, &mut w).with_context(|| format!("cannot write {}", path.display()))?;
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    tmp.as_file()
        .sync_all()
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| anyhow!(e.error))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Encodes a tensor as `.npy` bytes (little-endian, C order).
pub fn encode(tensor: &Tensor, w: &mut impl Write) -> Result<()> {
    let descr = match tensor.elem() {
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
    };
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
    let header_len = preflight(bytes)?;
    let mut cursor = std::io::Cursor::new(bytes);
    let npy =
        NpyHeader::from_reader(&mut cursor).map_err(|e| anyhow!("corrupt .npy header: {e}"))?;
    let pos = usize::try_from(cursor.position()).map_err(|_| anyhow!("header too large"))?;
    debug_assert_eq!(pos, header_len);
    let data = &bytes[pos.min(bytes.len())..];

    let dtype = npy.dtype();
    let DType::Plain(ts) = &dtype else {
        bail!(
            "unsupported dtype {}: structured and sub-array dtypes have no tessera element type",
            dtype.descr()
        );
    };
    let elem = elem_of(ts)?;
    let shape = npy
        .shape()
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| anyhow!("dimension {d} is too large")))
        .collect::<Result<Vec<usize>>>()?;
    let header = Header {
        elem,
        shape,
        fortran_order: npy.order() == Order::Fortran,
        big_endian: ts.endianness() == Endianness::Big,
    };
    Ok((header, data))
}

/// Checks the magic string, the header length and the element count before `npyz` sees the
/// header, so that a corrupt header cannot make it allocate or multiply its way into trouble.
/// Returns the length of the whole header (where the data starts).
fn preflight(bytes: &[u8]) -> Result<usize> {
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
    // The element count must fit: npyz multiplies the extents without checking.
    let text = String::from_utf8_lossy(&bytes[start..end]);
    if let Some(dims) = shape_in_header_text(&text) {
        let mut n: u64 = 1;
        for d in dims {
            n = n
                .checked_mul(d)
                .ok_or_else(|| anyhow!("corrupt .npy header: the shape overflows"))?;
        }
    }
    Ok(end)
}

/// The extents of the `'shape': (...)` entry of a header dict, when it can be found.
fn shape_in_header_text(text: &str) -> Option<Vec<u64>> {
    let at = text.find("'shape'")?;
    let rest = &text[at + "'shape'".len()..];
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    let mut dims = Vec::new();
    for part in rest[open + 1..close].split(',') {
        let p = part.trim().trim_end_matches(['L', 'l']);
        if p.is_empty() {
            continue;
        }
        dims.push(p.parse::<u64>().ok()?);
    }
    Some(dims)
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
        assert!(err_of(&huge).contains("overflows"), "{}", err_of(&huge));
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
