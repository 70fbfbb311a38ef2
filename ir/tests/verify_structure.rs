//! Verifier invariants that the text format cannot express (the parser rejects them first),
//! built through the graph API. Type errors are tested as data files in `testdata/verify`.

use tessera_ir::verify::verify;
use tessera_ir::{
    BinaryOp, Bytes, Constant, ElemType, Entity, Graph, Mesh, Op, Sharding, TensorType, UnaryOp,
};

fn f32t(dims: &[u64]) -> TensorType {
    TensorType::fixed(ElemType::F32, dims)
}

fn errors(g: &Graph) -> Vec<String> {
    match verify(g) {
        Ok(()) => vec![],
        Err(es) => es
            .iter()
            .map(|e| format!("{}: {}", e.entity, e.message))
            .collect(),
    }
}

/// `%x -> relu -> %y`, a valid graph to break.
fn base() -> (Graph, tessera_ir::ValueId, tessera_ir::OpId) {
    let mut g = Graph::new("g");
    let x = g.add_input(Some("x".into()), f32t(&[2]));
    let op = g.push_op(Op::Unary(UnaryOp::Relu), vec![x], vec![f32t(&[2])]);
    let y = g.op(op).results[0];
    g.set_name(y, "y");
    g.set_outputs(vec![y]);
    (g, x, op)
}

#[test]
fn valid_graph_passes() {
    let (g, _, _) = base();
    assert_eq!(errors(&g), Vec::<String>::new());
}

#[test]
fn use_before_definition_is_reported() {
    let (mut g, x, relu) = base();
    let y = g.op(relu).results[0];
    // An op that uses %y, inserted before the op defining %y: a cycle in disguise.
    let early = g.insert_op(0, Op::Binary(BinaryOp::Add), vec![x, y], vec![f32t(&[2])]);
    assert_eq!(
        errors(&g),
        vec![format!(
            "{early}: `add` defining value v2: operand 1 (%y) is used before it is defined"
        )]
    );
}

#[test]
fn outputs_must_be_live() {
    let (mut g, _, relu) = base();
    g.remove_op(relu);
    assert_eq!(
        errors(&g),
        vec!["graph: output 0 (%y) is not defined by a graph input or an op in the body"]
    );
    g.set_outputs(vec![]);
    assert_eq!(errors(&g), vec!["graph: the graph has no outputs"]);
}

#[test]
fn declared_result_type_must_match_inference() {
    let (mut g, _, relu) = base();
    let y = g.op(relu).results[0];
    g.value_mut(y).ty = f32t(&[3]);
    assert_eq!(
        errors(&g),
        vec![format!(
            "{relu}: `relu` defining %y: result 0 (%y) is declared f32[3], but the op gives f32[2]"
        )]
    );
}

#[test]
fn constants_are_checked() {
    let (mut g, _, _) = base();
    let c = g.add_const(Constant {
        name: "w".into(),
        ty: f32t(&[2]),
        data: Bytes::from(vec![0u8; 7]),
    });
    g.add_const(Constant {
        name: "w".into(),
        ty: f32t(&[1]),
        data: Bytes::from(vec![0u8; 4]),
    });
    let sym = TensorType::new(ElemType::F32, vec![tessera_ir::Dim::sym("N")]);
    g.add_const(Constant {
        name: "s".into(),
        ty: sym,
        data: Bytes::new(),
    });
    assert_eq!(
        errors(&g),
        vec![
            format!("{c}: constant @w of type f32[2] needs 8 bytes of data, has 7"),
            "c1: constant name @w is used twice".to_string(),
            "c2: constant @s has the non-static type f32[N]".to_string(),
        ]
    );
}

#[test]
fn names_must_be_unique() {
    let (mut g, x, relu) = base();
    let y = g.op(relu).results[0];
    g.set_name(y, "x");
    assert_eq!(
        errors(&g),
        vec![format!("{y}: the name %x is used by two values")]
    );
    let _ = x;
}

#[test]
fn annotations_are_checked() {
    let (mut g, x, relu) = base();
    g.value_mut(x).sharding = Some(Sharding {
        axes: vec![vec![0], vec![1]],
    });
    g.op_mut(relu).device = Some(String::new());
    let y = g.op(relu).results[0];
    g.value_mut(y).sharding = Some(Sharding {
        axes: vec![vec![0, 0]],
    });
    assert_eq!(
        errors(&g),
        vec![
            format!("{x}: %x: sharding lists 2 axes for rank 1"),
            format!("{x}: %x is sharded, but the graph declares no mesh"),
            format!("{y}: %y: sharding uses a mesh axis twice"),
            format!("{y}: %y is sharded, but the graph declares no mesh"),
            format!("{relu}: `relu` defining %y: empty device name"),
        ]
    );
}

#[test]
fn meshes_are_checked() {
    let (mut g, x, relu) = base();
    g.meshes = vec![Mesh {
        name: String::new(),
        shape: vec![2, 0],
        devices: vec!["a".into(), "@b".into(), "a".into()],
    }];
    g.op_mut(relu).device = Some("@".into());
    assert_eq!(
        errors(&g),
        vec![
            "graph: a mesh has an empty name".to_string(),
            "graph: mesh @ has an axis of size 0".to_string(),
            "graph: mesh @ of shape [2, 0] needs 0 devices, has 3".to_string(),
            "graph: mesh @: bad device name \"@b\"".to_string(),
            "graph: mesh @: device \"a\" is listed twice".to_string(),
        ]
    );
    let _ = x;
    // A well-formed mesh, and an op on it.
    g.meshes = vec![Mesh {
        name: "grid".into(),
        shape: vec![2],
        devices: vec!["a".into(), "b".into()],
    }];
    g.op_mut(relu).device = Some("@grid".into());
    assert_eq!(errors(&g), Vec::<String>::new());
    g.op_mut(relu).device = Some("@other".into());
    assert_eq!(
        errors(&g),
        vec![format!(
            "{relu}: `relu` defining %y: device \"@other\" names no mesh of the graph"
        )]
    );
    // A second mesh: ops on either are well formed, and each one's results name its mesh.
    g.meshes.push(Mesh {
        name: "other".into(),
        shape: vec![1],
        devices: vec!["c".into()],
    });
    assert_eq!(errors(&g), Vec::<String>::new());
    let y = g.op(relu).results[0];
    assert_eq!(g.value_mesh(y).map(|m| m.name.as_str()), Some("other"));
    assert_eq!(g.value_mesh(x), None);
    g.op_mut(relu).device = Some("@grid".into());
    assert_eq!(g.value_mesh(y).map(|m| m.name.as_str()), Some("grid"));
}

#[test]
fn mesh_groups_follow_row_major_order() {
    let m = Mesh {
        name: "grid".into(),
        shape: vec![2, 3],
        devices: (0..6).map(|i| format!("d{i}")).collect(),
    };
    assert_eq!(m.groups(&[0]), vec![vec![0, 3], vec![1, 4], vec![2, 5]]);
    assert_eq!(m.groups(&[1]), vec![vec![0, 1, 2], vec![3, 4, 5]]);
    assert_eq!(m.groups(&[0, 1]), vec![vec![0, 1, 2, 3, 4, 5]]);
    assert_eq!(m.groups(&[]), (0..6).map(|i| vec![i]).collect::<Vec<_>>());
    let s = Sharding {
        axes: vec![vec![1], vec![], vec![0]],
    };
    assert_eq!(m.shard_count(&s), 6);
    assert_eq!(m.device_name(), "@grid");
}

#[test]
fn result_count_must_match_the_op() {
    let (mut g, x, _) = base();
    let split = g.push_op(
        Op::Split {
            axis: 0,
            sizes: vec![1, 1],
        },
        vec![x],
        vec![f32t(&[1])],
    );
    assert_eq!(
        errors(&g),
        vec![format!(
            "{split}: `split` defining value v2: has 1 results, the op produces 2"
        )]
    );
}

#[test]
fn every_error_names_an_entity_of_the_graph() {
    let (mut g, _, relu) = base();
    g.op_mut(relu)
        .operands
        .push(tessera_ir::ValueId::from_index(99));
    let es = verify(&g).expect_err("invalid operand");
    assert_eq!(es.len(), 1);
    assert_eq!(es[0].entity, Entity::Op(relu));
    assert_eq!(
        es[0].message,
        "`relu` defining %y: operand 1 is the invalid value v99"
    );
}
