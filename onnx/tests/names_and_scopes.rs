//! Names the importer gives and the scopes it keeps: graph outputs keep their ONNX names,
//! generated symbols never collide with declared ones, and an `If` branch's names stay inside
//! the branch.

mod common;

use common::proto::{self, BOOL, DimP, FLOAT, graph, model, node, value};
use tessera_onnx::{ImportOptions, import_file};

fn import(m: &proto::Model) -> Result<tessera_ir::Graph, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("m.onnx");
    proto::write(&path, m);
    import_file(&path, &ImportOptions::default()).map_err(|e| e.to_string())
}

fn output_names(g: &tessera_ir::Graph) -> Vec<String> {
    g.outputs()
        .iter()
        .map(|&v| g.value(v).name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn outputs_keep_their_onnx_names_through_identity() {
    let m = model(
        17,
        graph(
            "g",
            vec![
                node("Relu", "r", &["x"], &["a"]),
                node("Identity", "i", &["a"], &["y"]),
            ],
            vec![value("x", FLOAT, &["4"])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    let g = import(&m).expect("imports");
    assert_eq!(output_names(&g), ["y"]);
}

#[test]
fn generated_symbols_do_not_collide_with_declared_ones() {
    let mut a = value("a", FLOAT, &["1"]);
    // An extent with neither a value nor a name.
    a.r#type
        .as_mut()
        .and_then(|t| t.tensor_type.as_mut())
        .and_then(|t| t.shape.as_mut())
        .expect("shape")
        .dim = vec![DimP {
        dim_value: None,
        dim_param: None,
    }];
    let m = model(
        17,
        graph(
            "g",
            vec![
                node("Relu", "r", &["a"], &["ya"]),
                node("Relu", "s", &["b"], &["yb"]),
            ],
            vec![a, value("b", FLOAT, &["a_0"])],
            vec![value("ya", FLOAT, &["?"]), value("yb", FLOAT, &["a_0"])],
        ),
    );
    let g = import(&m).expect("imports");
    let a_dim = g.ty(g.inputs()[0]).shape[0].to_string();
    let b_dim = g.ty(g.inputs()[1]).shape[0].to_string();
    assert_eq!(b_dim, "a_0");
    assert_ne!(
        a_dim, b_dim,
        "the generated symbol must differ from the declared one"
    );
}

#[test]
fn if_branch_names_stay_inside_the_branch() {
    // then_branch defines `t`; else_branch returns `t` without defining it, which is invalid
    // ONNX: with a run-time condition both branches are imported, and the else branch must not
    // see the then branch's `t`.
    let then_branch = graph(
        "then",
        vec![node("Neg", "neg", &["x"], &["t"])],
        vec![],
        vec![value("t", FLOAT, &["4"])],
    );
    let else_branch = graph("else", vec![], vec![], vec![value("t", FLOAT, &["4"])]);
    let mut if_node = node("If", "if", &["c"], &["y"]);
    if_node.attribute = vec![
        proto::Attribute {
            name: Some("then_branch".into()),
            g: Some(then_branch),
            graphs: vec![],
            ..Default::default()
        },
        proto::Attribute {
            name: Some("else_branch".into()),
            g: Some(else_branch),
            graphs: vec![],
            ..Default::default()
        },
    ];
    let m = model(
        17,
        graph(
            "g",
            vec![if_node],
            vec![value("x", FLOAT, &["4"]), value("c", BOOL, &[])],
            vec![value("y", FLOAT, &["4"])],
        ),
    );
    let err = import(&m).expect_err("the else branch uses an undefined name");
    assert!(
        err.contains("else_branch") && err.contains("`t` is not defined"),
        "{err}"
    );
}
