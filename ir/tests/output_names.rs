//! Graph outputs have names of their own: the model's interface, printed with `as`, kept
//! when the value behind an output changes, distinct, and checked by the verifier.

use tessera_ir::text;
use tessera_ir::verify::verify;
use tessera_ir::{ElemType, Graph, Op, TensorType, UnaryOp};

fn f32s(n: u64) -> TensorType {
    TensorType::new(ElemType::F32, vec![tessera_ir::Dim::Static(n)])
}

/// x -> relu -> y; returns (graph, x, y).
fn relu_graph() -> (Graph, tessera_ir::ValueId, tessera_ir::ValueId) {
    let mut g = Graph::new("g");
    let x = g.add_input(Some("x".into()), f32s(2));
    let op = g.push_op(Op::Unary(UnaryOp::Relu), vec![x], vec![f32s(2)]);
    let y = g.op(op).results[0];
    g.set_name(y, "y");
    (g, x, y)
}

#[test]
fn unnamed_outputs_take_their_values_names_made_distinct() {
    let (mut g, x, y) = relu_graph();
    g.set_outputs(vec![y, y, x, y]);
    assert_eq!(text::output_names(&g), ["y", "y_1", "x", "y_2"]);
    let printed = text::print(&g);
    assert!(
        printed.contains("  return %y, %y as \"y_1\", %x, %y as \"y_2\"\n"),
        "{printed}"
    );
    // The printed names are the parsed graph's own names, so printing is a fixpoint.
    let again = text::parse(&printed, None).expect("parses");
    assert_eq!(text::output_names(&again), ["y", "y_1", "x", "y_2"]);
    assert_eq!(text::print(&again), printed);
}

#[test]
fn given_names_stay_when_the_value_changes() {
    let (mut g, x, y) = relu_graph();
    g.set_named_outputs(vec![(y, Some("probs".into())), (x, None)]);
    assert_eq!(text::output_names(&g), ["probs", "x"]);
    g.replace_all_uses(y, x);
    assert_eq!(text::output_names(&g), ["probs", "x"]);
    assert!(text::print(&g).contains("return %x as \"probs\", %x\n"));
    g.replace_output_values(vec![y, y]);
    assert_eq!(text::output_names(&g), ["probs", "y"]);
    assert!(text::print(&g).contains("return %y as \"probs\", %y\n"));
}

#[test]
fn a_given_name_wins_over_a_value_name() {
    // The unnamed output named after value `y` must not take `y`, which output 0 was given.
    let (mut g, x, y) = relu_graph();
    g.set_named_outputs(vec![(x, Some("y".into())), (y, None)]);
    assert_eq!(text::output_names(&g), ["y", "y_1"]);
    let printed = text::print(&g);
    let again = text::parse(&printed, None).expect("parses");
    assert_eq!(text::output_names(&again), ["y", "y_1"]);
    assert_eq!(text::print(&again), printed);
}

#[test]
fn the_verifier_refuses_duplicate_and_empty_output_names() {
    let (mut g, x, y) = relu_graph();
    g.set_named_outputs(vec![(y, Some("o".into())), (x, Some("o".into()))]);
    let errs: Vec<String> = verify(&g)
        .expect_err("invalid")
        .iter()
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(errs, ["output 1 is named `o` like an earlier output"]);
    g.set_named_outputs(vec![(y, Some(String::new()))]);
    let errs: Vec<String> = verify(&g)
        .expect_err("invalid")
        .iter()
        .map(|e| e.message.clone())
        .collect();
    assert_eq!(errs, ["output 0 has an empty name"]);
}

#[test]
fn many_equal_names_are_made_unique_in_linear_time() {
    // 20,000 values all named `v` (and one named `v_1` in between): the printer's probe for
    // a free suffix used to start at `_1` every time, quadratic in the count.
    let mut g = Graph::new("g");
    let x = g.add_input(Some("v".into()), f32s(1));
    let mut last = x;
    for i in 0..20_000 {
        let op = g.push_op(Op::Unary(UnaryOp::Neg), vec![last], vec![f32s(1)]);
        last = g.op(op).results[0];
        g.set_name(last, if i == 5 { "v_1" } else { "v" });
    }
    g.set_outputs(vec![last, last]);
    let names = text::value_names(&g);
    // Inputs first, then results in order: v, v_1 (first result), ..., the value named
    // `v_1` by hand comes after `v_1` was taken, so it becomes `v_1_1`.
    assert_eq!(names[0], "v");
    assert_eq!(names[1], "v_1");
    assert_eq!(names[6], "v_1_1");
    assert_eq!(names[7], "v_6");
    assert_eq!(names[20_000], "v_19999");
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    assert_eq!(distinct.len(), names.len());
    assert_eq!(text::output_names(&g), ["v_19999", "v_19999_1"]);
}
