//! Rules of the indexing ops: `gather`, `gather-elements`, `scatter-elements`, `top-k`.
//! The gradient of a read at indices is an add-scatter at the same indices.

use tessera_ir::{Dim, Op, OpData, ScatterReduction, ValueId};

use super::{Bw, R, g0};

/// `gather` along `axis`: the gathered axis is moved to the front, the gradient is
/// add-scattered into it with `scatter-nd`, and the axis moved back.
pub(crate) fn gather(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::Gather { axis } = data.op else {
        return Err(bw.err("internal error: not a gather"));
    };
    let (x, idx) = (data.operands[0], data.operands[1]);
    let xt = bw.ty(x);
    let r = xt.rank();
    let q = bw.ty(idx).rank();
    // data with `axis` first: [D_axis, pre..., post...]
    let to_front: Vec<usize> = std::iter::once(axis)
        .chain(0..axis)
        .chain(axis + 1..r)
        .collect();
    let mut front_shape = vec![xt.shape[axis].clone()];
    front_shape.extend(xt.shape[..axis].iter().cloned());
    front_shape.extend(xt.shape[axis + 1..].iter().cloned());
    let zeros = bw.fill(&tessera_ir::TensorType::new(xt.elem, front_shape), 0.0)?;
    // g is pre ++ I ++ post: move I first.
    let gperm: Vec<usize> = (axis..axis + q)
        .chain(0..axis)
        .chain(axis + q..axis + q + (r - axis - 1))
        .collect();
    let gt = bw.transpose(g, gperm)?;
    let mut ishape = bw.ty(idx).shape;
    ishape.push(Dim::Static(1));
    let i1 = bw.reshape(idx, &ishape)?;
    let s = bw.op(
        Op::ScatterNd {
            reduction: ScatterReduction::Add,
        },
        &[zeros, i1, gt],
    )?;
    let mut back = vec![0; r];
    for (i, &p) in to_front.iter().enumerate() {
        back[p] = i;
    }
    Ok(vec![Some(bw.transpose(s, back)?), None])
}

/// `gather-elements`: an add-scatter of the gradient at the same indices.
pub(crate) fn gather_elements(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::GatherElements { axis } = data.op else {
        return Err(bw.err("internal error: not a gather-elements"));
    };
    let (x, idx) = (data.operands[0], data.operands[1]);
    let t = bw.ty(x);
    let zeros = bw.fill(&t, 0.0)?;
    let d = bw.op(
        Op::ScatterElements {
            axis,
            reduction: ScatterReduction::Add,
        },
        &[zeros, idx, g],
    )?;
    Ok(vec![Some(d), None])
}

/// `scatter-elements` (overwrite or add): the data's gradient is the output's, with the
/// overwritten positions zeroed (overwrite); the updates' is the output's gradient read at
/// their positions.
pub(crate) fn scatter_elements(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let g = g0(bw, cots)?;
    let Op::ScatterElements { axis, reduction } = data.op else {
        return Err(bw.err("internal error: not a scatter-elements"));
    };
    let (idx, upd) = (data.operands[1], data.operands[2]);
    let ddata = if want[0] {
        Some(match reduction {
            ScatterReduction::Add => g,
            ScatterReduction::None => {
                let t = bw.ty(upd);
                let zeros = bw.fill(&t, 0.0)?;
                bw.op(
                    Op::ScatterElements {
                        axis,
                        reduction: ScatterReduction::None,
                    },
                    &[g, idx, zeros],
                )?
            }
            _ => {
                return Err(
                    bw.err("the gradient of a multiplying, max or min scatter is not implemented")
                );
            }
        })
    } else {
        None
    };
    let dupd = if want[2] {
        if !matches!(reduction, ScatterReduction::Add | ScatterReduction::None) {
            return Err(
                bw.err("the gradient of a multiplying, max or min scatter is not implemented")
            );
        }
        Some(bw.op(Op::GatherElements { axis }, &[g, idx])?)
    } else {
        None
    };
    Ok(vec![ddata, None, dupd])
}

/// `top-k`: the values' gradient add-scattered at the returned indices.
pub(crate) fn top_k(
    bw: &mut Bw<'_>,
    data: &OpData,
    cots: &[Option<ValueId>],
    _want: &[bool],
) -> R<Vec<Option<ValueId>>> {
    let Some(g) = cots[0] else {
        return Ok(vec![None]);
    };
    let Op::TopK { axis, .. } = data.op else {
        return Err(bw.err("internal error: not a top-k"));
    };
    let x = data.operands[0];
    let t = bw.ty(x);
    let zeros = bw.fill(&t, 0.0)?;
    let d = bw.op(
        Op::ScatterElements {
            axis,
            reduction: ScatterReduction::Add,
        },
        &[zeros, data.results[1], g],
    )?;
    Ok(vec![Some(d)])
}
