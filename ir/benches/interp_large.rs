//! Runs the reference interpreter on a model with about 100 million parameters and reports
//! wall time and peak resident memory (the README's benchmark table comes from here).
//!
//! `cargo bench -p tessera-ir --bench interp_large`

use std::time::Instant;

use tessera_ir::{
    BinaryOp, Bytes, Constant, Dim, ElemType, Graph, Op, Tensor, TensorType, UnaryOp,
};

/// Peak resident set size of this process in MiB (Linux `VmHWM`).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// `layers` dense layers of width `width` with bias and relu, batch `N`.
fn mlp(layers: usize, width: u64) -> (Graph, u64) {
    let mut g = Graph::new("mlp");
    let act = || TensorType::new(ElemType::F32, vec![Dim::sym("N"), Dim::Static(width)]);
    let mut x = g.add_input(Some("x".into()), act());
    let mut params = 0;
    for l in 0..layers {
        // Deterministic small weights so activations stay finite.
        let n = (width * width) as usize;
        let w: Vec<u8> = (0..n)
            .flat_map(|i| ((((i * 7919 + l * 104729) % 2001) as f32 - 1000.0) * 1e-6).to_le_bytes())
            .collect();
        let b: Vec<u8> = (0..width)
            .flat_map(|i| (i as f32 * 1e-3).to_le_bytes())
            .collect();
        params += width * width + width;
        let wc = g.add_const(Constant {
            name: format!("l{l}.w"),
            ty: TensorType::fixed(ElemType::F32, &[width, width]),
            data: Bytes::from(w),
        });
        let bc = g.add_const(Constant {
            name: format!("l{l}.b"),
            ty: TensorType::fixed(ElemType::F32, &[width]),
            data: Bytes::from(b),
        });
        let wv = g.push_op(
            Op::Const(wc),
            vec![],
            vec![TensorType::fixed(ElemType::F32, &[width, width])],
        );
        let bv = g.push_op(
            Op::Const(bc),
            vec![],
            vec![TensorType::fixed(ElemType::F32, &[width])],
        );
        let (wv, bv) = (g.op(wv).results[0], g.op(bv).results[0]);
        let mm = g.push_op(Op::MatMul, vec![x, wv], vec![act()]);
        let mm = g.op(mm).results[0];
        let add = g.push_op(Op::Binary(BinaryOp::Add), vec![mm, bv], vec![act()]);
        let add = g.op(add).results[0];
        let relu = g.push_op(Op::Unary(UnaryOp::Relu), vec![add], vec![act()]);
        x = g.op(relu).results[0];
    }
    g.set_outputs(vec![x]);
    (g, params)
}

fn main() {
    println!("| case | parameters | weights (MiB) | batch | run time (s) | peak RSS (MiB) |");
    println!("|---|---|---|---|---|---|");
    for (layers, width, batch) in [(4usize, 1024u64, 64usize), (8, 3584, 8)] {
        let (g, params) = mlp(layers, width);
        tessera_ir::verify::verify(&g).expect("benchmark graph verifies");
        let input = Tensor::F32(ndarray::ArrayD::from_elem(
            ndarray::IxDyn(&[batch, width as usize]),
            0.5,
        ));
        let t = Instant::now();
        let out = tessera_ir::interp::run(&g, &[input]).expect("interpreter runs");
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(out[0].shape(), &[batch, width as usize]);
        println!(
            "| mlp {layers}x{width} | {:.1}M | {:.0} | {batch} | {secs:.2} | {:.0} |",
            params as f64 / 1e6,
            (params * 4) as f64 / (1024.0 * 1024.0),
            peak_rss_mib()
        );
    }
}
