//! Dropout in training mode: every `dropout{ratio}` of the model draws its mask from the
//! counter-based generator [`Op::RandomUniform`], keyed by the step's `seed` input and its
//! step count, so a step is a pure function of its inputs (the same seed and step give the
//! same masks, on any device, in the interpreter and in compiled code):
//!
//! ```text
//! u    = random-uniform{shape = x's, salt = k}(seed, step)   (k: the k-th dropout, in op order)
//! keep = u >= ratio
//! y    = select(keep, x * 1 / (1 - ratio), 0),  mask = keep
//! ```
//!
//! PyTorch keeps an element with probability `1 - p` and scales kept ones by `1 / (1 - p)`;
//! this is the same distribution (drawn from another generator, so the masks differ from
//! torch's). The backward graph follows from `select` and `mul`: the gradient flows through
//! the kept elements only, scaled alike.

use tessera_ir::{BinaryOp, ElemType, Graph, Op, OpId, TensorType, ValueId};

use crate::grad::Bw;

/// Rewrites every `dropout` op of `graph` into its training form; adds the `seed` input
/// (i64 scalar) when there is one. Returns the number of dropout ops.
pub(super) fn train_dropouts(graph: &mut Graph, step: ValueId) -> Result<usize, String> {
    let ops: Vec<OpId> = graph
        .ops()
        .iter()
        .copied()
        .filter(|&o| matches!(graph.op(o).op, Op::Dropout { .. }))
        .collect();
    if ops.is_empty() {
        return Ok(0);
    }
    let seed = super::add_input(graph, "seed", TensorType::new(ElemType::I64, vec![]))?;
    for (salt, &o) in ops.iter().enumerate() {
        let data = graph.op(o).clone();
        let Op::Dropout { ratio } = data.op else {
            unreachable!("filtered above")
        };
        let x = data.operands[0];
        let ty = graph.ty(x).clone();
        let loc = data.loc.clone().unwrap_or_else(|| "dropout".into());
        let before = graph.ops().len();
        let mut bw = Bw::plain(graph, loc);
        let e = |m: crate::grad::GradError| m.message;
        let u = bw
            .op(
                Op::RandomUniform {
                    shape: ty.shape.clone(),
                    elem: ty.elem,
                    salt: salt as u64,
                },
                &[seed, step],
            )
            .map_err(e)?;
        let keep = bw.cmp_num(BinaryOp::GreaterEqual, u, ratio).map_err(e)?;
        // Nothing is kept at ratio 1 (u < 1): scale by 0 there, not by infinity, so that
        // the gradient through the unselected branch is 0, not NaN.
        let scale = if ratio < 1.0 {
            1.0 / (1.0 - ratio)
        } else {
            0.0
        };
        let scaled = bw.scale(x, scale).map_err(e)?;
        let y = bw.mask(keep, scaled).map_err(e)?;
        // The new ops go where the dropout was.
        super::move_new_ops_before(graph, before, o)?;
        for (r, new) in data.results.iter().zip([y, keep]) {
            let name = graph.value(*r).name.clone();
            graph.replace_all_uses(*r, new);
            if let Some(n) = name {
                graph.value_mut(*r).name = None;
                graph.set_name(new, n);
            }
        }
        graph.remove_op(o);
    }
    Ok(ops.len())
}
