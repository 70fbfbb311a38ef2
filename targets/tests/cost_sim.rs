//! The cost model and the simulator against hand-computed small cases: roofline limits,
//! efficiency and overheads, transfers along routes, ring collectives with and without link
//! sharing, calibration precedence, plugin overrides, pipelined throughput, link contention
//! and peak memory.

use tessera_ir::{Graph, OpId};
use tessera_targets::{
    Calibration, CostModel, Device, ON_MESH, OpTime, SimError, SimOptions, SimReport, SpanKind,
    Target, TargetError, TargetSpec, TimeSource, Work, parse_target, placement_from_graph,
    simulate, trace,
};

fn target(src: &str) -> TargetSpec {
    parse_target(src, "test.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn graph(src: &str) -> Graph {
    tessera_ir::text::parse(src, None).unwrap_or_else(|e| panic!("{e}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
}

#[track_caller]
fn assert_close(actual: f64, expected: f64) {
    assert!(close(actual, expected), "{actual} != {expected}");
}

/// The nth op of the body that is not a `const`.
fn nth_op(g: &Graph, n: usize) -> OpId {
    g.ops()
        .iter()
        .copied()
        .filter(|&o| g.op(o).op.name() != "const")
        .nth(n)
        .expect("op")
}

/// Two devices: `a` (host, 1 MFLOP/s) and `b` (2 MFLOP/s), memory 1 TB/s so elementwise
/// ops on 1000 elements are compute-bound; one link of 4 MB/s with 0.1 ms latency.
const PAIR: &str = r#"
name = "pair"
host = "a"
[[device]]
name = "a"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "b"
kind = "acc"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 2e6 }
lowering = "cpu"
[[interconnect.link]]
a = "a"
b = "b"
bandwidth = 4e6
latency = 1e-4
"#;

#[test]
fn roofline_compute_and_memory_bound() {
    let spec = target(
        r#"
host = "d"
[[device]]
name = "d"
kind = "x"
memory = 1000
memory_bandwidth = 1e9
compute = { f32 = 1e9, bf16 = 4e9 }
lowering = "cpu"
efficiency = { matmul = 0.5 }
op_overhead = 1e-6
"#,
    );
    let g = graph(
        "graph @g(%x: f32[10, 100], %w: f32[100, 10], %h: bf16[10, 100], %k: bf16[100, 10], %i: i32[1000]) {
  %0 = matmul %x, %w : f32[10, 10]
  %1 = relu %x : f32[10, 100]
  %2 = matmul %h, %k : bf16[10, 10]
  %3 = neg %i : i32[1000]
  return %0, %1, %2, %3
}",
    );
    let cost = CostModel::new(&spec, None);
    // matmul: 2*10*10*100 = 20000 flops / (1e9 * 0.5) = 40 us; bytes (1000+1000+100)*4 = 8400
    // / 1e9 = 8.4 us; compute-bound, plus 1 us overhead.
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work"),
        OpTime::Time {
            seconds: 41e-6,
            source: TimeSource::ComputeBound
        }
    );
    // relu: 1000 flops / 1e9 = 1 us; bytes 8000 / 1e9 = 8 us: memory-bound.
    let relu = cost.op_time(&g, nth_op(&g, 1), 0).expect("work");
    assert_eq!(relu.seconds(), Some(9e-6));
    assert!(matches!(
        relu,
        OpTime::Time {
            source: TimeSource::MemoryBound,
            ..
        }
    ));
    // bf16 matmul uses the bf16 rate: 20000 / (4e9 * 0.5) = 10 us vs 4200 B / 1e9 = 4.2 us.
    assert_close(
        cost.op_time(&g, nth_op(&g, 2), 0)
            .expect("work")
            .seconds()
            .expect("time"),
        11e-6,
    );
    // i32 has no rate: falls back to f32. 1000 flops / 1e9 = 1 us < 8000 B / 1e9 = 8 us.
    assert_close(
        cost.op_time(&g, nth_op(&g, 3), 0)
            .expect("work")
            .seconds()
            .expect("time"),
        9e-6,
    );
}

#[test]
fn unsupported_ops_and_types() {
    let spec = target(
        r#"
host = "d"
[[device]]
name = "d"
kind = "x"
memory = 1000
memory_bandwidth = 1e9
compute = { f16 = 1e9 }
supported_ops = ["matmul", "relu"]
lowering = "cpu"
"#,
    );
    let g = graph(
        "graph @g(%x: f32[4, 4]) {
  %0 = relu %x : f32[4, 4]
  %1 = neg %x : f32[4, 4]
  return %0, %1
}",
    );
    let cost = CostModel::new(&spec, None);
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work"),
        OpTime::Unsupported("d has no compute rate for f32 (nor f32)".into())
    );
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 1), 0).expect("work"),
        OpTime::Unsupported("d does not support `neg` (not in its supported_ops)".into())
    );
}

#[test]
fn transfers_follow_the_route() {
    // h - m - z in a line; the route h -> z crosses both links: latency 1 us + 2 us, slowest
    // bandwidth 1 MB/s.
    let spec = target(
        r#"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "m"
kind = "cpu"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "z"
kind = "cpu"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[interconnect.link]]
a = "h"
b = "m"
bandwidth = 4e6
latency = 1e-6
[[interconnect.link]]
a = "z"
b = "m"
bandwidth = 1e6
latency = 2e-6
"#,
    );
    let cost = CostModel::new(&spec, None);
    assert_close(
        cost.transfer_time(0, 2, 1000.0).expect("route"),
        3e-6 + 1e-3,
    );
    assert_close(
        cost.transfer_time(2, 0, 1000.0).expect("route"),
        3e-6 + 1e-3,
    );
    assert_eq!(cost.transfer_time(1, 1, 1000.0).expect("same"), 0.0);
    // Channels: link 0 forward (h -> m) = 0, link 1 backward (m -> z, link is z-m) = 3.
    assert_eq!(cost.channels(0, 2).expect("route"), &[0, 3]);
    assert_eq!(cost.channels(2, 0).expect("route"), &[2, 1]);
}

#[test]
fn unreachable_devices_are_an_error() {
    // A target file must connect every device to its host; a target made in code need not.
    let mut spec = target(
        r#"
host = "a0"
[[device]]
name = "a"
kind = "cpu"
count = 2
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[interconnect.link]]
a = "a0"
b = "a1"
bandwidth = 1
latency = 0
"#,
    );
    spec.links.clear();
    let cost = CostModel::new(&spec, None);
    let err = cost.transfer_time(0, 1, 8.0).expect_err("no link");
    assert_eq!(err.to_string(), "target `test`: no route from `a0` to `a1`");
}

const RING4: &str = r#"
host = "c0"
[[device]]
name = "c"
count = 4
kind = "chip"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[interconnect]
topology = "ring"
devices = "c"
bandwidth = 1e9
latency = 1e-6
"#;

#[test]
fn ring_collectives_on_a_ring() {
    let spec = target(RING4);
    let cost = CostModel::new(&spec, None);
    // 4 MB over 4 devices: chunks of 1 MB, each step 1 us + 1e6 / 1e9 s = 1.001 ms, every
    // neighbour one hop away and no link direction shared.
    let step = 1e-6 + 1e-3;
    assert_close(
        cost.all_reduce_time(&[0, 1, 2, 3], 4e6).expect("ring"),
        6.0 * step,
    );
    assert_close(
        cost.all_gather_time(&[0, 1, 2, 3], 4e6).expect("ring"),
        3.0 * step,
    );
    // Two devices: 2 MB chunks; all-reduce 2 steps, all-gather 1.
    assert_close(
        cost.all_reduce_time(&[0, 1], 4e6).expect("ring"),
        2.0 * (1e-6 + 2e-3),
    );
    assert_eq!(cost.all_reduce_time(&[2], 4e6).expect("one"), 0.0);
}

#[test]
fn ring_collectives_share_links_on_a_mesh() {
    // A 2x2 mesh: c0-c1, c2-c3 (rows) and c0-c2, c1-c3 (columns). The ring c0 c1 c2 c3 has
    // two 2-hop steps: c1 -> c2 goes c1 -> c0 -> c2 (equally wide and fast, so the earlier device) and
    // c3 -> c0 goes c3 -> c1 -> c0. Both cross c1 -> c0, so that direction carries two
    // chunks: step = 2 hops of latency + 2 chunks / bandwidth.
    let spec = target(&RING4.replace(
        "topology = \"ring\"",
        "topology = \"mesh2d\"\nrows = 2\ncols = 2",
    ));
    let cost = CostModel::new(&spec, None);
    let chunk = 1e6;
    let step = 2e-6 + 2.0 * chunk / 1e9;
    assert_close(
        cost.all_reduce_time(&[0, 1, 2, 3], 4e6).expect("mesh"),
        6.0 * step,
    );
    // The ring c0 c1 c3 c2 follows the mesh: every step one hop, nothing shared.
    let good = 1e-6 + chunk / 1e9;
    assert_close(
        cost.all_reduce_time(&[0, 1, 3, 2], 4e6).expect("mesh"),
        6.0 * good,
    );
}

/// PAIR with a relu on each device.
const PAIR_PIPELINE: &str = r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("a")
  %1 = relu %0 : f32[1000] device("b")
  return %1
}"#;

#[test]
fn pipeline_of_two_devices() {
    let (spec, g) = (target(PAIR), graph(PAIR_PIPELINE));
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(8) }).expect("sim");
    // relu on a: 1000 / 1e6 = 1 ms; a -> b: 0.1 ms + 4000 B / 4e6 = 1.1 ms; relu on b:
    // 0.5 ms; b -> a (output to the host): 1.1 ms. Latency 3.7 ms.
    assert_close(r.latency, 3.7e-3);
    // Steady state: the link directions are the bottleneck at 1.1 ms per sample.
    assert_close(r.period, 1.1e-3);
    assert_close(r.throughput, 1.0 / 1.1e-3);
    assert_close(r.bound_period, 1.1e-3);
    assert_eq!(r.bottleneck, "a -> b");
    assert_eq!(r.transfers, 2);
    assert_close(r.devices[0].busy, 1e-3);
    assert_close(r.devices[1].busy, 0.5e-3);
    assert_eq!((r.devices[0].ops, r.devices[1].ops), (1, 1));
    assert_close(r.links[0].busy[0], 1.1e-3);
    assert_close(r.links[0].busy[1], 1.1e-3);
    assert_close(r.links[0].bytes[0], 4000.0);
    // Memory: on a, x (4000 B) and relu's result (4000 B) are live together; on b, the
    // transferred input and relu's result. The output copy on a comes after x is freed.
    assert_eq!(r.devices[0].peak_memory, 8000);
    assert_eq!(r.devices[1].peak_memory, 8000);
    assert_eq!(r.devices[0].capacity, 1_000_000);
}

/// The same pipeline when `b` cannot overlap transfers with compute (`overlap = false`): it
/// receives its input itself before its relu and stays busy sending the result back, as
/// `tessera-place`'s evaluator charges it.
#[test]
fn a_device_without_overlap_is_busy_with_its_transfers() {
    let src = PAIR.replace(
        "compute = { f32 = 2e6 }",
        "compute = { f32 = 2e6 }\noverlap = false",
    );
    let spec = target(&src);
    assert!(spec.devices[0].overlap && !spec.devices[1].overlap);
    let g = graph(PAIR_PIPELINE);
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(8) }).expect("sim");
    // relu on a 1 ms; a -> b 1.1 ms; on b: receive 1.1 ms, relu 0.5 ms; b -> a 1.1 ms while
    // b sends it (1.1 ms more busy on b). Latency 1 + 1.1 + 1.6 + 1.1 = 4.8 ms.
    assert_close(r.latency, 4.8e-3);
    // b is busy 1.1 + 0.5 + 1.1 = 2.7 ms per sample: the bottleneck, above the links' 1.1.
    assert_close(r.devices[1].busy, 2.7e-3);
    assert_close(r.devices[0].busy, 1e-3);
    assert_close(r.bound_period, 2.7e-3);
    assert_eq!(r.bottleneck, "b");
    assert_close(r.period, 2.7e-3);
    assert_close(r.links[0].busy[0], 1.1e-3);
}

#[test]
fn trace_of_a_pipeline_of_two_devices() {
    let (spec, g) = (target(PAIR), graph(PAIR_PIPELINE));
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let t = trace(&g, &cost, &placement, 2).expect("trace");
    assert_eq!(t.samples, 2);
    // Per sample: relu on a, x's result a -> b, relu on b, the output b -> a.
    assert_eq!(t.spans.len(), 8);
    let (relu_a, relu_b) = (nth_op(&g, 0), nth_op(&g, 1));
    let mut first: Vec<_> = t.spans.iter().filter(|s| s.sample == 0).collect();
    first.sort_by(|a, b| a.start.total_cmp(&b.start));
    assert_eq!(first[0].kind, SpanKind::Op(relu_a));
    assert_eq!((first[0].lane, first[0].channel()), (0, None));
    assert_close(first[0].end, 1e-3);
    assert!(matches!(first[1].kind, SpanKind::Transfer(_)));
    assert_eq!(first[1].channel(), Some((0, true)));
    assert_close(first[1].start, 1e-3);
    assert_close(first[1].end, 2.1e-3);
    assert_eq!((first[2].kind, first[2].lane), (SpanKind::Op(relu_b), 1));
    assert_close(first[2].end, 2.6e-3);
    assert_eq!(first[3].channel(), Some((0, false)));
    // The last span of one sample ends at the simulator's latency.
    assert_close(first[3].end, 3.7e-3);
    // The second sample's relu on a waits for the first's (one op at a time per device).
    let second_a = t
        .spans
        .iter()
        .find(|s| s.sample == 1 && s.kind == SpanKind::Op(relu_a))
        .expect("sample 1 on a");
    assert_close(second_a.start, 1e-3);
    // Its transfer is ready at 2.0 ms but waits for the first sample's on the link.
    let second_ab = t
        .spans
        .iter()
        .find(|s| s.sample == 1 && s.channel() == Some((0, true)))
        .expect("sample 1 a -> b");
    assert_close(second_ab.start, 2.1e-3);
    // The stream ends after one sample's latency.
    let one = simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) }).expect("sim");
    let end = t.spans.iter().map(|s| s.end).fold(0.0, f64::max);
    assert!(end >= one.latency);
    // Spans come in start order.
    assert!(t.spans.windows(2).all(|w| w[0].start <= w[1].start));
}

#[test]
fn contention_on_a_shared_route() {
    // x and y both travel h -> m -> z at once; they share both link directions, so the
    // second waits for the first.
    let spec = target(
        &r#"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
count = 1
[[device]]
name = "m"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "z"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "h0"
b = "m"
bandwidth = 4e6
latency = 0
[[interconnect.link]]
a = "m"
b = "z"
bandwidth = 4e6
latency = 0
"#
        .replace("host = \"h\"", "host = \"h0\""),
    );
    let g = graph(
        r#"graph @g(%x: f32[1000], %y: f32[1000]) {
  %0 = add %x, %y : f32[1000] device("z")
  return %0
}"#,
    );
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(1) }).expect("sim");
    // Each transfer 4000 B / 4e6 = 1 ms: x 0-1 ms, y 1-2 ms (contended), add 1 ms (1000
    // flops at 1e6), output back 1 ms: 4 ms, where no contention would give 3 ms.
    assert_close(r.latency, 4e-3);
    assert_close(r.links[0].busy[0], 2e-3);
    assert_close(r.links[1].busy[0], 2e-3);
    assert_close(r.links[0].busy[1], 1e-3);
    // z holds x, y and the sum at once.
    assert_eq!(r.devices[2].peak_memory, 12000);
    // h holds x and y until they leave, then the output.
    assert_eq!(r.devices[0].peak_memory, 8000);
}

#[test]
fn weights_are_resident_and_counted() {
    let spec = target(PAIR);
    let values = vec!["0.5"; 1000].join(", ");
    let g = graph(&format!(
        r#"const @w : f32[1000] = [{values}]
graph @g(%x: f32[1000]) {{
  %w = const @w : f32[1000]
  %0 = add %x, %w : f32[1000] device("b")
  %1 = mul %0, %w : f32[1000] device("b")
  return %1
}}"#
    ));
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(2) }).expect("sim");
    assert_eq!(r.devices[1].weights, 4000);
    assert_eq!(r.devices[0].weights, 0);
    // in: 1.1 ms, add 0.5 ms, mul 0.5 ms, out 1.1 ms.
    assert_close(r.latency, 3.2e-3);
    // b holds w, the input copy and the sum, then w, the sum and the product.
    assert_eq!(r.devices[1].peak_memory, 4000 + 8000);
}

/// A training step's state (here a parameter `w` and its update `w - x * w`) is resident
/// where it is used, like a weight, and its next value is written in place: `w` is counted
/// once in b's weights, is never moved from the host, and its update neither takes memory of
/// its own nor goes back to the host. Only the input and the loss move.
#[test]
fn state_is_resident_and_updated_in_place() {
    let spec = target(PAIR);
    let values = vec!["0.5"; 1000].join(", ");
    let g = graph(&format!(
        r#"const @w : f32[1000] = [{values}]
graph @g(%x: f32[1000], %w: f32[1000] state(init = @w, next = "w")) {{
  %0 = mul %x, %w : f32[1000] device("b")
  %1 = sub %w, %0 : f32[1000] device("b")
  %l = reduce-sum %0 {{axes = [], keep-dims = false}} : f32[] device("b")
  return %l as "loss", %1 as "w"
}}"#
    ));
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(2) }).expect("sim");
    assert_eq!(r.devices[1].weights, 4000);
    assert_eq!(r.devices[0].weights, 0);
    // x in, the loss out: no transfer of w either way.
    assert_eq!(r.transfers, 2);
    // b holds w, the input copy and the product; the update is written into w.
    assert_eq!(r.devices[1].peak_memory, 4000 + 8000);
}

/// A state's next value is the next step's state: in a stream of training steps, an op that
/// reads the state waits for the previous step's op that wrote it. Here `w` is read by the
/// first op and written by the last, so the steps run one after another and the period is
/// the latency; the same chain reading no state interleaves its samples; and a state written
/// by the first op lets the next step start as soon as it is written.
#[test]
fn a_stream_of_steps_waits_for_the_state_the_last_step_wrote() {
    let spec = target(&PAIR.replace("latency = 1e-4", "latency = 0"));
    let body = |read: &str, write: &str| {
        format!(
            r#"const @w : f32[1000] = [{}]
graph @g(%x: f32[1000], %w: f32[1000] state(init = @w, next = "w")) {{
  %0 = mul %x, {read} : f32[1000] device("a")
  %1 = relu %0 : f32[1000] device("b")
  %2 = add %1, %x : f32[1000] device("a")
  return %2 as "y", {write} as "w"
}}"#,
            vec!["0.5"; 1000].join(", ")
        )
    };
    let run = |g: &Graph| sim(&spec, g, 16).expect("sim");
    // Read first, written last: one step after another.
    let chained = graph(&body("%w", "%2"));
    let r = run(&chained);
    assert_close(r.period, r.latency);
    // No state read: the samples interleave, a period well below the latency.
    let free = graph(&body("%x", "%2"));
    let r2 = run(&free);
    assert!(r2.period < 0.6 * r.latency, "{} {}", r2.period, r.latency);
    // Written by the first op (the product itself is the next state): the next step waits
    // only for that op, and the steps interleave.
    let early = graph(&body("%w", "%0"));
    let r3 = run(&early);
    assert!(r3.period < 0.6 * r.latency, "{} {}", r3.period, r.latency);
}

/// A state read on a device where its update does not run (a replica's copy of a parameter)
/// is refreshed after the update: `w` is read by the product on `b` and updated on `a`, so
/// each step ends with `w`'s new value moving to `b` (4000 bytes at 4 MB/s plus 0.1 ms: 1.1
/// ms), which the next step's product waits for. One step: `x` to `b` 1.1 ms, the product 0.5
/// ms, back to `a` 1.1 ms, the update 1 ms, the refresh 1.1 ms: 4.8 ms. In a stream the next
/// step's input moves while this one runs, so the period is the rest: 3.7 ms.
#[test]
fn a_state_read_on_another_device_is_refreshed_after_its_update() {
    let spec = target(PAIR);
    let values = vec!["0.5"; 1000].join(", ");
    let g = graph(&format!(
        r#"const @w : f32[1000] = [{values}]
graph @g(%x: f32[1000], %w: f32[1000] state(init = @w, next = "w")) {{
  %0 = mul %x, %w : f32[1000] device("b")
  %1 = sub %w, %0 : f32[1000] device("a")
  return %1 as "w"
}}"#
    ));
    let r = sim(&spec, &g, 16).expect("sim");
    // x in, the product back, the refresh.
    assert_eq!(r.transfers, 3);
    assert_close(r.latency, 4.8e-3);
    assert_close(r.period, 3.7e-3);
    // Both copies of w are resident, each counted once.
    assert_eq!(r.devices[0].weights, 4000);
    assert_eq!(r.devices[1].weights, 4000);
}

#[test]
fn stream_interleaves_samples_on_a_shared_device() {
    // a runs the first and the last stage, b the middle one; with samples interleaved, a
    // starts sample 1's first stage while sample 0 is on b.
    let spec = target(&PAIR.replace("latency = 1e-4", "latency = 0"));
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("a")
  %1 = relu %0 : f32[1000] device("b")
  %2 = relu %1 : f32[1000] device("a")
  return %2
}"#,
    );
    let cost = CostModel::new(&spec, None);
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let r = simulate(&g, &cost, &placement, &SimOptions { samples: Some(16) }).expect("sim");
    // a: 1 + 1 ms per sample; each link direction 1 ms; b 0.5 ms. Latency 1 + 1 + 0.5 + 1 + 1.
    assert_close(r.latency, 4.5e-3);
    assert_close(r.bound_period, 2e-3);
    assert_eq!(r.bottleneck, "a");
    assert_close(r.period, 2e-3);
}

#[test]
fn errors_name_the_op_and_device() {
    let spec = target(&PAIR.replace(
        "compute = { f32 = 2e6 }",
        "compute = { f32 = 2e6 }\nsupported_ops = [\"add\"]",
    ));
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("b") loc("layer1/Relu")
  %1 = neg %0 : f32[1000]
  return %1
}"#,
    );
    let err = placement_from_graph(&g, &spec, None).expect_err("unplaced");
    assert!(matches!(err, SimError::Unplaced { .. }));
    assert_eq!(
        err.to_string(),
        "neg op1 has no device; place it (device(\"...\")) or choose a default device"
    );
    let placement = placement_from_graph(&g, &spec, Some(0)).expect("default");
    let cost = CostModel::new(&spec, None);
    let err = simulate(&g, &cost, &placement, &SimOptions::default()).expect_err("unsupported");
    assert_eq!(
        err.to_string(),
        "relu op0 at \"layer1/Relu\" cannot run on b: b does not support `relu` (not in its supported_ops)"
    );
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("q")
  return %0
}"#,
    );
    let err = placement_from_graph(&g, &spec, None).expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "relu op0 is placed on `q`, which target `pair` does not have"
    );
    let g = graph(
        r#"graph @g(%x: f32[N]) {
  %0 = relu %x : f32[N] device("a")
  return %0
}"#,
    );
    let placement = placement_from_graph(&g, &spec, None).expect("placed");
    let err = simulate(&g, &cost, &placement, &SimOptions::default()).expect_err("symbolic");
    assert!(err.to_string().contains("symbolic"), "{err}");
}

#[test]
fn calibration_overrides_the_roofline() {
    let spec = target(PAIR);
    let cal = Calibration::parse(
        r#"
[[measurement]]
device = "acc"
op = "relu"
seconds = 3e-3

[[measurement]]
device = "b"
op = "relu"
operands = ["f32[ 1000 ]"]
seconds = 2e-3

[[measurement]]
device = "acc"
op = "relu"
operands = ["f32[1000]"]
seconds = 5e-3
"#,
        "cal.toml",
    )
    .expect("parse");
    assert_eq!(cal.len(), 3);
    cal.check(&spec).expect("devices exist");
    let g = graph(
        r#"graph @g(%x: f32[1000], %y: f32[10]) {
  %0 = relu %x : f32[1000]
  %1 = relu %y : f32[10]
  return %0, %1
}"#,
    );
    let cost = CostModel::new(&spec, Some(&cal));
    // Device name with exact operands beats kind with exact operands.
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 1).expect("work"),
        OpTime::Time {
            seconds: 2e-3,
            source: TimeSource::Calibrated
        }
    );
    // Other shapes: the kind-level entry without operands.
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 1), 1).expect("work").seconds(),
        Some(3e-3)
    );
    // Device a has no measurement: roofline, 1000 / 1e6.
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work").seconds(),
        Some(1e-3)
    );
}

/// An op that no measurement matches takes its modelled time times the most specific
/// scale's factor, plus its overhead: the op's own scale before any op's, each the
/// device's name before its kind; a measurement still wins.
#[test]
fn calibration_scales_the_shapes_it_did_not_measure() {
    let spec = target(PAIR);
    let cal = Calibration::parse(
        r#"
[[measurement]]
device = "b"
op = "relu"
operands = ["f32[1000]"]
seconds = 2e-3

[[scale]]
device = "b"
op = "relu"
factor = 4

[[scale]]
device = "acc"
factor = 8
overhead = 1e-3

[[scale]]
device = "cpu"
op = "relu"
factor = 3

[[scale]]
device = "a"
factor = 5
"#,
        "cal.toml",
    )
    .expect("parse");
    assert_eq!((cal.len(), cal.scales()), (1, 4));
    cal.check(&spec).expect("devices exist");
    let g = graph(
        r#"graph @g(%x: f32[1000], %y: f32[10]) {
  %0 = relu %x : f32[1000]
  %1 = relu %y : f32[10]
  %2 = neg %y : f32[10]
  return %0, %1, %2
}"#,
    );
    let cost = CostModel::new(&spec, Some(&cal));
    let plain = CostModel::new(&spec, None);
    let time = |c: &CostModel<'_>, op: usize, device: usize| {
        c.op_time(&g, nth_op(&g, op), device).expect("work")
    };
    // Measured.
    assert_eq!(time(&cost, 0, 1).seconds(), Some(2e-3));
    // b's relu scale for another shape; b's kind's scale for another op.
    let roofline = |op: usize, device: usize| time(&plain, op, device).seconds().expect("time");
    assert_eq!(
        time(&cost, 1, 1),
        OpTime::Time {
            seconds: roofline(1, 1) * 4.0,
            source: TimeSource::Scaled
        }
    );
    assert_eq!(
        time(&cost, 2, 1).seconds(),
        Some(1e-3 + roofline(2, 1) * 8.0)
    );
    // Split into 4 pieces: the overhead whole, the factor on a piece's roofline.
    let piece = plain
        .op_time_sharded(&g, nth_op(&g, 2), 1, 4)
        .expect("work")
        .seconds()
        .expect("time");
    assert_eq!(
        cost.op_time_sharded(&g, nth_op(&g, 2), 1, 4).expect("work"),
        OpTime::Time {
            seconds: 1e-3 + piece * 8.0,
            source: TimeSource::Scaled
        }
    );
    // a: its kind's relu scale before its name's scale of any op, which neg takes.
    assert_eq!(time(&cost, 0, 0).seconds(), Some(roofline(0, 0) * 3.0));
    assert_eq!(time(&cost, 2, 0).seconds(), Some(roofline(2, 0) * 5.0));
    // A scale's device must be the target's.
    let other =
        Calibration::parse("[[scale]]\ndevice = \"tpu\"\nfactor = 2\n", "cal.toml").expect("parse");
    let e = other.check(&spec).expect_err("no tpu");
    assert_eq!(
        e.to_string(),
        "cal.toml:2: scale.device: target `pair` has no device or device kind `tpu`"
    );
}

/// A scale's work terms (seconds per FLOP and per byte) price the op's own work; a scale
/// with operand patterns applies to the ops whose operand types fit (the fewest `?`
/// first), before the op's scale for any operands; a measurement's work reads back.
#[test]
fn calibration_work_terms_and_operand_patterns() {
    let spec = target(PAIR);
    let cal = Calibration::parse(
        r#"
[[measurement]]
device = "b"
op = "relu"
operands = ["f32[1000]"]
seconds = 2e-3
flops = 1000
bytes = 8000

[[scale]]
device = "b"
op = "relu"
overhead = 1e-6
flop_seconds = 1e-9

[[scale]]
device = "b"
op = "add"
operands = ["f32[?, 10]", "f32[?, 10]"]
byte_seconds = 1e-10

[[scale]]
device = "b"
op = "add"
operands = ["f32[4, 10]", "f32[?, 10]"]
overhead = 5e-6
byte_seconds = 1e-10

[[scale]]
device = "b"
op = "add"
factor = 2
"#,
        "cal.toml",
    )
    .expect("parse");
    assert_eq!((cal.len(), cal.scales()), (1, 4));
    cal.check(&spec).expect("devices exist");
    // A pattern's extents: `?` any one, a rank of its own (a scalar has none).
    assert!(tessera_targets::type_fits("f32[?, 10]", "f32[4, 10]"));
    assert!(tessera_targets::type_fits("f32[]", "f32[ ]"));
    assert!(!tessera_targets::type_fits("f32[?]", "f32[]"));
    assert!(!tessera_targets::type_fits("f32[?, 10]", "f32[4]"));
    assert!(!tessera_targets::type_fits("f32[?]", "i64[4]"));
    let m: Vec<_> = cal.measurements().collect();
    assert_eq!(m[0].work, Some((1000.0, 8000.0)));
    assert_eq!(m[0].operands, Some(&["f32[1000]".to_string()][..]));
    let g = graph(
        r#"graph @g(%x: f32[10], %y: f32[4, 10], %z: f32[8, 10], %w: f32[8, 12]) {
  %0 = relu %x : f32[10]
  %1 = add %y, %y : f32[4, 10]
  %2 = add %z, %z : f32[8, 10]
  %3 = add %w, %w : f32[8, 12]
  return %0, %1, %2, %3
}"#,
    );
    let cost = CostModel::new(&spec, Some(&cal));
    let plain = CostModel::new(&spec, None);
    let time = |op: usize| {
        cost.op_time(&g, nth_op(&g, op), 1)
            .expect("work")
            .seconds()
            .expect("time")
    };
    let work = |op: usize| tessera_targets::op_work(&g, nth_op(&g, op)).expect("work");
    // relu's scale: its overhead and its FLOPs.
    assert_close(time(0), 1e-6 + 1e-9 * work(0).flops);
    // [4, 10] fits both patterns: the one with fewer `?`.
    assert_close(time(1), 5e-6 + 1e-10 * work(1).bytes);
    // [8, 10] fits one; [8, 12] none: add's scale for any operands.
    assert_close(time(2), 1e-10 * work(2).bytes);
    let roofline = plain
        .op_time(&g, nth_op(&g, 3), 1)
        .expect("work")
        .seconds()
        .expect("time");
    assert_close(time(3), 2.0 * roofline);
    // Split into 2 pieces: the work terms on a piece's work, the overhead whole.
    assert_close(
        cost.op_time_sharded(&g, nth_op(&g, 0), 1, 2)
            .expect("work")
            .seconds()
            .expect("time"),
        1e-6 + 1e-9 * work(0).flops / 2.0,
    );
}

#[test]
fn calibration_errors_name_file_line_and_field() {
    let cases = [
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relux\"\nseconds = 1\n",
            "cal.toml:3: measurement.op: unknown op `relux`; did you mean `relu`?",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\noperands = [\"f32[N]\"]\nseconds = 1\n",
            "cal.toml:4: measurement.operands: `f32[N]` is not a static tensor type like `f32[8, 512]`",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = -1\n",
            "cal.toml:4: measurement.seconds: must not be negative",
        ),
        // Absurd or non-finite times (they overflowed sums downstream).
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 1e308\n",
            "cal.toml:4: measurement.seconds: must be at most 1e6 seconds",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = inf\n",
            "cal.toml:4: measurement.seconds: must be finite",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = nan\n",
            "cal.toml:4: measurement.seconds: must be finite",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 1\n[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 2\n",
            "cal.toml:6: measurement: same device, op and operands as the measurement on line 2",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nop = \"relu\"\nfactor = 0\n",
            "cal.toml:4: scale.factor: must be between 1e-6 and 1e6",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nfactor = 1e7\n",
            "cal.toml:3: scale.factor: must be between 1e-6 and 1e6",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nop = \"relux\"\nfactor = 2\n",
            "cal.toml:3: scale.op: unknown op `relux`; did you mean `relu`?",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nfactor = 2\noverhead = -1\n",
            "cal.toml:4: scale.overhead: must not be negative",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nfactor = 2\n[[scale]]\ndevice = \"b\"\nfactor = 3\n",
            "cal.toml:5: scale: same device, op and operands as the scale on line 2",
        ),
        (
            "[[scale]]\ndevice = \"b\"\noverhead = 1e-6\n",
            "cal.toml:2: scale: needs a `factor`, a `flop_seconds` or a `byte_seconds`",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nflop_seconds = -1e-9\n",
            "cal.toml:3: scale.flop_seconds: must be 0 or a normal number up to 1e0",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nbyte_seconds = 2\n",
            "cal.toml:3: scale.byte_seconds: must be 0 or a normal number up to 1e0",
        ),
        (
            "[[scale]]\ndevice = \"b\"\noperands = [\"f32[?]\"]\nfactor = 2\n",
            "cal.toml:2: scale.operands: operand patterns need the scale's `op`",
        ),
        (
            "[[scale]]\ndevice = \"b\"\nop = \"relu\"\noperands = [\"f32[N]\"]\nfactor = 2\n",
            "cal.toml:4: scale.operands: `f32[N]` is not a tensor type pattern like `f32[?, 512]` (`?`: any extent)",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 1e-6\nflops = 10\n",
            "cal.toml:5: measurement: `flops` and `bytes` go together: give both or neither",
        ),
        (
            "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 1e-6\nflops = 10\nbytes = -1\n",
            "cal.toml:6: measurement.bytes: must be between 0 and 1e24",
        ),
    ];
    for (src, expected) in cases {
        let err = Calibration::parse(src, "cal.toml").expect_err(expected);
        assert_eq!(err.to_string(), expected);
    }
    let cal = Calibration::parse(
        "[[measurement]]\ndevice = \"tpu\"\nop = \"relu\"\nseconds = 1\n",
        "cal.toml",
    )
    .expect("parse");
    let err = cal.check(&target(PAIR)).expect_err("no tpu");
    assert_eq!(
        err.to_string(),
        "cal.toml:2: measurement.device: target `pair` has no device or device kind `tpu`"
    );
}

/// A target written in code: every relu on an `acc` device takes 42 us, and `neg` is refused.
struct Plugin(TargetSpec);

impl Target for Plugin {
    fn spec(&self) -> &TargetSpec {
        &self.0
    }
    fn op_time(&self, graph: &Graph, op: OpId, device: &Device, _work: &Work) -> Option<f64> {
        (device.kind == "acc" && graph.op(op).op.name() == "relu").then_some(42e-6)
    }
    fn unsupported(&self, graph: &Graph, op: OpId, _device: &Device) -> Option<String> {
        (graph.op(op).op.name() == "neg").then(|| "no negation unit".to_string())
    }
    fn transfer_time(&self, _from: usize, _to: usize, bytes: f64) -> Option<f64> {
        Some(bytes * 1e-9)
    }
}

#[test]
fn plugin_hooks_override_the_model() {
    let plugin = Plugin(target(PAIR));
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("b")
  %1 = neg %0 : f32[1000] device("a")
  return %0, %1
}"#,
    );
    let cost = CostModel::new(&plugin, None);
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 1).expect("work"),
        OpTime::Time {
            seconds: 42e-6,
            source: TimeSource::Target
        }
    );
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work").seconds(),
        Some(1e-3)
    );
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 1), 0).expect("work"),
        OpTime::Unsupported("no negation unit".into())
    );
    assert_close(cost.transfer_time(0, 1, 4000.0).expect("hook"), 4e-6);
    // A calibration measurement beats the plugin's own time.
    let cal = Calibration::parse(
        "[[measurement]]\ndevice = \"b\"\nop = \"relu\"\nseconds = 7e-6\n",
        "cal.toml",
    )
    .expect("parse");
    let cost = CostModel::new(&plugin, Some(&cal));
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 1).expect("work").seconds(),
        Some(7e-6)
    );
}

#[test]
fn duplicate_registered_target_is_refused() {
    let spec = target(PAIR);
    let mut mcm = spec.clone();
    mcm.name = "mcm-2x2".into();
    let err = tessera_targets::register_target(std::sync::Arc::new(mcm)).expect_err("builtin");
    assert!(matches!(err, TargetError::DuplicateTarget { .. }));
    let mut mine = spec;
    mine.name = "pair-registered".into();
    tessera_targets::register_target(std::sync::Arc::new(mine.clone())).expect("first");
    tessera_targets::register_target(std::sync::Arc::new(mine)).expect_err("second");
    let found = tessera_targets::resolve("pair-registered", &[]).expect("found");
    assert_eq!(found.spec().devices.len(), 2);
}

#[test]
fn readme_calibration_example_parses() {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("```toml\n[[measurement]]")
        .expect("a calibration block")
        + "```toml\n".len();
    let len = readme[start..].find("```").expect("closed");
    let cal = Calibration::parse(&readme[start..start + len], "cal.toml").expect("README example");
    assert_eq!(cal.len(), 2);
    cal.check(&tessera_targets::lookup("hetero-cpu-gpu", &[]).expect("built-in"))
        .expect("gpu0 and the gpu kind exist");
}

// Review tests: odd graphs (empty, only constants, outputs that are inputs or constants,
// duplicate outputs, unused results of multi-result ops, a value used twice by one op),
// memory under link contention, huge shapes, roofline edge cases, routes.

const PAIR0: &str = r#"
name = "pair"
host = "a"
[[device]]
name = "a"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "b"
kind = "acc"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 2e6 }
lowering = "cpu"
[[interconnect.link]]
a = "a"
b = "b"
bandwidth = 4e6
latency = 0
"#;

/// `h` (host) - `m` - `z` in a line, 4 MB/s links without latency, 1 MFLOP/s each.
const LINE: &str = r#"
name = "line"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "m"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "z"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "h"
b = "m"
bandwidth = 4e6
latency = 0
[[interconnect.link]]
a = "m"
b = "z"
bandwidth = 4e6
latency = 0
"#;

fn sim(spec: &TargetSpec, g: &Graph, samples: usize) -> Result<SimReport, SimError> {
    let cost = CostModel::new(spec, None);
    let placement = placement_from_graph(g, spec, Some(0))?;
    simulate(
        g,
        &cost,
        &placement,
        &SimOptions {
            samples: Some(samples),
        },
    )
}

#[test]
fn empty_and_const_only_graphs_do_not_panic() {
    let spec = target(PAIR0);
    let g = graph("graph @g() {\n  return\n}");
    let r = sim(&spec, &g, 8).expect("sim");
    assert_eq!(r.latency, 0.0);
    assert_eq!(r.transfers, 0);
    assert!(r.to_string().contains("unbounded"));

    let g = graph(
        "const @c : f32[2] = [1.0, 2.0]\ngraph @g() {\n  %c = const @c : f32[2]\n  return %c\n}",
    );
    let r = sim(&spec, &g, 8).expect("sim");
    assert_eq!(r.latency, 0.0);
}

#[test]
fn a_constant_output_is_held_on_the_host() {
    // Outputs end on the host and weights are resident where they are used: a constant that
    // is a graph output is a weight on the host.
    let spec = target(PAIR0);
    let g = graph(
        "const @c : f32[2] = [1.0, 2.0]\ngraph @g() {\n  %c = const @c : f32[2]\n  return %c\n}",
    );
    let r = sim(&spec, &g, 1).expect("sim");
    assert_eq!(r.devices[0].weights, 8, "{r:?}");
    assert_eq!(r.devices[0].peak_memory, 8, "{r:?}");
}

#[test]
fn input_returned_as_output_and_duplicate_outputs() {
    let spec = target(PAIR0);
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("b")
  return %x, %0, %0, %x
}"#,
    );
    let r = sim(&spec, &g, 4).expect("sim");
    // x: a -> b 1 ms, relu 0.5 ms, back 1 ms. One transfer each way, not two.
    assert_eq!(r.transfers, 2);
    assert_close(r.latency, 2.5e-3);
    // a holds x throughout (an output) and then the result.
    assert_eq!(r.devices[0].peak_memory, 8000);
    assert_eq!(r.devices[1].peak_memory, 8000);
}

#[test]
fn value_used_twice_by_one_op_moves_once() {
    let spec = target(PAIR0);
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = add %x, %x : f32[1000] device("b")
  %1 = mul %0, %0 : f32[1000] device("b")
  return %1
}"#,
    );
    let r = sim(&spec, &g, 1).expect("sim");
    assert_eq!(r.transfers, 2);
    // in 1 ms, add 0.5, mul 0.5, out 1 ms.
    assert_close(r.latency, 3e-3);
    // b: x and the sum, then the sum and the product: never three values.
    assert_eq!(r.devices[1].peak_memory, 8000);
    // a: x until it leaves, then the output.
    assert_eq!(r.devices[0].peak_memory, 4000);
}

#[test]
fn unused_results_of_split_and_top_k_are_freed() {
    let spec = target(PAIR0);
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %lo, %hi = split %x {axis = 0, sizes = [500, 500]} : f32[500], f32[500]
  %v, %i = top-k %lo {axis = 0, k = 10, largest = true} : f32[10], i64[10]
  %0 = relu %v : f32[10]
  %1 = relu %0 : f32[10]
  return %1
}"#,
    );
    let r = sim(&spec, &g, 1).expect("sim");
    // On a: x 4000 + lo 2000 + hi 2000 during the split; hi is freed at its end, x too.
    assert_eq!(r.devices[0].peak_memory, 8000);
    // Everything is on the host: nothing travels.
    assert_eq!(r.transfers, 0);
}

#[test]
fn op_on_host_consumes_input_and_output_comes_back() {
    let spec = target(PAIR0);
    let g = graph(
        r#"graph @g(%x: f32[1000]) {
  %0 = relu %x : f32[1000] device("a")
  %1 = relu %0 : f32[1000] device("b")
  %2 = add %1, %x : f32[1000] device("b")
  return %2, %0
}"#,
    );
    let r = sim(&spec, &g, 8).expect("sim");
    assert_eq!(r.transfers, 3);
    let again = sim(&spec, &g, 8).expect("sim");
    assert_eq!(r, again, "deterministic");
}

#[test]
fn a_transfer_waiting_for_a_channel_is_not_allocated_early() {
    // y waits (h -> m is busy with `big` for 10 ms) before it travels to z; z holds x and
    // relu(x) early on and only a scalar when y arrives. y must count from its transfer's
    // start, not from when it became ready.
    let spec = target(LINE);
    let g = graph(
        r#"graph @g(%x: f32[1000], %big: f32[10000], %y: f32[1]) {
  %0 = relu %x : f32[1000] device("z")
  %1 = reduce-sum %0 {axes = [0], keep-dims = true} : f32[1] device("z")
  %2 = relu %big : f32[10000] device("m")
  %3 = add %1, %y : f32[1] device("z")
  return %3, %2
}"#,
    );
    let r = sim(&spec, &g, 1).expect("sim");
    // x 0-1 ms (h->m->z), big 1-11 ms on h->m, y 11-11.001 ms. On z at 1-2 ms: x + relu(x).
    assert_eq!(r.devices[2].peak_memory, 8000, "{:?}", r.devices[2]);
}

#[test]
fn huge_values_are_an_error_not_a_panic() {
    // Each value is 2^62 bytes (the verifier allows up to 2^63 - 1): four live at once on
    // the host overflow a u64 byte count.
    let spec = target(PAIR0);
    let t = "f32[1152921504606846976]";
    let g = graph(&format!(
        "graph @g(%x: {t}, %y: {t}, %z: {t}, %w: {t}) {{\n  %0 = add %x, %y : {t} device(\"a\")\n  %1 = add %z, %w : {t} device(\"a\")\n  return %0, %1\n}}"
    ));
    assert!(tessera_ir::verify::verify(&g).is_ok(), "valid");
    let r = std::panic::catch_unwind(|| sim(&spec, &g, 1));
    match r {
        Ok(Ok(r)) => panic!("a peak past u64 was reported: {:?}", r.devices[0]),
        Ok(Err(e)) => assert!(e.to_string().contains("too large"), "{e}"),
        Err(_) => panic!("panicked on a huge shape"),
    }
}

#[test]
fn zero_work_op_costs_its_overhead_only() {
    let spec = target(&PAIR0.replace(
        "compute = { f32 = 2e6 }",
        "compute = { f32 = 2e6 }\nop_overhead = 1e-6",
    ));
    let g = graph(
        r#"graph @g(%x: f32[4, 250]) {
  %0 = reshape %x {shape = [1000]} : f32[1000] device("b")
  return %0
}"#,
    );
    let cost = CostModel::new(&spec, None);
    let op = g.ops()[0];
    assert_eq!(cost.op_time(&g, op, 1).expect("work").seconds(), Some(1e-6));
}

#[test]
fn switch_device_runs_nothing() {
    let spec = target(
        r#"
host = "g0"
[[device]]
name = "g"
count = 2
kind = "gpu"
memory = 1000
memory_bandwidth = 1e9
compute = { f32 = 1e9 }
lowering = "cpu"
[interconnect]
topology = "switch"
devices = "g"
bandwidth = 1e9
latency = 0
"#,
    );
    let g = graph(
        r#"graph @g(%x: f32[4, 250]) {
  %0 = reshape %x {shape = [1000]} : f32[1000]
  return %0
}"#,
    );
    let cost = CostModel::new(&spec, None);
    let sw = spec.device_index("switch").expect("switch");
    assert!(matches!(
        cost.op_time(&g, g.ops()[0], sw).expect("work"),
        OpTime::Unsupported(_)
    ));
    // g0 -> g1 crosses the switch: g0->switch forward, then switch->g1 backward.
    assert_eq!(cost.channels(0, 1).expect("route"), &[0, 3]);
    assert_eq!(cost.channels(1, 0).expect("route"), &[2, 1]);
}

/// The channels of `spec.route(from, to)`, walked by hand.
fn route_channels(spec: &TargetSpec, from: usize, to: usize) -> Option<Vec<usize>> {
    let links = spec
        .route(&spec.devices[from].name, &spec.devices[to].name)
        .ok()?;
    let mut at = spec.devices[from].name.clone();
    Some(
        links
            .into_iter()
            .map(|li| {
                let l = &spec.links[li];
                let forward = l.a == at;
                at = if forward { l.b.clone() } else { l.a.clone() };
                2 * li + usize::from(!forward)
            })
            .collect(),
    )
}

#[test]
fn cost_model_routes_are_the_targets_routes() {
    let mut specs = tessera_targets::builtin_targets();
    // Parallel links, a torus, an island (its link to t0 removed after parsing: a file must
    // connect it) and an explicit link to a generated switch.
    let mut islanded = target(
        r#"
host = "t0"
[[device]]
name = "t"
count = 9
kind = "npu"
memory = 1000
memory_bandwidth = 1e9
compute = { f32 = 1e9 }
lowering = "cpu"
[[device]]
name = "island"
kind = "npu"
memory = 1000
memory_bandwidth = 1e9
lowering = "cpu"
[[interconnect.link]]
a = "t8"
b = "t0"
bandwidth = 1e9
latency = 0
[[interconnect.link]]
a = "t0"
b = "t8"
bandwidth = 2e9
latency = 0
[[interconnect.link]]
a = "island"
b = "t0"
bandwidth = 1e9
latency = 0
[interconnect]
topology = "torus2d"
devices = "t"
rows = 3
cols = 3
bandwidth = 1e9
latency = 1e-6
"#,
    );
    assert_eq!(islanded.links[2].a, "island");
    islanded.links.remove(2);
    specs.push(islanded);
    for spec in &specs {
        let cost = CostModel::new(spec, None);
        let n = spec.devices.len();
        for from in 0..n {
            for to in 0..n {
                let expected = route_channels(spec, from, to);
                let actual = cost.channels(from, to).ok().map(<[usize]>::to_vec);
                assert_eq!(actual, expected, "{}: {from} -> {to}", spec.name);
            }
        }
    }
}

#[test]
fn cost_model_of_a_large_ring_is_quick() {
    // 400 devices: one search per pair took minutes.
    let spec = target(
        r#"
host = "c0"
[[device]]
name = "c"
count = 400
kind = "cpu"
memory = 1000
memory_bandwidth = 1e9
compute = { f32 = 1e9 }
lowering = "cpu"
[interconnect]
topology = "ring"
devices = "c"
bandwidth = 1e9
latency = 0
"#,
    );
    let started = std::time::Instant::now();
    let cost = CostModel::new(&spec, None);
    assert_eq!(cost.channels(0, 200).expect("route").len(), 200);
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn calibration_operand_types_are_normalized() {
    // `f32[08, +4]` is accepted as a static type; it must then match `f32[8, 4]`.
    let spec = target(PAIR0);
    let cal = tessera_targets::Calibration::parse(
        "[[measurement]]\ndevice = \"a\"\nop = \"relu\"\noperands = [\"f32[08, +4]\"]\nseconds = 5\n",
        "cal.toml",
    )
    .expect("valid");
    let g = graph("graph @g(%x: f32[8, 4]) {\n  %0 = relu %x : f32[8, 4]\n  return %0\n}");
    let cost = CostModel::new(&spec, Some(&cal));
    assert_eq!(
        cost.op_time(&g, g.ops()[0], 0).expect("work").seconds(),
        Some(5.0)
    );
}

#[test]
fn widest_route_then_least_latency_among_equally_wide() {
    // s -> d in 3 hops, via a (s-a, a-p 10 GB/s, 2.5 us each) or via b (s-b, b-p 5 GB/s,
    // 0.5 us each), then p-d 5 GB/s. Both routes are 5 GB/s wide; via b has 1 us of latency
    // against 5 us via a, so the documented rule picks b (p keeps both routes on its
    // width/latency front).
    let spec = target(
        r#"
host = "s"
[[device]]
name = "s"
kind = "x"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "a"
kind = "x"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "b"
kind = "x"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "p"
kind = "x"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[device]]
name = "d"
kind = "x"
memory = 1
memory_bandwidth = 1
lowering = "cpu"
[[interconnect.link]]
a = "s"
b = "a"
bandwidth = 10e9
latency = 2.5e-6
[[interconnect.link]]
a = "a"
b = "p"
bandwidth = 10e9
latency = 2.5e-6
[[interconnect.link]]
a = "s"
b = "b"
bandwidth = 5e9
latency = 0.5e-6
[[interconnect.link]]
a = "b"
b = "p"
bandwidth = 5e9
latency = 0.5e-6
[[interconnect.link]]
a = "p"
b = "d"
bandwidth = 5e9
latency = 0
"#,
    );
    assert_eq!(spec.route("s", "d").expect("route"), vec![2, 3, 4]);
}

/// A plugin whose hooks answer nonsense: NaN for ops, a negative transfer time.
struct Broken(TargetSpec);

impl Target for Broken {
    fn spec(&self) -> &TargetSpec {
        &self.0
    }
    fn op_time(&self, _: &Graph, _: OpId, _: &Device, _: &Work) -> Option<f64> {
        Some(f64::NAN)
    }
    fn transfer_time(&self, _: usize, _: usize, _: f64) -> Option<f64> {
        Some(-1.0)
    }
}

#[test]
fn nonsense_from_plugin_hooks_is_not_used() {
    let plugin = Broken(target(PAIR));
    let g = graph("graph @g(%x: f32[1000]) {\n  %0 = relu %x : f32[1000]\n  return %0\n}");
    let cost = CostModel::new(&plugin, None);
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work"),
        OpTime::Unsupported(
            "target `pair` gave NaN s for `relu` on a; times must be finite and not negative"
                .into()
        )
    );
    // The link model answers instead: 0.1 ms + 4000 B / 4 MB/s.
    assert_close(cost.transfer_time(0, 1, 4000.0).expect("route"), 1.1e-3);
}

/// A host `h` and two chips `c0`, `c1`, each pair joined by a 1 MB/s link without latency;
/// 1 MFLOP/s everywhere and memory so fast that elementwise ops are compute-bound.
const TRIANGLE: &str = r#"
name = "triangle"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "c"
count = 2
kind = "chip"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "h"
b = "c0"
bandwidth = 1e6
latency = 0
[[interconnect.link]]
a = "h"
b = "c1"
bandwidth = 1e6
latency = 0
[[interconnect.link]]
a = "c0"
b = "c1"
bandwidth = 1e6
latency = 0
"#;

#[test]
fn a_transfer_op_is_free_and_its_edge_is_charged_once() {
    let spec = target(TRIANGLE);
    let g = graph(
        r#"graph @g(%x: f32[250]) {
  %y = relu %x : f32[250] device("c0")
  %t = transfer %y {from = "c0", to = "c1"} : f32[250] device("c1")
  %z = relu %t : f32[250] device("c1")
  return %z
}"#,
    );
    let cost = CostModel::new(&spec, None);
    // No op overhead either: exactly zero, from no rule but "free".
    assert_eq!(
        cost.op_time(&g, nth_op(&g, 1), 2).expect("work"),
        OpTime::Time {
            seconds: 0.0,
            source: TimeSource::Free
        }
    );
    let r = sim(&spec, &g, 1).expect("sim");
    // h -> c0: 1000 B / 1 MB/s = 1 ms; relu 250 / 1e6 = 0.25 ms; c0 -> c1 (the edge into the
    // transfer) 1 ms; transfer 0; relu 0.25 ms; c1 -> h 1 ms.
    assert_close(r.latency, 3.5e-3);
    assert_eq!(r.transfers, 3);
    assert_eq!((r.devices[1].ops, r.devices[2].ops), (1, 2));
    assert_close(r.devices[2].busy, 0.25e-3);
    assert_close(r.links[2].busy[0], 1e-3);
    assert_close(r.links[2].busy[1], 0.0);
}

#[test]
fn mesh_ops_run_on_every_mesh_device_and_collectives_on_the_links() {
    let g = graph(
        r#"mesh @m = [2] devices("c0", "c1")

graph @g(%x: f32[4, 250] sharded[[0], []]) {
  %y = relu %x : f32[4, 250] sharded[[0], []] device("@m")
  %a = all-gather %y {axes = [0]} : f32[4, 250] device("@m")
  return %a
}"#,
    );
    tessera_ir::verify::verify(&g).expect("verifies");
    // The chips overlap transfers with compute (the default), then not.
    let no_overlap = TRIANGLE.replace(
        "name = \"c\"\ncount = 2",
        "name = \"c\"\ncount = 2\noverlap = false",
    );
    assert_ne!(no_overlap, TRIANGLE);
    for (text, overlap) in [(TRIANGLE, true), (no_overlap.as_str(), false)] {
        let spec = target(text);
        let placement = placement_from_graph(&g, &spec, None).expect("placed");
        assert_eq!(placement[nth_op(&g, 0).index()], ON_MESH);
        let r = sim(&spec, &g, 1).expect("sim");
        // Each chip receives its half of x (2000 B) over its own link: 2 ms. relu does half
        // of 1000 flops on each: 0.5 ms. The all-gather of 4000 B over 2 devices is one ring
        // step of 2000 B each way on c0 - c1: 2 ms. The replicated result goes c0 -> h: 4 ms.
        // A chip that cannot overlap receives its half before relu computes: 2 ms more.
        assert_close(r.latency, if overlap { 8.5e-3 } else { 10.5e-3 });
        assert_eq!(r.transfers, 3);
        for chip in [1, 2] {
            // The gather keeps a chip busy only when the chip cannot overlap it.
            if overlap {
                assert_eq!(r.devices[chip].ops, 1, "overlap");
                assert_close(r.devices[chip].busy, 0.5e-3);
            } else {
                // relu with its 2 ms receive, the gather, and c0 sends the result (4 ms).
                assert_eq!(r.devices[chip].ops, 2, "no overlap");
                let send = if chip == 1 { 4e-3 } else { 0.0 };
                assert_close(r.devices[chip].busy, 2e-3 + 0.5e-3 + 2e-3 + send);
            }
        }
        assert_close(r.links[0].busy[0], 2e-3 + 0.0);
        assert_close(r.links[0].busy[1], 4e-3);
        assert_close(r.links[1].busy[0], 2e-3);
        assert_close(r.links[2].busy[0], 2e-3);
        assert_close(r.links[2].busy[1], 2e-3);
        // One ring step: each chip sends its 2000 B half to the other.
        assert_close(r.links[2].bytes[0], 2000.0);
        assert_close(r.links[2].bytes[1], 2000.0);
        // Memory on c0: its half of x and of y (2000 B each), then the gathered 4000 B.
        assert_eq!(r.devices[1].peak_memory, 2000 + 4000);
    }
}

/// A device that overlaps transfers with compute spends no time on a collective; one that
/// does not is busy for the collective's whole time.
#[test]
fn a_collective_occupies_only_a_device_that_cannot_overlap_it() {
    let text = |reduce: bool| {
        let (op, out) = if reduce {
            (
                "  %s = all-reduce %p {axes = [0]} : f32[2, 500] device(\"@m\")\n",
                "%s",
            )
        } else {
            ("", "%p")
        };
        format!(
            r#"mesh @m = [2] devices("c0", "c1")

graph @g(%x: f32[2, 500] sharded[[], [0]], %w: f32[500, 500] sharded[[0], []], %z: f32[2000] sharded[[0]]) {{
  %p = matmul %x, %w : f32[2, 500] device("@m")
{op}  %r = relu %z : f32[2000] sharded[[0]] device("@m")
  return {out}, %r
}}"#
        )
    };
    let no_overlap = TRIANGLE.replace(
        "name = \"c\"\ncount = 2",
        "name = \"c\"\ncount = 2\noverlap = false",
    );
    let busy = |target_text: &str, reduce: bool| {
        let g = graph(&text(reduce));
        tessera_ir::verify::verify(&g).expect("verifies");
        let r = sim(&target(target_text), &g, 1).expect("sim");
        (r.devices[1].busy, r.devices[1].ops)
    };
    // Overlapping chips: the all-reduce adds no busy time and no op.
    let (with, ops_with) = busy(TRIANGLE, true);
    let (without, ops_without) = busy(TRIANGLE, false);
    assert_close(with, without);
    assert_eq!((ops_with, ops_without), (2, 2));
    // Chips that cannot overlap: the all-reduce of 4000 B over two chips, two ring steps of
    // 2000 B at 1 MB/s, keeps each busy 4 ms more.
    let (with, ops_with) = busy(&no_overlap, true);
    let (without, ops_without) = busy(&no_overlap, false);
    assert_close(with - without, 4e-3);
    assert_eq!((ops_with, ops_without), (3, 2));
}

#[test]
fn sharded_op_times_and_mesh_collectives() {
    // The roofline device of `roofline_compute_and_memory_bound`: a matmul of 20000 flops
    // and 8400 B split two ways does 10000 flops (20 us at half efficiency) and 4200 B
    // (4.2 us) per device, plus the full 1 us overhead.
    let spec = target(
        r#"
host = "d"
[[device]]
name = "d"
kind = "x"
memory = 1000
memory_bandwidth = 1e9
compute = { f32 = 1e9 }
lowering = "cpu"
efficiency = { matmul = 0.5 }
op_overhead = 1e-6
"#,
    );
    let g = graph(
        "graph @g(%x: f32[10, 100], %w: f32[100, 10]) {
  %0 = matmul %x, %w : f32[10, 10]
  return %0
}",
    );
    let cost = CostModel::new(&spec, None);
    let half = cost.op_time_sharded(&g, nth_op(&g, 0), 0, 2).expect("work");
    assert_close(half.seconds().expect("time"), 21e-6);
    assert_eq!(
        cost.op_time_sharded(&g, nth_op(&g, 0), 0, 1).expect("work"),
        cost.op_time(&g, nth_op(&g, 0), 0).expect("work")
    );

    // A 2x2 mesh on the 2x2 mesh2d target (rows c0-c1, c2-c3; columns c0-c2, c1-c3).
    let spec = target(&RING4.replace(
        "topology = \"ring\"",
        "topology = \"mesh2d\"\nrows = 2\ncols = 2",
    ));
    let cost = CostModel::new(&spec, None);
    let mesh = tessera_ir::Mesh {
        name: "grid".into(),
        shape: vec![2, 2],
        devices: vec!["c0".into(), "c1".into(), "c2".into(), "c3".into()],
    };
    let devs = [0, 1, 2, 3];
    // Over mesh axis 1: two rings (c0 c1) and (c2 c3) at once on different links; 4 MB per
    // device, chunks of 2 MB: 2 steps of 1 us + 2 ms.
    let row = tessera_ir::Op::AllReduce { axes: vec![1] };
    assert_close(
        cost.collective_time(&row, &mesh, &devs, 4e6).expect("mesh"),
        2.0 * (1e-6 + 2e-3),
    );
    assert_eq!(
        cost.collective_channels(&mesh, &devs, &[1])
            .expect("mesh")
            .len(),
        4
    );
    // Over both axes: the ring c0 c1 c2 c3 of `ring_collectives_share_links_on_a_mesh`.
    let all = tessera_ir::Op::AllReduce { axes: vec![0, 1] };
    assert_close(
        cost.collective_time(&all, &mesh, &devs, 4e6).expect("mesh"),
        6.0 * (2e-6 + 2.0 * 1e6 / 1e9),
    );
    // An all-gather of 4 MB over mesh axis 0: rings (c0 c2) and (c1 c3), one step of 2 MB.
    let gather = tessera_ir::Op::AllGather { axes: vec![0] };
    assert_close(
        cost.collective_time(&gather, &mesh, &devs, 4e6)
            .expect("mesh"),
        1e-6 + 2e-3,
    );
    // A reduce-scatter is half the all-reduce: over axis 1, one step of 2 MB; over both
    // axes, 3 steps of the ring's (an all-reduce's 6).
    let scatter = tessera_ir::Op::ReduceScatter { axes: vec![1] };
    assert_close(
        cost.collective_time(&scatter, &mesh, &devs, 4e6)
            .expect("mesh"),
        1e-6 + 2e-3,
    );
    let scatter = tessera_ir::Op::ReduceScatter { axes: vec![0, 1] };
    assert_close(
        cost.collective_time(&scatter, &mesh, &devs, 4e6)
            .expect("mesh"),
        3.0 * (2e-6 + 2.0 * 1e6 / 1e9),
    );
    // An all-to-all of a 4 MB block per device over both axes: each device sends 1 MB to each
    // of the 3 others, one per step of the ring.
    let moved = tessera_ir::Op::AllToAll { axes: vec![0, 1] };
    assert_close(
        cost.collective_time(&moved, &mesh, &devs, 4e6)
            .expect("mesh"),
        3.0 * (2e-6 + 2.0 * 1e6 / 1e9),
    );
}

#[test]
fn an_unknown_mesh_device_is_an_error() {
    let spec = target(TRIANGLE);
    let g = graph(
        r#"mesh @m = [2] devices("c0", "c9")

graph @g(%x: f32[2]) {
  %y = relu %x : f32[2] device("@m")
  return %y
}"#,
    );
    let err = sim(&spec, &g, 1).expect_err("no c9");
    assert_eq!(err.to_string(), "target `triangle` has no device `c9`");
}

#[test]
fn a_whole_value_enters_the_mesh_directly_or_through_its_first_device() {
    let g = graph(
        r#"mesh @m = [2] devices("c0", "c1")

graph @g(%x: f32[250]) {
  %y = relu %x : f32[250] device("@m")
  return %y
}"#,
    );
    // Equal links: x goes h -> c0 and h -> c1 at once (1 ms each); relu repeats the whole
    // 0.25 ms on each chip; y leaves from c0 (1 ms).
    let spec = target(TRIANGLE);
    let r = sim(&spec, &g, 1).expect("sim");
    assert_close(r.latency, 2.25e-3);
    assert_eq!(r.transfers, 3);
    assert_close(r.links[1].busy[0], 1e-3);
    assert_close(r.links[2].busy[0], 0.0);
    for chip in [1, 2] {
        assert_close(r.devices[chip].busy, 0.25e-3);
    }
    // A slow link to c1 (4 ms for x): x reaches c1 through c0 instead (1 ms + 1 ms); relu
    // on c1 ends at 2.25 ms, as does y's trip from c0 to the host.
    let slow = TRIANGLE.replacen(
        "b = \"c1\"\nbandwidth = 1e6",
        "b = \"c1\"\nbandwidth = 0.25e6",
        1,
    );
    let spec = target(&slow);
    let r = sim(&spec, &g, 1).expect("sim");
    assert_close(r.latency, 2.25e-3);
    assert_close(r.links[1].busy[0], 0.0);
    assert_close(r.links[2].busy[0], 1e-3);
}

#[test]
fn split_weights_are_resident_as_their_pieces() {
    let spec = target(TRIANGLE);
    let g = graph(
        r#"const @w : f32[2, 4] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
mesh @m = [2] devices("c0", "c1")

graph @g(%x: f32[3, 2]) {
  %w = const @w : f32[2, 4] sharded[[], [0]]
  %y = matmul %x, %w : f32[3, 4] sharded[[], [0]] device("@m")
  %a = all-gather %y {axes = [0]} : f32[3, 4] device("@m")
  return %a
}"#,
    );
    tessera_ir::verify::verify(&g).expect("verifies");
    let r = sim(&spec, &g, 1).expect("sim");
    // 32 B of weights, 16 B on each chip.
    assert_eq!((r.devices[1].weights, r.devices[2].weights), (16, 16));
}

#[test]
fn an_explicit_transfer_op_costs_what_the_implicit_transfer_costs() {
    // The same placement with and without an explicit `transfer` op: the op is the arrival of
    // the value, so latency, busy times and peak memory are all equal.
    let spec = tessera_targets::builtin_target("mcm-2x2")
        .expect("built in")
        .expect("valid");
    let cost = CostModel::new(&spec, None);
    let implicit = graph(
        "graph @g(%x: f32[1000]) {\n  %y = relu %x : f32[1000] device(\"chip0\")\n  %z = tanh %y : f32[1000] device(\"chip0\")\n  return %z\n}\n",
    );
    let explicit = graph(
        "graph @g(%x: f32[1000]) {\n  %t = transfer %x {from = \"cpu0\", to = \"chip0\"} : f32[1000] device(\"chip0\")\n  %y = relu %t : f32[1000] device(\"chip0\")\n  %z = tanh %y : f32[1000] device(\"chip0\")\n  return %z\n}\n",
    );
    let run = |g: &Graph| {
        let p = placement_from_graph(g, &spec, None).expect("placed");
        simulate(g, &cost, &p, &SimOptions { samples: Some(4) }).expect("simulates")
    };
    let (a, b) = (run(&implicit), run(&explicit));
    assert_eq!(a.latency, b.latency);
    assert_eq!(a.period, b.period);
    for (da, db) in a.devices.iter().zip(&b.devices) {
        assert_eq!(da.busy, db.busy, "{}", da.name);
        assert_eq!(da.peak_memory, db.peak_memory, "{}", da.name);
    }
}

/// A state updated split on a mesh and gathered whole again (the optimizer run ZeRO-style,
/// its next value made by an all-gather): on chips that overlap the gather with compute, its
/// copy on each chip is an event, not an op, and the next step's readers still wait for it.
/// One step: x's halves reach the chips (2 ms), the product and the update (500 flops each
/// per chip: 0.5 ms each), the gather (one ring step of 2000 B each way: 2 ms): 5 ms. In a
/// stream the next step's x moves during this one, so the period is the rest after the
/// state is read: 3 ms (it was 2 ms, x's link, when the gather's events did not count as the
/// state's writers).
#[test]
fn a_state_gathered_off_a_mesh_chains_the_steps() {
    let spec = target(TRIANGLE);
    let values = vec!["0.5"; 1000].join(", ");
    let g = graph(&format!(
        r#"const @w : f32[4, 250] = [{values}]
mesh @m = [2] devices("c0", "c1")

graph @g(%x: f32[4, 250] sharded[[0], []], %w: f32[4, 250] state(init = @w, next = "w")) {{
  %s = all-slice %w {{axes = [0]}} : f32[4, 250] sharded[[0], []] device("@m")
  %y = mul %x, %s : f32[4, 250] sharded[[0], []] device("@m")
  %u = sub %s, %y : f32[4, 250] sharded[[0], []] device("@m")
  %a = all-gather %u {{axes = [0]}} : f32[4, 250] device("@m")
  return %a as "w"
}}"#
    ));
    tessera_ir::verify::verify(&g).expect("verifies");
    let r = sim(&spec, &g, 16).expect("sim");
    assert_close(r.latency, 5e-3);
    assert_close(r.period, 3e-3);
}

/// Two nodes of two devices (`n0a n0b`, `n1a n1b`, 10 MB/s inside a node), joined by one
/// 1 MB/s link `n0b - n1a`; no latencies.
const TWO_NODES: &str = r#"
name = "two-nodes"
host = "h"
[[device]]
name = "h"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "n0a"
kind = "gpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "n0b"
kind = "gpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "n1a"
kind = "gpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "n1b"
kind = "gpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[interconnect.link]]
a = "h"
b = "n0a"
bandwidth = 1e6
latency = 0
[[interconnect.link]]
a = "n0a"
b = "n0b"
bandwidth = 1e7
latency = 0
[[interconnect.link]]
a = "n1a"
b = "n1b"
bandwidth = 1e7
latency = 0
[[interconnect.link]]
a = "n0b"
b = "n1a"
bandwidth = 1e6
latency = 0
"#;

/// An all-reduce of 4000 B over the four devices of two nodes. The flat ring (n0a n0b n1a
/// n1b) is 6 steps of 1000 B, each paced by the one 1 MB/s link between the nodes: 6 ms.
/// The hierarchical one: within each node a reduce-scatter and an all-gather, 2 steps of
/// 2000 B at 10 MB/s (0.4 ms), and across the nodes the two rails' all-reduces of their
/// 2000 B shards, 2 steps of 1000 B each, both rails' hops over the one link (2000 B per
/// step: 4 ms): 4.4 ms, the time taken. With a link per rail (a second 1 MB/s link `n0a - n1b`) the
/// rails no longer share: 0.4 + 2 ms.
#[test]
fn an_all_reduce_over_two_nodes_is_hierarchical_where_that_is_faster() {
    let spec = target(TWO_NODES);
    let cost = CostModel::new(&spec, None);
    let ring = [1, 2, 3, 4];
    assert_close(cost.all_reduce_time(&ring, 4000.0).expect("ring"), 4.4e-3);
    // The loads the simulator charges: channel 2 * link + direction (link 1: n0a - n0b,
    // 2: n1a - n1b, 3: n0b - n1a).
    let mesh = tessera_ir::Mesh {
        name: "m".into(),
        shape: vec![4],
        devices: vec!["n0a".into(), "n0b".into(), "n1a".into(), "n1b".into()],
    };
    let op = tessera_ir::Op::AllReduce { axes: vec![0] };
    assert_close(
        cost.collective_time(&op, &mesh, &ring, 4000.0)
            .expect("mesh"),
        4.4e-3,
    );
    let loads = cost
        .collective_loads(&op, &mesh, &ring, 4000.0)
        .expect("mesh");
    assert_eq!(
        loads.iter().map(|&(c, _)| c).collect::<Vec<_>>(),
        vec![2, 3, 4, 5, 6, 7]
    );
    // Within a node 4000 B each way, and 2000 B of the rail whose route runs through it
    // (n0a's rail reaches n1a through n0b); 4000 B each way between the nodes.
    for (c, bytes) in loads {
        assert_close(bytes, if c >= 6 { 4000.0 } else { 6000.0 });
    }
    // In the simulator: the mesh's relu, then the all-reduce; x (4000 B) also crosses to
    // n1a and n1b whole, 8000 B more on n0b -> n1a.
    let g = graph(
        r#"mesh @m = [4] devices("n0a", "n0b", "n1a", "n1b")

graph @g(%x: f32[1000]) {
  %y = relu %x : f32[1000] device("@m")
  %s = all-reduce %y {axes = [0]} : f32[1000] device("@m")
  return %s
}"#,
    );
    let r = sim(&spec, &g, 1).expect("sim");
    assert_close(r.links[3].bytes[0], 8000.0 + 4000.0);
    assert_close(r.links[3].bytes[1], 4000.0);
    // One level (every pair as wide): the flat ring.
    let flat = target(&TWO_NODES.replace("bandwidth = 1e7", "bandwidth = 1e6"));
    let cost = CostModel::new(&flat, None);
    assert_close(cost.all_reduce_time(&ring, 4000.0).expect("ring"), 6e-3);
    // A rail each.
    let rails = format!(
        "{TWO_NODES}[[interconnect.link]]\na = \"n0a\"\nb = \"n1b\"\nbandwidth = 1e6\nlatency = 0\n"
    );
    let spec = target(&rails);
    let cost = CostModel::new(&spec, None);
    assert_close(cost.all_reduce_time(&ring, 4000.0).expect("ring"), 2.4e-3);
}
