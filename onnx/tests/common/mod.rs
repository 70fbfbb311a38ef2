//! Shared helpers of the importer's integration tests.

#![allow(dead_code)]

pub mod node_suite;
pub mod proto;

use std::path::{Path, PathBuf};

use tessera_ir::{ElemType, Tensor};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the onnx crate is in the repository root")
        .to_path_buf()
}

/// Reads a little-endian, C-order `.npy` file of a numeric or bool dtype (what the test
/// corpus holds; the CLI's reader handles the rest).
pub fn read_npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x93NUMPY"),
        "{}: not .npy",
        path.display()
    );
    let (len, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        _ => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
    };
    let header = std::str::from_utf8(&bytes[start..start + len]).expect("ascii header");
    let field = |key: &str| {
        let at = header
            .find(key)
            .unwrap_or_else(|| panic!("no {key} in {header}"));
        &header[at + key.len()..]
    };
    let descr = field("'descr':").trim_start();
    let descr = &descr[1..descr[1..].find('\'').expect("quoted") + 1];
    assert!(
        field("'fortran_order':").trim_start().starts_with("False"),
        "{}: Fortran order",
        path.display()
    );
    let shape_text = field("'shape':");
    let shape_text =
        &shape_text[shape_text.find('(').expect("(") + 1..shape_text.find(')').expect(")")];
    let shape: Vec<usize> = shape_text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("extent"))
        .collect();
    let elem = match descr {
        "<f4" => ElemType::F32,
        "<f8" => ElemType::F64,
        "<f2" => ElemType::F16,
        "<i8" => ElemType::I64,
        "<i4" => ElemType::I32,
        "<i2" => ElemType::I16,
        "|i1" => ElemType::I8,
        "|u1" => ElemType::U8,
        "|b1" => ElemType::Bool,
        other => panic!("{}: dtype {other} not handled", path.display()),
    };
    Tensor::from_le_bytes(elem, &shape, &bytes[start + len..])
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Relative and absolute tolerance for comparing element type `elem`: `None` means exact.
pub fn default_tolerance(elem: ElemType) -> Option<(f64, f64)> {
    match elem {
        ElemType::F32 | ElemType::F64 => Some((1e-3, 1e-5)),
        ElemType::F16 => Some((1e-2, 1e-3)),
        ElemType::BF16 => Some((2e-2, 1e-2)),
        _ => None,
    }
}

/// Compares a result to a reference: same element type and shape, then elementwise
/// `|got - want| <= atol + rtol * |want|` for floats (NaN matches NaN, infinities must be
/// equal), exact equality for integers and bools (`tol` is ignored for them).
pub fn compare(got: &Tensor, want: &Tensor, tol: Option<(f64, f64)>) -> Result<(), String> {
    if got.elem() != want.elem() {
        return Err(format!(
            "element type {}, expected {}",
            got.elem(),
            want.elem()
        ));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let tol = if got.elem().is_float() { tol } else { None };
    let Some((rtol, atol)) = tol else {
        if got == want {
            return Ok(());
        }
        let g = got.to_f64_vec();
        let w = want.to_f64_vec();
        let bad: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
        let i = bad.first().copied().unwrap_or(0);
        return Err(format!(
            "{} of {} elements differ; first at flat index {i}: got {}, expected {}",
            bad.len().max(1),
            g.len(),
            g.get(i).copied().unwrap_or(f64::NAN),
            w.get(i).copied().unwrap_or(f64::NAN)
        ));
    };
    let g = got.to_f64_vec();
    let w = want.to_f64_vec();
    let mut bad = 0usize;
    let mut first = None;
    let mut worst = 0.0f64;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            let d = (a - b).abs();
            worst = worst.max(d);
            d <= atol + rtol * b.abs()
        };
        if !ok {
            bad += 1;
            first.get_or_insert(i);
        }
    }
    match first {
        None => Ok(()),
        Some(i) => Err(format!(
            "{bad} of {} elements differ beyond rtol {rtol:e}, atol {atol:e} (max abs diff {worst:e}); first at flat index {i}: got {}, expected {}",
            g.len(),
            g[i],
            w[i]
        )),
    }
}
