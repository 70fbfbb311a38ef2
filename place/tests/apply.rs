//! Split plans applied to graphs (`tessera_place::apply`): the conversions between layouts
//! counted by hand on a small MLP, the verifier and the interpreter on the result, and the
//! errors.

use std::collections::BTreeMap;

use tessera_ir::{Graph, Op, Tensor, text};
use tessera_place::apply::{SplitMode, apply_plan, split_problems};
use tessera_place::build::{BuildOptions, Built, build_with};
use tessera_place::{Instance, Problem};
use tessera_targets::CostModel;

fn values(n: usize, scale: f32) -> String {
    (0..n)
        .map(|i| format!("{:?}", ((i * 7 % 13) as f32 - 6.0) * scale))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `z = (relu(x @ w1) @ w2) + x`, with `h = x @ w1` an output too.
fn mlp() -> Graph {
    let src = format!(
        "const @w1 : f32[8, 16] = [{}]\nconst @w2 : f32[16, 8] = [{}]\n\n\
         graph @g(%x: f32[4, 8]) {{\n\
         \x20 %w1 = const @w1 : f32[8, 16]\n\
         \x20 %h = matmul %x, %w1 : f32[4, 16]\n\
         \x20 %a = relu %h : f32[4, 16]\n\
         \x20 %w2 = const @w2 : f32[16, 8]\n\
         \x20 %y = matmul %a, %w2 : f32[4, 8]\n\
         \x20 %z = add %y, %x : f32[4, 8]\n\
         \x20 return %z, %h\n}}\n",
        values(128, 0.1),
        values(128, 0.05)
    );
    text::parse(&src, None).expect("the MLP parses")
}

/// The problem over gpu-8's group of two GPUs (with every group's alternatives: `all`).
fn problems(g: &Graph) -> (Built, Problem) {
    let spec = tessera_targets::lookup("gpu-8", &[]).expect("builtin");
    let cost = CostModel::new(&spec, None);
    let built = build_with(g, &cost, &BuildOptions { splits: true }).expect("built");
    let full = Instance::new(built.problem.clone()).expect("valid");
    let pair = split_problems(&full, SplitMode::Auto, &[], false)
        .into_iter()
        .find(|p| p.groups[0].devices.len() == 2)
        .expect("a group of two GPUs");
    (built, pair)
}

/// The plan that runs each named op as its alternative along `axis` (the others whole on
/// `gpu0`, inputs and outputs where they are pinned).
fn plan(inst: &Instance, axes: &BTreeMap<&str, &str>) -> Vec<usize> {
    let gpu0 = (0..inst.d)
        .find(|&k| inst.device_name(k) == "gpu0")
        .expect("gpu0");
    (0..inst.n)
        .map(|o| match axes.get(inst.op_name(o)) {
            Some(axis) => {
                let a = inst.problem.ops[o]
                    .splits
                    .iter()
                    .position(|s| s.axis == *axis)
                    .unwrap_or_else(|| panic!("{} has no {axis} split", inst.op_name(o)));
                inst.d + a
            }
            None if inst.allowed(o, gpu0) => gpu0,
            None => (0..inst.d).find(|&k| inst.allowed(o, k)).expect("a device"),
        })
        .collect()
}

fn count(g: &Graph, name: &str) -> usize {
    g.ops()
        .iter()
        .filter(|&&o| g.op(o).op.name() == name)
        .count()
}

fn run(g: &Graph) -> Vec<Tensor> {
    let x: Vec<f32> = (0..32).map(|i| i as f32 / 10.0 - 1.5).collect();
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let x = Tensor::from_le_bytes(tessera_ir::ElemType::F32, &[4, 8], &bytes).expect("x");
    tessera_ir::interp::run(g, &[x]).expect("runs")
}

/// Applies the plan of `axes` to `g`; checks the result verifies and computes what `g`
/// computes, and returns it.
fn applied(g: Graph, axes: &[(&str, &str)]) -> Graph {
    let (built, pair) = problems(&g);
    let built = Built {
        problem: pair.clone(),
        ..built
    };
    let inst = Instance::new(pair).expect("valid");
    let assign = plan(&inst, &axes.iter().copied().collect());
    let mut out = g.clone();
    apply_plan(&mut out, &built, &inst, &assign).expect("applied");
    tessera_ir::verify::verify(&out).unwrap_or_else(|e| panic!("{e:?}\n{}", text::print(&out)));
    assert_eq!(run(&out), run(&g));
    assert_eq!(tessera_ir::text::output_names(&out), ["z", "h"]);
    out
}

/// Megatron's pair: columns then rows. The column-split `h` leaves as an output through an
/// all-gather, the rows' partial sum is all-reduced before the whole `add`, each weight is a
/// `const` op of its own, split; the input arrives whole (`R`): nothing cuts it.
#[test]
fn columns_then_rows_need_one_gather_and_one_reduce() {
    let g = applied(mlp(), &[("h", "columns"), ("a", "hidden"), ("y", "rows")]);
    assert_eq!(count(&g, "all-gather"), 1, "{}", text::print(&g));
    assert_eq!(count(&g, "all-reduce"), 1);
    assert_eq!(count(&g, "all-slice"), 0);
    let printed = text::print(&g);
    assert!(
        printed.contains("mesh @split = [2] devices(\"gpu0\", \"gpu1\")"),
        "{printed}"
    );
    for want in [
        "= const @w1 : f32[8, 16] sharded[[], [0]]",
        "= const @w2 : f32[16, 8] sharded[[0], []]",
        "%h = matmul %x, ",
        "%y.sum = all-reduce %y {axes = [0]}",
        "%h.whole = all-gather %h {axes = [0]}",
    ] {
        assert!(printed.contains(want), "{want} in\n{printed}");
    }
    // The whole weights' `const` ops, read by nothing now, are gone.
    assert!(!printed.contains("%w1 = const"), "{printed}");
    let on_mesh = g
        .ops()
        .iter()
        .filter(|&&o| g.op(o).device.as_deref() == Some("@split"))
        .count();
    // h, a, y, the gather and the reduce.
    assert_eq!(on_mesh, 5);
}

/// Layouts that disagree: `a` by rows of the batch after column-split `h` (all-to-all), `y`
/// by rows of the contraction after batch-split `a` (all-to-all), the batch-split `add`
/// after a partial `y` (reduce-scatter) and a whole input `x` (slice), and its split result
/// an output (gather). Each conversion once per value and layout: `h` is gathered once for
/// the output, moved once for `a`.
#[test]
fn disagreeing_layouts_are_converted_once_per_value_and_layout() {
    let g = applied(
        mlp(),
        &[
            ("h", "columns"),
            ("a", "batch"),
            ("y", "rows"),
            ("z", "batch"),
        ],
    );
    let printed = text::print(&g);
    assert_eq!(count(&g, "all-gather"), 2, "{printed}");
    assert_eq!(count(&g, "all-to-all"), 2, "{printed}");
    assert_eq!(count(&g, "reduce-scatter"), 1, "{printed}");
    assert_eq!(count(&g, "all-slice"), 1, "{printed}");
    assert_eq!(count(&g, "all-reduce"), 0, "{printed}");
    for want in [
        "%h.to0 = all-to-all %h {axes = [0]} : f32[4, 16] sharded[[0], []]",
        "%a.to1 = all-to-all %a {axes = [0]} : f32[4, 16] sharded[[], [0]]",
        "%x.block0 = all-slice %x {axes = [0]}",
        "%y.scatter0 = reduce-scatter %y {axes = [0]} : f32[4, 8] sharded[[0], []]",
        "%h.whole = all-gather %h {axes = [0]}",
        "return %z.whole as \"z\", %h.whole as \"h\"",
    ] {
        assert!(printed.contains(want), "{want} in\n{printed}");
    }
}

/// A constant split two ways gets a copy for the second way (the weights file holds one block
/// per device of each constant).
#[test]
fn a_weight_split_two_ways_is_copied_once() {
    // Both matmuls read one [8, 8] weight: the first by columns (S1), the second by rows (S0).
    let src = format!(
        "const @w : f32[8, 8] = [{}]\n\n\
         graph @g(%x: f32[4, 8]) {{\n\
         \x20 %w = const @w : f32[8, 8]\n\
         \x20 %h = matmul %x, %w : f32[4, 8]\n\
         \x20 %a = relu %h : f32[4, 8]\n\
         \x20 %y = matmul %a, %w : f32[4, 8]\n\
         \x20 %z = add %y, %x : f32[4, 8]\n\
         \x20 return %z, %h\n}}\n",
        values(64, 0.1)
    );
    let g = text::parse(&src, None).expect("parses");
    let out = applied(g, &[("h", "columns"), ("a", "hidden"), ("y", "rows")]);
    let printed = text::print(&out);
    assert!(
        printed.contains("const @w.split0 : f32[8, 8] = "),
        "{printed}"
    );
    assert!(
        printed.contains("= const @w : f32[8, 8] sharded[[], [0]]"),
        "{printed}"
    );
    assert!(
        printed.contains("= const @w.split0 : f32[8, 8] sharded[[0], []]"),
        "{printed}"
    );
}

/// A plan over two device groups: one mesh per group (`@split0`, `@split1`), each split op
/// on its group's, values moving between them whole; the result verifies and computes what
/// the graph computes.
#[test]
fn plans_over_two_groups_make_two_meshes() {
    let g = mlp();
    let spec = tessera_targets::lookup("gpu-8", &[]).expect("builtin");
    let cost = CostModel::new(&spec, None);
    let built = build_with(&g, &cost, &BuildOptions { splits: true }).expect("built");
    let inst = Instance::new(built.problem.clone()).expect("valid");
    let mut assign = plan(&inst, &BTreeMap::new());
    // Two groups that share no device (gpu-8's groups are blocks of 8, 4 and 2 GPUs).
    let members = |a: &tessera_place::problem::Alt| &inst.place_devices[inst.d + a.group];
    let mut groups_used: Vec<usize> = Vec::new();
    for (o, x) in assign.iter_mut().enumerate() {
        if let Some(a) = inst.alts[o].iter().position(|a| {
            a.allowed
                && !groups_used.contains(&a.group)
                && groups_used.iter().all(|&g| {
                    let used = &inst.place_devices[inst.d + g];
                    members(a).iter().all(|k| !used.contains(k))
                })
        }) && groups_used.len() < 2
        {
            groups_used.push(inst.alts[o][a].group);
            *x = inst.d + a;
        }
    }
    assert_eq!(groups_used.len(), 2);
    // Overlapping groups are refused: a device would hold two blocks of one weight.
    let mut overlapping = assign.clone();
    let first = groups_used[0];
    let other = (0..inst.problem.groups.len())
        .find(|&g| {
            g != first
                && inst.place_devices[inst.d + g]
                    .iter()
                    .any(|k| inst.place_devices[inst.d + first].contains(k))
        })
        .expect("gpu-8 has overlapping groups");
    let (o, a) = (0..inst.n)
        .find_map(|o| {
            let a = inst.alts[o]
                .iter()
                .position(|a| a.allowed && a.group == other)?;
            (assign[o] < inst.d).then_some((o, a))
        })
        .expect("an op placed whole that can split over the other group");
    overlapping[o] = inst.d + a;
    let e = apply_plan(&mut g.clone(), &built, &inst, &overlapping).expect_err("overlap");
    assert!(e.to_string().contains("which share a device"), "{e}");
    let mut out = g.clone();
    apply_plan(&mut out, &built, &inst, &assign).expect("two groups");
    tessera_ir::verify::verify(&out).unwrap_or_else(|e| panic!("{e:?}\n{}", text::print(&out)));
    let names: Vec<&str> = out.meshes.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["split0", "split1"]);
    for m in &out.meshes {
        let on = m.device_name();
        assert!(
            out.ops()
                .iter()
                .any(|&o| out.op(o).device.as_deref() == Some(on.as_str())),
            "no op on {on}:\n{}",
            text::print(&out)
        );
    }
    assert_eq!(run(&out), run(&g));
}

#[test]
fn plans_a_graph_cannot_take_are_errors() {
    let g = mlp();
    // A graph that already has a mesh (from the shard pass) keeps it.
    let (b2, pair) = problems(&g);
    let b2 = Built {
        problem: pair.clone(),
        ..b2
    };
    let inst = Instance::new(pair).expect("valid");
    let assign = plan(&inst, &BTreeMap::from([("h", "columns")]));
    let mut meshed = g.clone();
    meshed.meshes = vec![tessera_ir::Mesh {
        name: "grid".into(),
        shape: vec![2],
        devices: vec!["gpu2".into(), "gpu3".into()],
    }];
    let e = apply_plan(&mut meshed, &b2, &inst, &assign).expect_err("has a mesh");
    assert!(
        e.to_string().contains("already declares device mesh @grid"),
        "{e}"
    );
    // No split: devices only, no mesh.
    let assign = plan(&inst, &BTreeMap::new());
    let mut whole = g.clone();
    let done = apply_plan(&mut whole, &b2, &inst, &assign).expect("applied");
    assert_eq!(done.split_ops, 0);
    assert!(whole.meshes.is_empty());
    assert!(
        whole
            .ops()
            .iter()
            .all(|&o| matches!(whole.op(o).op, Op::Const(_)) || whole.op(o).device.is_some())
    );
}
