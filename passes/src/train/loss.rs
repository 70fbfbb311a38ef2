//! Losses, as `torch.nn.functional` defines them (mean reduction).

use tessera_ir::{BinaryOp as B, Dim, ElemType, Op, ReduceKind as K, UnaryOp as U, ValueId};

use crate::grad::{Bw, R};

/// Cross-entropy of `logits` `[N, C, d...]` against class indices `labels` `[N, d...]`
/// (i64): the mean over the samples whose label is not `ignore_index` of
/// `-(1 - s) log p[label] - s/C sum_c log p[c]`, with `p = softmax(logits)` along axis 1
/// and `s` the label smoothing (`torch.nn.functional.cross_entropy`).
pub(crate) fn cross_entropy(
    bw: &mut Bw<'_>,
    logits: ValueId,
    labels: ValueId,
    ignore_index: i64,
    smoothing: f64,
) -> R<ValueId> {
    let (total, count) = cross_entropy_parts(bw, logits, labels, ignore_index, smoothing)?;
    bw.div(total, count)
}

/// The number of `labels` that are not `ignore_index`, a scalar of type `elem`: the
/// denominator of [`cross_entropy`]'s mean.
pub(crate) fn counted(
    bw: &mut Bw<'_>,
    labels: ValueId,
    ignore_index: i64,
    elem: ElemType,
) -> R<ValueId> {
    let is_ignored = ignored(bw, labels, ignore_index)?;
    let keep = kept(bw, is_ignored, elem)?;
    let count = bw.reduce(K::Sum, keep, (0..bw.ty(keep).rank()).collect(), false)?;
    reshape_scalar(bw, count)
}

/// An i64 scalar `fill`.
fn int(bw: &mut Bw<'_>, value: i64) -> R<ValueId> {
    bw.op(
        Op::Fill {
            shape: vec![],
            elem: ElemType::I64,
            value: tessera_ir::Scalar::Int(value),
        },
        &[],
    )
}

/// Whether each label is `ignore_index`.
fn ignored(bw: &mut Bw<'_>, labels: ValueId, ignore_index: i64) -> R<ValueId> {
    let ignore = int(bw, ignore_index)?;
    bw.bin(B::Equal, labels, ignore)
}

/// 1 for each label that counts, 0 for an ignored one, as `elem`.
fn kept(bw: &mut Bw<'_>, is_ignored: ValueId, elem: ElemType) -> R<ValueId> {
    let one = bw.scalar(1.0, elem)?;
    let zero = bw.scalar(0.0, elem)?;
    bw.select(is_ignored, zero, one)
}

/// [`cross_entropy`]'s sum over the counted samples and their count, both scalars.
pub(crate) fn cross_entropy_parts(
    bw: &mut Bw<'_>,
    logits: ValueId,
    labels: ValueId,
    ignore_index: i64,
    smoothing: f64,
) -> R<(ValueId, ValueId)> {
    let lt = bw.ty(logits);
    let e = lt.elem;
    let classes = match lt.shape.get(1) {
        Some(Dim::Static(c)) => *c,
        _ => {
            return Err(bw.err(format!(
                "cross-entropy needs logits [N, C, ...] with a static class count, not {lt}"
            )));
        }
    };
    let logp = bw.op(Op::LogSoftmax { axis: 1 }, &[logits])?;
    let is_ignored = ignored(bw, labels, ignore_index)?;
    let zero_i = int(bw, 0)?;
    let safe = bw.select(is_ignored, zero_i, labels)?;
    let mut with_axis = bw.ty(safe).shape;
    with_axis.insert(1, Dim::Static(1));
    let idx = bw.reshape(safe, &with_axis)?;
    let picked = bw.op(Op::GatherElements { axis: 1 }, &[logp, idx])?;
    let picked = bw.reshape(picked, &bw.ty(labels).shape)?;
    let keep = kept(bw, is_ignored, e)?;
    let count = bw.reduce(K::Sum, keep, (0..bw.ty(keep).rank()).collect(), false)?;
    let nll = bw.mul(picked, keep)?;
    let nll = bw.reduce(K::Sum, nll, (0..bw.ty(keep).rank()).collect(), false)?;
    let mut total = bw.un(U::Neg, nll)?;
    if smoothing != 0.0 {
        total = bw.scale(total, 1.0 - smoothing)?;
        let s = bw.reduce(K::Sum, logp, vec![1], false)?;
        let s = bw.mul(s, keep)?;
        let s = bw.reduce(K::Sum, s, (0..bw.ty(keep).rank()).collect(), false)?;
        let s = bw.scale(s, -smoothing / classes as f64)?;
        total = bw.add(total, s)?;
    }
    let total = reshape_scalar(bw, total)?;
    let count = reshape_scalar(bw, count)?;
    Ok((total, count))
}

/// Mean squared error: `mean((pred - target)^2)`.
pub(crate) fn mse(bw: &mut Bw<'_>, pred: ValueId, target: ValueId) -> R<ValueId> {
    let d = bw.sub(pred, target)?;
    let sq = bw.mul(d, d)?;
    let r = bw.ty(sq).rank();
    let m = bw.reduce(K::Mean, sq, (0..r).collect(), false)?;
    reshape_scalar(bw, m)
}

fn reshape_scalar(bw: &mut Bw<'_>, v: ValueId) -> R<ValueId> {
    bw.reshape(v, &[])
}
