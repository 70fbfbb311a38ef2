//! Split alternatives: placement problems where an op may run split over a device group.
//! Exhaustive search against a brute force over every op's options on random small problems
//! (with the bound never above the optimum and every plan within memory), the resharding
//! model against hand-computed numbers, an op too large for every device split rather than
//! refused, chained splits (Megatron's column- then row-parallel pair) found by the `split`
//! strategy, Alpa's intra-operator program (`intra-op`) against a brute force over the same
//! objective, and the schema's errors.

// Only its random numbers are used here.
#[allow(dead_code)]
#[path = "common/mesh.rs"]
mod mesh;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tessera_place::plan::solve;
use tessera_place::problem::{
    Device, DeviceGroup, Edge, Link, OpSpec, Problem, SplitSpec, VERSION,
};
use tessera_place::split::{comm_time, in_layout, out_layout, reshard};
use tessera_place::strategy::{self, SolveOptions, intra_op};
use tessera_place::{Instance, Objective, ProblemError, evaluate, lower_bound, violation};

use mesh::splitmix;

fn op(name: &str, time: &[(&str, f64)], memory: u64) -> OpSpec {
    OpSpec {
        name: name.into(),
        kind: "x".into(),
        time: time.iter().map(|&(k, t)| (k.to_string(), t)).collect(),
        memory,
        colocate: None,
        pin: None,
        spmd: Vec::new(),
        splits: Vec::new(),
    }
}

fn split(
    group: &str,
    axis: &str,
    time: &[(&str, f64)],
    memory: u64,
    ins: &[&str],
    outs: &[&str],
) -> SplitSpec {
    SplitSpec {
        group: group.into(),
        axis: axis.into(),
        time: time.iter().map(|&(k, t)| (k.to_string(), t)).collect(),
        memory,
        inputs: ins.iter().map(|s| s.to_string()).collect(),
        outputs: outs.iter().map(|s| s.to_string()).collect(),
    }
}

fn edge(from: usize, to: usize, bytes: u64) -> Edge {
    Edge {
        from,
        to,
        bytes,
        tensor: 0,
        operand: 0,
    }
}

fn device(name: &str, kind: &str, memory: u64) -> Device {
    Device {
        name: name.into(),
        kind: kind.into(),
        memory,
        unsupported_ops: Vec::new(),
        overlap: true,
    }
}

fn link(a: &str, b: &str) -> Link {
    Link {
        a: a.into(),
        b: b.into(),
        bandwidth: 1e9,
        latency: 0.0,
    }
}

/// A host `h` linked to `c0` of a ring of four chips `c0..c3` (1 GB/s links, no latency),
/// the group `all` = the ring; `in` and `out` pinned to the host around `ops`, a chain.
fn ring_problem(chip_memory: u64, host_memory: u64, mut ops: Vec<OpSpec>, bytes: u64) -> Problem {
    let mut all = vec![OpSpec {
        pin: Some("h".into()),
        ..op("in", &[("cpu", 0.0)], 0)
    }];
    all.append(&mut ops);
    all.push(OpSpec {
        pin: Some("h".into()),
        ..op("out", &[("cpu", 0.0)], 0)
    });
    let n = all.len();
    Problem {
        version: VERSION,
        name: "ring".into(),
        devices: std::iter::once(device("h", "cpu", host_memory))
            .chain((0..4).map(|i| device(&format!("c{i}"), "chip", chip_memory)))
            .collect(),
        routers: Vec::new(),
        links: vec![
            link("h", "c0"),
            link("c0", "c1"),
            link("c1", "c2"),
            link("c2", "c3"),
            link("c3", "c0"),
        ],
        ops: all,
        edges: (1..n).map(|o| edge(o - 1, o, bytes)).collect(),
        groups: vec![DeviceGroup {
            name: "all".into(),
            devices: (0..4).map(|i| format!("c{i}")).collect(),
        }],
        carried: Vec::new(),
    }
}

/// Megatron's pair: a column-parallel matmul (`R` in, split columns out), then a
/// row-parallel one (split rows in, partial sums out), each too large for a chip whole.
fn megatron_pair(host_memory: u64) -> Problem {
    let mut mm1 = op("mm1", &[("cpu", 80.0), ("chip", 8e-7)], 2000);
    mm1.splits = vec![split(
        "all",
        "hidden",
        &[("chip", 1e-7)],
        250,
        &["R"],
        &["S1"],
    )];
    let mut mm2 = op("mm2", &[("cpu", 80.0), ("chip", 8e-7)], 2000);
    mm2.splits = vec![
        split("all", "hidden", &[("chip", 1e-7)], 250, &["S1"], &["P"]),
        split("all", "out", &[("chip", 1e-7)], 250, &["R"], &["S1"]),
    ];
    ring_problem(1000, host_memory, vec![mm1, mm2], 400)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 + 1e-9 * a.abs().max(b.abs())
}

#[test]
fn resharding_costs_match_hand_computed_numbers() {
    let inst = Instance::new(megatron_pair(1_000_000)).expect("valid");
    let d = inst.d;
    // in (h) -> mm1 column-parallel -> mm2 row-parallel -> out (h).
    let assign = vec![0, d, d, 0];
    assert_eq!(violation(&inst, &assign), None);
    let ev = evaluate(&inst, &assign, &[0, 1, 2, 3]);
    // The host sends all 400 bytes to each chip (mm1 reads `R`): four 0.4 us transfers,
    // every one through the link h -> c0, the busiest channel.
    let hc0 = inst
        .problem
        .links
        .iter()
        .position(|l| l.a == "h" && l.b == "c0")
        .expect("link h-c0");
    assert!(
        close(ev.channel_load[2 * hc0], 1.6e-6),
        "{:?}",
        ev.channel_load
    );
    // mm2's partial sums are reduce-scattered around the ring (3 steps of 100 bytes on every
    // neighbour link; c2 -> c3 carries nothing else), then each chip sends its 100 bytes to
    // the host.
    let c23 = inst
        .problem
        .links
        .iter()
        .position(|l| l.a == "c2" && l.b == "c3")
        .expect("link c2-c3");
    assert!(
        close(ev.channel_load[2 * c23], 3e-7),
        "{:?}",
        ev.channel_load
    );
    assert!(
        close(ev.channel_load[2 * hc0 + 1], 4e-7),
        "{:?}",
        ev.channel_load
    );
    assert!(close(ev.period, 1.6e-6), "period {}", ev.period);
    // Latency: 1.6 us to scatter, two matmuls of 0.1 us with nothing between them (S1 is
    // what mm2 reads), 0.3 us of ring, then the host receives four 0.1 us blocks in turn.
    assert!(close(ev.latency, 2.5e-6), "latency {}", ev.latency);
    // Each chip: two quarter matmuls (250 bytes each) and the whole input (400).
    for k in 1..5 {
        assert_eq!(ev.memory[k], 900, "{}", inst.device_name(k));
    }
    assert_eq!(ev.memory[0], 400);
    assert_eq!(ev.traffic, 4 * 400 + 3 * 100 * 4 + 4 * 100);
    // The other split of mm2 reads `R`: an all-gather of mm1's split columns (3 steps of 100
    // bytes) first, and the host then receives four blocks of 100 bytes as before.
    let assign = vec![0, d, d + 1, 0];
    let ev = evaluate(&inst, &assign, &[0, 1, 2, 3]);
    assert!(
        close(ev.latency, 1.6e-6 + 1e-7 + 3e-7 + 1e-7 + 4e-7),
        "latency {}",
        ev.latency
    );
    assert_eq!(ev.memory[1], 250 + 250 + 400 + 400);
}

#[test]
fn an_op_too_large_for_every_device_is_split() {
    // Neither matmul fits any device whole (2,000 bytes; chips hold 1,000, the host 1,500).
    let inst = Instance::new(megatron_pair(1500)).expect("a split fits");
    let opts = SolveOptions {
        objective: Objective::Throughput,
    };
    let err = strategy::run("dp", &inst, &opts).expect_err("dp places whole");
    assert_eq!(
        err.to_string(),
        "infeasible: `mm1` fits no device whole and must be split; `dp` places ops whole (the \
         strategies that split: exhaustive, split, stages, intra-op)"
    );
    let plan = solve(&inst, "auto", Objective::Throughput, true).expect("auto splits");
    let mm1 = &plan.assignment[1];
    assert_eq!(mm1.device, "all");
    assert_eq!(
        mm1.split.as_ref().map(|s| (s.axis.as_str(), s.ways)),
        Some(("hidden", 4))
    );
    assert!(plan.lower_bound.value <= plan.value * (1.0 + 1e-9));
    let e = plan.explanation("mm1").expect("explained");
    assert_eq!(e.constraint, "memory", "{}", e.reason);
    assert!(
        e.reason
            .contains("it fits no device whole (it needs 2000 bytes"),
        "{}",
        e.reason
    );
    // With room on the host, the slow host is still the worse choice, by time.
    let inst = Instance::new(megatron_pair(1_000_000)).expect("valid");
    let plan = solve(&inst, "auto", Objective::Throughput, true).expect("solved");
    assert_eq!(plan.assignment[1].device, "all");
    let e = plan.explanation("mm1").expect("explained");
    assert_eq!(e.constraint, "time", "{}", e.reason);
    // A problem where no split fits either is an error naming the op.
    let mut p = megatron_pair(1500);
    p.ops[1].splits[0].memory = 1001;
    let err = Instance::new(p).map(|_| ()).expect_err("nothing fits");
    assert!(
        err.to_string()
            .starts_with("infeasible: ops[1] (mm1): no device can run it"),
        "{err}"
    );
}

#[test]
fn the_split_strategy_chains_column_and_row_parallel_matmuls() {
    let inst = Instance::new(megatron_pair(1500)).expect("valid");
    for objective in [Objective::Throughput, Objective::Latency] {
        let opts = SolveOptions { objective };
        let exact = strategy::run("exhaustive", &inst, &opts).expect("exact").0;
        let found = strategy::run("split", &inst, &opts).expect("split").0;
        let (ve, vf) = (exact.value(&inst, objective), found.value(&inst, objective));
        assert!(close(ve, vf), "{objective}: exhaustive {ve}, split {vf}");
        // The row-parallel form: mm2 reads mm1's split columns as they are.
        assert_eq!(found.assign, vec![0, inst.d, inst.d, 0], "{objective}");
    }
}

/// A random small problem with device groups and split alternatives: 2-5 ops, 2-4 devices
/// (a ring, a line or a switch), one or two groups, each op with up to two splits of random
/// layouts (some not allowed: a group device of a kind without a time), tight memory that
/// sometimes fits an op nowhere whole, an input pinned to device 0, sometimes a colocated
/// pair, devices that do not overlap transfers.
#[allow(clippy::needless_range_loop)]
fn random_problem(seed: u64) -> Problem {
    let mut s = seed;
    let mut r = |m: u64| splitmix(&mut s) % m;
    let n = 2 + r(4) as usize;
    let d = 2 + r(3) as usize;
    let layouts_in = ["R", "S0", "S1"];
    let layouts_out = ["R", "S0", "S1", "P"];
    let mut groups = vec![DeviceGroup {
        name: "g0".into(),
        devices: (0..d).map(|k| format!("dev{k}")).collect(),
    }];
    if d > 2 && r(2) == 0 {
        groups.push(DeviceGroup {
            name: "g1".into(),
            devices: vec![format!("dev{}", d - 1), format!("dev{}", d - 2)],
        });
    }
    let cap = 100 + r(200);
    let pair = (r(3) == 0 && n > 2).then(|| 1 + r(n as u64 - 1) as usize);
    let mut ops = Vec::new();
    let mut in_edges = vec![0u32; n];
    let mut edges = Vec::new();
    for from in 0..n {
        for to in from + 1..n {
            if to == from + 1 || r(3) == 0 {
                edges.push(Edge {
                    from,
                    to,
                    bytes: 1 + r(500),
                    tensor: 0,
                    operand: in_edges[to],
                });
                in_edges[to] += 1;
            }
        }
    }
    // Consumers of one tensor get the same bytes.
    let mut first: BTreeMap<usize, u64> = BTreeMap::new();
    for e in &mut edges {
        e.bytes = *first.entry(e.from).or_insert(e.bytes);
    }
    for o in 0..n {
        let mut time = BTreeMap::new();
        time.insert("k0".to_string(), 0.5 + r(40) as f64 / 10.0);
        if r(3) != 0 {
            time.insert("k1".to_string(), 0.5 + r(40) as f64 / 10.0);
        }
        let memory = if o == 0 { 0 } else { r(cap + cap / 2) };
        let mut splits = Vec::new();
        for _ in 0..(if o == 0 { 0 } else { r(3) }) {
            let g = r(groups.len() as u64) as usize;
            let mut t = BTreeMap::new();
            t.insert("k0".to_string(), 0.1 + r(20) as f64 / 10.0);
            if r(4) != 0 {
                t.insert("k1".to_string(), 0.1 + r(20) as f64 / 10.0);
            }
            splits.push(SplitSpec {
                group: groups[g].name.clone(),
                axis: format!("a{}", splits.len()),
                time: t,
                memory: memory / 2 + r(10),
                inputs: (0..in_edges[o])
                    .map(|_| layouts_in[r(3) as usize].to_string())
                    .collect(),
                outputs: vec![layouts_out[r(4) as usize].to_string()],
            });
        }
        ops.push(OpSpec {
            name: format!("op{o}"),
            kind: "x".into(),
            time,
            memory,
            colocate: pair
                .filter(|&p| o == p || o == p + 1)
                .map(|_| "pair".into()),
            pin: (o == 0).then(|| "dev0".to_string()),
            spmd: Vec::new(),
            splits,
        });
    }
    let devices: Vec<Device> = (0..d)
        .map(|k| Device {
            name: format!("dev{k}"),
            kind: format!("k{}", k % 2),
            memory: cap + r(cap),
            unsupported_ops: Vec::new(),
            overlap: r(4) != 0,
        })
        .collect();
    let mut routers = Vec::new();
    let mut links = Vec::new();
    let mut lk = |a: String, b: String, r: &mut dyn FnMut(u64) -> u64| {
        links.push(Link {
            a,
            b,
            bandwidth: 100.0 + r(900) as f64,
            latency: r(10) as f64 / 100.0,
        })
    };
    match r(3) {
        0 => (0..d - 1).for_each(|k| lk(format!("dev{k}"), format!("dev{}", k + 1), &mut r)),
        1 => (0..d).for_each(|k| lk(format!("dev{k}"), format!("dev{}", (k + 1) % d), &mut r)),
        _ => {
            routers.push("sw".to_string());
            (0..d).for_each(|k| lk(format!("dev{k}"), "sw".into(), &mut r));
        }
    }
    Problem {
        version: VERSION,
        name: format!("random-split-{seed}"),
        devices,
        routers,
        links,
        ops,
        edges,
        groups,
        carried: Vec::new(),
    }
}

/// The best value over every assignment of options to ops (the problem's order as the
/// schedule), by odometer; `None` when none is feasible.
fn brute_force(inst: &Instance, objective: Objective) -> Option<f64> {
    let order: Vec<usize> = (0..inst.n).collect();
    let mut at = vec![0usize; inst.n];
    let mut best: Option<f64> = None;
    loop {
        if (0..inst.n).all(|o| inst.option_allowed(o, at[o])) && violation(inst, &at).is_none() {
            let v = evaluate(inst, &at, &order).value(objective);
            best = Some(best.map_or(v, |b: f64| b.min(v)));
        }
        let mut i = 0;
        while i < inst.n {
            at[i] += 1;
            if at[i] < inst.options(i) {
                break;
            }
            at[i] = 0;
            i += 1;
        }
        if i == inst.n {
            return best;
        }
    }
}

/// Each device's memory under `assign`, recomputed here from the problem's fields: the ops'
/// own memory on every device of their place (received tensors come on top, so this is a
/// floor the plan's memory must also respect).
fn own_memory(p: &Problem, inst: &Instance, assign: &[usize]) -> Vec<u64> {
    let mut m = vec![0u64; p.devices.len()];
    for (o, &x) in assign.iter().enumerate() {
        if x < inst.d {
            m[x] += p.ops[o].memory;
        } else {
            let spec = &p.ops[o].splits[x - inst.d];
            let g = p
                .groups
                .iter()
                .find(|g| g.name == spec.group)
                .expect("group");
            for name in &g.devices {
                let k = p
                    .devices
                    .iter()
                    .position(|d| &d.name == name)
                    .expect("device");
                m[k] += spec.memory;
            }
        }
    }
    m
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5917),
        ..ProptestConfig::default()
    })]

    #[test]
    fn exact_strategies_equal_a_brute_force_over_splits(seed in any::<u64>()) {
        let p = random_problem(seed);
        let inst = match Instance::new(p.clone()) {
            Ok(i) => i,
            // Some random problems fit an op nowhere, split or whole: an error, as it must be.
            Err(ProblemError::Infeasible(_)) => return Ok(()),
            Err(e) => panic!("{e}"),
        };
        for objective in [Objective::Throughput, Objective::Latency] {
            let opts = SolveOptions { objective };
            let brute = brute_force(&inst, objective);
            let exact = strategy::run("exhaustive", &inst, &opts);
            match (brute, &exact) {
                (Some(b), Ok((sol, _, _))) => {
                    let v = sol.value(&inst, objective);
                    prop_assert!(close(v, b), "{objective}: exhaustive {v}, brute force {b}");
                    if let Ok(bound) = lower_bound(&inst, objective) {
                        prop_assert!(
                            bound.value <= b * (1.0 + 1e-9) + 1e-12,
                            "{objective}: bound {:?} above the optimum {b}", bound
                        );
                    }
                }
                (None, Err(_)) => {}
                (b, e) => prop_assert!(false, "brute force {b:?}, exhaustive {e:?}"),
            }
            if brute.is_none() {
                continue;
            }
            for name in ["split", "auto"] {
                let sol = match strategy::run(name, &inst, &opts) {
                    Ok((sol, _, _)) => sol,
                    // A heuristic may miss a plan (measured in `split_strategy_measured`);
                    // auto runs exhaustive at this size, so it may not.
                    Err(_) if name == "split" => continue,
                    Err(e) => return Err(TestCaseError::fail(format!("{name}: {e}"))),
                };
                prop_assert_eq!(violation(&inst, &sol.assign), None);
                let mem = evaluate(&inst, &sol.assign, &sol.order).memory;
                let own = own_memory(&p, &inst, &sol.assign);
                for k in 0..inst.d {
                    prop_assert!(own[k] <= mem[k] && mem[k] <= inst.capacity[k]);
                }
                prop_assert!(
                    sol.value(&inst, objective) >= brute.unwrap_or(0.0) * (1.0 - 1e-9),
                    "{name} beat the optimum"
                );
            }
        }
    }
}

/// The intra-operator program's objective for `assign`, computed here from its definition:
/// every op's slowest share plus the time of every edge's reshard.
fn stage_cost(inst: &Instance, assign: &[usize]) -> f64 {
    let ops: f64 = (0..inst.n)
        .map(|o| {
            inst.option_times(o, assign[o])
                .iter()
                .copied()
                .fold(0.0, f64::max)
        })
        .sum();
    let edges: f64 = inst
        .problem
        .edges
        .iter()
        .map(|e| {
            let (xu, xv) = (assign[e.from], assign[e.to]);
            comm_time(
                inst,
                &reshard(
                    inst,
                    inst.place_of(e.from, xu),
                    out_layout(inst, e.from, xu, e.tensor),
                    inst.place_of(e.to, xv),
                    in_layout(inst, e.to, xv, e.operand),
                    e.bytes,
                ),
            )
        })
        .sum();
    ops + edges
}

/// The least [`stage_cost`] over every assignment that puts each op on group `g` (any of its
/// allowed alternatives there; an op without one where it runs fastest) and keeps the ops' own
/// bytes within every group device's capacity; `None` when none does.
fn brute_force_on_group(inst: &Instance, g: usize) -> Option<f64> {
    let place = inst.d + g;
    let slowest = |o: usize, x: usize| inst.option_times(o, x).iter().copied().fold(0.0, f64::max);
    let choices: Vec<Vec<usize>> = (0..inst.n)
        .map(|o| {
            let all: Vec<usize> = (0..inst.options(o))
                .filter(|&x| inst.option_allowed(o, x))
                .collect();
            let here: Vec<usize> = all
                .iter()
                .copied()
                .filter(|&x| inst.place_of(o, x) == place)
                .collect();
            if here.is_empty() {
                all.into_iter()
                    .min_by(|&a, &b| slowest(o, a).total_cmp(&slowest(o, b)))
                    .into_iter()
                    .collect()
            } else {
                here
            }
        })
        .collect();
    let mut at = vec![0usize; inst.n];
    let mut best: Option<f64> = None;
    loop {
        let assign: Vec<usize> = (0..inst.n).map(|o| choices[o][at[o]]).collect();
        let fits = inst.place_devices[place].iter().all(|&k| {
            let bytes: u64 = (0..inst.n)
                .filter(|&o| inst.place_devices[inst.place_of(o, assign[o])].contains(&k))
                .map(|o| inst.option_memory(o, assign[o]))
                .sum();
            bytes <= inst.capacity[k]
        });
        if fits {
            let v = stage_cost(inst, &assign);
            best = Some(best.map_or(v, |b: f64| b.min(v)));
        }
        let mut i = 0;
        while i < inst.n {
            at[i] += 1;
            if at[i] < choices[i].len() {
                break;
            }
            at[i] = 0;
            i += 1;
        }
        if i == inst.n {
            return best;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0xa19a),
        ..ProptestConfig::default()
    })]

    /// On every device group, the program's plan costs what a brute force over the same
    /// choices finds least, its reported objective is that plan's cost, and its plan fits.
    #[test]
    fn the_intra_op_program_equals_a_brute_force(seed in any::<u64>()) {
        let mut p = random_problem(seed);
        // Colocated ops choose together; single ops keep the brute force simple. More
        // alternatives per op than the random problems have, so neighbours choose among
        // several each: every split gets two siblings on its group with other layouts.
        // Every op but the pinned input gets one (runnable on every device kind), and half
        // the problems have memory to spare.
        let layouts = ["R", "S0", "S1"];
        let edges_in: Vec<usize> = (0..p.ops.len())
            .map(|o| p.edges.iter().filter(|e| e.to == o).count())
            .collect();
        if seed % 2 == 0 {
            for d in &mut p.devices {
                d.memory = d.memory.saturating_mul(100);
            }
        }
        for (o, op) in p.ops.iter_mut().enumerate() {
            op.colocate = None;
            if o > 0 && op.splits.is_empty() {
                op.splits.push(SplitSpec {
                    group: "g0".into(),
                    axis: "a".into(),
                    time: BTreeMap::from([("k0".into(), 0.5), ("k1".into(), 0.7)]),
                    memory: op.memory / 2,
                    inputs: vec!["S0".into(); edges_in[o]],
                    outputs: vec!["S0".into()],
                });
            }
            let first = op.splits.first().cloned();
            for (i, spec) in first.into_iter().flat_map(|f| [f.clone(), f]).enumerate() {
                let mut spec = spec;
                spec.axis = format!("b{i}");
                for (j, l) in spec.inputs.iter_mut().enumerate() {
                    *l = layouts[(o + i + j + 1) % 3].to_string();
                }
                spec.outputs = vec![["R", "S0", "P"][(o + i) % 3].to_string()];
                for t in spec.time.values_mut() {
                    *t *= 1.0 + 0.25 * (i as f64 + 1.0);
                }
                op.splits.push(spec);
            }
        }
        let Ok(inst) = Instance::new(p) else { return Ok(()) };
        for g in 0..inst.problem.groups.len() {
            let brute = brute_force_on_group(&inst, g);
            match (intra_op::on_group(&inst, g), brute) {
                (Ok(found), Some(b)) => {
                    prop_assert!(found.optimal);
                    prop_assert!(close(found.objective, b), "program {}, brute force {b}", found.objective);
                    prop_assert!(close(stage_cost(&inst, &found.assign), found.objective));
                    prop_assert_eq!(violation(&inst, &found.assign), None);
                }
                (Ok(found), None) => prop_assert!(false, "a plan {:?} where none fits", found.assign),
                (Err(ProblemError::Infeasible(_)), None) => {}
                // The program leaves received tensors out of memory: its plan may not fit.
                (Err(ProblemError::Unsolved(why)), Some(_)) if why.contains("not feasible") => {}
                (Err(e), b) => prop_assert!(false, "group {g}: {e} (brute force {b:?})"),
            }
        }
    }
}

#[test]
fn schema_errors_name_the_field() {
    type Edit = Box<dyn Fn(&mut Problem)>;
    let mut cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|p| p.ops[1].splits[0].group = "none".into()),
            "ops[1] (mm1).splits[0].group: `none` is not a device group",
        ),
        (
            Box::new(|p| p.ops[1].splits[0].inputs[0] = "P".into()),
            "ops[1] (mm1).splits[0].inputs[0]: an operand arrives whole (`R`) or split \
             (`S<axis>`), not as a partial sum",
        ),
        (
            Box::new(|p| p.ops[1].splits[0].outputs[0] = "T3".into()),
            "ops[1] (mm1).splits[0].outputs[0]: `T3` is not a layout (expected R, P, or \
             S<axis> with axis < 64)",
        ),
        (
            Box::new(|p| p.edges[0].operand = 1),
            "ops[1] (mm1).splits[0].inputs: edges[0] feeds operand 1, but only 1 input \
             layouts are given",
        ),
        (
            Box::new(|p| p.groups[0].devices.truncate(1)),
            "groups[0] (all): a device group needs at least two devices",
        ),
        (
            Box::new(|p| p.groups[0].devices[1] = "c0".into()),
            "groups[0] (all).devices[1]: `c0` is listed twice",
        ),
        (
            Box::new(|p| p.groups[0].devices[1] = "sw".into()),
            "groups[0] (all).devices[1]: `sw` is not a device",
        ),
        (
            Box::new(|p| {
                p.ops[1].splits[0]
                    .time
                    .insert("chip".into(), -1.0)
                    .map(|_| ())
                    .unwrap_or(())
            }),
            "ops[1] (mm1).splits[0].time.chip: must be a number >= 0 and <= 1e6 (seconds), not -1",
        ),
    ];
    cases.push((
        Box::new(|p| {
            for i in 0..300 {
                p.devices.push(device(&format!("x{i}"), "chip", 10));
            }
            p.groups[0].devices = (0..300).map(|i| format!("x{i}")).collect();
        }),
        "groups[0] (all): 300 devices, more than the 256 a device group may have",
    ));
    for (edit, want) in cases {
        let mut p = megatron_pair(1_000_000);
        edit(&mut p);
        let err = Instance::new(p).map(|_| ()).expect_err(want);
        assert_eq!(err.to_string(), want);
    }
    // The problem round-trips through JSON with its groups and splits.
    let p = megatron_pair(1_000_000);
    assert_eq!(Problem::parse(&p.to_json(), "p.json").expect("parses"), p);
}

/// The `split` strategy against the optimum on random problems with splits: how often it
/// misses a plan that exists, and its worst and mean ratio to the optimum. A heuristic has
/// no worst-case guarantee, so the limits are measured: over 20,000 seeds per objective
/// (`SPLIT_SEEDS=20000`, release mode), of 9,448 feasible problems it missed 20
/// (throughput) and 13 (latency), with worst ratios 3.98 and 2.24 and geometric means 1.0030
/// and 1.0009; the limits leave room above those.
#[test]
fn split_strategy_measured() {
    const WORST: f64 = 6.0;
    const MEAN: f64 = 1.02;
    let seeds: u64 = std::env::var("SPLIT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    for objective in [Objective::Throughput, Objective::Latency] {
        let opts = SolveOptions { objective };
        let (mut feasible, mut missed, mut worst, mut log_sum) = (0usize, 0usize, 1.0f64, 0.0);
        for seed in 0..seeds {
            let Ok(inst) = Instance::new(random_problem(seed)) else {
                continue;
            };
            let Ok((exact, _, _)) = strategy::run("exhaustive", &inst, &opts) else {
                continue;
            };
            feasible += 1;
            let best = exact.value(&inst, objective);
            match strategy::run("split", &inst, &opts) {
                Ok((sol, _, _)) => {
                    assert_eq!(violation(&inst, &sol.assign), None);
                    let ratio = if best > 0.0 {
                        sol.value(&inst, objective) / best
                    } else {
                        1.0
                    };
                    assert!(ratio >= 1.0 - 1e-9, "seed {seed}: below the optimum");
                    worst = worst.max(ratio);
                    log_sum += ratio.ln();
                }
                Err(_) => missed += 1,
            }
        }
        let mean = (log_sum / (feasible - missed).max(1) as f64).exp();
        eprintln!(
            "{objective}: {feasible} feasible problems, split missed {missed}, worst ratio \
             {worst:.3}, geometric mean {mean:.4}"
        );
        assert!(
            missed * 100 <= feasible,
            "{objective}: missed {missed} of {feasible}"
        );
        assert!(worst <= WORST, "{objective}: worst ratio {worst}");
        assert!(mean <= MEAN, "{objective}: geometric mean {mean}");
    }
}

#[test]
fn the_tracker_agrees_with_a_fresh_evaluation_after_every_move() {
    let mut checked = 0;
    for seed in 0..200u64 {
        let Ok(inst) = Instance::new(random_problem(seed)) else {
            continue;
        };
        let mut s = seed ^ 0xabcdef;
        // Moves between allowed options (the only ones a search makes).
        let allowed: Vec<Vec<usize>> = (0..inst.n)
            .map(|o| {
                (0..inst.options(o))
                    .filter(|&x| inst.option_allowed(o, x))
                    .collect()
            })
            .collect();
        let start = allowed.iter().map(|a| a[0]).collect();
        let mut t = tessera_place::split::Tracker::new(&inst, start);
        for _ in 0..40 {
            let o = (splitmix(&mut s) % inst.n as u64) as usize;
            let x = allowed[o][(splitmix(&mut s) % allowed[o].len() as u64) as usize];
            t.set(o, x);
            let order: Vec<usize> = (0..inst.n).collect();
            let ev = evaluate(&inst, &t.assign, &order);
            assert!(
                close(t.period(), ev.period),
                "seed {seed}: {} vs {}",
                t.period(),
                ev.period
            );
            let over: u64 = ev
                .memory
                .iter()
                .zip(&inst.capacity)
                .map(|(&m, &c)| m.saturating_sub(c))
                .sum();
            assert_eq!(t.overflow(), over, "seed {seed}");
            // Without splits `evaluate` is the whole-op model; the split model must agree.
            let lat = tessera_place::split::schedule_latency(&inst, &t.assign, &order);
            assert!(
                close(lat, ev.latency),
                "seed {seed}: latency {lat} vs {}",
                ev.latency
            );
            checked += 1;
        }
    }
    assert!(checked > 1000);
}

/// The LP relaxation may put a fraction of a large op in memory left over on fast devices;
/// no plan can, which the relaxation branched once on its most spread op knows. A host `h`
/// (slow, large) and two chips of 1000 bytes, both a group. Op `big` runs on the host in
/// 10 s, or split over the pair in 0.1 s with 700 bytes on each chip; two fillers (600 bytes,
/// 6 s on the host, 0.1 s on a chip) fit one chip each. Whatever `big` does, something slow
/// runs on the host: `big` whole there (10 s, the optimum), or the fillers, which no longer
/// fit beside its shares (12 s). The relaxation puts 4/7 of `big` on the chips and the
/// fillers beside it: 30/7 s on the host. Branched on `big`: on the host, 10 s; split, the
/// fillers half on the host: 6 s. The bound is 6 s, below the optimum of 10 s.
#[test]
fn the_branched_relaxation_is_tighter_and_below_the_optimum() {
    let chip = [("chip", 0.1)];
    let p = Problem {
        version: VERSION,
        name: "fractions".into(),
        devices: vec![
            device("h", "cpu", 1 << 30),
            device("c0", "chip", 1000),
            device("c1", "chip", 1000),
        ],
        routers: Vec::new(),
        links: Vec::new(),
        ops: vec![
            OpSpec {
                splits: vec![split("pair", "columns", &chip, 700, &[], &[])],
                ..op("big", &[("cpu", 10.0), ("chip", 0.2)], 1400)
            },
            op("f1", &[("cpu", 6.0), ("chip", 0.1)], 600),
            op("f2", &[("cpu", 6.0), ("chip", 0.1)], 600),
        ],
        edges: Vec::new(),
        groups: vec![DeviceGroup {
            name: "pair".into(),
            devices: vec!["c0".into(), "c1".into()],
        }],
        carried: Vec::new(),
    };
    let inst = Instance::new(p).expect("valid");
    let optimum = brute_force(&inst, Objective::Throughput).expect("a plan");
    assert!(close(optimum, 10.0), "{optimum}");
    let lb = lower_bound(&inst, Objective::Throughput).expect("bound");
    assert!(close(lb.components["lp"], 30.0 / 7.0), "{lb:?}");
    assert!(close(lb.components["lp-branch"], 6.0), "{lb:?}");
    assert!(close(lb.value, 6.0) && lb.value <= optimum, "{lb:?}");
}

/// Six layers (a forward op and its backward op, colocated) over two pairs of devices, a fast
/// pair `A` (a layer's forward and backward 1 s each, split by batch) and a slow pair `B`
/// (2 s each), host `h` before them on a line of 1 GB/s links; 1-byte activations.
fn two_speed_pairs() -> Problem {
    let layers = 6;
    let mut ops = vec![OpSpec {
        pin: Some("h".into()),
        ..op("input:x", &[("cpu", 0.0)], 0)
    }];
    let layer_op = |name: String, layer: usize| {
        let mut o = op(&name, &[("fast", 10.0), ("slow", 20.0)], 0);
        o.colocate = Some(format!("layer{layer}"));
        o.splits = vec![
            split("A", "batch", &[("fast", 1.0)], 0, &["S0"], &["S0"]),
            split("B", "batch", &[("slow", 2.0)], 0, &["S0"], &["S0"]),
        ];
        o
    };
    ops.extend((0..layers).map(|l| layer_op(format!("f{l}"), l)));
    ops.extend((0..layers).rev().map(|l| layer_op(format!("g{l}"), l)));
    ops.push(OpSpec {
        pin: Some("h".into()),
        ..op("output:y", &[("cpu", 0.0)], 0)
    });
    let n = ops.len();
    Problem {
        version: VERSION,
        name: "two speeds".into(),
        devices: vec![
            device("h", "cpu", 1000),
            device("a0", "fast", 1000),
            device("a1", "fast", 1000),
            device("b0", "slow", 1000),
            device("b1", "slow", 1000),
        ],
        routers: Vec::new(),
        links: vec![
            link("h", "a0"),
            link("a0", "a1"),
            link("a1", "b0"),
            link("b0", "b1"),
        ],
        ops,
        edges: (1..n).map(|o| edge(o - 1, o, 1)).collect(),
        groups: vec![
            DeviceGroup {
                name: "A".into(),
                devices: vec!["a0".into(), "a1".into()],
            },
            DeviceGroup {
                name: "B".into(),
                devices: vec!["b0".into(), "b1".into()],
            },
        ],
        carried: Vec::new(),
    }
}

#[test]
fn stages_give_the_slower_group_fewer_layers() {
    use tessera_place::strategy::stages::{Cut, chains, staged};
    let inst = Instance::new(two_speed_pairs()).expect("valid");
    // The two pairs; the devices but the host (stages of one device: the first two, all
    // four); the two devices of each kind.
    let (a, b) = (inst.d, inst.d + 1);
    assert_eq!(
        chains(&inst),
        vec![
            vec![a, b],
            vec![b, a],
            vec![1, 2],
            vec![2, 1],
            vec![1, 2, 3, 4],
            vec![4, 3, 2, 1],
            vec![3, 4],
            vec![4, 3]
        ]
    );
    // Per layer 2 s on A, 4 s on B: four layers on A and two on B make both stages 8 s; the
    // uniform cut (three each) makes B's 12 s.
    let balanced = staged(&inst, &[a, b], Cut::Balanced).expect("a cut");
    assert_eq!(balanced.cuts, vec![0, 4]);
    let uniform = staged(&inst, &[a, b], Cut::Uniform).expect("a cut");
    assert_eq!(uniform.cuts, vec![0, 3]);
    // As if B ran at A's speed (a planner for identical devices): three layers each.
    let homogeneous = staged(&inst, &[a, b], Cut::Homogeneous).expect("a cut");
    assert_eq!(homogeneous.cuts, vec![0, 3]);
    // The configurations offer it only where it cuts unlike the balanced and the uniform
    // cuts: on these chains never (the pairs: the uniform cut; one kind: the balanced one).
    let configs = tessera_place::strategy::stages::configurations(
        &inst,
        &SolveOptions {
            objective: Objective::Throughput,
        },
    );
    assert_eq!(configs.len(), 2 * chains(&inst).len());
    assert!(configs.iter().all(|c| c.cut != Cut::Homogeneous));
    let group_of = |s: &tessera_place::strategy::Solution, name: &str| {
        let o = (0..inst.n).find(|&o| inst.op_name(o) == name).expect(name);
        inst.place_of(o, s.assign[o]) - inst.d
    };
    for l in 0..6 {
        let want = if l < 4 { 0 } else { 1 };
        assert_eq!(group_of(&balanced.solution, &format!("f{l}")), want, "f{l}");
        assert_eq!(group_of(&balanced.solution, &format!("g{l}")), want, "g{l}");
    }
    let busiest =
        |s: &tessera_place::strategy::Solution| evaluate(&inst, &s.assign, &s.order).period;
    // The slowest stage's work, plus nanoseconds of 1-byte transfers.
    assert!((busiest(&balanced.solution) - 8.0).abs() < 1e-6);
    assert!((busiest(&uniform.solution) - 12.0).abs() < 1e-6);
    // Stages of one device each (a0 then b0), every op whole: 20 s and 40 s per layer.
    let devices = staged(&inst, &[1, 3], Cut::Balanced).expect("a cut");
    assert_eq!(devices.cuts, vec![0, 4]);
    assert!((busiest(&devices.solution) - 80.0).abs() < 1e-6);
    // The strategy keeps the best configuration: either order of the pairs gives 8 s.
    let opts = SolveOptions {
        objective: Objective::Throughput,
    };
    let best = strategy::run("stages", &inst, &opts).expect("a plan").0;
    assert!(violation(&inst, &best.assign).is_none());
    assert!((best.value(&inst, Objective::Throughput) - 8.0).abs() < 1e-6);
    // No group and one device besides the host: no chain of stages.
    let mut lone = two_speed_pairs();
    lone.groups.clear();
    lone.devices
        .retain(|d| ["h", "a0"].contains(&d.name.as_str()));
    lone.links = vec![link("h", "a0")];
    for o in &mut lone.ops {
        o.splits.clear();
    }
    let lone = Instance::new(lone).expect("valid");
    let err = strategy::run("stages", &lone, &opts).expect_err("no chain");
    assert!(
        err.to_string().contains("no two devices besides the host"),
        "{err}"
    );
}

/// The placement model's all-reduce of a partial sum over a group that spans two nodes (two
/// devices each, 10 MB/s inside a node, 1 MB/s between the nodes, no latency): the flat ring
/// of 6 steps of 1000 B is paced by the slow routes (1 ms each: 6 ms); the hierarchical one
/// is 2 steps of 2000 B within the nodes (0.2 ms each) and 2 steps of 1000 B over the rails
/// (1 ms each): 2.4 ms, the time taken. (The model times a step by its slowest transfer; the
/// simulator also shares the links the rails' routes have in common.)
#[test]
fn a_partial_sum_over_two_nodes_is_reduced_hierarchically() {
    let wire = |a: &str, b: &str, bandwidth: f64| Link {
        a: a.into(),
        b: b.into(),
        bandwidth,
        latency: 0.0,
    };
    let p = Problem {
        version: VERSION,
        name: "two nodes".into(),
        devices: ["n0a", "n0b", "n1a", "n1b"]
            .iter()
            .map(|n| device(n, "gpu", 1_000_000))
            .collect(),
        routers: Vec::new(),
        links: vec![
            wire("n0a", "n0b", 1e7),
            wire("n1a", "n1b", 1e7),
            wire("n0b", "n1a", 1e6),
            wire("n0a", "n1b", 1e6),
        ],
        ops: vec![op("x", &[("gpu", 1.0)], 0)],
        edges: Vec::new(),
        groups: vec![DeviceGroup {
            name: "all".into(),
            devices: ["n0a", "n0b", "n1a", "n1b"].map(String::from).to_vec(),
        }],
        carried: Vec::new(),
    };
    // The time to all-reduce 4000 B of partial sums over the group.
    let all_reduce = |inst: &Instance| {
        use tessera_place::split::Layout;
        let g = inst.d;
        comm_time(
            inst,
            &reshard(inst, g, Layout::Partial, g, Layout::Replicated, 4000),
        )
    };
    let inst = Instance::new(p).expect("valid");
    assert!(close(all_reduce(&inst), 2.4e-3), "{}", all_reduce(&inst));
    // Every link as fast: one level, the flat ring (6 steps of 1000 B at 1 MB/s).
    let mut one = inst.problem.clone();
    for l in &mut one.links {
        l.bandwidth = 1e6;
    }
    let one = Instance::new(one).expect("valid");
    assert!(close(all_reduce(&one), 6e-3), "{}", all_reduce(&one));
}
