//! The op set and each op's typed attributes.
//!
//! Semantics are the IR's own, independent of any model format. The conventions shared by
//! many ops:
//!
//! - **Broadcasting** (marked *broadcasting*): numpy rules. Shapes are aligned at their last
//!   axis; missing leading axes count as 1; two extents are compatible when they are equal or
//!   one of them is 1. A symbolic extent is compatible with itself and with 1.
//! - **Axes** are stored normalized: non-negative, in range, and (for axis sets) strictly
//!   increasing. Front ends convert negative axes before building ops.
//! - **Padding** lists hold the leading pads of every spatial axis, then the trailing pads:
//!   `[b0, b1, ..., e0, e1, ...]`.
//! - **Spatial ops** (conv, pool) use the channels-first layout `[N, C, D1, D2, ...]`, with
//!   1 to 3 spatial axes.
//! - Elementwise ops keep the element type of their inputs unless stated otherwise.
//!
//! - **Global view** (the collectives `all-reduce`, `all-gather`, `all-slice`,
//!   `reduce-scatter`, `all-to-all`, and `transfer`): a value is
//!   always the logical full tensor, as in GSPMD and Shardy before partitioning; its
//!   [`Sharding`](crate::Sharding) says how it is laid out over the graph's
//!   [`Mesh`](crate::Mesh). Collectives change only the layout, so on the logical tensor
//!   they are the identity; an `all-reduce`'s (or `reduce-scatter`'s) operand *is* the
//!   logical sum, its per-device
//!   partial sums are never materialized by the IR.
//!
//! - **Region ops** (`if`, `loop`, `scan`) hold nested graphs, their *regions*. A region is
//!   isolated from above: it reads only its own inputs (block arguments), never a value of
//!   the graph around it, so everything a body needs from outside is an explicit operand of
//!   the op (a *captured* operand) and arrives as one of the body's inputs. A region has no
//!   constants of its own (the graph's constants are captured like any other value) and no
//!   mesh, shardings or devices: the region op is one unit, placed as a whole. Passes that do
//!   not know about regions see an ordinary op with operands and results. Symbols are scoped
//!   per graph: a body binds its own from its inputs when it runs.
//!
//! Every op has a kebab-case text name ([`Op::name`]); attributes print as `{key = value}`.

use crate::graph::{ConstId, Graph};
use crate::types::{Dim, ElemType, Scalar};

/// An operation kind with its attributes.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `const @name`: the value of a graph constant (see [`crate::Constant`]). No operands.
    Const(ConstId),
    /// One-operand elementwise ops. Result has the operand's shape.
    Unary(UnaryOp),
    /// Two-operand elementwise ops, *broadcasting*.
    Binary(BinaryOp),
    /// `select(cond, x, y)`: `x` where `cond` is true, else `y`. `cond` is bool; all three
    /// *broadcast*; `x` and `y` share the element type of the result.
    Select,
    /// Converts to another element type. Float to int truncates toward zero (saturating);
    /// anything to bool is `x != 0`; bool to numbers is 0 or 1.
    Cast {
        /// Target element type.
        to: ElemType,
    },
    /// `clamp(x)` to `[min, max]`; a missing bound is no bound.
    Clip {
        /// Lower bound.
        min: Option<f64>,
        /// Upper bound.
        max: Option<f64>,
    },
    /// Matrix product with numpy `matmul` semantics: 1-D operands are promoted (a leading or
    /// trailing axis of 1 that is removed from the result), leading batch axes *broadcast*.
    MatMul,
    /// `alpha * op(A) @ op(B) + beta * C`, where `op` transposes when asked. A and B are 2-D;
    /// the optional third operand C *broadcasts* to the `[M, N]` result.
    Gemm {
        /// Scale of the product.
        alpha: f64,
        /// Scale of C.
        beta: f64,
        /// Transpose A first.
        trans_a: bool,
        /// Transpose B first.
        trans_b: bool,
    },
    /// N-d convolution (cross-correlation). Operands: input `[N, C, D...]`, weight
    /// `[M, C/groups, K...]`, optional bias `[M]`. Output extent per spatial axis:
    /// `floor((D + pad_begin + pad_end - dilation*(K-1) - 1) / stride) + 1`.
    Conv(ConvAttrs),
    /// N-d transposed convolution. Operands: input `[N, C, D...]`, weight `[C, M/groups, K...]`,
    /// optional bias `[M]`. Output extent:
    /// `stride*(D-1) + output_padding + dilation*(K-1) + 1 - pad_begin - pad_end`.
    ConvTranspose {
        /// Strides, pads and dilations as for [`Op::Conv`].
        conv: ConvAttrs,
        /// Extra extent added at the end of each spatial axis.
        output_padding: Vec<u64>,
    },
    /// Max or average pooling over spatial windows. Output extent as for conv, or rounded up
    /// when `ceil_mode` (a window that would start in the trailing padding is dropped).
    /// Padded positions never win a max; for average they count only with
    /// `count_include_pad`.
    Pool(PoolAttrs),
    /// Reduction over a set of axes (empty set: all axes).
    Reduce {
        /// Which reduction.
        kind: ReduceKind,
        /// Reduced axes, strictly increasing. Empty means every axis.
        axes: Vec<usize>,
        /// Keep reduced axes with extent 1.
        keep_dims: bool,
    },
    /// Index (as i64) of the max or min along one axis; ties pick the first index, or the last
    /// with `select_last`.
    ArgReduce {
        /// Max or min.
        kind: ArgKind,
        /// The axis.
        axis: usize,
        /// Keep the axis with extent 1.
        keep_dims: bool,
        /// On ties pick the last index.
        select_last: bool,
    },
    /// `exp(x) / sum(exp(x))` along `axis` (numerically stable).
    Softmax {
        /// The normalized axis.
        axis: usize,
    },
    /// `log(softmax(x))` along `axis`.
    LogSoftmax {
        /// The normalized axis.
        axis: usize,
    },
    /// Cumulative sum along `axis`.
    CumSum {
        /// The axis.
        axis: usize,
        /// Exclude the current element (sum of the strictly preceding ones).
        exclusive: bool,
        /// Sum from the end.
        reverse: bool,
    },
    /// Layer normalization over axes `axis..rank`:
    /// `(x - mean) / sqrt(var + epsilon) * scale + bias`, with the population variance. Operands: x, scale, optional bias; scale and bias
    /// *broadcast* against the normalized shape.
    LayerNorm {
        /// First normalized axis.
        axis: usize,
        /// Added to the variance.
        epsilon: f64,
    },
    /// Inference batch normalization on `[N, C, ...]`:
    /// `(x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]`. Operands: x, scale, bias, mean, var (each `[C]`).
    BatchNorm {
        /// Added to the variance.
        epsilon: f64,
    },
    /// Instance normalization on `[N, C, D...]`: normalize over the spatial axes of each
    /// (n, c), then `* scale[c] + bias[c]`. Operands: x, scale, bias.
    InstanceNorm {
        /// Added to the variance.
        epsilon: f64,
    },
    /// Local response normalization across channels of `[N, C, ...]`:
    /// `x / (bias + alpha/size * sum(x[c']^2))^beta` over `c'` in
    /// `[c - floor((size-1)/2), c + ceil((size-1)/2)]`.
    Lrn {
        /// Window size across channels.
        size: u64,
        /// Scale.
        alpha: f64,
        /// Exponent.
        beta: f64,
        /// Offset.
        bias: f64,
    },
    /// Reinterprets the elements (row-major) with a new shape of the same element count.
    Reshape {
        /// The result shape, every extent explicit.
        shape: Vec<Dim>,
    },
    /// Permutes axes: result axis `i` is operand axis `perm[i]`.
    Transpose {
        /// A permutation of `0..rank`.
        perm: Vec<usize>,
    },
    /// Broadcasts the operand to `broadcast(operand shape, shape)` (numpy rules, both ways).
    Expand {
        /// Shape to broadcast with.
        shape: Vec<Dim>,
    },
    /// Joins operands (one or more, same rank and element type) along `axis`; other extents
    /// must match.
    Concat {
        /// The axis.
        axis: usize,
    },
    /// Splits along `axis` into one result per entry of `sizes`, which must sum to the extent.
    Split {
        /// The axis.
        axis: usize,
        /// Extent of each piece.
        sizes: Vec<u64>,
    },
    /// Strided slice. For each listed axis, indices `start, start+step, ...` while before
    /// `end` (after, for negative steps). Negative `start`/`end` count from the end; both are
    /// then clamped to the valid range (`[0, D]` for positive steps, `[-1, D-1]` for negative
    /// ones), as numpy does. Unlisted axes are kept whole.
    Slice {
        /// Sliced axes, strictly increasing.
        axes: Vec<usize>,
        /// Start per listed axis.
        starts: Vec<i64>,
        /// End (exclusive) per listed axis.
        ends: Vec<i64>,
        /// Step per listed axis, never 0.
        steps: Vec<i64>,
    },
    /// Pads each axis by `pads` (begin pads of every axis, then end pads; negative pads crop).
    Pad {
        /// `[b0, ..., b(r-1), e0, ..., e(r-1)]`.
        pads: Vec<i64>,
        /// How new elements are filled.
        mode: PadMode,
        /// Fill value for [`PadMode::Constant`].
        value: Scalar,
    },
    /// Repeats the operand `repeats[i]` times along axis `i`.
    Tile {
        /// Repeat count per axis.
        repeats: Vec<u64>,
    },
    /// Takes slices along `axis` at integer indices (operand 1, any integer type; negative
    /// indices count from the end). Result shape: `data[..axis] ++ indices ++ data[axis+1..]`.
    Gather {
        /// The axis.
        axis: usize,
    },
    /// `out[i][j][k] = data[index[i][j][k]][j][k]` (for axis 0); indices and result share a
    /// shape; negative indices count from the end.
    GatherElements {
        /// The axis.
        axis: usize,
    },
    /// Gathers slices addressed by the last axis of `indices` (operand 1), after
    /// `batch_dims` shared leading axes.
    GatherNd {
        /// Number of leading batch axes shared by data and indices.
        batch_dims: usize,
    },
    /// Copies `data` (operand 0) and writes `updates` (operand 2) at the positions given by
    /// `indices` (operand 1) along `axis`, combining with `reduction`.
    ScatterElements {
        /// The axis.
        axis: usize,
        /// How a written value combines with the existing one.
        reduction: ScatterReduction,
    },
    /// Copies `data` and writes slices of `updates` at the index tuples in the last axis of
    /// `indices`, combining with `reduction`.
    ScatterNd {
        /// How a written value combines with the existing one.
        reduction: ScatterReduction,
    },
    /// The `k` largest (or smallest) elements along `axis`, sorted, and their i64 indices.
    /// Two results: values and indices. Ties prefer the lower index.
    TopK {
        /// How many.
        k: u64,
        /// The axis.
        axis: usize,
        /// Largest (true) or smallest.
        largest: bool,
    },
    /// Keeps the upper (or lower) triangle of the last two axes, the diagonal shifted by `k`
    /// (`j - i >= k` for upper, `j - i <= k` for lower); zeroes the rest.
    Trilu {
        /// Upper (true) or lower.
        upper: bool,
        /// Diagonal offset.
        k: i64,
    },
    /// Moves `[N, C, H, W]` depth into `block x block` spatial tiles: `[N, C/b², H*b, W*b]`.
    DepthToSpace {
        /// Block size.
        block: u64,
        /// Channel order.
        mode: DepthToSpaceMode,
    },
    /// The inverse of depth-to-space in DCR order: `[N, C*b², H/b, W/b]`.
    SpaceToDepth {
        /// Block size.
        block: u64,
    },
    /// Resizes (interpolates) to `sizes`. Per axis the source coordinate of output index `o`
    /// comes from `coord` with scale `sizes[i] / input[i]`.
    Resize {
        /// Output shape.
        sizes: Vec<u64>,
        /// Interpolation.
        mode: ResizeMode,
        /// Output to input coordinate mapping.
        coord: CoordTransform,
        /// Rounding for [`ResizeMode::Nearest`].
        nearest: NearestMode,
        /// The `a` of cubic interpolation.
        cubic_coeff: f64,
    },
    /// Einstein summation, `"ij,jk->ik"` style; explicit output required, no ellipsis.
    Einsum {
        /// The equation.
        equation: String,
    },
    /// The operand's shape as a 1-D i64 tensor, axes `start..end`.
    Shape {
        /// First axis.
        start: usize,
        /// One past the last axis.
        end: usize,
    },
    /// The operand's element count as an i64 scalar.
    Size,
    /// A tensor of `shape` filled with `value`.
    Fill {
        /// Result shape.
        shape: Vec<Dim>,
        /// Result element type.
        elem: ElemType,
        /// The value.
        value: Scalar,
    },
    /// `start, start+delta, ...` up to (excluding) `limit`; operands are three scalars of the
    /// result element type. The result extent `max(ceil((limit - start) / delta), 0)` must
    /// equal `size`.
    Range {
        /// The number of elements (symbolic when it depends on runtime values).
        size: Dim,
    },
    /// `random-uniform(seed, counter)`: a tensor of `shape` whose elements are uniform in
    /// `[0, 1)` on a grid of 2^-24, a pure function of the two i64 scalar operands, the
    /// `salt` and each element's row-major index `i` (a counter-based generator: no state, so
    /// any subset of elements can be computed anywhere, in any order). With `mix` the
    /// SplitMix64 finalizer (Steele, Lea and Flood, "Fast splittable pseudorandom number
    /// generators", OOPSLA 2014) and `G = 0x9E3779B97F4A7C15`, all in wrapping u64:
    /// `key = mix(seed ^ mix(counter ^ mix(salt + G)))`,
    /// `u[i] = (mix(key + (i + 1) * G) >> 40) * 2^-24`. See [`random_uniform_bits`].
    RandomUniform {
        /// Result shape.
        shape: Vec<Dim>,
        /// Result element type (floating point).
        elem: ElemType,
        /// Distinguishes generators fed the same seed and counter (one per dropout site).
        salt: u64,
    },
    /// `dropout{ratio}(x) -> (y, mask)`: inference semantics, the identity (`y = x`, `mask`
    /// all true, bool). The `train` pass gives every `dropout` its training semantics (a
    /// mask drawn by [`Op::RandomUniform`], kept values scaled by `1 / (1 - ratio)`); the
    /// ONNX importer emits it for `Dropout` nodes only when importing a model to train.
    Dropout {
        /// The probability of dropping an element, in `[0, 1]`.
        ratio: f64,
    },
    /// Moves its one operand from device `from` to device `to`; the result has the operand's
    /// type and value (identity). The op runs on the destination: when it has a device, that
    /// device is `to`. It computes nothing; the time is the link transfer into it.
    Transfer {
        /// The source device's name.
        from: String,
        /// The destination device's name.
        to: String,
    },
    /// Sum over the mesh axes `axes` (*global view*, see below): the operand is, on every
    /// device, a partial sum of the logical tensor along those mesh axes; the result is the
    /// full sum, replicated along them. Result type equals the operand type.
    AllReduce {
        /// Mesh axes reduced over, strictly increasing, non-empty.
        axes: Vec<u32>,
    },
    /// Gathers the shards of its operand along the mesh axes `axes` (*global view*): the
    /// result is the same logical tensor, no longer split over those mesh axes. Result type
    /// equals the operand type; only the shardings differ.
    AllGather {
        /// Mesh axes gathered over, strictly increasing, non-empty.
        axes: Vec<u32>,
    },
    /// Sums over the mesh axes `axes` and leaves each device its block of the sum (MLIR's
    /// `shard.reduce_scatter`), in the *global view*: the operand is, on every device, a
    /// partial sum of the logical tensor (as for `all-reduce`); the result is the same logical
    /// tensor, split over those mesh axes as its sharding says. Result type equals the operand
    /// type. It moves half an `all-reduce`'s data: `p - 1` ring steps of `1/p` of it.
    ReduceScatter {
        /// Mesh axes reduced and split over, strictly increasing, non-empty.
        axes: Vec<u32>,
    },
    /// Moves a tensor split along one tensor axis over the mesh axes `axes` to the same
    /// tensor split along another over them (MLIR's `shard.all_to_all`), in the *global
    /// view*: every device sends each other device the part of its block that device keeps.
    /// Result type equals the operand type; only the shardings differ.
    AllToAll {
        /// Mesh axes the split moves over, strictly increasing, non-empty.
        axes: Vec<u32>,
    },
    /// The inverse of `all-gather` (MLIR's `shard.all_slice`), in the *global view*: the
    /// operand is replicated along the mesh axes `axes`, and every device keeps its own block
    /// of it, so the result is the same logical tensor, split over those mesh axes. No data
    /// moves: each device slices what it holds. Result type equals the operand type; only
    /// the shardings differ.
    AllSlice {
        /// Mesh axes sliced over, strictly increasing, non-empty.
        axes: Vec<u32>,
    },
    /// `if %cond, %captured...`: runs one of two regions. `cond` is a bool scalar; both
    /// branches take the captured operands as their inputs (same count and types) and return
    /// the results (same count and types in both). Only the branch the condition selects runs,
    /// so a branch may compute types, or fail in ways, that the other never does.
    If {
        /// Runs when the condition is true.
        then_branch: Box<Graph>,
        /// Runs when the condition is false.
        else_branch: Box<Graph>,
    },
    /// A `while` loop with a trip limit (ONNX `Loop`). Operands: the trip limit `M` (i64
    /// scalar), the initial condition (bool scalar), `carried` loop-carried values, then the
    /// captured values. The body's inputs are the iteration number (i64 scalar, from 0), the
    /// condition, the carried values and the captured values; its outputs are the next
    /// condition (bool scalar), the next carried values (each of its input's type) and
    /// per-iteration scan values. Iteration `i` runs while `i < M` and the condition is true.
    /// Results: the final carried values, then each scan value stacked along a new leading
    /// axis of extent `trip`, the number of iterations run.
    Loop {
        /// The number of loop-carried values.
        carried: usize,
        /// The leading extent of the scan results: the iteration count (symbolic unless known).
        trip: Dim,
        /// The loop body.
        body: Box<Graph>,
    },
    /// ONNX `Scan`: a loop over slices. Operands: `state` state values, the scan inputs
    /// (one per entry of `input_axes`), then the captured values. All scan inputs have the
    /// same extent `T` along their scan axis; iteration `t` gives the body the state, slice
    /// `t` of every scan input (the axis removed; slice `T - 1 - t` when reversed) and the
    /// captured values, and the body returns the next state (same types) and one element of
    /// every scan output. Results: the final state, then each scan output's elements stacked
    /// along its axis (an axis of the result, in `0..=element rank`; last element first when
    /// reversed).
    Scan(Box<ScanAttrs>),
}

/// The attributes of [`Op::Scan`].
#[derive(Clone, Debug, PartialEq)]
pub struct ScanAttrs {
    /// The number of state values.
    pub state: usize,
    /// The scan axis of each scan input.
    pub input_axes: Vec<usize>,
    /// Whether each scan input is read from its last slice to its first.
    pub input_reverse: Vec<bool>,
    /// The axis each scan output is stacked along.
    pub output_axes: Vec<usize>,
    /// Whether each scan output is stacked from last to first.
    pub output_reverse: Vec<bool>,
    /// The body.
    pub body: Graph,
}

/// Strides, pads, dilations and groups of a convolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvAttrs {
    /// Stride per spatial axis.
    pub strides: Vec<u64>,
    /// Begin pads of each spatial axis, then end pads.
    pub pads: Vec<u64>,
    /// Dilation per spatial axis.
    pub dilations: Vec<u64>,
    /// Channel groups.
    pub groups: u64,
}

/// Pooling attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolAttrs {
    /// Max or average.
    pub kind: PoolKind,
    /// Window extent per spatial axis.
    pub kernel: Vec<u64>,
    /// Stride per spatial axis.
    pub strides: Vec<u64>,
    /// Begin pads of each spatial axis, then end pads.
    pub pads: Vec<u64>,
    /// Dilation per spatial axis.
    pub dilations: Vec<u64>,
    /// Round the output extent up instead of down.
    pub ceil_mode: bool,
    /// Average pooling divides by the full window size, padding included.
    pub count_include_pad: bool,
}

/// Kinds of pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Maximum of the window.
    Max,
    /// Mean of the window.
    Avg,
}

/// Unary elementwise ops. Float-only unless stated otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `|x|` (any numeric type).
    Abs,
    /// `-x` (signed and float types).
    Neg,
    /// `sign(x)` in {-1, 0, 1} (any numeric type).
    Sign,
    /// `e^x`.
    Exp,
    /// Natural log.
    Log,
    /// Square root.
    Sqrt,
    /// `1 / x`.
    Reciprocal,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Arc sine.
    Asin,
    /// Arc cosine.
    Acos,
    /// Arc tangent.
    Atan,
    /// Hyperbolic tangent.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// Error function.
    Erf,
    /// `max(x, 0)` (any numeric type).
    Relu,
    /// Round up.
    Ceil,
    /// Round down.
    Floor,
    /// Round to nearest, ties to even.
    Round,
    /// `ln(1 + e^x)`.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * tanh(softplus(x))`.
    Mish,
    /// `x * relu6(x + 3) / 6`.
    HardSwish,
    /// `x * Phi(x)`; with `tanh`, the tanh approximation.
    Gelu {
        /// Use `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`.
        tanh: bool,
    },
    /// `x` if `x > 0` else `alpha * (e^x - 1)`.
    Elu {
        /// Negative-side scale.
        alpha: f64,
    },
    /// `x` if `x >= 0` else `alpha * x`.
    LeakyRelu {
        /// Negative slope.
        alpha: f64,
    },
    /// `gamma * (x if x > 0 else alpha * (e^x - 1))`.
    Selu {
        /// Negative-side scale.
        alpha: f64,
        /// Overall scale.
        gamma: f64,
    },
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid {
        /// Slope.
        alpha: f64,
        /// Offset.
        beta: f64,
    },
    /// Logical not (bool only).
    Not,
    /// True where `x` is NaN; result is bool.
    IsNan,
}

/// Binary elementwise ops (*broadcasting*). Both operands share an element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// Sum (integers wrap).
    Add,
    /// Difference (integers wrap).
    Sub,
    /// Product (integers wrap).
    Mul,
    /// Quotient; integers truncate toward zero, division by zero is an error.
    Div,
    /// `x^y`.
    Pow,
    /// Remainder with the sign of the divisor (Python `%`). For floats, as Python: `r = fmod(x,
    /// y)` (exact), plus `y` when `r` is non-zero and its sign differs from `y`'s; a zero result
    /// takes the sign of `y`. So `mod(1e20, 3) = 1`, `mod(5, inf) = 5`, `mod(-5, inf) = inf`,
    /// and `mod(x, 0)` is NaN.
    Mod,
    /// Remainder with the sign of the dividend (C `fmod`, Rust `%`).
    Fmod,
    /// Maximum (NaN wins).
    Max,
    /// Minimum (NaN wins).
    Min,
    /// `x` if `x >= 0` else `slope * x` (the second operand is the slope).
    Prelu,
    /// Logical and (bool).
    And,
    /// Logical or (bool).
    Or,
    /// Logical xor (bool).
    Xor,
    /// `x == y`, bool result.
    Equal,
    /// `x < y`, bool result.
    Less,
    /// `x <= y`, bool result.
    LessEqual,
    /// `x > y`, bool result.
    Greater,
    /// `x >= y`, bool result.
    GreaterEqual,
    /// `x << y` on integers: the bits of `x` moved left by `y` (bits past the top, the sign
    /// bit included, are dropped); 0 when `y` is negative or at least the type's bit width.
    ShiftLeft,
    /// `x >> y` on integers: arithmetic (sign-extending) for signed types, logical for
    /// unsigned ones; when `y` is negative or at least the bit width, what the sign alone
    /// gives: -1 for a negative `x`, else 0.
    ShiftRight,
}

impl BinaryOp {
    /// True when the result is bool whatever the operands are.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::LessEqual
                | BinaryOp::Greater
                | BinaryOp::GreaterEqual
        )
    }

    /// True for the logical ops, whose operands must be bool.
    pub fn is_logical(self) -> bool {
        matches!(self, BinaryOp::And | BinaryOp::Or | BinaryOp::Xor)
    }

    /// True for the bit shifts, whose operands must be integers.
    pub fn is_shift(self) -> bool {
        matches!(self, BinaryOp::ShiftLeft | BinaryOp::ShiftRight)
    }
}

/// Reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Arithmetic mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Product.
    Prod,
    /// Sum of absolute values.
    L1,
    /// Square root of the sum of squares.
    L2,
    /// `log(sum(exp(x)))`, computed stably.
    LogSumExp,
    /// Sum of squares.
    SumSquare,
}

/// Arg reductions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// Index of the maximum.
    Max,
    /// Index of the minimum.
    Min,
}

/// Padding modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PadMode {
    /// Fill with a constant.
    Constant,
    /// Mirror without repeating the edge element.
    Reflect,
    /// Repeat the edge element.
    Edge,
    /// Wrap around (periodic).
    Wrap,
}

/// How scatter combines an update with the existing element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScatterReduction {
    /// Overwrite.
    None,
    /// Add.
    Add,
    /// Multiply.
    Mul,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// Channel order of depth-to-space.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DepthToSpaceMode {
    /// Depth-column-row: channels split as `[b, b, C/b²]`.
    Dcr,
    /// Column-row-depth: channels split as `[C/b², b, b]`.
    Crd,
}

/// Interpolation of resize.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResizeMode {
    /// Nearest neighbour.
    Nearest,
    /// Linear (bilinear, trilinear, ...).
    Linear,
    /// Cubic (bicubic, ...).
    Cubic,
}

/// The mapping from an output coordinate `o` to an input coordinate, with `s = out/in`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CoordTransform {
    /// `(o + 0.5) / s - 0.5`.
    HalfPixel,
    /// As half-pixel, but 0 when the output extent is 1.
    PytorchHalfPixel,
    /// `o * (in - 1) / (out - 1)` (0 when out is 1).
    AlignCorners,
    /// `o / s`.
    Asymmetric,
}

/// Rounding of the source coordinate in nearest-neighbour resize.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NearestMode {
    /// Round half down (`ceil(x - 0.5)`).
    RoundPreferFloor,
    /// Round half up (`floor(x + 0.5)`).
    RoundPreferCeil,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)`.
    Ceil,
}

impl Op {
    /// The kebab-case text name of the op (for [`Op::Unary`] and [`Op::Binary`], the name
    /// of the elementwise function).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Const(_) => "const",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Select => "select",
            Op::Cast { .. } => "cast",
            Op::Clip { .. } => "clip",
            Op::MatMul => "matmul",
            Op::Gemm { .. } => "gemm",
            Op::Conv(_) => "conv",
            Op::ConvTranspose { .. } => "conv-transpose",
            Op::Pool(p) => match p.kind {
                PoolKind::Max => "max-pool",
                PoolKind::Avg => "avg-pool",
            },
            Op::Reduce { kind, .. } => kind.op_name(),
            Op::ArgReduce {
                kind: ArgKind::Max, ..
            } => "argmax",
            Op::ArgReduce {
                kind: ArgKind::Min, ..
            } => "argmin",
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log-softmax",
            Op::CumSum { .. } => "cumsum",
            Op::LayerNorm { .. } => "layer-norm",
            Op::BatchNorm { .. } => "batch-norm",
            Op::InstanceNorm { .. } => "instance-norm",
            Op::Lrn { .. } => "lrn",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Expand { .. } => "expand",
            Op::Concat { .. } => "concat",
            Op::Split { .. } => "split",
            Op::Slice { .. } => "slice",
            Op::Pad { .. } => "pad",
            Op::Tile { .. } => "tile",
            Op::Gather { .. } => "gather",
            Op::GatherElements { .. } => "gather-elements",
            Op::GatherNd { .. } => "gather-nd",
            Op::ScatterElements { .. } => "scatter-elements",
            Op::ScatterNd { .. } => "scatter-nd",
            Op::TopK { .. } => "top-k",
            Op::Trilu { .. } => "trilu",
            Op::DepthToSpace { .. } => "depth-to-space",
            Op::SpaceToDepth { .. } => "space-to-depth",
            Op::Resize { .. } => "resize",
            Op::Einsum { .. } => "einsum",
            Op::Shape { .. } => "shape",
            Op::Size => "size",
            Op::Fill { .. } => "fill",
            Op::Range { .. } => "range",
            Op::RandomUniform { .. } => "random-uniform",
            Op::Dropout { .. } => "dropout",
            Op::Transfer { .. } => "transfer",
            Op::AllReduce { .. } => "all-reduce",
            Op::AllGather { .. } => "all-gather",
            Op::AllSlice { .. } => "all-slice",
            Op::ReduceScatter { .. } => "reduce-scatter",
            Op::AllToAll { .. } => "all-to-all",
            Op::If { .. } => "if",
            Op::Loop { .. } => "loop",
            Op::Scan(_) => "scan",
        }
    }

    /// The regions (nested graphs) of a region op, in order (`if`: then, else); empty for
    /// every other op.
    pub fn regions(&self) -> Vec<&Graph> {
        match self {
            Op::If {
                then_branch,
                else_branch,
            } => vec![then_branch, else_branch],
            Op::Loop { body, .. } => vec![body],
            Op::Scan(s) => vec![&s.body],
            _ => Vec::new(),
        }
    }

    /// The regions, mutably (see [`Op::regions`]).
    pub fn regions_mut(&mut self) -> Vec<&mut Graph> {
        match self {
            Op::If {
                then_branch,
                else_branch,
            } => vec![then_branch, else_branch],
            Op::Loop { body, .. } => vec![body],
            Op::Scan(s) => vec![&mut s.body],
            _ => Vec::new(),
        }
    }

    /// Whether the op holds regions (`if`, `loop`, `scan`).
    pub fn has_regions(&self) -> bool {
        matches!(self, Op::If { .. } | Op::Loop { .. } | Op::Scan(_))
    }

    /// The names of a region op's regions, as the text format prints them.
    pub fn region_names(&self) -> &'static [&'static str] {
        match self {
            Op::If { .. } => &["then", "else"],
            Op::Loop { .. } | Op::Scan(_) => &["body"],
            _ => &[],
        }
    }

    /// The number of results this op produces.
    pub fn num_results(&self) -> usize {
        match self {
            Op::Split { sizes, .. } => sizes.len(),
            Op::TopK { .. } | Op::Dropout { .. } => 2,
            Op::If { then_branch, .. } => then_branch.outputs().len(),
            Op::Loop { body, .. } => body.outputs().len().saturating_sub(1),
            Op::Scan(s) => s.body.outputs().len(),
            _ => 1,
        }
    }

    /// The mesh axes of a collective (`all-reduce`, `all-gather`, `reduce-scatter`,
    /// `all-to-all`: the ops that move data between mesh devices); `None` for other ops.
    pub fn collective_axes(&self) -> Option<&[u32]> {
        match self {
            Op::AllReduce { axes }
            | Op::AllGather { axes }
            | Op::ReduceScatter { axes }
            | Op::AllToAll { axes } => Some(axes),
            _ => None,
        }
    }
}

impl UnaryOp {
    /// The text name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Abs => "abs",
            UnaryOp::Neg => "neg",
            UnaryOp::Sign => "sign",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Reciprocal => "reciprocal",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tan => "tan",
            UnaryOp::Asin => "asin",
            UnaryOp::Acos => "acos",
            UnaryOp::Atan => "atan",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Erf => "erf",
            UnaryOp::Relu => "relu",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Floor => "floor",
            UnaryOp::Round => "round",
            UnaryOp::Softplus => "softplus",
            UnaryOp::Softsign => "softsign",
            UnaryOp::Mish => "mish",
            UnaryOp::HardSwish => "hard-swish",
            UnaryOp::Gelu { .. } => "gelu",
            UnaryOp::Elu { .. } => "elu",
            UnaryOp::LeakyRelu { .. } => "leaky-relu",
            UnaryOp::Selu { .. } => "selu",
            UnaryOp::HardSigmoid { .. } => "hard-sigmoid",
            UnaryOp::Not => "not",
            UnaryOp::IsNan => "is-nan",
        }
    }

    /// Ops defined on every numeric type (the rest are float-only, or bool-only for `not`).
    pub fn accepts_int(self) -> bool {
        matches!(
            self,
            UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Sign | UnaryOp::Relu
        )
    }
}

impl BinaryOp {
    /// The text name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Mod => "mod",
            BinaryOp::Fmod => "fmod",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Prelu => "prelu",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Equal => "equal",
            BinaryOp::Less => "less",
            BinaryOp::LessEqual => "less-equal",
            BinaryOp::Greater => "greater",
            BinaryOp::GreaterEqual => "greater-equal",
            BinaryOp::ShiftLeft => "shift-left",
            BinaryOp::ShiftRight => "shift-right",
        }
    }

    /// Every binary op.
    pub const ALL: [BinaryOp; 20] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Mod,
        BinaryOp::Fmod,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Prelu,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Equal,
        BinaryOp::Less,
        BinaryOp::LessEqual,
        BinaryOp::Greater,
        BinaryOp::GreaterEqual,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRight,
    ];
}

impl ReduceKind {
    /// The text name of the reduce op.
    pub fn op_name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "reduce-sum",
            ReduceKind::Mean => "reduce-mean",
            ReduceKind::Max => "reduce-max",
            ReduceKind::Min => "reduce-min",
            ReduceKind::Prod => "reduce-prod",
            ReduceKind::L1 => "reduce-l1",
            ReduceKind::L2 => "reduce-l2",
            ReduceKind::LogSumExp => "reduce-log-sum-exp",
            ReduceKind::SumSquare => "reduce-sum-square",
        }
    }

    /// Every reduction.
    pub const ALL: [ReduceKind; 9] = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Max,
        ReduceKind::Min,
        ReduceKind::Prod,
        ReduceKind::L1,
        ReduceKind::L2,
        ReduceKind::LogSumExp,
        ReduceKind::SumSquare,
    ];
}

/// The golden-ratio increment of SplitMix64.
pub const RANDOM_GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function (Steele, Lea and Flood 2014): a bijective mix of 64 bits.
pub fn random_mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The key of an [`Op::RandomUniform`] stream: `mix(seed ^ mix(counter ^ mix(salt + G)))`.
pub fn random_key(seed: i64, counter: i64, salt: u64) -> u64 {
    let s = random_mix(salt.wrapping_add(RANDOM_GAMMA));
    random_mix(seed as u64 ^ random_mix(counter as u64 ^ s))
}

/// The 24 random bits of element `index` of a stream: `u = bits * 2^-24` is exact in f32.
pub fn random_uniform_bits(key: u64, index: u64) -> u32 {
    let z = key.wrapping_add(index.wrapping_add(1).wrapping_mul(RANDOM_GAMMA));
    (random_mix(z) >> 40) as u32
}
