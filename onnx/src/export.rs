//! Writing a model back with new initializer values (`tessera train`'s `model.onnx`).
//!
//! The model is rewritten at the protobuf wire level: every field of the model and its graph
//! is copied byte for byte, except the initializers being replaced, which are written anew
//! (name, dims, data type, raw little-endian data). So whatever the model holds that the
//! importer does not read (metadata, doc strings, training info, other opsets) survives.

use std::collections::BTreeMap;

use tessera_ir::{ElemType, Tensor};

/// One field of a protobuf message: its number, wire type, and the bytes of the whole field
/// (tag included) and of its payload.
struct Field<'a> {
    number: u64,
    wire: u8,
    whole: &'a [u8],
    payload: &'a [u8],
}

fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or("truncated varint")?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes".into())
}

fn fields(buf: &[u8]) -> Result<Vec<Field<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let start = at;
        let tag = varint(buf, &mut at)?;
        let wire = (tag & 7) as u8;
        let pstart;
        match wire {
            0 => {
                pstart = at;
                varint(buf, &mut at)?;
            }
            1 => {
                pstart = at;
                at += 8;
            }
            2 => {
                let len = varint(buf, &mut at)?;
                pstart = at;
                at = at
                    .checked_add(usize::try_from(len).map_err(|_| "length too large")?)
                    .ok_or("length too large")?;
            }
            5 => {
                pstart = at;
                at += 4;
            }
            w => return Err(format!("unsupported wire type {w}")),
        }
        if at > buf.len() {
            return Err("truncated field".into());
        }
        out.push(Field {
            number: tag >> 3,
            wire,
            whole: &buf[start..at],
            payload: &buf[pstart..at],
        });
    }
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, number: u64, bytes: &[u8]) {
    put_varint(out, (number << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn data_type(e: ElemType) -> u64 {
    match e {
        ElemType::F32 => 1,
        ElemType::U8 => 2,
        ElemType::I8 => 3,
        ElemType::I16 => 5,
        ElemType::I32 => 6,
        ElemType::I64 => 7,
        ElemType::Bool => 9,
        ElemType::F16 => 10,
        ElemType::F64 => 11,
        ElemType::BF16 => 16,
    }
}

fn tensor_proto(name: &str, t: &Tensor) -> Vec<u8> {
    let mut out = Vec::new();
    for &d in t.shape() {
        put_varint(&mut out, 1 << 3);
        put_varint(&mut out, d as u64);
    }
    put_varint(&mut out, 2 << 3);
    put_varint(&mut out, data_type(t.elem()));
    put_bytes(&mut out, 8, name.as_bytes());
    put_bytes(&mut out, 9, &t.to_le_bytes());
    out
}

/// The name (field 8) of a serialized `TensorProto`.
fn tensor_name(payload: &[u8]) -> Result<Option<&str>, String> {
    for f in fields(payload)? {
        if f.number == 8 && f.wire == 2 {
            return std::str::from_utf8(f.payload)
                .map(Some)
                .map_err(|_| "an initializer name is not UTF-8".to_string());
        }
    }
    Ok(None)
}

/// Where each initializer of the main graph of `model` (serialized `ModelProto`) keeps its
/// `raw_data`: byte offset in `model` and length, by name. Initializers that hold their values
/// otherwise (`float_data`, ...) are not listed; [`replace_initializers`] writes `raw_data`, so
/// an MPI program can write a trained model by patching the bytes of its output in place.
pub fn initializer_data_offsets(model: &[u8]) -> Result<BTreeMap<String, (usize, usize)>, String> {
    let base = model.as_ptr() as usize;
    let mut out = BTreeMap::new();
    for f in fields(model)? {
        if f.number != 7 || f.wire != 2 {
            continue;
        }
        for g in fields(f.payload)? {
            if g.number != 5 || g.wire != 2 {
                continue;
            }
            let Some(name) = tensor_name(g.payload)? else {
                continue;
            };
            for t in fields(g.payload)? {
                if t.number == 9 && t.wire == 2 {
                    let at = t.payload.as_ptr() as usize - base;
                    out.insert(name.to_string(), (at, t.payload.len()));
                }
            }
        }
    }
    Ok(out)
}

/// The model `model` (serialized `ModelProto`) with the initializers named in `values`
/// replaced by those values. Every name must be an initializer of the main graph.
pub fn replace_initializers(
    model: &[u8],
    values: &BTreeMap<String, Tensor>,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(model.len());
    let mut replaced: BTreeMap<&str, bool> = values.keys().map(|k| (k.as_str(), false)).collect();
    let mut saw_graph = false;
    for f in fields(model)? {
        if f.number != 7 || f.wire != 2 {
            out.extend_from_slice(f.whole);
            continue;
        }
        saw_graph = true;
        let mut graph = Vec::with_capacity(f.payload.len());
        for g in fields(f.payload)? {
            if g.number == 5
                && g.wire == 2
                && let Some(name) = tensor_name(g.payload)?
                && let Some(t) = values.get(name)
            {
                put_bytes(&mut graph, 5, &tensor_proto(name, t));
                replaced.insert(name, true);
                continue;
            }
            graph.extend_from_slice(g.whole);
        }
        put_bytes(&mut out, 7, &graph);
    }
    if !saw_graph {
        return Err("the model has no graph".into());
    }
    let missing: Vec<&str> = replaced
        .iter()
        .filter(|(_, done)| !**done)
        .map(|(n, _)| *n)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the model has no initializer named {}",
            missing.join(", ")
        ));
    }
    Ok(out)
}
