//! Lowering goldens: `testdata/mlir/lower/*.tir` are IR graphs (placed or not) with
//! FileCheck-style expectations on what the lowering prints (the manifest, then each
//! device's module). The first line is `// RUN: TARGET`. Every case that lowers is also
//! checked by MLIR's verifier, JIT-compiled and run on deterministic inputs, and must agree
//! with the reference interpreter; `// expected-error: TEXT` says lowering fails with TEXT.
//! `TESSERA_GOLDEN_PRINT=1` prints what each case lowers to.

use std::path::PathBuf;

use tessera_ir::{ElemType, Graph, Tensor, interp, text};
use tessera_mlir::lower::{LowerOptions, Program, lower};
use tessera_mlir::{Mlir, Runner, schedule};

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
                tessera_mlir::GpuDevices::OnCpu,
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

/// `g` lowered for the `cpu` target.
fn lower_cpu(g: &Graph, model: &str, donate_state: bool) -> Program {
    let target = tessera_targets::resolve("cpu", &[]).expect("target");
    lower(
        g,
        &LowerOptions {
            target: target.spec(),
            model: model.into(),
            donate_state,
        },
    )
    .expect("lowers")
}

/// `program` JIT-compiled (opt level 0), ready to run.
fn jit(mlir: &Mlir, program: &Program) -> Runner {
    Runner::new(
        mlir,
        program.manifest.clone(),
        &program.module_map(),
        program.weight_tensors().expect("weights"),
        0,
        tessera_mlir::GpuDevices::OnCpu,
    )
    .expect("compiles")
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
    let program = lower_cpu(&g, "free", true);
    let mlir = Mlir::new();
    let runner = jit(&mlir, &program);
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

/// Compiles and runs a one-input graph (`src`, input `x: f32[N]`) on `xs`; its outputs.
fn run_compiled(src: &str, xs: &[f32]) -> Vec<Tensor> {
    let g = text::parse(src, None).expect("parses");
    let program = lower_cpu(&g, "math", false);
    let mlir = Mlir::new();
    let runner = jit(&mlir, &program);
    let bytes: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let x = Tensor::from_le_bytes(ElemType::F32, &[xs.len()], &bytes).expect("input");
    runner.run(&[x]).expect("runs")
}

/// Units in the last place of `f32` between `got` and the exact `want`.
fn ulps(got: f32, want: f64) -> f64 {
    let spacing = {
        let w = (want as f32).abs();
        f64::from(f32::from_bits(w.to_bits() + 1) - w)
    };
    (f64::from(got) - want).abs() / spacing
}

/// The compiled `tanh` of `f32` (a Taylor series below 0.625, `1 - 2 / (exp(2|x|) + 1)`
/// above, no libm `tanhf`) is within 2 ulp of the exact value everywhere, saturates to
/// +-1, keeps `-0`, `+-inf` and NaN.
#[test]
fn compiled_tanh_is_within_two_ulp() {
    let n = 200_001;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| -20.0 + 40.0 * i as f32 / (n - 1) as f32)
        .collect();
    // Around the switch between the two forms, and tiny values.
    xs.extend((0..2000).map(|i| 0.6 + 0.05 * i as f32 / 2000.0));
    xs.extend((0..2000).map(|i| -(0.6 + 0.05 * i as f32 / 2000.0)));
    xs.extend([
        1e-30,
        -1e-30,
        1e-8,
        3e-4,
        f32::MIN_POSITIVE,
        88.0,
        -100.0,
        1e30,
    ]);
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let src = format!(
        "graph @t(%x: f32[{}]) {{\n  %y = tanh %x : f32[{}]\n  return %y\n}}\n",
        xs.len(),
        xs.len()
    );
    let out = run_compiled(&src, &xs);
    let got = out[0].to_f64_vec();
    let mut worst = (0.0, 0.0f32);
    for (&x, &y) in xs.iter().zip(&got) {
        let y = y as f32;
        if x.is_nan() {
            assert!(y.is_nan(), "tanh(NaN) = {y}");
            continue;
        }
        let want = f64::from(x).tanh();
        let u = ulps(y, want);
        if u > worst.0 {
            worst = (u, x);
        }
        assert!(u <= 2.0, "tanh({x:e}) = {y:e}, want {want:e}: {u} ulp");
        assert_eq!(
            y.is_sign_negative(),
            x.is_sign_negative(),
            "tanh({x:e}) = {y:e}"
        );
    }
    assert!(
        worst.0 > 0.0,
        "every value exact: the check compared nothing"
    );
}

/// `pow` by a constant 2, 3 or 4 is products, left to right (as onnxruntime computes a
/// square and a cube), bit for bit; another exponent is `powf`, within 1 ulp of the exact power.
#[test]
fn compiled_pow_by_small_whole_numbers_is_products() {
    let xs: Vec<f32> = (0..4001).map(|i| -3.0 + 6.0 * i as f32 / 4000.0).collect();
    let n = xs.len();
    let src = format!(
        "const @two : f32[] = [2.0]\nconst @three : f32[] = [3.0]\nconst @four : f32[] = [4.0]\n\
         const @half : f32[] = [2.5]\n\n\
         graph @p(%x: f32[{n}]) {{\n  %c2 = const @two : f32[]\n  %c3 = const @three : f32[]\n  \
         %c4 = const @four : f32[]\n  %ch = const @half : f32[]\n  \
         %a = pow %x, %c2 : f32[{n}]\n  %b = pow %x, %c3 : f32[{n}]\n  \
         %c = pow %x, %c4 : f32[{n}]\n  %d = abs %x : f32[{n}]\n  %e = pow %d, %ch : f32[{n}]\n  \
         return %a, %b, %c, %e\n}}\n"
    );
    let out = run_compiled(&src, &xs);
    for (k, t) in out.iter().take(3).enumerate() {
        for (&x, y) in xs.iter().zip(t.to_f64_vec()) {
            let mut want = x;
            for _ in 0..k + 1 {
                want *= x;
            }
            assert_eq!(y as f32, want, "pow({x}, {})", k + 2);
        }
    }
    for (&x, y) in xs.iter().zip(out[3].to_f64_vec()) {
        let want = f64::from(x.abs()).powf(2.5);
        assert!(ulps(y as f32, want) <= 1.0, "pow({}, 2.5) = {y}", x.abs());
    }
}

/// `count` values for a constant's data, as text: eighths from -1.375 to 1.375 in a
/// pattern `seed` shifts.
fn constant_values(seed: usize, count: usize) -> String {
    (0..count)
        .map(|i| format!("{:?}", ((i * 7919 + seed) % 23) as f32 / 8.0 - 1.375))
        .collect::<Vec<_>>()
        .join(", ")
}

/// JIT-compiles `program` (lowered from `g`) and checks its outputs against the
/// interpreter's on [`inputs`].
fn agrees_with_the_interpreter(g: &Graph, program: &Program) {
    let mlir = Mlir::new();
    let runner = jit(&mlir, program);
    let xs = inputs(g);
    let want = interp::run(g, &xs).expect("interprets");
    let got = runner.run(&xs).expect("runs");
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(close(a, b), "output {i}: {:?} vs {:?}", a.ty(), b.ty());
    }
}

/// Reductions along the innermost loop of a multiple of 16 elements (softmax's maximum
/// and sum, log-softmax's, layer norm's sum and sum of squares, a maximum over the last
/// axis) are vectorized by the schedule with 16 partial results per row, the rows of a
/// large one on threads where there are threads; a sum over the first axis and a mean over
/// 20 elements are not. Every one agrees with the interpreter.
#[test]
fn row_reductions_are_vectorized_and_agree_with_the_interpreter() {
    let src = "graph @rows(%x: f32[3, 5, 32], %y: f32[4, 48], %z: f32[6, 64], %w: f32[2, 20], %s: f32[48], %v: f32[128, 1024]) {\n  \
           %a = softmax %x {axis = 2} : f32[3, 5, 32]\n  \
           %b = log-softmax %y {axis = 1} : f32[4, 48]\n  \
           %c = layer-norm %y, %s {axis = 1, epsilon = 0.00001} : f32[4, 48]\n  \
           %d = reduce-max %z {axes = [1], keep-dims = false} : f32[6]\n  \
           %e = reduce-sum %z {axes = [0], keep-dims = false} : f32[64]\n  \
           %f = reduce-mean %w {axes = [1], keep-dims = true} : f32[2, 1]\n  \
           %h = reduce-max %v {axes = [1], keep-dims = false} : f32[128]\n  \
           return %a, %b, %c, %d, %e, %f, %h\n}\n";
    let g = text::parse(src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "rows", false);
    let mlir = Mlir::new();
    let mut m = mlir.parse(&program.modules[0].1, "rows").expect("parses");
    let body = schedule::apply(&mlir, &mut m, false, "rows").expect("applies");
    mlir.verify(&m, "rows").expect("verifies");
    // Two per softmax, two for layer norm, two for the maxima.
    assert_eq!(
        body.matches("tile_reduction_using_for").count(),
        8,
        "{body}"
    );
    assert!(body.contains("by tile_sizes = [0, 0, 16]"), "{body}");
    assert!(body.contains("by tile_sizes = [0, 16]"), "{body}");
    assert!(!body.contains("tile_using_forall"), "{body}");
    // With threads, the rows of the large maximum (2^17 elements) are an `scf.forall`.
    let mut m = mlir.parse(&program.modules[0].1, "rows").expect("parses");
    let body = schedule::apply(&mlir, &mut m, true, "rows").expect("applies");
    mlir.verify(&m, "rows").expect("verifies");
    assert_eq!(body.matches("tile_using_forall").count(), 1, "{body}");
    assert_eq!(
        body.matches("tile_reduction_using_for").count(),
        8,
        "{body}"
    );
    agrees_with_the_interpreter(&g, &program);
}

/// A product's elementwise ops after it (a convolution's bias and ReLU, a matmul's bias and
/// clip) are computed in the product's tiles, from its block of C in registers: the last
/// one is split and tiled like C, and the others, the product and its fill are fused into
/// its loops (the convolution's 100 pixels as 96 + 4; the matmul's 20 rows as 16 + 4 and
/// 50 columns as 32 + 16 + 2). After the schedule, no generic but the im2col copy and no
/// fill but the padding's is left, with threads or without; a product whose A does not fit
/// a core's L2 cache and whose B does runs its row tiles outermost, each computing all of
/// `n` in pieces; a product whose result is read twice keeps its elementwise op apart.
/// Every result agrees with the interpreter.
#[test]
fn epilogues_are_fused_into_product_tiles_and_agree_with_the_interpreter() {
    let src = format!(
        "const @w : f32[24, 8, 3, 3] = [{}]\nconst @b : f32[24] = [{}]\n\
         const @c : f32[50] = [{}]\n\n\
         graph @ep(%x: f32[1, 8, 10, 10], %y: f32[20, 64], %v: f32[64, 50]) {{\n  \
           %w = const @w : f32[24, 8, 3, 3]\n  %b = const @b : f32[24]\n  \
           %c = const @c : f32[50]\n  \
           %a = conv %x, %w, %b {{dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[1, 24, 10, 10]\n  \
           %r = relu %a : f32[1, 24, 10, 10]\n  \
           %m = matmul %y, %v : f32[20, 50]\n  \
           %n = add %m, %c : f32[20, 50]\n  \
           %k = clip %n {{max = 1.5, min = -0.5}} : f32[20, 50]\n  \
           return %r, %k\n}}\n",
        constant_values(1, 24 * 8 * 9),
        constant_values(2, 24),
        constant_values(3, 50)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "ep", false);
    let mlir = Mlir::new();
    for parallel in [false, true] {
        let mut m = mlir.parse(&program.modules[0].1, "ep").expect("parses");
        let body = schedule::apply(&mlir, &mut m, parallel, "ep").expect("applies");
        mlir.verify(&m, "ep").expect("verifies");
        // The convolution: its bias, product and fill into each of 2 pieces; the matmul:
        // its product and fill into each of 6.
        assert_eq!(
            body.matches("fuse_into_containing_op").count(),
            2 * 3 + 6 * 2,
            "{body}"
        );
        let module = Mlir::print(&m);
        // No generic is left: the im2col copy is vectorized too, a row of 10 at a time
        // (a whole read and write, folded into a copy of the row's slice).
        assert_eq!(module.matches("linalg.generic").count(), 0, "{module}");
        assert!(
            module.contains("[1, 1, 1, 10] [1, 1, 1, 1] : tensor<1x8x12x12xf32> to tensor<10xf32>"),
            "{module}"
        );
        // The four fills of the padded input's border.
        assert_eq!(module.matches("linalg.fill").count(), 4, "{module}");
    }
    agrees_with_the_interpreter(&g, &program);
    // A of more than a core's L2 cache (1024 × 520), B of 49 columns: row tiles of all
    // 49 columns outermost, each split into 32 + 16 + 1 columns within.
    let src = format!(
        "const @a : f32[1024, 520] = [{}]\nconst @c : f32[1024, 1] = [{}]\n\n\
         graph @rows(%x: f32[520, 49]) {{\n  \
           %a = const @a : f32[1024, 520]\n  %c = const @c : f32[1024, 1]\n  \
           %m = matmul %a, %x : f32[1024, 49]\n  \
           %n = add %m, %c : f32[1024, 49]\n  \
           %r = relu %n : f32[1024, 49]\n  \
           return %r\n}}\n",
        constant_values(4, 1024 * 520),
        constant_values(5, 1024)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "rows", false);
    for parallel in [false, true] {
        let mut m = mlir.parse(&program.modules[0].1, "rows").expect("parses");
        let body = schedule::apply(&mlir, &mut m, parallel, "rows").expect("applies");
        mlir.verify(&m, "rows").expect("verifies");
        let rows = if parallel {
            "tile_using_forall %c0_1 tile_sizes [8, 0]"
        } else {
            "tile_using_for %c0_1 tile_sizes [8, 0]"
        };
        assert!(body.contains(rows), "{body}");
        assert!(body.contains("after 32 {dimension = 1}"), "{body}");
        assert!(body.contains("after 16 {dimension = 1}"), "{body}");
        let module = Mlir::print(&m);
        assert!(!module.contains("linalg."), "{module}");
    }
    agrees_with_the_interpreter(&g, &program);
    // The product returned as well as clipped: nothing is fused.
    let src = "graph @two(%y: f32[20, 64], %v: f32[64, 50]) {\n  \
           %m = matmul %y, %v : f32[20, 50]\n  \
           %k = clip %m {max = 1.5, min = -0.5} : f32[20, 50]\n  \
           return %m, %k\n}\n";
    let g = text::parse(src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "two", false);
    let mut m = mlir.parse(&program.modules[0].1, "two").expect("parses");
    let body = schedule::apply(&mlir, &mut m, true, "two").expect("applies");
    assert!(!body.contains("fuse_into_containing_op"), "{body}");
    agrees_with_the_interpreter(&g, &program);
}

/// Depthwise convolutions (one input channel per output channel) are lowered with every
/// tap's window a strided slice and no reduction loop; with padding, strides 1 and 2, a
/// dilation, a bias, one spatial axis, rows of 150 (vectorized in pieces) and a ReLU fused
/// after, they agree with the interpreter; a grouped convolution of two channels per group keeps its reduction loops.
#[test]
fn depthwise_convolutions_agree_with_the_interpreter() {
    let src = format!(
        "const @w : f32[6, 1, 3, 3] = [{}]\nconst @b : f32[6] = [{}]\n\
         const @v : f32[4, 1, 5] = [{}]\nconst @g : f32[6, 2, 3, 3] = [{}]\n\n\
         graph @dw(%x: f32[2, 6, 11, 9], %s: f32[1, 4, 13], %y: f32[1, 6, 3, 150]) {{\n  \
           %w = const @w : f32[6, 1, 3, 3]\n  %b = const @b : f32[6]\n  \
           %v = const @v : f32[4, 1, 5]\n  %g = const @g : f32[6, 2, 3, 3]\n  \
           %a = conv %x, %w, %b {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[2, 6, 11, 9]\n  \
           %r = relu %a : f32[2, 6, 11, 9]\n  \
           %c = conv %x, %w {{dilations = [1, 1], groups = 6, pads = [1, 0, 1, 2], strides = [2, 2]}} : f32[2, 6, 6, 5]\n  \
           %d = conv %x, %w {{dilations = [2, 3], groups = 6, pads = [0, 0, 0, 0], strides = [1, 2]}} : f32[2, 6, 7, 2]\n  \
           %e = conv %s, %v {{dilations = [1], groups = 4, pads = [2, 2], strides = [1]}} : f32[1, 4, 13]\n  \
           %f = conv %x, %g {{dilations = [1, 1], groups = 3, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[2, 6, 11, 9]\n  \
           %h = conv %y, %w, %b {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[1, 6, 3, 150]\n  \
           return %r, %c, %d, %e, %f, %h\n}}\n",
        constant_values(1, 54),
        constant_values(2, 6),
        constant_values(3, 20),
        constant_values(4, 108)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "dw", false);
    let module = &program.modules[0].1;
    assert!(
        module.contains("[1, 1, 2, 2] : tensor<2x6x13x11xf32> to tensor<2x6x6x5xf32>"),
        "{module}"
    );
    // Only the grouped convolution's generic reduces.
    let reducing = module
        .lines()
        .filter(|l| l.contains("\"reduction\""))
        .count();
    assert_eq!(reducing, 1, "{module}");
    agrees_with_the_interpreter(&g, &program);
}

/// Depthwise convolutions of stride 1 that keep their input's extents, with rows shorter
/// than 64, take the flat form: each channel one row of `H·W` elements padded before and
/// after, each tap's window a slice of it, a mask per column shift; the result, its bias
/// and the ReLU after it on `[N, C, H·W]`. With a 3×3 kernel, a 2×2 one padded after only,
/// a dilation of 2 and a 5×5 kernel padded unevenly, they agree with the interpreter, and a
/// row of 70 keeps the image's rows. Of stride 2 over an input of twice the result's
/// extents, the input is read in four phases, each such a row (a 3×3 kernel padded by 1, a
/// 2×2 one not padded); an odd input keeps the strided windows. An infinity in the last or
/// first column of a row is read by its own row's windows only: the windows that wrap onto
/// it from the next or the previous row read a zero, as the padding is.
#[test]
fn short_row_depthwise_convolutions_take_the_flat_form_and_agree_with_the_interpreter() {
    let src = format!(
        "const @w : f32[6, 1, 3, 3] = [{}]\nconst @b : f32[6] = [{}]\n\
         const @k : f32[6, 1, 2, 2] = [{}]\nconst @q : f32[6, 1, 5, 5] = [{}]\n\n\
         graph @flat(%x: f32[2, 6, 7, 9], %y: f32[1, 6, 3, 70], %z: f32[1, 6, 8, 10]) {{\n  \
           %w = const @w : f32[6, 1, 3, 3]\n  %b = const @b : f32[6]\n  \
           %k = const @k : f32[6, 1, 2, 2]\n  %q = const @q : f32[6, 1, 5, 5]\n  \
           %a = conv %x, %w, %b {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[2, 6, 7, 9]\n  \
           %r = relu %a : f32[2, 6, 7, 9]\n  \
           %c = conv %x, %k {{dilations = [1, 1], groups = 6, pads = [0, 0, 1, 1], strides = [1, 1]}} : f32[2, 6, 7, 9]\n  \
           %d = conv %x, %w {{dilations = [2, 2], groups = 6, pads = [2, 2, 2, 2], strides = [1, 1]}} : f32[2, 6, 7, 9]\n  \
           %e = conv %x, %q {{dilations = [1, 1], groups = 6, pads = [2, 1, 2, 3], strides = [1, 1]}} : f32[2, 6, 7, 9]\n  \
           %h = conv %y, %w, %b {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[1, 6, 3, 70]\n  \
           %i = conv %z, %w, %b {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [2, 2]}} : f32[1, 6, 4, 5]\n  \
           %j = conv %z, %k {{dilations = [1, 1], groups = 6, pads = [0, 0, 0, 0], strides = [2, 2]}} : f32[1, 6, 4, 5]\n  \
           %l = conv %x, %w {{dilations = [1, 1], groups = 6, pads = [1, 1, 1, 1], strides = [2, 2]}} : f32[2, 6, 4, 5]\n  \
           return %r, %c, %d, %e, %h, %i, %j, %l\n}}\n",
        constant_values(1, 54),
        constant_values(2, 6),
        constant_values(3, 24),
        constant_values(4, 150)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "flat", false);
    let module = &program.modules[0].1;
    // The windows: 9 + 4 + 9 + 25 slices of the flat rows; the masks' compares and
    // selects; the 70-element rows as before.
    assert_eq!(
        module.matches(" to tensor<2x6x63xf32>").count(),
        47,
        "{module}"
    );
    assert!(module.contains("arith.select"), "{module}");
    // The phases: two [1, 6, 2, 2, 4, 5] copies, 9 + 4 windows of their rows; the odd
    // input's strided windows.
    assert_eq!(
        module.matches(" -> tensor<1x6x2x2x4x5xf32>").count(),
        2,
        "{module}"
    );
    assert_eq!(
        module.matches(" to tensor<1x6x20xf32>").count(),
        13,
        "{module}"
    );
    assert!(
        module.contains("[1, 1, 2, 2] : tensor<2x6x9x11xf32> to tensor<2x6x4x5xf32>"),
        "{module}"
    );
    assert!(!module.contains("tensor<1x6x210xf32>"), "{module}");
    assert!(
        module.contains("[1, 1, 1, 1] : tensor<1x6x5x72xf32> to tensor<1x6x3x70xf32>"),
        "{module}"
    );
    agrees_with_the_interpreter(&g, &program);

    // Infinities at the ends of rows: x[0, 0, 3, 8] and x[1, 4, 5, 0].
    let mut xs = inputs(&g);
    let mut x: Vec<f32> = xs[0].to_f64_vec().iter().map(|&v| v as f32).collect();
    x[((3 * 9) + 8) as usize] = f32::INFINITY;
    x[(((6 + 4) * 7 + 5) * 9) as usize] = f32::NEG_INFINITY;
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    xs[0] = Tensor::from_le_bytes(ElemType::F32, &[2, 6, 7, 9], &bytes).expect("input");
    let want = interp::run(&g, &xs).expect("interprets");
    let mlir = Mlir::new();
    let got = jit(&mlir, &program).run(&xs).expect("runs");
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        let finite = b.iter().filter(|v| v.is_finite()).count();
        // (The ReLU's may have none left.)
        assert!(
            finite < b.len() || [0, 4, 5, 6].contains(&i),
            "output {i} reads no infinity"
        );
        for (j, (x, y)) in a.iter().zip(&b).enumerate() {
            let same = if y.is_finite() {
                (x - y).abs() <= 1e-5 + 1e-4 * y.abs()
            } else {
                x == y || (x.is_nan() && y.is_nan())
            };
            assert!(same, "output {i}, element {j}: {x} vs {y}");
        }
    }
}

/// Ungrouped `f32` convolutions are im2col products: the input's patches copied into
/// columns by one generic of affine reads, times the filter viewed as a matrix, a
/// contraction the schedule tiles. A 1×1 convolution of stride 1 without padding reads its
/// input in place as the columns; padding is a `linalg.copy` into a tensor whose border
/// alone is filled. With
/// padding, strides, a dilation, a bias, one and three spatial axes, and padded along one
/// axis while a stride leaves the other's last column unread (a max pool too, in taps
/// form), they agree with the interpreter.
#[test]
fn ungrouped_convolutions_are_im2col_products_that_agree_with_the_interpreter() {
    let src = format!(
        "const @w : f32[4, 3, 3, 3] = [{}]\nconst @b : f32[4] = [{}]\n\
         const @p : f32[5, 3, 1, 1] = [{}]\nconst @v : f32[3, 2, 4] = [{}]\n\
         const @u : f32[2, 2, 2, 3, 2] = [{}]\n\n\
         graph @cv(%x: f32[2, 3, 10, 9], %s: f32[1, 2, 13], %t: f32[1, 2, 4, 5, 6], %y: f32[1, 3, 8, 8]) {{\n  \
           %w = const @w : f32[4, 3, 3, 3]\n  %b = const @b : f32[4]\n  \
           %p = const @p : f32[5, 3, 1, 1]\n  %v = const @v : f32[3, 2, 4]\n  \
           %u = const @u : f32[2, 2, 2, 3, 2]\n  \
           %a = conv %x, %w, %b {{dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[2, 4, 10, 9]\n  \
           %c = conv %x, %w {{dilations = [2, 1], groups = 1, pads = [0, 1, 2, 0], strides = [2, 3]}} : f32[2, 4, 4, 3]\n  \
           %d = conv %x, %p {{dilations = [1, 1], groups = 1, pads = [0, 0, 0, 0], strides = [1, 1]}} : f32[2, 5, 10, 9]\n  \
           %e = conv %x, %p {{dilations = [1, 1], groups = 1, pads = [0, 0, 0, 0], strides = [2, 2]}} : f32[2, 5, 5, 5]\n  \
           %f = conv %s, %v {{dilations = [1], groups = 1, pads = [1, 2], strides = [1]}} : f32[1, 3, 13]\n  \
           %h = conv %t, %u {{dilations = [1, 1, 1], groups = 1, pads = [0, 0, 0, 0, 0, 0], strides = [1, 1, 1]}} : f32[1, 2, 3, 3, 5]\n  \
           %i = conv %y, %w {{dilations = [1, 1], groups = 1, pads = [1, 0, 1, 0], strides = [1, 2]}} : f32[1, 4, 8, 3]\n  \
           %j = max-pool %y {{ceil-mode = false, count-include-pad = false, dilations = [1, 1], kernel = [3, 3], pads = [1, 0, 1, 0], strides = [1, 2]}} : f32[1, 3, 8, 3]\n  \
           return %a, %c, %d, %e, %f, %h, %i, %j\n}}\n",
        constant_values(1, 108),
        constant_values(2, 4),
        constant_values(3, 15),
        constant_values(4, 24),
        constant_values(5, 48)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "cv", false);
    let module = &program.modules[0].1;
    // The 1×1 convolution of stride 1 reads its input as [N, C, H·W].
    assert!(
        module.contains(
            "tensor.collapse_shape %arg0 [[0], [1], [2, 3]] : tensor<2x3x10x9xf32> into \
             tensor<2x3x90xf32>"
        ),
        "{module}"
    );
    // The padded ones: three 2-D (one padded along its rows only, its last input column
    // read by no window), the 1-D one and the pool.
    assert_eq!(module.matches("linalg.copy").count(), 5, "{module}");
    // Only the border is filled: the first one's rows above and below the input
    // (`2x3x1x11`), then its columns left and right within the input's rows (`2x3x10x1`),
    // never all of the padded tensor.
    for slab in ["tensor<2x3x1x11x1xf32>", "tensor<2x3x10x1x1xf32>"] {
        assert!(
            module.matches(&format!("-> {slab}\n")).count() >= 2,
            "{slab}: {module}"
        );
    }
    assert!(!module.contains("-> tensor<2x3x12x11xf32>"), "{module}");
    // Every convolution is one contraction, a generic with one reduction loop; the pool is
    // a generic of parallel loops only, its 9 taps' windows its inputs, the maximum taken
    // from the first (8 `maximumf`).
    let reductions: Vec<usize> = module
        .lines()
        .map(|l| l.matches("\"reduction\"").count())
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(reductions, vec![1; 7], "{module}");
    assert_eq!(module.matches("arith.maximumf").count(), 8, "{module}");
    agrees_with_the_interpreter(&g, &program);
}

/// Large `f32` weights that only products read as `B` are packed into panels at compile
/// time (`<name>@panels<p>` in the weights, `[ceil(N/p), K, p]`): a matmul with a 3-D first
/// operand and a gemm with a bias, `N` not a multiple of the panel, agree with the
/// interpreter; a weight that another op reads too stays as it is.
#[test]
fn weights_packed_into_panels_agree_with_the_interpreter() {
    let (k, n) = (300usize, 250usize);
    let src = format!(
        "const @w : f32[{k}, {n}] = [{}]\nconst @v : f32[{k}, {n}] = [{}]\n\
         const @bias : f32[{n}] = [{}]\n\n\
         graph @packed(%x: f32[1, 5, {k}], %y: f32[7, {k}]) {{\n  \
           %w = const @w : f32[{k}, {n}]\n  %v = const @v : f32[{k}, {n}]\n  \
           %bias = const @bias : f32[{n}]\n  \
           %a = matmul %x, %w : f32[1, 5, {n}]\n  \
           %g = gemm %y, %w, %bias {{alpha = 0.5, beta = 1.0, trans-a = false, trans-b = false}} : f32[7, {n}]\n  \
           %b = matmul %y, %v : f32[7, {n}]\n  \
           %s = add %v, %v : f32[{k}, {n}]\n  \
           return %a, %g, %b, %s\n}}\n",
        constant_values(1, k * n),
        constant_values(5, k * n),
        constant_values(3, n)
    );
    let g = text::parse(&src, None).expect("parses");
    let program = lower_cpu(&g, "packed", false);
    let names: Vec<&String> = program.weights.keys().collect();
    // 250 columns, 5 and 7 rows: tiles of 4 rows, panels of 64 lanes (4 vectors), 4
    // panels, the last holding 58 columns and 6 zeros.
    assert_eq!(names, ["bias", "v", "w@panels64"], "{names:?}");
    assert_eq!(
        program.weights["w@panels64"].0.to_string(),
        "f32[4, 300, 64]"
    );
    let module = &program.modules[0].1;
    assert!(
        module.contains("tessera.weight = \"w@panels64\""),
        "{module}"
    );
    assert!(
        module.contains("d2 floordiv 64, d0, d1, d2 mod 64"),
        "{module}"
    );
    agrees_with_the_interpreter(&g, &program);
}

/// The compiled `erf` of `f32` (a Taylor series below 1, `1 - e^(-a^2) R(a)` above, no libm
/// `erff`) is within 1.5 ulp of the exact value (the interpreter's `f64` erf), keeps the sign
/// and `-0`, saturates to +-1, and keeps NaN; GELU built on it follows.
#[test]
fn compiled_erf_is_within_two_ulp() {
    let n = 300_001;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| -6.0 + 12.0 * i as f32 / (n - 1) as f32)
        .collect();
    xs.extend((0..2000).map(|i| 10f32.powf(-38.0 + 38.0 * i as f32 / 1999.0)));
    xs.extend([0.0, -0.0, 0.999_999_94, 1.0, 3.9, 4.0, 4.1, 1e30, -1e30]);
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let len = xs.len();
    let src = format!(
        "graph @e(%x: f32[{len}]) {{\n  %y = erf %x : f32[{len}]\n  \
         %g = gelu %x {{tanh = false}} : f32[{len}]\n  return %y, %g\n}}\n"
    );
    let out = run_compiled(&src, &xs);
    let (ys, gs) = (out[0].to_f64_vec(), out[1].to_f64_vec());
    // The exact values: the interpreter's erf and GELU of f64.
    let exact = text::parse(
        &format!(
            "graph @e(%x: f64[{len}]) {{\n  %y = erf %x : f64[{len}]\n  \
             %g = gelu %x {{tanh = false}} : f64[{len}]\n  return %y, %g\n}}\n"
        ),
        None,
    )
    .expect("parses");
    let wide: Vec<u8> = xs
        .iter()
        .flat_map(|&x| f64::from(x).to_le_bytes())
        .collect();
    let x64 = Tensor::from_le_bytes(ElemType::F64, &[len], &wide).expect("input");
    let exact = interp::run(&exact, &[x64]).expect("interprets");
    let (want, gelu) = (exact[0].to_f64_vec(), exact[1].to_f64_vec());
    let mut worst = 0.0f64;
    for (i, &x) in xs.iter().enumerate() {
        let (y, g) = (ys[i] as f32, gs[i] as f32);
        if x.is_nan() {
            assert!(y.is_nan() && g.is_nan(), "erf(NaN) = {y}, gelu(NaN) = {g}");
            continue;
        }
        assert_eq!(
            y.is_sign_negative(),
            x.is_sign_negative(),
            "erf({x:e}) = {y:e}"
        );
        let u = ulps(y, want[i]);
        worst = worst.max(u);
        assert!(u <= 1.5, "erf({x:e}) = {y:e}, want {:e}: {u} ulp", want[i]);
        // GELU, 0.5 x (1 + erf(x / sqrt 2)): within 2 ulp and the rounding of `1 + erf`
        // times x (the cancellation far below zero).
        if x.is_finite() {
            let w = (gelu[i] as f32).abs();
            let spacing = f64::from(f32::from_bits(w.to_bits() + 1) - w);
            let tol = 1.2e-7 * f64::from(x.abs()) + 2.0 * spacing;
            assert!(
                (f64::from(g) - gelu[i]).abs() <= tol,
                "gelu({x:e}) = {g:e}, want {:e}",
                gelu[i]
            );
        }
    }
    assert!(worst > 0.1, "worst {worst} ulp: not the f32 code?");
}

/// The compiled `exp` of `f32` (`2^k e^r`, a Taylor series for `e^r`, no libm `expf`) is
/// within 2 ulp of the exact value where the result is normal, within one subnormal step
/// below, `+inf` above `ln(f32::MAX)`, 0 far below, and NaN for NaN; the sigmoid built on it
/// (one `exp(-|x|)`) is within 3 ulp.
#[test]
fn compiled_exp_is_within_two_ulp() {
    let n = 400_001;
    let mut xs: Vec<f32> = (0..n)
        .map(|i| -110.0 + 200.0 * i as f32 / (n - 1) as f32)
        .collect();
    xs.extend([
        0.0, -0.0, 1e-30, -1e-30, 88.72, 88.73, 89.5, -87.34, -103.9, -200.0,
    ]);
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    let len = xs.len();
    let src = format!(
        "graph @e(%x: f32[{len}]) {{\n  %y = exp %x : f32[{len}]\n  \
         %s = sigmoid %x : f32[{len}]\n  return %y, %s\n}}\n"
    );
    let out = run_compiled(&src, &xs);
    let (ys, ss) = (out[0].to_f64_vec(), out[1].to_f64_vec());
    let mut compared = 0;
    for ((&x, &y), &s) in xs.iter().zip(&ys).zip(&ss) {
        let (y, s) = (y as f32, s as f32);
        if x.is_nan() {
            assert!(
                y.is_nan() && s.is_nan(),
                "exp(NaN) = {y}, sigmoid(NaN) = {s}"
            );
            continue;
        }
        let want = f64::from(x).exp();
        if want > f64::from(f32::MAX) {
            assert_eq!(y, f32::INFINITY, "exp({x:e})");
        } else if want >= f64::from(f32::MIN_POSITIVE) {
            let u = ulps(y, want);
            assert!(u <= 2.0, "exp({x:e}) = {y:e}, want {want:e}: {u} ulp");
            compared += 1;
        } else {
            let step = f64::from(f32::from_bits(1));
            assert!(
                (f64::from(y) - want).abs() <= step,
                "exp({x:e}) = {y:e}, want {want:e}"
            );
        }
        let sw = 1.0 / (1.0 + (-f64::from(x)).exp());
        if sw >= f64::from(f32::MIN_POSITIVE) {
            assert!(ulps(s, sw) <= 3.0, "sigmoid({x:e}) = {s:e}, want {sw:e}");
        }
    }
    assert!(compared > 300_000, "only {compared} values compared");
}

/// A concatenation's pieces are written into its result in place: each piece whose
/// producer is a kernel, which nothing else reads, gets the result as a destination (its
/// last argument, given back) and inserts its block into it; the concatenation then inserts only
/// its other pieces (here a graph input, and a product the graph also returns), in a kernel
/// of its own. Bufferized, those kernels return nothing and copy nothing into the
/// result (the pieces' own ops write there, in every tile), with threads or without. The
/// results agree with the interpreter.
#[test]
fn concatenated_pieces_are_written_in_place_and_agree_with_the_interpreter() {
    let src = format!(
        "const @w : f32[8, 4, 3, 3] = [{}]\nconst @v : f32[8, 4, 1, 1] = [{}]\n\
         const @u : f32[8, 16, 1, 1] = [{}]\n\n\
         graph @cat(%x: f32[1, 4, 8, 8]) {{\n  \
           %w = const @w : f32[8, 4, 3, 3]\n  %v = const @v : f32[8, 4, 1, 1]\n  \
           %u = const @u : f32[8, 16, 1, 1]\n  \
           %a = conv %x, %w {{dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]}} : f32[1, 8, 8, 8]\n  \
           %r = relu %a : f32[1, 8, 8, 8]\n  \
           %b = conv %x, %v {{dilations = [1, 1], groups = 1, pads = [0, 0, 0, 0], strides = [1, 1]}} : f32[1, 8, 8, 8]\n  \
           %s = relu %b : f32[1, 8, 8, 8]\n  \
           %c = concat %r, %s {{axis = 1}} : f32[1, 16, 8, 8]\n  \
           %d = conv %x, %v {{dilations = [1, 1], groups = 1, pads = [0, 0, 0, 0], strides = [1, 1]}} : f32[1, 8, 8, 8]\n  \
           %e = conv %c, %u {{dilations = [1, 1], groups = 1, pads = [0, 0, 0, 0], strides = [1, 1]}} : f32[1, 8, 8, 8]\n  \
           %f = concat %x, %e, %d {{axis = 1}} : f32[1, 20, 8, 8]\n  \
           return %f, %d\n}}\n",
        constant_values(6, 8 * 4 * 9),
        constant_values(7, 8 * 4),
        constant_values(8, 8 * 16)
    );
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "cat", false);
    let text = &program.modules[0].1;
    // Kernels that take a result and give it back: the two convolutions of %c; the one of
    // %f that reads %c, and %f's own, which inserts %x and %d.
    let takes = |ty: &str| {
        text.lines()
            .filter(|l| l.contains("func.func private @k"))
            .filter(|l| l.contains(&format!("{ty}) -> ({ty})")))
            .count()
    };
    assert_eq!(takes("tensor<1x16x8x8xf32>"), 2, "{text}");
    assert_eq!(takes("tensor<1x20x8x8xf32>"), 2, "{text}");
    let concats: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("func.func private @k") && l.contains("concat"))
        .collect();
    assert_eq!(concats.len(), 1, "{text}");
    assert!(
        concats[0].contains(
            "(%arg0: tensor<1x4x8x8xf32>, %arg1: tensor<1x8x8x8xf32>, %arg2: tensor<1x20x8x8xf32>)"
        ),
        "{text}"
    );
    let mlir = Mlir::new();
    for parallel in [false, true] {
        let mut m = mlir.parse(text, "cat").expect("parses");
        schedule::apply(&mlir, &mut m, parallel, "cat").expect("applies");
        mlir.run_pipeline(
            &mut m,
            "builtin.module(linalg-fuse-elementwise-ops,one-shot-bufferize{allow-return-allocs-from-loops=1 bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},canonicalize,drop-equivalent-buffer-results,cse,canonicalize)",
            &tessera_mlir::PipelineOptions::default(),
            "cat",
        )
        .expect("bufferizes");
        let module = Mlir::print(&m);
        // Every kernel writes into its destination and gives back nothing.
        let kernels: Vec<&str> = module
            .lines()
            .filter(|l| l.contains("func.func private @k"))
            .collect();
        assert_eq!(kernels.len(), 5, "{module}");
        for f in kernels {
            assert!(
                !f.contains("-> memref<1x16x8x8xf32>") && !f.contains("-> memref<1x20x8x8xf32>"),
                "returns a buffer: {f}"
            );
        }
        // Nothing is copied into either result (1024 and 1280 floats per image), but the
        // pieces %f's own kernel inserts (%x and %d).
        let copies: Vec<&str> = module
            .lines()
            .filter(|l| l.contains("memref.copy") && l.contains("strided<[1024,"))
            .collect();
        assert!(copies.is_empty(), "{copies:?}");
        let copies: Vec<&str> = module
            .lines()
            .filter(|l| l.contains("memref.copy") && l.contains("strided<[1280,"))
            .collect();
        assert_eq!(copies.len(), 2, "{copies:?}");
    }
    agrees_with_the_interpreter(&g, &program);
}

/// Max poolings of stride 2 or more along their rows read their input deinterleaved in
/// phases (`[.., s, columns]`, padded in the same pass): whole groups of `s` columns are one
/// generic that swaps the last two axes, which the schedule vectorizes into shuffles, and
/// the taps' windows are rows at stride 1, vectorized like those of stride 1. With odd and
/// even widths, padding, a window narrower than the stride, strides 2 and 3 with a
/// dilation, ceil mode (windows past the input), one spatial axis and rows of more than 16
/// groups, they agree with the interpreter.
#[test]
fn strided_max_poolings_read_phases_and_agree_with_the_interpreter() {
    // Input; kernel; pads; strides; dilations; ceil mode; result.
    let pools = [
        "x; [3, 3]; [0, 0, 0, 0]; [2, 2]; [1, 1]; false; [1, 3, 5, 5]",
        "x; [3, 3]; [1, 1, 1, 1]; [2, 2]; [1, 1]; false; [1, 3, 6, 6]",
        "x; [2, 2]; [0, 0, 0, 0]; [2, 2]; [1, 1]; false; [1, 3, 5, 5]",
        "x; [2, 3]; [0, 1, 0, 1]; [2, 3]; [1, 2]; false; [1, 3, 5, 3]",
        "y; [3, 3]; [0, 0, 0, 0]; [2, 2]; [1, 1]; true; [1, 2, 2, 2]",
        "s; [3]; [1, 0]; [2]; [1]; false; [1, 2, 6]",
        "w; [3, 3]; [0, 0, 0, 0]; [1, 2]; [1, 1]; false; [1, 2, 3, 34]",
    ];
    let mut src = String::from(
        "graph @mp(%x: f32[1, 3, 11, 11], %y: f32[1, 2, 4, 4], %s: f32[1, 2, 13], \
         %w: f32[1, 2, 5, 70]) {\n",
    );
    for (i, pool) in pools.iter().enumerate() {
        let [x, k, pads, strides, dils, ceil, ty] = pool.split("; ").collect::<Vec<_>>()[..] else {
            panic!("{pool}")
        };
        src.push_str(&format!(
            "  %p{i} = max-pool %{x} {{ceil-mode = {ceil}, count-include-pad = false, \
             dilations = {dils}, kernel = {k}, pads = {pads}, strides = {strides}}} : f32{ty}\n"
        ));
    }
    let results: Vec<String> = (0..pools.len()).map(|i| format!("%p{i}")).collect();
    src.push_str(&format!("  return {}\n}}\n", results.join(", ")));
    let g = text::parse(&src, None).unwrap_or_else(|e| panic!("{e}"));
    let program = lower_cpu(&g, "mp", false);
    let module = &program.modules[0].1;
    // One swapping generic per pool: 2-D ones read `[.., groups, s]` as `(d0, d1, d2, d4,
    // d3)`, the 1-D one as `(d0, d1, d3, d2)`.
    assert_eq!(
        module.matches("-> (d0, d1, d2, d4, d3)>").count(),
        6,
        "{module}"
    );
    assert_eq!(
        module.matches("-> (d0, d1, d3, d2)>").count(),
        1,
        "{module}"
    );
    let mlir = Mlir::new();
    for parallel in [false, true] {
        let mut m = mlir.parse(module, "mp").expect("parses");
        let body = schedule::apply(&mlir, &mut m, parallel, "mp").expect("applies");
        mlir.verify(&m, "mp").expect("verifies");
        // Every swap and every pool vectorized: no linalg op but the fills and the copies
        // of single columns is left.
        assert_eq!(
            body.matches("lower_transpose lowering_strategy = \"shuffle_1d\"")
                .count(),
            7,
            "{body}"
        );
        // 70 columns: 35 groups, 32 in tiles of 16 and the rest of 3 a tile of its own.
        assert!(body.contains("after 32 {dimension = 4}"), "{body}");
        let printed = Mlir::print(&m);
        assert!(!printed.contains("linalg.generic"), "{printed}");
        assert!(printed.contains("vector.shuffle"), "{printed}");
    }
    agrees_with_the_interpreter(&g, &program);
}
