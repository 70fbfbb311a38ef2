//! The sharding rules of `tessera_place::alternatives` against the reference interpreter, on
//! random shapes: for every op kind with rules, every rule and every number of ways that
//! divides, each device computes the op on its blocks of the operands (the same op, with the
//! attributes of its local shapes; the vocab-parallel gather masks the rows it does not
//! hold), and the blocks put back together by the result's layout (split: concatenated,
//! partial: summed, replicated: each device's equal to the whole) equal the op on whole
//! tensors.

// Only its random numbers are used here.
#[allow(dead_code)]
#[path = "common/mesh.rs"]
mod mesh;

use ndarray::{ArrayD, Axis, IxDyn, Slice, concatenate};
use proptest::prelude::*;
use tessera_ir::interp::eval_op;
use tessera_ir::{
    BinaryOp, ConvAttrs, Dim, ElemType, Graph, Op, PoolAttrs, PoolKind, ReduceKind,
    ScatterReduction, Tensor, TensorType, UnaryOp,
};
use tessera_place::alternatives::{Rule, rules};
use tessera_place::split::Layout;

use mesh::splitmix;

/// An op with its operands' shapes, which operands are weights, and whether operand 1 holds
/// indices (gather) into operand 0's first axis.
struct Case {
    op: Op,
    shapes: Vec<Vec<u64>>,
    weights: Vec<bool>,
    indices: Option<usize>,
}

fn f32_tensor(shape: &[u64], s: &mut u64) -> Tensor {
    let n: u64 = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| (splitmix(s) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    Tensor::F32(ArrayD::from_shape_vec(IxDyn(&shape), data).expect("shape"))
}

fn array(t: &Tensor) -> ArrayD<f32> {
    match t {
        Tensor::F32(a) => a.clone(),
        other => panic!("expected f32, got {:?}", other.elem()),
    }
}

/// Block `i` of `k` of `a` along `axis`.
fn block(a: &ArrayD<f32>, axis: usize, i: usize, k: usize) -> ArrayD<f32> {
    let n = a.shape()[axis] / k;
    a.slice_axis(Axis(axis), Slice::from(i * n..(i + 1) * n))
        .to_owned()
}

fn cat(parts: &[ArrayD<f32>], axis: usize) -> ArrayD<f32> {
    let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
    concatenate(Axis(axis), &views).expect("concatenate")
}

fn close(got: &ArrayD<f32>, want: &ArrayD<f32>) -> Result<(), String> {
    if got.shape() != want.shape() {
        return Err(format!("shape {:?}, want {:?}", got.shape(), want.shape()));
    }
    let scale = want.iter().fold(1.0f32, |m, &x| m.max(x.abs()));
    let diff = got
        .iter()
        .zip(want.iter())
        .fold(0.0f32, |m, (&a, &b)| m.max((a - b).abs()));
    if diff <= 1e-4 * scale {
        Ok(())
    } else {
        Err(format!("differs by {diff}"))
    }
}

/// Runs `rule` of `case` over `k` devices and compares with the whole op.
fn check(
    case: &Case,
    rule: &Rule,
    k: usize,
    inputs: &[Tensor],
    full: &[Tensor],
) -> Result<(), String> {
    if rule.reduces {
        return match case.op {
            Op::LayerNorm { axis, epsilon } => {
                check_partial_layer_norm(rule, axis, epsilon, k, inputs, full)
            }
            _ => check_partial_softmax(case, rule, k, inputs, full),
        };
    }
    let mut outs: Vec<Vec<ArrayD<f32>>> = vec![Vec::new(); full.len()];
    for i in 0..k {
        let mut local = Vec::new();
        for (j, t) in inputs.iter().enumerate() {
            local.push(match rule.operands[j] {
                Layout::Split(a) => match t {
                    // Indices (gather-elements, scatter-elements) split like data.
                    Tensor::I64(x) => {
                        let n = x.shape()[a as usize] / k;
                        let range = Slice::from(i * n..(i + 1) * n);
                        Tensor::I64(x.slice_axis(Axis(a as usize), range).to_owned())
                    }
                    _ => Tensor::F32(block(&array(t), a as usize, i, k)),
                },
                _ => t.clone(),
            });
        }
        let got = if rule.axis == "vocab" {
            // The rows this device holds; an index outside them gives zeros.
            let table = array(&local[0]);
            let rows = table.shape()[0] as i64;
            let Tensor::I64(idx) = &local[1] else {
                return Err("indices".into());
            };
            let width = table.shape()[1];
            let mut shape: Vec<usize> = idx.shape().to_vec();
            shape.push(width);
            let mut out = ArrayD::<f32>::zeros(IxDyn(&shape));
            for (n, &x) in idx.iter().enumerate() {
                let r = x - i as i64 * rows;
                if (0..rows).contains(&r) {
                    for c in 0..width {
                        out.as_slice_mut().expect("standard layout")[n * width + c] =
                            table[[r as usize, c]];
                    }
                }
            }
            vec![Tensor::F32(out)]
        } else {
            let op = match &case.op {
                Op::Reshape { .. } => {
                    let mut shape: Vec<usize> = full[0].shape().to_vec();
                    if let Layout::Split(b) = rule.outputs[0] {
                        shape[b as usize] /= k;
                    }
                    Op::Reshape {
                        shape: shape.iter().map(|&d| Dim::Static(d as u64)).collect(),
                    }
                }
                op => op.clone(),
            };
            let refs: Vec<&Tensor> = local.iter().collect();
            eval_op(&op, &refs).map_err(|e| format!("device {i}: {e}"))?
        };
        for (r, t) in got.iter().enumerate() {
            outs[r].push(array(t));
        }
    }
    for (r, want) in full.iter().enumerate() {
        let want = array(want);
        let got = match rule.outputs[r] {
            Layout::Split(a) => cat(&outs[r], a as usize),
            Layout::Partial => outs[r]
                .iter()
                .skip(1)
                .fold(outs[r][0].clone(), |acc, x| acc + x),
            Layout::Replicated => {
                for o in &outs[r] {
                    close(o, &want).map_err(|e| format!("result {r} (replicated): {e}"))?;
                }
                continue;
            }
        };
        close(&got, &want).map_err(|e| format!("result {r} ({}): {e}", rule.outputs[r]))?;
    }
    Ok(())
}

/// A softmax split along its own axis: each device reduces its block (its maxima, then its
/// sum of exponentials against the maximum over every device's), the devices combine them
/// (a max over the gathered maxima, a sum of the partial sums), and each computes its block
/// of the result; the blocks concatenated are the whole op's result.
fn check_partial_softmax(
    case: &Case,
    rule: &Rule,
    k: usize,
    inputs: &[Tensor],
    full: &[Tensor],
) -> Result<(), String> {
    let (Op::Softmax { axis } | Op::LogSoftmax { axis }) = case.op else {
        return Err(format!("{:?} has no partial-reduction rule", case.op));
    };
    let log = matches!(case.op, Op::LogSoftmax { .. });
    if rule.operands != [Layout::Split(axis as u32)] || rule.outputs != rule.operands {
        return Err(format!("layouts {:?} -> {:?}", rule.operands, rule.outputs));
    }
    let x = array(&inputs[0]);
    let blocks: Vec<ArrayD<f32>> = (0..k).map(|i| block(&x, axis, i, k)).collect();
    let max_of =
        |b: &ArrayD<f32>| b.map_axis(Axis(axis), |l| l.fold(f32::NEG_INFINITY, |m, &v| m.max(v)));
    let maxima: Vec<_> = blocks.iter().map(max_of).collect();
    let big_m = maxima
        .iter()
        .skip(1)
        .fold(maxima[0].clone(), |m, b| {
            ndarray::Zip::from(&m).and(b).map_collect(|&p, &q| p.max(q))
        })
        .insert_axis(Axis(axis));
    let exps: Vec<ArrayD<f32>> = blocks.iter().map(|b| (b - &big_m).mapv(f32::exp)).collect();
    let sum = exps
        .iter()
        .map(|e| e.sum_axis(Axis(axis)))
        .reduce(|a, b| a + b)
        .expect("k > 0")
        .insert_axis(Axis(axis));
    let parts: Vec<ArrayD<f32>> = blocks
        .iter()
        .zip(&exps)
        .map(|(b, e)| {
            if log {
                b - &big_m - sum.mapv(f32::ln)
            } else {
                e / &sum
            }
        })
        .collect();
    close(&cat(&parts, axis), &array(&full[0]))
}

/// A layer norm split along its first normalized axis (the last here): each device sums its
/// block, the sums are added (the mean), each sums its squared deviations from the mean, those
/// are added (the variance), and each normalizes its block with its blocks of scale and bias.
fn check_partial_layer_norm(
    rule: &Rule,
    axis: usize,
    epsilon: f64,
    k: usize,
    inputs: &[Tensor],
    full: &[Tensor],
) -> Result<(), String> {
    let x = array(&inputs[0]);
    if axis + 1 != x.ndim() || rule.operands[0] != Layout::Split(axis as u32) {
        return Err(format!("layouts {:?} -> {:?}", rule.operands, rule.outputs));
    }
    let n = x.shape()[axis] as f32;
    let blocks: Vec<ArrayD<f32>> = (0..k).map(|i| block(&x, axis, i, k)).collect();
    let local = |i: usize, j: usize| match rule.operands[j] {
        Layout::Split(0) => block(&array(&inputs[j]), 0, i, k),
        _ => array(&inputs[j]),
    };
    let total = |parts: Vec<ArrayD<f32>>| {
        parts
            .into_iter()
            .reduce(|a, b| a + b)
            .expect("k > 0")
            .insert_axis(Axis(axis))
    };
    let mean = total(blocks.iter().map(|b| b.sum_axis(Axis(axis))).collect()) / n;
    let devs: Vec<ArrayD<f32>> = blocks.iter().map(|b| b - &mean).collect();
    let var = total(devs.iter().map(|d| (d * d).sum_axis(Axis(axis))).collect()) / n;
    let sd = var.mapv(|v| (v + epsilon as f32).sqrt());
    let parts: Vec<ArrayD<f32>> = devs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let y = d / &sd * &local(i, 1);
            if inputs.len() > 2 {
                y + &local(i, 2)
            } else {
                y
            }
        })
        .collect();
    close(&cat(&parts, axis), &array(&full[0]))
}

/// A random case of op family `family` (see the match) with extents from `pick`.
fn case(family: u64, s: &mut u64) -> Case {
    let mut pick = |xs: &[u64]| xs[(splitmix(s) % xs.len() as u64) as usize];
    let ext = [4u64, 6, 8, 12];
    let (b, sq, h) = (pick(&[1, 2, 4]), pick(&ext), pick(&ext));
    let d = pick(&[2, 4, 6]);
    let heads = pick(&[2, 4, 6]);
    let plain = |op: Op, shapes: Vec<Vec<u64>>, weights: Vec<bool>| Case {
        op,
        shapes,
        weights,
        indices: None,
    };
    match family {
        0 => plain(Op::Unary(UnaryOp::Tanh), vec![vec![b, sq, h]], vec![false]),
        1 => plain(
            Op::Binary(BinaryOp::Add),
            vec![vec![b, sq, h], vec![h]],
            vec![false, pick(&[0, 1]) == 1],
        ),
        2 => plain(
            Op::Binary(BinaryOp::Mul),
            vec![vec![b, heads, sq, sq], vec![1, 1, sq, sq]],
            vec![false, false],
        ),
        3 => plain(
            if pick(&[0, 1]) == 0 {
                Op::Softmax { axis: 3 }
            } else {
                Op::LogSoftmax { axis: 3 }
            },
            vec![vec![b, heads, sq, sq]],
            vec![false],
        ),
        4 => plain(
            Op::LayerNorm {
                axis: 2,
                epsilon: 1e-5,
            },
            vec![vec![b, sq, h], vec![h], vec![h]],
            vec![false, true, true],
        ),
        5 => plain(
            Op::MatMul,
            vec![vec![b, sq, h], vec![h, pick(&ext)]],
            vec![false, pick(&[0, 1]) == 1],
        ),
        6 => plain(
            Op::MatMul,
            vec![vec![b, heads, sq, d], vec![b, heads, d, sq]],
            vec![false, false],
        ),
        7 => {
            let trans_b = pick(&[0, 1]) == 1;
            let n = pick(&ext);
            let bias = pick(&[0, 1, 2, 3]);
            let mut shapes = vec![vec![sq, h], if trans_b { vec![n, h] } else { vec![h, n] }];
            // No bias, a row vector, a full matrix, a column.
            match bias {
                1 => shapes.push(vec![n]),
                2 => shapes.push(vec![sq, n]),
                3 => shapes.push(vec![sq, 1]),
                _ => {}
            }
            let weights = vec![false, true, true][..shapes.len()].to_vec();
            plain(
                Op::Gemm {
                    alpha: 1.0,
                    beta: 1.0,
                    trans_a: false,
                    trans_b,
                },
                shapes,
                weights,
            )
        }
        8 => plain(
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            vec![vec![b, sq, heads, d]],
            vec![false],
        ),
        9 => plain(
            Op::Reshape {
                shape: [b, sq, heads, d].iter().map(|&x| Dim::Static(x)).collect(),
            },
            vec![vec![b, sq, heads * d]],
            vec![false],
        ),
        10 => plain(
            Op::Split {
                axis: 2,
                sizes: vec![h, h, h],
            },
            vec![vec![b, sq, 3 * h]],
            vec![false],
        ),
        11 => plain(
            Op::Concat { axis: 2 },
            vec![vec![b, sq, h], vec![b, sq, h]],
            vec![false, false],
        ),
        12 => Case {
            op: Op::Gather { axis: 0 },
            shapes: vec![vec![pick(&ext) * 2, h], vec![b, sq]],
            weights: vec![true, false],
            indices: Some(1),
        },
        13 => plain(
            Op::Conv(ConvAttrs {
                strides: vec![1, 1],
                pads: vec![1, 1, 1, 1],
                dilations: vec![1, 1],
                groups: 1,
            }),
            vec![vec![b, 3, 6, 6], vec![pick(&ext), 3, 3, 3], vec![0]],
            vec![false, true, true],
        ),
        14 => plain(
            Op::Pool(PoolAttrs {
                kind: PoolKind::Max,
                kernel: vec![2, 2],
                strides: vec![2, 2],
                pads: vec![0, 0, 0, 0],
                dilations: vec![1, 1],
                ceil_mode: false,
                count_include_pad: false,
            }),
            vec![vec![b, pick(&ext), 4, 4]],
            vec![false],
        ),
        15 => {
            // Letters' extents, then one of a few equations: batched matmul, attention
            // scores, a full contraction, an outer product, a transposing sum.
            let ext = |c: char| match c {
                'b' => b,
                'i' | 'q' => sq,
                'j' | 'k' => h,
                _ => d,
            };
            let equation = [
                "bij,jk->bik",
                "bqd,bkd->bqk",
                "ij,ij->",
                "bi,bj->bij",
                "bij->jb",
            ][(splitmix(s) % 5) as usize];
            let (lhs, _) = equation.split_once("->").expect("an output");
            let shapes: Vec<Vec<u64>> = lhs
                .split(',')
                .map(|t| t.chars().map(ext).collect())
                .collect();
            let weights = vec![false; shapes.len()];
            plain(
                Op::Einsum {
                    equation: equation.into(),
                },
                shapes,
                weights,
            )
        }
        17 => {
            // A weight's gradient: `A^T B` of two activations sharing their first axis.
            let trans_b = pick(&[0, 1]) == 1;
            let (m, n) = (pick(&ext), pick(&ext));
            let rows = b * sq;
            plain(
                Op::Gemm {
                    alpha: 1.0,
                    beta: 0.0,
                    trans_a: true,
                    trans_b,
                },
                vec![
                    vec![rows, m],
                    if trans_b {
                        vec![n, rows]
                    } else {
                        vec![rows, n]
                    },
                ],
                vec![false, false],
            )
        }
        18 => {
            let kinds = [ReduceKind::Sum, ReduceKind::Max, ReduceKind::Mean];
            let kind = kinds[pick(&[0, 1, 2]) as usize];
            let axes = [vec![0], vec![2], vec![0, 1], vec![]][pick(&[0, 1, 2, 3]) as usize].clone();
            plain(
                Op::Reduce {
                    kind,
                    axes,
                    keep_dims: pick(&[0, 1]) == 1,
                },
                vec![vec![b * 2, sq, h]],
                vec![false],
            )
        }
        19 => Case {
            op: Op::GatherElements { axis: 0 },
            shapes: vec![vec![pick(&ext), h], vec![sq, h]],
            weights: vec![false, false],
            indices: Some(1),
        },
        20 => Case {
            op: Op::ScatterElements {
                axis: 0,
                reduction: ScatterReduction::Add,
            },
            shapes: vec![vec![pick(&ext), h], vec![sq, h], vec![sq, h]],
            weights: vec![false, false, false],
            indices: Some(1),
        },
        21 => {
            // A convolution weight's gradient: no bias, both operands activations.
            let c = pick(&[2, 4, 6, 12]);
            plain(
                Op::Conv(ConvAttrs {
                    strides: vec![1, 1],
                    pads: vec![1, 1, 1, 1],
                    dilations: vec![1, 1],
                    groups: 1,
                }),
                vec![vec![b, c, 5, 5], vec![pick(&ext), c, 3, 3]],
                vec![false, false],
            )
        }
        _ => {
            let c = pick(&ext);
            plain(
                Op::BatchNorm { epsilon: 1e-5 },
                vec![vec![b, c, 3, 3], vec![c], vec![c], vec![c], vec![c]],
                vec![false, true, true, true, true],
            )
        }
    }
}

const FAMILIES: u64 = 23;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5a4d),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_rule_computes_the_whole_op(seed in any::<u64>(), family in 0..FAMILIES) {
        let mut s = seed;
        let mut c = case(family, &mut s);
        if let (Op::Conv(_), 3) = (&c.op, c.shapes.len()) {
            // The bias has the output channels.
            c.shapes[2] = vec![c.shapes[1][0]];
        }
        let mut g = Graph::new("case");
        let mut inputs = Vec::new();
        let mut values = Vec::new();
        for (j, shape) in c.shapes.iter().enumerate() {
            let elem = if c.indices == Some(j) { ElemType::I64 } else { ElemType::F32 };
            let ty = TensorType::new(elem, shape.iter().map(|&x| Dim::Static(x)).collect());
            values.push(g.add_input(None, ty));
            inputs.push(if c.indices == Some(j) {
                let rows = c.shapes[0][0];
                let n: u64 = shape.iter().product();
                let data: Vec<i64> = (0..n).map(|_| (splitmix(&mut s) % rows) as i64).collect();
                let dims: Vec<usize> = shape.iter().map(|&x| x as usize).collect();
                Tensor::I64(ArrayD::from_shape_vec(IxDyn(&dims), data).expect("shape"))
            } else {
                f32_tensor(shape, &mut s)
            });
        }
        let types: Vec<TensorType> = values.iter().map(|&v| g.ty(v).clone()).collect();
        let refs: Vec<&TensorType> = types.iter().collect();
        let results = tessera_ir::infer::infer(&g, &c.op, &refs)
            .map_err(|e| TestCaseError::fail(format!("{:?}: {e}", c.op)))?;
        let op = g.push_op(c.op.clone(), values.clone(), results);
        let in_refs: Vec<&Tensor> = inputs.iter().collect();
        let full = eval_op(&c.op, &in_refs).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let weight = |v| values.iter().position(|&x| x == v).is_some_and(|j| c.weights[j]);
        let mut checked = 0;
        for k in [2usize, 3, 4] {
            for rule in rules(&g, op, k as u64, &weight) {
                if let Err(e) = check(&c, &rule, k, &inputs, &full) {
                    return Err(TestCaseError::fail(format!(
                        "{:?} on {:?}, rule {} ({:?} -> {:?}) over {k}: {e}",
                        c.op, c.shapes, rule.axis, rule.operands, rule.outputs
                    )));
                }
                checked += 1;
            }
        }
        // The replicated rule at least, for every k.
        prop_assert!(checked >= 3);
    }
}

/// Every family has at least one splitting (not replicated) rule on some shape, so the
/// property above checks real splits for each.
#[test]
fn every_family_has_a_split_rule() {
    for family in 0..FAMILIES {
        let mut found = false;
        for seed in 0..64u64 {
            let mut s = seed;
            let mut c = case(family, &mut s);
            if let (Op::Conv(_), 3) = (&c.op, c.shapes.len()) {
                c.shapes[2] = vec![c.shapes[1][0]];
            }
            let mut g = Graph::new("case");
            let values: Vec<_> = c
                .shapes
                .iter()
                .enumerate()
                .map(|(j, shape)| {
                    let elem = if c.indices == Some(j) {
                        ElemType::I64
                    } else {
                        ElemType::F32
                    };
                    g.add_input(
                        None,
                        TensorType::new(elem, shape.iter().map(|&x| Dim::Static(x)).collect()),
                    )
                })
                .collect();
            let types: Vec<TensorType> = values.iter().map(|&v| g.ty(v).clone()).collect();
            let refs: Vec<&TensorType> = types.iter().collect();
            let results = tessera_ir::infer::infer(&g, &c.op, &refs).expect("infers");
            let op = g.push_op(c.op.clone(), values.clone(), results);
            let weight = |v| {
                values
                    .iter()
                    .position(|&x| x == v)
                    .is_some_and(|j| c.weights[j])
            };
            found |= rules(&g, op, 2, &weight).iter().any(|r| r.shares);
        }
        assert!(found, "family {family} never splits");
    }
}
