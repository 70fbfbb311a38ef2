//! Regression tests for defects found by a code review: each case panicked, aborted, gave a
//! wrong answer or a misleading message before its fix.

use ndarray::{ArrayD, IxDyn};
use tessera_ir::infer::{infer, window_extent};
use tessera_ir::interp::{self, RunOptions, eval_op, run, run_with};
use tessera_ir::{
    BinaryOp, ConstId, Dim, ElemType, Graph, Op, Tensor, TensorError, TensorType, ValueId, text,
    verify,
};

fn parse(src: &str) -> Graph {
    text::parse(src, None).expect("parses")
}

/// The verifier's messages, joined.
fn verify_err(src: &str) -> String {
    let g = parse(src);
    let errs = verify::verify(&g).expect_err("should not verify");
    errs.iter()
        .map(|e| e.message.clone())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn f32t(shape: &[usize], v: Vec<f32>) -> Tensor {
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape matches"))
}

fn f64s(x: f64) -> Tensor {
    Tensor::F64(ndarray::arr0(x).into_dyn())
}

fn eval_err(op: &Op, xs: &[&Tensor]) -> String {
    eval_op(op, xs).expect_err("should fail").to_string()
}

// 1.1: ceil-mode pooling computed `(out - 1) * stride` unchecked.
#[test]
fn pool_ceil_mode_with_a_huge_stride() {
    assert_eq!(
        window_extent(3, 1, 1 << 63, 0, (1 << 63) - 1, 1, true),
        Ok(2)
    );
    let src = "graph @g(%x: f32[1, 1, 3]) {\n  %y = max-pool %x {ceil-mode = true, count-include-pad = false, dilations = [1], kernel = [1], pads = [0, 9223372036854775807], strides = [9223372036854775808]} : f32[1, 1, 2]\n  return %y\n}\n";
    let g = parse(src);
    verify::verify(&g).expect("verifies");
    let out = run(&g, &[f32t(&[1, 1, 3], vec![1.0, 2.0, 3.0])]).expect("runs");
    // The second window starts in the trailing padding... of 2^63 - 1: it holds no element.
    assert_eq!(out[0].to_f64_vec(), vec![1.0, f64::NEG_INFINITY]);
}

#[test]
fn window_extent_is_the_interpreters_formula() {
    // Kernel 0 and a window larger than the padded extent give the same message both ways.
    assert!(
        window_extent(3, 0, 1, 0, 0, 1, false)
            .expect_err("k = 0")
            .message
            .contains("kernel extent is 0")
    );
    let pool = Op::Pool(tessera_ir::PoolAttrs {
        kind: tessera_ir::PoolKind::Max,
        kernel: vec![5],
        strides: vec![1],
        pads: vec![0, 0],
        dilations: vec![1],
        ceil_mode: false,
        count_include_pad: false,
    });
    let x = f32t(&[1, 1, 3], vec![0.0; 3]);
    let inferred = window_extent(3, 5, 1, 0, 0, 1, false).expect_err("too big");
    assert!(eval_err(&pool, &[&x]).contains(&inferred.message));
}

// 1.2: gather-nd added a huge index tuple length to the batch count unchecked.
#[test]
fn gather_nd_with_a_huge_index_tuple_length() {
    let g = Graph::new("g");
    let x = TensorType::fixed(ElemType::F32, &[2, 3]);
    let i = TensorType::fixed(ElemType::I64, &[2, u64::MAX]);
    let e = infer(&g, &Op::GatherNd { batch_dims: 1 }, &[&x, &i]).expect_err("too long");
    assert!(e.message.contains("exceed data rank 2"), "{e}");
    // q = 2 after 1 batch axis of a rank-2 tensor is one too many.
    let i = TensorType::fixed(ElemType::I64, &[2, 2]);
    let e = infer(&g, &Op::GatherNd { batch_dims: 1 }, &[&x, &i]).expect_err("too long");
    assert!(e.message.contains("exceed data rank 2"), "{e}");
    let e = infer(
        &g,
        &Op::ScatterNd {
            reduction: tessera_ir::ScatterReduction::None,
        },
        &[&x, &TensorType::fixed(ElemType::I64, &[1, u64::MAX]), &x],
    )
    .expect_err("too long");
    assert!(e.message.contains("exceed data rank 2"), "{e}");
}

// 1.3: pad computed `o - b` in i64, which overflows for b = i64::MIN.
#[test]
fn pad_with_extreme_pads() {
    let src = "graph @g(%x: f32[2]) {\n  %y = pad %x {mode = constant, pads = [-9223372036854775808, 9223372036854775807], value = 0} : f32[1]\n  return %y\n}\n";
    let g = parse(src);
    verify::verify(&g).expect("verifies");
    let out = run(&g, &[f32t(&[2], vec![5.0, 6.0])]).expect("runs");
    assert_eq!(out[0].to_f64_vec(), vec![0.0]);
    let op = Op::Pad {
        pads: vec![i64::MIN, i64::MAX],
        mode: tessera_ir::PadMode::Reflect,
        value: tessera_ir::Scalar::Int(0),
    };
    let out = eval_op(&op, &[&f32t(&[2], vec![5.0, 6.0])]).expect("evaluates");
    assert_eq!(out[0].shape(), &[1]);
}

// 1.4: zero-sized shapes whose other extents multiply past isize::MAX.
#[test]
fn empty_but_too_large_shapes_are_rejected() {
    let e = verify_err(
        "graph @g() {\n  %y = fill {elem = f32, shape = [0, 4294967296, 4294967296], value = 0} : f32[0, 4294967296, 4294967296]\n  return %y\n}\n",
    );
    assert!(
        e.contains(
            "%y has type f32[0, 4294967296, 4294967296], which is too large for this machine"
        ),
        "{e}"
    );
    let e = verify_err(
        "graph @g(%x: f32[0, 4294967296, 4294967296]) {\n  %y = relu %x : f32[0, 4294967296, 4294967296]\n  return %y\n}\n",
    );
    assert!(e.contains("%x has type") && e.contains("too large"), "{e}");
    // The static part of a symbolic type counts too.
    let e = verify_err(
        "graph @g(%x: f32[N]) {\n  %y = fill {elem = f32, shape = [N, 4294967296, 4294967296], value = 0} : f32[N, 4294967296, 4294967296]\n  return %y\n}\n",
    );
    assert!(e.contains("too large"), "{e}");
    let e = text::parse(
        "const @c : f32[0, 4294967296, 4294967296] = []\n\ngraph @g() {\n  %y = const @c : f32[0, 4294967296, 4294967296]\n  return %y\n}\n",
        None,
    )
    .expect_err("too large");
    assert!(e.message.contains("too large for this machine"), "{e}");

    let huge = [0usize, 1 << 32, 1 << 32];
    assert!(Tensor::zeros(ElemType::F32, &huge).is_err());
    assert!(matches!(
        Tensor::from_le_bytes(ElemType::F32, &huge, &[]),
        Err(TensorError::TooLarge(_))
    ));
    // Byte size past isize::MAX, element count below it.
    assert!(Tensor::zeros(ElemType::F64, &[1 << 62]).is_err());
    assert_eq!(
        Tensor::zeros(ElemType::F32, &[0, 3]).expect("fine").shape(),
        &[0, 3]
    );

    let dims: Vec<Dim> = huge.iter().map(|&d| Dim::Static(d as u64)).collect();
    let fill = Op::Fill {
        shape: dims.clone(),
        elem: ElemType::F32,
        value: tessera_ir::Scalar::Int(0),
    };
    assert!(eval_err(&fill, &[]).contains("too large"));
    let one = f32t(&[1], vec![1.0]);
    let expand = Op::Expand {
        shape: dims.clone(),
    };
    assert!(eval_err(&expand, &[&one]).contains("too large"));
    let empty = f32t(&[0], vec![]);
    let reshape = Op::Reshape { shape: dims };
    assert!(eval_err(&reshape, &[&empty]).contains("too large"));
}

// 1.5: allocations that abort on graphs that verify.
#[test]
fn huge_allocations_are_refused_with_an_error() {
    let src = "graph @g() {\n  %y = fill {elem = f32, shape = [100000, 100000, 100000], value = 1} : f32[100000, 100000, 100000]\n  return %y\n}\n";
    let g = parse(src);
    verify::verify(&g).expect("verifies");
    let e = run(&g, &[]).expect_err("too much memory").to_string();
    assert!(e.contains("(fill)") && e.contains("memory limit"), "{e}");
    // Also through eval_op (constant folding).
    let e = eval_err(&g.op(g.ops()[0]).op, &[]);
    assert!(e.contains("fill") && e.contains("memory limit"), "{e}");
}

#[test]
fn empty_results_build_no_tables() {
    // Tiling an empty tensor with a huge repeat used to build a 2^32-entry index map.
    let src = "graph @g(%x: f32[0, 1]) {\n  %y = tile %x {repeats = [1, 4294967296]} : f32[0, 4294967296]\n  return %y\n}\n";
    let g = parse(src);
    verify::verify(&g).expect("verifies");
    let out = run(&g, &[f32t(&[0, 1], vec![])]).expect("runs");
    assert_eq!(out[0].shape(), &[0, 1 << 32]);
    // Resizing to an empty shape used to build tap tables for the other extents.
    let src = "graph @g(%x: f32[0, 1, 1]) {\n  %y = resize %x {coord = asymmetric, cubic-coeff = -0.75, mode = linear, nearest = floor, sizes = [0, 1073741824, 536870912]} : f32[0, 1073741824, 536870912]\n  return %y\n}\n";
    let g = parse(src);
    verify::verify(&g).expect("verifies");
    let out = run(&g, &[f32t(&[0, 1, 1], vec![])]).expect("runs");
    assert_eq!(out[0].shape(), &[0, 1 << 30, 1 << 29]);
    // Padding an empty axis' neighbour by a lot.
    let op = Op::Pad {
        pads: vec![0, 0, 0, 1 << 40],
        mode: tessera_ir::PadMode::Constant,
        value: tessera_ir::Scalar::Int(0),
    };
    let out = eval_op(&op, &[&f32t(&[0, 1], vec![])]).expect("evaluates");
    assert_eq!(out[0].shape(), &[0, (1 << 40) + 1]);
}

#[test]
fn the_memory_limit_is_configurable() {
    let g = parse("graph @g(%x: f32[1000]) {\n  %y = relu %x : f32[1000]\n  return %y\n}\n");
    let x = f32t(&[1000], vec![1.0; 1000]);
    let small = RunOptions { memory_limit: 3999 };
    let e = run_with(&g, std::slice::from_ref(&x), &small)
        .expect_err("over the limit")
        .to_string();
    assert!(
        e.contains("(relu)") && e.contains("4000 bytes") && e.contains("3999"),
        "{e}"
    );
    let exact = RunOptions { memory_limit: 4000 };
    assert!(run_with(&g, std::slice::from_ref(&x), &exact).is_ok());
    // The limit is restored after the run.
    assert_eq!(
        interp::DEFAULT_MEMORY_LIMIT,
        RunOptions::default().memory_limit
    );
    assert!(run(&g, &[x]).is_ok());
}

// 1.6: unbounded recursion on nested attribute lists.
#[test]
fn deeply_nested_attributes_are_a_parse_error() {
    let mut s = String::from("graph @g(%x: f32[1]) {\n  %y = relu %x {a = ");
    s.push_str(&"[".repeat(200_000));
    let e = text::parse(&s, None).expect_err("too deep");
    assert!(e.message.contains("nested more than 64"), "{e}");
    // 64 levels are fine as far as nesting goes (the attribute itself is then unknown).
    let ok = format!(
        "graph @g(%x: f32[1]) {{\n  %y = relu %x {{a = {}{}}} : f32[1]\n  return %y\n}}\n",
        "[".repeat(64),
        "]".repeat(64)
    );
    let e = text::parse(&ok, None).expect_err("unknown attribute");
    assert!(!e.message.contains("nested"), "{e}");
}

// 1.8: space-to-depth computed `b * b` unchecked.
#[test]
fn space_to_depth_with_a_huge_block() {
    let x = Tensor::zeros(ElemType::F32, &[1, 1, 0, 0]).expect("small");
    let e = eval_err(&Op::SpaceToDepth { block: 1 << 32 }, &[&x]);
    assert!(e.contains("too large"), "{e}");
}

// 2.1: conv-transpose with a kernel extent of 0 verified.
#[test]
fn conv_transpose_with_an_empty_kernel() {
    let e = verify_err(
        "graph @g(%x: f32[1, 1, 3], %w: f32[1, 1, 0]) {\n  %y = conv-transpose %x, %w {dilations = [1], groups = 1, output-padding = [0], pads = [0, 0], strides = [1]} : f32[1, 1, 3]\n  return %y\n}\n",
    );
    assert!(e.contains("kernel extent of spatial axis 0 is 0"), "{e}");
    let op = Op::ConvTranspose {
        conv: tessera_ir::ConvAttrs {
            strides: vec![1],
            pads: vec![0, 0],
            dilations: vec![1],
            groups: 1,
        },
        output_padding: vec![0],
    };
    let x = f32t(&[1, 1, 3], vec![1.0; 3]);
    let w = f32t(&[1, 1, 0], vec![]);
    assert!(eval_err(&op, &[&x, &w]).contains("kernel extent of spatial axis 0 is 0"));
}

// 2.2: a reshape of an empty tensor could introduce a symbol nothing binds.
#[test]
fn reshape_cannot_introduce_symbols() {
    let e = verify_err(
        "graph @g(%x: f32[N, 0]) {\n  %y = reshape %x {shape = [M, 0]} : f32[M, 0]\n  return %y\n}\n",
    );
    assert!(e.contains("symbol M does not appear"), "{e}");
    // Symbols of the operand are fine.
    let g = parse(
        "graph @g(%x: f32[N, 0]) {\n  %y = reshape %x {shape = [0, N]} : f32[0, N]\n  return %y\n}\n",
    );
    verify::verify(&g).expect("verifies");
    let out = run(&g, &[f32t(&[3, 0], vec![])]).expect("runs");
    assert_eq!(out[0].shape(), &[0, 3]);
}

// 3: float mod followed `x - floor(x/y)*y`, not Python's `%`.
#[test]
fn float_mod_is_pythons() {
    let m = |x: f64, y: f64| {
        eval_op(&Op::Binary(BinaryOp::Mod), &[&f64s(x), &f64s(y)]).expect("mod")[0].to_f64_vec()[0]
    };
    assert_eq!(m(1e20, 3.0), 1.0);
    assert_eq!(m(5.0, f64::INFINITY), 5.0);
    assert_eq!(m(-5.0, f64::INFINITY), f64::INFINITY);
    assert_eq!(m(-1.0, 3.0), 2.0);
    assert_eq!(m(1.0, -3.0), -2.0);
    assert_eq!(m(7.5, 2.0), 1.5);
    assert!(m(1.0, 0.0).is_nan());
    // A zero result has the divisor's sign.
    assert!(m(-6.0, 3.0).is_sign_positive());
    assert!(m(6.0, -3.0).is_sign_negative());
}

// 4b, 4c: parser messages.
#[test]
fn parser_messages() {
    let e = text::parse(
        "const @c : f32[99999999999, 99999999999] = external\n\ngraph @g() {\n  %y = const @c : f32[99999999999, 99999999999]\n  return %y\n}\n",
        None,
    )
    .expect_err("too large");
    assert!(
        e.message.contains("too large") && !e.message.contains("static shape"),
        "{e}"
    );
    let e = text::parse("const @a : ", None).expect_err("truncated");
    assert!(e.message.contains("found end of file"), "{e}");
    let e = text::parse("graph", None).expect_err("truncated");
    assert!(e.message.contains("found end of file"), "{e}");
    let e = text::parse("graph @g(%x: f32[2]) {\n  %y = relu %x", None).expect_err("truncated");
    assert!(e.message.contains("found end of file"), "{e}");
}

// 4d: one broadcasting rule and one einsum parser for inference and the interpreter.
#[test]
fn interpreter_and_inference_share_rules() {
    let g = Graph::new("g");
    let a = f32t(&[2, 3], vec![0.0; 6]);
    let b = f32t(&[4], vec![0.0; 4]);
    let inferred = infer(&g, &Op::Binary(BinaryOp::Add), &[&a.ty(), &b.ty()]).expect_err("bad");
    assert!(eval_err(&Op::Binary(BinaryOp::Add), &[&a, &b]).contains(&inferred.message));
    for eq in ["ij", "i.j->i", "ij->ii", "i1->i"] {
        let op = Op::Einsum {
            equation: eq.into(),
        };
        let inferred = infer(&g, &op, &[&a.ty()]).expect_err("bad equation");
        assert!(eval_err(&op, &[&a]).contains(&inferred.message), "{eq}");
    }
}

// 4e: `run` indexed the graph's tables unchecked.
#[test]
fn run_reports_dangling_handles() {
    let t = TensorType::fixed(ElemType::F32, &[1]);
    let mut g = Graph::new("g");
    g.set_outputs(vec![ValueId::from_index(7)]);
    assert!(
        run(&g, &[])
            .expect_err("dangling")
            .to_string()
            .contains("not a value")
    );

    let mut g = Graph::new("g");
    let op = g.push_op(Op::Const(ConstId::from_index(3)), vec![], vec![t.clone()]);
    let v = g.op(op).results[0];
    g.set_outputs(vec![v]);
    let e = run(&g, &[]).expect_err("no such constant").to_string();
    assert!(e.contains("does not exist"), "{e}");

    let mut g = Graph::new("g");
    let op = g.push_op(
        Op::Unary(tessera_ir::UnaryOp::Relu),
        vec![ValueId::from_index(40)],
        vec![t],
    );
    let v = g.op(op).results[0];
    g.set_outputs(vec![v]);
    let e = run(&g, &[]).expect_err("unknown operand").to_string();
    assert!(e.contains("unknown value"), "{e}");
}

// 4a: `text::save` gave new files a hard-coded 0644 instead of honouring the umask.
#[cfg(unix)]
#[test]
fn saved_files_get_the_permissions_of_a_plain_create() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let reference = dir.path().join("reference");
    std::fs::File::create(&reference).expect("create");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    let g = parse("graph @g(%x: f32[2]) {\n  %y = relu %x : f32[2]\n  return %y\n}\n");
    let path = dir.path().join("g.tir");
    text::save(&g, &path).expect("save");
    assert_eq!(mode(&path), mode(&reference));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    text::save(&g, &path).expect("save again");
    assert_eq!(mode(&path), 0o600);

    // Once more in a child process of this test binary under umask 077, where a hard-coded
    // mode shows (the umask cannot be set here without `unsafe` libc calls).
    if std::env::var_os("TESSERA_UMASK_CHILD").is_none() {
        let exe = std::env::current_exe().expect("test binary");
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("umask 077 && exec \"$0\" --exact saved_files_get_the_permissions_of_a_plain_create --test-threads 1")
            .arg(exe)
            .env("TESSERA_UMASK_CHILD", "1")
            .status()
            .expect("run sh");
        assert!(status.success(), "the check failed under umask 077");
    } else {
        assert_eq!(mode(&reference), 0o600);
    }
}
