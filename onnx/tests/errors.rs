//! Models the importer must refuse, each with the message a user needs: everything
//! unsupported listed at once, malformed files, undefined names, missing external data, and
//! bad `input_shapes`. The models are written here with a minimal protobuf schema.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::proto::{self, FLOAT, STRING, float_init, graph, model, node, value};
use tessera_onnx::{ImportError, ImportOptions, import_file};

fn import(path: &Path) -> Result<tessera_ir::Graph, ImportError> {
    import_file(path, &ImportOptions::default())
}

fn import_shapes(path: &Path, shapes: &[(&str, &[u64])]) -> Result<tessera_ir::Graph, ImportError> {
    let input_shapes: BTreeMap<String, Vec<u64>> = shapes
        .iter()
        .map(|(n, d)| (n.to_string(), d.to_vec()))
        .collect();
    import_file(
        path,
        &ImportOptions {
            input_shapes,
            ..ImportOptions::default()
        },
    )
}

fn err(r: Result<tessera_ir::Graph, ImportError>) -> (ImportError, String) {
    let e = r.expect_err("the import should fail");
    let msg = e.to_string();
    (e, msg)
}

/// `y = relu(x)` with `x: f32[N, 4]`, at opset 17.
fn relu_model() -> proto::Model {
    model(
        17,
        graph(
            "relu",
            vec![node("Relu", "r", &["x"], &["y"])],
            vec![value("x", FLOAT, &["N", "4"])],
            vec![value("y", FLOAT, &["N", "4"])],
        ),
    )
}

#[test]
fn every_unsupported_operator_in_one_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("unsupported.onnx");
    let mut m = model(
        17,
        graph(
            "g",
            vec![
                node("FancyOp", "fancy_0", &["x"], &["a"]),
                node("Relu", "r", &["a"], &["b"]),
                node("FancyOp", "fancy_1", &["b"], &["c"]),
                node("OtherOp", "other_0", &["c"], &["d"]),
                {
                    let mut n = node("Custom", "custom_0", &["d"], &["y"]);
                    n.domain = Some("com.example".into());
                    n
                },
            ],
            vec![value("x", FLOAT, &["4"])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    m.opset_import.push(proto::OpsetId {
        domain: Some("com.example".into()),
        version: Some(3),
    });
    proto::write(&path, &m);
    let (e, msg) = err(import(&path));
    let ImportError::Unsupported { items, .. } = &e else {
        panic!("expected Unsupported, got {msg}");
    };
    assert_eq!(items.len(), 3, "{msg}");
    assert!(msg.starts_with(&format!("{}: ", path.display())), "{msg}");
    assert!(
        msg.contains("the model uses 3 unsupported feature(s):"),
        "{msg}"
    );
    assert!(
        msg.contains("ai.onnx FancyOp (opset 17): 2 nodes, first `fancy_0`"),
        "{msg}"
    );
    assert!(
        msg.contains("ai.onnx OtherOp (opset 17): 1 node, first `other_0`"),
        "{msg}"
    );
    assert!(
        msg.contains("com.example Custom (opset 3): 1 node, first `custom_0`"),
        "{msg}"
    );
}

#[test]
fn unsupported_element_types_and_opsets_are_listed_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("strings.onnx");
    let m = model(
        30,
        graph(
            "g",
            vec![node("Identity", "id", &["s"], &["t"])],
            vec![value("s", STRING, &["2"])],
            vec![value("t", STRING, &["2"])],
        ),
    );
    proto::write(&path, &m);
    let (e, msg) = err(import(&path));
    assert!(matches!(e, ImportError::Unsupported { .. }), "{msg}");
    assert!(msg.contains("opset 30 (supported: 7 to"), "{msg}");
    assert!(msg.contains("element type string"), "{msg}");
}

#[test]
fn truncated_and_garbage_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = common::repo_root().join("testdata/models/onnx/mlp/model.onnx");
    let bytes = std::fs::read(&good).expect("read mlp");

    let truncated = dir.path().join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let (e, msg) = err(import(&truncated));
    assert!(matches!(e, ImportError::Malformed { .. }), "{msg}");
    assert!(
        msg.starts_with(&format!("{}: not a valid ONNX model", truncated.display())),
        "{msg}"
    );

    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\xff\xff\xff\xff this is not protobuf at all").expect("write");
    let (e, msg) = err(import(&garbage));
    assert!(matches!(e, ImportError::Malformed { .. }), "{msg}");
    assert!(
        msg.contains("garbage.onnx: not a valid ONNX model"),
        "{msg}"
    );

    let empty = dir.path().join("empty.onnx");
    std::fs::write(&empty, b"").expect("write");
    let (_, msg) = err(import(&empty));
    assert!(
        msg.contains("empty.onnx: not a valid ONNX model: the model has no graph"),
        "{msg}"
    );

    let (e, msg) = err(import(&dir.path().join("absent.onnx")));
    assert!(matches!(e, ImportError::Io { .. }), "{msg}");
    assert!(msg.contains("absent.onnx"), "{msg}");
}

#[test]
fn dangling_input_names_the_node_and_the_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dangling.onnx");
    let m = model(
        17,
        graph(
            "g",
            vec![
                node("Relu", "r", &["x"], &["a"]),
                node("Add", "add_1", &["a", "nowhere"], &["y"]),
            ],
            vec![value("x", FLOAT, &["4"])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    proto::write(&path, &m);
    let (e, msg) = err(import(&path));
    assert!(matches!(e, ImportError::Node { .. }), "{msg}");
    assert!(msg.contains("node `add_1` (Add)"), "{msg}");
    assert!(msg.contains("`nowhere` is not defined"), "{msg}");
}

#[test]
fn nodes_out_of_order_are_a_cycle_or_dangling_use() {
    // `a` is used by the first node but produced by the second: ONNX requires topological
    // order, so the first node's input is not defined where it is used.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cycle.onnx");
    let m = model(
        17,
        graph(
            "g",
            vec![
                node("Relu", "first", &["b"], &["a"]),
                node("Neg", "second", &["a"], &["b"]),
            ],
            vec![value("x", FLOAT, &["4"])],
            vec![value("b", FLOAT, &["4"])],
        ),
    );
    proto::write(&path, &m);
    let (_, msg) = err(import(&path));
    assert!(msg.contains("node `first` (Relu)"), "{msg}");
    assert!(msg.contains("`b` is not defined"), "{msg}");
}

#[test]
fn undefined_graph_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("output.onnx");
    let mut m = relu_model();
    m.graph.as_mut().expect("graph").output = vec![value("z", FLOAT, &["N", "4"])];
    proto::write(&path, &m);
    let (e, msg) = err(import(&path));
    assert!(matches!(e, ImportError::Graph { .. }), "{msg}");
    assert!(
        msg.contains("output `z`") && msg.contains("not defined"),
        "{msg}"
    );
}

#[test]
fn missing_external_data_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("external.onnx");
    let mut w = float_init("w", &[4], &[]);
    w.data_location = Some(1);
    w.external_data = vec![proto::Entry {
        key: Some("location".into()),
        value: Some("weights.bin".into()),
    }];
    let mut g = graph(
        "g",
        vec![node("Add", "add", &["x", "w"], &["y"])],
        vec![value("x", FLOAT, &["4"])],
        vec![value("y", FLOAT, &["4"])],
    );
    g.initializer.push(w);
    proto::write(&path, &model(17, g.clone()));
    let (e, msg) = err(import(&path));
    assert!(matches!(e, ImportError::Graph { .. }), "{msg}");
    assert!(msg.contains("initializer `w`"), "{msg}");
    assert!(msg.contains("weights.bin"), "{msg}");

    // Present but too short.
    std::fs::write(dir.path().join("weights.bin"), [0u8; 8]).expect("write");
    let (_, msg) = err(import(&path));
    assert!(msg.contains("exceeds the 8 bytes"), "{msg}");

    // Long enough: imports.
    std::fs::write(dir.path().join("weights.bin"), [0u8; 16]).expect("write");
    import(&path).expect("imports with its data file");

    // A location outside the model's folder is refused.
    g.initializer[0].external_data[0].value = Some("../weights.bin".into());
    proto::write(&path, &model(17, g));
    let (_, msg) = err(import(&path));
    assert!(
        msg.contains("must be a relative path inside the model's folder"),
        "{msg}"
    );
}

#[test]
fn input_shape_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("relu.onnx");
    proto::write(&path, &relu_model());

    let g = import_shapes(&path, &[("x", &[3, 4])]).expect("binds N");
    assert_eq!(g.ty(g.outputs()[0]).to_string(), "f32[3, 4]");

    let (_, msg) = err(import_shapes(&path, &[("x", &[3])]));
    assert!(
        msg.contains("--input-shape x: gives 1 extents, the input has rank 2 (f32[N, 4])"),
        "{msg}"
    );
    let (_, msg) = err(import_shapes(&path, &[("x", &[3, 5])]));
    assert!(
        msg.contains("extent 5 conflicts with the declared f32[N, 4]"),
        "{msg}"
    );
    let (_, msg) = err(import_shapes(&path, &[("x", &[3, 4]), ("y", &[1])]));
    assert!(
        msg.contains("--input-shape y: not a graph input (inputs: x)"),
        "{msg}"
    );
}

#[test]
fn attention_shape_errors_are_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("attention.onnx");
    let attention = |q: &[&str], kv: &[&str]| {
        model(
            23,
            graph(
                "attention",
                vec![node("Attention", "attn", &["q", "k", "v"], &["y"])],
                vec![
                    value("q", FLOAT, q),
                    value("k", FLOAT, kv),
                    value("v", FLOAT, kv),
                ],
                vec![value("y", FLOAT, q)],
            ),
        )
    };
    // 3-D inputs without q_num_heads / kv_num_heads.
    proto::write(&path, &attention(&["1", "2", "8"], &["1", "3", "8"]));
    let (_, msg) = err(import(&path));
    assert!(
        msg.contains("3-D Q, K and V need the q_num_heads and kv_num_heads attributes"),
        "{msg}"
    );
    // 3 query heads over 2 key/value heads.
    proto::write(
        &path,
        &attention(&["1", "3", "2", "4"], &["1", "2", "2", "4"]),
    );
    let (_, msg) = err(import(&path));
    assert!(
        msg.contains("the 3 query heads must be a multiple of the key/value heads"),
        "{msg}"
    );
}
