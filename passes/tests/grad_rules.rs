//! Every vector-Jacobian rule of the `grad` pass against central finite differences, in
//! f64, through the reference interpreter: random shapes and values, the op alone, the loss
//! a random linear function of its results (`sum(y * w)`), every float input's gradient
//! compared element by element (a property test per op). `every_rule_has_a_test` keeps the
//! list complete: an op the table gives a rule fails it until a test here covers it.

use proptest::prelude::*;
use tessera_passes::grad::{Differentiability, TABLE, differentiate};
use tessera_passes::ir::{
    BinaryOp as B, ConvAttrs, Dim, ElemType, Graph, Op, PadMode, PoolAttrs, PoolKind,
    ReduceKind as K, Scalar, ScatterReduction, Tensor, TensorType, UnaryOp as U, ValueId, infer,
    interp, text, verify,
};

fn cfg() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(8),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// The values an input takes.
#[derive(Clone, Copy, Debug)]
enum Dom {
    /// Uniform in [-2, 2].
    Real,
    /// Uniform in [0.5, 2].
    Pos,
    /// Uniform in [-0.8, 0.8].
    Unit,
    /// Uniform in [-5, 5].
    Wide,
    /// i64 indices in [-n, n).
    Idx(i64),
    /// Random bools.
    Bool,
}

struct Builder {
    g: Graph,
    doms: Vec<Dom>,
    outs: Vec<ValueId>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            g: Graph::new("case"),
            doms: vec![],
            outs: vec![],
        }
    }

    fn input(&mut self, dims: &[usize], dom: Dom) -> ValueId {
        let elem = match dom {
            Dom::Idx(_) => ElemType::I64,
            Dom::Bool => ElemType::Bool,
            _ => ElemType::F64,
        };
        let d: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
        self.doms.push(dom);
        self.g.add_input(
            Some(format!("in{}", self.doms.len() - 1)),
            TensorType::fixed(elem, &d),
        )
    }

    fn ops(&mut self, op: Op, xs: &[ValueId]) -> Vec<ValueId> {
        let tys: Vec<&TensorType> = xs.iter().map(|&v| self.g.ty(v)).collect();
        let types = infer::infer(&self.g, &op, &tys)
            .unwrap_or_else(|e| panic!("test op {} does not type: {}", op.name(), e.message));
        let id = self.g.push_op(op, xs.to_vec(), types);
        self.g.op(id).results.clone()
    }

    fn op(&mut self, op: Op, xs: &[ValueId]) -> ValueId {
        self.ops(op, xs)[0]
    }

    /// Makes `op` of `xs` the case: its float results are what the loss reads.
    fn case(mut self, op: Op, xs: &[ValueId]) -> Builder {
        let rs = self.ops(op, xs);
        for r in rs {
            if self.g.ty(r).elem == ElemType::F64 {
                self.outs.push(r);
            }
        }
        self
    }
}

/// A deterministic pseudo-random stream in [0, 1).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 11) as f64) / ((1u64 << 53) as f64)
    }
}

fn tensor(ty: &TensorType, dom: Dom, rng: &mut Rng) -> Tensor {
    let dims: Vec<usize> = ty
        .static_dims()
        .expect("static")
        .iter()
        .map(|&d| d as usize)
        .collect();
    let n: usize = dims.iter().product();
    let bytes: Vec<u8> = match dom {
        Dom::Idx(k) => (0..n)
            .flat_map(|_| ((rng.next() * 2.0 * k as f64).floor() as i64 - k).to_le_bytes())
            .collect(),
        Dom::Bool => (0..n).map(|_| u8::from(rng.next() < 0.5)).collect(),
        _ => {
            let (lo, hi) = match dom {
                Dom::Real => (-2.0, 2.0),
                Dom::Pos => (0.5, 2.0),
                Dom::Unit => (-0.8, 0.8),
                _ => (-5.0, 5.0),
            };
            (0..n)
                .flat_map(|_| (lo + (hi - lo) * rng.next()).to_le_bytes())
                .collect()
        }
    };
    Tensor::from_le_bytes(ty.elem, &dims, &bytes).expect("tensor")
}

fn scalar_of(t: &Tensor) -> f64 {
    t.to_f64_vec()[0]
}

/// Builds `loss = sum_k sum(y_k * w_k)`, differentiates it with respect to every f64 input,
/// and compares each gradient element with a central difference.
fn check(b: Builder, seed: u64) -> Result<(), TestCaseError> {
    let Builder { mut g, doms, outs } = b;
    let mut rng = Rng(seed);
    let wrt: Vec<ValueId> = g
        .inputs()
        .iter()
        .copied()
        .filter(|&v| g.ty(v).elem == ElemType::F64)
        .collect();
    let n_in = g.inputs().len();
    let mut loss: Option<ValueId> = None;
    let mut weights = Vec::new();
    for (k, &y) in outs.iter().enumerate() {
        let ty = g.ty(y).clone();
        let w = g.add_input(Some(format!("w{k}")), ty.clone());
        weights.push(tensor(&ty, Dom::Real, &mut rng));
        let p = push(&mut g, Op::Binary(B::Mul), &[y, w]);
        let s = push(
            &mut g,
            Op::Reduce {
                kind: K::Sum,
                axes: vec![],
                keep_dims: false,
            },
            &[p],
        );
        loss = Some(match loss {
            None => s,
            Some(l) => push(&mut g, Op::Binary(B::Add), &[l, s]),
        });
    }
    let loss = loss.expect("the case has a float result");
    let mut fwd = g.clone();
    fwd.set_outputs(vec![loss]);
    let grads = differentiate(&mut g, loss, &wrt).map_err(|e| TestCaseError::fail(e.message))?;
    let mut outputs = vec![loss];
    outputs.extend(&grads);
    g.set_outputs(outputs);
    if let Err(errs) = verify::verify(&g) {
        return Err(TestCaseError::fail(format!(
            "the gradient graph does not verify: {errs:?}\n{}",
            text::print(&g)
        )));
    }
    // The backward graph prints and parses back to the same text (grad-of links included).
    let printed = text::print(&g);
    let reparsed = text::parse(&printed, None).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(text::print(&reparsed), printed.clone());

    let mut inputs: Vec<Tensor> = (0..n_in)
        .map(|i| tensor(g.ty(g.inputs()[i]), doms[i], &mut rng))
        .collect();
    inputs.extend(weights);
    let got =
        interp::run(&g, &inputs).map_err(|e| TestCaseError::fail(format!("{e}\n{printed}")))?;
    let eps = 1e-6;
    for (gi, &w) in wrt.iter().enumerate() {
        let idx = g.inputs().iter().position(|&v| v == w).expect("input");
        let analytic = got[1 + gi].to_f64_vec();
        let base = inputs[idx].to_f64_vec();
        let dims = inputs[idx].shape().to_vec();
        for j in 0..base.len() {
            let at = |delta: f64| -> Result<f64, TestCaseError> {
                let mut v = base.clone();
                v[j] += delta;
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let mut ins = inputs.clone();
                ins[idx] = Tensor::from_le_bytes(ElemType::F64, &dims, &bytes).expect("tensor");
                let out =
                    interp::run(&fwd, &ins).map_err(|e| TestCaseError::fail(e.to_string()))?;
                Ok(scalar_of(&out[0]))
            };
            let fd = (at(eps)? - at(-eps)?) / (2.0 * eps);
            let a = analytic[j];
            prop_assert!(
                (a - fd).abs() <= 1e-5 * (1.0 + fd.abs()),
                "d loss / d {}[{}]: rule {} vs finite difference {}\n{}",
                g.value(w).name.clone().unwrap_or_default(),
                j,
                a,
                fd,
                printed
            );
        }
    }
    Ok(())
}

fn push(g: &mut Graph, op: Op, xs: &[ValueId]) -> ValueId {
    let tys: Vec<&TensorType> = xs.iter().map(|&v| g.ty(v)).collect();
    let types = infer::infer(g, &op, &tys).expect("types");
    let id = g.push_op(op, xs.to_vec(), types);
    g.op(id).results[0]
}

fn dims() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..4, 4)
}

macro_rules! grad_test {
    ($name:ident, |$d:ident| $body:expr) => {
        proptest! {
            #![proptest_config(cfg())]
            #[test]
            fn $name($d in dims(), seed in any::<u64>()) {
                let b: Builder = $body;
                check(b, seed)?;
            }
        }
    };
}

fn unary(d: &[usize], u: U, dom: Dom) -> Builder {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1], dom);
    b.case(Op::Unary(u), &[x])
}

/// `x OP y` with `y` broadcast along the first axis (a row), so both sums-to are tested.
fn binary(d: &[usize], op: B, dx: Dom, dy: Dom) -> Builder {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1]], dx);
    let y = b.input(&[1, d[1]], dy);
    b.case(Op::Binary(op), &[x, y])
}

grad_test!(abs, |d| unary(&d, U::Abs, Dom::Real));
grad_test!(neg, |d| unary(&d, U::Neg, Dom::Real));
grad_test!(exp, |d| unary(&d, U::Exp, Dom::Real));
grad_test!(log, |d| unary(&d, U::Log, Dom::Pos));
grad_test!(sqrt, |d| unary(&d, U::Sqrt, Dom::Pos));
grad_test!(reciprocal, |d| unary(&d, U::Reciprocal, Dom::Pos));
grad_test!(sin, |d| unary(&d, U::Sin, Dom::Real));
grad_test!(cos, |d| unary(&d, U::Cos, Dom::Real));
grad_test!(tan, |d| unary(&d, U::Tan, Dom::Unit));
grad_test!(asin, |d| unary(&d, U::Asin, Dom::Unit));
grad_test!(acos, |d| unary(&d, U::Acos, Dom::Unit));
grad_test!(atan, |d| unary(&d, U::Atan, Dom::Real));
grad_test!(tanh, |d| unary(&d, U::Tanh, Dom::Real));
grad_test!(sigmoid, |d| unary(&d, U::Sigmoid, Dom::Real));
grad_test!(erf, |d| unary(&d, U::Erf, Dom::Real));
grad_test!(relu, |d| unary(&d, U::Relu, Dom::Real));
grad_test!(softplus, |d| unary(&d, U::Softplus, Dom::Real));
grad_test!(softsign, |d| unary(&d, U::Softsign, Dom::Real));
grad_test!(mish, |d| unary(&d, U::Mish, Dom::Real));
grad_test!(hard_swish, |d| unary(&d, U::HardSwish, Dom::Wide));
grad_test!(gelu, |d| unary(&d, U::Gelu { tanh: false }, Dom::Real));
grad_test!(gelu_tanh, |d| unary(&d, U::Gelu { tanh: true }, Dom::Real));
grad_test!(elu, |d| unary(&d, U::Elu { alpha: 1.5 }, Dom::Real));
grad_test!(leaky_relu, |d| unary(
    &d,
    U::LeakyRelu { alpha: 0.1 },
    Dom::Real
));
grad_test!(selu, |d| unary(
    &d,
    U::Selu {
        alpha: 1.67,
        gamma: 1.05
    },
    Dom::Real
));
grad_test!(hard_sigmoid, |d| unary(
    &d,
    U::HardSigmoid {
        alpha: 0.2,
        beta: 0.5
    },
    Dom::Wide
));

grad_test!(add, |d| binary(&d, B::Add, Dom::Real, Dom::Real));
grad_test!(sub, |d| binary(&d, B::Sub, Dom::Real, Dom::Real));
grad_test!(mul, |d| binary(&d, B::Mul, Dom::Real, Dom::Real));
grad_test!(div, |d| binary(&d, B::Div, Dom::Real, Dom::Pos));
grad_test!(pow, |d| binary(&d, B::Pow, Dom::Pos, Dom::Real));
grad_test!(max, |d| binary(&d, B::Max, Dom::Real, Dom::Real));
grad_test!(min, |d| binary(&d, B::Min, Dom::Real, Dom::Real));
grad_test!(prelu, |d| binary(&d, B::Prelu, Dom::Real, Dom::Real));

grad_test!(select, |d| {
    let mut b = Builder::new();
    let c = b.input(&[d[0], d[1]], Dom::Bool);
    let x = b.input(&[d[0], d[1]], Dom::Real);
    let y = b.input(&[d[1]], Dom::Real);
    b.case(Op::Select, &[c, x, y])
});

grad_test!(clip, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], 3], Dom::Real);
    b.case(
        Op::Clip {
            min: Some(-1.0),
            max: Some(0.7),
        },
        &[x],
    )
});

grad_test!(matmul, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], d[2]], Dom::Real);
    let w = b.input(&[d[2], d[3]], Dom::Real);
    b.case(Op::MatMul, &[x, w])
});

grad_test!(matmul_vector, |d| {
    let mut b = Builder::new();
    let v = b.input(&[d[1]], Dom::Real);
    let m = b.input(&[d[0], d[1], d[2]], Dom::Real);
    b.case(Op::MatMul, &[v, m])
});

grad_test!(gemm, |d| {
    let mut b = Builder::new();
    let ta = d[3].is_multiple_of(2);
    let tb = d[0] % 2 == 1;
    let (m, k, n) = (d[0], d[1], d[2]);
    let a = b.input(&if ta { [k, m] } else { [m, k] }, Dom::Real);
    let w = b.input(&if tb { [n, k] } else { [k, n] }, Dom::Real);
    let c = b.input(&[n], Dom::Real);
    b.case(
        Op::Gemm {
            alpha: 0.7,
            beta: 1.3,
            trans_a: ta,
            trans_b: tb,
        },
        &[a, w, c],
    )
});

grad_test!(einsum, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], d[2]], Dom::Real);
    let y = b.input(&[d[2], d[3]], Dom::Real);
    b.case(
        Op::Einsum {
            equation: "bij,jk->bik".into(),
        },
        &[x, y],
    )
});

fn conv_case(d: &[usize], groups: u64) -> Builder {
    let mut b = Builder::new();
    let c = groups as usize * d[0].min(2);
    let m = groups as usize * d[1].min(2);
    let stride = d[2] as u64 % 2 + 1;
    let dil = d[3] as u64 % 2 + 1;
    let x = b.input(&[2, c, 5 + d[2], 4 + d[3]], Dom::Real);
    let w = b.input(&[m, c / groups as usize, 2, 3], Dom::Real);
    let bias = b.input(&[m], Dom::Real);
    b.case(
        Op::Conv(ConvAttrs {
            strides: vec![stride, 1],
            pads: vec![1, 0, 1, 1],
            dilations: vec![1, dil],
            groups,
        }),
        &[x, w, bias],
    )
}

grad_test!(conv, |d| conv_case(&d, 1));
grad_test!(conv_grouped, |d| conv_case(&d, 2));

grad_test!(conv_transpose, |d| {
    let mut b = Builder::new();
    let c = d[0].min(2) * 2;
    let m = d[1].min(2) * 2;
    let stride = d[2] as u64 % 2 + 1;
    let x = b.input(&[1, c, 3 + d[2], 2 + d[3]], Dom::Real);
    let w = b.input(&[c, m / 2, 3, 2], Dom::Real);
    let bias = b.input(&[m], Dom::Real);
    b.case(
        Op::ConvTranspose {
            conv: ConvAttrs {
                strides: vec![stride, 2],
                pads: vec![1, 0, 0, 1],
                dilations: vec![1, 1],
                groups: 2,
            },
            output_padding: vec![stride - 1, 1],
        },
        &[x, w, bias],
    )
});

grad_test!(avg_pool, |d| {
    let mut b = Builder::new();
    let x = b.input(&[1, 2, 4 + d[0], 3 + d[1]], Dom::Real);
    b.case(
        Op::Pool(PoolAttrs {
            kind: PoolKind::Avg,
            kernel: vec![3, 2],
            strides: vec![2, 1 + d[2] as u64 % 2],
            pads: vec![1, 0, 1, 1],
            dilations: vec![1, 1],
            ceil_mode: d[3].is_multiple_of(2),
            count_include_pad: d[2].is_multiple_of(2),
        }),
        &[x],
    )
});

grad_test!(max_pool, |d| {
    let mut b = Builder::new();
    let x = b.input(&[2, 2, 4 + d[0], 3 + d[1]], Dom::Real);
    b.case(
        Op::Pool(PoolAttrs {
            kind: PoolKind::Max,
            kernel: vec![2, 3],
            strides: vec![1 + d[2] as u64 % 2, 2],
            pads: vec![1, 1, 0, 1],
            dilations: vec![1, 1 + d[3] as u64 % 2],
            ceil_mode: d[3].is_multiple_of(2),
            count_include_pad: false,
        }),
        &[x],
    )
});

fn reduce_case(d: &[usize], kind: K, dom: Dom) -> Builder {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2]], dom);
    let axes = match d[3] {
        1 => vec![1],
        2 => vec![0, 2],
        _ => vec![],
    };
    b.case(
        Op::Reduce {
            kind,
            axes,
            keep_dims: d[0].is_multiple_of(2),
        },
        &[x],
    )
}

grad_test!(reduce_sum, |d| reduce_case(&d, K::Sum, Dom::Real));
grad_test!(reduce_mean, |d| reduce_case(&d, K::Mean, Dom::Real));
grad_test!(reduce_max, |d| reduce_case(&d, K::Max, Dom::Real));
grad_test!(reduce_min, |d| reduce_case(&d, K::Min, Dom::Real));
grad_test!(reduce_prod, |d| reduce_case(&d, K::Prod, Dom::Pos));
grad_test!(reduce_l1, |d| reduce_case(&d, K::L1, Dom::Real));
grad_test!(reduce_l2, |d| reduce_case(&d, K::L2, Dom::Real));
grad_test!(reduce_log_sum_exp, |d| reduce_case(
    &d,
    K::LogSumExp,
    Dom::Real
));
grad_test!(reduce_sum_square, |d| reduce_case(
    &d,
    K::SumSquare,
    Dom::Real
));

grad_test!(softmax, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2]], Dom::Real);
    b.case(Op::Softmax { axis: d[3] % 3 }, &[x])
});

grad_test!(log_softmax, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2]], Dom::Real);
    b.case(Op::LogSoftmax { axis: d[3] % 3 }, &[x])
});

grad_test!(cumsum, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2]], Dom::Real);
    b.case(
        Op::CumSum {
            axis: d[3] % 3,
            exclusive: d[0].is_multiple_of(2),
            reverse: d[1].is_multiple_of(2),
        },
        &[x],
    )
});

grad_test!(layer_norm, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], d[2] + 2], Dom::Real);
    let s = b.input(&[d[2] + 2], Dom::Real);
    let bias = b.input(&[d[2] + 2], Dom::Real);
    b.case(
        Op::LayerNorm {
            axis: 2,
            epsilon: 1e-5,
        },
        &[x, s, bias],
    )
});

grad_test!(batch_norm, |d| {
    let mut b = Builder::new();
    let c = d[1];
    let x = b.input(&[d[0], c, d[2], d[3]], Dom::Real);
    let s = b.input(&[c], Dom::Real);
    let bias = b.input(&[c], Dom::Real);
    let mean = b.input(&[c], Dom::Real);
    let var = b.input(&[c], Dom::Pos);
    b.case(Op::BatchNorm { epsilon: 1e-5 }, &[x, s, bias, mean, var])
});

grad_test!(reshape, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], d[2]], Dom::Real);
    b.case(
        Op::Reshape {
            shape: vec![Dim::Static((d[0] * d[1]) as u64), Dim::Static(d[2] as u64)],
        },
        &[x],
    )
});

grad_test!(transpose, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1], d[2]], Dom::Real);
    b.case(
        Op::Transpose {
            perm: vec![2, 0, 1],
        },
        &[x],
    )
});

grad_test!(expand, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], 1], Dom::Real);
    b.case(
        Op::Expand {
            shape: vec![
                Dim::Static(d[1] as u64),
                Dim::Static(d[0] as u64),
                Dim::Static(d[2] as u64 + 1),
            ],
        },
        &[x],
    )
});

grad_test!(concat, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1]], Dom::Real);
    let y = b.input(&[d[0], d[2]], Dom::Real);
    b.case(Op::Concat { axis: 1 }, &[x, y, x])
});

grad_test!(split, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + d[2] + 1], Dom::Real);
    b.case(
        Op::Split {
            axis: 1,
            sizes: vec![d[1] as u64, d[2] as u64 + 1],
        },
        &[x],
    )
});

grad_test!(slice, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0] + 2, 7, d[2] + 3], Dom::Real);
    let step = d[3] as i64 - 2; // -1, 0 -> 3, 1
    let step = if step == 0 { 3 } else { step };
    b.case(
        Op::Slice {
            axes: vec![0, 1, 2],
            starts: vec![1, if step > 0 { 1 } else { -2 }, -2],
            ends: vec![i64::MAX, if step > 0 { 7 } else { 0 }, i64::MIN],
            steps: vec![1, step, -1],
        },
        &[x],
    )
});

grad_test!(pad, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 2, d[2] + 1], Dom::Real);
    b.case(
        Op::Pad {
            pads: vec![0, -1, 2, 1, 1, -1],
            mode: PadMode::Constant,
            value: Scalar::Float(0.5),
        },
        &[x],
    )
});

grad_test!(tile, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1]], Dom::Real);
    b.case(
        Op::Tile {
            repeats: vec![d[2] as u64, d[3] as u64],
        },
        &[x],
    )
});

grad_test!(trilu, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2] + 1], Dom::Real);
    b.case(
        Op::Trilu {
            upper: d[3].is_multiple_of(2),
            k: d[3] as i64 - 2,
        },
        &[x],
    )
});

grad_test!(gather, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1, d[2]], Dom::Real);
    let axis = d[3] % 3;
    let extent = [d[0], d[1] + 1, d[2]][axis] as i64;
    let i = b.input(&[d[1], 2], Dom::Idx(extent));
    b.case(Op::Gather { axis }, &[x, i])
});

grad_test!(gather_elements, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 1], Dom::Real);
    let i = b.input(&[d[0], d[2] + 2], Dom::Idx(d[1] as i64 + 1));
    b.case(Op::GatherElements { axis: 1 }, &[x, i])
});

grad_test!(scatter_elements, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 2], Dom::Real);
    // One update per row: the overwritten positions are distinct.
    let i = b.input(&[d[0], 1], Dom::Idx(d[1] as i64 + 2));
    let u = b.input(&[d[0], 1], Dom::Real);
    let reduction = if d[2].is_multiple_of(2) {
        ScatterReduction::Add
    } else {
        ScatterReduction::None
    };
    b.case(Op::ScatterElements { axis: 1, reduction }, &[x, i, u])
});

grad_test!(top_k, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1] + 2], Dom::Real);
    b.case(
        Op::TopK {
            k: 2,
            axis: 1,
            largest: d[2].is_multiple_of(2),
        },
        &[x],
    )
});

// Inference semantics (the identity; the train pass gives dropout its training form before
// differentiating). Its bool mask result carries no gradient.
grad_test!(dropout, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1]], Dom::Real);
    b.case(Op::Dropout { ratio: 0.5 }, &[x])
});

grad_test!(transfer, |d| {
    let mut b = Builder::new();
    let x = b.input(&[d[0], d[1]], Dom::Real);
    let y = b.op(Op::Unary(U::Tanh), &[x]);
    b.case(
        Op::Transfer {
            from: "a".into(),
            to: "b".into(),
        },
        &[y],
    )
});

/// The ops whose rules the tests above cover, by text name.
const COVERED: &[&str] = &[
    "abs",
    "neg",
    "exp",
    "log",
    "sqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "tanh",
    "sigmoid",
    "erf",
    "relu",
    "softplus",
    "softsign",
    "mish",
    "hard-swish",
    "gelu",
    "elu",
    "leaky-relu",
    "selu",
    "hard-sigmoid",
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "max",
    "min",
    "prelu",
    "select",
    "cast",
    "clip",
    "matmul",
    "gemm",
    "einsum",
    "conv",
    "conv-transpose",
    "avg-pool",
    "max-pool",
    "reduce-sum",
    "reduce-mean",
    "reduce-max",
    "reduce-min",
    "reduce-prod",
    "reduce-l1",
    "reduce-l2",
    "reduce-log-sum-exp",
    "reduce-sum-square",
    "softmax",
    "log-softmax",
    "cumsum",
    "layer-norm",
    "batch-norm",
    "reshape",
    "transpose",
    "expand",
    "concat",
    "split",
    "slice",
    "pad",
    "tile",
    "trilu",
    "gather",
    "gather-elements",
    "scatter-elements",
    "top-k",
    "dropout",
    "transfer",
    // The collectives are the identity on the logical tensor, like `transfer` (same rule).
    "all-reduce",
    "all-gather",
    "all-slice",
    "reduce-scatter",
    "all-to-all",
];

#[test]
fn every_rule_has_a_test() {
    let mut with_rule: Vec<&str> = TABLE
        .iter()
        .filter(|(_, d)| matches!(d, Differentiability::Rule(_)))
        .map(|(n, _)| *n)
        .collect();
    with_rule.sort_unstable();
    let mut covered = COVERED.to_vec();
    covered.sort_unstable();
    assert_eq!(with_rule, covered);
}

#[test]
fn an_op_without_a_rule_is_an_error_naming_it_and_its_node() {
    let mut b = Builder::new();
    let x = b.input(&[1, 2, 4, 4], Dom::Real);
    let y = b.op(
        Op::Lrn {
            size: 3,
            alpha: 1e-4,
            beta: 0.75,
            bias: 1.0,
        },
        &[x],
    );
    let mut g = b.g;
    let pool = g.ops()[0];
    g.op_mut(pool).loc = Some("features/norm1".into());
    let l = push(
        &mut g,
        Op::Reduce {
            kind: K::Sum,
            axes: vec![],
            keep_dims: false,
        },
        &[y],
    );
    let err = differentiate(&mut g, l, &[x]).expect_err("an error");
    assert_eq!(
        err.message,
        "`lrn` (model node \"features/norm1\") has no gradient rule: local response normalization's gradient is not implemented yet"
    );
}

#[test]
fn a_loss_that_is_not_a_scalar_is_an_error() {
    let mut b = Builder::new();
    let x = b.input(&[2, 3], Dom::Real);
    let y = b.op(Op::Unary(U::Exp), &[x]);
    let mut g = b.g;
    g.set_name(y, "y");
    let err = differentiate(&mut g, y, &[x]).expect_err("an error");
    assert_eq!(
        err.message,
        "the loss %y is f64[2, 3], not a scalar (one element)"
    );
}

/// `cast` (f64 -> f32 -> f64 around an `exp`): f32's rounding is far coarser than a finite
/// difference step, so the rule is checked exactly instead: the gradient of `sum(cast(x) * w)`
/// is `w`, and through the `exp`, `exp(x) * w` in f32.
#[test]
fn cast() {
    let mut b = Builder::new();
    let x = b.input(&[3], Dom::Real);
    let w = b.input(&[3], Dom::Real);
    let y = b.op(Op::Cast { to: ElemType::F32 }, &[x]);
    let y = b.op(Op::Unary(U::Exp), &[y]);
    let y = b.op(Op::Cast { to: ElemType::F64 }, &[y]);
    let p = b.op(Op::Binary(B::Mul), &[y, w]);
    let l = b.op(
        Op::Reduce {
            kind: K::Sum,
            axes: vec![],
            keep_dims: false,
        },
        &[p],
    );
    let mut g = b.g;
    let grads = differentiate(&mut g, l, &[x]).expect("ok");
    g.set_outputs(grads);
    let xs = [0.5f64, -1.25, 2.0];
    let ws = [1.5f64, -0.75, 3.0];
    let t = |v: &[f64]| {
        Tensor::from_le_bytes(
            ElemType::F64,
            &[3],
            &v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>(),
        )
        .expect("ok")
    };
    let out = interp::run(&g, &[t(&xs), t(&ws)]).expect("ok");
    let want: Vec<f64> = xs
        .iter()
        .zip(ws)
        .map(|(&x, w)| ((x as f32).exp() * w as f32) as f64)
        .collect();
    assert_eq!(out[0].to_f64_vec(), want);
}

#[test]
fn an_unused_input_gets_a_zero_gradient() {
    let mut b = Builder::new();
    let x = b.input(&[2], Dom::Real);
    let z = b.input(&[3], Dom::Real);
    let y = b.op(
        Op::Reduce {
            kind: K::Sum,
            axes: vec![],
            keep_dims: false,
        },
        &[x],
    );
    let mut g = b.g;
    let grads = differentiate(&mut g, y, &[x, z]).expect("ok");
    g.set_outputs(grads);
    let x_t = Tensor::from_le_bytes(
        ElemType::F64,
        &[2],
        &[1.0f64, 2.0].map(f64::to_le_bytes).concat(),
    )
    .expect("ok");
    let z_t = Tensor::from_le_bytes(
        ElemType::F64,
        &[3],
        &[0.0f64; 3].map(f64::to_le_bytes).concat(),
    )
    .expect("ok");
    let out = interp::run(&g, &[x_t, z_t]).expect("ok");
    assert_eq!(out[0].to_f64_vec(), vec![1.0, 1.0]);
    assert_eq!(out[1].to_f64_vec(), vec![0.0, 0.0, 0.0]);
}
