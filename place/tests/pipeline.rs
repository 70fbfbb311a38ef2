//! Pipeline schedules (`schedule{pipeline=gpipe|1f1b}`) on a hand-computable pipeline: two
//! stages of equal times on two devices, four microbatches. The simulated step is exactly
//! `(M + P - 1) (t_f + t_b)` for both schedules (the bubble `(P - 1) / (M + P - 1)` of it
//! idle), each device runs its microbatches in the schedule's order, and 1F1B keeps one
//! microbatch's activation alive on the last stage where GPipe keeps all of them. And DDP's
//! gradient buckets (`bucket-all-reduce`) on a hand-computed data-parallel backward: the
//! simulated step with one all-reduce per gradient, with two buckets and with one.

use tessera_ir::{Graph, text};
use tessera_passes::Statistics;
use tessera_place::pass::schedule_graph;
use tessera_place::pipeline::Schedule;
use tessera_targets::{
    CostModel, SimOptions, SimReport, parse_target, placement_from_graph, simulate,
};

/// `a` (the host) and `b`, 1 MFLOP/s each: an elementwise op on 1000 f32 takes 1 ms; memory
/// and links so fast that moving 4 KB takes nanoseconds.
const TWO: &str = r#"
name = "two"
host = "a"
[[device]]
name = "a"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e15
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "b"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e15
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "a"
b = "b"
bandwidth = 1e15
latency = 0
"#;

const M: usize = 4;
const P: usize = 2;

/// A microbatched step's shape: per microbatch `i`, its rows of `x` (a slice), stage 0's
/// forward on `a`, stage 1's forward and backward on `b`, stage 0's backward on `a` (it reads
/// stage 0's activation, kept until then). Written in microbatch order, so the schedule has
/// to reorder it. Every backward on `b` reads a seed that belongs to no microbatch (as a
/// loss gradient's seed does), which must not wait for the end.
fn step() -> Graph {
    // A state (a training step's), and on `b` a shared forward op and the seed of the
    // backward (no microbatch's: they must run before any backward, 1 us each).
    let mut body = String::from(
        "  %wt = relu %w : f32[1, 1] device(\"b\")\n  %s = neg %wt : f32[1, 1] device(\"b\") grad-of(%wt)\n",
    );
    let mut outs = Vec::new();
    for i in 0..M {
        body += &format!(
            "  %x{i} = slice %x {{axes = [0], ends = [{}], starts = [{i}], steps = [1]}} : f32[1, 1000] device(\"a\")\n",
            i + 1
        );
        body += &format!("  %f{i} = relu %x{i} : f32[1, 1000] device(\"a\")\n");
        body += &format!("  %g{i} = relu %f{i} : f32[1, 1000] device(\"b\")\n");
        body += &format!("  %db{i} = mul %g{i}, %s : f32[1, 1000] device(\"b\") grad-of(%g{i})\n");
        body +=
            &format!("  %da{i} = mul %db{i}, %f{i} : f32[1, 1000] device(\"a\") grad-of(%f{i})\n");
        outs.push(format!("%da{i}"));
    }
    let src = format!(
        "const @w : f32[1, 1] = [0.5]\ngraph @step(%x: f32[{M}, 1000], %w: f32[1, 1] state(init = @w, next = \"w\")) {{\n{body}  return {}, %wt as \"w\"\n}}",
        outs.join(", ")
    );
    text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"))
}

/// The names of the values `device` makes, in body order.
fn device_order(g: &Graph, device: &str) -> Vec<String> {
    g.ops()
        .iter()
        .filter(|&&o| g.op(o).device.as_deref() == Some(device))
        .filter_map(|&o| g.value(g.op(o).results[0]).name.clone())
        .filter(|n| !n.starts_with('x') && n != "wt" && n != "s")
        .collect()
}

fn scheduled(schedule: Schedule) -> (Graph, SimReport) {
    let spec = parse_target(TWO, "two.toml").unwrap_or_else(|e| panic!("{e}"));
    let cost = CostModel::new(&spec, None);
    let mut g = step();
    schedule_graph(&mut g, &cost, Some(schedule), &mut Statistics::default()).expect("scheduled");
    tessera_ir::verify::verify(&g).expect("verifies");
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) }).expect("sim");
    (g, r)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * b.abs()
}

/// The step takes `M + P - 1` slots of `t_f + t_b` = 2 ms.
#[track_caller]
fn assert_pipelined_step(r: &SimReport) {
    let step = (M + P - 1) as f64 * 2e-3;
    assert!(close(r.latency, step), "{} != {step}", r.latency);
}

#[test]
fn gpipe_runs_all_forwards_then_all_backwards() {
    let (g, r) = scheduled(Schedule::GPipe);
    assert_eq!(
        device_order(&g, "a"),
        ["f0", "f1", "f2", "f3", "da0", "da1", "da2", "da3"]
    );
    assert_eq!(
        device_order(&g, "b"),
        ["g0", "g1", "g2", "g3", "db0", "db1", "db2", "db3"]
    );
    assert_pipelined_step(&r);
    // The bubble: each device is busy M (t_f + t_b) of the step.
    // (`b` also runs the two shared 1 us ops.)
    let busy = M as f64 * 2e-3;
    for d in &r.devices {
        assert!((d.busy - busy).abs() <= 2.001e-6, "{}: {}", d.name, d.busy);
    }
    let bubble = 1.0 - busy / r.latency;
    let want = (P - 1) as f64 / (M + P - 1) as f64;
    assert!((bubble - want).abs() < 1e-5, "{bubble} != {want}");
}

#[test]
fn one_f_one_b_alternates_after_its_warm_up_and_keeps_fewer_activations() {
    let (g, r) = scheduled(Schedule::OneFOneB);
    // Stage 0 warms up with P - 1 = 1 forward; stage 1 alternates from the start.
    assert_eq!(
        device_order(&g, "a"),
        ["f0", "f1", "da0", "f2", "da1", "f3", "da2", "da3"]
    );
    assert_eq!(
        device_order(&g, "b"),
        ["g0", "db0", "g1", "db1", "g2", "db2", "g3", "db3"]
    );
    assert_pipelined_step(&r);
    let (_, gpipe) = scheduled(Schedule::GPipe);
    let peak = |r: &SimReport, d: &str| {
        r.devices
            .iter()
            .find(|x| x.name == d)
            .expect("device")
            .peak_memory
    };
    // Stage 1 (`b`) under GPipe holds all four activations g0..g3 while the last one is
    // made, with the copy of f3 it reads: 5 values of 4000 bytes. Under 1F1B it holds one
    // activation at a time: at its peak g0, the backward db0 being made, and the next
    // microbatch's input f1, already received: 3 values. (Both also hold the state w and
    // the seed s, 4 bytes each.)
    assert_eq!(peak(&gpipe, "b"), 5 * 4000 + 8);
    assert_eq!(peak(&r, "b"), 3 * 4000 + 8);
}

#[test]
fn slots_follow_the_schedules() {
    // GPipe: forwards 0..M, backwards M..2M on every stage.
    assert_eq!(
        Schedule::GPipe.slots(0, 4, 3),
        (vec![0, 1, 2], vec![3, 4, 5])
    );
    // 1F1B, 4 stages, 6 microbatches: stage 0 warms up with 3 forwards, the last with none.
    assert_eq!(
        Schedule::OneFOneB.slots(0, 4, 6),
        (vec![0, 1, 2, 3, 5, 7], vec![4, 6, 8, 9, 10, 11])
    );
    assert_eq!(
        Schedule::OneFOneB.slots(3, 4, 6),
        (vec![0, 2, 4, 6, 8, 10], vec![1, 3, 5, 7, 9, 11])
    );
    // Fewer microbatches than the warm-up: all forwards, then all backwards.
    assert_eq!(Schedule::OneFOneB.slots(0, 4, 2), (vec![0, 1], vec![2, 3]));
}

/// In a microbatched step, every microbatch's copy of a model node joins one colocation group
/// with its backward ops, and a weight the copies all read counts once in the group's memory
/// (the one device holds it once): here `w` (4000 bytes) is read by both microbatches' `mul`.
#[test]
fn microbatch_copies_share_a_group_and_count_a_shared_weight_once() {
    let spec = parse_target(TWO, "two.toml").unwrap_or_else(|e| panic!("{e}"));
    let cost = CostModel::new(&spec, None);
    let mut body = String::new();
    for i in 0..2 {
        body += &format!(
            "  %x{i} = slice %x {{axes = [0], ends = [{}], starts = [{i}], steps = [1]}} : f32[1, 1000]\n",
            i + 1
        );
        body += &format!("  %y{i} = mul %x{i}, %w : f32[1, 1000] loc(\"layer\")\n");
        body += &format!("  %d{i} = neg %y{i} : f32[1, 1000] loc(\"layer\") grad-of(%y{i})\n");
    }
    let g = text::parse(
        &format!(
            "const @w : f32[1, 1000] = [{}]\ngraph @step(%x: f32[2, 1000], %w: f32[1, 1000] \
             state(init = @w, next = \"w\")) {{\n{body}  %n = add %d0, %d1 : f32[1, 1000]\n  \
             %u = sub %w, %n : f32[1, 1000]\n  return %u as \"w\"\n}}",
            vec!["0.5"; 1000].join(", ")
        ),
        None,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let built = tessera_place::build::build(&g, &cost).expect("built");
    let group: Vec<&tessera_place::problem::OpSpec> = built
        .problem
        .ops
        .iter()
        .filter(|o| o.colocate.is_some())
        .collect();
    // Both muls and both negs, in one group.
    assert_eq!(group.len(), 4, "{:?}", built.problem.ops);
    assert!(group.iter().all(|o| o.colocate == group[0].colocate));
    // w once, and each op's 4000-byte result.
    let memory: u64 = group.iter().map(|o| o.memory).sum();
    assert_eq!(memory, 4000 + 4 * 4000);
}

/// A host `h` and two chips `c0`, `c1` at 1 MFLOP/s (an elementwise op on 1000 f32 takes
/// 1 ms), memory and host links so fast that their times are nanoseconds; the chips' own link
/// carries 1 MB/s after 1 ms of latency per message.
const CHIPS: &str = r#"
name = "chips"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e15
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "c"
count = 2
kind = "chip"
memory = 1_000_000
memory_bandwidth = 1e15
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "h"
b = "c0"
bandwidth = 1e15
latency = 0
[[interconnect.link]]
a = "h"
b = "c1"
bandwidth = 1e15
latency = 0
[[interconnect.link]]
a = "c0"
b = "c1"
bandwidth = 1e6
latency = 1e-3
"#;

/// A data-parallel backward on the two chips: a chain of four 1 ms ops makes the gradients
/// of `w3`, `w2`, `w1`, `w0` in turn (each 1000 f32, partial sums), each all-reduced right
/// after it is made, then each parameter's 1 ms update (`optimizer/w<i>`).
fn data_parallel_backward() -> Graph {
    let mut body = String::new();
    for i in (0..4).rev() {
        let from = if i == 3 {
            "x".to_string()
        } else {
            format!("b{}", i + 1)
        };
        body += &format!("  %b{i} = relu %{from} : f32[1000] device(\"@m\")\n");
        body += &format!("  %s{i} = all-reduce %b{i} {{axes = [0]}} : f32[1000] device(\"@m\")\n");
    }
    let mut outs = Vec::new();
    for i in (0..4).rev() {
        body += &format!(
            "  %u{i} = sub %w{i}, %s{i} : f32[1000] device(\"@m\") loc(\"optimizer/w{i}\")\n"
        );
        outs.push(format!("%u{i}"));
    }
    let src = format!(
        "mesh @m = [2] devices(\"c0\", \"c1\")\n\ngraph @step(%x: f32[1000], %w0: f32[1000], \
         %w1: f32[1000], %w2: f32[1000], %w3: f32[1000]) {{\n{body}  return {}\n}}",
        outs.join(", ")
    );
    text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"))
}

/// DDP's buckets on a hand-computed case. An all-reduce of `B` bytes over the two chips is
/// two ring steps of `B / 2` bytes, each 1 ms of latency plus its bytes at 1 MB/s; the link
/// runs one collective at a time. The chain makes gradient `w<i>` at `4 - i` ms.
/// - One all-reduce per gradient (4000 B: 2 x (1 + 2) = 6 ms): they queue on the link,
///   ending at 7, 13, 19 and 25 ms; the last update ends at 26 ms.
/// - Buckets of 8000 B ({w3, w2}, {w1, w0}; 2 x (1 + 4) = 10 ms each): the first starts at
///   2 ms, when `w2`'s gradient exists, while the chain still runs, and ends at 12; the
///   second starts then (its gradients exist from 4 ms) and ends at 22; two updates at 22
///   and 23: 24 ms.
/// - One bucket of everything (16000 B: 2 x (1 + 8) = 18 ms) starts only at 4 ms, ends at
///   22; four updates: 26 ms. The bucket that waits for every gradient overlaps nothing.
#[test]
fn bucketed_all_reduces_overlap_the_backward_exactly() {
    let spec = parse_target(CHIPS, "chips.toml").unwrap_or_else(|e| panic!("{e}"));
    let cost = CostModel::new(&spec, None);
    let run = |max_bytes: u64| {
        let mut g = data_parallel_backward();
        let made = tessera_passes::bucket_all_reduces(&mut g, max_bytes).expect("buckets");
        tessera_ir::verify::verify(&g).expect("verifies");
        let placement = placement_from_graph(&g, &spec, None).expect("placed");
        let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) }).expect("sim");
        (g, made, r)
    };
    let steps = [(0, 0, 26e-3), (8000, 2, 24e-3), (16000, 1, 26e-3)];
    for (max_bytes, buckets, latency) in steps {
        let (g, made, r) = run(max_bytes);
        assert_eq!(made.buckets, buckets, "{max_bytes}");
        assert!(
            close(r.latency, latency),
            "{max_bytes}: {} != {latency}",
            r.latency
        );
        let all_reduces = g
            .ops()
            .iter()
            .filter(|&&o| g.op(o).op.name() == "all-reduce")
            .count();
        assert_eq!(all_reduces, if buckets == 0 { 4 } else { buckets });
    }
    // Buckets follow the parameters in reverse: `w3` and `w2` first.
    let (g, _, _) = run(8000);
    let text = text::print(&g);
    let first = text.find("%bucket0 = concat").expect("bucket0");
    let second = text.find("%bucket1 = concat").expect("bucket1");
    let relu_b0 = text.find("%b0 = relu").expect("b0");
    assert!(first < relu_b0 && relu_b0 < second, "{text}");
    // The sums are the same as without buckets.
    let inputs: Vec<tessera_ir::Tensor> = (0..5)
        .map(|i| {
            let data: Vec<f32> = (0..1000)
                .map(|j| ((i * 1000 + j) % 7) as f32 - 3.0)
                .collect();
            tessera_ir::Tensor::F32(
                ndarray::ArrayD::from_shape_vec(vec![1000], data).expect("shape"),
            )
        })
        .collect();
    let plain = tessera_ir::interp::run(&data_parallel_backward(), &inputs).expect("runs");
    assert_eq!(tessera_ir::interp::run(&g, &inputs).expect("runs"), plain);
}

/// Stage 0 of [`step`] three ops deep (`testdata/placement/deep-step.tir`): per microbatch
/// `f = relu x`, `h = relu f`, `k = relu h` on `a`, whose backward reads `f` and `h` (both
/// kept until then) and sums to a scalar; `b` reads `k`.
fn deep_step() -> Graph {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/placement/deep-step.tir"
    );
    let src = std::fs::read_to_string(path).expect("deep-step.tir");
    text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"))
}

/// Recomputation on the GPipe step of [`deep_step`]: each stage runs a microbatch's forward
/// again just before that microbatch's backward, which then reads the copies; the values
/// from the other stage (`h` on `b`) and the batch (`x`) are the boundary it keeps.
#[test]
fn recomputation_runs_each_forward_again_before_its_backward() {
    let spec = parse_target(TWO, "two.toml").unwrap_or_else(|e| panic!("{e}"));
    let cost = CostModel::new(&spec, None);
    let run = |places: Option<&[&str]>| {
        let mut g = deep_step();
        schedule_graph(
            &mut g,
            &cost,
            Some(Schedule::GPipe),
            &mut Statistics::default(),
        )
        .expect("scheduled");
        let copies = places.map_or(0, |p| {
            let set: std::collections::BTreeSet<String> = p.iter().map(|s| s.to_string()).collect();
            tessera_place::recompute::recompute(&mut g, Some(&set))
        });
        tessera_place::pass::insert_transfers(&mut g, "a");
        tessera_ir::verify::verify(&g).expect("verifies");
        let placement = placement_from_graph(&g, &spec, None).expect("placed");
        let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) }).expect("sim");
        (g, r, copies)
    };
    let peak = |r: &SimReport, d: &str| {
        r.devices
            .iter()
            .find(|x| x.name == d)
            .expect("device")
            .peak_memory
    };
    let (_, plain, _) = run(None);
    let (g, r, copies) = run(Some(&["a"]));
    // On `a`, each microbatch's slice, `f` and `h` (what its backward reads, and their
    // cone back to the batch): 12 copies, none of `k`, which only `b` reads.
    assert_eq!(copies, 12);
    assert_eq!(
        device_order(&g, "a"),
        [
            "f0",
            "h0",
            "k0",
            "f1",
            "h1",
            "k1",
            "f2",
            "h2",
            "k2",
            "f3",
            "h3",
            "k3",
            "f0.recomputed",
            "h0.recomputed",
            "db0.to.a",
            "dk0",
            "dh0",
            "dx0",
            "f1.recomputed",
            "h1.recomputed",
            "db1.to.a",
            "dk1",
            "dh1",
            "dx1",
            "f2.recomputed",
            "h2.recomputed",
            "db2.to.a",
            "dk2",
            "dh2",
            "dx2",
            "f3.recomputed",
            "h3.recomputed",
            "db3.to.a",
            "dk3",
            "dh3",
            "dx3"
        ]
    );
    let text = tessera_ir::text::print(&g);
    for line in [
        "%x0.recomputed = slice %x {axes = [0], ends = [1], starts = [0], steps = [1]}",
        "%f0.recomputed = relu %x0.recomputed",
        "%h0.recomputed = relu %f0.recomputed",
        "%dk0 = mul %db0.to.a, %h0.recomputed",
        "%dh0 = mul %dk0, %f0.recomputed",
        // The forward keeps its own reads.
        "%k0 = relu %h0",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // GPipe keeps the four microbatches' `f` and `h` on `a` (32 000 bytes) from the forward
    // to the backward: a peak of 48 000 bytes. Recomputed, `a` holds one microbatch's
    // (8 000 bytes) at a time, but keeps the batch `x` (16 000 bytes: the copies' boundary)
    // to the end where GPipe frees it after the forward: 40 004 bytes.
    assert_eq!(peak(&plain, "a"), 48_000);
    assert_eq!(peak(&r, "a"), 40_004);
    // The price: each microbatch's `f` and `h` again on `a` (2 ms), partly hidden while `a`
    // waits for `b`'s backward: the step goes from 26 ms to 32 ms.
    assert!(close(plain.latency, 26e-3), "{}", plain.latency);
    assert!(close(r.latency, 32e-3), "{}", r.latency);
    // On `b` the stage's input from `a` (`k`) is as large as what it recomputes (`g`): there
    // it saves nothing and lengthens the step.
    let (_, both, copies) = run(Some(&["a", "b"]));
    assert_eq!(copies, 16);
    assert_eq!(peak(&both, "b"), peak(&plain, "b"));
    assert!(both.latency > r.latency);
    // Not a microbatched step (no state: not a training step): nothing is recomputed.
    let mut flat = deep_step();
    flat.state.clear();
    let before = tessera_ir::text::print(&flat);
    assert_eq!(tessera_place::recompute::recompute(&mut flat, None), 0);
    assert_eq!(tessera_ir::text::print(&flat), before);
}
