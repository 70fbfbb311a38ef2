//! Target files: every built-in resolves, routing is checked by hand on the mesh, ring and
//! switch topologies, and every validation error names its file, line and field.

use std::path::PathBuf;

use tessera_targets::{
    BUILTIN_NAMES, TargetError, TargetSpec, builtin_targets, load_file, lookup, parse_target,
};

fn builtin(name: &str) -> TargetSpec {
    lookup(name, &[]).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn every_builtin_resolves() {
    let all = builtin_targets();
    assert_eq!(all.len(), BUILTIN_NAMES.len());
    for (t, name) in all.iter().zip(BUILTIN_NAMES) {
        assert_eq!(t.name, name);
        assert!(!t.description.is_empty(), "{name}");
        assert!(t.device(&t.host).is_some(), "{name}: host");
        // Every device can reach the host.
        for d in &t.devices {
            t.route(&d.name, &t.host)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
}

#[test]
fn builtin_contents() {
    let cpu = builtin("cpu");
    assert_eq!(cpu.devices.len(), 1);
    assert_eq!(cpu.host, "cpu0");
    assert!(cpu.links.is_empty());
    assert_eq!(cpu.devices[0].lowering, "cpu");
    assert_eq!(cpu.hops("cpu0", "cpu0").expect("same"), 0);

    let mcm = builtin("mcm-2x2");
    let names: Vec<&str> = mcm.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["cpu0", "chip0", "chip1", "chip2", "chip3"]);
    assert_eq!(mcm.links.len(), 1 + 4);
    let chip = mcm.device("chip3").expect("chip3");
    assert_eq!(chip.memory_bytes, 32 << 20);
    assert_eq!(chip.compute["bf16"], 100e12);
    assert_eq!(chip.efficiency["matmul"], 0.8);
    assert_eq!(chip.supported_ops, None);

    let hetero = builtin("hetero-cpu-gpu");
    let a100 = hetero.device("gpu0").expect("gpu0");
    let v100 = hetero.device("gpu1").expect("gpu1");
    assert_eq!(
        (a100.lowering.as_str(), v100.lowering.as_str()),
        ("nvptx", "nvptx")
    );
    assert!(a100.compute.contains_key("bf16") && !v100.compute.contains_key("bf16"));
    assert_eq!(hetero.links[0].bandwidth, 32e9);
    assert_eq!(hetero.links[1].bandwidth, 16e9);
    assert_eq!(hetero.hops("gpu0", "gpu1").expect("via cpu"), 2);
}

#[test]
fn mesh_routes() {
    let t = builtin("mcm-4x4");
    assert_eq!(t.devices.len(), 17);
    // 4x4 mesh: 2 * 4 * 3 = 24 links, plus the host link.
    assert_eq!(t.links.len(), 25);
    assert_eq!(t.hops("chip0", "chip15").expect("corner to corner"), 6);
    assert_eq!(t.hops("chip3", "chip12").expect("other diagonal"), 6);
    assert_eq!(t.hops("chip5", "chip6").expect("neighbours"), 1);
    assert_eq!(t.hops("cpu0", "chip15").expect("host"), 7);
    // Ties go through earlier devices: chip0 -> chip5 goes via chip1 (not chip4).
    let route = t.route("chip0", "chip5").expect("route");
    let ends: Vec<(&str, &str)> = route
        .iter()
        .map(|&l| (t.links[l].a.as_str(), t.links[l].b.as_str()))
        .collect();
    assert_eq!(ends, [("chip0", "chip1"), ("chip1", "chip5")]);
    assert!(t.route("chip0", "nope").is_err());
}

#[test]
fn ring_routes() {
    let t = builtin("mcm-ring4");
    // cpu0-chip0 plus the ring chip0-chip1-chip2-chip3-chip0.
    assert_eq!(t.links.len(), 5);
    assert_eq!(t.hops("chip0", "chip3").expect("wrap"), 1);
    assert_eq!(t.hops("chip0", "chip2").expect("opposite"), 2);
    assert_eq!(t.hops("chip1", "chip3").expect("opposite"), 2);
    assert_eq!(t.hops("cpu0", "chip2").expect("host"), 3);
}

#[test]
fn switch_routes() {
    let t = builtin("gpu-8");
    let sw = t.device("nvswitch").expect("generated switch");
    assert_eq!(sw.kind, "switch");
    for i in 1..8 {
        assert_eq!(t.hops("gpu0", &format!("gpu{i}")).expect("switch"), 2);
    }
    // Two 2-hop routes: through the host's PCIe (32 GB/s) or the switch (300 GB/s); the
    // wider one wins although cpu0 comes first in file order.
    let route = t.route("gpu0", "gpu7").expect("route");
    let via: Vec<(&str, &str)> = route
        .iter()
        .map(|&l| (t.links[l].a.as_str(), t.links[l].b.as_str()))
        .collect();
    assert_eq!(via, [("gpu0", "nvswitch"), ("gpu7", "nvswitch")]);
    assert_eq!(t.hops("cpu0", "gpu5").expect("pcie"), 1);
}

#[test]
fn generators() {
    let src = |topology: &str, extra: &str| {
        format!(
            "host = \"d0\"\n[[device]]\nname = \"d\"\ncount = 6\nkind = \"chip\"\nmemory = 1\n\
             memory_bandwidth = 1\nlowering = \"cpu\"\n[interconnect]\ntopology = \"{topology}\"\n\
             devices = \"d\"\nbandwidth = 1\nlatency = 0\n{extra}"
        )
    };
    let t = parse_target(&src("fully-connected", ""), "fc.toml").expect("fc");
    assert_eq!(t.name, "fc");
    assert_eq!(t.links.len(), 15);
    assert_eq!(t.hops("d0", "d5").expect("direct"), 1);
    let t = parse_target(&src("torus2d", "rows = 2\ncols = 3"), "t.toml").expect("torus");
    // 2x3 torus: rows of 3 wrap (3 links each), columns of 2 do not (3 links).
    assert_eq!(t.links.len(), 9);
    assert_eq!(t.hops("d0", "d2").expect("wrap"), 1);
    assert_eq!(t.hops("d0", "d5").expect("diag"), 2);
    let t = parse_target(
        &src(
            "switch",
            "[[interconnect.link]]\na = \"d0\"\nb = \"switch\"\nbandwidth = 2\nlatency = 0\n",
        ),
        "s.toml",
    )
    .expect("an explicit link to the generated switch");
    assert_eq!(t.links.len(), 7);
    assert_eq!(
        (t.links[0].b.as_str(), t.links[0].bandwidth),
        ("switch", 2.0)
    );
    assert_eq!(t.hops("d1", "d5").expect("via switch"), 2);
    let t = parse_target(&src("ring", ""), "r.toml").expect("ring");
    assert_eq!(t.links.len(), 6);
    assert_eq!(t.hops("d0", "d3").expect("half way"), 3);
    let unlinked = "host = \"a\"\n[[device]]\nname = \"a\"\nkind = \"cpu\"\nmemory = 1\n\
        memory_bandwidth = 1\nlowering = \"cpu\"\n[[device]]\nname = \"b\"\nkind = \"cpu\"\n\
        memory = 1\nmemory_bandwidth = 1\nlowering = \"cpu\"\n";
    let t = parse_target(unlinked, "u.toml").expect("no links");
    assert!(matches!(
        t.route("a", "b"),
        Err(TargetError::Unreachable { .. })
    ));
}

/// A valid file whose line 12 is `memory = ...` of the second device.
const GOOD: &str = r#"name = "t"
description = "test"
host = "cpu0"
[[device]]
name = "cpu0"
kind = "cpu"
memory = 1000
memory_bandwidth = 1e9
lowering = "cpu"
[[device]]
name = "chip"
memory = 2000
count = 4
kind = "chiplet"
memory_bandwidth = 1e9
compute = { f32 = 1e12 }
lowering = "chiplet"
[[interconnect.link]]
a = "cpu0"
b = "chip0"
bandwidth = 1e9
latency = 1e-6
[interconnect]
topology = "mesh2d"
devices = "chip"
rows = 2
cols = 2
bandwidth = 1e9
latency = 1e-7
"#;

/// `GOOD` with `from` replaced by `to` (which must occur), parsed as `bad.toml`.
fn error_of(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    let src = GOOD.replacen(from, to, 1);
    match parse_target(&src, "bad.toml") {
        Ok(_) => panic!("`{to}` was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn good_file_resolves() {
    let t = parse_target(GOOD, "good.toml").expect("good");
    assert_eq!(t.devices.len(), 5);
    assert_eq!(t.links.len(), 5);
}

#[test]
fn validation_errors_name_file_line_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "memory = 2000",
            "memory = 0",
            "bad.toml:12: device.memory: must be positive",
        ),
        (
            "memory = 2000",
            "memory = -5",
            "bad.toml:12: device.memory: must be positive",
        ),
        (
            "memory = 2000",
            "memory = 1.5",
            "bad.toml:12: device.memory: must be a whole number",
        ),
        (
            "memory = 2000",
            "memory = \"lots\"",
            "bad.toml:12: device.memory: expected a number",
        ),
        (
            "count = 4",
            "count = 0",
            "bad.toml:13: device.count: must be positive",
        ),
        (
            "memory_bandwidth = 1e9\nlowering = \"cpu\"",
            "memory_bandwidth = -1e9\nlowering = \"cpu\"",
            "bad.toml:8: device.memory_bandwidth: must be positive",
        ),
        (
            "f32 = 1e12",
            "f32 = 0",
            "bad.toml:16: device.compute.f32: must be positive",
        ),
        (
            "f32 = 1e12",
            "f99 = 1e12",
            "bad.toml:16: device.compute.f99: not an element type",
        ),
        (
            "name = \"chip\"",
            "name = \"cpu\"",
            "bad.toml:11: device.name: duplicate device name `cpu0`",
        ),
        (
            "kind = \"chiplet\"",
            "kind = \"\"",
            "bad.toml:14: device.kind: must not be empty",
        ),
        (
            "b = \"chip0\"",
            "b = \"chip9\"",
            "bad.toml:20: interconnect.link.b: unknown device `chip9`",
        ),
        (
            "a = \"cpu0\"",
            "a = \"gpu0\"",
            "bad.toml:19: interconnect.link.a: unknown device `gpu0`",
        ),
        (
            "b = \"chip0\"",
            "b = \"cpu0\"",
            "bad.toml:20: interconnect.link.b: a link needs two different devices",
        ),
        (
            "bandwidth = 1e9\nlatency = 1e-6",
            "bandwidth = 0\nlatency = 1e-6",
            "bad.toml:21: interconnect.link.bandwidth: must be positive",
        ),
        (
            "latency = 1e-6",
            "latency = -1e-6",
            "bad.toml:22: interconnect.link.latency: must not be negative",
        ),
        (
            "rows = 2",
            "rows = 3",
            "bad.toml:26: interconnect.rows: a 3x2 mesh needs 6 devices, group `chip` has 4",
        ),
        (
            "topology = \"mesh2d\"",
            "topology = \"hypercube\"",
            "bad.toml:24: interconnect.topology: unknown topology `hypercube`",
        ),
        (
            "devices = \"chip\"",
            "devices = \"gpu\"",
            "bad.toml:25: interconnect.devices: unknown device group `gpu`",
        ),
        (
            "bandwidth = 1e9\nlatency = 1e-7",
            "bandwidth = -1\nlatency = 1e-7",
            "bad.toml:28: interconnect.bandwidth: must be positive",
        ),
        (
            "host = \"cpu0\"",
            "host = \"cpu1\"",
            "bad.toml:3: host: unknown device `cpu1`",
        ),
        (
            "cols = 2\n",
            "cols = 2\nswitch = \"s\"\n",
            "bad.toml:28: interconnect.switch: only for the switch topology",
        ),
        (
            "kind = \"cpu\"",
            "kind = \"cpu\"\nflops = 3",
            "bad.toml:7: device: unknown field `flops`",
        ),
        (
            "lowering = \"chiplet\"\n",
            "",
            "bad.toml:10: device: missing field `lowering`",
        ),
        ("name = \"t\"", "name = \"t", "bad.toml:1: "),
        (
            "cols = 2\n",
            "cols = 2\nradix = 2\n",
            "bad.toml:28: interconnect: unknown field `radix`",
        ),
        (
            "latency = 1e-6",
            "latency = 1e-6\nvia = 1",
            "bad.toml:23: interconnect.link: unknown field `via`",
        ),
    ];
    for (from, to, want) in cases {
        let got = error_of(from, to);
        assert!(got.contains(want), "`{to}`:\n  got  {got}\n  want {want}");
    }
}

#[test]
fn files_and_search_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("board.toml");
    std::fs::write(&path, GOOD).expect("write");
    let t = load_file(&path).expect("file");
    assert_eq!(t.name, "t");
    let search = vec![PathBuf::from("/nonexistent"), dir.path().to_path_buf()];
    assert_eq!(lookup("board", &search).expect("on the path").name, "t");
    let by_file = lookup(path.to_str().expect("utf-8"), &[]).expect("by file");
    assert_eq!(by_file, t);
    let e = lookup("nope", &search).expect_err("unknown").to_string();
    assert!(
        e.contains("unknown target `nope`") && e.contains("/nonexistent"),
        "{e}"
    );
    let e = lookup("missing.toml", &[])
        .expect_err("no file")
        .to_string();
    assert!(e.starts_with("missing.toml: "), "{e}");
    // Built-ins come first.
    std::fs::write(dir.path().join("cpu.toml"), GOOD).expect("write");
    assert_eq!(lookup("cpu", &search).expect("builtin").name, "cpu");
    let listed = tessera_targets::list_targets(&search);
    let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names[..BUILTIN_NAMES.len()], BUILTIN_NAMES);
    assert_eq!(names[BUILTIN_NAMES.len()..], ["board"]);
}

#[test]
fn readme_example_resolves() {
    let readme = include_str!("../../README.md");
    let start = readme.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = readme[start..].find("```").expect("closed");
    let t = parse_target(&readme[start..start + len], "my-board.toml").expect("README example");
    assert_eq!(t.name, "my-board");
    assert_eq!(t.devices.len(), 5);
    assert_eq!(t.links.len(), 1 + 4);
    assert_eq!(t.hops("cpu0", "npu3").expect("route"), 3);
    let src = readme[start..start + len].replace("memory = 33_554_432", "memory = 0");
    let e = parse_target(&src, "my-board.toml").expect_err("zero memory");
    assert!(e.to_string().starts_with("my-board.toml:"), "{e}");
}
