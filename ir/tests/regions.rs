//! Region ops (`if`, `loop`, `scan`) in the interpreter, against hand-computed values, and the
//! nesting limit in the verifier, the parser and the interpreter.

use ndarray::{ArrayD, IxDyn};
use tessera_ir::interp::run;
use tessera_ir::text;
use tessera_ir::verify::{MAX_REGION_DEPTH, verify};
use tessera_ir::{Graph, Tensor};

fn f32s(shape: &[usize], v: &[f32]) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v.to_vec()).expect("shape"))
}

fn scalar_bool(b: bool) -> Tensor {
    Tensor::Bool(ArrayD::from_elem(IxDyn(&[]), b))
}

fn scalar_i64(n: i64) -> Tensor {
    Tensor::I64(ArrayD::from_elem(IxDyn(&[]), n))
}

fn load(name: &str) -> Graph {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/ir")
        .join(name);
    let g = text::load(&path).expect("loads");
    verify(&g).expect("verifies");
    g
}

fn values(t: &Tensor) -> (Vec<usize>, Vec<f64>) {
    (t.shape().to_vec(), t.to_f64_vec())
}

#[test]
fn if_loop_and_scan_compute_their_semantics() {
    let g = load("regions.tir");
    let seq = f32s(&[4, 3], &[1., 1., 1., 2., 2., 2., 3., 3., 3., 4., 4., 4.]);
    let x = f32s(&[3], &[1., 2., 3.]);
    let outs = run(
        &g,
        &[scalar_bool(true), x.clone(), scalar_i64(2), seq.clone()],
    )
    .expect("runs");
    // then: x + w through a rank-5 reshape the else branch never makes.
    assert_eq!(values(&outs[0]), (vec![3], vec![2., 4., 6.]));
    // Two iterations of acc += w; the scan output stacks each iteration's sum.
    assert_eq!(values(&outs[1]), (vec![3], vec![3., 6., 9.]));
    assert_eq!(values(&outs[2]), (vec![2, 3], vec![2., 4., 6., 3., 6., 9.]));
    // Scan over the rows of seq from the last: s *= row; outputs stacked along axis 1.
    assert_eq!(values(&outs[3]), (vec![3], vec![24., 48., 72.]));
    assert_eq!(
        values(&outs[4]),
        (
            vec![3, 4],
            vec![4., 12., 24., 24., 8., 24., 48., 48., 12., 36., 72., 72.]
        )
    );

    let outs = run(&g, &[scalar_bool(false), x, scalar_i64(0), seq]).expect("runs");
    assert_eq!(values(&outs[0]), (vec![3], vec![1., 2., 3.]));
    // No iterations: the carried value is the initial one and the scan output is empty.
    assert_eq!(values(&outs[1]), (vec![3], vec![1., 2., 3.]));
    assert_eq!(values(&outs[2]), (vec![0, 3], vec![]));
}

#[test]
fn only_the_taken_branch_runs() {
    // The else branch gathers at index 7 of a 3-element tensor: an error only when taken.
    let src = "graph @g(%c: bool[], %x: f32[3], %i: i64[]) {
  %r = if %c, %x, %i : f32[] {
    graph @then(%a: f32[3], %k: i64[]) {
      %0 = reduce-sum %a {axes = [], keep-dims = false} : f32[]
      return %0
    }
    graph @else(%a: f32[3], %k: i64[]) {
      %1 = gather %a, %k {axis = 0} : f32[]
      return %1
    }
  }
  return %r
}
";
    let g = text::parse(src, None).expect("parses");
    verify(&g).expect("verifies");
    assert_eq!(text::print(&g), src);
    let x = f32s(&[3], &[1., 2., 3.]);
    let outs = run(&g, &[scalar_bool(true), x.clone(), scalar_i64(7)]).expect("then runs");
    assert_eq!(outs[0].to_f64_vec(), vec![6.0]);
    let err = run(&g, &[scalar_bool(false), x, scalar_i64(7)]).expect_err("else fails");
    let msg = err.to_string();
    assert!(
        msg.contains("in the else region") && msg.contains("out of range"),
        "{msg}"
    );
}

/// `if` ops nested `depth` deep, each passing its input through.
fn nested(depth: usize) -> String {
    let mut s = String::from("graph @g(%c: bool[], %x: f32[2]) {\n");
    let mut open = String::new();
    for level in 0..depth {
        // Each level captures the condition and the tensor and passes them on.
        let ind = "  ".repeat(2 * level + 1);
        s.push_str(&format!("{ind}%r = if %c, %c, %x : f32[2] {{\n"));
        s.push_str(&format!("{ind}  graph @then(%c: bool[], %x: f32[2]) {{\n"));
        open.insert_str(
            0,
            &format!(
                "{ind}    return %r\n{ind}  }}\n{ind}  graph @else(%c: bool[], %x: f32[2]) {{\n{ind}    return %x\n{ind}  }}\n{ind}}}\n"
            ),
        );
    }
    let ind = "  ".repeat(2 * depth + 1);
    s.push_str(&format!("{ind}%r = neg %x : f32[2]\n"));
    s.push_str(&open);
    s.push_str("  return %r\n}\n");
    s
}

#[test]
fn nesting_is_limited() {
    let ok = text::parse(&nested(MAX_REGION_DEPTH), None).expect("64 levels parse");
    verify(&ok).expect("64 levels verify");
    let x = f32s(&[2], &[1., -2.]);
    let outs = run(&ok, &[scalar_bool(true), x.clone()]).expect("64 levels run");
    assert_eq!(outs[0].to_f64_vec(), vec![-1.0, 2.0]);
    assert_eq!(text::print(&ok), nested(MAX_REGION_DEPTH));

    let err = text::parse(&nested(MAX_REGION_DEPTH + 1), None).expect_err("65 levels");
    assert!(
        err.message.contains("regions nest more than 64 deep"),
        "{err}"
    );
}

/// `if` ops nested `depth` deep, built through the API (the parser refuses more than the
/// limit, so the verifier's and the interpreter's own checks are reached this way).
fn nested_graph(depth: usize) -> Graph {
    use tessera_ir::{ElemType, Op, TensorType, UnaryOp};
    let x_ty = TensorType::fixed(ElemType::F32, &[2]);
    let c_ty = TensorType::new(ElemType::Bool, vec![]);
    let mut inner = Graph::new("then");
    let c = inner.add_input(Some("c".into()), c_ty.clone());
    let x = inner.add_input(Some("x".into()), x_ty.clone());
    let _ = c;
    let n = inner.push_op(Op::Unary(UnaryOp::Neg), vec![x], vec![x_ty.clone()]);
    let r = inner.op(n).results[0];
    inner.set_outputs(vec![r]);
    for level in 0..depth {
        let mut outer = Graph::new(if level + 1 == depth { "g" } else { "then" });
        let c = outer.add_input(Some("c".into()), c_ty.clone());
        let x = outer.add_input(Some("x".into()), x_ty.clone());
        let mut els = Graph::new("else");
        els.add_input(Some("c".into()), c_ty.clone());
        let ex = els.add_input(Some("x".into()), x_ty.clone());
        els.set_outputs(vec![ex]);
        let op = outer.push_op(
            Op::If {
                then_branch: Box::new(inner),
                else_branch: Box::new(els),
            },
            vec![c, c, x],
            vec![x_ty.clone()],
        );
        let r = outer.op(op).results[0];
        outer.set_outputs(vec![r]);
        inner = outer;
    }
    inner
}

#[test]
fn verifier_and_interpreter_limit_nesting() {
    let x = f32s(&[2], &[1., -2.]);
    let ok = nested_graph(MAX_REGION_DEPTH);
    verify(&ok).expect("64 levels verify");
    let outs = run(&ok, &[scalar_bool(true), x.clone()]).expect("64 levels run");
    assert_eq!(outs[0].to_f64_vec(), vec![-1.0, 2.0]);

    let deep = nested_graph(MAX_REGION_DEPTH + 1);
    let errors = verify(&deep).expect_err("65 levels do not verify");
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("regions nest more than 64 deep")),
        "{errors:?}"
    );
    let err = run(&deep, &[scalar_bool(true), x]).expect_err("65 levels do not run");
    assert!(
        err.to_string().contains("regions nest more than 64 deep"),
        "{err}"
    );
}
