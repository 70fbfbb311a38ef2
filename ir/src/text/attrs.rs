//! Op names and attributes: one entry per op in [`op_attrs`] (printing) and [`build_op`]
//! (parsing), plus name tables for the attribute enums.
//!
//! Keys are kebab-case. The printer emits every attribute, sorted by key; `Option` fields are
//! left out when `None`. The parser takes them in any order and reports unknown, duplicate
//! and missing keys, and values of the wrong kind.

use super::ParseError;
use super::lexer::{Pos, is_plain_ident, quote};
use crate::graph::Graph;
use crate::op::{
    ArgKind, BinaryOp, ConvAttrs, CoordTransform, DepthToSpaceMode, NearestMode, Op, PadMode,
    PoolAttrs, PoolKind, ReduceKind, ResizeMode, ScanAttrs, ScatterReduction, UnaryOp,
};
use crate::types::{Dim, ElemType, Scalar, format_f64};

/// Every op name the text format knows, `const` included: the names `Op::name` gives, which
/// target files use for supported ops and efficiency factors.
#[rustfmt::skip]
pub const OP_NAMES: &[&str] = &[
    "const", "abs", "neg", "sign", "exp", "log", "sqrt", "reciprocal", "sin", "cos", "tan",
    "asin", "acos", "atan", "tanh", "sigmoid", "erf", "relu", "ceil", "floor", "round",
    "softplus", "softsign", "mish", "hard-swish", "gelu", "elu", "leaky-relu", "selu",
    "hard-sigmoid", "not", "is-nan", "add", "sub", "mul", "div", "pow", "mod", "fmod", "max",
    "min", "prelu", "and", "or", "xor", "equal", "less", "less-equal", "greater", "greater-equal",
    "shift-left", "shift-right", "select", "cast", "clip", "matmul", "gemm", "conv", "conv-transpose", "max-pool", "avg-pool",
    "reduce-sum", "reduce-mean", "reduce-max", "reduce-min", "reduce-prod", "reduce-l1",
    "reduce-l2", "reduce-log-sum-exp", "reduce-sum-square", "argmax", "argmin", "softmax",
    "log-softmax", "cumsum", "layer-norm", "batch-norm", "instance-norm", "lrn", "reshape",
    "transpose", "expand", "concat", "split", "slice", "pad", "tile", "gather", "gather-elements",
    "gather-nd", "scatter-elements", "scatter-nd", "top-k", "trilu", "depth-to-space",
    "space-to-depth", "resize", "einsum", "shape", "size", "fill", "range", "random-uniform", "dropout", "transfer",
    "all-reduce", "all-gather", "all-slice", "reduce-scatter", "all-to-all", "if", "loop", "scan",
];

const PAD_MODES: &[(&str, PadMode)] = &[
    ("constant", PadMode::Constant),
    ("reflect", PadMode::Reflect),
    ("edge", PadMode::Edge),
    ("wrap", PadMode::Wrap),
];
const REDUCTIONS: &[(&str, ScatterReduction)] = &[
    ("none", ScatterReduction::None),
    ("add", ScatterReduction::Add),
    ("mul", ScatterReduction::Mul),
    ("max", ScatterReduction::Max),
    ("min", ScatterReduction::Min),
];
const D2S_MODES: &[(&str, DepthToSpaceMode)] = &[
    ("dcr", DepthToSpaceMode::Dcr),
    ("crd", DepthToSpaceMode::Crd),
];
const RESIZE_MODES: &[(&str, ResizeMode)] = &[
    ("nearest", ResizeMode::Nearest),
    ("linear", ResizeMode::Linear),
    ("cubic", ResizeMode::Cubic),
];
const COORDS: &[(&str, CoordTransform)] = &[
    ("half-pixel", CoordTransform::HalfPixel),
    ("pytorch-half-pixel", CoordTransform::PytorchHalfPixel),
    ("align-corners", CoordTransform::AlignCorners),
    ("asymmetric", CoordTransform::Asymmetric),
];
const NEAREST_MODES: &[(&str, NearestMode)] = &[
    ("round-prefer-floor", NearestMode::RoundPreferFloor),
    ("round-prefer-ceil", NearestMode::RoundPreferCeil),
    ("floor", NearestMode::Floor),
    ("ceil", NearestMode::Ceil),
];
const ELEMS: &[(&str, ElemType)] = &[
    ("f16", ElemType::F16),
    ("bf16", ElemType::BF16),
    ("f32", ElemType::F32),
    ("f64", ElemType::F64),
    ("i8", ElemType::I8),
    ("i16", ElemType::I16),
    ("i32", ElemType::I32),
    ("i64", ElemType::I64),
    ("u8", ElemType::U8),
    ("bool", ElemType::Bool),
];

/// The printed attributes of an op, sorted by key. `Op::Const` has none (its constant is
/// printed by the caller).
pub(crate) fn op_attrs(op: &Op) -> Vec<(&'static str, String)> {
    let mut a = Vec::new();
    let mut put = |k: &'static str, v: String| a.push((k, v));
    match op {
        Op::Const(_) | Op::Select | Op::MatMul | Op::Size => {}
        Op::Unary(u) => match *u {
            UnaryOp::Gelu { tanh } => put("tanh", tanh.to_string()),
            UnaryOp::Elu { alpha } | UnaryOp::LeakyRelu { alpha } => put("alpha", float(alpha)),
            UnaryOp::Selu { alpha, gamma } => {
                put("alpha", float(alpha));
                put("gamma", float(gamma));
            }
            UnaryOp::HardSigmoid { alpha, beta } => {
                put("alpha", float(alpha));
                put("beta", float(beta));
            }
            _ => {}
        },
        Op::Binary(_) => {}
        Op::Cast { to } => put("to", to.name().to_string()),
        Op::Clip { min, max } => {
            if let Some(x) = max {
                put("max", float(*x));
            }
            if let Some(x) = min {
                put("min", float(*x));
            }
        }
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => {
            put("alpha", float(*alpha));
            put("beta", float(*beta));
            put("trans-a", trans_a.to_string());
            put("trans-b", trans_b.to_string());
        }
        Op::Conv(c) => conv_attrs(c, &mut put),
        Op::ConvTranspose {
            conv,
            output_padding,
        } => {
            conv_attrs(conv, &mut put);
            put("output-padding", list(output_padding));
        }
        Op::Pool(p) => {
            put("ceil-mode", p.ceil_mode.to_string());
            put("count-include-pad", p.count_include_pad.to_string());
            put("dilations", list(&p.dilations));
            put("kernel", list(&p.kernel));
            put("pads", list(&p.pads));
            put("strides", list(&p.strides));
        }
        Op::Reduce {
            axes, keep_dims, ..
        } => {
            put("axes", list(axes));
            put("keep-dims", keep_dims.to_string());
        }
        Op::ArgReduce {
            axis,
            keep_dims,
            select_last,
            ..
        } => {
            put("axis", axis.to_string());
            put("keep-dims", keep_dims.to_string());
            put("select-last", select_last.to_string());
        }
        Op::Softmax { axis }
        | Op::LogSoftmax { axis }
        | Op::Concat { axis }
        | Op::Gather { axis }
        | Op::GatherElements { axis } => put("axis", axis.to_string()),
        Op::CumSum {
            axis,
            exclusive,
            reverse,
        } => {
            put("axis", axis.to_string());
            put("exclusive", exclusive.to_string());
            put("reverse", reverse.to_string());
        }
        Op::LayerNorm { axis, epsilon } => {
            put("axis", axis.to_string());
            put("epsilon", float(*epsilon));
        }
        Op::BatchNorm { epsilon } | Op::InstanceNorm { epsilon } => put("epsilon", float(*epsilon)),
        Op::Lrn {
            size,
            alpha,
            beta,
            bias,
        } => {
            put("alpha", float(*alpha));
            put("beta", float(*beta));
            put("bias", float(*bias));
            put("size", size.to_string());
        }
        Op::Reshape { shape } | Op::Expand { shape } => put("shape", dims(shape)),
        Op::Transpose { perm } => put("perm", list(perm)),
        Op::Split { axis, sizes } => {
            put("axis", axis.to_string());
            put("sizes", list(sizes));
        }
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            put("axes", list(axes));
            put("ends", list(ends));
            put("starts", list(starts));
            put("steps", list(steps));
        }
        Op::Pad { pads, mode, value } => {
            put("mode", name_of(PAD_MODES, mode).to_string());
            put("pads", list(pads));
            put("value", scalar(*value));
        }
        Op::Tile { repeats } => put("repeats", list(repeats)),
        Op::GatherNd { batch_dims } => put("batch-dims", batch_dims.to_string()),
        Op::ScatterElements { axis, reduction } => {
            put("axis", axis.to_string());
            put("reduction", name_of(REDUCTIONS, reduction).to_string());
        }
        Op::ScatterNd { reduction } => put("reduction", name_of(REDUCTIONS, reduction).to_string()),
        Op::TopK { k, axis, largest } => {
            put("axis", axis.to_string());
            put("k", k.to_string());
            put("largest", largest.to_string());
        }
        Op::Trilu { upper, k } => {
            put("k", k.to_string());
            put("upper", upper.to_string());
        }
        Op::DepthToSpace { block, mode } => {
            put("block", block.to_string());
            put("mode", name_of(D2S_MODES, mode).to_string());
        }
        Op::SpaceToDepth { block } => put("block", block.to_string()),
        Op::Resize {
            sizes,
            mode,
            coord,
            nearest,
            cubic_coeff,
        } => {
            put("coord", name_of(COORDS, coord).to_string());
            put("cubic-coeff", float(*cubic_coeff));
            put("mode", name_of(RESIZE_MODES, mode).to_string());
            put("nearest", name_of(NEAREST_MODES, nearest).to_string());
            put("sizes", list(sizes));
        }
        Op::Einsum { equation } => put("equation", quote(equation)),
        Op::Shape { start, end } => {
            put("end", end.to_string());
            put("start", start.to_string());
        }
        Op::Fill { shape, elem, value } => {
            put("elem", elem.name().to_string());
            put("shape", dims(shape));
            put("value", scalar(*value));
        }
        Op::Range { size } => put("size", dim(size)),
        Op::RandomUniform { shape, elem, salt } => {
            put("elem", elem.name().to_string());
            put("salt", salt.to_string());
            put("shape", dims(shape));
        }
        Op::Dropout { ratio } => put("ratio", float(*ratio)),
        Op::Transfer { from, to } => {
            put("from", quote(from));
            put("to", quote(to));
        }
        Op::AllReduce { axes }
        | Op::AllGather { axes }
        | Op::AllSlice { axes }
        | Op::ReduceScatter { axes }
        | Op::AllToAll { axes } => put("axes", list(axes)),
        Op::If { .. } => {}
        Op::Loop { carried, trip, .. } => {
            put("carried", carried.to_string());
            put("trip", dim(trip));
        }
        Op::Scan(sc) => {
            let dirs = |r: &[bool]| list(&r.iter().map(|&b| u64::from(b)).collect::<Vec<_>>());
            put("input-axes", list(&sc.input_axes));
            put("input-reverse", dirs(&sc.input_reverse));
            put("output-axes", list(&sc.output_axes));
            put("output-reverse", dirs(&sc.output_reverse));
            put("state", sc.state.to_string());
        }
    }
    a.sort_by_key(|&(k, _)| k);
    a
}

fn conv_attrs(c: &ConvAttrs, put: &mut impl FnMut(&'static str, String)) {
    put("dilations", list(&c.dilations));
    put("groups", c.groups.to_string());
    put("pads", list(&c.pads));
    put("strides", list(&c.strides));
}

/// Builds the op called `name` from its attributes; `None` when no op has that name.
/// `const` is not handled here. Attribute errors are collected in `a` (see [`Attrs::finish`]).
pub(crate) fn build_op(name: &str, a: &mut Attrs) -> Option<Op> {
    if let Some(&b) = BinaryOp::ALL.iter().find(|b| b.name() == name) {
        return Some(Op::Binary(b));
    }
    if let Some(&kind) = ReduceKind::ALL.iter().find(|r| r.op_name() == name) {
        return Some(Op::Reduce {
            kind,
            axes: a.list("axes"),
            keep_dims: a.bool("keep-dims"),
        });
    }
    let unary = |u| Some(Op::Unary(u));
    let conv = |a: &mut Attrs| ConvAttrs {
        strides: a.list("strides"),
        pads: a.list("pads"),
        dilations: a.list("dilations"),
        groups: a.int("groups"),
    };
    let pool = |a: &mut Attrs, kind| {
        Op::Pool(PoolAttrs {
            kind,
            kernel: a.list("kernel"),
            strides: a.list("strides"),
            pads: a.list("pads"),
            dilations: a.list("dilations"),
            ceil_mode: a.bool("ceil-mode"),
            count_include_pad: a.bool("count-include-pad"),
        })
    };
    let arg = |a: &mut Attrs, kind| Op::ArgReduce {
        kind,
        axis: a.int("axis"),
        keep_dims: a.bool("keep-dims"),
        select_last: a.bool("select-last"),
    };
    Some(match name {
        "abs" => return unary(UnaryOp::Abs),
        "neg" => return unary(UnaryOp::Neg),
        "sign" => return unary(UnaryOp::Sign),
        "exp" => return unary(UnaryOp::Exp),
        "log" => return unary(UnaryOp::Log),
        "sqrt" => return unary(UnaryOp::Sqrt),
        "reciprocal" => return unary(UnaryOp::Reciprocal),
        "sin" => return unary(UnaryOp::Sin),
        "cos" => return unary(UnaryOp::Cos),
        "tan" => return unary(UnaryOp::Tan),
        "asin" => return unary(UnaryOp::Asin),
        "acos" => return unary(UnaryOp::Acos),
        "atan" => return unary(UnaryOp::Atan),
        "tanh" => return unary(UnaryOp::Tanh),
        "sigmoid" => return unary(UnaryOp::Sigmoid),
        "erf" => return unary(UnaryOp::Erf),
        "relu" => return unary(UnaryOp::Relu),
        "ceil" => return unary(UnaryOp::Ceil),
        "floor" => return unary(UnaryOp::Floor),
        "round" => return unary(UnaryOp::Round),
        "softplus" => return unary(UnaryOp::Softplus),
        "softsign" => return unary(UnaryOp::Softsign),
        "mish" => return unary(UnaryOp::Mish),
        "hard-swish" => return unary(UnaryOp::HardSwish),
        "not" => return unary(UnaryOp::Not),
        "is-nan" => return unary(UnaryOp::IsNan),
        "gelu" => {
            return unary(UnaryOp::Gelu {
                tanh: a.bool("tanh"),
            });
        }
        "elu" => {
            return unary(UnaryOp::Elu {
                alpha: a.float("alpha"),
            });
        }
        "leaky-relu" => {
            return unary(UnaryOp::LeakyRelu {
                alpha: a.float("alpha"),
            });
        }
        "selu" => {
            return unary(UnaryOp::Selu {
                alpha: a.float("alpha"),
                gamma: a.float("gamma"),
            });
        }
        "hard-sigmoid" => {
            return unary(UnaryOp::HardSigmoid {
                alpha: a.float("alpha"),
                beta: a.float("beta"),
            });
        }
        "select" => Op::Select,
        "cast" => Op::Cast {
            to: a.enumeration("to", ELEMS),
        },
        "clip" => Op::Clip {
            min: a.opt_float("min"),
            max: a.opt_float("max"),
        },
        "matmul" => Op::MatMul,
        "gemm" => Op::Gemm {
            alpha: a.float("alpha"),
            beta: a.float("beta"),
            trans_a: a.bool("trans-a"),
            trans_b: a.bool("trans-b"),
        },
        "conv" => Op::Conv(conv(a)),
        "conv-transpose" => Op::ConvTranspose {
            conv: conv(a),
            output_padding: a.list("output-padding"),
        },
        "max-pool" => pool(a, PoolKind::Max),
        "avg-pool" => pool(a, PoolKind::Avg),
        "argmax" => arg(a, ArgKind::Max),
        "argmin" => arg(a, ArgKind::Min),
        "softmax" => Op::Softmax {
            axis: a.int("axis"),
        },
        "log-softmax" => Op::LogSoftmax {
            axis: a.int("axis"),
        },
        "cumsum" => Op::CumSum {
            axis: a.int("axis"),
            exclusive: a.bool("exclusive"),
            reverse: a.bool("reverse"),
        },
        "layer-norm" => Op::LayerNorm {
            axis: a.int("axis"),
            epsilon: a.float("epsilon"),
        },
        "batch-norm" => Op::BatchNorm {
            epsilon: a.float("epsilon"),
        },
        "instance-norm" => Op::InstanceNorm {
            epsilon: a.float("epsilon"),
        },
        "lrn" => Op::Lrn {
            size: a.int("size"),
            alpha: a.float("alpha"),
            beta: a.float("beta"),
            bias: a.float("bias"),
        },
        "reshape" => Op::Reshape {
            shape: a.dims("shape"),
        },
        "transpose" => Op::Transpose {
            perm: a.list("perm"),
        },
        "expand" => Op::Expand {
            shape: a.dims("shape"),
        },
        "concat" => Op::Concat {
            axis: a.int("axis"),
        },
        "split" => Op::Split {
            axis: a.int("axis"),
            sizes: a.list("sizes"),
        },
        "slice" => Op::Slice {
            axes: a.list("axes"),
            starts: a.list("starts"),
            ends: a.list("ends"),
            steps: a.list("steps"),
        },
        "pad" => Op::Pad {
            pads: a.list("pads"),
            mode: a.enumeration("mode", PAD_MODES),
            value: a.scalar("value"),
        },
        "tile" => Op::Tile {
            repeats: a.list("repeats"),
        },
        "gather" => Op::Gather {
            axis: a.int("axis"),
        },
        "gather-elements" => Op::GatherElements {
            axis: a.int("axis"),
        },
        "gather-nd" => Op::GatherNd {
            batch_dims: a.int("batch-dims"),
        },
        "scatter-elements" => Op::ScatterElements {
            axis: a.int("axis"),
            reduction: a.enumeration("reduction", REDUCTIONS),
        },
        "scatter-nd" => Op::ScatterNd {
            reduction: a.enumeration("reduction", REDUCTIONS),
        },
        "top-k" => Op::TopK {
            k: a.int("k"),
            axis: a.int("axis"),
            largest: a.bool("largest"),
        },
        "trilu" => Op::Trilu {
            upper: a.bool("upper"),
            k: a.int("k"),
        },
        "depth-to-space" => Op::DepthToSpace {
            block: a.int("block"),
            mode: a.enumeration("mode", D2S_MODES),
        },
        "space-to-depth" => Op::SpaceToDepth {
            block: a.int("block"),
        },
        "resize" => Op::Resize {
            sizes: a.list("sizes"),
            mode: a.enumeration("mode", RESIZE_MODES),
            coord: a.enumeration("coord", COORDS),
            nearest: a.enumeration("nearest", NEAREST_MODES),
            cubic_coeff: a.float("cubic-coeff"),
        },
        "einsum" => Op::Einsum {
            equation: a.string("equation"),
        },
        "shape" => Op::Shape {
            start: a.int("start"),
            end: a.int("end"),
        },
        "size" => Op::Size,
        "fill" => Op::Fill {
            shape: a.dims("shape"),
            elem: a.enumeration("elem", ELEMS),
            value: a.scalar("value"),
        },
        "range" => Op::Range {
            size: a.dim("size"),
        },
        "random-uniform" => Op::RandomUniform {
            shape: a.dims("shape"),
            elem: a.enumeration("elem", ELEMS),
            salt: a.int("salt"),
        },
        "dropout" => Op::Dropout {
            ratio: a.float("ratio"),
        },
        "transfer" => Op::Transfer {
            from: a.string("from"),
            to: a.string("to"),
        },
        "all-reduce" => Op::AllReduce {
            axes: a.list("axes"),
        },
        "all-gather" => Op::AllGather {
            axes: a.list("axes"),
        },
        "all-slice" => Op::AllSlice {
            axes: a.list("axes"),
        },
        "reduce-scatter" => Op::ReduceScatter {
            axes: a.list("axes"),
        },
        "all-to-all" => Op::AllToAll {
            axes: a.list("axes"),
        },
        // The regions follow the op line; the parser fills them in.
        "if" => Op::If {
            then_branch: Box::default(),
            else_branch: Box::default(),
        },
        "loop" => Op::Loop {
            carried: a.int("carried"),
            trip: a.dim("trip"),
            body: Box::default(),
        },
        "scan" => {
            let dirs = |v: Vec<u64>| v.into_iter().map(|d| d != 0).collect();
            Op::Scan(Box::new(ScanAttrs {
                state: a.int("state"),
                input_axes: a.list("input-axes"),
                input_reverse: dirs(a.list("input-reverse")),
                output_axes: a.list("output-axes"),
                output_reverse: dirs(a.list("output-reverse")),
                body: Graph::default(),
            }))
        }
        _ => return None,
    })
}

// ---- printing helpers ----

pub(crate) fn float(x: f64) -> String {
    format_f64(x)
}

fn list<T: ToString>(xs: &[T]) -> String {
    let items: Vec<String> = xs.iter().map(T::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// A dimension as printed in types and attributes: an integer, a bare symbol, or a quoted
/// symbol when it is not a plain identifier.
pub(crate) fn dim(d: &Dim) -> String {
    match d {
        Dim::Static(n) => n.to_string(),
        Dim::Sym(s) if is_plain_ident(s) => s.clone(),
        Dim::Sym(s) => quote(s),
    }
}

pub(crate) fn dims(ds: &[Dim]) -> String {
    let items: Vec<String> = ds.iter().map(dim).collect();
    format!("[{}]", items.join(", "))
}

fn scalar(s: Scalar) -> String {
    match s {
        Scalar::Int(i) => i.to_string(),
        Scalar::Float(x) => format_f64(x),
    }
}

fn name_of<T: PartialEq>(table: &[(&'static str, T)], v: &T) -> &'static str {
    table.iter().find(|(_, t)| t == v).map_or("?", |(n, _)| n)
}

/// Parses an element type name.
pub(crate) fn elem_from_name(name: &str) -> Option<ElemType> {
    ELEMS.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
}

// ---- parsing ----

/// A parsed attribute value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Val {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(String),
    Ident(String),
    List(Vec<(Val, Pos)>),
}

impl Val {
    fn kind(&self) -> &'static str {
        match self {
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Bool(_) => "a boolean",
            Val::Str(_) => "a string",
            Val::Ident(_) => "an identifier",
            Val::List(_) => "a list",
        }
    }

    fn as_float(&self) -> Option<f64> {
        match self {
            Val::Float(x) => Some(*x),
            Val::Int(i) => Some(*i as f64),
            Val::Ident(s) if s == "nan" => Some(f64::NAN),
            Val::Ident(s) if s == "inf" => Some(f64::INFINITY),
            _ => None,
        }
    }
}

/// One `key = value` of an attribute dictionary.
pub(crate) struct Entry {
    pub key: String,
    pub key_pos: Pos,
    pub val: Val,
    pub pos: Pos,
    pub used: bool,
}

/// The attributes of one op being parsed. Accessors never fail: they record the first error
/// and return a placeholder, so that [`Attrs::finish`] can report unknown keys (with
/// suggestions from the full set of keys the op asked for) before missing ones.
pub(crate) struct Attrs {
    op: String,
    op_pos: Pos,
    entries: Vec<Entry>,
    asked: Vec<&'static str>,
    missing: Option<ParseError>,
    bad: Option<ParseError>,
}

/// Integer attribute types.
pub(crate) trait IntAttr: TryFrom<i128> + Default {
    const WHAT: &'static str;
}
impl IntAttr for u64 {
    const WHAT: &'static str = "a non-negative integer";
}
impl IntAttr for usize {
    const WHAT: &'static str = "a non-negative integer";
}
impl IntAttr for u32 {
    const WHAT: &'static str = "a non-negative 32-bit integer";
}
impl IntAttr for i64 {
    const WHAT: &'static str = "a 64-bit integer";
}

impl Attrs {
    pub fn new(op: &str, op_pos: Pos, entries: Vec<Entry>) -> Attrs {
        Attrs {
            op: op.to_string(),
            op_pos,
            entries,
            asked: Vec::new(),
            missing: None,
            bad: None,
        }
    }

    fn get(&mut self, key: &'static str, required: bool) -> Option<(Val, Pos)> {
        self.asked.push(key);
        match self.entries.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.used = true;
                Some((e.val.clone(), e.pos))
            }
            None => {
                if required && self.missing.is_none() {
                    self.missing = Some(
                        self.op_pos
                            .error(format!("`{}` needs attribute `{key}`", self.op)),
                    );
                }
                None
            }
        }
    }

    fn bad(&mut self, pos: Pos, key: &str, what: &str, found: &str) {
        if self.bad.is_none() {
            self.bad = Some(pos.error(format!(
                "attribute `{key}` of `{}` must be {what}, found {found}",
                self.op
            )));
        }
    }

    fn convert<T: Default>(
        &mut self,
        key: &'static str,
        what: &str,
        f: impl Fn(&Val) -> Option<T>,
    ) -> T {
        let Some((v, pos)) = self.get(key, true) else {
            return T::default();
        };
        f(&v).unwrap_or_else(|| {
            self.bad(pos, key, what, &describe(&v));
            T::default()
        })
    }

    pub fn int<T: IntAttr>(&mut self, key: &'static str) -> T {
        self.convert(key, T::WHAT, int_of)
    }

    pub fn list<T: IntAttr>(&mut self, key: &'static str) -> Vec<T> {
        let what = format!("a list of {}s", T::WHAT.trim_start_matches("a "));
        self.convert(key, &what, |v| match v {
            Val::List(items) => items.iter().map(|(v, _)| int_of(v)).collect(),
            _ => None,
        })
    }

    pub fn float(&mut self, key: &'static str) -> f64 {
        self.convert(key, "a number", Val::as_float)
    }

    pub fn opt_float(&mut self, key: &'static str) -> Option<f64> {
        let (v, pos) = self.get(key, false)?;
        let x = v.as_float();
        if x.is_none() {
            self.bad(pos, key, "a number", &describe(&v));
        }
        x
    }

    pub fn bool(&mut self, key: &'static str) -> bool {
        self.convert(key, "`true` or `false`", |v| match v {
            Val::Bool(b) => Some(*b),
            _ => None,
        })
    }

    pub fn string(&mut self, key: &'static str) -> String {
        self.convert(key, "a string", |v| match v {
            Val::Str(s) => Some(s.clone()),
            _ => None,
        })
    }

    pub fn scalar(&mut self, key: &'static str) -> Scalar {
        self.convert(key, "a number", |v| {
            match v {
                Val::Int(i) => i64::try_from(*i).ok().map(Scalar::Int),
                Val::Bool(b) => Some(Scalar::Int(i64::from(*b))),
                v => v.as_float().map(Scalar::Float),
            }
            .map(Some)
        })
        .unwrap_or(Scalar::Int(0))
    }

    pub fn dim(&mut self, key: &'static str) -> Dim {
        self.convert(key, "a dimension (integer or symbol)", |v| {
            dim_of(v).map(Some)
        })
        .unwrap_or(Dim::Static(0))
    }

    pub fn dims(&mut self, key: &'static str) -> Vec<Dim> {
        self.convert(
            key,
            "a list of dimensions (integers or symbols)",
            |v| match v {
                Val::List(items) => items.iter().map(|(v, _)| dim_of(v)).collect(),
                _ => None,
            },
        )
    }

    pub fn enumeration<T: Copy>(&mut self, key: &'static str, table: &[(&'static str, T)]) -> T {
        let names: Vec<&str> = table.iter().map(|(n, _)| *n).collect();
        let what = format!("one of {}", names.join(", "));
        self.convert(key, &what, |v| match v {
            Val::Ident(s) => table.iter().find(|(n, _)| n == s).map(|&(_, t)| Some(t)),
            _ => None,
        })
        .unwrap_or(table[0].1)
    }

    /// Reports, in this order: an unknown key, a value of the wrong kind, a missing key.
    pub fn finish(self) -> Result<(), ParseError> {
        if let Some(e) = self.entries.iter().find(|e| !e.used) {
            let mut msg = format!("unknown attribute `{}` for `{}`", e.key, self.op);
            if self.asked.is_empty() {
                msg.push_str(" (it takes no attributes)");
            } else if let Some(best) = closest(&e.key, &self.asked) {
                msg.push_str(&format!("; did you mean `{best}`?"));
            } else {
                let mut keys = self.asked.clone();
                keys.sort_unstable();
                keys.dedup();
                msg.push_str(&format!(" (expected {})", keys.join(", ")));
            }
            return Err(e.key_pos.error(msg));
        }
        match (self.bad, self.missing) {
            (Some(e), _) | (None, Some(e)) => Err(e),
            (None, None) => Ok(()),
        }
    }
}

fn int_of<T: IntAttr>(v: &Val) -> Option<T> {
    match v {
        Val::Int(i) => T::try_from(*i).ok(),
        _ => None,
    }
}

fn dim_of(v: &Val) -> Option<Dim> {
    match v {
        Val::Int(i) => u64::try_from(*i).ok().map(Dim::Static),
        Val::Ident(s) | Val::Str(s) => Some(Dim::Sym(s.clone())),
        _ => None,
    }
}

fn describe(v: &Val) -> String {
    match v {
        Val::Int(i) => format!("{} `{i}`", v.kind()),
        Val::Ident(s) => format!("{} `{s}`", v.kind()),
        _ => v.kind().to_string(),
    }
}

/// The Levenshtein distance between two strings.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The candidate closest to `word` (first on ties), if reasonably close.
pub(crate) fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let (d, best) = candidates
        .iter()
        .map(|c| (edit_distance(word, c), *c))
        .min_by_key(|p| p.0)?;
    (d <= word.chars().count().max(3) / 2 + 1).then_some(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every listed name builds an op of that name, so suggestions never name a ghost op.
    #[test]
    fn op_names_table_matches_build_op() {
        let pos = Pos { line: 1, col: 1 };
        for &name in OP_NAMES.iter().filter(|&&n| n != "const") {
            let mut a = Attrs::new(name, pos, Vec::new());
            let op = build_op(name, &mut a).unwrap_or_else(|| panic!("`{name}` does not build"));
            assert_eq!(op.name(), name);
        }
        let mut sorted = OP_NAMES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), OP_NAMES.len(), "duplicate names");
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            closest("keep_dims", &["axes", "keep-dims"]),
            Some("keep-dims")
        );
        assert_eq!(closest("zzzzzzzz", &["axes", "keep-dims"]), None);
        assert_eq!(edit_distance("relux", "relu"), 1);
    }
}
