//! The work an op does, from its operand and result shapes alone: floating-point (or integer)
//! operations and bytes moved to and from memory. The roofline cost model turns this into
//! time on a device.
//!
//! [`op_work`] reads only the op's attributes and the types of its operands and results; it
//! never looks at data. Every extent it uses must be static: a symbolic one is a
//! [`WorkError::SymbolicShape`] naming the op and the value. Values a formula does not use
//! (a `reshape`'s operand, a `shape`'s operand) may stay symbolic. All arithmetic is in
//! `f64`, so no count overflows.
//!
//! # Conventions
//!
//! - `n` is the number of elements of the op's (first) result, `n_in` of its first operand.
//! - **flops** are approximate instruction counts, not measured costs: a multiply-add counts
//!   as 2, a comparison or a select as 1, and a transcendental function as a fixed weight
//!   standing in for the polynomial or table lookup a library would use. Integer and bool
//!   operations count the same as floating-point ones; [`Work::elem`] says which rate
//!   applies.
//! - **bytes** assume each operand is read once and each result written once, at the
//!   operand's own size (a broadcast operand is read at its size, not the result's).
//!   Element sizes are [`ElemType::size_bytes`] (bool is 1 byte). `io` below means the sum
//!   of all operand bytes and all result bytes.
//! - **elem** is the first operand's element type (for comparisons the operand type, not
//!   bool), or the first result's when the op has no operands. Exceptions: `cast` uses the
//!   wider of source and target (by size; on a tie float over integer over bool, then the
//!   target), `select` uses its value operands' type (operand 1), not the bool condition.
//!
//! # Rules
//!
//! | op | flops | bytes |
//! |----|-------|-------|
//! | `const` | 0 | 0 (weights are resident; the consumer pays for reading them) |
//! | unary | `n × w` (see the weights below) | io |
//! | binary | `n × w`: 1; `div`, `mod`, `fmod` 4; `pow` 8 | io |
//! | `select`, `cast`, `clip` | `n` | io |
//! | `matmul` | `2·M·N·K·batch` | io |
//! | `gemm` | `2·M·N·K`, plus `M·N` when C is present | io |
//! | `conv` | `2·N·C_out·∏out·(C_in/groups)·∏K`, plus `n` with a bias | io |
//! | `conv-transpose` | `2·N·C_in·∏in·(C_out/groups)·∏K`, plus `n` with a bias | io |
//! | `max-pool`, `avg-pool` | `n × ∏kernel` | io |
//! | `reduce-*` | `n_in × w_in + n × w_out` (table below) | io |
//! | `argmax`, `argmin` | `n_in` | io |
//! | `softmax`, `log-softmax` | `5·n` | io |
//! | `cumsum` | `n` | io |
//! | `layer-norm`, `instance-norm` | `8·n` | io |
//! | `batch-norm` (inference) | `2·n` | io |
//! | `lrn` | `n × size` | io |
//! | `reshape` | 0 | 0 (a view) |
//! | `transpose`, `expand`, `tile`, `concat`, `split`, `pad`, `depth-to-space`, `space-to-depth` | 0 | io |
//! | `trilu` | `n` (the index test) | io |
//! | `slice` | 0 | `2 × result` (read what is taken, write it) |
//! | `gather`, `gather-elements`, `gather-nd` | 0 | `2 × result + indices` |
//! | `scatter-elements`, `scatter-nd` | 0 with `reduction = none`, else one per update element | io (data read, result written, updates and indices read) |
//! | `top-k` | `n_in × ⌈log2(k + 1)⌉` | io (both results) |
//! | `resize` | `n × t`, `t` = 1 nearest, `2^r` linear, `4^r` cubic | io |
//! | `einsum` | `2 × ∏` extents of the distinct index letters | io |
//! | `shape`, `size` | 0 | 0 (metadata) |
//! | `fill` | 0 | result |
//! | `range` | `n` | result |
//! | `transfer`, `all-reduce`, `all-gather`, `all-slice`, `reduce-scatter`, `all-to-all` | 0 | 0 (communication: timed on links by the cost model; `all-slice` moves nothing) |
//! | `if` | the larger of the two branches' sums | the larger of the branches' sums |
//! | `loop` | `trip ×` the body's sum | `trip ×` the body's sum |
//! | `scan` | `T ×` the body's sum | `T ×` the body's sum |
//!
//! Region ops cost what their bodies do: a body's work is the sum of its ops' work (region
//! ops inside it recursively, at most [`MAX_REGION_DEPTH`](tessera_ir::verify::MAX_REGION_DEPTH)
//! deep). An `if` runs one branch, so it costs the dearer one (flops and bytes taken
//! separately), an upper bound. A `loop` runs its body `trip` times when its `trip` extent
//! is static; when it is symbolic (the iteration count is data-dependent, known only at run
//! time) the body is **counted once**, so a data-dependent loop is under-costed by its
//! iteration count. A `scan` runs its body once per slice: `T` is the scan inputs' extent
//! along the scan axis, counted once when symbolic. The compute element type is that of the
//! body op with the most flops (the first result's when no body op computes).
//!
//! Where the symbols come from:
//!
//! - `matmul` (numpy semantics): `K` is the last extent of operand 0; `M` its second-to-last
//!   (1 for a 1-D operand); `N` the last extent of operand 1 (1 for a 1-D operand); `batch`
//!   is the product of the result's leading (batch) extents, so broadcast batch axes count
//!   at their broadcast extent.
//! - `gemm`: `M` and `K` from A and `N` from B, after `trans-a`/`trans-b`. The `M·N` term is
//!   the epilogue `alpha·AB + beta·C`; without C the `alpha` scaling is taken as folded into
//!   the product and not counted.
//! - `conv`: `N` and the spatial extents `∏out` from the result, `C_out` from the result's
//!   channel axis, `C_in/groups` and `∏K` from the weight `[C_out, C_in/groups, K...]`.
//!   `conv-transpose`: `N`, `C_in` and `∏in` from the input, `C_out/groups` and `∏K` from the
//!   weight `[C_in, C_out/groups, K...]`. Extents are read from the types, never recomputed.
//! - `top-k`: `k` is the values result's extent on the axis.
//! - `resize`: `r` is the number of resized axes (whose extent differs between operand and
//!   result).
//! - `einsum`: the equation is parsed with [`tessera_ir::infer::parse_einsum`]; each letter's
//!   extent comes from the operand axis it labels. The count is one multiply-add per point of
//!   the iteration space, whatever the number of operands.
//!
//! Unary weights (the function `unary_weight`):
//!
//! | weight | ops |
//! |--------|-----|
//! | 1 | `abs`, `neg`, `sign`, `relu`, `ceil`, `floor`, `round`, `not`, `is-nan`, `leaky-relu`, `hard-sigmoid`, `hard-swish` |
//! | 4 | `sqrt`, `reciprocal`, `softsign` |
//! | 8 | `exp`, `log`, `sin`, `cos`, `tan`, `asin`, `acos`, `atan`, `tanh`, `sigmoid`, `erf`, `elu`, `selu`, `softplus` |
//! | 16 | `gelu`, `mish` (compounds of a transcendental and several arithmetic steps) |
//!
//! Reduction weights (the function `reduce_weights`), per input element and per result element:
//!
//! | reduction | `w_in` | `w_out` |
//! |-----------|--------|---------|
//! | `sum`, `max`, `min`, `prod` | 1 | 0 |
//! | `mean` | 1 | 1 (the division) |
//! | `l1` | 2 (abs, add) | 0 |
//! | `sum-square` | 2 (a multiply-add) | 0 |
//! | `l2` | 2 (a multiply-add) | 4 (the square root) |
//! | `log-sum-exp` | 10 (max pass, subtract-and-exp, add) | 8 (the log) |

use std::collections::BTreeMap;

use tessera_ir::{
    BinaryOp, ElemType, Graph, Op, OpData, OpId, ReduceKind, ResizeMode, ScatterReduction,
    TensorType, UnaryOp, ValueId,
};

/// What one op costs in work, independent of any device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Work {
    /// Arithmetic operations (a multiply-add counts as 2). Approximate: transcendental
    /// functions count as fixed weights (see the module doc).
    pub flops: f64,
    /// Bytes read from and written to memory, assuming each operand is read once and each
    /// result written once (see the module doc for the per-op exceptions).
    pub bytes: f64,
    /// The element type whose compute rate applies: the type the arithmetic is done in
    /// (a matmul's operand type; for a cast the wider of source and target; for comparisons
    /// the operand type).
    pub elem: ElemType,
}

/// Why the work of an op cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkError {
    /// A value the op's formula needs has a symbolic extent.
    #[error(
        "{}: {} {index} (%{name}) has a symbolic shape {ty}; bind it with --input-shape",
        op_context(*.op, .op_name, .loc.as_deref()),
        if *.is_result { "result" } else { "operand" }
    )]
    SymbolicShape {
        /// The op.
        op: OpId,
        /// The op's text name ([`Op::name`]).
        op_name: &'static str,
        /// The op's source location, if known.
        loc: Option<String>,
        /// True when the value is a result of the op, false for an operand.
        is_result: bool,
        /// The operand or result position.
        index: usize,
        /// The value.
        value: ValueId,
        /// The value's printed name (without `%`).
        name: String,
        /// The value's type.
        ty: TensorType,
    },
    /// The work of an op inside a region of a region op cannot be computed.
    #[error("{}: in the {region} region: {inner}", op_context(*.op, .op_name, .loc.as_deref()))]
    Region {
        /// The region op.
        op: OpId,
        /// The op's text name ([`Op::name`]).
        op_name: &'static str,
        /// The op's source location, if known.
        loc: Option<String>,
        /// The region's name (`then`, `else`, `body`).
        region: &'static str,
        /// The error inside the region.
        inner: Box<WorkError>,
    },
    /// The op does not have the structure its kind requires (the verifier would reject it:
    /// a missing operand, a rank that does not fit, an unparsable einsum equation).
    #[error("{}: {message}", op_context(*.op, .op_name, .loc.as_deref()))]
    Malformed {
        /// The op.
        op: OpId,
        /// The op's text name ([`Op::name`]).
        op_name: &'static str,
        /// The op's source location, if known.
        loc: Option<String>,
        /// What is wrong.
        message: String,
    },
}

fn op_context(op: OpId, name: &str, loc: Option<&str>) -> String {
    match loc {
        Some(loc) => format!("{op} ({name} at {loc:?})"),
        None => format!("{op} ({name})"),
    }
}

/// The work of `op` in `graph`, from its operand and result types (every extent the op's
/// formula uses must be static). See the module doc for the rules.
pub fn op_work(graph: &Graph, op: OpId) -> Result<Work, WorkError> {
    let cx = Cx {
        graph,
        id: op,
        data: graph.op(op),
    };
    let (flops, bytes) = cx.flops_and_bytes()?;
    Ok(Work {
        flops,
        bytes,
        elem: cx.elem()?,
    })
}

/// The flops per element of a unary elementwise op (approximate instruction counts).
fn unary_weight(op: UnaryOp) -> f64 {
    match op {
        UnaryOp::Abs
        | UnaryOp::Neg
        | UnaryOp::Sign
        | UnaryOp::Relu
        | UnaryOp::Ceil
        | UnaryOp::Floor
        | UnaryOp::Round
        | UnaryOp::Not
        | UnaryOp::IsNan
        | UnaryOp::LeakyRelu { .. }
        | UnaryOp::HardSigmoid { .. }
        | UnaryOp::HardSwish => 1.0,
        UnaryOp::Sqrt | UnaryOp::Reciprocal | UnaryOp::Softsign => 4.0,
        UnaryOp::Exp
        | UnaryOp::Log
        | UnaryOp::Sin
        | UnaryOp::Cos
        | UnaryOp::Tan
        | UnaryOp::Asin
        | UnaryOp::Acos
        | UnaryOp::Atan
        | UnaryOp::Tanh
        | UnaryOp::Sigmoid
        | UnaryOp::Erf
        | UnaryOp::Elu { .. }
        | UnaryOp::Selu { .. }
        | UnaryOp::Softplus => 8.0,
        UnaryOp::Gelu { .. } | UnaryOp::Mish => 16.0,
    }
}

/// The flops per result element of a binary elementwise op.
fn binary_weight(op: BinaryOp) -> f64 {
    match op {
        BinaryOp::Pow => 8.0,
        // As `reciprocal`: a division is several instructions (or a reciprocal and a
        // refinement step); the remainders are a division plus a fix-up.
        BinaryOp::Div | BinaryOp::Mod | BinaryOp::Fmod => 4.0,
        BinaryOp::Add
        | BinaryOp::Sub
        | BinaryOp::Mul
        | BinaryOp::Max
        | BinaryOp::Min
        | BinaryOp::Prelu
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor
        | BinaryOp::Equal
        | BinaryOp::Less
        | BinaryOp::LessEqual
        | BinaryOp::Greater
        | BinaryOp::GreaterEqual
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRight => 1.0,
    }
}

/// The flops of a reduction per input element and per result element.
fn reduce_weights(kind: ReduceKind) -> (f64, f64) {
    match kind {
        ReduceKind::Sum | ReduceKind::Max | ReduceKind::Min | ReduceKind::Prod => (1.0, 0.0),
        ReduceKind::Mean => (1.0, 1.0),
        ReduceKind::L1 | ReduceKind::SumSquare => (2.0, 0.0),
        ReduceKind::L2 => (2.0, 4.0),
        ReduceKind::LogSumExp => (10.0, 8.0),
    }
}

/// The element type of a cast's arithmetic: the wider of the two, by size; on a tie float
/// over integer over bool, then the target.
fn wider(from: ElemType, to: ElemType) -> ElemType {
    let class = |e: ElemType| {
        if e.is_float() {
            2
        } else if e.is_int() {
            1
        } else {
            0
        }
    };
    let key = |e: ElemType| (e.size_bytes(), class(e));
    if key(from) > key(to) { from } else { to }
}

/// A value with a static shape.
struct Val {
    dims: Vec<u64>,
    elem: ElemType,
    ty: TensorType,
}

impl Val {
    fn elems(&self) -> f64 {
        self.dims.iter().map(|&d| d as f64).product()
    }

    fn bytes(&self) -> f64 {
        self.elems() * self.elem.size_bytes() as f64
    }

    fn rank(&self) -> usize {
        self.dims.len()
    }
}

/// One op being costed.
struct Cx<'g> {
    graph: &'g Graph,
    id: OpId,
    data: &'g OpData,
}

type Res<T> = Result<T, WorkError>;

impl Cx<'_> {
    fn malformed(&self, message: impl Into<String>) -> WorkError {
        WorkError::Malformed {
            op: self.id,
            op_name: self.data.op.name(),
            loc: self.data.loc.clone(),
            message: message.into(),
        }
    }

    fn val(&self, v: ValueId, is_result: bool, index: usize) -> Res<Val> {
        let ty = self.graph.ty(v);
        match ty.static_dims() {
            Some(dims) => Ok(Val {
                dims,
                elem: ty.elem,
                ty: ty.clone(),
            }),
            None => {
                let name = tessera_ir::text::value_names(self.graph)
                    .get(v.index())
                    .cloned()
                    .unwrap_or_else(|| v.to_string());
                Err(WorkError::SymbolicShape {
                    op: self.id,
                    op_name: self.data.op.name(),
                    loc: self.data.loc.clone(),
                    is_result,
                    index,
                    value: v,
                    name,
                    ty: ty.clone(),
                })
            }
        }
    }

    fn operand(&self, i: usize) -> Res<Val> {
        match self.data.operands.get(i) {
            Some(&v) => self.val(v, false, i),
            None => Err(self.malformed(format!(
                "operand {i} is missing (the op has {})",
                self.data.operands.len()
            ))),
        }
    }

    fn result(&self, i: usize) -> Res<Val> {
        match self.data.results.get(i) {
            Some(&v) => self.val(v, true, i),
            None => Err(self.malformed(format!(
                "result {i} is missing (the op has {})",
                self.data.results.len()
            ))),
        }
    }

    fn has_operand(&self, i: usize) -> bool {
        self.data.operands.len() > i
    }

    /// Extent `axis` of `v`, as f64.
    fn dim(&self, v: &Val, axis: usize) -> Res<f64> {
        match v.dims.get(axis) {
            Some(&d) => Ok(d as f64),
            None => Err(self.malformed(format!("{} has no axis {axis}", v.ty))),
        }
    }

    /// The product of the extents of `v` from axis `from` on.
    fn prod_from(&self, v: &Val, from: usize) -> Res<f64> {
        match v.dims.get(from..) {
            Some(ds) => Ok(ds.iter().map(|&d| d as f64).product()),
            None => Err(self.malformed(format!("{} has no axis {from}", v.ty))),
        }
    }

    /// Bytes of every operand and every result.
    fn io_bytes(&self) -> Res<f64> {
        let mut total = 0.0;
        for i in 0..self.data.operands.len() {
            total += self.operand(i)?.bytes();
        }
        for i in 0..self.data.results.len() {
            total += self.result(i)?.bytes();
        }
        Ok(total)
    }

    /// `n × weight` flops with io bytes.
    fn elementwise(&self, weight: f64) -> Res<(f64, f64)> {
        Ok((self.result(0)?.elems() * weight, self.io_bytes()?))
    }

    fn elem(&self) -> Res<ElemType> {
        let ty = |v: ValueId| self.graph.ty(v).elem;
        let first_operand = self.data.operands.first().map(|&v| ty(v));
        let first_result = self.data.results.first().map(|&v| ty(v));
        let elem = match &self.data.op {
            Op::Cast { to } => first_operand.map(|from| wider(from, *to)),
            Op::Select => self.data.operands.get(1).map(|&v| ty(v)),
            op if op.has_regions() => {
                let mut best: Option<(f64, ElemType)> = None;
                for (r, name) in op.regions().into_iter().zip(op.region_names()) {
                    if let (f, _, Some(e)) = self.body(r, name)?
                        && best.is_none_or(|(bf, _)| f > bf)
                    {
                        best = Some((f, e));
                    }
                }
                best.map(|(_, e)| e).or(first_result)
            }
            _ => first_operand.or(first_result),
        };
        elem.ok_or_else(|| self.malformed("the op has neither operands nor results"))
    }

    fn flops_and_bytes(&self) -> Res<(f64, f64)> {
        match &self.data.op {
            Op::Const(_) => Ok((0.0, 0.0)),
            Op::Unary(u) => self.elementwise(unary_weight(*u)),
            Op::Binary(b) => self.elementwise(binary_weight(*b)),
            Op::Select | Op::Cast { .. } | Op::Clip { .. } => self.elementwise(1.0),
            Op::MatMul => {
                let (a, b, r) = (self.operand(0)?, self.operand(1)?, self.result(0)?);
                if a.rank() == 0 || b.rank() == 0 {
                    return Err(self.malformed("matmul operands must have rank >= 1"));
                }
                let k = self.dim(&a, a.rank() - 1)?;
                let m = if a.rank() > 1 {
                    self.dim(&a, a.rank() - 2)?
                } else {
                    1.0
                };
                let n = if b.rank() > 1 {
                    self.dim(&b, b.rank() - 1)?
                } else {
                    1.0
                };
                let matrix_axes = usize::from(a.rank() > 1) + usize::from(b.rank() > 1);
                let batch_axes = &r.dims[..r.rank().saturating_sub(matrix_axes)];
                let batch: f64 = batch_axes.iter().map(|&d| d as f64).product();
                Ok((2.0 * m * n * k * batch, self.io_bytes()?))
            }
            Op::Gemm {
                trans_a, trans_b, ..
            } => {
                let (a, b) = (self.operand(0)?, self.operand(1)?);
                if a.rank() != 2 || b.rank() != 2 {
                    return Err(self.malformed("gemm operands A and B must be 2-D"));
                }
                let (m, k) = if *trans_a {
                    (self.dim(&a, 1)?, self.dim(&a, 0)?)
                } else {
                    (self.dim(&a, 0)?, self.dim(&a, 1)?)
                };
                let n = if *trans_b {
                    self.dim(&b, 0)?
                } else {
                    self.dim(&b, 1)?
                };
                let epilogue = if self.has_operand(2) { m * n } else { 0.0 };
                Ok((2.0 * m * n * k + epilogue, self.io_bytes()?))
            }
            Op::Conv(_) => {
                let (w, y) = (self.operand(1)?, self.result(0)?);
                // Result [N, C_out, out...]; weight [C_out, C_in/groups, K...].
                let per_output = self.dim(&w, 1)? * self.prod_from(&w, 2)?;
                let outputs = self.dim(&y, 0)? * self.dim(&y, 1)? * self.prod_from(&y, 2)?;
                let bias = if self.has_operand(2) { outputs } else { 0.0 };
                Ok((2.0 * outputs * per_output + bias, self.io_bytes()?))
            }
            Op::ConvTranspose { .. } => {
                let (x, w, y) = (self.operand(0)?, self.operand(1)?, self.result(0)?);
                // Input [N, C_in, in...]; weight [C_in, C_out/groups, K...].
                let inputs = self.dim(&x, 0)? * self.dim(&x, 1)? * self.prod_from(&x, 2)?;
                let per_input = self.dim(&w, 1)? * self.prod_from(&w, 2)?;
                let bias = if self.has_operand(2) { y.elems() } else { 0.0 };
                Ok((2.0 * inputs * per_input + bias, self.io_bytes()?))
            }
            Op::Pool(p) => {
                let window: f64 = p.kernel.iter().map(|&k| k as f64).product();
                self.elementwise(window)
            }
            Op::Reduce { kind, .. } => {
                let (w_in, w_out) = reduce_weights(*kind);
                let flops = self.operand(0)?.elems() * w_in + self.result(0)?.elems() * w_out;
                Ok((flops, self.io_bytes()?))
            }
            Op::ArgReduce { .. } => Ok((self.operand(0)?.elems(), self.io_bytes()?)),
            Op::Softmax { .. } | Op::LogSoftmax { .. } => self.elementwise(5.0),
            Op::CumSum { .. } => self.elementwise(1.0),
            Op::LayerNorm { .. } | Op::InstanceNorm { .. } => self.elementwise(8.0),
            Op::BatchNorm { .. } => self.elementwise(2.0),
            Op::Lrn { size, .. } => self.elementwise(*size as f64),
            Op::Reshape { .. } => Ok((0.0, 0.0)),
            Op::Transpose { .. }
            | Op::Expand { .. }
            | Op::Tile { .. }
            | Op::Concat { .. }
            | Op::Split { .. }
            | Op::Pad { .. }
            | Op::DepthToSpace { .. }
            | Op::SpaceToDepth { .. } => Ok((0.0, self.io_bytes()?)),
            Op::Trilu { .. } => self.elementwise(1.0),
            Op::Slice { .. } => Ok((0.0, 2.0 * self.result(0)?.bytes())),
            Op::Gather { .. } | Op::GatherElements { .. } | Op::GatherNd { .. } => {
                let indices = self.operand(1)?.bytes();
                Ok((0.0, 2.0 * self.result(0)?.bytes() + indices))
            }
            Op::ScatterElements { reduction, .. } | Op::ScatterNd { reduction } => {
                let flops = match reduction {
                    ScatterReduction::None => 0.0,
                    ScatterReduction::Add
                    | ScatterReduction::Mul
                    | ScatterReduction::Max
                    | ScatterReduction::Min => self.operand(2)?.elems(),
                };
                Ok((flops, self.io_bytes()?))
            }
            Op::TopK { axis, .. } => {
                let k = self.dim(&self.result(0)?, *axis)?;
                let passes = (k + 1.0).log2().ceil();
                Ok((self.operand(0)?.elems() * passes, self.io_bytes()?))
            }
            Op::Resize { mode, .. } => {
                let (x, y) = (self.operand(0)?, self.result(0)?);
                if x.rank() != y.rank() {
                    return Err(self.malformed(format!(
                        "operand {} and result {} differ in rank",
                        x.ty, y.ty
                    )));
                }
                let resized = x.dims.iter().zip(&y.dims).filter(|(a, b)| a != b).count();
                let taps_per_axis: f64 = match mode {
                    ResizeMode::Nearest => 1.0,
                    ResizeMode::Linear => 2.0,
                    ResizeMode::Cubic => 4.0,
                };
                let taps = (0..resized).map(|_| taps_per_axis).product::<f64>();
                Ok((y.elems() * taps, self.io_bytes()?))
            }
            Op::Einsum { equation } => {
                let (terms, _) = tessera_ir::infer::parse_einsum(equation)
                    .map_err(|e| self.malformed(e.message))?;
                if terms.len() != self.data.operands.len() {
                    return Err(self.malformed(format!(
                        "equation has {} inputs, the op has {} operands",
                        terms.len(),
                        self.data.operands.len()
                    )));
                }
                let mut extents: BTreeMap<char, u64> = BTreeMap::new();
                for (i, term) in terms.iter().enumerate() {
                    let v = self.operand(i)?;
                    if term.len() != v.rank() {
                        return Err(self.malformed(format!(
                            "term {i} has {} letters, operand {i} is {}",
                            term.len(),
                            v.ty
                        )));
                    }
                    for (&c, &d) in term.iter().zip(&v.dims) {
                        extents.entry(c).or_insert(d);
                    }
                }
                let points: f64 = extents.values().map(|&d| d as f64).product();
                Ok((2.0 * points, self.io_bytes()?))
            }
            Op::Shape { .. } | Op::Size => Ok((0.0, 0.0)),
            // Communication, not compute: the cost model times them on links
            // (`CostModel::transfer_time`, `CostModel::collective_time`).
            Op::Transfer { .. }
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::AllSlice { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. } => Ok((0.0, 0.0)),
            Op::Fill { .. } => Ok((0.0, self.result(0)?.bytes())),
            Op::Range { .. } => {
                let r = self.result(0)?;
                Ok((r.elems(), r.bytes()))
            }
            // About 13 integer operations per element: two SplitMix64 rounds' worth.
            Op::RandomUniform { .. } => {
                let r = self.result(0)?;
                Ok((13.0 * r.elems(), r.bytes()))
            }
            // Inference semantics: a copy and an all-true mask.
            Op::Dropout { .. } => Ok((0.0, self.io_bytes()?)),
            Op::If {
                then_branch,
                else_branch,
            } => {
                let t = self.body(then_branch, "then")?;
                let e = self.body(else_branch, "else")?;
                Ok((t.0.max(e.0), t.1.max(e.1)))
            }
            Op::Loop { trip, body, .. } => {
                let (f, b, _) = self.body(body, "body")?;
                let n = trip.as_static().map_or(1.0, |n| n as f64);
                Ok((n * f, n * b))
            }
            Op::Scan(sc) => {
                let (f, b, _) = self.body(&sc.body, "body")?;
                let n = match (sc.input_axes.first(), self.data.operands.get(sc.state)) {
                    (Some(&axis), Some(&v)) => self
                        .graph
                        .ty(v)
                        .shape
                        .get(axis)
                        .and_then(|d| d.as_static())
                        .map_or(1.0, |n| n as f64),
                    _ => 1.0,
                };
                Ok((n * f, n * b))
            }
        }
    }

    /// The summed flops and bytes of a region body's ops, and the element type of its op
    /// with the most flops.
    fn body(&self, body: &Graph, region: &'static str) -> Res<(f64, f64, Option<ElemType>)> {
        let (mut flops, mut bytes) = (0.0, 0.0);
        let mut best: Option<(f64, ElemType)> = None;
        for &o in body.ops() {
            let w = op_work(body, o).map_err(|inner| WorkError::Region {
                op: self.id,
                op_name: self.data.op.name(),
                loc: self.data.loc.clone(),
                region,
                inner: Box::new(inner),
            })?;
            flops += w.flops;
            bytes += w.bytes;
            if best.is_none_or(|(f, _)| w.flops > f) {
                best = Some((w.flops, w.elem));
            }
        }
        Ok((flops, bytes, best.map(|(_, e)| e)))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use tessera_ir::text;

    use super::*;

    /// Parses `src` and returns the graph and the op defining the value named `value`.
    fn find(src: &str, value: &str) -> (Graph, OpId) {
        let g = text::parse(src, None).expect("test IR parses");
        tessera_ir::verify::verify(&g).expect("test IR verifies");
        let op = g
            .ops()
            .iter()
            .copied()
            .find(|&o| {
                g.op(o)
                    .results
                    .iter()
                    .any(|&r| g.value(r).name.as_deref() == Some(value))
            })
            .expect("value is defined");
        (g, op)
    }

    fn work(src: &str, value: &str) -> Work {
        let (g, op) = find(src, value);
        op_work(&g, op).expect("work is computable")
    }

    fn check(w: Work, flops: f64, bytes: f64, elem: ElemType) {
        assert_eq!(
            (w.flops, w.bytes, w.elem),
            (flops, bytes, elem),
            "got {w:?}"
        );
    }

    #[test]
    fn matmul_2d() {
        let src = "graph @g(%x: f32[8, 16], %w: f32[16, 32]) {\n  %y = matmul %x, %w : f32[8, 32]\n  return %y\n}";
        // M=8, N=32, K=16: 2·8·32·16 = 8192. Bytes (8·16 + 16·32 + 8·32)·4 = 896·4 = 3584.
        check(work(src, "y"), 8192.0, 3584.0, ElemType::F32);
    }

    #[test]
    fn matmul_batched_broadcast_and_vector() {
        let src = "graph @g(%a: f16[2, 1, 4, 8], %b: f16[3, 8, 5], %v: f16[8]) {
  %y = matmul %a, %b : f16[2, 3, 4, 5]
  %z = matmul %v, %b : f16[3, 5]
  return %y, %z
}";
        // M=4, N=5, K=8, batch 2·3 = 6: 2·4·5·8·6 = 1920.
        // Bytes: a 64, b 120, y 120 elements = 304 · 2 = 608.
        check(work(src, "y"), 1920.0, 608.0, ElemType::F16);
        // 1-D left operand: M=1, N=5, K=8, batch 3: 2·1·5·8·3 = 240. Bytes (8+120+15)·2 = 286.
        check(work(src, "z"), 240.0, 286.0, ElemType::F16);
    }

    #[test]
    fn gemm_with_and_without_bias() {
        let src = "graph @g(%a: f32[5, 3], %b: f32[4, 5], %c: f32[4]) {
  %y = gemm %a, %b {alpha = 0.5, beta = 0.0, trans-a = true, trans-b = true} : f32[3, 4]
  %z = gemm %a, %b, %c {alpha = 1.0, beta = 1.0, trans-a = true, trans-b = true} : f32[3, 4]
  return %y, %z
}";
        // A^T is [3, 5], B^T is [5, 4]: M=3, K=5, N=4: 2·3·4·5 = 120.
        // Bytes (15 + 20 + 12)·4 = 188.
        check(work(src, "y"), 120.0, 188.0, ElemType::F32);
        // Plus M·N = 12 for the epilogue; plus C's 4·4 = 16 bytes.
        check(work(src, "z"), 132.0, 204.0, ElemType::F32);
    }

    #[test]
    fn conv_with_groups_and_bias() {
        let src = "graph @g(%x: f32[1, 4, 8, 8], %w: f32[6, 2, 3, 3], %b: f32[6]) {
  %y = conv %x, %w, %b {dilations = [1, 1], groups = 2, pads = [1, 1, 1, 1], strides = [1, 1]} : f32[1, 6, 8, 8]
  return %y
}";
        // 2 · N 1 · C_out 6 · out 64 · C_in/groups 2 · K 9 = 13824, plus the bias 1·6·64 = 384.
        // Bytes: x 256, w 108, b 6, y 384 elements = 754 · 4 = 3016.
        check(work(src, "y"), 14208.0, 3016.0, ElemType::F32);
    }

    #[test]
    fn conv_transpose() {
        let src = "graph @g(%x: f32[1, 3, 8, 8], %w: f32[3, 2, 3, 3], %b: f32[2]) {
  %y = conv-transpose %x, %w, %b {dilations = [1, 1], groups = 1, output-padding = [1, 1], pads = [1, 1, 1, 1], strides = [2, 2]} : f32[1, 2, 16, 16]
  return %y
}";
        // 2 · N 1 · C_in 3 · in 64 · C_out/groups 2 · K 9 = 6912, plus the bias 1·2·256 = 512.
        // Bytes: x 192, w 54, b 2, y 512 elements = 760 · 4 = 3040.
        check(work(src, "y"), 7424.0, 3040.0, ElemType::F32);
    }

    #[test]
    fn max_pool() {
        let src = "graph @g(%x: f32[1, 3, 8, 8]) {
  %y = max-pool %x {ceil-mode = false, count-include-pad = false, dilations = [1, 1], kernel = [2, 2], pads = [0, 0, 0, 0], strides = [2, 2]} : f32[1, 3, 4, 4]
  return %y
}";
        // 48 outputs × 4 taps = 192. Bytes (192 + 48)·4 = 960.
        check(work(src, "y"), 192.0, 960.0, ElemType::F32);
    }

    #[test]
    fn elementwise_ops() {
        let src = "graph @g(%x: f32[8, 16], %row: f32[16], %s: f32[4, 8], %i: i32[4, 4], %p: f32[4], %q: f32[4]) {
  %add = add %x, %row : f32[8, 16]
  %div = div %x, %row : f32[8, 16]
  %relu = relu %s : f32[4, 8]
  %exp = exp %s : f32[4, 8]
  %gelu = gelu %s {tanh = true} : f32[4, 8]
  %wide = cast %i {to = f64} : f64[4, 4]
  %narrow = cast %s {to = f16} : f16[4, 8]
  %float = cast %i {to = f32} : f32[4, 4]
  %less = less %p, %q : bool[4]
  return %add, %div, %relu, %exp, %gelu, %wide, %narrow, %float, %less
}";
        // 128 adds; the row is read at its own size: (128 + 16 + 128)·4 = 1088.
        check(work(src, "add"), 128.0, 1088.0, ElemType::F32);
        // Division weighs 4: 4·128 = 512.
        check(work(src, "div"), 512.0, 1088.0, ElemType::F32);
        // 32 elements, weight 1; bytes (32 + 32)·4 = 256.
        check(work(src, "relu"), 32.0, 256.0, ElemType::F32);
        // Weight 8: 8·32 = 256.
        check(work(src, "exp"), 256.0, 256.0, ElemType::F32);
        // Weight 16: 16·32 = 512.
        check(work(src, "gelu"), 512.0, 256.0, ElemType::F32);
        // i32 -> f64: 16 conversions, bytes 16·4 + 16·8 = 192, computed as f64 (the wider).
        check(work(src, "wide"), 16.0, 192.0, ElemType::F64);
        // f32 -> f16: 32 conversions, bytes 32·4 + 32·2 = 192, computed as f32.
        check(work(src, "narrow"), 32.0, 192.0, ElemType::F32);
        // i32 -> f32: same size, the float type wins.
        check(work(src, "float"), 16.0, 128.0, ElemType::F32);
        // 4 comparisons in f32 (not bool): bytes 16 + 16 + 4 (bool is 1 byte) = 36.
        check(work(src, "less"), 4.0, 36.0, ElemType::F32);
    }

    #[test]
    fn select_computes_in_the_value_type() {
        let src = "graph @g(%c: bool[4], %x: f16[4], %y: f16[4]) {
  %s = select %c, %x, %y : f16[4]
  return %s
}";
        // 4 selects; bytes 4 + 8 + 8 + 8 = 28.
        check(work(src, "s"), 4.0, 28.0, ElemType::F16);
    }

    #[test]
    fn softmax_and_reduce_sum() {
        let src = "graph @g(%x: f32[2, 4, 10]) {
  %sm = softmax %x {axis = 2} : f32[2, 4, 10]
  %sum = reduce-sum %x {axes = [1], keep-dims = false} : f32[2, 10]
  %l2 = reduce-l2 %x {axes = [1], keep-dims = false} : f32[2, 10]
  return %sm, %sum, %l2
}";
        // 80 elements × 5 = 400; bytes (80 + 80)·4 = 640.
        check(work(src, "sm"), 400.0, 640.0, ElemType::F32);
        // 80 input elements × 1; bytes (80 + 20)·4 = 400.
        check(work(src, "sum"), 80.0, 400.0, ElemType::F32);
        // 80 × 2 + 20 square roots × 4 = 240.
        check(work(src, "l2"), 240.0, 400.0, ElemType::F32);
    }

    #[test]
    fn data_movement() {
        let src = "graph @g(%x: f32[2, 3, 4], %m: f32[4, 6], %t: f32[10, 8], %idx: i64[3]) {
  %tr = transpose %x {perm = [2, 0, 1]} : f32[4, 2, 3]
  %rs = reshape %x {shape = [6, 4]} : f32[6, 4]
  %sl = slice %m {axes = [1], ends = [6], starts = [0], steps = [2]} : f32[4, 3]
  %ga = gather %t, %idx {axis = 0} : f32[3, 8]
  return %tr, %rs, %sl, %ga
}";
        // Read 24 and write 24 elements: 48·4 = 192.
        check(work(src, "tr"), 0.0, 192.0, ElemType::F32);
        // A view.
        check(work(src, "rs"), 0.0, 0.0, ElemType::F32);
        // Only the 12 taken elements are read, then written: 2·12·4 = 96.
        check(work(src, "sl"), 0.0, 96.0, ElemType::F32);
        // 24 gathered elements read and written (2·24·4 = 192) plus 3 i64 indices (24).
        check(work(src, "ga"), 0.0, 216.0, ElemType::F32);
    }

    #[test]
    fn einsum_top_k_and_resize() {
        let src = "graph @g(%s: f32[2, 4, 10], %m: f32[10, 5], %x: f32[4, 16], %img: f32[1, 3, 8, 8]) {
  %e = einsum %s, %m {equation = \"bij,jk->bik\"} : f32[2, 4, 5]
  %v, %i = top-k %x {axis = 1, k = 3, largest = true} : f32[4, 3], i64[4, 3]
  %near = resize %img {coord = asymmetric, cubic-coeff = -0.75, mode = nearest, nearest = floor, sizes = [1, 3, 16, 16]} : f32[1, 3, 16, 16]
  %lin = resize %img {coord = align-corners, cubic-coeff = -0.75, mode = linear, nearest = round-prefer-ceil, sizes = [1, 3, 16, 16]} : f32[1, 3, 16, 16]
  %cub = resize %img {coord = half-pixel, cubic-coeff = -0.5, mode = cubic, nearest = round-prefer-floor, sizes = [1, 3, 12, 8]} : f32[1, 3, 12, 8]
  return %e, %v, %i, %near, %lin, %cub
}";
        // Letters b=2, i=4, j=10, k=5: 2·(2·4·10·5) = 800. Bytes (80 + 50 + 40)·4 = 680.
        check(work(src, "e"), 800.0, 680.0, ElemType::F32);
        // 64 inputs × ceil(log2(3 + 1)) = 64·2 = 128.
        // Bytes: input 64·4, values 12·4, indices 12·8 = 256 + 48 + 96 = 400.
        check(work(src, "v"), 128.0, 400.0, ElemType::F32);
        // 768 outputs, 1 tap. Bytes (192 + 768)·4 = 3840.
        check(work(src, "near"), 768.0, 3840.0, ElemType::F32);
        // Two resized axes: 2^2 = 4 taps: 3072.
        check(work(src, "lin"), 3072.0, 3840.0, ElemType::F32);
        // Only H is resized (W stays 8): 4^1 taps × 288 outputs = 1152.
        // Bytes (192 + 288)·4 = 1920.
        check(work(src, "cub"), 1152.0, 1920.0, ElemType::F32);
    }

    #[test]
    fn metadata_and_constants_are_free() {
        let src = "const @c : f32[2] = [1.0, 2.0]

graph @g(%x: f32[N, 4]) {
  %c = const @c : f32[2]
  %shape = shape %x {end = 2, start = 0} : i64[2]
  %size = size %x : i64[]
  %r = reshape %x {shape = [4, N]} : f32[4, N]
  %f = fill {elem = i32, shape = [3, 2], value = 7} : i32[3, 2]
  return %c, %shape, %size, %r, %f
}";
        // Symbolic operands are fine where the formula does not read them.
        check(work(src, "c"), 0.0, 0.0, ElemType::F32);
        check(work(src, "shape"), 0.0, 0.0, ElemType::F32);
        check(work(src, "size"), 0.0, 0.0, ElemType::F32);
        check(work(src, "r"), 0.0, 0.0, ElemType::F32);
        // 6 i32 written: 24 bytes.
        check(work(src, "f"), 0.0, 24.0, ElemType::I32);
    }

    #[test]
    fn symbolic_shape_is_an_error_naming_op_and_value() {
        let src = "graph @g(%x: f32[N, 16], %w: f32[16, 32]) {
  %y = relu %w : f32[16, 32]
  %0 = matmul %x, %y : f32[N, 32] loc(\"fc1/MatMul\")
  %1 = exp %0 : f32[N, 32]
  return %1
}";
        let g = text::parse(src, None).expect("parses");
        let ops = g.ops().to_vec();
        let e = op_work(&g, ops[1]).expect_err("symbolic");
        assert_eq!(
            e.to_string(),
            "op1 (matmul at \"fc1/MatMul\"): operand 0 (%x) has a symbolic shape f32[N, 16]; \
             bind it with --input-shape"
        );
        let e = op_work(&g, ops[2]).expect_err("symbolic");
        assert_eq!(
            e.to_string(),
            "op2 (exp): result 0 (%1) has a symbolic shape f32[N, 32]; bind it with --input-shape"
        );
        assert!(matches!(
            e,
            WorkError::SymbolicShape {
                is_result: true,
                index: 0,
                ..
            }
        ));
    }

    #[test]
    fn malformed_ops_are_errors_not_panics() {
        let mut g = Graph::new("g");
        let x = g.add_input(None, TensorType::fixed(ElemType::F32, &[4]));
        let op = g.push_op(
            Op::Gemm {
                alpha: 1.0,
                beta: 1.0,
                trans_a: false,
                trans_b: false,
            },
            vec![x],
            vec![TensorType::fixed(ElemType::F32, &[4, 4])],
        );
        let e = op_work(&g, op).expect_err("malformed");
        assert!(matches!(e, WorkError::Malformed { .. }), "{e}");
        let op = g.push_op(
            Op::Conv(tessera_ir::ConvAttrs {
                strides: vec![],
                pads: vec![],
                dilations: vec![],
                groups: 1,
            }),
            vec![x, x],
            vec![TensorType::fixed(ElemType::F32, &[])],
        );
        let e = op_work(&g, op).expect_err("malformed");
        assert!(e.to_string().starts_with("op1 (conv): "), "{e}");
    }

    /// The graphs in an IR file: the whole file, or for pass tests each `// -----` chunk.
    fn graphs_in(path: &Path) -> Vec<Graph> {
        if let Ok(g) = text::load(path) {
            return vec![g];
        }
        let Ok(src) = std::fs::read_to_string(path) else {
            return Vec::new();
        };
        let mut graphs = Vec::new();
        let mut chunk = String::new();
        for line in src.lines().chain(std::iter::once("// -----")) {
            if line.trim() == "// -----" {
                if let Ok(g) = text::parse(&chunk, None) {
                    graphs.push(g);
                }
                chunk.clear();
            } else {
                chunk.push_str(line);
                chunk.push('\n');
            }
        }
        graphs
    }

    fn tir_files(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("testdata folder exists")
            .map(|e| e.expect("readable entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                tir_files(&p, out);
            } else if p.extension().is_some_and(|e| e == "tir") {
                out.push(p);
            }
        }
    }

    /// Every op of every valid test graph gets a finite, non-negative work when its values are
    /// static, and either that or a symbolic-shape error otherwise.
    #[test]
    fn every_op_in_the_test_corpus() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
        let mut files = Vec::new();
        tir_files(&root.join("ir"), &mut files);
        tir_files(&root.join("passes"), &mut files);
        let mut costed = std::collections::BTreeSet::new();
        let mut graphs = 0;
        for path in &files {
            for g in graphs_in(path) {
                if tessera_ir::verify::verify(&g).is_err() {
                    continue;
                }
                graphs += 1;
                for &op in g.ops() {
                    let data = g.op(op);
                    let all_static = data
                        .operands
                        .iter()
                        .chain(&data.results)
                        .all(|&v| g.ty(v).static_dims().is_some());
                    match op_work(&g, op) {
                        Ok(w) => {
                            assert!(
                                w.flops.is_finite() && w.flops >= 0.0,
                                "{}: {op}: {w:?}",
                                path.display()
                            );
                            assert!(
                                w.bytes.is_finite() && w.bytes >= 0.0,
                                "{}: {op}: {w:?}",
                                path.display()
                            );
                            if all_static {
                                costed.insert(data.op.name());
                            }
                        }
                        Err(WorkError::SymbolicShape { .. }) if !all_static => {}
                        Err(e) => panic!("{}: {e}", path.display()),
                    }
                }
            }
        }
        assert!(graphs >= 10, "only {graphs} graphs loaded");
        // nn.tir is fully static: every kind in it must have been costed.
        for name in [
            "conv",
            "conv-transpose",
            "max-pool",
            "gemm",
            "einsum",
            "resize",
            "lrn",
        ] {
            assert!(costed.contains(name), "{name} never costed: {costed:?}");
        }
    }

    /// The op catalogue (`testdata/ir`) with its symbols bound by text substitution: every
    /// op kind of the IR gets a finite, non-negative work from static shapes.
    #[test]
    fn every_op_kind_with_bound_symbols() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/ir");
        let mut costed = std::collections::BTreeSet::new();
        for file in [
            "elementwise.tir",
            "shapes.tir",
            "nn.tir",
            "constants.tir",
            "sharding.tir",
            "regions.tir",
            "random.tir",
        ] {
            let src = std::fs::read_to_string(root.join(file)).expect("catalogue file");
            let src = src
                .replace("trips", "2")
                .replace("[N, ", "[3, ")
                .replace("[B, ", "[2, ")
                .replace("[B]", "[2]")
                .replace("\"batch size\"", "5")
                .replace("size = R", "size = 7")
                .replace("[R]", "[7]");
            let g = text::parse(&src, None).expect("bound catalogue parses");
            tessera_ir::verify::verify(&g).expect("bound catalogue verifies");
            for &op in g.ops() {
                let w = op_work(&g, op).unwrap_or_else(|e| panic!("{file}: {e}"));
                assert!(w.flops.is_finite() && w.flops >= 0.0, "{file}: {op}: {w:?}");
                assert!(w.bytes.is_finite() && w.bytes >= 0.0, "{file}: {op}: {w:?}");
                costed.insert(g.op(op).op.name());
            }
        }
        for name in text::OP_NAMES {
            assert!(costed.contains(name), "{name} is not in the catalogue");
        }
    }

    /// Region ops: an `if` costs its dearer branch, a loop with a static trip count its body
    /// that many times, a data-dependent one its body once, a scan its body per slice.
    #[test]
    fn region_ops_cost_their_bodies() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/ir");
        let src = std::fs::read_to_string(root.join("regions.tir")).expect("regions.tir");
        let work = |src: &str| {
            let g = text::parse(src, None).expect("parses");
            tessera_ir::verify::verify(&g).expect("verifies");
            g.ops()
                .iter()
                .map(|&o| (g.op(o).op.name(), op_work(&g, o).expect("costed")))
                .filter(|(n, _)| matches!(*n, "if" | "loop" | "scan"))
                .map(|(_, w)| w.flops)
                .collect::<Vec<f64>>()
        };
        // if: then adds 3 elements (reshapes are free), else does nothing: 3 flops.
        // loop body: add (3) + inner if (neg: 3) = 6 per iteration; scan body: mul (3).
        assert_eq!(work(&src.replace("trips", "5")), vec![3.0, 30.0, 12.0]);
        assert_eq!(
            work(&src),
            vec![3.0, 6.0, 12.0],
            "a symbolic trip counts once"
        );
    }

    #[test]
    fn cast_width_ties() {
        assert_eq!(wider(ElemType::I32, ElemType::F32), ElemType::F32);
        assert_eq!(wider(ElemType::F32, ElemType::I32), ElemType::F32);
        assert_eq!(wider(ElemType::F16, ElemType::BF16), ElemType::BF16);
        assert_eq!(wider(ElemType::Bool, ElemType::U8), ElemType::U8);
        assert_eq!(wider(ElemType::I64, ElemType::F16), ElemType::I64);
    }
}
