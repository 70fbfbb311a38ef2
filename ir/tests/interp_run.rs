//! Whole-graph tests of `interp::run`: signature checks, symbol binding, constants, result type
//! checks.

mod interp_common;

use interp_common::*;
use tessera_ir::interp::run;
use tessera_ir::{
    BinaryOp, Bytes, Constant, Dim, ElemType, Graph, Op, TensorType, UnaryOp, ValueId,
};

fn ty(elem: ElemType, dims: &[Dim]) -> TensorType {
    TensorType::new(elem, dims.to_vec())
}
fn n() -> Dim {
    Dim::sym("N")
}
fn d(x: u64) -> Dim {
    Dim::Static(x)
}

fn f32_const(g: &mut Graph, name: &str, dims: &[u64], v: &[f32]) -> ValueId {
    let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let t = TensorType::fixed(ElemType::F32, dims);
    let c = g.add_const(Constant {
        name: name.into(),
        ty: t.clone(),
        data: Bytes::from(data),
    });
    let op = g.push_op(Op::Const(c), vec![], vec![t]);
    g.op(op).results[0]
}

fn push(g: &mut Graph, op: Op, operands: Vec<ValueId>, t: TensorType) -> ValueId {
    let id = g.push_op(op, operands, vec![t]);
    g.op(id).results[0]
}

/// `relu(x @ w + b)` with `x: f32[N, 2]`, plus a reshape whose attribute uses `N`.
fn mlp() -> Graph {
    let mut g = Graph::new("mlp");
    let x = g.add_input(Some("x".into()), ty(ElemType::F32, &[n(), d(2)]));
    let w = f32_const(&mut g, "w", &[2, 2], &[1.0, -1.0, 2.0, 1.0]);
    let b = f32_const(&mut g, "b", &[2], &[0.5, -10.0]);
    let h = push(
        &mut g,
        Op::MatMul,
        vec![x, w],
        ty(ElemType::F32, &[n(), d(2)]),
    );
    let h = push(
        &mut g,
        Op::Binary(BinaryOp::Add),
        vec![h, b],
        ty(ElemType::F32, &[n(), d(2)]),
    );
    let y = push(
        &mut g,
        Op::Unary(UnaryOp::Relu),
        vec![h],
        ty(ElemType::F32, &[n(), d(2)]),
    );
    let flat = push(
        &mut g,
        Op::Reshape {
            shape: vec![d(2), n()],
        },
        vec![y],
        ty(ElemType::F32, &[d(2), n()]),
    );
    // The input itself and a constant are outputs too; `y` is output twice.
    g.set_outputs(vec![y, flat, x, b, y]);
    g
}

#[test]
fn runs_a_small_graph_with_symbolic_batch() {
    let g = mlp();
    let x = f32t(&[3, 2], &[1.0, 1.0, 0.0, 2.0, 3.0, 0.0]);
    let out = run(&g, std::slice::from_ref(&x)).expect("run");
    // x @ w: [1*1+1*2, 1*-1+1*1] = [3, 0]; [4, 2]; [3, -3]. + b = [3.5,-10], [4.5,-8], [3.5,-13].
    let y = f32t(&[3, 2], &[3.5, 0.0, 4.5, 0.0, 3.5, 0.0]);
    assert_close(&out[0], &y, "y");
    assert_close(
        &out[1],
        &f32t(&[2, 3], &[3.5, 0.0, 4.5, 0.0, 3.5, 0.0]),
        "reshape",
    );
    assert_close(&out[2], &x, "input passthrough");
    assert_close(&out[3], &f32t(&[2], &[0.5, -10.0]), "constant output");
    assert_close(&out[4], &y, "repeated output");
    // A different batch size works with the same graph.
    let out = run(&g, &[f32t(&[1, 2], &[0.0, 0.0])]).expect("run N=1");
    assert_close(&out[0], &f32t(&[1, 2], &[0.5, 0.0]), "y N=1");
}

fn run_err(g: &Graph, inputs: &[tessera_ir::Tensor]) -> String {
    match run(g, inputs) {
        Ok(r) => panic!("run should fail, got {r:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn rejects_bad_inputs() {
    let g = mlp();
    let e = run_err(&g, &[i64t(&[3, 2], &[0; 6])]);
    assert!(
        e.contains("input 0 (x): expected element type f32, got i64"),
        "{e}"
    );
    let e = run_err(&g, &[f32t(&[6], &[0.0; 6])]);
    assert!(
        e.contains("input 0 (x): expected f32[N, 2] (rank 2), got shape [6] (rank 1)"),
        "{e}"
    );
    let e = run_err(&g, &[f32t(&[2, 3], &[0.0; 6])]);
    assert!(e.contains("axis 1 has extent 3, expected 2"), "{e}");
    let e = run_err(&g, &[]);
    assert!(e.contains("graph expects 1 inputs, got 0"), "{e}");
}

#[test]
fn rejects_mismatched_symbol() {
    let mut g = Graph::new("two");
    let x = g.add_input(Some("x".into()), ty(ElemType::F32, &[n()]));
    let y = g.add_input(None, ty(ElemType::F32, &[n()]));
    let s = push(
        &mut g,
        Op::Binary(BinaryOp::Add),
        vec![x, y],
        ty(ElemType::F32, &[n()]),
    );
    g.set_outputs(vec![s]);
    let e = run_err(&g, &[f32t(&[3], &[0.0; 3]), f32t(&[4], &[0.0; 4])]);
    assert!(e.contains("input 1: expected f32[N], got shape [4]: axis 0 has extent 4 but symbol N is bound to 3"), "{e}");
    let out = run(&g, &[f32t(&[2], &[1.0, 2.0]), f32t(&[2], &[3.0, 4.0])]).expect("run");
    assert_close(&out[0], &f32t(&[2], &[4.0, 6.0]), "sum");
}

#[test]
fn checks_declared_result_types_and_reports_op() {
    let mut g = Graph::new("bad");
    let x = g.add_input(Some("x".into()), ty(ElemType::F32, &[d(2)]));
    // Declared [3] but the op produces [2].
    let y = push(
        &mut g,
        Op::Unary(UnaryOp::Neg),
        vec![x],
        ty(ElemType::F32, &[d(3)]),
    );
    g.set_outputs(vec![y]);
    let e = run_err(&g, &[f32t(&[2], &[1.0, 2.0])]);
    assert!(
        e.contains("op0 (neg): result 0: expected f32[3], got shape [2]"),
        "{e}"
    );

    // Errors from the op itself name the op too.
    let mut g = Graph::new("div");
    let x = g.add_input(None, ty(ElemType::I32, &[d(1)]));
    let z = g.add_input(None, ty(ElemType::I32, &[d(1)]));
    let q = push(
        &mut g,
        Op::Binary(BinaryOp::Div),
        vec![x, z],
        ty(ElemType::I32, &[d(1)]),
    );
    g.set_outputs(vec![q]);
    let e = run_err(&g, &[i32t(&[1], &[1]), i32t(&[1], &[0])]);
    assert_eq!(e, "op0 (div): integer division by zero");
}

#[test]
fn binds_symbols_from_results() {
    // range(0, n, 1) has a data-dependent size K, bound from the result and then checked
    // against the fill that uses it.
    let mut g = Graph::new("range");
    let limit = g.add_input(None, ty(ElemType::I64, &[]));
    let zero = g.push_op(
        Op::Fill {
            shape: vec![],
            elem: ElemType::I64,
            value: tessera_ir::Scalar::Int(0),
        },
        vec![],
        vec![ty(ElemType::I64, &[])],
    );
    let zero = g.op(zero).results[0];
    let one = push(
        &mut g,
        Op::Fill {
            shape: vec![],
            elem: ElemType::I64,
            value: tessera_ir::Scalar::Int(1),
        },
        vec![],
        ty(ElemType::I64, &[]),
    );
    let k = Dim::sym("K");
    let r = push(
        &mut g,
        Op::Range { size: k.clone() },
        vec![zero, limit, one],
        ty(ElemType::I64, std::slice::from_ref(&k)),
    );
    let f = push(
        &mut g,
        Op::Fill {
            shape: vec![k.clone()],
            elem: ElemType::I64,
            value: tessera_ir::Scalar::Int(2),
        },
        vec![],
        ty(ElemType::I64, std::slice::from_ref(&k)),
    );
    let s = push(
        &mut g,
        Op::Binary(BinaryOp::Mul),
        vec![r, f],
        ty(ElemType::I64, &[k]),
    );
    g.set_outputs(vec![s]);
    let out = run(&g, &[i64t(&[], &[4])]).expect("run");
    assert_close(&out[0], &i64t(&[4], &[0, 2, 4, 6]), "range * 2");
}

#[test]
fn constant_with_wrong_data_size_is_an_error() {
    let mut g = Graph::new("c");
    let t = TensorType::fixed(ElemType::F32, &[2]);
    let c = g.add_const(Constant {
        name: "w".into(),
        ty: t.clone(),
        data: Bytes::from(vec![0u8; 4]),
    });
    let cv = g.push_op(Op::Const(c), vec![], vec![t.clone()]);
    let cv = g.op(cv).results[0];
    let y = push(&mut g, Op::Unary(UnaryOp::Neg), vec![cv], t);
    g.set_outputs(vec![y]);
    let e = run_err(&g, &[]);
    assert!(
        e.contains("constant @w: tensor of type f32[2] needs 8 bytes, got 4"),
        "{e}"
    );
}

#[test]
fn long_chain_frees_intermediates() {
    // 200 chained adds over a 1M-element tensor: without freeing this would hold ~800 MB.
    let mut g = Graph::new("chain");
    let x = g.add_input(None, ty(ElemType::F32, &[d(1 << 20)]));
    let one = f32_const(&mut g, "one", &[], &[1.0]);
    let mut v = x;
    for _ in 0..200 {
        v = push(
            &mut g,
            Op::Binary(BinaryOp::Add),
            vec![v, one],
            ty(ElemType::F32, &[d(1 << 20)]),
        );
    }
    g.set_outputs(vec![v]);
    let x = tessera_ir::Tensor::zeros(ElemType::F32, &[1 << 20]).expect("small enough");
    let out = run(&g, &[x]).expect("run");
    let v = out[0].to_f64_vec();
    assert_eq!(v[0], 200.0);
    assert_eq!(v[(1 << 20) - 1], 200.0);
}
