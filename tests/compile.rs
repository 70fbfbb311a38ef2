//! `tessera compile`: the README's example output, outputs written with `-o` (placed IR that
//! still computes the same numbers, and compiles again to the same summary), targets from
//! files, calibration files, and bad input.

use std::fs;
use std::path::{Path, PathBuf};

mod common;

use common::cli::{fails, ok, repo, tessera};

/// The fenced block that follows `marker` in the README.
fn readme_block_after(marker: &str) -> String {
    let readme = fs::read_to_string(repo().join("README.md")).expect("README");
    let at = readme.find(marker).expect("marker in README") + marker.len();
    let rest = &readme[at..];
    let open = rest.find("```\n").expect("output block") + 4;
    let len = rest[open..].find("```").expect("closed");
    rest[open..open + len].to_string()
}

#[test]
fn readme_example_output_is_current() {
    let out = ok(tessera().args([
        "compile",
        "testdata/models/onnx/gpt2_tiny/model.onnx",
        "--input-shape",
        "input_ids=1x16",
        "--target",
        "mcm-2x2",
    ]));
    let expected = readme_block_after(
        "tessera compile testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 --target mcm-2x2\n```",
    );
    assert_eq!(out, expected);
}

#[test]
fn writes_placed_ir_that_computes_the_same_and_recompiles_identically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ok(tessera()
        .args([
            "compile",
            "testdata/models/mlp.tir",
            "--target",
            "hetero-cpu-gpu",
            "--input-shape",
            "x=4x16",
            "-o",
        ])
        .arg(dir.path()));
    let summary = fs::read_to_string(dir.path().join("summary.txt")).expect("summary");
    assert_eq!(out, summary);
    let placed = dir.path().join("placed.tir");
    let text = fs::read_to_string(&placed).expect("placed IR");
    for line in text
        .lines()
        .filter(|l| l.starts_with("  %") && !l.contains(" = const "))
    {
        assert!(line.contains(" device(\""), "unplaced: {line}");
    }
    // The placed graph computes what the model computes.
    let input = repo().join("testdata/models/mlp.input.npy");
    let reference = ok(tessera()
        .args(["run", "testdata/models/mlp.tir", "--input"])
        .arg(format!("x={}", input.display())));
    let again = ok(tessera()
        .arg("run")
        .arg(&placed)
        .arg("--input")
        .arg(format!("x={}", input.display())));
    assert_eq!(reference, again);
    // Compiling the placed IR keeps every device: the same simulation.
    let second = ok(tessera().arg("compile").arg(&placed).args([
        "--target",
        "hetero-cpu-gpu",
        "--passes",
        "dce",
    ]));
    let tail = |s: &str| s.lines().skip(2).collect::<Vec<_>>().join("\n");
    assert_eq!(tail(&second), tail(&out));
    assert!(
        second.contains("ops pinned by device annotations"),
        "{second}"
    );
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, text).expect("write");
    p
}

#[test]
fn annotations_choose_devices_and_calibration_changes_times() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(
        dir.path(),
        "duo.toml",
        r#"host = "a"
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
"#,
    );
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[1000]) {\n  %0 = relu %x : f32[1000] device(\"a\")\n  %1 = relu %0 : f32[1000] device(\"b\")\n  return %1\n}\n",
    );
    // The two-stage pipeline of the simulator's tests: latency 3.7 ms, period 1.1 ms; a
    // stream of 16 samples per sample in flight (3.7 / 1.1, rounded up: 4) measures it.
    let out = ok(tessera()
        .arg("compile")
        .arg(&model)
        .arg("--target")
        .arg(&board));
    assert!(out.contains("latency      3.700 ms\n"), "{out}");
    assert!(
        out.contains("(1 / the period 1.100 ms, measured over 64 samples; ")
            && out.contains("busiest      a -> b: busy 1.100 ms per sample"),
        "{out}"
    );
    assert!(
        out.contains("; 2 ops pinned by device annotations\n"),
        "{out}"
    );
    // A stream of the length asked for; lengths out of range are refused.
    let out = ok(tessera()
        .arg("compile")
        .arg(&model)
        .args(["--samples", "5", "--target"])
        .arg(&board));
    assert!(
        out.contains("(1 / the period 1.100 ms, measured over 5 samples; "),
        "{out}"
    );
    for bad in ["0", "4097", "many"] {
        // A usage error (exit code 2), found while parsing.
        let out = tessera()
            .arg("compile")
            .arg(&model)
            .args(["--samples", bad, "--target"])
            .arg(&board)
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!(
                "`{bad}` is not a stream length (expected a number from 1 to 4096, or `auto`)"
            )),
            "{err}"
        );
    }
    // A measured relu on b of 5 ms makes b the bottleneck.
    let cal = write(
        dir.path(),
        "cal.toml",
        "[[measurement]]\ndevice = \"acc\"\nop = \"relu\"\nseconds = 5e-3\n",
    );
    let out = ok(tessera()
        .arg("compile")
        .arg(&model)
        .arg("--target")
        .arg(&board)
        .arg("--calibration")
        .arg(&cal));
    assert!(out.contains("latency      8.200 ms\n"), "{out}");
    assert!(
        out.contains("busiest      b: busy 5.000 ms per sample"),
        "{out}"
    );
    // A calibration naming a device the target lacks.
    let bad = write(
        dir.path(),
        "bad.toml",
        "[[measurement]]\ndevice = \"tpu\"\nop = \"relu\"\nseconds = 1\n",
    );
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&board)
            .arg("--calibration")
            .arg(&bad),
    );
    assert!(
        err.contains(
            "bad.toml:2: measurement.device: target `duo` has no device or device kind `tpu`"
        ),
        "{err}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let err = fails(tessera().args(["compile", "testdata/models/mlp.tir"]));
    assert!(
        err.contains("symbolic shape") && err.contains("--input-shape"),
        "{err}"
    );
    let err = fails(tessera().args([
        "compile",
        "testdata/models/mlp.tir",
        "--target",
        "mcm-9x9",
        "--input-shape",
        "x=1x16",
    ]));
    assert!(err.contains("unknown target `mcm-9x9`"), "{err}");
    let dir = tempfile::tempdir().expect("tempdir");
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[4]) {\n  %0 = relu %x : f32[4] device(\"gpu9\")\n  return %0\n}\n",
    );
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .args(["--target", "gpu-8"]),
    );
    assert!(
        err.contains("relu op0 is placed on `gpu9`, which target `gpu-8` does not have"),
        "{err}"
    );
    // Nothing is written when compilation fails.
    let out = dir.path().join("out");
    fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .args(["--target", "gpu-8", "-o"])
            .arg(&out),
    );
    assert!(!out.exists());
    // A model too big for every device of a target.
    let big = write(
        dir.path(),
        "big.tir",
        "graph @g(%x: f32[10000000000]) {\n  %0 = relu %x : f32[10000000000]\n  return %0\n}\n",
    );
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&big)
            .args(["--target", "mcm-2x2"]),
    );
    assert!(
        err.contains(
            "the ops need 80000000000 bytes, 15865782272 more than all devices hold together"
        ),
        "{err}"
    );
}

// Review tests: odd targets (a device without links), huge shapes, bad calibration files,
// odd graphs, nothing written on error, and the driver's registration checks.

const DUO: &str = r#"host = "a"
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
fn a_device_without_a_route_to_the_host_is_an_error() {
    // `island` has no link: it can never receive an input, so the target file is refused,
    // naming the file, the device's line and the fix.
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(
        dir.path(),
        "isl.toml",
        r#"host = "a"
[[device]]
name = "a"
kind = "cpu"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 1e6 }
lowering = "cpu"
[[device]]
name = "island"
kind = "acc"
memory = 1_000_000
memory_bandwidth = 1e12
compute = { f32 = 2e6 }
lowering = "cpu"
"#,
    );
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[1000]) {\n  %0 = relu %x : f32[1000]\n  return %0\n}\n",
    );
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&board),
    );
    assert!(
        err.contains("isl.toml:10: device.name: device `island` has no route to the host `a`"),
        "{err}"
    );
}

#[test]
fn huge_shapes_are_errors_not_panics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(dir.path(), "duo.toml", DUO);
    // Each value is 2^62 bytes, which the verifier accepts; four of them live at once on
    // the host overflow a u64 byte count.
    let t = "f32[1152921504606846976]";
    let model = write(
        dir.path(),
        "huge.tir",
        &format!(
            "graph @g(%x: {t}, %y: {t}, %z: {t}, %w: {t}) {{\n  %0 = add %x, %y : {t}\n  %1 = add %z, %w : {t}\n  return %0, %1\n}}\n"
        ),
    );
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&board),
    );
    // The ops' modelled times (2^60 elements at 1e6 FLOP/s) are refused first, naming the op.
    assert!(
        err.contains("add op0: its modelled time on `cpu` devices is")
            && err.contains("times must be 0 or up to 1e6 s"),
        "{err}"
    );
}

#[test]
fn bad_calibration_files_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(dir.path(), "duo.toml", DUO);
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[1000]) {\n  %0 = relu %x : f32[1000]\n  return %0\n}\n",
    );
    for (text, expect) in [
        (
            "[[measurement]]\ndevice = \"a\"\nop = \"relu\"\nseconds = nan\n",
            "cal.toml:4",
        ),
        (
            "[[measurement]]\ndevice = \"a\"\nop = \"relu\"\nseconds = -1\n",
            "cal.toml:4",
        ),
        (
            "[[measurement]]\ndevice = \"a\"\nop = \"relux\"\nseconds = 1\n",
            "cal.toml:3",
        ),
        (
            "[[measurement]]\ndevice = \"a\"\nop = \"relu\"\noperands = [\"f32[N]\"]\nseconds = 1\n",
            "cal.toml:4",
        ),
        ("[[measurement]\n", "cal.toml:1"),
        ("measurement = 3\n", "cal.toml:1"),
    ] {
        let cal = write(dir.path(), "cal.toml", text);
        let err = fails(
            tessera()
                .arg("compile")
                .arg(&model)
                .arg("--target")
                .arg(&board)
                .arg("--calibration")
                .arg(&cal),
        );
        assert!(err.contains(expect), "{text}: {err}");
    }
    // A missing file.
    fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&board)
            .arg("--calibration")
            .arg(dir.path().join("missing.toml")),
    );
}

#[test]
fn calibration_for_a_scalar_operand_matches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(dir.path(), "duo.toml", DUO);
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[]) {\n  %0 = relu %x : f32[] device(\"a\")\n  return %0\n}\n",
    );
    let cal = write(
        dir.path(),
        "cal.toml",
        "[[measurement]]\ndevice = \"a\"\nop = \"relu\"\noperands = [\"f32[]\"]\nseconds = 7e-3\n",
    );
    let out = ok(tessera()
        .arg("compile")
        .arg(&model)
        .arg("--target")
        .arg(&board)
        .arg("--calibration")
        .arg(&cal));
    assert!(out.contains("latency      7.000 ms\n"), "{out}");
}

#[test]
fn odd_graphs_compile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(dir.path(), "duo.toml", DUO);
    for (name, text) in [
        ("ident.tir", "graph @g(%x: f32[4]) {\n  return %x, %x\n}\n"),
        (
            "consts.tir",
            "const @c : f32[2] = [1.0, 2.0]\ngraph @g() {\n  %c = const @c : f32[2]\n  return %c\n}\n",
        ),
    ] {
        let model = write(dir.path(), name, text);
        let out = ok(tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&board)
            .arg("-o")
            .arg(dir.path().join(format!("out-{name}"))));
        assert!(out.contains("latency      0.000 s\n"), "{name}: {out}");
    }
}

#[test]
fn nothing_is_written_when_simulation_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let board = write(dir.path(), "duo.toml", DUO);
    // relu is pinned on `b`, which a target with supported_ops refuses.
    let strict = write(
        dir.path(),
        "strict.toml",
        &DUO.replace(
            "compute = { f32 = 2e6 }",
            "compute = { f32 = 2e6 }\nsupported_ops = [\"add\"]",
        ),
    );
    let model = write(
        dir.path(),
        "m.tir",
        "graph @g(%x: f32[1000]) {\n  %0 = relu %x : f32[1000] device(\"b\")\n  return %0\n}\n",
    );
    ok(tessera()
        .arg("compile")
        .arg(&model)
        .arg("--target")
        .arg(&board));
    let out = dir.path().join("out");
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .arg("--target")
            .arg(&strict)
            .arg("-o")
            .arg(&out),
    );
    assert!(err.contains("cannot run on b"), "{err}");
    assert!(!out.exists());
}

fn no_pass(
    _: &tessera_passes::Options,
) -> Result<Box<dyn tessera_passes::Pass>, tessera_passes::PassError> {
    Err(tessera_passes::PassError::new("unused"))
}

#[test]
fn driver_refuses_clashing_and_repeated_names() {
    use std::sync::Arc;
    use tessera::driver::Driver;
    let info = |name: &'static str| tessera_passes::PassInfo {
        name,
        summary: "",
        options: &[],
        create: no_pass,
    };
    // A built-in pass name.
    let err = Driver::new("t")
        .pass(info("cse"))
        .register()
        .expect_err("clash");
    assert!(err.contains("`cse` is already registered"), "{err}");
    // The same pass twice.
    let err = Driver::new("t")
        .pass(info("review-twice"))
        .pass(info("review-twice"))
        .register()
        .expect_err("twice");
    assert!(
        err.contains("`review-twice` is already registered"),
        "{err}"
    );
    // Not kebab-case.
    let err = Driver::new("t")
        .pass(info("Bad_Name"))
        .register()
        .expect_err("bad");
    assert!(err.contains("not kebab-case"), "{err}");
    // A built-in target's name.
    let cpu = tessera_targets::builtin_target("cpu")
        .expect("cpu")
        .expect("valid");
    let err = Driver::new("t")
        .target(Arc::new(cpu.clone()))
        .register()
        .expect_err("clash");
    assert!(err.contains("cpu"), "{err}");
    // The same target twice.
    let mut mine = cpu;
    mine.name = "review-board".to_string();
    let err = Driver::new("t")
        .target(Arc::new(mine.clone()))
        .target(Arc::new(mine))
        .register()
        .expect_err("twice");
    assert!(err.contains("review-board"), "{err}");
}

#[test]
fn recompiling_placed_ir_counts_the_same_ops() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = ok(tessera()
        .args([
            "compile",
            "testdata/models/mlp.tir",
            "--target",
            "mcm-2x2",
            "--input-shape",
            "x=4x16",
            "--passes",
            "canonicalize,cse,dce",
            "-o",
        ])
        .arg(dir.path()));
    assert!(out.contains("): 6 ops\n"), "{out}");
    let again = ok(tessera()
        .arg("compile")
        .arg(dir.path().join("placed.tir"))
        .args(["--target", "mcm-2x2"]));
    // Constants are not ops in the header's count, nor in placement's.
    assert!(again.contains("): 6 ops\n"), "{again}");
    assert!(
        again.contains("; 6 ops pinned by device annotations\n"),
        "{again}"
    );
}

#[test]
fn annotations_that_overflow_a_device_are_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 16 Mi f32 elements in and out: 128 MiB live on a chiplet of 32 MiB.
    let model = write(
        dir.path(),
        "big.tir",
        "graph @g(%x: f32[16777216]) {\n  %0 = relu %x : f32[16777216] device(\"chip1\")\n  return %0\n}\n",
    );
    let out = dir.path().join("out");
    let err = fails(
        tessera()
            .arg("compile")
            .arg(&model)
            .args(["--target", "mcm-2x2", "-o"])
            .arg(&out),
    );
    assert!(
        err.contains("it is pinned to chip1, but needs 67108864 bytes there, 33554432 more than its 33554432 bytes"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn place_solves_a_problem_file_to_the_committed_plan_and_explains_it() {
    let plan = ok(tessera().args(["place", "testdata/placement/two-chips.json"]));
    let want = fs::read_to_string(repo().join("testdata/placement/two-chips.plan.json"))
        .expect("committed plan");
    assert_eq!(
        plan, want,
        "regenerate with: tessera place testdata/placement/two-chips.json > testdata/placement/two-chips.plan.json"
    );
    let text = ok(tessera().args([
        "explain",
        "testdata/placement/two-chips.plan.json",
        "--op",
        "softmax",
    ]));
    assert_eq!(
        text,
        "op softmax on chip0 (fastest)\n  modelled time per device:\n    chip0  500.000 ns  <- \
         chosen\n    chip1  cannot run\n    host   2.000 us\n  why: chip0 runs it fastest \
         (500.000 ns); no allowed device is faster\n"
    );
    let err = fails(tessera().args([
        "explain",
        "testdata/placement/two-chips.plan.json",
        "--op",
        "softmx",
    ]));
    assert!(
        err.contains("no op named `softmx` in the plan; did you mean `softmax`?"),
        "{err}"
    );
}

#[test]
fn an_emitted_problem_replays_to_the_plan_compile_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let problem = dir.path().join("p.json");
    ok(tessera()
        .args([
            "compile",
            "testdata/models/onnx/gpt2_tiny/model.onnx",
            "--input-shape",
            "input_ids=1x16",
            "--target",
            "mcm-4x4",
            "--passes",
            "canonicalize,cse,dce",
            "--strategy",
            "multilevel",
            "--emit-placement-problem",
        ])
        .arg(&problem)
        .arg("-o")
        .arg(dir.path().join("out")));
    let replayed = ok(tessera()
        .arg("place")
        .arg(&problem)
        .args(["--strategy", "multilevel"]));
    let written = fs::read_to_string(dir.path().join("out/plan.json")).expect("plan.json");
    assert_eq!(replayed, written);
    // With `auto`, compile simulates the model's best plans and says which it kept.
    ok(tessera()
        .args([
            "compile",
            "testdata/models/onnx/gpt2_tiny/model.onnx",
            "--input-shape",
            "input_ids=1x16",
            "--target",
            "mcm-4x4",
            "-o",
        ])
        .arg(dir.path().join("auto")));
    let auto = fs::read_to_string(dir.path().join("auto/plan.json")).expect("plan.json");
    assert!(
        auto.contains(
            "\"selected_by\": \"simulation (streams long enough for the steady state) of the \
             10 best plans by the model (its best without splits and its best over each device \
             group);"
        ),
        "{auto}"
    );
    // The same problem solved for latency by HEFT is another valid plan.
    let latency = ok(tessera().arg("place").arg(&problem).args([
        "--objective",
        "latency",
        "--strategy",
        "heft",
        "--no-explain",
    ]));
    assert!(latency.contains("\"objective\": \"latency\""), "{latency}");
    assert!(latency.contains("\"chosen\": \"heft\""), "{latency}");
    assert!(!latency.contains("\"explanations\""), "{latency}");
}

#[test]
fn bad_placement_problems_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = fails(tessera().arg("place").arg(dir.path().join("missing.json")));
    assert!(err.contains("missing.json: No such file"), "{err}");
    let bad = write(dir.path(), "bad.json", "{\"version\": 1, \"devices\": [}");
    let err = fails(tessera().arg("place").arg(&bad));
    assert!(
        err.contains("bad.json: ") && err.contains("line 1"),
        "{err}"
    );
    // An unknown strategy is a usage error (exit code 2), found while parsing.
    let out = tessera()
        .args([
            "place",
            "testdata/placement/two-chips.json",
            "--strategy",
            "magic",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown strategy `magic`"), "{err}");
    // A bad objective is a usage error (exit code 2).
    let out = tessera()
        .args([
            "place",
            "testdata/placement/two-chips.json",
            "--objective",
            "speed",
        ])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown objective `speed`"), "{err}");
}

#[test]
fn dot_shows_the_placed_graph_with_devices_as_clusters() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dot = tmp.path().join("g.dot");
    ok(tessera()
        .args([
            "compile",
            "testdata/models/onnx/mlp/model.onnx",
            "--input-shape",
            "x=4x32",
        ])
        .args(["--target", "mcm-2x2", "--strategy", "round-robin", "--dot"])
        .arg(&dot)
        .args(["-o"])
        .arg(tmp.path().join("out")));
    let text = fs::read_to_string(&dot).expect("dot");
    assert!(text.starts_with("digraph \"main_graph\" {\n") && text.ends_with("}\n"));
    assert_eq!(text.matches('{').count(), text.matches('}').count());
    // One cluster per device with work, each op node in exactly one place.
    let placed = fs::read_to_string(tmp.path().join("out/placed.tir")).expect("placed IR");
    let mut devices: Vec<&str> = placed
        .lines()
        .filter_map(|l| l.split("device(\"").nth(1))
        .filter_map(|d| d.split('"').next())
        .collect();
    devices.sort();
    devices.dedup();
    assert!(
        devices.len() >= 3,
        "round-robin spreads the ops: {devices:?}"
    );
    for d in &devices {
        assert_eq!(
            text.matches(&format!("label=\"{d}\";")).count(),
            1,
            "cluster {d}"
        );
    }
    let ops = placed
        .lines()
        .filter(|l| l.contains(" = ") && l.contains("device(") && !l.contains(" = const "))
        .count();
    let nodes = text
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("op") && l.contains("[label=") && !l.contains(" -> ")
        })
        .count();
    assert_eq!(nodes, ops, "{text}");
    assert!(
        text.contains("in0 [shape=oval, label=\"%x\\nf32[4, 32]\"];"),
        "{text}"
    );
    assert!(text.contains(" -> out0;"));
    // Same input, same bytes; `tessera opt --dot` writes the optimized graph the same way.
    let again = tmp.path().join("again.dot");
    ok(tessera()
        .args([
            "compile",
            "testdata/models/onnx/mlp/model.onnx",
            "--input-shape",
            "x=4x32",
        ])
        .args(["--target", "mcm-2x2", "--strategy", "round-robin", "--dot"])
        .arg(&again));
    assert_eq!(
        fs::read(&dot).expect("dot"),
        fs::read(&again).expect("again")
    );
    let opt = tmp.path().join("opt.dot");
    ok(tessera()
        .args([
            "opt",
            "testdata/models/mlp.tir",
            "--passes",
            "canonicalize",
            "--dot",
        ])
        .arg(&opt));
    let text = fs::read_to_string(&opt).expect("opt dot");
    assert!(
        text.starts_with("digraph ") && !text.contains("subgraph cluster_"),
        "{text}"
    );
}

/// `tessera compile` of the test MLP into the folder given next (`-o`).
const COMPILE_MLP_TO: [&str; 5] = [
    "compile",
    "testdata/models/mlp.tir",
    "--input-shape",
    "x=4x16",
    "-o",
];

/// The files of a directory with their bytes, by name.
fn dir_files(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .expect("readable dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).expect("readable file"),
            )
        })
        .collect()
}

/// Fails naming the files that differ between two [`dir_files`] (not their bytes).
fn same_files(
    got: &std::collections::BTreeMap<String, Vec<u8>>,
    want: &std::collections::BTreeMap<String, Vec<u8>>,
    what: &str,
) {
    let differ: Vec<&String> = got
        .keys()
        .chain(want.keys())
        .filter(|n| got.get(*n) != want.get(*n))
        .collect();
    assert!(differ.is_empty(), "{what}: {differ:?} differ");
}

#[test]
fn a_killed_compile_leaves_the_old_output_or_the_new_one() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = scratch.path().join("build");
    let compile = |cmd: &mut assert_cmd::Command| {
        cmd.args(COMPILE_MLP_TO)
            .arg(&out)
            .env("SOURCE_DATE_EPOCH", "0");
    };
    let mut cmd = tessera();
    compile(&mut cmd);
    ok(&mut cmd);
    let whole = dir_files(&out);
    assert!(
        whole.contains_key("manifest.json") && whole.len() >= 8,
        "{:?}",
        whole.keys()
    );
    let started = std::time::Instant::now();
    let mut cmd = tessera();
    compile(&mut cmd);
    ok(&mut cmd);
    let took = started.elapsed();
    // Kill compiles at times spread over a whole run, into an existing folder and into none:
    // every time the folder is absent or whole, never a mix.
    let mut outcomes = std::collections::BTreeSet::new();
    for k in 0..12u32 {
        if k % 2 == 1 && out.exists() {
            fs::remove_dir_all(&out).expect("remove the output");
        }
        let existed = out.exists();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"));
        cmd.current_dir(repo());
        cmd.args(COMPILE_MLP_TO)
            .arg(&out)
            .env("SOURCE_DATE_EPOCH", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("spawns");
        std::thread::sleep(took.mul_f64(f64::from(k % 6 + 1) / 6.5));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        if out.exists() {
            same_files(
                &dir_files(&out),
                &whole,
                &format!("kill {k}: a mix of files"),
            );
            outcomes.insert("whole");
        } else {
            assert!(!existed, "kill {k}: the old output is gone");
            outcomes.insert("absent");
        }
    }
    assert!(outcomes.contains("whole"), "{outcomes:?}");
    // The next compile cleans the temporary folders the killed ones left.
    let mut cmd = tessera();
    compile(&mut cmd);
    ok(&mut cmd);
    same_files(&dir_files(&out), &whole, "the compile after the kills");
    let left: Vec<String> = fs::read_dir(scratch.path())
        .expect("scratch")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["build"], "temporary folders left behind");
}

/// Whether a process runs (exists and is not a zombie).
fn process_runs(pid: &str) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let state = s.rsplit_once(") ")?.1.chars().next()?;
            Some(state != 'Z' && state != 'X')
        })
        .unwrap_or(false)
}

#[test]
fn a_killed_compile_leaves_no_clang_running() {
    // A clang that records its pid and hangs: the compile is killed while it runs.
    let scratch = tempfile::tempdir().expect("tempdir");
    let prefix = scratch.path().join("llvm");
    fs::create_dir_all(prefix.join("bin")).expect("bin");
    let clang = prefix.join("bin/clang");
    let pidfile = scratch.path().join("clang.pid");
    fs::write(
        &clang,
        format!(
            "#!/bin/sh\necho $$ > '{}'\nexec sleep 60\n",
            pidfile.display()
        ),
    )
    .expect("fake clang");
    fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(repo())
        .args(COMPILE_MLP_TO)
        .arg(scratch.path().join("build"))
        .env("TESSERA_LLVM_PREFIX", &prefix)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawns");
    let waited = std::time::Instant::now();
    let pid = loop {
        if let Ok(pid) = fs::read_to_string(&pidfile)
            && pid.ends_with('\n')
        {
            break pid.trim().to_string();
        }
        assert!(
            waited.elapsed() < std::time::Duration::from_secs(120),
            "the compile never ran clang"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(process_runs(&pid), "clang {pid} is not running");
    let _ = child.kill(); // SIGKILL
    let _ = child.wait();
    let killed = std::time::Instant::now();
    while process_runs(&pid) {
        assert!(
            killed.elapsed() < std::time::Duration::from_secs(10),
            "clang {pid} outlived the killed compile by 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn output_directories_that_are_not_compile_outputs_are_not_replaced() {
    let scratch = tempfile::tempdir().expect("tempdir");
    fs::write(scratch.path().join("notes.txt"), "mine").expect("write");
    let err = fails(tessera().args(COMPILE_MLP_TO).arg(scratch.path()));
    assert!(
        err.contains("is not empty and is not a tessera compile's output"),
        "{err}"
    );
    assert_eq!(
        fs::read_to_string(scratch.path().join("notes.txt")).expect("still there"),
        "mine"
    );
}
