//! The im2col convolution, the col2im transposed convolution and the matmul paths against
//! numerically independent naive computations on pseudo-random data.

mod interp_common;

use interp_common::*;
use tessera_ir::interp::eval_op;
use tessera_ir::{ConvAttrs, Op, Tensor};

/// Direct 2-D convolution by nested loops, in f64.
#[allow(clippy::too_many_arguments)]
fn naive_conv2d(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    wt: &[f64],
    [m, cg, kh, kw]: [usize; 4],
    stride: [usize; 2],
    pads: [usize; 4],
    dil: [usize; 2],
    groups: usize,
) -> (Vec<f64>, [usize; 4]) {
    let oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) / stride[0] + 1;
    let ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) / stride[1] + 1;
    let mg = m / groups;
    let mut out = vec![0.0; n * m * oh * ow];
    for ni in 0..n {
        for mi in 0..m {
            let g = mi / mg;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = 0.0;
                    for ci in 0..cg {
                        let cin = g * cg + ci;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * stride[0] + ky * dil[0]) as isize - pads[0] as isize;
                                let ix = (ox * stride[1] + kx * dil[1]) as isize - pads[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = x[((ni * c + cin) * h + iy as usize) * w + ix as usize];
                                let wv = wt[((mi * cg + ci) * kh + ky) * kw + kx];
                                s += xv * wv;
                            }
                        }
                    }
                    out[((ni * m + mi) * oh + oy) * ow + ox] = s;
                }
            }
        }
    }
    (out, [n, m, oh, ow])
}

#[test]
#[allow(clippy::type_complexity)]
fn conv2d_matches_naive_loops() {
    let mut rng = Lcg(42);
    // (N, C, H, W, M, groups, K, stride, pads, dilation)
    let cases: &[(
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 4],
        [usize; 2],
    )] = &[
        (1, 3, 7, 6, 4, 1, [3, 3], [1, 1], [1, 1, 1, 1], [1, 1]),
        (2, 4, 9, 8, 6, 2, [3, 2], [2, 1], [0, 2, 1, 0], [1, 2]),
        (1, 6, 5, 5, 6, 6, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
        (2, 2, 4, 4, 3, 1, [1, 1], [1, 1], [0, 0, 0, 0], [1, 1]),
        (1, 2, 8, 7, 2, 1, [2, 3], [3, 2], [2, 0, 0, 2], [2, 1]),
    ];
    for &(n, c, h, w, m, groups, k, stride, pads, dil) in cases {
        let cg = c / groups;
        let x = rng.vec(n * c * h * w);
        let wt = rng.vec(m * cg * k[0] * k[1]);
        let bias = rng.vec(m);
        let (mut expected, oshape) = naive_conv2d(
            &x,
            [n, c, h, w],
            &wt,
            [m, cg, k[0], k[1]],
            stride,
            pads,
            dil,
            groups,
        );
        let plane = oshape[2] * oshape[3];
        for (i, v) in expected.iter_mut().enumerate() {
            *v += bias[(i / plane) % m];
        }
        let op = Op::Conv(ConvAttrs {
            strides: stride.iter().map(|&s| s as u64).collect(),
            pads: pads.iter().map(|&p| p as u64).collect(),
            dilations: dil.iter().map(|&d| d as u64).collect(),
            groups: groups as u64,
        });
        let xt = f64t(&[n, c, h, w], &x);
        let wt_t = f64t(&[m, cg, k[0], k[1]], &wt);
        let bt = f64t(&[m], &bias);
        let out = eval_op(&op, &[&xt, &wt_t, &bt]).expect("conv");
        assert_close(
            &out[0],
            &f64t(&oshape, &expected),
            &format!("conv case {op:?}"),
        );
    }
}

fn dot(a: &Tensor, b: &Tensor) -> f64 {
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| x * y)
        .sum()
}

#[test]
#[allow(clippy::type_complexity)]
fn conv_transpose_is_the_adjoint_of_conv() {
    // <conv(x, w), y> == <x, conv_transpose(y, w)> for matching geometry.
    let mut rng = Lcg(7);
    // (C, D, M, groups, K, stride, pads, dilation) in 1-D; D chosen so the sweep is exact.
    let cases: &[(usize, usize, usize, usize, usize, u64, [u64; 2], u64)] = &[
        (2, 9, 3, 1, 3, 2, [1, 1], 1),
        (4, 10, 4, 2, 2, 2, [0, 0], 1),
        (3, 11, 2, 1, 3, 1, [2, 0], 2),
    ];
    for &(c, dd, m, groups, k, stride, pads, dil) in cases {
        let attrs = ConvAttrs {
            strides: vec![stride],
            pads: pads.to_vec(),
            dilations: vec![dil],
            groups: groups as u64,
        };
        let x = f64t(&[1, c, dd], &rng.vec(c * dd));
        let w = f64t(&[m, c / groups, k], &rng.vec(m * (c / groups) * k));
        let cx = eval_op(&Op::Conv(attrs.clone()), &[&x, &w])
            .expect("conv")
            .remove(0);
        let oshape = cx.shape().to_vec();
        let y = f64t(&oshape, &rng.vec(oshape.iter().product()));
        let ty = eval_op(
            &Op::ConvTranspose {
                conv: attrs,
                output_padding: vec![],
            },
            &[&y, &w],
        )
        .expect("conv-transpose")
        .remove(0);
        assert_eq!(ty.shape(), x.shape(), "geometry");
        let (l, r) = (dot(&cx, &y), dot(&x, &ty));
        assert!((l - r).abs() < 1e-9 * (1.0 + l.abs()), "{l} vs {r}");
    }
}

#[test]
fn matmul_matches_naive_loops() {
    let mut rng = Lcg(3);
    // Batched with broadcasting: [3, 1, 4, 5] @ [2, 5, 6] -> [3, 2, 4, 6].
    let a = rng.vec(3 * 4 * 5);
    let b = rng.vec(2 * 5 * 6);
    let mut expected = vec![0.0; 3 * 2 * 4 * 6];
    for i in 0..3 {
        for j in 0..2 {
            for r in 0..4 {
                for c in 0..6 {
                    expected[((i * 2 + j) * 4 + r) * 6 + c] = (0..5)
                        .map(|p| a[(i * 4 + r) * 5 + p] * b[(j * 5 + p) * 6 + c])
                        .sum();
                }
            }
        }
    }
    let out = eval_op(
        &Op::MatMul,
        &[&f64t(&[3, 1, 4, 5], &a), &f64t(&[2, 5, 6], &b)],
    )
    .expect("matmul");
    assert_close(&out[0], &f64t(&[3, 2, 4, 6], &expected), "batched matmul");
    // The same through einsum.
    let out = eval_op(
        &Op::Einsum {
            equation: "xyrp,ypc->xyrc".into(),
        },
        &[
            &f64t(&[3, 2, 4, 5], &broadcast_rows(&a)),
            &f64t(&[2, 5, 6], &b),
        ],
    )
    .expect("einsum");
    assert_close(&out[0], &f64t(&[3, 2, 4, 6], &expected), "einsum");
}

/// `[3, 1, 4, 5]` data repeated to `[3, 2, 4, 5]`.
fn broadcast_rows(a: &[f64]) -> Vec<f64> {
    let mut v = Vec::new();
    for i in 0..3 {
        for _ in 0..2 {
            v.extend_from_slice(&a[i * 20..(i + 1) * 20]);
        }
    }
    v
}
