//! Table tests: this input becomes that output, with the stop reason and counters asserted.

use std::time::Duration;

use tessera_eqsat::ir::text;
use tessera_eqsat::{Settings, run_eqsat};
use tessera_passes::Statistics;

fn settings() -> Settings {
    Settings {
        target: String::new(),
        device: String::new(),
        iter_limit: 16,
        node_limit: 20_000,
        time_limit: Duration::from_secs(10),
        region_ops: 256,
        rules: None,
        explain: true,
        fold_limit: 4096,
        exact_nodes: 600,
    }
}

/// Runs eqsat on `src` for `target`; returns the printed result, whether it changed, and
/// the statistics.
fn run(src: &str, target: &str, s: &Settings) -> (String, bool, Statistics) {
    let mut g = text::parse(src, None).unwrap_or_else(|e| panic!("{e}"));
    let t = tessera_targets::lookup(target, &[]).expect("built-in");
    let mut stats = Statistics::default();
    let changed = run_eqsat(&mut g, &t, s, &mut stats).unwrap_or_else(|e| panic!("{e}"));
    tessera_eqsat::ir::verify::verify(&g).expect("result verifies");
    (text::print(&g), changed, stats)
}

#[test]
fn cancelling_transposes_and_identities() {
    let src = r#"const @one : f32[4] = [1.0, 1.0, 1.0, 1.0]
const @zero : f32[4] = [0.0, 0.0, 0.0, 0.0]
graph @g(%x: f32[3, 4]) {
  %one = const @one : f32[4]
  %zero = const @zero : f32[4]
  %t = transpose %x {perm = [1, 0]} : f32[4, 3] loc("t1")
  %u = transpose %t {perm = [1, 0]} : f32[3, 4] loc("t2")
  %m = mul %u, %one : f32[3, 4]
  %a = add %m, %zero : f32[3, 4]
  %y = relu %a : f32[3, 4] loc("act")
  return %y
}
"#;
    let (out, changed, stats) = run(src, "cpu", &settings());
    assert!(changed);
    assert_eq!(
        out,
        r#"graph @g(%x: f32[3, 4]) {
  %y = relu %x : f32[3, 4] loc("act")
  return %y
}
"#
    );
    assert_eq!(stats.get("stop-saturated"), 1);
    assert_eq!(stats.get("regions-rewritten"), 1);
    assert!(stats.get("cost-after-ns") < stats.get("cost-before-ns"));
    let notes = stats.notes().join("\n");
    assert!(notes.contains("transpose-transpose"), "{notes}");
}

#[test]
fn nothing_to_do_keeps_the_graph() {
    let src = r#"graph @g(%x: f32[2, 8], %w: f32[8, 4]) {
  %0 = matmul %x, %w : f32[2, 4]
  %1 = sigmoid %0 : f32[2, 4]
  return %1
}
"#;
    let (out, changed, stats) = run(src, "cpu", &settings());
    assert!(!changed);
    assert_eq!(out, src);
    assert_eq!(stats.get("stop-saturated"), 1);
    assert_eq!(stats.get("cost-after-ns"), stats.get("cost-before-ns"));
}

fn qkv() -> String {
    let w = |name: &str, seed: usize| {
        let vals: Vec<String> = (0..16 * 16)
            .map(|i| format!("{:?}", ((i * 7 + seed * 13) % 17) as f32 / 17.0 - 0.5))
            .collect();
        format!("const @{name} : f32[16, 16] = [{}]\n", vals.join(", "))
    };
    format!(
        "{}{}{}graph @attn(%x: f32[8, 16]) {{
  %wq = const @wq : f32[16, 16]
  %wk = const @wk : f32[16, 16]
  %wv = const @wv : f32[16, 16]
  %q = matmul %x, %wq : f32[8, 16] loc(\"q\")
  %k = matmul %x, %wk : f32[8, 16] loc(\"k\")
  %v = matmul %x, %wv : f32[8, 16] loc(\"v\")
  return %q, %k, %v
}}
",
        w("wq", 1),
        w("wk", 2),
        w("wv", 3)
    )
}

#[test]
fn qkv_projections_merge_where_launches_are_expensive() {
    // On a GPU every op pays a 4 us launch: one wide matmul and a split beat three matmuls.
    // Each output alone is cheaper as its own matmul, so a per-class greedy choice misses
    // it; the exact extraction and the greedy extractor's group moves both find it.
    let mut s = settings();
    s.device = "gpu0".into();
    let (out, changed, stats) = run(&qkv(), "gpu-8", &s);
    assert!(changed, "{out}");
    let body: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(
        body,
        [
            "  %0 = const @merged.eq3 : f32[16, 48]",
            "  %1 = matmul %x, %0 : f32[8, 48]",
            "  %q, %k, %v = split %1 {axis = 1, sizes = [16, 16, 16]} : f32[8, 16], f32[8, 16], f32[8, 16]",
            "  return %q, %k, %v",
        ],
        "{out}"
    );
    assert!(
        stats
            .notes()
            .iter()
            .any(|n| n.contains("merge-matmuls-shared-input")),
        "{:?}",
        stats.notes()
    );
    let mut greedy = s.clone();
    greedy.exact_nodes = 0;
    let (out_greedy, changed, stats) = run(&qkv(), "gpu-8", &greedy);
    assert!(changed);
    assert_eq!(out_greedy, out);
    assert_eq!(stats.get("exact-runs"), 0);
    // On a CPU there is no launch cost, and the split costs a copy: kept as is.
    let (_, changed, _) = run(&qkv(), "cpu", &settings());
    assert!(!changed);
}

#[test]
fn budgets_stop_saturation_and_say_why() {
    let src = r#"graph @g(%a: f32[4], %b: f32[4], %c: f32[4], %d: f32[4]) {
  %0 = add %a, %b : f32[4]
  %1 = add %0, %c : f32[4]
  %2 = add %1, %d : f32[4]
  %3 = mul %2, %a : f32[4]
  return %3
}
"#;
    let mut s = settings();
    s.iter_limit = 1;
    let (_, _, stats) = run(src, "cpu", &s);
    assert_eq!(stats.get("stop-iteration-limit"), 1);
    assert_eq!(stats.get("iterations"), 1);
    let mut s = settings();
    s.node_limit = 8;
    let (_, _, stats) = run(src, "cpu", &s);
    assert_eq!(stats.get("stop-node-limit"), 1);
    assert!(stats.get("egraph-nodes") > 8);
}

#[test]
fn regions_split_a_long_graph() {
    let mut body = String::new();
    let mut prev = "%x".to_string();
    for i in 0..10 {
        body.push_str(&format!(
            "  %t{i} = transpose {prev} {{perm = [1, 0]}} : f32[3, 2]\n  %u{i} = transpose %t{i} {{perm = [1, 0]}} : f32[2, 3]\n  %r{i} = relu %u{i} : f32[2, 3]\n"
        ));
        prev = format!("%r{i}");
    }
    let src = format!("graph @g(%x: f32[2, 3]) {{\n{body}  return {prev}\n}}\n");
    // Regions of 3 ops hold one transpose pair and its relu each: every pair cancels, and
    // the relus, one per region, stay apart.
    let mut s = settings();
    s.region_ops = 3;
    let (out, changed, stats) = run(&src, "cpu", &s);
    assert!(changed);
    assert_eq!(stats.get("regions"), 10);
    assert!(!out.contains("transpose"), "{out}");
    assert_eq!(out.matches("= relu").count(), 10, "{out}");
    // One region: the relu chain collapses too.
    let (out, _, stats) = run(&src, "cpu", &settings());
    assert_eq!(stats.get("regions"), 1);
    assert_eq!(out.matches("= relu").count(), 1, "{out}");
}
