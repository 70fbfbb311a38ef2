//! The printer on graphs built with the builder API: unique names, quoting, annotations.

use tessera_ir::text;
use tessera_ir::{BinaryOp, Constant, ElemType, Entity, Graph, Op, Sharding, TensorType, UnaryOp};

fn f32s(dims: &[u64]) -> TensorType {
    TensorType::fixed(ElemType::F32, dims)
}

/// A graph whose names collide, need quotes, or are missing; one op has no results.
fn sample() -> (Graph, Vec<tessera_ir::OpId>) {
    let mut g = Graph::new("my graph");
    let x = g.add_input(Some("x".into()), f32s(&[2]));
    let y = g.add_input(None, f32s(&[2]));
    g.value_mut(y).sharding = Some(Sharding {
        axes: vec![vec![0, 1]],
    });
    let c = g.add_const(Constant {
        name: "k".into(),
        ty: TensorType::fixed(ElemType::I8, &[2]),
        data: tessera_ir::Bytes::from_static(&[0xff, 7]),
    });
    let k = g.push_op(
        Op::Const(c),
        vec![],
        vec![TensorType::fixed(ElemType::I8, &[2])],
    );
    let relu = g.push_op(Op::Unary(UnaryOp::Relu), vec![x], vec![f32s(&[2])]);
    let r = g.op(relu).results[0];
    let add = g.push_op(Op::Binary(BinaryOp::Add), vec![x, r], vec![f32s(&[2])]);
    let a = g.op(add).results[0];
    g.set_name(a, "x");
    let neg = g.push_op(Op::Unary(UnaryOp::Neg), vec![a], vec![f32s(&[2])]);
    let n = g.op(neg).results[0];
    g.set_name(n, "0");
    g.op_mut(neg).device = Some("gpu\"1\"".into());
    let odd = g.push_op(Op::Unary(UnaryOp::Exp), vec![n], vec![f32s(&[2])]);
    let o = g.op(odd).results[0];
    g.set_name(o, "weird/name:0");
    g.op_mut(odd).loc = Some("a\nb".into());
    let none = g.push_op(
        Op::Split {
            axis: 0,
            sizes: vec![],
        },
        vec![o],
        vec![],
    );
    let dead = g.push_op(Op::Unary(UnaryOp::Abs), vec![o], vec![f32s(&[2])]);
    g.remove_op(dead);
    g.set_outputs(vec![o, y]);
    (g, vec![k, relu, add, neg, odd, none, dead])
}

const SAMPLE: &str = r#"const @k : i8[2] = [-1, 7]

graph @"my graph"(%x: f32[2], %0: f32[2] sharded[[0, 1]]) {
  %1 = const @k : i8[2]
  %2 = relu %x : f32[2]
  %x_1 = add %x, %2 : f32[2]
  %0_1 = neg %x_1 : f32[2] device("gpu\"1\"")
  %"weird/name:0" = exp %0_1 : f32[2] loc("a\nb")
  split %"weird/name:0" {axis = 0, sizes = []}
  return %"weird/name:0", %0
}
"#;

#[test]
fn prints_unique_quoted_names() {
    let (g, _) = sample();
    assert_eq!(text::print(&g), SAMPLE);
    let names = text::value_names(&g);
    assert_eq!(
        &names[..7],
        ["x", "0", "1", "2", "x_1", "0_1", "weird/name:0"]
    );
    // The dead op's result still gets a name.
    assert_eq!(names[7], "3");
    // print -> parse -> print is a fixpoint; parsed names are the printed ones.
    let parsed = text::parse(SAMPLE, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text::print(&parsed), SAMPLE);
    assert_eq!(parsed.value(parsed.inputs()[1]).name.as_deref(), Some("0"));
}

#[test]
fn annotations_follow_their_lines() {
    let (g, ops) = sample();
    let [k, _relu, add, neg, _odd, _none, dead] = ops[..] else {
        unreachable!()
    };
    let neg_result = g.op(neg).results[0];
    let notes = vec![
        (Entity::Op(add), "operand types differ".to_string()),
        (Entity::Value(neg_result), "first\nsecond".to_string()),
        (Entity::Value(g.inputs()[1]), "input note".to_string()),
        (Entity::Graph, "graph note".to_string()),
        (Entity::Op(dead), "dead op note".to_string()),
        (
            Entity::Const(tessera_ir::ConstId::from_index(0)),
            "const note".to_string(),
        ),
        (Entity::Op(add), "second note on add".to_string()),
        (Entity::Op(k), "const op note".to_string()),
    ];
    let expected = r#"const @k : i8[2] = [-1, 7]
// error: const note

graph @"my graph"(%x: f32[2], %0: f32[2] sharded[[0, 1]]) {
// error: input note
// error: graph note
// error: dead op note
  %1 = const @k : i8[2]
  // error: const op note
  %2 = relu %x : f32[2]
  %x_1 = add %x, %2 : f32[2]
  // error: operand types differ
  // error: second note on add
  %0_1 = neg %x_1 : f32[2] device("gpu\"1\"")
  // error: first
  //   second
  %"weird/name:0" = exp %0_1 : f32[2] loc("a\nb")
  split %"weird/name:0" {axis = 0, sizes = []}
  return %"weird/name:0", %0
}
"#;
    assert_eq!(text::print_annotated(&g, &notes), expected);
    // Annotated text still parses (the notes are comments) to the same graph text.
    let parsed = text::parse(expected, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(text::print(&parsed), SAMPLE);
}

#[test]
fn printer_survives_invalid_handles() {
    let mut g = Graph::new("bad");
    let x = g.add_input(Some("x".into()), f32s(&[2]));
    let bogus = tessera_ir::ValueId::from_index(99);
    g.push_op(Op::Binary(BinaryOp::Add), vec![x, bogus], vec![f32s(&[2])]);
    g.push_op(
        Op::Const(tessera_ir::ConstId::from_index(5)),
        vec![],
        vec![f32s(&[2])],
    );
    g.set_outputs(vec![bogus]);
    let text = text::print(&g);
    assert!(
        text.contains(r#"%0 = add %x, %"<invalid v99>" : f32[2]"#),
        "{text}"
    );
    assert!(
        text.contains(r#"%1 = const @"<invalid c5>" : f32[2]"#),
        "{text}"
    );
}

#[test]
fn attributes_print_sorted_and_parse_in_any_order() {
    let src = "graph @g(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3]) {\n  %y = conv %x, %w {strides = [2, 2], groups = 1, pads = [1, 1, 1, 1], dilations = [1, 1]} : f32[1, 4, 4, 4]\n  %z = clip %y {min = 0, max = 6} : f32[1, 4, 4, 4]\n  return %z\n}\n";
    let g = text::parse(src, None).unwrap_or_else(|e| panic!("{e}"));
    let printed = text::print(&g);
    assert!(
        printed.contains("{dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [2, 2]}"),
        "{printed}"
    );
    assert!(
        printed.contains("clip %y {max = 6.0, min = 0.0}"),
        "{printed}"
    );
}
