//! The strategies against each other on random small problems (exhaustive search is the
//! reference optimum), the pipeline DP against brute force on chains, and `auto` on a large
//! synthetic mesh problem.

#[path = "common/mesh.rs"]
mod mesh;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tessera_place::problem::{Device, Edge, Link, OpSpec, Problem, VERSION};
use tessera_place::strategy::{self, Solution, SolveOptions};
use tessera_place::{Instance, Objective, ProblemError, evaluate, lower_bound, violation};

use mesh::{layered_mesh, splitmix};

/// A random small problem (see the module doc of the test): 3-7 ops, 2-3 devices of 1-2
/// kinds, unsupported ops, tight or loose memory, forward edges, sometimes a colocation group
/// or a pin, and a line, ring or switch topology.
fn random_problem(seed: u64) -> Problem {
    let mut s = seed;
    let mut r = |m: u64| splitmix(&mut s) % m;
    let n = 3 + r(5) as usize;
    let d = 2 + r(2) as usize;
    let kinds = 1 + r(2) as usize;
    let tight = r(3) == 0;
    let mut ops = Vec::new();
    let mut total_mem = 0;
    let grouped = if r(3) == 0 {
        Some((r(n as u64) as usize, r(n as u64) as usize))
    } else {
        None
    };
    let pinned = if r(4) == 0 {
        Some((r(n as u64) as usize, r(d as u64) as usize))
    } else {
        None
    };
    for o in 0..n {
        let mut time = BTreeMap::new();
        for k in 0..kinds {
            // Kind 1 lacks some ops; kind 0 has them all.
            if k == 0 || r(4) != 0 {
                time.insert(format!("k{k}"), 0.1 + r(100) as f64 / 10.0);
            }
        }
        let memory = r(100);
        total_mem += memory;
        let in_group = grouped.is_some_and(|(a, b)| a != b && (o == a || o == b));
        ops.push(OpSpec {
            name: format!("op{o}"),
            kind: if r(3) == 0 { "b".into() } else { "a".into() },
            time,
            memory,
            colocate: in_group.then(|| "g".to_string()),
            pin: pinned
                .filter(|&(p, _)| p == o)
                .map(|(_, k)| format!("dev{k}")),
            spmd: Vec::new(),
        });
    }
    let devices: Vec<Device> = (0..d)
        .map(|k| Device {
            name: format!("dev{k}"),
            kind: format!("k{}", k % kinds),
            memory: if tight {
                total_mem / d as u64 + r(150)
            } else {
                total_mem + 2000
            },
            unsupported_ops: if k > 0 && r(4) == 0 {
                vec!["b".into()]
            } else {
                Vec::new()
            },
            // Some devices cannot overlap transfers with compute.
            overlap: r(4) != 0,
        })
        .collect();
    // One byte size per (producer, tensor): consumers of a tensor get the same bytes.
    let mut edges = Vec::new();
    for from in 0..n {
        let sizes = [1 + r(1000), 1 + r(1000)];
        for to in from + 1..n {
            if r(5) < 2 {
                let tensor = r(2) as u32;
                edges.push(Edge {
                    from,
                    to,
                    bytes: sizes[tensor as usize],
                    tensor,
                });
            }
        }
    }
    let mut routers = Vec::new();
    let mut links = Vec::new();
    let link = |a: String, b: String, r: &mut dyn FnMut(u64) -> u64| Link {
        a,
        b,
        bandwidth: 100.0 + r(900) as f64,
        latency: r(10) as f64 / 100.0,
    };
    match r(3) {
        0 => {
            for k in 0..d - 1 {
                links.push(link(format!("dev{k}"), format!("dev{}", k + 1), &mut r));
            }
        }
        1 => {
            for k in 0..d {
                links.push(link(
                    format!("dev{k}"),
                    format!("dev{}", (k + 1) % d),
                    &mut r,
                ));
            }
        }
        _ => {
            routers.push("sw".to_string());
            for k in 0..d {
                links.push(link(format!("dev{k}"), "sw".into(), &mut r));
            }
        }
    }
    Problem {
        version: VERSION,
        name: format!("random-{seed}"),
        devices,
        routers,
        links,
        ops,
        edges,
    }
}

/// The heuristics, with the factor (over the optimum in the problem's order) they are
/// checked against: heuristics have no worst-case guarantee, so these are measured. Over
/// 20,000 random problems per objective (`heuristic_factors_measured` with 20,000 seeds, in
/// release mode) the worst ratios were: greedy 4.74 (throughput) / 2.84 (latency), heft 3.69
/// / 2.84, multilevel 2.62 / 1.93, local 2.46 / 2.46, dp 4.65 / 4.57 (dp is only checked to
/// be no better than the optimum: it is restricted to contiguous splits), auto 1.00 (it runs
/// exhaustive). The factors leave room above those; the proptest seed is fixed so the
/// check is deterministic.
const HEURISTICS: &[(&str, f64)] = &[
    ("greedy", 6.0),
    ("heft", 5.0),
    ("multilevel", 4.0),
    ("local", 4.0),
    ("auto", 1.0),
];

/// The strategies that solve a problem directly (their plans are checked, not only `run`'s).
fn direct(name: &str, inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    match name {
        "exhaustive" => strategy::exhaustive::solve(inst, opts),
        "dp" => strategy::dp::solve(inst, opts),
        "heft" => strategy::heft::solve(inst, opts),
        "greedy" => strategy::baseline::greedy(inst, opts),
        "multilevel" => strategy::multilevel::solve(inst, opts),
        "ilp" => strategy::ilp::solve(inst, opts),
        _ => strategy::run(name, inst, opts).map(|(s, _, _)| s),
    }
}

const ALL: &[&str] = &[
    "ilp",
    "dp",
    "heft",
    "multilevel",
    "greedy",
    "single",
    "round-robin",
    "local",
    "auto",
];

/// Checks one random problem for one objective; returns (strategy, value / optimum) pairs.
fn check(seed: u64, objective: Objective, factors: bool) -> Vec<(String, f64)> {
    let Ok(inst) = Instance::new(random_problem(seed)) else {
        return Vec::new();
    };
    let opts = SolveOptions { objective };
    let exact = strategy::exhaustive::solve(&inst, &opts);
    let mut ratios = Vec::new();
    let Ok(opt_sol) = exact else {
        for name in ALL {
            let r = direct(name, &inst, &opts);
            assert!(
                r.is_err(),
                "seed {seed} {objective}: `{name}` found a plan where exhaustive found none: {:?}",
                r.ok().map(|s| violation(&inst, &s.assign))
            );
        }
        return ratios;
    };
    assert_eq!(violation(&inst, &opt_sol.assign), None);
    let opt = opt_sol.value(&inst, objective);
    let lb = lower_bound(&inst, objective).expect("feasible problem has a bound");
    assert!(
        lb.value <= opt * (1.0 + 1e-9),
        "seed {seed} {objective}: bound {} above optimum {opt}",
        lb.value
    );
    let mut values = BTreeMap::new();
    for name in ALL {
        let Ok(sol) = direct(name, &inst, &opts) else {
            continue;
        };
        assert_eq!(
            violation(&inst, &sol.assign),
            None,
            "seed {seed} {objective}: `{name}` gave an infeasible plan"
        );
        assert!(
            tessera_place::eval::is_topological(&inst, &sol.order),
            "seed {seed}: `{name}`'s order is not topological"
        );
        let v = evaluate(&inst, &sol.assign, &sol.order).value(objective);
        values.insert(*name, v);
        ratios.push((name.to_string(), if opt > 0.0 { v / opt } else { 1.0 }));
    }
    if objective == Objective::Throughput && strategy::ilp::fits(&inst) {
        // Tiny problems: the ILP proves its optimum within its node limit.
        let v = *values.get("ilp").expect("ilp solves tiny problems");
        assert!(
            (v - opt).abs() <= 1e-9 * opt.max(f64::MIN_POSITIVE),
            "seed {seed}: ilp {v}, exhaustive {opt}"
        );
    }
    // Plans in the problem's order can never beat the optimum over that order.
    for name in ["dp", "greedy", "single", "round-robin"] {
        if let Some(&v) = values.get(name) {
            assert!(
                v >= opt * (1.0 - 1e-9),
                "seed {seed} {objective}: `{name}` {v} below the optimum {opt}"
            );
        }
    }
    let auto = *values
        .get("auto")
        .expect("auto runs exhaustive, so it finds a plan");
    for name in strategy::auto_candidates(&inst) {
        if let Ok((sol, _, _)) = strategy::run(name, &inst, &opts) {
            assert!(
                auto <= sol.value(&inst, objective) * (1.0 + 1e-12),
                "seed {seed} {objective}: auto {auto} worse than `{name}`"
            );
        }
    }
    for &(name, factor) in HEURISTICS {
        if !factors {
            break;
        }
        if let Some(&v) = values.get(name) {
            assert!(
                v <= opt * factor * (1.0 + 1e-9),
                "seed {seed} {objective}: `{name}` {v} more than {factor}x the optimum {opt}"
            );
        }
    }
    ratios
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x7e55e7a),
        ..ProptestConfig::default()
    })]

    #[test]
    fn strategies_on_random_small_problems(seed in any::<u64>()) {
        check(seed, Objective::Throughput, true);
        check(seed, Objective::Latency, true);
    }

    #[test]
    fn dp_is_exact_on_chains(seed in any::<u64>()) {
        dp_on_chain(seed);
    }
}

/// A random chain of 2-9 ops on two devices of different kinds joined by one link, memory
/// loose: the DP's model is then exact, so it must match brute force over every contiguous
/// split (prefix on one device, suffix on the other, in either order).
fn dp_on_chain(seed: u64) {
    let mut s = seed;
    let mut r = |m: u64| splitmix(&mut s) % m;
    let n = 2 + r(8) as usize;
    let ops = (0..n)
        .map(|o| OpSpec {
            name: format!("op{o}"),
            kind: "a".into(),
            time: BTreeMap::from([
                ("x".to_string(), 0.1 + r(100) as f64 / 10.0),
                ("y".to_string(), 0.1 + r(100) as f64 / 10.0),
            ]),
            memory: r(10),
            colocate: None,
            pin: None,
            spmd: Vec::new(),
        })
        .collect();
    let edges = (1..n)
        .map(|o| Edge {
            from: o - 1,
            to: o,
            bytes: r(2000),
            tensor: 0,
        })
        .collect();
    let p = Problem {
        version: VERSION,
        name: "chain".into(),
        devices: vec![
            Device {
                name: "d0".into(),
                kind: "x".into(),
                memory: 1 << 40,
                unsupported_ops: Vec::new(),
                overlap: true,
            },
            Device {
                name: "d1".into(),
                kind: "y".into(),
                memory: 1 << 40,
                unsupported_ops: Vec::new(),
                overlap: true,
            },
        ],
        routers: Vec::new(),
        links: vec![Link {
            a: "d0".into(),
            b: "d1".into(),
            bandwidth: 100.0 + r(900) as f64,
            latency: r(10) as f64 / 100.0,
        }],
        ops,
        edges,
    };
    let inst = Instance::new(p).expect("valid chain");
    for objective in [Objective::Throughput, Objective::Latency] {
        let opts = SolveOptions { objective };
        let dp = strategy::dp::solve(&inst, &opts).expect("loose memory: dp finds a split");
        let dp_value = dp.value(&inst, objective);
        let mut brute = f64::INFINITY;
        for (first, second) in [(0, 1), (1, 0)] {
            for c in 0..=n {
                let assign: Vec<usize> =
                    (0..n).map(|o| if o < c { first } else { second }).collect();
                let v = Solution::in_problem_order(&inst, assign).value(&inst, objective);
                brute = brute.min(v);
            }
        }
        assert!(
            (dp_value - brute).abs() <= 1e-9 * brute.max(1.0),
            "seed {seed} {objective}: dp {dp_value}, brute force {brute}"
        );
    }
}

/// The worst ratio to the optimum each strategy reaches over 400 seeds (20,000 to set the
/// factors above); run with `--nocapture` to see them. The other checks run on each seed.
#[test]
fn heuristic_factors_measured() {
    let mut worst: BTreeMap<(String, Objective), f64> = BTreeMap::new();
    for seed in 0..400u64 {
        for objective in [Objective::Throughput, Objective::Latency] {
            for (name, ratio) in check(seed.wrapping_mul(0x9E37_79B9), objective, false) {
                let w = worst.entry((name, objective)).or_insert(1.0);
                *w = w.max(ratio);
            }
        }
    }
    for ((name, objective), w) in &worst {
        println!("worst {name} / optimum ({objective}): {w:.3}");
    }
}

/// `auto` on a 10,000-op layered DAG on a 4x4 mesh gives a feasible plan for both
/// objectives (the 100,000-op case is timed in release mode by the `auto_mesh` example).
#[test]
fn auto_on_large_mesh_problem() {
    let inst = Instance::new(layered_mesh(10_000, 4, 4, 7)).expect("valid mesh problem");
    for objective in [Objective::Throughput, Objective::Latency] {
        let opts = SolveOptions { objective };
        let (sol, chosen, attempts) =
            strategy::run("auto", &inst, &opts).expect("auto finds a plan");
        assert_eq!(violation(&inst, &sol.assign), None, "{chosen}");
        let best = attempts
            .iter()
            .filter_map(|a| a.outcome.as_ref().ok())
            .fold(f64::INFINITY, |a, &b| a.min(b));
        assert_eq!(sol.value(&inst, objective), best);
        // The plan uses the mesh: far below one chiplet doing all the work (which does not
        // fit in one chiplet's memory anyway).
        let work: f64 = (0..inst.n).map(|o| inst.min_time(o)).sum();
        assert!(sol.value(&inst, objective) < work / 4.0, "{objective}");
    }
}

/// Every strategy on mid-sized problems with tight memory (above exhaustive's size, so the
/// heuristics and the DP run alone): plans are feasible with topological orders, local
/// search never makes a plan worse, and `auto` is at least as good as each strategy.
#[test]
fn strategies_on_tight_mid_sized_problems() {
    for (n, rows, cols, slack) in [
        (300, 2, 2, 1.3),
        (200, 2, 2, 2.0),
        (400, 2, 3, 2.5),
        (300, 1, 3, 3.0),
    ] {
        let mut p = layered_mesh(n, rows, cols, n as u64);
        let total: u64 = p.ops.iter().map(|o| o.memory).sum();
        let d = p.devices.len();
        for dev in &mut p.devices {
            dev.memory = (total as f64 / d as f64 * slack) as u64;
        }
        let inst = Instance::new(p).expect("valid problem");
        for objective in [Objective::Throughput, Objective::Latency] {
            let opts = SolveOptions { objective };
            let mut values = BTreeMap::new();
            for name in ALL {
                let Ok(sol) = direct(name, &inst, &opts) else {
                    continue;
                };
                assert_eq!(violation(&inst, &sol.assign), None, "{name} on {n} ops");
                assert!(tessera_place::eval::is_topological(&inst, &sol.order));
                values.insert(*name, sol.value(&inst, objective));
                if ["greedy", "heft", "dp"].contains(name) {
                    let better = strategy::local::improve(&inst, sol.clone(), &opts);
                    assert_eq!(violation(&inst, &better.assign), None);
                    assert!(better.value(&inst, objective) <= sol.value(&inst, objective));
                }
            }
            let auto = values["auto"];
            for (name, v) in &values {
                assert!(
                    auto <= v * (1.0 + 1e-12),
                    "{n} ops {objective}: auto {auto} > {name} {v}"
                );
            }
            // With memory at 1.3x the ops' own (received tensors need about as much again),
            // only some strategies find a plan (multilevel does); with 2x and more, most do.
            assert!(
                values.contains_key("auto"),
                "{n} ops {objective}: {values:?}"
            );
            if slack >= 2.0 {
                assert!(values.len() >= 6, "{n} ops {objective}: {values:?}");
            }
        }
    }
}

/// Edge cases: no ops, and one device.
#[test]
fn strategies_on_degenerate_problems() {
    let mut empty = random_problem(1);
    empty.ops.clear();
    empty.edges.clear();
    let mut one = random_problem(2);
    one.devices.truncate(1);
    one.devices[0].memory = 1 << 40;
    one.devices[0].unsupported_ops.clear();
    one.links.clear();
    one.routers.clear();
    for op in &mut one.ops {
        op.pin = None;
        op.time.insert("k0".into(), 1.0);
    }
    for p in [empty, one] {
        let inst = Instance::new(p).expect("valid problem");
        for objective in [Objective::Throughput, Objective::Latency] {
            let opts = SolveOptions { objective };
            for name in ALL {
                if name == &"ilp" && objective == Objective::Latency {
                    continue;
                }
                let sol = direct(name, &inst, &opts).expect("trivial problem");
                assert_eq!(violation(&inst, &sol.assign), None, "{name}");
            }
        }
    }
}
