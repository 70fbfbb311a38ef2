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
    // A device with no route to the host is an error at its entry (it was accepted).
    let e = parse_target(unlinked, "u.toml").expect_err("b is cut off from the host");
    assert_eq!(
        e.to_string(),
        "u.toml:9: device.name: device `b` has no route to the host `a`: no chain of links \
         connects them (add an [[interconnect.link]] or put it in the topology's group)"
    );
    let linked = format!(
        "{unlinked}[[interconnect.link]]\na = \"a\"\nb = \"b\"\nbandwidth = 1\nlatency = 0\n"
    );
    let mut t = parse_target(&linked, "u.toml").expect("linked");
    // A target built in code may still leave devices unreachable: routing says so.
    t.links.clear();
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
        // Absurd numbers: each would overflow a sum or break the LP bound downstream.
        (
            "latency = 1e-6",
            "latency = 1e308",
            "bad.toml:22: interconnect.link.latency: must be at most 1e6 seconds",
        ),
        (
            "latency = 1e-6",
            "latency = 1e-320",
            "bad.toml:22: interconnect.link.latency: must be 0 or at least",
        ),
        (
            "latency = 1e-6",
            "latency = nan",
            "bad.toml:22: interconnect.link.latency: must be finite",
        ),
        (
            "bandwidth = 1e9\nlatency = 1e-6",
            "bandwidth = 1e300\nlatency = 1e-6",
            "bad.toml:21: interconnect.link.bandwidth: must be between 1 and 1e18 per second",
        ),
        (
            "bandwidth = 1e9\nlatency = 1e-6",
            "bandwidth = inf\nlatency = 1e-6",
            "bad.toml:21: interconnect.link.bandwidth: must be finite",
        ),
        (
            "bandwidth = 1e9\nlatency = 1e-7",
            "bandwidth = 1e-300\nlatency = 1e-7",
            "bad.toml:28: interconnect.bandwidth: must be between 1 and 1e18 per second",
        ),
        (
            "latency = 1e-7",
            "latency = 2e6",
            "bad.toml:29: interconnect.latency: must be at most 1e6 seconds",
        ),
        (
            "memory_bandwidth = 1e9\nlowering = \"cpu\"",
            "memory_bandwidth = 0.5\nlowering = \"cpu\"",
            "bad.toml:8: device.memory_bandwidth: must be between 1 and 1e18 per second",
        ),
        (
            "f32 = 1e12",
            "f32 = 1e19",
            "bad.toml:16: device.compute.f32: must be between 1 and 1e18 per second",
        ),
        (
            "memory = 2000",
            "memory = 2305843009213693952",
            "bad.toml:12: device.memory: must be at most 2^60 = 1152921504606846976 bytes",
        ),
        (
            "lowering = \"chiplet\"\n",
            "lowering = \"chiplet\"\nop_overhead = 1e7\n",
            "bad.toml:18: device.op_overhead: must be at most 1e6 seconds",
        ),
        (
            "lowering = \"chiplet\"\n",
            "lowering = \"chiplet\"\nefficiency = { matmul = 1e-9 }\n",
            "bad.toml:18: device.efficiency.matmul: must be at least 1e-6",
        ),
        (
            "lowering = \"chiplet\"\n",
            "lowering = \"chiplet\"\noverlap = \"no\"\n",
            "bad.toml:18: device.overlap: expected true or false, found string",
        ),
        // An unknown lowering (it was accepted and silently got portable loops).
        (
            "lowering = \"chiplet\"",
            "lowering = \"cuda\"",
            "bad.toml:17: device.lowering: unknown lowering `cuda` (expected one of cpu, nvptx, \
             chiplet",
        ),
        (
            "lowering = \"chiplet\"",
            "lowering = \"nvptxx\"",
            "; did you mean `nvptx`?",
        ),
        // `arch` is for NVIDIA GPUs only.
        (
            "lowering = \"chiplet\"\n",
            "lowering = \"chiplet\"\narch = \"sm_70\"\n",
            "bad.toml:18: device.arch: only for devices with lowering = \"nvptx\", not `chiplet`",
        ),
        // A device with no route to the host (it was accepted).
        (
            "[[interconnect.link]]\na = \"cpu0\"\nb = \"chip0\"\nbandwidth = 1e9\nlatency = 1e-6\n",
            "",
            "bad.toml:11: device.name: device `chip0` has no route to the host `cpu0`",
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

/// A CPU host linked to one NVIDIA GPU whose line 13 is `lowering = "nvptx"`; `EXTRA` goes on
/// line 14.
fn gpu_board(extra: &str) -> String {
    format!(
        "host = \"cpu0\"\n[[device]]\nname = \"cpu0\"\nkind = \"cpu\"\nmemory = 1000\n\
         memory_bandwidth = 1e9\nlowering = \"cpu\"\n[[device]]\nname = \"gpu0\"\nkind = \"gpu\"\n\
         memory = 1000\nmemory_bandwidth = 1e9\nlowering = \"nvptx\"\n{extra}\n\
         [[interconnect.link]]\na = \"cpu0\"\nb = \"gpu0\"\nbandwidth = 1e9\nlatency = 0\n"
    )
}

#[test]
fn gpu_architecture_per_device() {
    let t = parse_target(&gpu_board("arch = \"sm_70\""), "g.toml").expect("valid");
    assert_eq!(
        t.device("gpu0").and_then(|d| d.arch.as_deref()),
        Some("sm_70")
    );
    assert_eq!(t.device("cpu0").and_then(|d| d.arch.as_deref()), None);
    // Absent: None (the lowering's default).
    let t = parse_target(&gpu_board(""), "g.toml").expect("valid");
    assert_eq!(t.device("gpu0").expect("gpu0").arch, None);
    for (arch, want) in [
        (
            "\"sm70\"",
            "g.toml:14: device.arch: `sm70` is not a GPU architecture of the form sm_<digits>",
        ),
        (
            "\"sm_7x\"",
            "g.toml:14: device.arch: `sm_7x` is not a GPU architecture of the form sm_<digits>",
        ),
        (
            "\"sm_\"",
            "g.toml:14: device.arch: `sm_` is not a GPU architecture of the form sm_<digits>",
        ),
        (
            "\"sm_99\"",
            "g.toml:14: device.arch: unknown NVIDIA GPU architecture `sm_99` (known: sm_20,",
        ),
        (
            "70",
            "g.toml:14: device: invalid type: integer `70`, expected a string",
        ),
    ] {
        let e = parse_target(&gpu_board(&format!("arch = {arch}")), "g.toml")
            .expect_err(arch)
            .to_string();
        assert!(e.starts_with(want), "{arch}:\n  got  {e}\n  want {want}");
    }
}

#[test]
fn builtin_gpus_carry_their_architecture() {
    let hetero = builtin("hetero-cpu-gpu");
    let arch = |t: &TargetSpec, d: &str| t.device(d).and_then(|d| d.arch.clone());
    assert_eq!(
        arch(&hetero, "gpu1").as_deref(),
        Some("sm_70"),
        "the V100 is Volta"
    );
    assert_eq!(
        arch(&hetero, "gpu0").as_deref(),
        Some("sm_80"),
        "the A100 is Ampere"
    );
    assert_eq!(arch(&hetero, "cpu0"), None);
    let gpu8 = builtin("gpu-8");
    for i in 0..8 {
        assert_eq!(arch(&gpu8, &format!("gpu{i}")).as_deref(), Some("sm_80"));
    }
}

#[test]
fn plugins_register_their_lowerings() {
    let src = GOOD.replace("lowering = \"chiplet\"", "lowering = \"files-test-npu\"");
    let e = parse_target(&src, "p.toml").expect_err("not yet registered");
    assert!(
        e.to_string()
            .starts_with("p.toml:17: device.lowering: unknown lowering `files-test-npu`"),
        "{e}"
    );
    tessera_targets::register_lowering("files-test-npu").expect("registers");
    tessera_targets::register_lowering("files-test-npu").expect("twice is fine");
    assert!(tessera_targets::register_lowering(" ").is_err());
    let t = parse_target(&src, "p.toml").expect("registered");
    assert_eq!(t.device("chip0").expect("chip0").lowering, "files-test-npu");
    let known = tessera_targets::known_lowerings();
    assert_eq!(known[..3], ["cpu", "nvptx", "chiplet"]);
    assert_eq!(known.iter().filter(|k| *k == "files-test-npu").count(), 1);
}

/// A ring of `n` chips and a host linked to the first, as a target file.
fn big_ring(n: usize, extra: &str) -> String {
    format!(
        "host = \"cpu0\"\n[[device]]\nname = \"cpu0\"\nkind = \"cpu\"\nmemory = 1000\n\
         memory_bandwidth = 1e9\nlowering = \"cpu\"\n[[device]]\nname = \"c\"\ncount = {n}\n\
         kind = \"chip\"\nmemory = 1000\nmemory_bandwidth = 1e9\nlowering = \"chiplet\"\n{extra}\
         [[interconnect.link]]\na = \"cpu0\"\nb = \"c0\"\nbandwidth = 1e9\nlatency = 0\n\
         [interconnect]\ntopology = \"ring\"\ndevices = \"c\"\nbandwidth = 1e9\nlatency = 1e-6\n"
    )
}

#[test]
fn a_65536_device_target_validates() {
    // The duplicate-name check compared every device with every earlier one (2^31 string
    // comparisons here); it is a set now.
    let t = parse_target(&big_ring(65_536, ""), "big.toml").expect("valid");
    assert_eq!(t.devices.len(), 65_537);
    assert_eq!(t.links.len(), 65_537);
    assert_eq!(t.devices[65_536].name, "c65535");
    // A duplicate after 65,536 generated names is still found, at its entry's line.
    let dup = "[[device]]\nname = \"c65535\"\nkind = \"chip\"\nmemory = 1\n\
               memory_bandwidth = 1\nlowering = \"cpu\"\n";
    let e = parse_target(&big_ring(65_536, dup), "big.toml").expect_err("duplicate");
    assert_eq!(
        e.to_string(),
        "big.toml:16: device.name: duplicate device name `c65535`"
    );
    // A fully-connected topology that would make 2^31 links is refused up front.
    let src = big_ring(65_536, "").replace("topology = \"ring\"", "topology = \"fully-connected\"");
    let e = parse_target(&src, "big.toml").expect_err("too many links");
    assert_eq!(
        e.to_string(),
        "big.toml:21: interconnect.topology: fully-connected over the 65536 devices of `c` \
         makes 2147450880 links, more than the 1048576 a target may have"
    );
}

/// Every simple route of fewest hops from `src` to `dst`, by depth-first enumeration (tiny
/// graphs only): (width, latency) of each.
fn brute_routes(t: &TargetSpec, src: usize, dst: usize) -> (usize, Vec<(f64, f64)>) {
    let idx = |name: &str| t.device_index(name).expect("device");
    let ends: Vec<(usize, usize)> = t.links.iter().map(|l| (idx(&l.a), idx(&l.b))).collect();
    let mut best_hops = usize::MAX;
    let mut found: Vec<(usize, f64, f64)> = Vec::new();
    // (device, visited, hops, width, latency)
    let mut stack = vec![(src, vec![src], 0usize, f64::INFINITY, 0.0f64)];
    while let Some((at, seen, hops, w, lat)) = stack.pop() {
        if at == dst {
            best_hops = best_hops.min(hops);
            found.push((hops, w, lat));
            continue;
        }
        for (li, &(a, b)) in ends.iter().enumerate() {
            let next = if a == at {
                b
            } else if b == at {
                a
            } else {
                continue;
            };
            if seen.contains(&next) {
                continue;
            }
            let mut s = seen.clone();
            s.push(next);
            let l = &t.links[li];
            stack.push((next, s, hops + 1, w.min(l.bandwidth), lat + l.latency));
        }
    }
    let routes = found
        .into_iter()
        .filter(|r| r.0 == best_hops)
        .map(|r| (r.1, r.2))
        .collect();
    (best_hops, routes)
}

#[test]
fn routes_follow_the_documented_rule_against_brute_force() {
    // Random small graphs with parallel links and mixed widths and latencies: the route is
    // among the fewest-hop ones, the widest of them, and the least latency among the widest.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for case in 0..200 {
        let n = 2 + (next() % 6) as usize;
        let mut src = String::from("host = \"d0\"\n");
        for i in 0..n {
            src += &format!(
                "[[device]]\nname = \"d{i}\"\nkind = \"x\"\nmemory = 1\nmemory_bandwidth = 1\n\
                 lowering = \"cpu\"\n"
            );
        }
        // A spanning chain (so every device reaches the host), then random extra links.
        let mut links = Vec::new();
        for i in 1..n {
            links.push(((next() % i as u64) as usize, i));
        }
        for _ in 0..next() % 8 {
            let (a, b) = ((next() % n as u64) as usize, (next() % n as u64) as usize);
            if a != b {
                links.push((a, b));
            }
        }
        for (a, b) in links {
            src += &format!(
                "[[interconnect.link]]\na = \"d{a}\"\nb = \"d{b}\"\nbandwidth = {}\nlatency = {}\n",
                1 + next() % 3,
                (next() % 3) as f64 * 0.5
            );
        }
        let t = parse_target(&src, "r.toml").unwrap_or_else(|e| panic!("{e}"));
        let router = t.router();
        for a in 0..n {
            let tree = router.tree(a);
            for b in 0..n {
                let (hops, all) = brute_routes(&t, a, b);
                let route = t
                    .route(&t.devices[a].name, &t.devices[b].name)
                    .expect("connected");
                assert_eq!(route.len(), hops, "case {case}: {a} -> {b}");
                let width = route
                    .iter()
                    .map(|&l| t.links[l].bandwidth)
                    .fold(f64::INFINITY, f64::min);
                let latency: f64 = route.iter().map(|&l| t.links[l].latency).sum();
                let widest = all.iter().map(|r| r.0).fold(0.0, f64::max);
                let fastest = all
                    .iter()
                    .filter(|r| r.0 == widest)
                    .map(|r| r.1)
                    .fold(f64::INFINITY, f64::min);
                assert_eq!(
                    (width, latency),
                    (widest, fastest),
                    "case {case}: {a} -> {b}"
                );
                // The tree answers the same, with the route's numbers.
                assert_eq!(tree.route(b).as_ref(), Some(&route));
                assert_eq!(tree.hops(b), Some(hops));
                assert_eq!(tree.bandwidth(b), Some(width));
                assert_eq!(tree.latency(b), Some(latency));
            }
        }
    }
}

#[test]
fn generators_record_their_geometry() {
    use tessera_targets::LayoutKind;
    let chips = |n: usize| (0..n).map(|i| format!("chip{i}")).collect::<Vec<_>>();
    let mesh = builtin("mcm-4x4");
    assert_eq!(mesh.layouts.len(), 1);
    assert_eq!(
        mesh.layouts[0].kind,
        LayoutKind::Mesh {
            rows: 4,
            cols: 4,
            torus: false
        }
    );
    assert_eq!(mesh.layouts[0].kind.topology(), "mesh2d");
    // Row-major: chip5 is row 1, column 1, linked to its four neighbours.
    assert_eq!(mesh.layouts[0].members, chips(16));
    for n in ["chip1", "chip4", "chip6", "chip9"] {
        assert_eq!(mesh.hops("chip5", n).expect("route"), 1, "{n}");
    }
    let ring = builtin("mcm-ring4");
    assert_eq!(ring.layouts[0].kind, LayoutKind::Ring);
    assert_eq!(ring.layouts[0].members, chips(4));
    let star = builtin("gpu-8");
    assert_eq!(
        star.layouts[0].kind,
        LayoutKind::Switch {
            hub: "nvswitch".into()
        }
    );
    assert_eq!(star.layouts[0].members.len(), 8);
    // Explicit links only: no geometry.
    assert!(builtin("hetero-cpu-gpu").layouts.is_empty());
    assert!(builtin("cpu").layouts.is_empty());
    let file = |topology: &str, extra: &str| {
        let src = format!(
            "host = \"d0\"\n[[device]]\nname = \"d\"\ncount = 6\nkind = \"chip\"\nmemory = 1e9\n\
             memory_bandwidth = 1e12\nlowering = \"chiplet\"\n[interconnect]\ntopology = \
             \"{topology}\"\ndevices = \"d\"\nbandwidth = 1e10\nlatency = 1e-7\n{extra}"
        );
        parse_target(&src, "t.toml").unwrap_or_else(|e| panic!("{e}"))
    };
    assert_eq!(
        file("torus2d", "rows = 2\ncols = 3\n").layouts[0].kind,
        LayoutKind::Mesh {
            rows: 2,
            cols: 3,
            torus: true
        }
    );
    let full = file("fully-connected", "");
    assert_eq!(full.layouts[0].kind, LayoutKind::FullyConnected);
    assert_eq!(full.layouts[0].kind.topology(), "fully-connected");
    assert_eq!(full.layouts[0].members[5], "d5");
}
