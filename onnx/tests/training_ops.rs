//! `ai.onnx.preview.training`'s `Gradient` (onnx 1.23.2 generates no node test for it; its
//! optimizers are covered by the node tests): the gradients of `y = sum(a * b + a)` with
//! respect to `a` and `b` are `b + 1` and `a`, computed by tessera's autodiff at import.
//! And `Dropout` imported to train (`keep_parameters`): a `dropout` op for the train pass.

mod common;

use common::proto::{
    FLOAT, TensorP, attr_f, attr_i, attr_s, attr_strings, float_init, graph, model, node, value,
    write,
};
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

/// A model `y, mask = Dropout(x, ratio = 0.3, training_mode = true)` (opset 13), or with the
/// ratio as an attribute (opset 10).
fn dropout_model(dir: &std::path::Path, opset: i64) -> std::path::PathBuf {
    let (inputs, attrs): (&[&str], _) = if opset >= 12 {
        (&["x", "ratio", "mode"], vec![])
    } else {
        (&["x"], vec![attr_f("ratio", 0.3)])
    };
    let mut drop = node("Dropout", "drop", inputs, &["y", "mask"]);
    drop.attribute = attrs;
    let mut g = graph(
        "dropout",
        vec![drop],
        vec![value("x", FLOAT, &["2", "3"])],
        vec![
            value("y", FLOAT, &["2", "3"]),
            value("mask", 9, &["2", "3"]),
        ],
    );
    if opset >= 12 {
        g.initializer = vec![
            float_init("ratio", &[], &[0.3]),
            TensorP {
                data_type: Some(9),
                raw_data: Some(vec![1]),
                name: Some("mode".into()),
                ..Default::default()
            },
        ];
    }
    let path = dir.join(format!("dropout{opset}.onnx"));
    write(&path, &model(opset, g));
    path
}

#[test]
fn dropout_imported_to_train_is_a_dropout_op() {
    let dir = tempfile::tempdir().expect("tempdir");
    let train = ImportOptions {
        keep_parameters: true,
        ..ImportOptions::default()
    };
    for opset in [10, 13] {
        let path = dropout_model(dir.path(), opset);
        let g = import_file(&path, &train).expect("imports");
        let printed = tessera_ir::text::print(&g);
        // The ratio as ONNX stores it, an f32.
        assert!(
            printed.contains(
                "%y, %mask = dropout %x {ratio = 0.30000001192092896} : f32[2, 3], bool[2, 3]"
            ),
            "opset {opset}: {printed}"
        );
        // Its inference semantics: the identity.
        let x = Tensor::from_le_bytes(
            ElemType::F32,
            &[2, 3],
            &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>(),
        )
        .expect("x");
        let out = tessera_ir::interp::run(&g, std::slice::from_ref(&x)).expect("runs");
        assert_eq!(out[0], x);
    }
    // Imported for inference, training-mode Dropout stays an error (its output is random).
    let path = dropout_model(dir.path(), 13);
    let e = import_file(&path, &ImportOptions::default()).expect_err("training mode");
    assert!(
        e.to_string()
            .contains("training-mode Dropout is not supported"),
        "{e}"
    );
}

/// `BatchNormalization` in training mode with its running-statistics outputs: imported to
/// train when nothing reads them, refused when the model reads one, and refused for
/// inference.
#[test]
fn training_mode_batch_norm_imported_to_train() {
    let dir = tempfile::tempdir().expect("tempdir");
    let build = |read_mean: bool| {
        let mut bn = node(
            "BatchNormalization",
            "bn",
            &["x", "scale", "bias", "mean", "var"],
            &["y", "new_mean", "new_var"],
        );
        bn.attribute = vec![attr_i("training_mode", 1)];
        let mut nodes = vec![bn];
        let mut outputs = vec![value("y", FLOAT, &["2", "3"])];
        if read_mean {
            nodes.push(node("Identity", "id", &["new_mean"], &["m"]));
            outputs.push(value("m", FLOAT, &["3"]));
        }
        let mut g = graph("bn", nodes, vec![value("x", FLOAT, &["2", "3"])], outputs);
        g.initializer = vec![
            float_init("scale", &[3], &[1.0, 2.0, 3.0]),
            float_init("bias", &[3], &[0.0, 0.5, 1.0]),
            float_init("mean", &[3], &[0.1, 0.2, 0.3]),
            float_init("var", &[3], &[1.0, 1.5, 2.0]),
        ];
        let path = dir.path().join(format!("bn{read_mean}.onnx"));
        write(&path, &model(15, g));
        path
    };
    let train = ImportOptions {
        keep_parameters: true,
        ..ImportOptions::default()
    };
    let g = import_file(&build(false), &train).expect("imports to train");
    let printed = tessera_ir::text::print(&g);
    assert!(
        printed.contains("= batch-norm %x, %scale, %bias, %mean, %var"),
        "{printed}"
    );
    let e = import_file(&build(true), &train).expect_err("a read statistic");
    assert!(e.to_string().contains("output `new_mean`"), "{e}");
    let e = import_file(&build(false), &ImportOptions::default()).expect_err("inference");
    assert!(
        e.to_string().contains("training_mode = 1 is not supported"),
        "{e}"
    );
}
