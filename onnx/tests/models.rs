//! The ONNX test-model corpus (`testdata/models/onnx/*`, see its README): every model is
//! imported, verified, run with the reference interpreter on its sample inputs and compared
//! with onnxruntime's outputs at the tolerances in its `io.json`.
//!
//! Each model is imported twice: with its inputs bound to the sample's static shapes (as
//! `tessera run` does), after which no shape computation may be left in the graph; and with
//! its declared, possibly symbolic shapes, which must either import and compute the same
//! outputs or be refused with a message that asks for `--input-shape`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tessera_ir::{Dim, Graph, Op, Tensor, interp, verify};
use tessera_onnx::{ImportError, ImportOptions, import_file};

use common::{compare, read_npy, repo_root};

struct Io {
    dir: PathBuf,
    inputs: Vec<(String, Tensor)>,
    /// Name, reference, (rtol, atol).
    outputs: Vec<(String, Tensor, (f64, f64))>,
}

fn load_io(name: &str) -> Io {
    let dir = repo_root().join("testdata/models/onnx").join(name);
    let text = std::fs::read_to_string(dir.join("io.json")).expect("read io.json");
    let json: Value = serde_json::from_str(&text).expect("parse io.json");
    let list = |key: &str| json[key].as_array().cloned().expect("io.json list");
    let file = |v: &Value| dir.join(v["file"].as_str().expect("file"));
    let name_of = |v: &Value| v["name"].as_str().expect("name").to_string();
    let inputs = list("inputs")
        .iter()
        .map(|v| (name_of(v), read_npy(&file(v))))
        .collect();
    let outputs = list("outputs")
        .iter()
        .map(|v| {
            let tol = (
                v["rtol"].as_f64().unwrap_or(0.0),
                v["atol"].as_f64().unwrap_or(0.0),
            );
            (name_of(v), read_npy(&file(v)), tol)
        })
        .collect();
    Io {
        dir,
        inputs,
        outputs,
    }
}

fn import(path: &Path, shapes: BTreeMap<String, Vec<u64>>) -> Result<Graph, ImportError> {
    import_file(
        path,
        &ImportOptions {
            input_shapes: shapes,
            ..ImportOptions::default()
        },
    )
}

/// Verifies, runs and compares; panics with the model's name on any difference.
fn check_outputs(name: &str, what: &str, graph: &Graph, io: &Io) {
    if let Err(errors) = verify::verify(graph) {
        let notes: Vec<_> = errors
            .iter()
            .map(|e| (e.entity, e.message.clone()))
            .collect();
        panic!(
            "{name} ({what}): the verifier found {} error(s):\n{}",
            errors.len(),
            tessera_ir::text::print_annotated(graph, &notes)
        );
    }
    let input_names: Vec<Option<&str>> = graph
        .inputs()
        .iter()
        .map(|&v| graph.value(v).name.as_deref())
        .collect();
    let want_names: Vec<Option<&str>> = io.inputs.iter().map(|(n, _)| Some(n.as_str())).collect();
    assert_eq!(input_names, want_names, "{name} ({what}): graph inputs");
    let inputs: Vec<Tensor> = io.inputs.iter().map(|(_, t)| t.clone()).collect();
    let got = interp::run(graph, &inputs)
        .unwrap_or_else(|e| panic!("{name} ({what}): the interpreter failed: {e}"));
    assert_eq!(got.len(), io.outputs.len(), "{name} ({what}): output count");
    for ((out, want, (rtol, atol)), g) in io.outputs.iter().zip(&got) {
        let tol = want.elem().is_float().then_some((*rtol, *atol));
        if let Err(e) = compare(g, want, tol) {
            panic!("{name} ({what}): output `{out}` differs from onnxruntime's: {e}");
        }
    }
}

/// What is left of shape computations: ops that read shapes at run time, and symbolic
/// extents anywhere.
fn dynamic_leftovers(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Shape { .. } | Op::Size) {
            found.push(format!("{op} ({})", data.op.name()));
        }
        for &r in &data.results {
            if graph.ty(r).shape.iter().any(|d| matches!(d, Dim::Sym(_))) {
                found.push(format!("{op} ({}) -> {}", data.op.name(), graph.ty(r)));
            }
        }
    }
    found
}

/// How a model is imported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shapes {
    /// Every input bound to its sample's shape.
    Static,
    /// The declared (possibly symbolic) shapes.
    Declared,
}

/// Known importer limitations: importing this model this way fails with a message holding
/// this text. When one is lifted, the test fails and asks for its entry to be removed.
const KNOWN_FAILURES: &[(&str, Shapes, &str)] = &[
    // Without a bound `seq`, the position ids from Range get a fresh symbol that does not
    // unify with `seq` when added to the token embeddings.
    (
        "gpt2_tiny",
        Shapes::Declared,
        "extents seq and arange_len differ",
    ),
];

fn known_failure(name: &str, shapes: Shapes) -> Option<&'static str> {
    KNOWN_FAILURES
        .iter()
        .find(|(n, s, _)| *n == name && *s == shapes)
        .map(|(_, _, m)| *m)
}

/// For a known limitation, checks that the import fails as recorded; returns the graph
/// otherwise.
fn import_checked(
    name: &str,
    path: &Path,
    how: Shapes,
    shapes: BTreeMap<String, Vec<u64>>,
) -> Option<Result<Graph, ImportError>> {
    let result = import(path, shapes);
    match (known_failure(name, how), result) {
        (None, r) => Some(r),
        (Some(want), Err(e)) => {
            let msg = e.to_string();
            assert!(
                msg.contains(want),
                "{name} ({how:?}): expected the known failure `{want}`, got: {msg}"
            );
            None
        }
        (Some(want), Ok(_)) => {
            panic!("{name} ({how:?}) imports now: remove its entry (`{want}`) from KNOWN_FAILURES")
        }
    }
}

fn check_model(name: &str) {
    let io = load_io(name);
    let path = io.dir.join("model.onnx");

    // Static shapes from the sample inputs, as `tessera run` imports.
    let shapes: BTreeMap<String, Vec<u64>> = io
        .inputs
        .iter()
        .map(|(n, t)| (n.clone(), t.shape().iter().map(|&d| d as u64).collect()))
        .collect();
    if let Some(result) = import_checked(name, &path, Shapes::Static, shapes.clone()) {
        let graph = result
            .unwrap_or_else(|e| panic!("{name}: import with static input shapes failed: {e}"));
        let left = dynamic_leftovers(&graph);
        assert!(
            left.is_empty(),
            "{name}: with every input shape bound ({shapes:?}), shape computations remain:\n  {}",
            left.join("\n  ")
        );
        check_outputs(name, "static shapes", &graph, &io);
    }

    // Declared shapes.
    match import_checked(name, &path, Shapes::Declared, BTreeMap::new()) {
        None => {}
        Some(Ok(graph)) => check_outputs(name, "declared shapes", &graph, &io),
        Some(Err(e)) => {
            let msg = e.to_string();
            assert!(
                matches!(e, ImportError::Node { .. }) && msg.contains("--input-shape"),
                "{name}: import with the declared (symbolic) shapes failed, and not for want of \
                 --input-shape: {msg}"
            );
        }
    }
}

macro_rules! model_tests {
    ($($name:ident),* $(,)?) => {
        $(#[test]
        fn $name() {
            check_model(stringify!($name));
        })*

        /// Every model folder has a test.
        #[test]
        fn every_model_is_tested() {
            let mut tested = vec![$(stringify!($name)),*];
            tested.sort_unstable();
            let mut found: Vec<String> = std::fs::read_dir(repo_root().join("testdata/models/onnx"))
                .expect("list testdata/models/onnx")
                .map(|e| e.expect("entry"))
                .filter(|e| e.path().join("model.onnx").exists())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            found.sort();
            assert_eq!(found, tested);
        }
    };
}

model_tests!(
    bert_tiny,
    cnn,
    external_data,
    gpt2_tiny,
    if_const,
    mlp,
    resize_topk_einsum,
    resnet_small,
    rnn,
    shape_range_reshape,
);

/// gpt2_tiny computes its causal mask (Range, CumSum, GatherND, comparisons) and its reshape
/// targets (Shape, Concat) from its input's shape: bound to `[1, 16]`, all of that folds
/// into constants, and what remains is the model's arithmetic.
#[test]
fn gpt2_tiny_shape_subgraphs_fold() {
    let io = load_io("gpt2_tiny");
    let path = io.dir.join("model.onnx");
    let shapes = BTreeMap::from([("input_ids".to_string(), vec![1u64, 16])]);
    let graph = import(&path, shapes).expect("import gpt2_tiny with input_ids=1x16");
    let count = |name: &str| {
        graph
            .ops()
            .iter()
            .filter(|&&op| graph.op(op).op.name() == name)
            .count()
    };
    for op in ["shape", "size", "range", "cumsum", "concat", "gather-nd"] {
        assert_eq!(count(op), 0, "gpt2_tiny: `{op}` ops left after folding");
    }
    let out = graph.outputs()[0];
    assert_eq!(graph.ty(out).to_string(), "f32[1, 16, 1000]");
}
