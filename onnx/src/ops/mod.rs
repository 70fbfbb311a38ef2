//! ONNX operators: one registration function per op family maps op types to builders.
//!
//! A builder reads the node's inputs and attributes and emits IR ops through [`Ctx::emit`],
//! returning one IR value per ONNX output (an optional trailing output the builder does not
//! produce must not be used by the model). Builders return `Err(String)`; the driver wraps it
//! with the node's name and op type.

mod attention;
mod control;
mod elementwise;
mod index;
mod linalg;
mod loss;
mod nn;
mod reduce;
mod rnn;
mod shape;
mod training;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use tessera_ir::{ElemType, Tensor, ValueId};

use crate::import::Ctx;
use crate::proto::{
    AttributeProto, GraphProto, NodeProto, TensorProto, attribute_proto::AttributeType,
};

/// A builder: imports one node.
pub(crate) type Builder = fn(&mut Ctx<'_>, &Node<'_>) -> Result<Vec<ValueId>, String>;

/// How many inputs an op takes from an opset on, as its ONNX schema says: `(since, min, max)`.
/// An op's rows are sorted by `since`; the row in force at an opset is the last one whose
/// `since` is not above it. `min` counts the leading inputs that must be given (not empty),
/// `max` the inputs there may be at most ([`VARIADIC`]: any number). Each op family lists
/// its ops' rows in an `ARITY` table next to its `register`; onnx.checker's rule.
pub(crate) type Arity = (i64, usize, usize);

/// The `max` of a variadic op's [`Arity`] (`Concat`, `Sum`, `Max`, ...): unbounded.
pub(crate) const VARIADIC: usize = usize::MAX;

/// The op table: op type -> (first supported opset, builder), and the input counts.
pub(crate) struct Registry {
    ops: BTreeMap<&'static str, (i64, Builder)>,
    arity: BTreeMap<&'static str, &'static [Arity]>,
}

impl Registry {
    /// Registers `op_type`, supported from opset `since` (use 1 for "every opset").
    pub(crate) fn add(&mut self, op_type: &'static str, since: i64, b: Builder) {
        let previous = self.ops.insert(op_type, (since, b));
        assert!(previous.is_none(), "ONNX op {op_type} registered twice");
    }

    /// Registers the input counts of a family's ops (its `ARITY` table).
    pub(crate) fn arities(&mut self, table: &'static [(&'static str, &'static [Arity])]) {
        for &(op_type, rows) in table {
            let previous = self.arity.insert(op_type, rows);
            assert!(previous.is_none(), "ONNX op {op_type} has two arity rows");
        }
    }
}

/// The `(min, max)` input counts of `op_type` at `opset`, when the tables know it.
pub(crate) fn arity(op_type: &str, opset: i64) -> Option<(usize, usize)> {
    let rows = registry().arity.get(op_type)?;
    rows.iter()
        .rev()
        .find(|(since, _, _)| *since <= opset)
        .map(|&(_, min, max)| (min, max))
}

/// onnx.checker's node rules that do not depend on the op's meaning: no attribute given
/// twice, and the number of inputs the op's schema allows at `opset`.
fn check_node(node: &Node<'_>, opset: i64) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for a in &node.p.attribute {
        if !seen.insert(a.name()) {
            return Err(format!("attribute `{}` is given twice", a.name()));
        }
    }
    let Some((min, max)) = arity(node.op_type(), opset) else {
        return Ok(());
    };
    let given = node.num_inputs();
    if given > max {
        return Err(format!(
            "{} inputs given, but {} takes at most {max} at opset {opset}",
            given,
            node.op_type()
        ));
    }
    if let Some(i) = (0..min).find(|&i| !node.has_input(i)) {
        return Err(format!(
            "input {i} is missing, but {} takes at least {min} input(s) at opset {opset}",
            node.op_type()
        ));
    }
    Ok(())
}

fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = Registry {
            ops: BTreeMap::new(),
            arity: BTreeMap::new(),
        };
        attention::register(&mut r);
        control::register(&mut r);
        elementwise::register(&mut r);
        index::register(&mut r);
        linalg::register(&mut r);
        loss::register(&mut r);
        nn::register(&mut r);
        reduce::register(&mut r);
        rnn::register(&mut r);
        shape::register(&mut r);
        r
    })
}

/// Every default-domain op type the importer supports, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    registry().ops.keys().copied().collect()
}

/// Whether the importer supports `op_type` of the default domain at `opset`.
pub(crate) fn is_supported(op_type: &str, opset: i64) -> bool {
    registry()
        .ops
        .get(op_type)
        .is_some_and(|(since, _)| opset >= *since)
}

/// Whether the importer supports `op_type` of the non-default domain `domain` (opset 1 of
/// `ai.onnx.preview.training`: its optimizers).
pub(crate) fn is_supported_in(domain: &str, op_type: &str) -> bool {
    domain == training::DOMAIN && training::OPS.iter().any(|(n, _)| *n == op_type)
}

/// Imports one node.
pub(crate) fn build(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    if node.p.domain() == training::DOMAIN {
        return match training::OPS.iter().find(|(n, _)| *n == node.op_type()) {
            Some((_, b)) => b(cx, node),
            None => Err("unsupported operator".into()),
        };
    }
    match registry().ops.get(node.op_type()) {
        Some((_, b)) => {
            check_node(node, cx.opset)?;
            b(cx, node)
        }
        None => Err("unsupported operator".into()),
    }
}

/// How a node is named in messages: its name, or its op type and first output.
pub(crate) fn node_display_name(n: &NodeProto) -> String {
    if !n.name().is_empty() {
        n.name().to_string()
    } else {
        format!(
            "{} -> {}",
            n.op_type(),
            n.output.first().map_or("", String::as_str)
        )
    }
}

/// A node being imported, with typed attribute access.
pub(crate) struct Node<'a> {
    /// The decoded node.
    pub p: &'a NodeProto,
}

impl<'a> Node<'a> {
    pub(crate) fn new(p: &'a NodeProto) -> Self {
        Node { p }
    }

    pub(crate) fn display_name(&self) -> String {
        node_display_name(self.p)
    }

    pub(crate) fn op_type(&self) -> &str {
        self.p.op_type()
    }

    /// The number of inputs, trailing absent ones excluded.
    pub(crate) fn num_inputs(&self) -> usize {
        self.p
            .input
            .iter()
            .rposition(|s| !s.is_empty())
            .map_or(0, |i| i + 1)
    }

    /// The number of outputs the model uses (trailing unnamed ones excluded).
    pub(crate) fn num_outputs(&self) -> usize {
        self.p
            .output
            .iter()
            .rposition(|s| !s.is_empty())
            .map_or(0, |i| i + 1)
    }

    /// Whether optional input `i` is given.
    pub(crate) fn has_input(&self, i: usize) -> bool {
        self.p.input.get(i).is_some_and(|s| !s.is_empty())
    }

    fn attr(&self, name: &str) -> Option<&'a AttributeProto> {
        self.p.attribute.iter().find(|a| a.name() == name)
    }

    fn typed(&self, name: &str, want: AttributeType) -> Result<Option<&'a AttributeProto>, String> {
        match self.attr(name) {
            None => Ok(None),
            Some(a) if a.r#type() == want || a.r#type() == AttributeType::Undefined => Ok(Some(a)),
            Some(a) => Err(format!(
                "attribute `{name}` must be {}, got {}",
                want.as_str_name(),
                a.r#type().as_str_name()
            )),
        }
    }

    /// An int attribute, if present.
    pub(crate) fn attr_i(&self, name: &str) -> Result<Option<i64>, String> {
        Ok(self.typed(name, AttributeType::Int)?.map(AttributeProto::i))
    }

    /// An int attribute with a default.
    pub(crate) fn attr_i_or(&self, name: &str, default: i64) -> Result<i64, String> {
        Ok(self.attr_i(name)?.unwrap_or(default))
    }

    /// A float attribute with a default.
    pub(crate) fn attr_f_or(&self, name: &str, default: f32) -> Result<f32, String> {
        Ok(self
            .typed(name, AttributeType::Float)?
            .map_or(default, AttributeProto::f))
    }

    /// A float attribute, if present.
    pub(crate) fn attr_f(&self, name: &str) -> Result<Option<f32>, String> {
        Ok(self
            .typed(name, AttributeType::Float)?
            .map(AttributeProto::f))
    }

    /// An ints attribute, if present.
    pub(crate) fn attr_ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        Ok(self
            .typed(name, AttributeType::Ints)?
            .map(|a| a.ints.clone()))
    }

    /// A floats attribute, if present.
    pub(crate) fn attr_floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        Ok(self
            .typed(name, AttributeType::Floats)?
            .map(|a| a.floats.clone()))
    }

    /// A string attribute, if present.
    pub(crate) fn attr_s(&self, name: &str) -> Result<Option<String>, String> {
        match self.typed(name, AttributeType::String)? {
            None => Ok(None),
            Some(a) => String::from_utf8(a.s().to_vec())
                .map(Some)
                .map_err(|_| format!("attribute `{name}` is not valid UTF-8")),
        }
    }

    /// A strings attribute, if present.
    pub(crate) fn attr_strings(&self, name: &str) -> Result<Option<Vec<String>>, String> {
        match self.typed(name, AttributeType::Strings)? {
            None => Ok(None),
            Some(a) => a
                .strings
                .iter()
                .map(|s| {
                    String::from_utf8(s.to_vec())
                        .map_err(|_| format!("attribute `{name}` is not valid UTF-8"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    /// A tensor attribute, if present.
    pub(crate) fn attr_t(&self, name: &str) -> Result<Option<&'a TensorProto>, String> {
        Ok(self
            .typed(name, AttributeType::Tensor)?
            .and_then(|a| a.t.as_ref()))
    }

    /// A graph attribute, if present.
    pub(crate) fn attr_g(&self, name: &str) -> Result<Option<&'a GraphProto>, String> {
        Ok(self
            .typed(name, AttributeType::Graph)?
            .and_then(|a| a.g.as_ref()))
    }

    /// Names of all attributes given on the node.
    pub(crate) fn attr_names(&self) -> impl Iterator<Item = &str> {
        self.p.attribute.iter().map(AttributeProto::name)
    }
}

/// Required input `i` of a node.
pub(crate) fn input(cx: &mut Ctx<'_>, node: &Node<'_>, i: usize) -> Result<ValueId, String> {
    match node.p.input.get(i) {
        Some(name) if !name.is_empty() => cx.lookup(name),
        _ => Err(format!("input {i} is required")),
    }
}

/// The contents of optional input `i` when given and known at import time.
pub(crate) fn known_input(cx: &mut Ctx<'_>, node: &Node<'_>, i: usize) -> Option<Tensor> {
    match node.p.input.get(i) {
        Some(name) if !name.is_empty() => cx.known_name(name),
        _ => None,
    }
}

/// Optional input `i` of a node.
pub(crate) fn opt_input(
    cx: &mut Ctx<'_>,
    node: &Node<'_>,
    i: usize,
) -> Result<Option<ValueId>, String> {
    if node.has_input(i) {
        input(cx, node, i).map(Some)
    } else {
        Ok(None)
    }
}

/// All given inputs of a node (for variadic ops).
pub(crate) fn inputs(cx: &mut Ctx<'_>, node: &Node<'_>) -> Result<Vec<ValueId>, String> {
    (0..node.num_inputs()).map(|i| input(cx, node, i)).collect()
}

/// The contents of input `i`, which must be known at import time (a constant or a folded
/// shape computation).
pub(crate) fn const_input(
    cx: &mut Ctx<'_>,
    node: &Node<'_>,
    i: usize,
    what: &str,
) -> Result<Tensor, String> {
    let known = match node.p.input.get(i) {
        Some(name) if !name.is_empty() => {
            let known = cx.known_name(name);
            if known.is_none() {
                // Report an undefined name as such.
                cx.lookup(name)?;
                if let Some(bytes) = cx.over_fold_limit(name) {
                    return Err(format!(
                        "input {i} ({what}) must be known at import time, but `{name}` takes \
                         {bytes} bytes, more than the import-time limit of {} bytes",
                        cx.fold_limit_bytes
                    ));
                }
            }
            known
        }
        _ => return Err(format!("input {i} ({what}) is required")),
    };
    known.ok_or_else(|| {
        format!(
            "input {i} ({what}) must be known at import time: a constant, a value computed from \
             static shapes (bind symbolic input dimensions with --input-shape), or a graph input \
             whose value is given (`tessera run` specializes on its inputs)"
        )
    })
}

/// A known integer input as `i64`s.
pub(crate) fn const_ints(
    cx: &mut Ctx<'_>,
    node: &Node<'_>,
    i: usize,
    what: &str,
) -> Result<Vec<i64>, String> {
    let t = const_input(cx, node, i, what)?;
    tensor_ints(&t).ok_or_else(|| {
        format!(
            "input {i} ({what}) must be an integer tensor, got {}",
            t.elem()
        )
    })
}

/// An integer tensor's elements as `i64`s (row-major).
pub(crate) fn tensor_ints(t: &Tensor) -> Option<Vec<i64>> {
    Some(match t {
        Tensor::I64(a) => a.iter().copied().collect(),
        Tensor::I32(a) => a.iter().map(|&x| i64::from(x)).collect(),
        Tensor::I16(a) => a.iter().map(|&x| i64::from(x)).collect(),
        Tensor::I8(a) => a.iter().map(|&x| i64::from(x)).collect(),
        Tensor::U8(a) => a.iter().map(|&x| i64::from(x)).collect(),
        _ => return None,
    })
}

/// Normalizes an ONNX axis (negative counts from the end) for a tensor of rank `rank`.
pub(crate) fn norm_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

/// Normalizes a set of axes: each in range, sorted, without duplicates.
pub(crate) fn norm_axes(axes: &[i64], rank: usize) -> Result<Vec<usize>, String> {
    let mut out = axes
        .iter()
        .map(|&a| norm_axis(a, rank))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_unstable();
    let before = out.len();
    out.dedup();
    if out.len() != before {
        return Err(format!("axes {axes:?} repeat an axis"));
    }
    Ok(out)
}

/// The element type of a value.
pub(crate) fn elem(cx: &Ctx<'_>, v: ValueId) -> ElemType {
    cx.ty(v).elem
}

/// Converts `v` to `elem` unless it has that type already.
pub(crate) fn cast_to(cx: &mut Ctx<'_>, v: ValueId, to: ElemType) -> Result<ValueId, String> {
    if cx.ty(v).elem == to {
        Ok(v)
    } else {
        cx.emit1(tessera_ir::Op::Cast { to }, &[v])
    }
}

/// A scalar constant of element type `elem` holding `x`.
pub(crate) fn scalar(cx: &mut Ctx<'_>, elem: ElemType, x: f64) -> Result<ValueId, String> {
    let t = Tensor::F64(ndarray::ArrayD::from_elem(ndarray::IxDyn(&[]), x));
    let t = tessera_ir::interp::eval_op(&tessera_ir::Op::Cast { to: elem }, &[&t])
        .map_err(|e| e.to_string())?;
    let hint = node_hint(cx);
    Ok(cx.constant_tensor(
        &hint,
        t.into_iter().next().ok_or("cast produced no result")?,
    ))
}

fn node_hint(cx: &Ctx<'_>) -> String {
    format!("{}_c", cx.hint())
}

/// A known tensor as a constant value.
pub(crate) fn constant(cx: &mut Ctx<'_>, t: Tensor) -> ValueId {
    let hint = node_hint(cx);
    cx.constant_tensor(&hint, t)
}

/// An i64 `0..len` laid along axis `axis` of a rank-`rank` tensor (extent 1 elsewhere): a
/// constant when it is small (at most [`crate::import::FOLD_LIMIT`] elements, within
/// [`crate::ImportOptions::fold_limit_bytes`]), else a `range` op (reshaped), so that a table
/// as long as an extent the model controls (a `OneHot` depth, an `EyeLike` shape) is never
/// built at import: the op computes it when the model runs (a `OneHot` of depth 2^27 built a
/// 1 GiB constant for seconds: found by fuzzing).
pub(crate) fn iota(
    cx: &mut Ctx<'_>,
    len: u64,
    axis: usize,
    rank: usize,
) -> Result<ValueId, String> {
    let extent = usize::try_from(len).map_err(|_| format!("extent {len} is too large"))?;
    let end = i64::try_from(len).map_err(|_| format!("extent {len} is too large"))?;
    if len <= crate::import::FOLD_LIMIT && cx.fits_fold_limit_count(len, ElemType::I64) {
        let mut shape = vec![1usize; rank];
        shape[axis] = extent;
        let data = (0..end).collect::<Vec<_>>();
        let a = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&shape), data)
            .map_err(|e| e.to_string())?;
        return Ok(constant(cx, Tensor::I64(a)));
    }
    let i64_scalar = |x: i64| Tensor::I64(ndarray::arr0(x).into_dyn());
    let start = constant(cx, i64_scalar(0));
    let limit = constant(cx, i64_scalar(end));
    let delta = constant(cx, i64_scalar(1));
    let r = cx.emit1(
        tessera_ir::Op::Range {
            size: tessera_ir::Dim::Static(len),
        },
        &[start, limit, delta],
    )?;
    let mut shape = vec![tessera_ir::Dim::Static(1); rank];
    shape[axis] = tessera_ir::Dim::Static(len);
    reshape(cx, r, shape)
}

/// An i64 vector as a tensor.
pub(crate) fn i64_tensor(v: &[i64]) -> Tensor {
    Tensor::I64(
        ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(&[v.len()]), v.to_vec())
            .expect("1-D shape matches"),
    )
}

/// `v` reshaped to `shape` (same element count).
pub(crate) fn reshape(
    cx: &mut Ctx<'_>,
    v: ValueId,
    shape: Vec<tessera_ir::Dim>,
) -> Result<ValueId, String> {
    if cx.ty(v).shape == shape {
        return Ok(v);
    }
    cx.emit1(tessera_ir::Op::Reshape { shape }, &[v])
}

/// `v[start..end]` along `axis`.
pub(crate) fn slice_axis(
    cx: &mut Ctx<'_>,
    v: ValueId,
    axis: usize,
    start: i64,
    end: i64,
) -> Result<ValueId, String> {
    cx.emit1(
        tessera_ir::Op::Slice {
            axes: vec![axis],
            starts: vec![start],
            ends: vec![end],
            steps: vec![1],
        },
        &[v],
    )
}

/// `v` with its axes permuted (result axis `i` is axis `perm[i]`).
pub(crate) fn transpose(cx: &mut Ctx<'_>, v: ValueId, perm: Vec<usize>) -> Result<ValueId, String> {
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok(v);
    }
    cx.emit1(tessera_ir::Op::Transpose { perm }, &[v])
}

/// `op(x)` for a unary elementwise op.
pub(crate) fn un(cx: &mut Ctx<'_>, op: tessera_ir::UnaryOp, x: ValueId) -> Result<ValueId, String> {
    cx.emit1(tessera_ir::Op::Unary(op), &[x])
}

/// `op(a, b)` for a binary elementwise op (broadcasting).
pub(crate) fn bin(
    cx: &mut Ctx<'_>,
    op: tessera_ir::BinaryOp,
    a: ValueId,
    b: ValueId,
) -> Result<ValueId, String> {
    cx.emit1(tessera_ir::Op::Binary(op), &[a, b])
}

#[cfg(test)]
mod tests {
    use super::{VARIADIC, arity, registry};

    #[test]
    fn every_registered_op_has_an_arity_and_every_arity_an_op() {
        let r = registry();
        for op in r.ops.keys() {
            assert!(r.arity.contains_key(op), "{op} has no ARITY row");
        }
        for (op, rows) in &r.arity {
            assert!(r.ops.contains_key(op), "ARITY row for unregistered {op}");
            assert!(!rows.is_empty(), "{op}");
            assert!(
                rows.windows(2).all(|w| w[0].0 < w[1].0),
                "{op}: rows not sorted by opset"
            );
            assert!(rows.iter().all(|&(_, lo, hi)| lo <= hi), "{op}: min > max");
            // Rows start at the schema's first version, which may be after the opset the
            // importer registers the op from (Erf is a schema from opset 9; the unary ops are
            // registered from 1): below it there is no schema and no check.
            assert!(rows[0].0 >= 1, "{op}");
        }
    }

    /// Spot checks, each against `onnx.defs.get_schema(op, opset).min_input / max_input`
    /// (onnx 1.23.2), covering ops whose input counts changed between opsets.
    #[test]
    fn arities_match_the_onnx_schemas() {
        let cases: &[(&str, i64, usize, usize)] = &[
            ("Relu", 17, 1, 1),
            ("Add", 7, 2, 2),
            ("Gemm", 9, 3, 3),
            ("Gemm", 13, 2, 3),
            ("Clip", 10, 1, 1),
            ("Clip", 13, 1, 3),
            ("Dropout", 10, 1, 1),
            ("Dropout", 13, 1, 3),
            ("Concat", 13, 1, VARIADIC),
            ("Sum", 13, 1, VARIADIC),
            ("Max", 13, 1, VARIADIC),
            ("Min", 13, 1, VARIADIC),
            ("Mean", 13, 1, VARIADIC),
            ("Einsum", 12, 1, VARIADIC),
            ("Pad", 10, 1, 1),
            ("Pad", 13, 2, 3),
            ("Pad", 18, 2, 4),
            ("Resize", 10, 2, 2),
            ("Resize", 11, 3, 4),
            ("Resize", 19, 1, 4),
            ("Slice", 9, 1, 1),
            ("Slice", 10, 3, 5),
            ("Split", 11, 1, 1),
            ("Split", 18, 1, 2),
            ("Squeeze", 11, 1, 1),
            ("Squeeze", 13, 1, 2),
            ("Unsqueeze", 13, 2, 2),
            ("ReduceSum", 11, 1, 1),
            ("ReduceSum", 13, 1, 2),
            ("ReduceMean", 17, 1, 1),
            ("ReduceMean", 18, 1, 2),
            ("TopK", 9, 1, 1),
            ("TopK", 11, 2, 2),
            ("Upsample", 8, 1, 1),
            ("Upsample", 9, 2, 2),
            ("Tile", 7, 2, 2),
            ("Reshape", 7, 2, 2),
            ("LSTM", 14, 3, 8),
            ("GRU", 14, 3, 6),
            ("Attention", 23, 3, 6),
            ("Attention", 24, 3, 7),
            ("RotaryEmbedding", 23, 3, 4),
            ("BatchNormalization", 15, 5, 5),
            ("Conv", 11, 2, 3),
            ("LayerNormalization", 17, 2, 3),
            ("Constant", 13, 0, 0),
            ("If", 13, 1, 1),
            ("Where", 16, 3, 3),
            ("Range", 11, 3, 3),
            ("Trilu", 14, 1, 2),
            ("NegativeLogLikelihoodLoss", 13, 2, 3),
        ];
        for &(op, opset, min, max) in cases {
            assert_eq!(arity(op, opset), Some((min, max)), "{op} at opset {opset}");
        }
    }
}
