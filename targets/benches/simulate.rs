//! Speed of the cost model and the simulator on a synthetic 100,000-op graph (the README's
//! table comes from here). Placement search calls them many times, so one simulation must
//! take far less than a second.
//!
//! `cargo bench -p tessera-targets --bench simulate`

use std::time::{Duration, Instant};

use tessera_ir::{BinaryOp, Bytes, Constant, ElemType, Graph, Op, TensorType, UnaryOp};
use tessera_targets::{CostModel, SimOptions, lookup, simulate};

/// `blocks` residual blocks of matmul, bias add, relu and a skip add (4 ops each) on a
/// [64, 256] f32 activation, sharing one weight and one bias constant.
fn synthetic(blocks: usize) -> Graph {
    let mut g = Graph::new("synthetic");
    let act = TensorType::fixed(ElemType::F32, &[64, 256]);
    let mut x = g.add_input(Some("x".into()), act.clone());
    let wty = TensorType::fixed(ElemType::F32, &[256, 256]);
    let bty = TensorType::fixed(ElemType::F32, &[256]);
    let w = g.add_const(Constant {
        name: "w".into(),
        ty: wty.clone(),
        data: Bytes::from(vec![0u8; 256 * 256 * 4]),
    });
    let b = g.add_const(Constant {
        name: "b".into(),
        ty: bty.clone(),
        data: Bytes::from(vec![0u8; 256 * 4]),
    });
    let wv = g.push_op(Op::Const(w), vec![], vec![wty]);
    let bv = g.push_op(Op::Const(b), vec![], vec![bty]);
    let (wv, bv) = (g.op(wv).results[0], g.op(bv).results[0]);
    for _ in 0..blocks {
        let mm = g.push_op(Op::MatMul, vec![x, wv], vec![act.clone()]);
        let mm = g.op(mm).results[0];
        let add = g.push_op(Op::Binary(BinaryOp::Add), vec![mm, bv], vec![act.clone()]);
        let add = g.op(add).results[0];
        let relu = g.push_op(Op::Unary(UnaryOp::Relu), vec![add], vec![act.clone()]);
        let relu = g.op(relu).results[0];
        let skip = g.push_op(Op::Binary(BinaryOp::Add), vec![relu, x], vec![act.clone()]);
        x = g.op(skip).results[0];
    }
    g.set_outputs(vec![x]);
    g
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn main() {
    let blocks = 25_000;
    let g = synthetic(blocks);
    tessera_ir::verify::verify(&g).expect("benchmark graph verifies");
    let ops: Vec<_> = g.ops().to_vec();
    println!(
        "synthetic graph: {} ops ({} compute ops)",
        ops.len(),
        ops.len() - 2
    );
    println!();
    let work_time = median(3, || {
        let flops: f64 = ops
            .iter()
            .map(|&op| tessera_targets::op_work(&g, op).expect("static").flops)
            .sum();
        assert!(flops > 0.0);
    });
    println!("work of every op (FLOPs, bytes): {} ms", ms(work_time));
    println!();
    println!(
        "| target | placement | cost model: every op on every device (ms) | simulation: 1 sample (ms) | simulation: 1 + 8 samples (ms) | transfers per sample | simulated latency | simulated period | period bound |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (target, chips) in [("mcm-4x4", 16usize), ("gpu-8", 8)] {
        let spec = lookup(target, &[]).expect("built-in target");
        let cost = CostModel::new(&spec, None);
        let n_dev = spec.devices.len();
        let cost_time = median(3, || {
            let mut total = 0.0;
            for d in 0..n_dev {
                for &op in &ops {
                    if let Ok(t) = cost.op_time(&g, op, d) {
                        total += t.seconds().unwrap_or(0.0);
                    }
                }
            }
            assert!(total > 0.0);
        });
        // Devices that compute: skip the host and any switch.
        let workers: Vec<usize> = spec
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.kind != "cpu" && d.kind != "switch")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(workers.len(), chips);
        for (name, place) in [
            (
                "pipeline stages",
                Box::new(|i: usize| workers[i * chips / ops.len()]) as Box<dyn Fn(usize) -> usize>,
            ),
            ("round-robin", Box::new(|i: usize| workers[(i / 4) % chips])),
        ] {
            let mut placement = vec![0usize; g.num_op_handles()];
            for (i, &op) in ops.iter().enumerate() {
                placement[op.index()] = place(i);
            }
            let mut report = None;
            let sim_time = median(3, || {
                report = Some(
                    simulate(&g, &cost, &placement, &SimOptions { samples: Some(8) })
                        .expect("simulates"),
                );
            });
            let r = report.expect("ran");
            let single_time = median(3, || {
                simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) })
                    .expect("simulates");
            });
            println!(
                "| {target} | {name} | {} | {} | {} | {} | {} | {} | {} |",
                ms(cost_time),
                ms(single_time),
                ms(sim_time),
                r.transfers,
                tessera_targets::sim::seconds(r.latency),
                tessera_targets::sim::seconds(r.period),
                tessera_targets::sim::seconds(r.bound_period)
            );
        }
    }
}
