//! tessera's fuzz targets: one function per input kind, each taking the code path the command
//! line takes for that input. An `Err` is a fine answer; a panic, an abort, a stack overflow, an
//! allocation of more than [`MEMORY_LIMIT`] bytes or a run over the time limit is a crash.
//!
//! | kind               | input                | code path (and the properties checked)                     |
//! |--------------------|----------------------|------------------------------------------------------------|
//! | `onnx`             | ONNX bytes           | import (default options); the graph verifies and its text round-trips |
//! | `onnx_structured`  | [`structured::Model`] | the same, on a model built structurally                   |
//! | `text_ir`          | `.tir` text          | parse, verify; `print(parse(x))` parses and prints the same |
//! | `target_toml`      | target TOML          | `parse_target`; routes from every device (small targets)  |
//! | `calibration_toml` | calibration TOML     | `Calibration::parse`, `check` and `lookup` on a built-in target |
//! | `placement_json`   | placement JSON       | `Problem::parse`, `Instance::new`; greedy, `violation` and the lower bound (small problems) |
//! | `npy`              | `.npy` bytes         | the binary's reader (`src/npy.rs`); decode, encode, decode gives the same bytes |
//!
//! The binaries in `fuzz_targets/` wrap these for libFuzzer; `fuzz/run.sh` builds and runs
//! them (`make fuzz`, and briefly in `make test`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use arbitrary::{Arbitrary, Unstructured};
use tessera_ir::text;

pub mod structured;

/// The `tessera` binary's `.npy` reader and writer, compiled here from its own source file
/// (the binary's package links MLIR, which a fuzz build should not have to build).
#[allow(dead_code, missing_docs, clippy::all)]
#[path = "../../src/npy.rs"]
mod npy;

/// The input kinds, as the binaries and `testdata/fuzz/<kind>/` name them.
pub const KINDS: &[&str] = &[
    "onnx",
    "onnx_structured",
    "text_ir",
    "target_toml",
    "calibration_toml",
    "placement_json",
    "npy",
];

/// The most memory a run may hold at once, and so the largest single allocation: 2 GiB.
pub const MEMORY_LIMIT: usize = 2 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The fuzz binaries' global allocator: the system's, aborting (a crash libFuzzer records
/// with its input) when the live heap would pass [`MEMORY_LIMIT`], so that an input that
/// makes the code ask for a huge buffer is found at once, not when the machine runs out.
pub struct LimitedAlloc;

impl LimitedAlloc {
    fn grow(n: usize) {
        let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
        if n > MEMORY_LIMIT || live > MEMORY_LIMIT {
            // No allocation here: the allocator is what failed.
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"==tessera-fuzz== allocation over the 2 GiB memory limit\n",
            );
            std::process::abort();
        }
    }
}

// SAFETY: every call forwards to `System` with the same arguments; the counter is only
// bookkeeping.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::grow(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::grow(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::grow(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// ONNX bytes: imported with the default options, as `tessera import` does.
pub fn onnx(data: &[u8]) {
    import_checked(bytes::Bytes::copy_from_slice(data));
}

/// A model built structurally from the bytes ([`structured::Model`]), encoded and imported.
pub fn onnx_structured(data: &[u8]) {
    static OPS: OnceLock<Vec<&'static str>> = OnceLock::new();
    let ops = OPS.get_or_init(tessera_onnx::supported_ops);
    let Ok(model) = structured::Model::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    import_checked(model.encode(ops).into());
}

/// Imports a model; when it imports, the graph must verify (the command line calls a failure
/// there an importer bug) and its text form must round-trip.
fn import_checked(data: bytes::Bytes) {
    let options = tessera_onnx::ImportOptions::default();
    let Ok(graph) = tessera_onnx::import_bytes(data, None, Path::new("fuzz.onnx"), &options) else {
        return;
    };
    if let Err(findings) = tessera_ir::verify::verify(&graph) {
        let notes: Vec<_> = findings
            .iter()
            .map(|f| (f.entity, f.message.clone()))
            .collect();
        panic!(
            "the imported graph does not verify:\n{}",
            text::print_annotated(&graph, &notes)
        );
    }
    round_trip(&graph);
}

/// `print(g)` parses again and prints identically: the graph is saved (text and sidecar, as
/// `tessera import -o` writes it) to a scratch folder of this process, loaded and printed.
fn round_trip(graph: &tessera_ir::Graph) {
    static SCRATCH: OnceLock<std::path::PathBuf> = OnceLock::new();
    let dir = SCRATCH.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("tessera-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the scratch folder can be made");
        dir
    });
    let path = dir.join("g.tir");
    let printed = text::print(graph);
    if let Err(e) = text::save(graph, &path) {
        panic!("a graph that parsed or imported does not save: {e}\n{printed}");
    }
    let again = match text::load(&path) {
        Ok(g) => g,
        Err(e) => panic!("the printed graph does not parse: {e}\n{printed}"),
    };
    let reprinted = text::print(&again);
    assert_eq!(
        printed, reprinted,
        "printing the parsed printed graph changes it"
    );
}

/// Text IR: parsed and verified, as `tessera fmt` does; a graph that parses round-trips.
pub fn text_ir(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(graph) = text::parse(src, None) else {
        return;
    };
    let _ = tessera_ir::verify::verify(&graph);
    round_trip(&graph);
}

/// Target files: parsed and validated; on targets of up to 64 devices, the routes from
/// every device (what the cost model and placement compute next).
pub fn target_toml(data: &[u8]) {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = tessera_targets::parse_target(src, "fuzz.toml") else {
        return;
    };
    if spec.devices.len() <= 64 {
        for d in 0..spec.devices.len() {
            let _ = spec.routes_from(d);
        }
    }
}

/// The graph calibration files are looked up on: the README example's ops and shapes.
const CALIBRATION_GRAPH: &str =
    "graph @g(%x: f32[8, 512], %w: f32[512, 512], %v: f32[8, 16], %u: f32[16, 4]) {
  %0 = matmul %x, %w : f32[8, 512]
  %1 = softmax %0 {axis = 1} : f32[8, 512]
  %2 = matmul %v, %u : f32[8, 4]
  %3 = add %2, %2 : f32[8, 4]
  return %1, %3
}
";

/// Calibration files: parsed, checked against the built-in `hetero-cpu-gpu` target and looked
/// up for every op of a small graph on every device of it.
pub fn calibration_toml(data: &[u8]) {
    static CONTEXT: OnceLock<(tessera_targets::TargetSpec, tessera_ir::Graph)> = OnceLock::new();
    let (spec, graph) = CONTEXT.get_or_init(|| {
        let spec = tessera_targets::builtin_target("hetero-cpu-gpu")
            .and_then(Result::ok)
            .expect("the built-in target hetero-cpu-gpu resolves");
        let graph = text::parse(CALIBRATION_GRAPH, None).expect("the calibration graph parses");
        (spec, graph)
    });
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cal) = tessera_targets::Calibration::parse(src, "fuzz.toml") else {
        return;
    };
    if cal.check(spec).is_err() {
        return;
    }
    for &op in graph.ops() {
        for device in &spec.devices {
            let _ = cal.lookup(graph, op, device);
        }
    }
}

/// Placement problems: parsed and validated, as `tessera place` does; on problems of up to
/// 200 ops and 16 devices, the greedy strategy, its plan's check and the lower bound.
pub fn placement_json(data: &[u8]) {
    use tessera_place::{Instance, Objective, Problem, SolveOptions};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(problem) = Problem::parse(text, "fuzz.json") else {
        return;
    };
    let small = problem.ops.len() <= 200 && problem.devices.len() <= 16;
    let Ok(inst) = Instance::new(problem) else {
        return;
    };
    if !small {
        return;
    }
    for objective in [Objective::Throughput, Objective::Latency] {
        let opts = SolveOptions { objective };
        if let Ok(sol) = tessera_place::strategy::baseline::greedy(&inst, &opts) {
            let _ = tessera_place::violation(&inst, &sol.assign);
            let _ = tessera_place::evaluate(&inst, &sol.assign, &sol.order);
        }
        let _ = tessera_place::lower_bound(&inst, objective);
    }
}

/// `.npy` files: the binary's reader; a file that decodes encodes to bytes that decode and
/// encode to the same bytes.
pub fn npy(data: &[u8]) {
    let Ok(tensor) = npy::decode(data) else {
        return;
    };
    let mut first = Vec::new();
    npy::encode(&tensor, &mut first).expect("a decoded tensor encodes");
    let again = npy::decode(&first).expect("an encoded tensor decodes");
    let mut second = Vec::new();
    npy::encode(&again, &mut second).expect("a decoded tensor encodes");
    assert!(first == second, "decode(encode(t)) encodes differently");
}
