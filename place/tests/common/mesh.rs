//! A synthetic layered DAG on a rows x cols mesh of chiplets, shared by the strategies test
//! and the `auto_mesh` example (which times it in release mode).

use std::collections::BTreeMap;

use tessera_place::problem::{Device, Edge, Link, OpSpec, Problem, VERSION};

/// A splitmix64 step (deterministic pseudo-random numbers).
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` ops in layers of 50, each op (after the first layer) reading two ops of the previous
/// layers (about 2 edges per op), on a `rows` x `cols` mesh of identical chiplets with links
/// between grid neighbours. Memory is loose enough for a balanced plan.
pub fn layered_mesh(n: usize, rows: usize, cols: usize, seed: u64) -> Problem {
    let mut s = seed;
    let d = rows * cols;
    let width = 50;
    let mut ops = Vec::with_capacity(n);
    let mut edges = Vec::with_capacity(2 * n);
    let mut out_bytes: Vec<u64> = Vec::with_capacity(n);
    let mut total_mem = 0u64;
    for o in 0..n {
        let t = 1e-6 * (1 + splitmix(&mut s) % 100) as f64;
        let memory = 1_000 + splitmix(&mut s) % 100_000;
        total_mem += memory;
        // One output tensor per op, whatever its consumers.
        out_bytes.push(1_000 + splitmix(&mut s) % 50_000);
        ops.push(OpSpec {
            name: format!("op{o}"),
            kind: "matmul".into(),
            time: BTreeMap::from([("chiplet".to_string(), t)]),
            memory,
            colocate: None,
            pin: None,
            spmd: Vec::new(),
            splits: Vec::new(),
        });
        if o >= width {
            let layer_start = o / width * width;
            let lo = layer_start.saturating_sub(2 * width);
            for _ in 0..2 {
                let from = lo + (splitmix(&mut s) as usize) % (layer_start - lo);
                if edges
                    .last()
                    .is_some_and(|e: &Edge| e.from == from && e.to == o)
                {
                    continue;
                }
                edges.push(Edge {
                    from,
                    to: o,
                    bytes: out_bytes[from],
                    tensor: 0,
                    operand: 0,
                });
            }
        }
    }
    let devices = (0..d)
        .map(|k| Device {
            name: format!("c{}_{}", k / cols, k % cols),
            kind: "chiplet".into(),
            memory: total_mem / d as u64 * 4 + 10_000_000,
            unsupported_ops: Vec::new(),
            overlap: true,
        })
        .collect::<Vec<_>>();
    let mut links = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            let here = format!("c{r}_{c}");
            if c + 1 < cols {
                links.push(Link {
                    a: here.clone(),
                    b: format!("c{r}_{}", c + 1),
                    bandwidth: 1e11,
                    latency: 1e-7,
                });
            }
            if r + 1 < rows {
                links.push(Link {
                    a: here.clone(),
                    b: format!("c{}_{c}", r + 1),
                    bandwidth: 1e11,
                    latency: 1e-7,
                });
            }
        }
    }
    Problem {
        version: VERSION,
        name: format!("layered-{n} on mesh-{rows}x{cols}"),
        devices,
        routers: Vec::new(),
        links,
        ops,
        edges,
        groups: Vec::new(),
        carried: Vec::new(),
    }
}
