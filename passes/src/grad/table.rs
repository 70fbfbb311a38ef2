//! Which ops are differentiable, and how: one entry per op of the IR (`TABLE` covers
//! `tessera_ir::text::OP_NAMES` exactly; a unit test keeps it so), and the property tests in
//! `passes/tests/grad_rules.rs` check every rule against finite differences (a test there
//! fails when an op with a rule has no test).

use tessera_ir::Op;

use super::{Vjp, elementwise as ew, index, linalg, nn, reduce, shape};

/// How an op is differentiated.
#[derive(Clone, Copy)]
pub enum Differentiability {
    /// A vector-Jacobian rule.
    Rule(Vjp),
    /// Differentiable almost everywhere with derivative zero (piecewise constant): no
    /// gradient flows through it, as in PyTorch.
    Zero,
    /// Its results are never floating point (or it has no operands): nothing to do.
    NoGradient,
    /// Not differentiated (yet): the reason.
    Unsupported(&'static str),
}

use Differentiability::{NoGradient, Rule, Unsupported, Zero};

/// Every op by its text name.
pub const TABLE: &[(&str, Differentiability)] = &[
    ("const", NoGradient),
    ("abs", Rule(ew::unary)),
    ("neg", Rule(ew::unary)),
    ("sign", Zero),
    ("exp", Rule(ew::unary)),
    ("log", Rule(ew::unary)),
    ("sqrt", Rule(ew::unary)),
    ("reciprocal", Rule(ew::unary)),
    ("sin", Rule(ew::unary)),
    ("cos", Rule(ew::unary)),
    ("tan", Rule(ew::unary)),
    ("asin", Rule(ew::unary)),
    ("acos", Rule(ew::unary)),
    ("atan", Rule(ew::unary)),
    ("tanh", Rule(ew::unary)),
    ("sigmoid", Rule(ew::unary)),
    ("erf", Rule(ew::unary)),
    ("relu", Rule(ew::unary)),
    ("ceil", Zero),
    ("floor", Zero),
    ("round", Zero),
    ("softplus", Rule(ew::unary)),
    ("softsign", Rule(ew::unary)),
    ("mish", Rule(ew::unary)),
    ("hard-swish", Rule(ew::unary)),
    ("gelu", Rule(ew::unary)),
    ("elu", Rule(ew::unary)),
    ("leaky-relu", Rule(ew::unary)),
    ("selu", Rule(ew::unary)),
    ("hard-sigmoid", Rule(ew::unary)),
    ("not", NoGradient),
    ("is-nan", NoGradient),
    ("add", Rule(ew::binary)),
    ("sub", Rule(ew::binary)),
    ("mul", Rule(ew::binary)),
    ("div", Rule(ew::binary)),
    ("pow", Rule(ew::binary)),
    (
        "mod",
        Unsupported("the gradient of a floored remainder is not implemented"),
    ),
    (
        "fmod",
        Unsupported("the gradient of a truncated remainder is not implemented"),
    ),
    ("max", Rule(ew::binary)),
    ("min", Rule(ew::binary)),
    ("prelu", Rule(ew::binary)),
    ("and", NoGradient),
    ("or", NoGradient),
    ("xor", NoGradient),
    ("equal", NoGradient),
    ("less", NoGradient),
    ("less-equal", NoGradient),
    ("greater", NoGradient),
    ("greater-equal", NoGradient),
    ("shift-left", NoGradient),
    ("shift-right", NoGradient),
    ("select", Rule(ew::select)),
    ("cast", Rule(ew::cast)),
    ("clip", Rule(ew::clip)),
    ("matmul", Rule(linalg::matmul)),
    ("gemm", Rule(linalg::gemm)),
    ("conv", Rule(linalg::conv)),
    ("conv-transpose", Rule(linalg::conv_transpose)),
    ("max-pool", Rule(nn::max_pool)),
    ("avg-pool", Rule(nn::avg_pool)),
    ("reduce-sum", Rule(reduce::reduce)),
    ("reduce-mean", Rule(reduce::reduce)),
    ("reduce-max", Rule(reduce::reduce)),
    ("reduce-min", Rule(reduce::reduce)),
    ("reduce-prod", Rule(reduce::reduce)),
    ("reduce-l1", Rule(reduce::reduce)),
    ("reduce-l2", Rule(reduce::reduce)),
    ("reduce-log-sum-exp", Rule(reduce::reduce)),
    ("reduce-sum-square", Rule(reduce::reduce)),
    ("argmax", NoGradient),
    ("argmin", NoGradient),
    ("softmax", Rule(reduce::softmax)),
    ("log-softmax", Rule(reduce::log_softmax)),
    ("cumsum", Rule(reduce::cumsum)),
    ("layer-norm", Rule(nn::layer_norm)),
    ("batch-norm", Rule(nn::batch_norm)),
    (
        "instance-norm",
        Unsupported("instance normalization's gradient is not implemented yet"),
    ),
    (
        "lrn",
        Unsupported("local response normalization's gradient is not implemented yet"),
    ),
    ("reshape", Rule(shape::reshape)),
    ("transpose", Rule(shape::transpose)),
    ("expand", Rule(shape::expand)),
    ("concat", Rule(shape::concat)),
    ("split", Rule(shape::split)),
    ("slice", Rule(shape::slice)),
    ("pad", Rule(shape::pad)),
    ("tile", Rule(shape::tile)),
    ("gather", Rule(index::gather)),
    ("gather-elements", Rule(index::gather_elements)),
    (
        "gather-nd",
        Unsupported("gather-nd's gradient is not implemented yet"),
    ),
    ("scatter-elements", Rule(index::scatter_elements)),
    (
        "scatter-nd",
        Unsupported("scatter-nd's gradient is not implemented yet"),
    ),
    ("top-k", Rule(index::top_k)),
    ("trilu", Rule(shape::trilu)),
    (
        "depth-to-space",
        Unsupported("depth-to-space's gradient is not implemented yet"),
    ),
    (
        "space-to-depth",
        Unsupported("space-to-depth's gradient is not implemented yet"),
    ),
    (
        "resize",
        Unsupported("resize's gradient is not implemented yet"),
    ),
    ("einsum", Rule(linalg::einsum)),
    ("shape", NoGradient),
    ("size", NoGradient),
    ("fill", NoGradient),
    ("range", NoGradient),
    ("random-uniform", NoGradient),
    // Inference semantics (the identity); the train pass replaces it before differentiating.
    ("dropout", Rule(shape::identity)),
    ("transfer", Rule(shape::identity)),
    ("all-reduce", Rule(shape::identity)),
    ("all-gather", Rule(shape::identity)),
    ("all-slice", Rule(shape::identity)),
    ("reduce-scatter", Rule(shape::identity)),
    ("all-to-all", Rule(shape::identity)),
    (
        "if",
        Unsupported("region ops (if, loop, scan) are not differentiated yet"),
    ),
    (
        "loop",
        Unsupported("region ops (if, loop, scan) are not differentiated yet"),
    ),
    (
        "scan",
        Unsupported("region ops (if, loop, scan) are not differentiated yet"),
    ),
];

/// How `op` is differentiated.
pub fn differentiability(op: &Op) -> Differentiability {
    let name = op.name();
    TABLE.iter().find(|(n, _)| *n == name).map_or(
        Unsupported("the op is not in the differentiation table"),
        |e| e.1,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_table_covers_every_op_once() {
        let mut table: Vec<&str> = super::TABLE.iter().map(|e| e.0).collect();
        table.sort_unstable();
        let mut ops = tessera_ir::text::OP_NAMES.to_vec();
        ops.sort_unstable();
        assert_eq!(table, ops);
    }
}
