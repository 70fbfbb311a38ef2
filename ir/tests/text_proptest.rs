//! Property test: random valid graphs survive print -> parse -> print unchanged, and parsing
//! the text gives back the same structure (ops, attributes, types, names, constant bytes).

use proptest::prelude::*;
use tessera_ir::text;
use tessera_ir::{
    BinaryOp, Bytes, Constant, Dim, ElemType, Graph, Mesh, Op, ReduceKind, Scalar, Sharding,
    TensorType, UnaryOp, ValueId,
};

/// SplitMix64: each build step draws its choices from its own seed, so proptest can shrink
/// the list of steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
}

const NAMES: &[&str] = &[
    "x",
    "x",
    "y",
    "0",
    "1",
    "2",
    "x_1",
    "a.b",
    "weird/name:0",
    "",
    "sp ace",
    "q\"uote",
    "é",
    "$",
    "-",
    "%",
    "return",
    "const",
    "tab\there",
    "-1e5",
    "nan",
];

fn name(rng: &mut Rng) -> Option<String> {
    if rng.chance(40) {
        None
    } else {
        Some(rng.pick(NAMES).to_string())
    }
}

fn dim(rng: &mut Rng) -> Dim {
    rng.pick(&[
        Dim::Static(1),
        Dim::Static(2),
        Dim::Static(3),
        Dim::Static(5),
        Dim::Static(4),
        Dim::sym("N"),
        Dim::sym("M"),
        Dim::sym("batch size"),
        Dim::sym("nan"),
    ])
}

fn shape(rng: &mut Rng) -> Vec<Dim> {
    let rank = rng.pick(&[0, 1, 1, 2, 2, 2, 3, 3]);
    (0..rank)
        .map(|_| {
            if rng.chance(3) {
                Dim::Static(0)
            } else {
                dim(rng)
            }
        })
        .collect()
}

fn elem(rng: &mut Rng) -> ElemType {
    rng.pick(&ElemType::ALL)
}

fn float(rng: &mut Rng) -> f64 {
    match rng.below(6) {
        0 => f64::from_bits(rng.next()),
        1 => rng.pick(&[
            0.0,
            -0.0,
            1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e-300,
            f64::NAN,
        ]),
        _ => (rng.next() % 2001) as f64 / 8.0 - 125.0,
    }
}

fn scalar(rng: &mut Rng) -> Scalar {
    if rng.chance(50) {
        Scalar::Int(rng.next() as i64 >> rng.below(64))
    } else {
        Scalar::Float(float(rng))
    }
}

fn sharding(rng: &mut Rng, rank: usize) -> Option<Sharding> {
    rng.chance(25).then(|| Sharding {
        axes: (0..rank)
            .map(|_| (0..rng.below(3)).map(|_| rng.below(4) as u32).collect())
            .collect(),
    })
}

const FLOAT_UNARY: &[UnaryOp] = &[
    UnaryOp::Abs,
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Sqrt,
    UnaryOp::Tanh,
    UnaryOp::Erf,
    UnaryOp::Relu,
    UnaryOp::Round,
    UnaryOp::HardSwish,
];
const INT_UNARY: &[UnaryOp] = &[UnaryOp::Abs, UnaryOp::Neg, UnaryOp::Sign, UnaryOp::Relu];
const ARITH: &[BinaryOp] = &[
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Mod,
    BinaryOp::Max,
    BinaryOp::Less,
    BinaryOp::GreaterEqual,
];
const LOGIC: &[BinaryOp] = &[BinaryOp::And, BinaryOp::Or, BinaryOp::Xor, BinaryOp::Equal];

/// Extent of a numpy slice of a static axis.
fn slice_len(d: i128, start: i128, end: i128, step: i128) -> u64 {
    let norm = |i: i128, lo: i128, hi: i128| (if i < 0 { i + d } else { i }).clamp(lo, hi);
    let n = if step > 0 {
        let (s, e) = (norm(start, 0, d), norm(end, 0, d));
        (e - s + step - 1).div_euclid(step)
    } else {
        let (s, e) = (norm(start, -1, d - 1), norm(end, -1, d - 1));
        (s - e - step - 1).div_euclid(-step)
    };
    n.max(0) as u64
}

struct Builder {
    g: Graph,
    values: Vec<ValueId>,
}

impl Builder {
    fn ty(&self, v: ValueId) -> TensorType {
        self.g.ty(v).clone()
    }

    /// Adds an op and decorates it (names, shardings, device, loc) at random.
    fn push(&mut self, rng: &mut Rng, op: Op, operands: Vec<ValueId>, types: Vec<TensorType>) {
        let id = self.g.push_op(op, operands, types);
        if rng.chance(20) {
            self.g.op_mut(id).device = Some(rng.pick(&["gpu0", "cpu", "chip \"3\""]).to_string());
        }
        if rng.chance(20) {
            self.g.op_mut(id).loc = Some(rng.pick(&["fc1/Relu", "a\nb", ""]).to_string());
        }
        for v in self.g.op(id).results.clone() {
            if let Some(n) = name(rng) {
                self.g.set_name(v, n);
            }
            let rank = self.g.ty(v).rank();
            self.g.value_mut(v).sharding = sharding(rng, rank);
            self.values.push(v);
        }
    }

    fn step(&mut self, seed: u64) {
        let rng = &mut Rng(seed);
        let v = rng.pick(&self.values);
        let t = self.ty(v);
        let static_axes: Vec<usize> = (0..t.rank())
            .filter(|&i| t.shape[i].as_static().is_some())
            .collect();
        match rng.below(12) {
            0 => {
                let (u, out) = if t.elem.is_float() {
                    match rng.below(8) {
                        0 => (UnaryOp::IsNan, t.with_elem(ElemType::Bool)),
                        1 => (
                            UnaryOp::Gelu {
                                tanh: rng.chance(50),
                            },
                            t.clone(),
                        ),
                        2 => (
                            UnaryOp::Selu {
                                alpha: float(rng),
                                gamma: float(rng),
                            },
                            t.clone(),
                        ),
                        3 => (UnaryOp::LeakyRelu { alpha: float(rng) }, t.clone()),
                        _ => (rng.pick(FLOAT_UNARY), t.clone()),
                    }
                } else if t.elem.is_int() {
                    (rng.pick(INT_UNARY), t.clone())
                } else {
                    (UnaryOp::Not, t.clone())
                };
                self.push(rng, Op::Unary(u), vec![v], vec![out]);
            }
            1 => {
                let same: Vec<ValueId> = self
                    .values
                    .iter()
                    .copied()
                    .filter(|&w| *self.g.ty(w) == t)
                    .collect();
                let w = rng.pick(&same);
                let b = if t.elem == ElemType::Bool {
                    rng.pick(LOGIC)
                } else {
                    rng.pick(ARITH)
                };
                let out = if b.is_comparison() {
                    t.with_elem(ElemType::Bool)
                } else {
                    t.clone()
                };
                self.push(rng, Op::Binary(b), vec![v, w], vec![out]);
            }
            2 if t.rank() >= 1 && t.elem.is_float() => {
                let k = t.shape[t.rank() - 1].clone();
                let p = dim(rng);
                let rhs_ty = TensorType::new(t.elem, vec![k, p.clone()]);
                let fill = Op::Fill {
                    shape: rhs_ty.shape.clone(),
                    elem: t.elem,
                    value: scalar(rng),
                };
                self.push(rng, fill, vec![], vec![rhs_ty]);
                let rhs = *self.values.last().expect("just pushed");
                let mut out = t.shape[..t.rank() - 1].to_vec();
                out.push(p);
                self.push(
                    rng,
                    Op::MatMul,
                    vec![v, rhs],
                    vec![TensorType::new(t.elem, out)],
                );
            }
            3 => {
                let mut perm: Vec<usize> = (0..t.rank()).collect();
                for i in (1..perm.len()).rev() {
                    perm.swap(i, rng.below(i + 1));
                }
                let shape = perm.iter().map(|&i| t.shape[i].clone()).collect();
                self.push(
                    rng,
                    Op::Transpose { perm },
                    vec![v],
                    vec![TensorType::new(t.elem, shape)],
                );
            }
            4 => {
                let shape: Vec<Dim> = t.shape.iter().rev().cloned().collect();
                let out = TensorType::new(t.elem, shape.clone());
                self.push(rng, Op::Reshape { shape }, vec![v], vec![out]);
            }
            5 if !static_axes.is_empty() => {
                let axis = rng.pick(&static_axes);
                let n = 1 + rng.below(3);
                let mut shape = t.shape.clone();
                shape[axis] = Dim::Static(t.shape[axis].as_static().unwrap_or(0) * n as u64);
                self.push(
                    rng,
                    Op::Concat { axis },
                    vec![v; n],
                    vec![TensorType::new(t.elem, shape)],
                );
            }
            6 if !static_axes.is_empty() => {
                let axis = rng.pick(&static_axes);
                let mut left = t.shape[axis].as_static().unwrap_or(0);
                let parts = 1 + rng.below(3);
                let mut sizes = Vec::new();
                for i in 0..parts {
                    let s = if i + 1 == parts {
                        left
                    } else {
                        rng.next() % (left + 1)
                    };
                    left -= s;
                    sizes.push(s);
                }
                let types = sizes
                    .iter()
                    .map(|&s| {
                        let mut shape = t.shape.clone();
                        shape[axis] = Dim::Static(s);
                        TensorType::new(t.elem, shape)
                    })
                    .collect();
                self.push(rng, Op::Split { axis, sizes }, vec![v], types);
            }
            7 => {
                let kind = rng.pick(&ReduceKind::ALL);
                let axes: Vec<usize> = (0..t.rank()).filter(|_| rng.chance(50)).collect();
                let keep_dims = rng.chance(50);
                let reduced = |i: usize| axes.is_empty() || axes.contains(&i);
                let shape = (0..t.rank())
                    .filter_map(|i| match (reduced(i), keep_dims) {
                        (false, _) => Some(t.shape[i].clone()),
                        (true, true) => Some(Dim::Static(1)),
                        (true, false) => None,
                    })
                    .collect();
                let op = Op::Reduce {
                    kind,
                    axes,
                    keep_dims,
                };
                self.push(rng, op, vec![v], vec![TensorType::new(t.elem, shape)]);
            }
            8 => {
                let to = elem(rng);
                self.push(rng, Op::Cast { to }, vec![v], vec![t.with_elem(to)]);
            }
            9 => {
                let e = elem(rng);
                // At most 16 elements, so the data prints inline; now and then an empty one.
                let rank = rng.below(4);
                let dims: Vec<u64> = (0..rank)
                    .map(|_| {
                        if rng.chance(5) {
                            0
                        } else {
                            1 + rng.below(2) as u64
                        }
                    })
                    .collect();
                let ty = TensorType::fixed(e, &dims);
                let n = ty.size_bytes().unwrap_or(0) as usize;
                let data: Vec<u8> = (0..n)
                    .map(|_| {
                        if e == ElemType::Bool {
                            rng.below(2) as u8
                        } else {
                            rng.next() as u8
                        }
                    })
                    .collect();
                let cname = name(rng).unwrap_or_else(|| "w".to_string());
                let c = self.g.add_const(Constant {
                    name: cname,
                    ty: ty.clone(),
                    data: Bytes::from(data),
                });
                self.push(rng, Op::Const(c), vec![], vec![ty]);
            }
            10 => {
                let ty = TensorType::new(elem(rng), shape(rng));
                let op = Op::Fill {
                    shape: ty.shape.clone(),
                    elem: ty.elem,
                    value: scalar(rng),
                };
                self.push(rng, op, vec![], vec![ty]);
            }
            _ => {
                let axes: Vec<usize> = (0..t.rank()).filter(|_| rng.chance(60)).collect();
                let (mut starts, mut ends, mut steps) = (vec![], vec![], vec![]);
                let mut shape = t.shape.clone();
                for &a in &axes {
                    match t.shape[a].as_static() {
                        Some(d) => {
                            let d = d as i64;
                            let bound = |rng: &mut Rng| match rng.below(8) {
                                0 => i64::MAX,
                                1 => i64::MIN,
                                _ => rng.below(2 * d as usize + 5) as i64 - d - 2,
                            };
                            let (s, e) = (bound(rng), bound(rng));
                            let st = rng.pick(&[-2i64, -1, 1, 1, 2, 3]);
                            shape[a] =
                                Dim::Static(slice_len(d.into(), s.into(), e.into(), st.into()));
                            starts.push(s);
                            ends.push(e);
                            steps.push(st);
                        }
                        None => {
                            starts.push(0);
                            ends.push(i64::MAX);
                            steps.push(1);
                        }
                    }
                }
                let op = Op::Slice {
                    axes,
                    starts,
                    ends,
                    steps,
                };
                self.push(rng, op, vec![v], vec![TensorType::new(t.elem, shape)]);
            }
        }
    }
}

fn build(graph_seed: u64, inputs: &[u64], steps: &[u64]) -> Graph {
    let rng = &mut Rng(graph_seed);
    let gname = name(rng).unwrap_or_else(|| "g".into());
    let mut b = Builder {
        g: Graph::new(gname),
        values: Vec::new(),
    };
    // Zero, one or two meshes (the printer keeps their order).
    for k in 0..rng.below(3) {
        let shape: Vec<u32> = (0..1 + rng.below(3))
            .map(|_| 1 + rng.below(3) as u32)
            .collect();
        let n: u32 = shape.iter().product();
        b.g.meshes.push(Mesh {
            name: format!("{}{k}", name(rng).unwrap_or_else(|| "mesh".into())),
            shape,
            devices: (0..n).map(|i| format!("dev \"{i}\"")).collect(),
        });
    }
    for &s in inputs {
        let r = &mut Rng(s);
        let ty = TensorType::new(elem(r), shape(r));
        let rank = ty.rank();
        let v = b.g.add_input(name(r), ty);
        b.g.value_mut(v).sharding = sharding(r, rank);
        b.values.push(v);
    }
    for &s in steps {
        b.step(s);
    }
    let outs = (0..1 + rng.below(3)).map(|_| rng.pick(&b.values)).collect();
    b.g.set_outputs(outs);
    b.g
}

/// The structure of a graph, with values and constants named as the printer names them.
fn summary(g: &Graph) -> Vec<String> {
    let names = text::value_names(g);
    let n = |vs: &[ValueId]| {
        vs.iter()
            .map(|v| names[v.index()].clone())
            .collect::<Vec<_>>()
    };
    let mut out = vec![format!("graph {:?} {:?}", g.name, g.meshes)];
    for ((_, c), cname) in g.consts().zip(text::const_names(g)) {
        out.push(format!("const {cname:?} {:?} {:?}", c.ty, &c.data[..]));
    }
    for &v in g.inputs() {
        let d = g.value(v);
        out.push(format!(
            "input {:?} {:?} {:?}",
            names[v.index()],
            d.ty,
            d.sharding
        ));
    }
    for &o in g.ops() {
        let d = g.op(o);
        let results: Vec<_> = d
            .results
            .iter()
            .map(|&v| (g.value(v).ty.clone(), g.value(v).sharding.clone()))
            .collect();
        out.push(format!(
            "{:?} {:?} -> {:?} {:?} {:?} {:?}",
            d.op,
            n(&d.operands),
            n(&d.results),
            results,
            d.device,
            d.loc
        ));
    }
    out.push(format!("return {:?}", n(g.outputs())));
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn print_parse_print_is_a_fixpoint(
        graph_seed in any::<u64>(),
        inputs in prop::collection::vec(any::<u64>(), 1..4),
        steps in prop::collection::vec(any::<u64>(), 0..24),
    ) {
        let g = build(graph_seed, &inputs, &steps);
        let printed = text::print(&g);
        let parsed = match text::parse(&printed, None) {
            Ok(p) => p,
            Err(e) => return Err(TestCaseError::fail(format!("{e}\n{printed}"))),
        };
        prop_assert_eq!(text::print(&parsed), printed.clone());
        prop_assert_eq!(summary(&parsed), summary(&g), "{}", printed);
    }
}

#[test]
fn slice_len_matches_numpy() {
    // numpy: len(range(10)[s:e:st])
    assert_eq!(slice_len(10, 1, 3, 1), 2);
    assert_eq!(slice_len(10, -1, -11, -1), 10);
    assert_eq!(slice_len(6, -1, -7, -1), 6);
    assert_eq!(slice_len(6, 0, -1, 2), 3);
    assert_eq!(slice_len(5, 4, 0, 1), 0);
    assert_eq!(slice_len(5, i64::MAX.into(), i64::MIN.into(), -2), 3);
}
