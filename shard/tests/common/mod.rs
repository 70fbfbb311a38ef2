//! Helpers shared by the shard tests: graphs with external constants filled with
//! deterministic data, random inputs, and running the pass.

#![allow(dead_code)] // each test binary uses a subset

use std::fmt::Write;

use tessera_ir::text::{self, Sidecar};
use tessera_ir::{Bytes, ElemType, Graph, Tensor};
use tessera_passes::Statistics;
use tessera_targets::Target;

/// A xorshift generator of values in [-0.5, 0.5).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    }
}

/// Parses IR text whose `external` f32 constants get deterministic pseudo-random data (an
/// in-memory safetensors sidecar).
pub fn parse_with_data(src: &str) -> Result<Graph, String> {
    let mut header = String::from("{");
    let mut data: Vec<u8> = Vec::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for line in src.lines() {
        let t = line.trim();
        let Some(rest) = t.strip_prefix("const @") else {
            continue;
        };
        if !t.ends_with("= external") {
            continue;
        }
        let (name, ty) = rest.split_once(" : ").ok_or("bad const line")?;
        let ty = ty.trim_end_matches("= external").trim();
        let dims: Vec<u64> = ty
            .strip_prefix("f32[")
            .and_then(|d| d.strip_suffix(']'))
            .ok_or("only f32 external constants")?
            .split(',')
            .map(|d| d.trim().parse::<u64>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let n: u64 = dims.iter().product();
        let start = data.len();
        for _ in 0..n {
            data.extend(rng.next().to_le_bytes());
        }
        if header.len() > 1 {
            header.push(',');
        }
        let shape: Vec<String> = dims.iter().map(u64::to_string).collect();
        let _ = write!(
            header,
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{start},{}]}}",
            shape.join(","),
            data.len()
        );
    }
    header.push('}');
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut blob = (header.len() as u64).to_le_bytes().to_vec();
    blob.extend(header.as_bytes());
    blob.extend(data);
    let sidecar = Sidecar::from_bytes(Bytes::from(blob), "test data")?;
    text::parse(src, Some(&sidecar)).map_err(|e| e.to_string())
}

/// Pseudo-random inputs for every graph input (f32 only; symbols are not allowed).
pub fn random_inputs(g: &Graph, seed: u64) -> Vec<Tensor> {
    let mut rng = Rng(seed | 1);
    g.inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            assert_eq!(ty.elem, ElemType::F32, "test inputs are f32");
            let dims: Vec<usize> = ty
                .static_dims()
                .expect("static input")
                .iter()
                .map(|&d| d as usize)
                .collect();
            let n: usize = dims.iter().product();
            let vals: Vec<f32> = (0..n).map(|_| rng.next()).collect();
            Tensor::F32(
                ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&dims), vals).expect("shape"),
            )
        })
        .collect()
}

/// Runs the shard pass on `g` for `target` with a mesh shape (empty: the default) and a
/// strategy.
pub fn shard(
    g: &mut Graph,
    target: &dyn Target,
    mesh: &[u32],
    strategy: tessera_shard::Strategy,
) -> (bool, Statistics) {
    let mut stats = Statistics::default();
    let settings = tessera_shard::Settings {
        target: String::new(),
        mesh: mesh.to_vec(),
        strategy,
    };
    let changed = tessera_shard::run_shard(g, target, &settings, &mut stats)
        .unwrap_or_else(|e| panic!("shard: {e}"));
    (changed, stats)
}

/// Bit-identical tensors.
pub fn same_bits(a: &[Tensor], b: &[Tensor]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| match (x, y) {
            (Tensor::F32(x), Tensor::F32(y)) => {
                x.shape() == y.shape() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
            }
            _ => x == y,
        })
}
