//! The weights file: the large constants of a compiled program, as safetensors, named by
//! their IR constant names.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use tessera_ir::{ElemType, Tensor};

use crate::Error;

fn elem(d: Dtype) -> Option<ElemType> {
    Some(match d {
        Dtype::F16 => ElemType::F16,
        Dtype::BF16 => ElemType::BF16,
        Dtype::F32 => ElemType::F32,
        Dtype::F64 => ElemType::F64,
        Dtype::I8 => ElemType::I8,
        Dtype::I16 => ElemType::I16,
        Dtype::I32 => ElemType::I32,
        Dtype::I64 => ElemType::I64,
        Dtype::U8 => ElemType::U8,
        Dtype::BOOL => ElemType::Bool,
        _ => return None,
    })
}

/// Serializes named constants (name, type, little-endian bytes) as safetensors bytes; the
/// map's order makes the file deterministic.
pub fn serialize(
    weights: &BTreeMap<String, (tessera_ir::TensorType, tessera_ir::Bytes)>,
) -> Result<Vec<u8>, Error> {
    safetensors::serialize(views(weights)?, None).map_err(|e| Error::Run {
        message: format!("writing weights: {e}"),
    })
}

/// Writes [`serialize`]'s file to `path` without holding it in memory
/// ([`tessera_ir::text::write_safetensors`]: streamed, synced, renamed over `path`).
/// GPT-2 small's weights are 0.5 GB.
pub fn write(
    weights: &BTreeMap<String, (tessera_ir::TensorType, tessera_ir::Bytes)>,
    path: &Path,
) -> Result<(), Error> {
    tessera_ir::text::write_safetensors(path, views(weights)?).map_err(|e| Error::Run {
        message: format!("{}: {e}", path.display()),
    })
}

/// The safetensors views of named constants, in the map's order.
fn views(
    weights: &BTreeMap<String, (tessera_ir::TensorType, tessera_ir::Bytes)>,
) -> Result<Vec<(String, safetensors::tensor::TensorView<'_>)>, Error> {
    let mut views = Vec::new();
    for (name, (ty, data)) in weights {
        let shape: Vec<usize> = ty
            .static_dims()
            .unwrap_or_default()
            .into_iter()
            .map(|d| d as usize)
            .collect();
        let v =
            safetensors::tensor::TensorView::new(tessera_ir::text::dtype_of(ty.elem), shape, data)
                .map_err(|e| Error::Run {
                    message: format!("weight {name}: {e}"),
                })?;
        views.push((name.clone(), v));
    }
    Ok(views)
}

/// Reads a weights file.
pub fn read(path: &Path) -> Result<BTreeMap<String, Tensor>, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::Run {
        message: format!("{}: {e}", path.display()),
    })?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| Error::Run {
        message: format!("{}: {e}", path.display()),
    })?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let e = elem(view.dtype()).ok_or_else(|| Error::Run {
            message: format!(
                "{}: tensor {name} has unsupported type {:?}",
                path.display(),
                view.dtype()
            ),
        })?;
        let t = Tensor::from_le_bytes(e, view.shape(), view.data()).map_err(|err| Error::Run {
            message: format!("{}: tensor {name}: {err}", path.display()),
        })?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Maps a weights file and gives each tensor as a buffer of the mapped bytes (no copy, save
/// a tensor at an offset its element type does not divide).
pub fn map(path: &Path) -> Result<BTreeMap<String, crate::jit::Buffer>, Error> {
    let bad = |m: String| Error::Run {
        message: format!("{}: {m}", path.display()),
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let map = crate::jit::map_file(&file).map_err(|e| bad(e.to_string()))?;
    let st = SafeTensors::deserialize(&map).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (name, view) in st.tensors() {
        let e = elem(view.dtype()).ok_or_else(|| {
            bad(format!(
                "tensor {name} has unsupported type {:?}",
                view.dtype()
            ))
        })?;
        let dims: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        let ty = tessera_ir::TensorType::fixed(e, &dims);
        let want = dims.iter().product::<u64>() as usize * crate::jit::elem_bytes(e);
        if view.data().len() != want {
            return Err(bad(format!(
                "tensor {name} holds {} bytes, its type {ty} {want}",
                view.data().len()
            )));
        }
        let b = if e == ElemType::Bool {
            // A bool is one byte, 0 or 1, as the code reads it: any other byte is true.
            let t = Tensor::from_le_bytes(e, view.shape(), view.data())
                .map_err(|err| bad(format!("tensor {name}: {err}")))?;
            crate::jit::Buffer::from_tensor(&t)
        } else {
            let offset = view.data().as_ptr() as usize - map.as_ptr() as usize;
            crate::jit::Buffer::mapped(&map, offset, want, ty)
                .ok_or_else(|| bad(format!("tensor {name} lies outside the file")))?
        };
        out.insert(name, b);
    }
    Ok(out)
}
