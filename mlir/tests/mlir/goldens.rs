//! Lowering goldens: `testdata/mlir/lower/*.tir` are IR graphs (placed or not) with
//! FileCheck-style expectations on what the lowering prints (the manifest, then each
//! device's module). The first line is `// RUN: TARGET`. Every case that lowers is also
//! checked by MLIR's verifier, JIT-compiled and run on deterministic inputs, and must agree
//! with the reference interpreter; `// expected-error: TEXT` says lowering fails with TEXT.
//! `TESSERA_GOLDEN_PRINT=1` prints what each case lowers to.

use std::path::PathBuf;

use tessera_ir::{ElemType, Graph, Tensor, interp, text};
use tessera_mlir::lower::{LowerOptions, lower};
use tessera_mlir::{Mlir, Runner};

use crate::filecheck::{check, parse_test_file};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// Deterministic inputs: floats in [-2, 2), integers in [1, 4), alternating bools.
fn inputs(g: &Graph) -> Vec<Tensor> {
    let mut state = 0x2545_f491_u64;
    let mut next = || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as f64 / (1u64 << 31) as f64
    };
    g.inputs()
        .iter()
        .map(|&v| {
            let ty = g.ty(v);
            let dims: Vec<usize> = ty
                .static_dims()
                .expect("static inputs")
                .iter()
                .map(|&d| d as usize)
                .collect();
            let n: usize = dims.iter().product();
            let bytes: Vec<u8> = (0..n)
                .flat_map(|i| match ty.elem {
                    ElemType::F32 => ((next() * 4.0 - 2.0) as f32).to_le_bytes().to_vec(),
                    ElemType::F64 => (next() * 4.0 - 2.0).to_le_bytes().to_vec(),
                    ElemType::I64 => (1 + (next() * 3.0) as i64).to_le_bytes().to_vec(),
                    ElemType::I32 => (1 + (next() * 3.0) as i32).to_le_bytes().to_vec(),
                    ElemType::Bool => vec![(i % 2) as u8],
                    other => panic!("no generator for {other:?} inputs"),
                })
                .collect();
            Tensor::from_le_bytes(ty.elem, &dims, &bytes).expect("input")
        })
        .collect()
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    a.ty() == b.ty()
        && a.to_f64_vec()
            .iter()
            .zip(b.to_f64_vec())
            .all(|(x, y)| (x - y).abs() <= 1e-5 + 1e-4 * y.abs() || (x.is_nan() && y.is_nan()))
}

#[test]
fn lowering_goldens() {
    let dir = root().join("testdata/mlir/lower");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("testdata/mlir/lower")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tir"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let mlir = Mlir::new();
    let mut failures = Vec::new();
    let mut cases = 0;
    for file in &files {
        let src = std::fs::read_to_string(file).expect("read");
        let (target_name, parsed) =
            parse_test_file(&src).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let target = tessera_targets::resolve(&target_name, &[]).expect("target");
        for case in parsed {
            cases += 1;
            let at = format!("{}:{}", file.display(), case.line);
            let g = match text::parse(&case.input, None) {
                Ok(g) => g,
                Err(e) => {
                    failures.push(format!("{at}: parse: {e}"));
                    continue;
                }
            };
            let lowered = lower(
                &g,
                &LowerOptions {
                    target: target.spec(),
                    model: "golden".into(),
                    donate_state: true,
                },
            );
            let program = match (lowered, case.errors.is_empty()) {
                (Ok(p), true) => p,
                (Err(e), false) => {
                    for want in &case.errors {
                        if !e.0.contains(want.as_str()) {
                            failures.push(format!("{at}: error `{}` lacks `{want}`", e.0));
                        }
                    }
                    continue;
                }
                (Ok(_), false) => {
                    failures.push(format!("{at}: lowered, but an error was expected"));
                    continue;
                }
                (Err(e), true) => {
                    failures.push(format!("{at}: {}", e.0));
                    continue;
                }
            };
            let mut out = serde_json::to_string_pretty(&program.manifest).expect("json");
            out.push('\n');
            for (d, m) in &program.modules {
                if let Err(e) = mlir.parse(m, d) {
                    failures.push(format!("{at}: {e}"));
                }
                out.push_str(m);
            }
            if std::env::var_os("TESSERA_GOLDEN_PRINT").is_some() {
                println!("==== {at}\n{out}");
            }
            if let Err(e) = check(&out, &case.checks) {
                failures.push(format!("{at}: {e}"));
                continue;
            }
            let xs = inputs(&g);
            let want = match interp::run(&g, &xs) {
                Ok(w) => w,
                Err(e) => {
                    failures.push(format!("{at}: interpreter: {e}"));
                    continue;
                }
            };
            let weights = program.weight_tensors().expect("weights");
            let got = Runner::new(
                &mlir,
                program.manifest.clone(),
                &program.module_map(),
                weights,
                0,
            )
            .and_then(|r| r.run(&xs));
            match got {
                Ok(got)
                    if got.len() == want.len()
                        && got.iter().zip(&want).all(|(a, b)| close(a, b)) => {}
                Ok(got) => {
                    failures.push(format!("{at}: JIT gives {got:?}, the interpreter {want:?}"))
                }
                Err(e) => failures.push(format!("{at}: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// glibc's allocator statistics (`mallinfo2`): `uordblks` is the bytes in use.
#[repr(C)]
#[derive(Default)]
struct MallInfo2 {
    arena: usize,
    ordblks: usize,
    smblks: usize,
    hblks: usize,
    hblkhd: usize,
    usmblks: usize,
    fsmblks: usize,
    uordblks: usize,
    fordblks: usize,
    keepcost: usize,
}

#[allow(unsafe_code)]
unsafe extern "C" {
    fn mallinfo2() -> MallInfo2;
}

#[allow(unsafe_code)]
fn heap_in_use() -> usize {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { mallinfo2() };
    m.uordblks + m.hblkhd
}

/// The compiled code's result buffers go back to the allocator after each call: a step's
/// outputs (a training step's whole state) do not accumulate. Results that are a fresh
/// buffer, an input returned as is, a constant and one value returned twice, 50 calls.
#[test]
fn result_buffers_are_freed() {
    let src = "const @c : f32[2] = [1.0, 2.0]\n\n\
        graph @g(%x: f32[512, 512]) {\n  \
          %y = add %x, %x : f32[512, 512]\n  \
          %k = const @c : f32[2]\n  \
          return %y, %x, %k, %y\n}\n";
    let g = text::parse(src, None).expect("parses");
    let target = tessera_targets::resolve("cpu", &[]).expect("target");
    let program = lower(
        &g,
        &LowerOptions {
            target: target.spec(),
            model: "free".into(),
            donate_state: true,
        },
    )
    .expect("lowers");
    let mlir = Mlir::new();
    let runner = Runner::new(
        &mlir,
        program.manifest.clone(),
        &program.module_map(),
        program.weight_tensors().expect("weights"),
        0,
    )
    .expect("compiles");
    let xs = inputs(&g);
    let want = interp::run(&g, &xs).expect("interprets");
    assert_eq!(runner.run(&xs).expect("runs"), want);
    let before = heap_in_use();
    for _ in 0..50 {
        let got = runner.run(&xs).expect("runs");
        assert_eq!(got.len(), 4);
    }
    let grown = heap_in_use().saturating_sub(before);
    // A leak keeps at least one 1 MiB result per call.
    assert!(
        grown < 4 << 20,
        "the heap grew by {grown} bytes over 50 calls"
    );
}
