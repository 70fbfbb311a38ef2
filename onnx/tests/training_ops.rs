//! `ai.onnx.preview.training`'s `Gradient` (onnx 1.23.2 generates no node test for it; its
//! optimizers are covered by the node tests): the gradients of `y = sum(a * b + a)` with
//! respect to `a` and `b` are `b + 1` and `a`, computed by tessera's autodiff at import.

mod common;

use common::proto::{FLOAT, attr_i, attr_s, attr_strings, graph, model, node, value, write};
use tessera_ir::{ElemType, Tensor};
use tessera_onnx::{ImportOptions, import_file};

fn t(v: &[f32]) -> Tensor {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    Tensor::from_le_bytes(ElemType::F32, &[v.len()], &bytes).expect("tensor")
}

#[test]
fn gradient_of_a_scalar_with_respect_to_two_inputs() {
    let mut grad = node("Gradient", "grad", &["a", "b"], &["da", "db"]);
    grad.domain = Some("ai.onnx.preview.training".into());
    grad.attribute = vec![attr_strings("xs", &["a", "b"]), attr_s("y", "y")];
    let mut sum = node("ReduceSum", "sum", &["s"], &["y"]);
    sum.attribute = vec![attr_i("keepdims", 0)];
    let m = model(
        17,
        graph(
            "grad",
            vec![
                node("Mul", "mul", &["a", "b"], &["c"]),
                node("Add", "add", &["c", "a"], &["s"]),
                sum,
                grad,
            ],
            vec![value("a", FLOAT, &["3"]), value("b", FLOAT, &["3"])],
            vec![
                value("y", FLOAT, &[]),
                value("da", FLOAT, &["3"]),
                value("db", FLOAT, &["3"]),
            ],
        ),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("grad.onnx");
    write(&path, &m);
    let g = import_file(&path, &ImportOptions::default()).expect("imports");
    let a = [1.0f32, -2.0, 0.5];
    let b = [3.0f32, 0.25, -1.0];
    let out = tessera_ir::interp::run(&g, &[t(&a), t(&b)]).expect("runs");
    assert_eq!(
        out[0].to_f64_vec(),
        vec![3.0 - 2.0 * 0.25 - 0.5 + 1.0 - 2.0 + 0.5]
    );
    assert_eq!(out[1].to_f64_vec(), vec![4.0, 1.25, 0.0]);
    assert_eq!(out[2].to_f64_vec(), vec![1.0, -2.0, 0.5]);
}
