//! Round trips of the text format over `testdata/ir/*.tir`, and save/load.
//!
//! The files are in canonical form: printing what they parse to gives them back byte for
//! byte. After a deliberate format change, `TESSERA_BLESS=1 cargo test -p tessera-ir --test
//! text_roundtrip` rewrites them (and their sidecars) with `text::save`.

use std::path::{Path, PathBuf};

use tessera_ir::text::{self, Sidecar};
use tessera_ir::{Bytes, Constant, ElemType, Graph, Op, TensorType};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/ir")
}

fn tir_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata())
        .expect("testdata/ir exists")
        .map(|e| e.expect("readable dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "tir"))
        .collect();
    files.sort();
    files
}

#[test]
fn testdata_files_are_canonical_and_round_trip() {
    let bless = std::env::var_os("TESSERA_BLESS").is_some();
    let files = tir_files();
    assert!(
        files.len() >= 5,
        "expected the testdata/ir files, found {files:?}"
    );
    let mut failures = Vec::new();
    for path in &files {
        let src = std::fs::read_to_string(path).expect("readable file");
        let graph = match text::load(path) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{e}"));
                continue;
            }
        };
        if bless {
            text::save(&graph, path).expect("bless: save");
            continue;
        }
        let printed = text::print(&graph);
        if printed != src {
            failures.push(format!(
                "{}: print(parse(file)) differs from the file:\n{}",
                path.display(),
                first_difference(&src, &printed)
            ));
            continue;
        }
        // print -> parse -> print is a fixpoint (through the sidecar for external data).
        let sidecar = Sidecar::open(&text::sidecar_path(path)).ok();
        let again = text::parse(&printed, sidecar.as_ref()).expect("printed text parses");
        assert_eq!(text::print(&again), printed, "{}", path.display());
        // Debug text compares NaN attributes as equal, unlike `PartialEq`.
        assert!(
            format!("{again:?}") == format!("{graph:?}"),
            "{}: parse(print(g)) != g",
            path.display()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn first_difference(expected: &str, actual: &str) -> String {
    for (i, (e, a)) in expected.lines().zip(actual.lines()).enumerate() {
        if e != a {
            return format!("line {}:\n  file:    {e}\n  printed: {a}", i + 1);
        }
    }
    format!(
        "{} lines in the file, {} printed",
        expected.lines().count(),
        actual.lines().count()
    )
}

#[test]
fn testdata_covers_every_op_name() {
    let mut seen = std::collections::BTreeSet::new();
    for path in tir_files() {
        let g = text::load(&path).unwrap_or_else(|e| panic!("{e}"));
        for &o in g.ops() {
            seen.insert(g.op(o).op.name());
        }
    }
    #[rustfmt::skip]
    let all = [
        "const", "abs", "neg", "sign", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "tan",
        "asin", "acos", "atan", "tanh", "sigmoid", "erf", "relu", "ceil", "floor", "round",
        "softplus", "softsign", "mish", "hard-swish", "gelu", "elu", "leaky-relu", "selu",
        "hard-sigmoid", "not", "is-nan", "add", "sub", "mul", "div", "pow", "mod", "fmod", "max",
        "min", "prelu", "and", "or", "xor", "equal", "less", "less-equal", "greater",
        "greater-equal", "shift-left", "shift-right", "select", "cast", "clip", "matmul", "gemm", "conv", "conv-transpose",
        "max-pool", "avg-pool", "reduce-sum", "reduce-mean", "reduce-max", "reduce-min",
        "reduce-prod", "reduce-l1", "reduce-l2", "reduce-log-sum-exp", "reduce-sum-square",
        "argmax", "argmin", "softmax", "log-softmax", "cumsum", "layer-norm", "batch-norm",
        "instance-norm", "lrn", "reshape", "transpose", "expand", "concat", "split", "slice",
        "pad", "tile", "gather", "gather-elements", "gather-nd", "scatter-elements", "scatter-nd",
        "top-k", "trilu", "depth-to-space", "space-to-depth", "resize", "einsum", "shape", "size",
        "fill", "range", "random-uniform", "dropout",
    ];
    let missing: Vec<&str> = all.iter().copied().filter(|n| !seen.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "ops not used in testdata/ir: {missing:?}"
    );
}

#[test]
fn external_constants_share_the_sidecar_map() {
    let path = testdata().join("mlp.tir");
    let g = text::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let side = std::fs::read(text::sidecar_path(&path)).expect("sidecar");
    let w = g
        .consts()
        .map(|(_, c)| c)
        .find(|c| c.name == "fc1.weight")
        .expect("fc1.weight");
    assert_eq!(w.data.len(), 8 * 16 * 4);
    // The constant is a slice of the file's bytes at its safetensors offset.
    let at = side
        .windows(w.data.len())
        .position(|win| win == &w.data[..]);
    assert!(at.is_some(), "constant data is in the sidecar");
    // Both external constants are slices of one buffer (the map): safetensors stores
    // fc1.weight at bytes 0..512 of its data section and fc2.weight right after it.
    let w2 = g
        .consts()
        .map(|(_, c)| c)
        .find(|c| c.name == "fc2.weight")
        .expect("fc2.weight");
    assert_eq!(
        w.data.as_ptr() as usize + w.data.len(),
        w2.data.as_ptr() as usize
    );
}

/// A graph with large constants of several types (external) and small ones (inline).
fn graph_with_constants() -> Graph {
    let mut g = Graph::new("consts");
    let mut bytes_of = |elem: ElemType, dims: &[u64], seed: u8| {
        let ty = TensorType::fixed(elem, dims);
        let n = ty.size_bytes().expect("static") as usize;
        let data: Vec<u8> = (0..n)
            .map(|i| {
                if elem == ElemType::Bool {
                    (i % 2) as u8
                } else {
                    (i as u8).wrapping_mul(seed)
                }
            })
            .collect();
        let name = format!("w.{elem}.{seed}");
        let c = g.add_const(Constant {
            name,
            ty: ty.clone(),
            data: Bytes::from(data),
        });
        let v = g.push_op(Op::Const(c), vec![], vec![ty]);
        g.op(v).results[0]
    };
    let mut outs = Vec::new();
    for (k, elem) in ElemType::ALL.into_iter().enumerate() {
        outs.push(bytes_of(elem, &[5, 7], k as u8 * 2 + 3));
        outs.push(bytes_of(elem, &[2], k as u8 * 2 + 5));
    }
    g.set_outputs(outs);
    g
}

#[test]
fn save_load_preserves_constants_and_is_deterministic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph_with_constants();
    let a = dir.path().join("a.tir");
    let b = dir.path().join("sub/../b.tir");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    text::save(&g, &a).expect("save a");
    text::save(&g, &b).expect("save b");
    let read = |p: &Path| std::fs::read(p).expect("read");
    assert_eq!(read(&a), read(&b), "text is deterministic");
    assert_eq!(
        read(&text::sidecar_path(&a)),
        read(&text::sidecar_path(&b)),
        "sidecar is deterministic"
    );
    let loaded = text::load(&a).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.num_consts(), g.num_consts());
    for ((_, x), (_, y)) in g.consts().zip(loaded.consts()) {
        assert_eq!(x, y);
    }
    assert_eq!(text::print(&loaded), text::print(&g));
    // Saving what was loaded (still mapping a.safetensors) over the same path works and
    // gives the same bytes.
    let before = read(&text::sidecar_path(&a));
    text::save(&loaded, &a).expect("save over itself");
    assert_eq!(read(&text::sidecar_path(&a)), before);
    let text_a = String::from_utf8(read(&a)).expect("utf-8");
    assert!(text_a.contains("= external"), "{text_a}");
    assert!(
        text_a.contains("const @w.bool.23 : bool[2] = [false, true]"),
        "{text_a}"
    );
}

#[test]
fn load_errors_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = graph_with_constants();
    let path = dir.path().join("m.tir");
    text::save(&g, &path).expect("save");

    // Missing sidecar.
    let side = text::sidecar_path(&path);
    let bytes = std::fs::read(&side).expect("sidecar");
    std::fs::remove_file(&side).expect("rm");
    let err = text::load(&path).expect_err("no sidecar").to_string();
    assert!(
        err.contains("m.safetensors") && err.contains("cannot open the sidecar"),
        "{err}"
    );

    // A tensor missing from the sidecar: rename the constant in the text.
    std::fs::write(&side, &bytes).expect("restore");
    let src = std::fs::read_to_string(&path).expect("text");
    std::fs::write(&path, src.replace("@w.f32.7", "@v.f32.7")).expect("write");
    let err = text::load(&path).expect_err("missing tensor").to_string();
    let want = format!(
        "{}:5:1: external constant `@v.f32.7` is not in",
        path.display()
    );
    assert!(err.starts_with(&want), "{err}\nwant prefix {want}");

    // Type disagreeing with the sidecar.
    std::fs::write(&path, src.replacen("f32[5, 7]", "f32[7, 5]", 1)).expect("write");
    let err = text::load(&path).expect_err("wrong shape").to_string();
    assert!(
        err.contains("is declared f32[7, 5] but") && err.contains("F32[5, 7]"),
        "{err}"
    );

    // A parse error carries path:line:col.
    std::fs::write(&path, "graph @g() {\n  %a = bogus\n  return\n}\n").expect("write");
    let err = text::load(&path).expect_err("parse error").to_string();
    assert!(
        err.starts_with(&format!("{}:2:8: unknown op `bogus`", path.display())),
        "{err}"
    );

    // A missing file.
    let err = text::load(&dir.path().join("nope.tir"))
        .expect_err("missing")
        .to_string();
    assert!(err.contains("nope.tir"), "{err}");

    // External constants need a sidecar when parsing from a string.
    let err = text::parse(&src, None).expect_err("no sidecar").to_string();
    assert!(
        err.contains("is external, but no sidecar was given"),
        "{err}"
    );
}

/// A sidecar may hold a `[K, N]` `f32` only packed into panels (`<name>@panels<p>`, as
/// `compile -o`'s weights file holds the weights its CPU code reads packed): the constant
/// is read back unpacked, and a declared type its panels cannot hold is a clear error.
#[test]
fn a_constant_held_packed_into_panels_is_unpacked() {
    let (k, n, p) = (3u64, 10u64, 4u64);
    let data: Vec<u8> = (0..k * n)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let packed = tessera_ir::panels::pack(&data, k, n, p);
    let shape: Vec<usize> = tessera_ir::panels::dims(k, n, p)
        .iter()
        .map(|&d| d as usize)
        .collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, &packed)
        .expect("view");
    let file = safetensors::serialize([("w@panels4", view)], None).expect("serializes");
    let side = Sidecar::from_bytes(Bytes::from(file), "weights.safetensors").expect("reads");
    let src = |ty: &str| {
        format!(
            "const @w : {ty} = external\n\ngraph @g(%x: f32[2, 3]) {{\n  %w = const @w : {ty}\n  \
             %y = matmul %x, %w : f32[2, 10]\n  return %y\n}}\n"
        )
    };
    let g = text::parse(&src("f32[3, 10]"), Some(&side)).unwrap_or_else(|e| panic!("{e}"));
    let (_, w) = g.consts().next().expect("w");
    assert_eq!(&w.data[..], &data[..]);
    let e = text::parse(&src("f32[3, 13]"), Some(&side)).expect_err("13 columns");
    assert!(
        e.to_string().contains(
            "declared f32[3, 13], so its panels `w@panels4` should be F32[4, 3, 4], \
             but weights.safetensors holds F32[3, 3, 4]"
        ),
        "{e}"
    );
    let e = text::parse(&src("f16[3, 10]"), Some(&side)).expect_err("f16");
    assert!(e.to_string().contains("only an f32 matrix can be"), "{e}");
}
