//! Reading model files: memory-mapped protobuf decoding and tensor data (raw, typed fields,
//! external files), without copying raw weight bytes.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use prost::Message;
use tessera_ir::{ElemType, TensorType};

use crate::proto::{ModelProto, TensorProto, tensor_proto};

/// Memory-maps a file as shared bytes (empty files give empty bytes). Anything but a regular
/// file (a directory, a FIFO, a device) is refused before it is opened: opening a FIFO blocks
/// until a writer comes.
#[allow(unsafe_code)]
pub(crate) fn map_file(path: &Path) -> std::io::Result<Bytes> {
    let kind = std::fs::metadata(path)?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file (it is {})", file_kind(kind)),
        ));
    }
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        // Replaced between the check and the open.
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("not a regular file (it is {})", file_kind(meta.file_type())),
        ));
    }
    if meta.len() == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the map is read-only and private to this process. As with every tool that maps
    // model files, a concurrent truncation of the file by another process is outside what we
    // guard against.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    Ok(Bytes::from_owner(map))
}

/// What a file that is not a regular file is, for messages.
fn file_kind(kind: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

/// Decodes a model; `bytes` fields of the result are slices of `data`.
pub(crate) fn decode_model(data: Bytes) -> Result<ModelProto, String> {
    ModelProto::decode(data).map_err(|e| format!("protobuf decoding failed: {e}"))
}

/// The IR element type of an ONNX `TensorProto.DataType` code.
pub(crate) fn elem_type(code: i32) -> Result<ElemType, String> {
    use tensor_proto::DataType as D;
    let dt = D::try_from(code).map_err(|_| format!("unknown element type code {code}"))?;
    Ok(match dt {
        D::Float => ElemType::F32,
        D::Double => ElemType::F64,
        D::Float16 => ElemType::F16,
        D::Bfloat16 => ElemType::BF16,
        D::Int8 => ElemType::I8,
        D::Int16 => ElemType::I16,
        D::Int32 => ElemType::I32,
        D::Int64 => ElemType::I64,
        D::Uint8 => ElemType::U8,
        D::Bool => ElemType::Bool,
        other => {
            return Err(format!(
                "element type {} is not supported",
                elem_type_name(other as i32)
            ));
        }
    })
}

/// The ONNX spelling of an element type code, for messages.
pub(crate) fn elem_type_name(code: i32) -> String {
    tensor_proto::DataType::try_from(code)
        .map(|d| d.as_str_name().to_ascii_lowercase())
        .unwrap_or_else(|_| format!("code {code}"))
}

/// Resolves tensors' external data files relative to the model's folder, mapping each file
/// once.
///
/// A location must be a relative path without `..` whose real path (symbolic links resolved)
/// lies inside the model's real folder and is a regular file, all checked before the file is
/// opened: a link to `/etc/passwd` or a linked folder pointing elsewhere would otherwise turn
/// another file's bytes into weights, and opening a FIFO blocks forever.
#[derive(Default)]
pub(crate) struct ExternalFiles {
    base: Option<PathBuf>,
    /// The model folder's real path, resolved at the first external tensor.
    real_base: Option<PathBuf>,
    /// The mapped files, by real path.
    maps: BTreeMap<PathBuf, Bytes>,
}

impl ExternalFiles {
    pub(crate) fn new(base: Option<PathBuf>) -> Self {
        ExternalFiles {
            base,
            real_base: None,
            maps: BTreeMap::new(),
        }
    }

    /// The real path of an external data file, checked to be a regular file inside the
    /// model's folder.
    fn resolve(&mut self, location: &str) -> Result<PathBuf, String> {
        let rel = Path::new(location);
        if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(format!(
                "external data location `{location}` must be a relative path inside the model's folder"
            ));
        }
        let Some(base) = &self.base else {
            return Err(format!(
                "external data `{location}` cannot be resolved: the model was not read from a file"
            ));
        };
        let path = base.join(rel);
        let real_base = match &self.real_base {
            Some(b) => b.clone(),
            None => {
                let b = std::fs::canonicalize(base).map_err(|e| {
                    format!(
                        "external data file {}: the model's folder {}: {e}",
                        path.display(),
                        base.display()
                    )
                })?;
                self.real_base = Some(b.clone());
                b
            }
        };
        let real = std::fs::canonicalize(&path)
            .map_err(|e| format!("external data file {}: {e}", path.display()))?;
        if !real.starts_with(&real_base) {
            return Err(format!(
                "external data file {} resolves to {}, outside the model's folder {}",
                path.display(),
                real.display(),
                real_base.display()
            ));
        }
        let kind = std::fs::metadata(&real)
            .map_err(|e| format!("external data file {}: {e}", path.display()))?
            .file_type();
        if !kind.is_file() {
            return Err(format!(
                "external data file {} is {}, not a regular file",
                path.display(),
                file_kind(kind)
            ));
        }
        Ok(real)
    }

    fn slice(&mut self, location: &str, offset: u64, length: Option<u64>) -> Result<Bytes, String> {
        let real = self.resolve(location)?;
        if !self.maps.contains_key(&real) {
            let data = map_file(&real)
                .map_err(|e| format!("external data file {}: {e}", real.display()))?;
            self.maps.insert(real.clone(), data);
        }
        let path = &real;
        let data = &self.maps[&real];
        let len = data.len() as u64;
        let end = match length {
            Some(l) => offset.checked_add(l),
            None => Some(len),
        };
        match end {
            Some(end) if offset <= end && end <= len => {
                Ok(data.slice(offset as usize..end as usize))
            }
            _ => Err(format!(
                "external data range offset {offset}, length {} exceeds the {len} bytes of {}",
                length.map_or("(rest)".to_string(), |l| l.to_string()),
                path.display()
            )),
        }
    }
}

/// The type and little-endian bytes of a tensor. Raw and external data are shared, not copied;
/// typed fields are converted.
pub(crate) fn tensor_data(
    t: &TensorProto,
    ext: &mut ExternalFiles,
) -> Result<(TensorType, Bytes), String> {
    let elem = elem_type(t.data_type())?;
    if t.dims.len() > crate::MAX_RANK {
        return Err(format!(
            "rank {} is more than the limit of {}",
            t.dims.len(),
            crate::MAX_RANK
        ));
    }
    let mut dims = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        dims.push(
            u64::try_from(d)
                .map_err(|_| format!("negative extent {d} in tensor dims {:?}", t.dims))?,
        );
    }
    let ty = TensorType::fixed(elem, &dims);
    let size = ty
        .size_bytes()
        .ok_or_else(|| format!("tensor of type {ty} is too large"))?;
    let n = ty.num_elements().unwrap_or(0) as usize;
    let data: Bytes = if t.data_location() == tensor_proto::DataLocation::External {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for kv in &t.external_data {
            let v = kv.value();
            let num = || {
                v.parse::<u64>()
                    .map_err(|_| format!("external data {}: `{v}` is not a number", kv.key()))
            };
            match kv.key() {
                "location" => location = Some(v.to_string()),
                "offset" => offset = num()?,
                "length" => length = Some(num()?),
                _ => {}
            }
        }
        let location = location.ok_or("external data without a location")?;
        ext.slice(&location, offset, length.or(Some(size)))?
    } else if let Some(raw) = &t.raw_data {
        raw.clone()
    } else {
        typed_data(t, elem, n)?
    };
    if data.len() as u64 != size {
        return Err(format!(
            "tensor of type {ty} needs {size} bytes of data, has {}",
            data.len()
        ));
    }
    Ok((ty, data))
}

/// Converts the typed repeated fields (`float_data`, `int32_data`, ...) to little-endian bytes.
fn typed_data(t: &TensorProto, elem: ElemType, n: usize) -> Result<Bytes, String> {
    fn check<T>(v: &[T], n: usize, field: &str) -> Result<(), String> {
        if v.len() != n {
            return Err(format!("{field} holds {} values for {n} elements", v.len()));
        }
        Ok(())
    }
    // No capacity from `n`: it comes from the file's dims, which may claim any size; the
    // checks below bound it by the values actually present.
    let mut out: Vec<u8> = Vec::new();
    match elem {
        ElemType::F32 => {
            check(&t.float_data, n, "float_data")?;
            t.float_data
                .iter()
                .for_each(|x| out.extend(x.to_le_bytes()));
        }
        ElemType::F64 => {
            check(&t.double_data, n, "double_data")?;
            t.double_data
                .iter()
                .for_each(|x| out.extend(x.to_le_bytes()));
        }
        ElemType::I64 => {
            check(&t.int64_data, n, "int64_data")?;
            t.int64_data
                .iter()
                .for_each(|x| out.extend(x.to_le_bytes()));
        }
        // Narrow types are stored one per int32 (f16 and bf16 as their bit patterns).
        ElemType::I32
        | ElemType::I16
        | ElemType::I8
        | ElemType::U8
        | ElemType::Bool
        | ElemType::F16
        | ElemType::BF16 => {
            check(&t.int32_data, n, "int32_data")?;
            let w = elem.size_bytes();
            for &x in &t.int32_data {
                let x = if elem == ElemType::Bool {
                    i32::from(x != 0)
                } else {
                    x
                };
                out.extend(&x.to_le_bytes()[..w]);
            }
        }
    }
    Ok(Bytes::from(out))
}

/// Decodes a serialized `TensorProto` (the `.pb` files of the ONNX test suite) into a tensor.
pub fn decode_tensor(data: Bytes) -> Result<tessera_ir::Tensor, String> {
    let t = TensorProto::decode(data).map_err(|e| format!("protobuf decoding failed: {e}"))?;
    let (ty, bytes) = tensor_data(&t, &mut ExternalFiles::new(None))?;
    tessera_ir::Tensor::from_typed_le_bytes(&ty, &bytes).map_err(|e| e.to_string())
}
