//! Placement at scale: long chains (no recursion or quadratic work that grows with the graph)
//! and many devices (no device-name scans per route hop). Each test checks the answer; each
//! took from tens of seconds to a stack overflow before.

use std::collections::BTreeMap;

use tessera_ir::{ElemType, Graph, Op, TensorType, UnaryOp};
use tessera_place::problem::{Device, Edge, Link, OpSpec};
use tessera_place::strategy::{self, SolveOptions};
use tessera_place::{Instance, Objective, Problem, eval};
use tessera_targets::{CostModel, TargetSpec, lookup, parse_target};

/// `x -> relu -> relu -> ... -> y`, `n` relus on `f32[4]`.
fn chain_graph(n: usize) -> Graph {
    let ty = TensorType::fixed(ElemType::F32, &[4]);
    let mut g = Graph::new("chain");
    let mut v = g.add_input(Some("x".into()), ty.clone());
    for _ in 0..n {
        let op = g.push_op(Op::Unary(UnaryOp::Relu), vec![v], vec![ty.clone()]);
        v = g.op(op).results[0];
    }
    g.set_outputs(vec![v]);
    g
}

/// A chain problem of `n` ops on one device.
fn chain_problem(n: usize) -> Problem {
    Problem {
        version: 1,
        name: "chain".into(),
        devices: vec![Device {
            name: "cpu0".into(),
            kind: "cpu".into(),
            memory: 1 << 40,
            unsupported_ops: Vec::new(),
            overlap: true,
        }],
        routers: Vec::new(),
        links: Vec::new(),
        ops: (0..n)
            .map(|o| OpSpec {
                name: format!("op{o}"),
                kind: "relu".into(),
                time: BTreeMap::from([("cpu".to_string(), 1e-6)]),
                memory: 16,
                colocate: None,
                pin: None,
                spmd: Vec::new(),
                splits: Vec::new(),
            })
            .collect(),
        edges: (1..n)
            .map(|o| Edge {
                from: o - 1,
                to: o,
                bytes: 16,
                tensor: 0,
                operand: 0,
            })
            .collect(),
        groups: Vec::new(),
        carried: Vec::new(),
    }
}

#[test]
fn exhaustive_search_on_a_200000_op_chain() {
    // One device: a single assignment, found depth first. The search recursed once per
    // unit and overflowed the stack at about 50,000 ops.
    let inst = Instance::new(chain_problem(200_000)).expect("valid");
    let opts = SolveOptions {
        objective: Objective::Throughput,
    };
    let (sol, name, _) = strategy::run("exhaustive", &inst, &opts).expect("a plan");
    assert_eq!(name, "exhaustive");
    assert!(sol.assign.iter().all(|&k| k == 0));
    let v = sol.value(&inst, Objective::Throughput);
    assert!((v - 0.2).abs() < 1e-9, "{v}");
}

#[test]
fn a_100000_op_chain_goes_through_placement_on_cpu() {
    // `auto` runs exhaustive (one device) and every other strategy, then the bound, the
    // explanations and the plan: none may recurse or scan quadratically along the chain.
    let n = 100_000;
    let mut g = chain_graph(n);
    let spec = lookup("cpu", &[]).expect("builtin");
    let cost = CostModel::new(&spec, None);
    let placed =
        tessera_place::pass::place_graph(&mut g, &cost, "auto", Objective::Throughput, true)
            .expect("placed");
    let plan = &placed.plan;
    // input, n relus, output.
    assert_eq!(plan.assignment.len(), n + 2);
    assert!(plan.assignment.iter().all(|a| a.device == "cpu0"));
    assert!(
        g.ops()
            .iter()
            .all(|&op| g.op(op).device.as_deref() == Some("cpu0"))
    );
    // One device: the period is the sum of the op times, and the bound proves it.
    let total: f64 = placed.built.problem.ops.iter().map(|o| o.time["cpu"]).sum();
    assert!(
        (plan.value - total).abs() <= total * 1e-9,
        "{} vs {total}",
        plan.value
    );
    assert!(plan.gap < 1e-6, "{}", plan.gap);
    assert_eq!(plan.explanations.len(), n + 2);
    plan.check_finite().expect("finite");
}

#[test]
fn many_ops_sharing_one_model_name_get_unique_names_in_linear_time() {
    // 20,000 ops all named `same` by their model location: the unique-name probe counted
    // from 1 for each (200 million probes); it resumes where it left off.
    let n = 20_000;
    let mut g = chain_graph(n);
    let ops: Vec<_> = g.ops().to_vec();
    for &op in &ops {
        g.op_mut(op).loc = Some("same".into());
    }
    let spec = lookup("cpu", &[]).expect("builtin");
    let cost = CostModel::new(&spec, None);
    let built = tessera_place::build::build(&g, &cost).expect("built");
    let names: Vec<&str> = built.problem.ops.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names[1], "same");
    assert_eq!(names[2], "same#1");
    assert_eq!(names[n], format!("same#{}", n - 1));
    let unique: std::collections::BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(unique.len(), names.len());
}

/// A ring of `n` devices (`d0` .. `d{n-1}`) as a target file.
fn ring_target(n: usize) -> TargetSpec {
    let src = format!(
        "host = \"d0\"\n[[device]]\nname = \"d\"\ncount = {n}\nkind = \"chip\"\nmemory = 1e9\n\
         memory_bandwidth = 1e12\ncompute = {{ f32 = 1e12 }}\nlowering = \"chiplet\"\n\
         [interconnect]\ntopology = \"ring\"\ndevices = \"d\"\nbandwidth = 1e10\nlatency = 1e-7\n"
    );
    parse_target(&src, "ring.toml").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_400_device_ring_is_placed_with_the_targets_routes() {
    // Building the route tables scanned device names at every hop of every route (18 s in
    // `tessera place`); routes are trees by device index now.
    let n = 400;
    let spec = ring_target(n);
    let p = Problem {
        version: 1,
        name: "ring".into(),
        devices: spec
            .devices
            .iter()
            .map(|d| Device {
                name: d.name.clone(),
                kind: "chip".into(),
                memory: 1 << 30,
                unsupported_ops: Vec::new(),
                overlap: true,
            })
            .collect(),
        routers: Vec::new(),
        links: spec.links.iter().map(Link::from).collect(),
        ops: (0..12)
            .map(|o| OpSpec {
                name: format!("op{o}"),
                kind: "matmul".into(),
                time: BTreeMap::from([("chip".to_string(), 1e-3)]),
                memory: 1000,
                colocate: None,
                pin: (o == 0 || o == 11).then(|| "d0".to_string()),
                spmd: Vec::new(),
                splits: Vec::new(),
            })
            .collect(),
        edges: (1..12)
            .map(|o| Edge {
                from: o - 1,
                to: o,
                bytes: 1_000_000,
                tensor: 0,
                operand: 0,
            })
            .collect(),
        groups: Vec::new(),
        carried: Vec::new(),
    };
    let inst = Instance::new(p).expect("valid");
    // The instance's routes are the target's, channel for channel (both ways round the ring).
    let router = spec.router();
    for (a, b) in [(0, 1), (0, 200), (0, 399), (5, 250), (399, 0), (123, 124)] {
        let links = spec
            .route(&spec.devices[a].name, &spec.devices[b].name)
            .expect("route");
        let mut at = a;
        let mut want: Vec<usize> = links
            .iter()
            .map(|&li| {
                let (x, y) = router.link_ends(li).expect("ends");
                let forward = x == at;
                at = if forward { y } else { x };
                2 * li + usize::from(!forward)
            })
            .collect();
        want.reverse();
        let got: Vec<usize> = inst.route_channels(a, b).collect();
        assert_eq!(got, want, "{a} -> {b}");
        assert_eq!(inst.hops[a * n + b], links.len());
        let lat: f64 = links.iter().map(|&l| spec.links[l].latency).sum();
        assert_eq!(inst.latency[a * n + b], lat);
    }
    assert_eq!(inst.route_channels(0, 200).count(), 200);
    assert_eq!(inst.route_channels(7, 7).count(), 0);
    let plan = tessera_place::solve(&inst, "auto", Objective::Throughput, true).expect("plan");
    let assign: Vec<usize> = plan
        .assignment
        .iter()
        .map(|a| {
            inst.problem
                .devices
                .iter()
                .position(|d| d.name == a.device)
                .unwrap_or(n)
        })
        .collect();
    assert_eq!(eval::violation(&inst, &assign), None);
    // The pinned ends stay on d0; the work (12 ms) is spread, so the period is below it.
    assert_eq!(assign[0], 0);
    assert_eq!(assign[11], 0);
    assert!(plan.value < 12e-3, "{}", plan.value);
    assert!(plan.value >= plan.lower_bound.value);
}

#[test]
fn a_graph_on_a_400_device_ring_target_is_placed() {
    // The same through the graph: the cost model's routes and the problem's, on a target
    // of 400 devices.
    let spec = ring_target(400);
    let cost = CostModel::new(&spec, None);
    let mut g = chain_graph(10);
    let placed =
        tessera_place::pass::place_graph(&mut g, &cost, "auto", Objective::Throughput, false)
            .expect("placed");
    assert_eq!(placed.built.problem.devices.len(), 400);
    assert!(g.ops().iter().all(|&op| g.op(op).device.is_some()));
    assert_eq!(cost.channels(0, 200).expect("route").len(), 200);
    placed.plan.check_finite().expect("finite");
}

#[test]
fn transfers_on_a_long_chain_cut_everywhere_go_in_one_pass() {
    // A 200,000-op chain alternating between two devices: every edge is cut, and each of the
    // 200,000 transfers was inserted into the body one at a time (quadratic: minutes).
    let n = 200_000;
    let mut g = chain_graph(n);
    let ops: Vec<_> = g.ops().to_vec();
    for (i, &op) in ops.iter().enumerate() {
        g.op_mut(op).device = Some(if i % 2 == 0 { "chip0" } else { "chip1" }.into());
    }
    let count = tessera_place::pass::insert_transfers(&mut g, "cpu0");
    // Every edge, plus the graph input from the host.
    assert_eq!(count, n);
    assert_eq!(g.ops().len(), 2 * n);
    tessera_ir::verify::verify(&g).unwrap_or_else(|e| panic!("{e:?}"));
    // Every transfer stands just before its user, on its user's device.
    let body = g.ops().to_vec();
    for pair in body.chunks(2) {
        let (t, user) = (pair[0], pair[1]);
        assert!(matches!(g.op(t).op, Op::Transfer { .. }));
        assert_eq!(g.op(user).operands, g.op(t).results);
        assert_eq!(g.op(t).device, g.op(user).device);
    }
    // Running it again inserts nothing.
    assert_eq!(tessera_place::pass::insert_transfers(&mut g, "cpu0"), 0);
}

#[test]
fn several_transfers_before_one_op_keep_their_order() {
    // `add` on chip1 reads x (from the host) and a relu's result (from chip0): both
    // transfers go just before it, in value order, as one-by-one insertion placed them.
    let ty = TensorType::fixed(ElemType::F32, &[4]);
    let mut g = Graph::new("two");
    let x = g.add_input(Some("x".into()), ty.clone());
    let r = g.push_op(Op::Unary(UnaryOp::Relu), vec![x], vec![ty.clone()]);
    let rv = g.op(r).results[0];
    g.set_name(rv, "r");
    let a = g.push_op(
        Op::Binary(tessera_ir::BinaryOp::Add),
        vec![x, rv],
        vec![ty.clone()],
    );
    g.op_mut(r).device = Some("chip0".into());
    g.op_mut(a).device = Some("chip1".into());
    g.set_outputs(vec![g.op(a).results[0]]);
    assert_eq!(tessera_place::pass::insert_transfers(&mut g, "cpu0"), 3);
    let text = tessera_ir::text::print(&g);
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" = ")).collect();
    let ops: Vec<String> = lines
        .iter()
        .map(|l| {
            l.split(" = ")
                .nth(1)
                .unwrap_or("")
                .split(' ')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    assert_eq!(
        ops,
        ["transfer", "relu", "transfer", "transfer", "add"],
        "{text}"
    );
    assert!(lines[2].contains("%x.to.chip1"), "{text}");
    assert!(lines[3].contains("%r.to.chip1"), "{text}");
}
