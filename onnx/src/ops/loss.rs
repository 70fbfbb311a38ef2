//! Loss ONNX ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, composed from
//! gathers, selects and reductions.

use tessera_ir::{BinaryOp, Dim, ElemType, Op, ReduceKind, UnaryOp, ValueId};

use super::Arity;
use super::{Node, Registry, bin, cast_to, input, opt_input, reshape, scalar, un};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("NegativeLogLikelihoodLoss", &[(12, 2, 3)]),
    ("SoftmaxCrossEntropyLoss", &[(12, 2, 3)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("NegativeLogLikelihoodLoss", 12, |cx, n| {
        let x = input(cx, n, 0)?;
        Ok(vec![nll(cx, n, x)?])
    });
    r.add("SoftmaxCrossEntropyLoss", 12, |cx, n| {
        // SoftmaxCrossEntropyLoss-13: `log_prob = log_softmax(scores, axis 1)`, then the
        // negative log-likelihood loss of `log_prob` with the same labels, weights,
        // reduction and ignore_index; the optional second output is `log_prob`.
        let scores = input(cx, n, 0)?;
        if cx.ty(scores).rank() < 2 {
            return Err(format!(
                "input 0 (scores) must have rank >= 2 ([N, C, ...]), got {}",
                cx.ty(scores)
            ));
        }
        let log_prob = cx.emit1(Op::LogSoftmax { axis: 1 }, &[scores])?;
        let loss = nll(cx, n, log_prob)?;
        let mut outs = vec![loss];
        if n.num_outputs() > 1 {
            outs.push(log_prob);
        }
        Ok(outs)
    });
}

/// The `reduction` attribute of the losses.
#[derive(Clone, Copy)]
enum Reduction {
    None,
    Sum,
    Mean,
}

/// NegativeLogLikelihoodLoss-13/22 of `x` (`[N, C, d...]`, log-probabilities) with the
/// node's target (input 1, `[N, d...]` integers), optional weight (input 2, `[C]`),
/// `reduction` (default "mean") and optional `ignore_index`:
///
/// - `w[n, d] = weight[target[n, d]]` (1 without weights), 0 where `target == ignore_index`;
/// - `loss[n, d] = -x[n, target[n, d], d] * w[n, d]`;
/// - "none": `loss`; "sum": `sum(loss)`; "mean": `sum(loss) / sum(w)`, which is the plain
///   mean when there are neither weights nor an ignore_index.
///
/// Ignored targets may lie outside `[0, C)`; they are replaced by 0 before gathering.
fn nll(cx: &mut Ctx<'_>, n: &Node<'_>, x: ValueId) -> Result<ValueId, String> {
    let reduction = match n.attr_s("reduction")?.as_deref() {
        None | Some("mean") => Reduction::Mean,
        Some("sum") => Reduction::Sum,
        Some("none") => Reduction::None,
        Some(other) => {
            return Err(format!(
                "reduction = \"{other}\" is not one of \"none\", \"sum\", \"mean\""
            ));
        }
    };
    let ignore_index = n.attr_i("ignore_index")?;
    let target = input(cx, n, 1)?;
    let weight = opt_input(cx, n, 2)?;
    let xt = cx.ty(x).clone();
    let tt = cx.ty(target).clone();
    let t = xt.elem;
    if !t.is_float() {
        return Err(format!("input 0 must be floating-point, got {xt}"));
    }
    if !tt.elem.is_int() {
        return Err(format!(
            "input 1 (target) must be an integer tensor, got {tt}"
        ));
    }
    if xt.rank() < 2 || tt.rank() + 1 != xt.rank() {
        return Err(format!(
            "input 0 {xt} must be [N, C, d...] and input 1 (target) {tt} [N, d...]"
        ));
    }
    let target = cast_to(cx, target, ElemType::I64)?;
    // The mask of counted positions, and the targets with ignored ones made safe (0).
    let (target, keep) = match ignore_index {
        Some(ii) => {
            let ii = scalar(cx, ElemType::I64, ii as f64)?;
            let keep = bin(cx, BinaryOp::Equal, target, ii)?;
            let keep = un(cx, UnaryOp::Not, keep)?;
            let zero = scalar(cx, ElemType::I64, 0.0)?;
            let safe = cx.emit1(Op::Select, &[keep, target, zero])?;
            (safe, Some(keep))
        }
        None => (target, None),
    };
    // -x[n, target[n, d], d]: gather along the class axis with the target as [N, 1, d...].
    let mut idx_shape = tt.shape.clone();
    idx_shape.insert(1, Dim::Static(1));
    let idx = reshape(cx, target, idx_shape)?;
    let picked = cx.emit1(Op::GatherElements { axis: 1 }, &[x, idx])?;
    let picked = reshape(cx, picked, tt.shape.clone())?;
    let mut loss = un(cx, UnaryOp::Neg, picked)?;
    // The per-position weights (None: all 1).
    let mut w = match weight {
        Some(wv) => {
            let wv = cast_to(cx, wv, t)?;
            Some(cx.emit1(Op::Gather { axis: 0 }, &[wv, target])?)
        }
        None => None,
    };
    if let Some(keep) = keep {
        let zero = scalar(cx, t, 0.0)?;
        let base = match w {
            Some(w) => w,
            None => scalar(cx, t, 1.0)?,
        };
        w = Some(cx.emit1(Op::Select, &[keep, base, zero])?);
    }
    if let Some(w) = w {
        loss = bin(cx, BinaryOp::Mul, loss, w)?;
    }
    let sum_all = Op::Reduce {
        kind: ReduceKind::Sum,
        axes: vec![],
        keep_dims: false,
    };
    match (reduction, w) {
        (Reduction::Sum, _) => cx.emit1(sum_all, &[loss]),
        (Reduction::Mean, Some(w)) => {
            let total = cx.emit1(sum_all.clone(), &[loss])?;
            // `w` may be a broadcast scalar (no weights, no positions ignored by shape):
            // expand it to the target's shape before summing.
            let w = cx.emit1(
                Op::Expand {
                    shape: tt.shape.clone(),
                },
                &[w],
            )?;
            let count = cx.emit1(sum_all, &[w])?;
            bin(cx, BinaryOp::Div, total, count)
        }
        (Reduction::Mean, None) => cx.emit1(
            Op::Reduce {
                kind: ReduceKind::Mean,
                axes: vec![],
                keep_dims: false,
            },
            &[loss],
        ),
        (Reduction::None, _) => Ok(loss),
    }
}
