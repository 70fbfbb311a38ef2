//! Shape inference: table tests of the shared rules and of ops whose arithmetic is subtle.
//! (Every op is also checked through the verifier on the files in `testdata/ir`.)

use tessera_ir::infer::{broadcast, infer, matmul_shape, slice_len};
use tessera_ir::{ConvAttrs, Dim, ElemType, Graph, Op, PoolAttrs, PoolKind, TensorType};

fn shape(s: &str) -> Vec<Dim> {
    if s.is_empty() {
        return vec![];
    }
    s.split(',')
        .map(|d| {
            let d = d.trim();
            d.parse::<u64>()
                .map(Dim::Static)
                .unwrap_or_else(|_| Dim::sym(d))
        })
        .collect()
}

fn show(r: Result<Vec<Dim>, tessera_ir::infer::InferError>) -> String {
    match r {
        Ok(s) => format!(
            "[{}]",
            s.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn broadcasting() {
    let cases = [
        ("2, 3", "3", "[2, 3]"),
        ("2, 1", "1, 4", "[2, 4]"),
        ("", "5, 6", "[5, 6]"),
        ("N, 1", "4", "[N, 4]"),
        ("N, 4", "N, 4", "[N, 4]"),
        ("N", "4", "[4]"),
        ("0, 3", "1, 3", "[0, 3]"),
        (
            "2, 3",
            "4",
            "error: shapes [2, 3] and [4] do not broadcast: extents 3 and 4 differ",
        ),
        (
            "N",
            "M",
            "error: shapes [N] and [M] do not broadcast: extents N and M differ",
        ),
    ];
    for (a, b, want) in cases {
        assert_eq!(
            show(broadcast(&shape(a), &shape(b))),
            want,
            "broadcast({a}; {b})"
        );
    }
}

#[test]
fn matmul_shapes() {
    let cases = [
        ("2, 3", "3, 4", "[2, 4]"),
        ("3", "3, 4", "[4]"),
        ("2, 3", "3", "[2]"),
        ("3", "3", "[]"),
        ("5, 2, 3", "3, 4", "[5, 2, 4]"),
        ("5, 1, 2, 3", "7, 3, 4", "[5, 7, 2, 4]"),
        ("N, S, 64", "64, 128", "[N, S, 128]"),
        ("2, 0", "0, 4", "[2, 4]"),
        ("2, 3", "4, 5", "error: contraction extents differ: 3 and 4"),
        ("", "3", "error: matmul operands must have rank >= 1"),
    ];
    for (a, b, want) in cases {
        assert_eq!(
            show(matmul_shape(&shape(a), &shape(b))),
            want,
            "matmul({a}; {b})"
        );
    }
}

#[test]
fn slice_lengths_follow_numpy() {
    // (extent, start, end, step, expected): cross-checked with Python's len(range(d)[s:e:t]).
    let cases = [
        (10, 0, 10, 1, 10),
        (10, 2, 8, 3, 2),
        (10, -3, i64::MAX, 1, 3),
        (10, 0, -1, 1, 9),
        (10, -1, i64::MIN, -1, 10),
        (10, 8, 2, -2, 3),
        (10, 20, 30, 1, 0),
        (10, 5, 5, 1, 0),
        (0, 0, 10, 1, 0),
        (10, -100, 100, 1, 10),
        (10, 100, -100, -3, 4),
    ];
    for (d, s, e, t, want) in cases {
        assert_eq!(slice_len(d, s, e, t), want, "slice({d}; {s}:{e}:{t})");
    }
}

fn infer_one(op: Op, operands: &[TensorType]) -> String {
    let g = Graph::new("t");
    let refs: Vec<&TensorType> = operands.iter().collect();
    match infer(&g, &op, &refs) {
        Ok(ts) => ts
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("error: {e}"),
    }
}

fn f32t(s: &str) -> TensorType {
    TensorType::new(ElemType::F32, shape(s))
}

fn conv(strides: &[u64], pads: &[u64], dilations: &[u64], groups: u64) -> ConvAttrs {
    ConvAttrs {
        strides: strides.to_vec(),
        pads: pads.to_vec(),
        dilations: dilations.to_vec(),
        groups,
    }
}

#[test]
fn windowed_ops() {
    let c = Op::Conv(conv(&[2, 2], &[3, 3, 3, 3], &[1, 1], 1));
    assert_eq!(
        infer_one(c.clone(), &[f32t("N, 3, 224, 224"), f32t("64, 3, 7, 7")]),
        "f32[N, 64, 112, 112]"
    );
    assert_eq!(
        infer_one(c.clone(), &[f32t("1, 3, H, 224"), f32t("64, 3, 7, 7")]),
        "error: spatial extent is the symbolic extent H: bind it to a number first"
    );
    let grouped = Op::Conv(conv(&[1], &[0, 0], &[2], 4));
    assert_eq!(
        infer_one(grouped.clone(), &[f32t("1, 8, 10"), f32t("4, 2, 3")]),
        "f32[1, 4, 6]"
    );
    assert_eq!(
        infer_one(grouped, &[f32t("1, 8, 10"), f32t("4, 3, 3")]),
        "error: weight expects 3 channels per group, input has 8 / 4 groups"
    );
    let ct = Op::ConvTranspose {
        conv: conv(&[2, 2], &[1, 1, 1, 1], &[1, 1], 1),
        output_padding: vec![1, 1],
    };
    assert_eq!(
        infer_one(ct, &[f32t("1, 4, 5, 5"), f32t("4, 2, 3, 3")]),
        "f32[1, 2, 10, 10]"
    );
    let pool = |ceil| {
        Op::Pool(PoolAttrs {
            kind: PoolKind::Max,
            kernel: vec![3],
            strides: vec![2],
            pads: vec![0, 0],
            dilations: vec![1],
            ceil_mode: ceil,
            count_include_pad: false,
        })
    };
    assert_eq!(infer_one(pool(false), &[f32t("1, 1, 6")]), "f32[1, 1, 2]");
    assert_eq!(infer_one(pool(true), &[f32t("1, 1, 6")]), "f32[1, 1, 3]");
    // With ceil mode a window may not start inside the trailing padding: with pads [0, 2]
    // ceil((6 + 2 - 2) / 2) + 1 = 4 windows would start at 0, 2, 4 and 6; the one at
    // 6 = d + pad_begin lies wholly in the padding and is dropped.
    let padded = Op::Pool(PoolAttrs {
        kind: PoolKind::Avg,
        kernel: vec![2],
        strides: vec![2],
        pads: vec![0, 2],
        dilations: vec![1],
        ceil_mode: true,
        count_include_pad: true,
    });
    assert_eq!(infer_one(padded, &[f32t("1, 1, 6")]), "f32[1, 1, 3]");
}

#[test]
fn overflow_and_negative_extents_are_errors() {
    let big = u64::MAX / 2;
    assert_eq!(
        infer_one(
            Op::Tile { repeats: vec![3] },
            &[TensorType::fixed(ElemType::F32, &[big])]
        ),
        "error: extent overflows u64"
    );
    assert_eq!(
        infer_one(
            Op::Pad {
                pads: vec![-3, -3],
                mode: tessera_ir::PadMode::Constant,
                value: tessera_ir::Scalar::Int(0)
            },
            &[f32t("4")]
        ),
        "error: pads (-3, -3) make axis 0 of extent 4 negative"
    );
    assert_eq!(
        infer_one(
            Op::Fill {
                shape: vec![Dim::Static(big), Dim::Static(3)],
                elem: ElemType::F32,
                value: tessera_ir::Scalar::Int(0)
            },
            &[]
        ),
        "error: extent overflows u64"
    );
    assert_eq!(
        infer_one(
            Op::Reshape {
                shape: shape("N, 4")
            },
            &[f32t("N, 2, 2")]
        ),
        "f32[N, 4]"
    );
    assert_eq!(
        infer_one(
            Op::Reshape {
                shape: shape("M, 4")
            },
            &[f32t("N, 2, 2")]
        ),
        "error: cannot reshape f32[N, 2, 2] to [M, 4]: element counts differ"
    );
}

#[test]
fn multi_result_ops() {
    assert_eq!(
        infer_one(
            Op::TopK {
                k: 2,
                axis: 1,
                largest: true
            },
            &[f32t("N, 5")]
        ),
        "f32[N, 2], i64[N, 2]"
    );
    assert_eq!(
        infer_one(
            Op::Split {
                axis: 0,
                sizes: vec![1, 3]
            },
            &[f32t("4, N")]
        ),
        "f32[1, N], f32[3, N]"
    );
    assert_eq!(
        infer_one(
            Op::Split {
                axis: 0,
                sizes: vec![1, 2]
            },
            &[f32t("4, N")]
        ),
        "error: sizes [1, 2] sum to 3, axis 0 has extent 4"
    );
}

#[test]
fn einsum_shapes() {
    let e = |eq: &str| Op::Einsum {
        equation: eq.to_string(),
    };
    assert_eq!(
        infer_one(e("bij,bjk->bik"), &[f32t("2, 3, 4"), f32t("2, 4, 5")]),
        "f32[2, 3, 5]"
    );
    assert_eq!(infer_one(e("ii->i"), &[f32t("3, 3")]), "f32[3]");
    assert_eq!(
        infer_one(e("ij,jk"), &[f32t("2, 3"), f32t("3, 4")]),
        "error: einsum equation `ij,jk` needs an explicit `->` output"
    );
    assert_eq!(
        infer_one(e("ij,jk->ik"), &[f32t("2, 3"), f32t("4, 4")]),
        "error: extents of `j` differ: 3 and 4"
    );
}
