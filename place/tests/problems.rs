//! The foundation of placement: the JSON schema's errors, the evaluation, the lower bound and
//! the exact search, checked against a brute force written here from the definitions.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tessera_place::eval::{evaluate, problem_order, violation};
use tessera_place::problem::{Device, Edge, Link, OpSpec};
use tessera_place::strategy::{self, SolveOptions};
use tessera_place::{Instance, Objective, Problem, ProblemError, lower_bound};

fn example() -> Problem {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/placement/two-chips.json"
    );
    Problem::load(std::path::Path::new(path)).expect("the README example parses")
}

fn err(p: Problem) -> String {
    match Instance::new(p) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_readme_example_solves_to_its_proven_optimum() {
    let inst = Instance::new(example()).expect("valid");
    let plan = tessera_place::solve(&inst, "auto", Objective::Throughput, true).expect("plan");
    // fc1 (4 us) and the mlp group (5 us) on the two chiplets; the period is the group's.
    assert!((plan.value - 5e-6).abs() < 1e-15, "{}", plan.value);
    assert_eq!(plan.gap, 0.0);
    assert_eq!(plan.lower_bound.binding(), "largest-op");
    let dev = |op: &str| {
        plan.assignment
            .iter()
            .find(|a| a.op == op)
            .map(|a| a.device.clone())
            .unwrap_or_default()
    };
    assert_ne!(dev("fc1"), dev("fc2"));
    assert_eq!(dev("gelu"), dev("fc2"));
    // chip1 does not support softmax: its explanation says so in its costs.
    let e = plan.explanation("softmax").expect("explained");
    assert_eq!(e.costs["chip1"], None);
    assert_eq!(
        plan.explanation("input:x").expect("explained").constraint,
        "pin"
    );
    // The plan round-trips through JSON.
    let again = tessera_place::Plan::parse(&plan.to_json(), "plan.json").expect("parses");
    assert_eq!(again, plan);
}

#[test]
fn schema_errors_name_the_file_or_field() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../testdata/placement/two-chips.json"
    ))
    .expect("read");
    let e = Problem::parse(
        &text.replace("\"memory\": 3000000,", "\"memroy\": 3000000,"),
        "p.json",
    )
    .expect_err("unknown field");
    assert!(
        e.to_string().starts_with("p.json: unknown field `memroy`"),
        "{e}"
    );

    let mut p = example();
    p.version = 2;
    assert_eq!(err(p), "version: this tessera reads version 1, not 2");

    let mut p = example();
    p.edges.push(Edge {
        from: 4,
        to: 2,
        bytes: 1,
        tensor: 0,
        operand: 0,
    });
    assert!(err(p).starts_with("edges[5]: goes from ops[4] to ops[2]"));

    let mut p = example();
    p.edges.push(Edge {
        from: 1,
        to: 3,
        bytes: 99,
        tensor: 0,
        operand: 0,
    });
    assert_eq!(
        err(p),
        "edges[5]: tensor 0 of ops[1] has 99 bytes here but 16384 in edges[1]; one tensor has \
         one size"
    );

    let mut p = example();
    p.ops[1].pin = Some("chip9".into());
    assert_eq!(err(p), "ops[1] (fc1).pin: `chip9` is not a device");

    let mut p = example();
    p.links[1].b = "nowhere".into();
    assert_eq!(
        err(p),
        "links[1]: `nowhere` is neither a device nor a router"
    );

    let mut p = example();
    p.ops[4].pin = Some("chip1".into());
    assert_eq!(
        err(p),
        "infeasible: ops[4] (softmax): `softmax` cannot run on chip1 (where it is pinned)"
    );

    let mut p = example();
    p.ops[1].time.insert("chiplet".into(), f64::NAN);
    assert!(err(p).starts_with("ops[1] (fc1).time.chiplet: must be a number >= 0"));
}

#[test]
fn memory_overflow_names_the_device_and_the_amount() {
    // fc1 and softmax pinned on chip0 with 2 MB each, which fit alone but not together (with
    // the 4096-byte input fc1 receives from the host).
    let mut p = example();
    p.ops[1].pin = Some("chip0".into());
    p.ops[4].pin = Some("chip0".into());
    p.ops[4].memory = 2_000_000;
    let inst = Instance::new(p).expect("valid");
    let e = tessera_place::solve(&inst, "auto", Objective::Throughput, false)
        .expect_err("does not fit");
    assert_eq!(
        e.to_string(),
        "infeasible: the ops that can only run on chip0 need 4004096 bytes there, 1004096 \
         more than its 3000000 bytes"
    );
    // One op alone too big for the device it is pinned to.
    let mut p = example();
    p.ops[1].pin = Some("chip0".into());
    p.ops[1].memory = 4_000_000;
    assert_eq!(
        err(p),
        "infeasible: ops[1] (fc1): it is pinned to chip0, but needs 4000000 bytes there, \
         1000000 more than its 3000000 bytes"
    );
    // Nothing fits anywhere: the total is named.
    let mut p = example();
    for op in &mut p.ops {
        op.memory = 30_000_000_000;
    }
    let inst = Instance::new(p).expect("valid");
    let e =
        tessera_place::solve(&inst, "greedy", Objective::Latency, false).expect_err("does not fit");
    assert!(
        e.to_string()
            .contains("more than all devices hold together"),
        "{e}"
    );
}

/// A random small problem: up to 3 devices of up to 2 kinds on a line, with a router
/// sometimes; random times, support, memory, edges, a pin and a colocation group.
fn small_problem() -> impl Strategy<Value = Problem> {
    (2usize..=3, 2usize..=6, any::<u64>()).prop_map(|(d, n, seed)| {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let kinds = ["fast", "slow"];
        let devices: Vec<Device> = (0..d)
            .map(|k| Device {
                name: format!("d{k}"),
                kind: kinds[(next() % 2) as usize].to_string(),
                memory: 1000 + next() % 4000,
                unsupported_ops: if next() % 4 == 0 {
                    vec!["b".into()]
                } else {
                    Vec::new()
                },
                // A third of the devices cannot overlap transfers with compute.
                overlap: next() % 3 != 0,
            })
            .collect();
        let with_router = next() % 3 == 0;
        let mut links = Vec::new();
        for k in 1..d {
            let (a, b) = if with_router {
                ("r".to_string(), format!("d{k}"))
            } else {
                (format!("d{}", k - 1), format!("d{k}"))
            };
            links.push(Link {
                a,
                b,
                bandwidth: 1e3 * (1 + next() % 10) as f64,
                latency: (next() % 3) as f64 * 1e-3,
            });
        }
        if with_router {
            links.push(Link {
                a: "d0".into(),
                b: "r".into(),
                bandwidth: 5e3,
                latency: 1e-3,
            });
        }
        let ops: Vec<OpSpec> = (0..n)
            .map(|o| {
                let mut time = BTreeMap::new();
                for kind in kinds {
                    if next() % 5 != 0 || kind == "slow" {
                        time.insert(kind.to_string(), (1 + next() % 20) as f64 * 1e-3);
                    }
                }
                OpSpec {
                    name: format!("op{o}"),
                    kind: if next() % 3 == 0 {
                        "b".into()
                    } else {
                        "a".into()
                    },
                    time,
                    memory: next() % 1500,
                    colocate: ((1..=2).contains(&o) && next() % 3 == 0).then(|| "g".into()),
                    pin: None,
                    spmd: Vec::new(),
                    splits: Vec::new(),
                }
            })
            .collect();
        let mut edges = Vec::new();
        let bytes: Vec<u64> = (0..n).map(|_| next() % 50).collect();
        for to in 1..n {
            for (from, &b) in bytes.iter().enumerate().take(to) {
                if next() % 3 == 0 || from + 1 == to {
                    edges.push(Edge {
                        from,
                        to,
                        bytes: b,
                        tensor: 0,
                        operand: 0,
                    });
                }
            }
        }
        let mut p = Problem {
            version: 1,
            name: "random".into(),
            devices,
            routers: if with_router {
                vec!["r".into()]
            } else {
                Vec::new()
            },
            links,
            ops,
            edges,
            groups: Vec::new(),
            carried: Vec::new(),
        };
        if next() % 3 == 0 {
            let o = (next() % n as u64) as usize;
            p.ops[o].pin = Some(format!("d{}", next() % d as u64));
        }
        p
    })
}

/// The optimum by enumerating every assignment, from the definitions in `eval`.
fn brute_force(inst: &Instance, objective: Objective) -> Option<f64> {
    let order = problem_order(inst);
    let mut assign = vec![0usize; inst.n];
    let mut best: Option<f64> = None;
    loop {
        if violation(inst, &assign).is_none() {
            let v = evaluate(inst, &assign, &order).value(objective);
            best = Some(best.map_or(v, |b| b.min(v)));
        }
        // Next assignment in base d.
        let mut i = 0;
        loop {
            if i == inst.n {
                return best;
            }
            assign[i] += 1;
            if assign[i] < inst.d {
                break;
            }
            assign[i] = 0;
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn exhaustive_finds_the_optimum_and_the_bound_is_below_it(p in small_problem()) {
        let inst = match Instance::new(p) {
            Ok(i) => i,
            Err(ProblemError::Infeasible(_)) => return Ok(()),
            Err(e) => panic!("generator made an invalid problem: {e}"),
        };
        for objective in [Objective::Throughput, Objective::Latency] {
            let opts = SolveOptions { objective };
            let optimum = brute_force(&inst, objective);
            let exact = strategy::run("exhaustive", &inst, &opts);
            match optimum {
                None => {
                    prop_assert!(exact.is_err());
                    for name in ["greedy", "single", "round-robin", "auto"] {
                        prop_assert!(strategy::run(name, &inst, &opts).is_err(), "{name}");
                    }
                }
                Some(opt) => {
                    let (sol, _, _) = exact.expect("exhaustive finds the plan brute force finds");
                    prop_assert!((sol.value(&inst, objective) - opt).abs() <= opt * 1e-12);
                    if let Ok(lb) = lower_bound(&inst, objective) {
                        prop_assert!(lb.value <= opt * (1.0 + 1e-9), "bound {lb:?} above {opt}");
                    } else {
                        panic!("the bound calls a feasible problem infeasible");
                    }
                    for name in ["greedy", "single", "round-robin", "auto"] {
                        if let Ok((sol, _, _)) = strategy::run(name, &inst, &opts) {
                            prop_assert_eq!(violation(&inst, &sol.assign), None, "{}", name);
                            prop_assert!(sol.value(&inst, objective) >= opt * (1.0 - 1e-12));
                        }
                    }
                    // auto includes exhaustive here, so it is optimal too.
                    let (sol, _, _) = strategy::run("auto", &inst, &opts).expect("auto");
                    prop_assert!((sol.value(&inst, objective) - opt).abs() <= opt * 1e-12);
                }
            }
        }
    }
}

#[test]
fn absurd_numbers_are_refused_when_a_problem_is_read() {
    // Each passed validation and then panicked inside the LP bound (microlp) or summed to
    // infinity, which `place -o` wrote as `null`.
    let at = |f: &dyn Fn(&mut Problem)| {
        let mut p = example();
        f(&mut p);
        err(p)
    };
    assert_eq!(
        at(&|p| {
            p.ops[1].time.insert("chiplet".into(), 1e308);
        }),
        "ops[1] (fc1).time.chiplet: must be a number >= 0 and <= 1e6 (seconds), not 1e308"
    );
    assert_eq!(
        at(&|p| {
            p.ops[1].time.insert("cpu".into(), f64::INFINITY);
        }),
        "ops[1] (fc1).time.cpu: must be a number >= 0 and <= 1e6 (seconds), not inf"
    );
    assert_eq!(
        at(&|p| {
            p.ops[1].time.insert("cpu".into(), 1e-320);
        }),
        "ops[1] (fc1).time.cpu: must be a number >= 0 and <= 1e6 (seconds), not 1e-320"
    );
    assert_eq!(
        at(&|p| p.links[0].latency = 1e308),
        "links[0].latency: must be a number >= 0 and <= 1e6 (seconds), not 1e308"
    );
    assert_eq!(
        at(&|p| p.links[1].bandwidth = 1e-308),
        "links[1].bandwidth: must be a number from 1 to 1e18 (bytes per second), not 1e-308"
    );
    assert_eq!(
        at(&|p| p.links[1].bandwidth = 1e300),
        "links[1].bandwidth: must be a number from 1 to 1e18 (bytes per second), not 1e300"
    );
    assert_eq!(
        at(&|p| p.devices[0].memory = u64::MAX),
        "devices[0].memory: must be at most 2^60 = 1152921504606846976 bytes, not \
         18446744073709551615"
    );
    assert_eq!(
        at(&|p| p.ops[2].memory = 1 << 62),
        "ops[2] (gelu).memory: must be at most 2^60 = 1152921504606846976 bytes, not \
         4611686018427387904"
    );
    assert_eq!(
        at(&|p| p.edges[0].bytes = u64::MAX),
        "edges[0].bytes: must be at most 2^60 = 1152921504606846976 bytes, not \
         18446744073709551615"
    );
    // The problem JSON says the same when read from a file.
    let text = example()
        .to_json()
        .replace("\"latency\": 1e-6", "\"latency\": 1e308");
    let p = Problem::parse(&text, "p.json").expect("parses");
    assert!(err(p).starts_with("links[0].latency: must be a number >= 0"));
}

#[test]
fn the_largest_numbers_allowed_solve_to_finite_plans() {
    // Every number at the edge of its range: the sums stay finite, no solver panics, and the
    // plan's JSON holds numbers (not `null`) that read back.
    let mut p = example();
    for op in &mut p.ops {
        for t in op.time.values_mut() {
            *t = 1e6;
        }
    }
    for l in &mut p.links {
        l.bandwidth = 1.0;
        l.latency = 1e6;
    }
    for d in &mut p.devices {
        d.memory = 1 << 60;
    }
    for e in &mut p.edges {
        e.bytes = 1 << 40;
    }
    p.ops[1].memory = 1 << 58;
    let inst = Instance::new(p).expect("valid");
    for objective in [Objective::Throughput, Objective::Latency] {
        for strategy in tessera_place::STRATEGIES.iter().map(|s| s.0) {
            let plan = match tessera_place::solve(&inst, strategy, objective, true) {
                Ok(plan) => plan,
                // ilp models throughput only.
                Err(ProblemError::Unsolved(why)) if strategy == "ilp" => {
                    assert!(why.contains("throughput only"), "{why}");
                    continue;
                }
                // intra-op chooses among split alternatives: this problem has none.
                Err(ProblemError::Unsolved(why)) if strategy == "intra-op" => {
                    assert!(why.contains("no device group"), "{why}");
                    continue;
                }
                // stages needs two devices besides the host, or two device groups.
                Err(ProblemError::Unsolved(why)) if strategy == "stages" => {
                    assert!(why.contains("no two devices besides the host"), "{why}");
                    continue;
                }
                Err(e) => panic!("{strategy} {objective}: {e}"),
            };
            plan.check_finite().expect("finite");
            assert!(
                plan.value.is_finite() && plan.value >= 1e6,
                "{}",
                plan.value
            );
            let json = plan.try_to_json().expect("finite");
            // The only nulls are the explanations' "cannot run there" costs.
            let cannot: usize = plan
                .explanations
                .iter()
                .map(|e| e.costs.values().filter(|c| c.is_none()).count())
                .sum();
            assert_eq!(json.matches("null").count(), cannot, "{json}");
            let again = tessera_place::Plan::parse(&json, "plan.json").expect("reads back");
            assert_eq!(again, plan);
        }
    }
}

#[test]
fn a_plan_with_a_non_finite_number_is_an_error_not_null() {
    let inst = Instance::new(example()).expect("valid");
    let mut plan =
        tessera_place::solve(&inst, "greedy", Objective::Throughput, true).expect("plan");
    plan.check_finite().expect("a solved plan is finite");
    plan.devices[1].load = f64::INFINITY;
    let e = plan.try_to_json().expect_err("infinite load");
    assert_eq!(
        e.to_string(),
        "plan devices (chip0).load: is inf, which JSON cannot hold; the problem's numbers are \
         too large for its sums"
    );
    plan.devices[1].load = 0.0;
    plan.lower_bound.components.insert("lp".into(), f64::NAN);
    assert!(
        plan.check_finite()
            .expect_err("NaN")
            .to_string()
            .starts_with("plan lower_bound.components.lp: is NaN")
    );
}

#[test]
fn infeasibility_says_what_it_is() {
    // An op no device may run: each device's reason, not "support or memory".
    let mut p = example();
    p.ops[4].time.remove("cpu");
    p.ops[4].memory = 3_500_000;
    assert_eq!(
        err(p),
        "infeasible: ops[4] (softmax): no device can run it: host: no time for kind `cpu`; \
         chip0: 3000000 bytes, less than the 3500000 it needs; chip1: `softmax` is unsupported"
    );
    // Pinned to a device of a kind it has no time for.
    let mut p = example();
    p.ops[1].time.remove("cpu");
    p.ops[1].pin = Some("host".into());
    assert_eq!(
        err(p),
        "infeasible: ops[1] (fc1): it is pinned to host, but has no time for its kind `cpu`"
    );
    // A colocation group whose members exclude every device between them.
    let mut p = example();
    p.ops[3].pin = Some("chip1".into());
    p.ops[2].time.remove("chiplet");
    assert_eq!(
        err(p),
        "infeasible: colocation group `mlp`: no device can run all of its 2 ops: host: `fc2` is \
         pinned to chip1; chip0, chip1: `gelu`: no time for kind `chiplet`"
    );
    // Memory that fits in total, and on every device one op at a time, but not spread over
    // the devices that may run the ops (only the chiplets): the LP relaxation is infeasible,
    // and the exact check names the devices and the overflow.
    let mut p = example();
    for op in &mut p.ops[1..5] {
        op.time.remove("cpu");
        op.memory = 1_700_000;
        op.colocate = None;
    }
    let inst = Instance::new(p).expect("each op fits somewhere");
    assert_eq!(
        lower_bound(&inst, Objective::Throughput)
            .expect_err("no room")
            .to_string(),
        "infeasible: the ops that can only run on chip0, chip1 need 6800000 bytes of their own \
         there, 800000 more than those devices hold together (6000000 bytes), however they are \
         split"
    );
    // Devices that no route connects: not a memory problem (exhaustive said "no assignment
    // fits in memory"); ilp says both.
    let p = Problem {
        version: 1,
        name: "islands".into(),
        devices: ["d0", "d1"]
            .iter()
            .map(|n| Device {
                name: n.to_string(),
                kind: "x".into(),
                memory: 100,
                unsupported_ops: Vec::new(),
                overlap: true,
            })
            .collect(),
        routers: Vec::new(),
        links: Vec::new(),
        ops: ["a", "b"]
            .iter()
            .zip(["d0", "d1"])
            .map(|(n, pin)| OpSpec {
                name: n.to_string(),
                kind: "k".into(),
                time: BTreeMap::from([("x".to_string(), 1.0)]),
                memory: 1,
                colocate: None,
                pin: Some(pin.into()),
                spmd: Vec::new(),
                splits: Vec::new(),
            })
            .collect(),
        edges: vec![Edge {
            from: 0,
            to: 1,
            bytes: 8,
            tensor: 0,
            operand: 0,
        }],
        groups: Vec::new(),
        carried: Vec::new(),
    };
    let inst = Instance::new(p).expect("valid");
    let opts = SolveOptions {
        objective: Objective::Throughput,
    };
    let e = strategy::run("exhaustive", &inst, &opts).expect_err("no route");
    assert_eq!(
        e.to_string(),
        "infeasible: exhaustive: none of the 1 assignments that fit the ops' own memory is \
         feasible; the first fails because `a` on `d0` feeds `b` on `d1`, but no route leads \
         from `d0` to `d1`"
    );
    let e = strategy::run("ilp", &inst, &opts).expect_err("no route");
    assert!(e.to_string().contains("on devices a route connects"), "{e}");
    // Size limits and unmodelled objectives are not infeasibility.
    let e = strategy::run(
        "ilp",
        &inst,
        &SolveOptions {
            objective: Objective::Latency,
        },
    )
    .expect_err("latency");
    assert!(matches!(e, ProblemError::Unsolved(_)), "{e}");
    assert!(!e.to_string().starts_with("infeasible"), "{e}");
}

/// The problem of a training step groups each backward op with the forward op it
/// differentiates (`grad-of`), and leaves the group out when the pins disagree.
#[test]
fn backward_ops_are_colocated_with_their_forward_op() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/ir/state.tir");
    let mut g = tessera_ir::text::load(std::path::Path::new(path)).expect("state.tir");
    let spec = tessera_targets::lookup("mcm-2x2", &[]).expect("builtin");
    let cost = tessera_targets::CostModel::new(&spec, None);
    let groups = |g: &tessera_ir::Graph| -> Vec<(String, Option<String>)> {
        let built = tessera_place::build::build(g, &cost).expect("built");
        built
            .problem
            .ops
            .iter()
            .filter(|o| !o.name.starts_with("input:") && !o.name.starts_with("output:"))
            .map(|o| (o.kind.clone(), o.colocate.clone()))
            .collect()
    };
    let grouped = Some("grad:fc".to_string());
    assert_eq!(
        groups(&g),
        [
            ("matmul".to_string(), grouped.clone()),
            ("transpose".to_string(), grouped.clone()),
            ("matmul".to_string(), grouped),
            ("sub".to_string(), None),
            ("add".to_string(), None),
        ]
    );
    let ops: Vec<_> = g.ops().to_vec();
    g.op_mut(ops[0]).device = Some("chip0".into());
    g.op_mut(ops[2]).device = Some("chip1".into());
    assert!(groups(&g).iter().all(|(_, c)| c.is_none()));
}

/// The latency's schedule lets transfers share a link, so transfers into one pinned op do not
/// add up in its bound: two ops that only GPUs run each send a large tensor to the host's one
/// link; the optimum runs them on two GPUs at once and their transfers overlap.
#[test]
fn the_latency_bound_does_not_serialize_a_link() {
    let device = |name: &str, kind: &str, unsupported: &[&str]| Device {
        name: name.into(),
        kind: kind.into(),
        memory: 1 << 30,
        unsupported_ops: unsupported.iter().map(|s| s.to_string()).collect(),
        overlap: true,
    };
    let link = |a: &str, b: &str| Link {
        a: a.into(),
        b: b.into(),
        bandwidth: 1e6,
        latency: 0.0,
    };
    let op = |name: &str, kind: &str, pin: Option<&str>| OpSpec {
        name: name.into(),
        kind: kind.into(),
        time: [("host".to_string(), 1e-6), ("gpu".to_string(), 1e-6)].into(),
        memory: 0,
        colocate: None,
        pin: pin.map(Into::into),
        spmd: Vec::new(),
        splits: Vec::new(),
    };
    let edge = |from, to, bytes, operand| Edge {
        from,
        to,
        bytes,
        tensor: 0,
        operand,
    };
    let p = Problem {
        version: 1,
        name: "shared-link".into(),
        devices: vec![
            device("h", "host", &["b"]),
            device("g0", "gpu", &[]),
            device("g1", "gpu", &[]),
        ],
        routers: vec!["r".into()],
        links: vec![link("h", "r"), link("r", "g0"), link("r", "g1")],
        ops: vec![
            op("in", "a", Some("h")),
            op("b1", "b", None),
            op("b2", "b", None),
            op("out", "a", Some("h")),
        ],
        // 1 MB each way: one second on a link.
        edges: vec![
            edge(0, 1, 1, 0),
            edge(0, 2, 1, 0),
            edge(1, 3, 1_000_000, 0),
            edge(2, 3, 1_000_000, 1),
        ],
        groups: Vec::new(),
        carried: Vec::new(),
    };
    let inst = Instance::new(p).expect("valid");
    let latency = brute_force(&inst, Objective::Latency).expect("a plan");
    assert!(latency < 1.5, "the two transfers overlap: {latency}");
    let lb = lower_bound(&inst, Objective::Latency).expect("bound");
    assert!(lb.value <= latency * (1.0 + 1e-9), "{lb:?} above {latency}");
    // The period serializes them on the host's one link.
    let period = brute_force(&inst, Objective::Throughput).expect("a plan");
    let lb = lower_bound(&inst, Objective::Throughput).expect("bound");
    assert!(period >= 2.0 && lb.value >= 2.0 - 1e-6, "{period} {lb:?}");
    assert!(lb.value <= period * (1.0 + 1e-9));
}

/// The branched relaxation past its solve limit: op `x` takes 0.5 s on the host, which also
/// runs a pinned op of 1 s, and 4 s on any of eight GPUs. The relaxation spreads `x` over the
/// GPUs (an eighth each, the period 1 s), so it branches on `x`: its main option is a GPU
/// (4 s alone), the others the host (0.5 s) and seven more GPUs, more than it solves. The
/// optimum, `x` on the host, is 1.5 s; the branched bound must reach it and not pass it.
#[test]
fn the_branched_relaxation_tries_every_option_below_its_best() {
    let device = |name: &str, kind: &str| Device {
        name: name.into(),
        kind: kind.into(),
        memory: 1 << 30,
        unsupported_ops: Vec::new(),
        overlap: true,
    };
    let op = |name: &str, host: f64, pin: Option<&str>| OpSpec {
        name: name.into(),
        kind: "k".into(),
        time: [("host".to_string(), host), ("gpu".to_string(), 4.0)].into(),
        memory: 0,
        colocate: None,
        pin: pin.map(Into::into),
        spmd: Vec::new(),
        splits: Vec::new(),
    };
    let p = Problem {
        version: 1,
        name: "spread".into(),
        devices: std::iter::once(device("h", "host"))
            .chain((0..8).map(|i| device(&format!("g{i}"), "gpu")))
            .collect(),
        routers: Vec::new(),
        links: Vec::new(),
        ops: vec![op("a", 1.0, Some("h")), op("x", 0.5, None)],
        edges: Vec::new(),
        groups: Vec::new(),
        carried: Vec::new(),
    };
    let inst = Instance::new(p).expect("valid");
    let optimum = brute_force(&inst, Objective::Throughput).expect("a plan");
    assert!((optimum - 1.5).abs() < 1e-9, "{optimum}");
    let lb = lower_bound(&inst, Objective::Throughput).expect("bound");
    assert!((lb.components["lp"] - 1.0).abs() < 1e-6, "{lb:?}");
    assert!((lb.value - 1.5).abs() < 1e-6, "{lb:?}");
}

/// A training step's recurrence: run `k + 1` reads the state `w` only after run `k` wrote
/// its next value, so the period of a stream is at least the chain from `w`'s reader to its
/// writer (1 + 2 + 3 s, and the 1 s transfer from the host, which no plan avoids), however
/// many devices share the work. The placement model's bound (its busiest device: the four
/// ops' 10 s over two devices) leaves that out; [`tessera_place::LowerBound::step`] takes
/// both. A state whose writer does not follow its reader adds nothing.
#[test]
fn the_recurrence_bounds_a_stream_of_steps() {
    let text = r#"{
      "version": 1,
      "devices": [
        { "name": "host", "kind": "cpu", "memory": 1000000 },
        { "name": "a", "kind": "x", "memory": 1000000 },
        { "name": "b", "kind": "x", "memory": 1000000 }
      ],
      "links": [
        { "a": "host", "b": "a", "bandwidth": 1000, "latency": 0 },
        { "a": "host", "b": "b", "bandwidth": 1000, "latency": 0 },
        { "a": "a", "b": "b", "bandwidth": 1e9, "latency": 0 }
      ],
      "ops": [
        { "name": "input:x", "kind": "input", "time": { "cpu": 0, "x": 0 }, "pin": "host" },
        { "name": "read", "kind": "matmul", "time": { "x": 1 } },
        { "name": "middle", "kind": "relu", "time": { "x": 2 } },
        { "name": "write", "kind": "sub", "time": { "x": 3 } },
        { "name": "side", "kind": "relu", "time": { "x": 4 } }
      ],
      "edges": [
        { "from": 0, "to": 1, "bytes": 1000 },
        { "from": 1, "to": 2, "bytes": 8 },
        { "from": 2, "to": 3, "bytes": 8 }
      ],
      "carried": [
        { "name": "w", "readers": [1], "writer": 3 },
        { "name": "backwards", "readers": [3], "writer": 1 }
      ]
    }"#;
    let p = Problem::parse(text, "step.json").expect("parses");
    // The carried state round-trips through the schema.
    let again = Problem::parse(&p.to_json(), "again.json").expect("parses");
    assert_eq!(again, p);
    let inst = Instance::new(p.clone()).expect("valid");
    let b = lower_bound(&inst, Objective::Throughput).expect("bound");
    assert!((b.value - 5.0).abs() < 1e-6, "{b:?}");
    assert_eq!(b.binding(), "lp");
    assert_eq!(b.recurrence, Some(6.0));
    assert_eq!(b.step(), 6.0);
    // The chain starts at the reader: the input's transfer before it is not in it. With the
    // state read by `read` and by `middle`, the longest chain is still 6 s.
    let mut two = p.clone();
    two.carried[0].readers = vec![2, 1];
    let b = lower_bound(&Instance::new(two).expect("valid"), Objective::Throughput).expect("bound");
    assert_eq!(b.recurrence, Some(6.0));
    // Without carried state: no recurrence.
    let mut none = p.clone();
    none.carried.clear();
    let b =
        lower_bound(&Instance::new(none).expect("valid"), Objective::Throughput).expect("bound");
    assert_eq!(b.recurrence, None);
    assert_eq!(b.step(), b.value);
    // An index out of range is a schema error naming the entry.
    let mut bad = p;
    bad.carried[1].writer = 9;
    assert_eq!(
        err(bad),
        "carried[1]: op index 9 out of range (there are 5 ops)"
    );
}
