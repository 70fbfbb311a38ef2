//! Shape and type inference for every op.
//!
//! [`infer`] computes the result types of an op from its attributes and operand types. It is
//! what the verifier checks declared types against and what builders (the importer, passes)
//! use to type new ops. All size arithmetic is checked: an overflowing or negative extent is an
//! [`InferError`], never a panic.
//!
//! Symbolic extents flow through where an op keeps an axis unchanged (batch axes, elementwise
//! ops, matmul's outer axes, ...). Where an op computes an extent from a symbolic one (a conv
//! output size, concatenation along a symbolic axis), inference fails with an error that says
//! the symbol must be bound to a number first. Broadcasting a symbol against a static extent
//! other than 1 gives that static extent (the run-time check is the interpreter's).

use std::collections::BTreeMap;

use crate::graph::Graph;
use crate::op::{
    ArgKind, BinaryOp, ConvAttrs, Op, PoolAttrs, ReduceKind, ResizeMode, ScanAttrs, UnaryOp,
};
use crate::types::{Dim, ElemType, Shape, TensorType};

/// Why an op's result types cannot be inferred (the op is ill-typed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InferError {
    /// What is wrong, without the op's name (the caller adds context).
    pub message: String,
}

type Result<T> = std::result::Result<T, InferError>;

fn err<T>(message: impl Into<String>) -> Result<T> {
    Err(InferError {
        message: message.into(),
    })
}

/// Infers the result types of `op` applied to operands of the given types.
///
/// `graph` is consulted only for [`Op::Const`] (the constant's declared type).
#[allow(clippy::needless_range_loop)] // spatial axes index several parallel lists
pub fn infer(graph: &Graph, op: &Op, operands: &[&TensorType]) -> Result<Vec<TensorType>> {
    let one = |t: TensorType| Ok(vec![t]);
    match op {
        Op::Const(c) => {
            arity(operands, 0, 0)?;
            if c.index() >= graph.num_consts() {
                return err(format!("constant {c} does not exist"));
            }
            one(graph.constant(*c).ty.clone())
        }
        Op::Unary(u) => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            match u {
                UnaryOp::Not => require_elem(x, 0, |e| e == ElemType::Bool, "bool")?,
                UnaryOp::IsNan => {
                    require_float(x, 0)?;
                    return one(x.with_elem(ElemType::Bool));
                }
                u if u.accepts_int() => require_numeric(x, 0)?,
                _ => require_float(x, 0)?,
            }
            one(x.clone())
        }
        Op::Binary(b) => {
            arity(operands, 2, 2)?;
            let (x, y) = (operands[0], operands[1]);
            same_elem(operands)?;
            if b.is_logical() {
                require_elem(x, 0, |e| e == ElemType::Bool, "bool")?;
            } else if b.is_shift() {
                require_elem(x, 0, |e| e.is_int(), "an integer type")?;
            } else if *b != BinaryOp::Equal {
                require_numeric(x, 0)?;
            }
            let shape = broadcast(&x.shape, &y.shape)?;
            let elem = if b.is_comparison() {
                ElemType::Bool
            } else {
                x.elem
            };
            one(TensorType::new(elem, shape))
        }
        Op::Select => {
            arity(operands, 3, 3)?;
            require_elem(operands[0], 0, |e| e == ElemType::Bool, "bool")?;
            same_elem(&operands[1..])?;
            let s = broadcast(&operands[0].shape, &operands[1].shape)?;
            let s = broadcast(&s, &operands[2].shape)?;
            one(TensorType::new(operands[1].elem, s))
        }
        Op::Cast { to } => {
            arity(operands, 1, 1)?;
            one(operands[0].with_elem(*to))
        }
        Op::Clip { min, max } => {
            arity(operands, 1, 1)?;
            require_numeric(operands[0], 0)?;
            if let (Some(lo), Some(hi)) = (min, max)
                && lo > hi
            {
                return err(format!("min {lo} is greater than max {hi}"));
            }
            one(operands[0].clone())
        }
        Op::MatMul => {
            arity(operands, 2, 2)?;
            same_elem(operands)?;
            require_numeric(operands[0], 0)?;
            one(TensorType::new(
                operands[0].elem,
                matmul_shape(&operands[0].shape, &operands[1].shape)?,
            ))
        }
        Op::Gemm {
            trans_a, trans_b, ..
        } => {
            arity(operands, 2, 3)?;
            same_elem(operands)?;
            require_numeric(operands[0], 0)?;
            require_rank(operands[0], 0, 2)?;
            require_rank(operands[1], 1, 2)?;
            let a = &operands[0].shape;
            let b = &operands[1].shape;
            let (m, ka) = if *trans_a {
                (&a[1], &a[0])
            } else {
                (&a[0], &a[1])
            };
            let (kb, n) = if *trans_b {
                (&b[1], &b[0])
            } else {
                (&b[0], &b[1])
            };
            dims_agree(ka, kb, "contraction extents")?;
            let out = vec![m.clone(), n.clone()];
            if let Some(c) = operands.get(2) {
                let s = broadcast(&c.shape, &out)?;
                if s != out {
                    return err(format!(
                        "bias {} does not broadcast to the result [{}, {}]",
                        c, m, n
                    ));
                }
            }
            one(TensorType::new(operands[0].elem, out))
        }
        Op::Conv(attrs) => {
            arity(operands, 2, 3)?;
            same_elem(operands)?;
            require_float(operands[0], 0)?;
            let (x, w) = (operands[0], operands[1]);
            let spatial = spatial_rank(x)?;
            require_rank(w, 1, x.rank())?;
            check_conv_attrs(attrs, spatial)?;
            let groups = attrs.groups;
            let c = static_dim(&x.shape[1], "input channels")?;
            let m = static_dim(&w.shape[0], "output channels")?;
            let cg = static_dim(&w.shape[1], "weight channels")?;
            if c % groups != 0 || m % groups != 0 {
                return err(format!(
                    "groups {groups} must divide input channels {c} and output channels {m}"
                ));
            }
            if c / groups != cg {
                return err(format!(
                    "weight expects {cg} channels per group, input has {c} / {groups} groups"
                ));
            }
            check_bias(operands.get(2).copied(), m)?;
            let mut out = vec![x.shape[0].clone(), Dim::Static(m)];
            for i in 0..spatial {
                let d = static_dim(&x.shape[2 + i], "spatial extent")?;
                let k = static_dim(&w.shape[2 + i], "kernel extent")?;
                let o = window_extent(
                    d,
                    k,
                    attrs.strides[i],
                    attrs.pads[i],
                    attrs.pads[spatial + i],
                    attrs.dilations[i],
                    false,
                )?;
                out.push(Dim::Static(o));
            }
            one(TensorType::new(x.elem, out))
        }
        Op::ConvTranspose {
            conv,
            output_padding,
        } => {
            arity(operands, 2, 3)?;
            same_elem(operands)?;
            require_float(operands[0], 0)?;
            let (x, w) = (operands[0], operands[1]);
            let spatial = spatial_rank(x)?;
            require_rank(w, 1, x.rank())?;
            check_conv_attrs(conv, spatial)?;
            if output_padding.len() != spatial {
                return err(format!(
                    "output-padding has {} entries for {spatial} spatial axes",
                    output_padding.len()
                ));
            }
            let c = static_dim(&x.shape[1], "input channels")?;
            let wc = static_dim(&w.shape[0], "weight input channels")?;
            if c != wc {
                return err(format!("weight expects {wc} input channels, input has {c}"));
            }
            if c % conv.groups != 0 {
                return err(format!(
                    "groups {} must divide input channels {c}",
                    conv.groups
                ));
            }
            let m = checked_mul(
                static_dim(&w.shape[1], "weight output channels")?,
                conv.groups,
            )?;
            check_bias(operands.get(2).copied(), m)?;
            let mut out = vec![x.shape[0].clone(), Dim::Static(m)];
            for i in 0..spatial {
                let d = static_dim(&x.shape[2 + i], "spatial extent")?;
                let k = static_dim(&w.shape[2 + i], "kernel extent")?;
                if d == 0 {
                    return err("transposed convolution of an empty spatial axis");
                }
                if k == 0 {
                    return err(format!("kernel extent of spatial axis {i} is 0"));
                }
                let full = checked_add(
                    checked_add(checked_mul(conv.strides[i], d - 1)?, output_padding[i])?,
                    checked_add(checked_mul(conv.dilations[i], k - 1)?, 1)?,
                )?;
                let pads = checked_add(conv.pads[i], conv.pads[spatial + i])?;
                if pads > full {
                    return err(format!(
                        "pads {pads} exceed the output extent {full} of spatial axis {i}"
                    ));
                }
                out.push(Dim::Static(full - pads));
            }
            one(TensorType::new(x.elem, out))
        }
        Op::Pool(p) => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            require_numeric(x, 0)?;
            let spatial = spatial_rank(x)?;
            check_pool_attrs(p, spatial)?;
            let mut out = vec![x.shape[0].clone(), x.shape[1].clone()];
            for i in 0..spatial {
                let d = static_dim(&x.shape[2 + i], "spatial extent")?;
                let o = window_extent(
                    d,
                    p.kernel[i],
                    p.strides[i],
                    p.pads[i],
                    p.pads[spatial + i],
                    p.dilations[i],
                    p.ceil_mode,
                )?;
                out.push(Dim::Static(o));
            }
            one(TensorType::new(x.elem, out))
        }
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            match kind {
                ReduceKind::L2 | ReduceKind::LogSumExp | ReduceKind::Mean => require_float(x, 0)?,
                _ => require_numeric(x, 0)?,
            }
            check_axes(axes, x.rank())?;
            let all = axes.is_empty();
            let mut out = Vec::new();
            for (i, d) in x.shape.iter().enumerate() {
                if all || axes.contains(&i) {
                    if *keep_dims {
                        out.push(Dim::Static(1));
                    }
                } else {
                    out.push(d.clone());
                }
            }
            one(TensorType::new(x.elem, out))
        }
        Op::ArgReduce {
            kind,
            axis,
            keep_dims,
            ..
        } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            require_numeric(x, 0)?;
            check_axis(*axis, x.rank())?;
            if x.shape[*axis] == Dim::Static(0) {
                let which = if *kind == ArgKind::Max {
                    "argmax"
                } else {
                    "argmin"
                };
                return err(format!("{which} over an empty axis {axis}"));
            }
            let mut out = x.shape.clone();
            if *keep_dims {
                out[*axis] = Dim::Static(1);
            } else {
                out.remove(*axis);
            }
            one(TensorType::new(ElemType::I64, out))
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(operands, 1, 1)?;
            require_float(operands[0], 0)?;
            check_axis(*axis, operands[0].rank())?;
            one(operands[0].clone())
        }
        Op::CumSum { axis, .. } => {
            arity(operands, 1, 1)?;
            require_numeric(operands[0], 0)?;
            check_axis(*axis, operands[0].rank())?;
            one(operands[0].clone())
        }
        Op::LayerNorm { axis, epsilon } => {
            arity(operands, 2, 3)?;
            same_elem(operands)?;
            require_float(operands[0], 0)?;
            let x = operands[0];
            check_axis(*axis, x.rank())?;
            check_epsilon(*epsilon)?;
            let normalized: Shape = x.shape[*axis..].to_vec();
            for (i, p) in operands.iter().enumerate().skip(1) {
                let b = broadcast(&p.shape, &normalized)?;
                if b != normalized {
                    return err(format!(
                        "operand {i} ({p}) does not broadcast to the normalized shape {}",
                        TensorType::new(x.elem, normalized)
                    ));
                }
            }
            one(x.clone())
        }
        Op::BatchNorm { epsilon } => {
            arity(operands, 5, 5)?;
            same_elem(operands)?;
            require_float(operands[0], 0)?;
            check_epsilon(*epsilon)?;
            let x = operands[0];
            if x.rank() < 2 {
                return err(format!(
                    "operand 0 must have rank >= 2 ([N, C, ...]), got {x}"
                ));
            }
            for (i, p) in operands.iter().enumerate().skip(1) {
                per_channel(p, i, &x.shape[1])?;
            }
            one(x.clone())
        }
        Op::InstanceNorm { epsilon } => {
            arity(operands, 3, 3)?;
            same_elem(operands)?;
            require_float(operands[0], 0)?;
            check_epsilon(*epsilon)?;
            let x = operands[0];
            spatial_rank(x)?;
            for (i, p) in operands.iter().enumerate().skip(1) {
                per_channel(p, i, &x.shape[1])?;
            }
            one(x.clone())
        }
        Op::Lrn { size, .. } => {
            arity(operands, 1, 1)?;
            require_float(operands[0], 0)?;
            if operands[0].rank() < 2 {
                return err(format!(
                    "operand must have rank >= 2 ([N, C, ...]), got {}",
                    operands[0]
                ));
            }
            if *size == 0 {
                return err("size must be at least 1");
            }
            one(operands[0].clone())
        }
        Op::Reshape { shape } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            if element_key(&x.shape)? != element_key(shape)? {
                return err(format!(
                    "cannot reshape {x} to [{}]: element counts differ",
                    join(shape)
                ));
            }
            // With no elements the key ignores symbols, but a run still needs every symbol of
            // the target shape bound: it must come from the operand's shape.
            if let Some(s) = shape.iter().find_map(|d| match d {
                Dim::Sym(s) if !x.shape.contains(d) => Some(s),
                _ => None,
            }) {
                return err(format!(
                    "cannot reshape {x} to [{}]: symbol {s} does not appear in the operand's shape",
                    join(shape)
                ));
            }
            one(TensorType::new(x.elem, shape.clone()))
        }
        Op::Transpose { perm } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank()
                || perm
                    .iter()
                    .any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true))
            {
                return err(format!(
                    "perm {perm:?} is not a permutation of the {} axes of {x}",
                    x.rank()
                ));
            }
            one(TensorType::new(
                x.elem,
                perm.iter().map(|&p| x.shape[p].clone()).collect(),
            ))
        }
        Op::Expand { shape } => {
            arity(operands, 1, 1)?;
            one(TensorType::new(
                operands[0].elem,
                broadcast(&operands[0].shape, shape)?,
            ))
        }
        Op::Concat { axis } => {
            arity(operands, 1, usize::MAX)?;
            same_elem(operands)?;
            let first = operands[0];
            check_axis(*axis, first.rank())?;
            let mut total = 0u64;
            let mut sym: Option<Dim> = None;
            for (i, t) in operands.iter().enumerate() {
                if t.rank() != first.rank() {
                    return err(format!(
                        "operand {i} has rank {}, operand 0 has rank {}",
                        t.rank(),
                        first.rank()
                    ));
                }
                for (a, (d, e)) in t.shape.iter().zip(&first.shape).enumerate() {
                    if a != *axis {
                        dims_agree(d, e, &format!("extents of axis {a} of operands 0 and {i}"))?;
                    }
                }
                match &t.shape[*axis] {
                    Dim::Static(n) => total = checked_add(total, *n)?,
                    d => sym = Some(d.clone()),
                }
            }
            let mut out = first.shape.clone();
            out[*axis] = match sym {
                Some(d) if operands.len() == 1 => d,
                Some(d) => {
                    return err(format!(
                        "concatenation along symbolic extent {d}: bind it to a number first"
                    ));
                }
                None => Dim::Static(total),
            };
            one(TensorType::new(first.elem, out))
        }
        Op::Split { axis, sizes } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            check_axis(*axis, x.rank())?;
            if sizes.is_empty() {
                return err("split needs at least one piece");
            }
            let d = static_dim(&x.shape[*axis], "split axis extent")?;
            let sum = sizes.iter().try_fold(0u64, |a, &s| checked_add(a, s))?;
            if sum != d {
                return err(format!(
                    "sizes {sizes:?} sum to {sum}, axis {axis} has extent {d}"
                ));
            }
            Ok(sizes
                .iter()
                .map(|&s| {
                    let mut shape = x.shape.clone();
                    shape[*axis] = Dim::Static(s);
                    TensorType::new(x.elem, shape)
                })
                .collect())
        }
        Op::Slice {
            axes,
            starts,
            ends,
            steps,
        } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            if starts.len() != axes.len() || ends.len() != axes.len() || steps.len() != axes.len() {
                return err("axes, starts, ends and steps must have the same length");
            }
            check_axes(axes, x.rank())?;
            let mut out = x.shape.clone();
            for (i, &a) in axes.iter().enumerate() {
                if steps[i] == 0 {
                    return err(format!("step of axis {a} is 0"));
                }
                out[a] = match &x.shape[a] {
                    Dim::Static(d) => Dim::Static(slice_len(*d, starts[i], ends[i], steps[i])),
                    d if starts[i] == 0 && ends[i] == i64::MAX && steps[i] == 1 => d.clone(),
                    d => {
                        return err(format!(
                            "slicing symbolic extent {d} of axis {a}: bind it to a number first"
                        ));
                    }
                };
            }
            one(TensorType::new(x.elem, out))
        }
        Op::Pad { pads, .. } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            let r = x.rank();
            if pads.len() != 2 * r {
                return err(format!(
                    "pads has {} entries, need {} (begin and end for each of {r} axes)",
                    pads.len(),
                    2 * r
                ));
            }
            let mut out = Vec::with_capacity(r);
            for (i, d) in x.shape.iter().enumerate() {
                let (b, e) = (pads[i], pads[r + i]);
                out.push(match d {
                    d if b == 0 && e == 0 => d.clone(),
                    Dim::Static(n) => {
                        let total = i128::from(*n) + i128::from(b) + i128::from(e);
                        if total < 0 {
                            return err(format!(
                                "pads ({b}, {e}) make axis {i} of extent {n} negative"
                            ));
                        }
                        Dim::Static(u64::try_from(total).map_err(|_| overflow())?)
                    }
                    d => {
                        return err(format!(
                            "padding symbolic extent {d} of axis {i}: bind it to a number first"
                        ));
                    }
                });
            }
            one(TensorType::new(x.elem, out))
        }
        Op::Tile { repeats } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            if repeats.len() != x.rank() {
                return err(format!(
                    "repeats has {} entries for rank {}",
                    repeats.len(),
                    x.rank()
                ));
            }
            let out = x
                .shape
                .iter()
                .zip(repeats)
                .enumerate()
                .map(|(i, (d, &r))| match d {
                    d if r == 1 => Ok(d.clone()),
                    Dim::Static(n) => Ok(Dim::Static(checked_mul(*n, r)?)),
                    d => err(format!(
                        "tiling symbolic extent {d} of axis {i}: bind it to a number first"
                    )),
                })
                .collect::<Result<_>>()?;
            one(TensorType::new(x.elem, out))
        }
        Op::Gather { axis } => {
            arity(operands, 2, 2)?;
            let (x, idx) = (operands[0], operands[1]);
            require_index(idx, 1)?;
            check_axis(*axis, x.rank())?;
            let mut out: Shape = x.shape[..*axis].to_vec();
            out.extend(idx.shape.iter().cloned());
            out.extend(x.shape[axis + 1..].iter().cloned());
            one(TensorType::new(x.elem, out))
        }
        Op::GatherElements { axis } => {
            arity(operands, 2, 2)?;
            let (x, idx) = (operands[0], operands[1]);
            require_index(idx, 1)?;
            check_axis(*axis, x.rank())?;
            if idx.rank() != x.rank() {
                return err(format!(
                    "indices rank {} differs from data rank {}",
                    idx.rank(),
                    x.rank()
                ));
            }
            one(TensorType::new(x.elem, idx.shape.clone()))
        }
        Op::GatherNd { batch_dims } => {
            arity(operands, 2, 2)?;
            let (x, idx) = (operands[0], operands[1]);
            require_index(idx, 1)?;
            let b = *batch_dims;
            if idx.rank() < 1 || b >= idx.rank() || b >= x.rank() {
                return err(format!(
                    "batch-dims {b} must be below the ranks of data ({}) and indices ({})",
                    x.rank(),
                    idx.rank()
                ));
            }
            for i in 0..b {
                dims_agree(
                    &x.shape[i],
                    &idx.shape[i],
                    &format!("batch axis {i} of data and indices"),
                )?;
            }
            let q = static_dim(&idx.shape[idx.rank() - 1], "index tuple length")?;
            // `b < x.rank()` was checked above, so `x.rank() - b` cannot underflow.
            let q = match usize::try_from(q) {
                Ok(q) if q <= x.rank() - b => q,
                _ => {
                    return err(format!(
                        "index tuples of length {q} after {b} batch axes exceed data rank {}",
                        x.rank()
                    ));
                }
            };
            let mut out: Shape = idx.shape[..idx.rank() - 1].to_vec();
            out.extend(x.shape[b + q..].iter().cloned());
            one(TensorType::new(x.elem, out))
        }
        Op::ScatterElements { axis, .. } => {
            arity(operands, 3, 3)?;
            let (x, idx, upd) = (operands[0], operands[1], operands[2]);
            require_index(idx, 1)?;
            same_elem(&[x, upd])?;
            check_axis(*axis, x.rank())?;
            if idx.rank() != x.rank() {
                return err(format!(
                    "indices rank {} differs from data rank {}",
                    idx.rank(),
                    x.rank()
                ));
            }
            if idx.shape != upd.shape {
                return err(format!(
                    "indices shape {idx} differs from updates shape {upd}"
                ));
            }
            one(x.clone())
        }
        Op::ScatterNd { .. } => {
            arity(operands, 3, 3)?;
            let (x, idx, upd) = (operands[0], operands[1], operands[2]);
            require_index(idx, 1)?;
            same_elem(&[x, upd])?;
            if idx.rank() < 1 {
                return err("indices must have rank >= 1");
            }
            let q = static_dim(&idx.shape[idx.rank() - 1], "index tuple length")?;
            let q = match usize::try_from(q) {
                Ok(q) if q <= x.rank() => q,
                _ => {
                    return err(format!(
                        "index tuples of length {q} exceed data rank {}",
                        x.rank()
                    ));
                }
            };
            let mut want: Shape = idx.shape[..idx.rank() - 1].to_vec();
            want.extend(x.shape[q..].iter().cloned());
            if upd.shape != want {
                return err(format!(
                    "updates shape {upd} should be {}",
                    TensorType::new(upd.elem, want)
                ));
            }
            one(x.clone())
        }
        Op::TopK { k, axis, .. } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            require_numeric(x, 0)?;
            check_axis(*axis, x.rank())?;
            if let Dim::Static(d) = x.shape[*axis]
                && *k > d
            {
                return err(format!("k = {k} exceeds the extent {d} of axis {axis}"));
            }
            let mut shape = x.shape.clone();
            shape[*axis] = Dim::Static(*k);
            Ok(vec![
                TensorType::new(x.elem, shape.clone()),
                TensorType::new(ElemType::I64, shape),
            ])
        }
        Op::Trilu { .. } => {
            arity(operands, 1, 1)?;
            if operands[0].rank() < 2 {
                return err(format!("operand must have rank >= 2, got {}", operands[0]));
            }
            one(operands[0].clone())
        }
        Op::DepthToSpace { block, .. } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            require_rank(x, 0, 4)?;
            let b = *block;
            if b == 0 {
                return err("block must be at least 1");
            }
            let c = static_dim(&x.shape[1], "channels")?;
            let bb = checked_mul(b, b)?;
            if c % bb != 0 {
                return err(format!("channels {c} are not divisible by block² = {bb}"));
            }
            let h = scale_dim(&x.shape[2], b, "height")?;
            let w = scale_dim(&x.shape[3], b, "width")?;
            one(TensorType::new(
                x.elem,
                vec![x.shape[0].clone(), Dim::Static(c / bb), h, w],
            ))
        }
        Op::SpaceToDepth { block } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            require_rank(x, 0, 4)?;
            let b = *block;
            if b == 0 {
                return err("block must be at least 1");
            }
            let c = static_dim(&x.shape[1], "channels")?;
            let h = static_dim(&x.shape[2], "height")?;
            let w = static_dim(&x.shape[3], "width")?;
            if h % b != 0 || w % b != 0 {
                return err(format!(
                    "height {h} and width {w} must be divisible by block {b}"
                ));
            }
            let c2 = checked_mul(c, checked_mul(b, b)?)?;
            one(TensorType::new(
                x.elem,
                vec![
                    x.shape[0].clone(),
                    Dim::Static(c2),
                    Dim::Static(h / b),
                    Dim::Static(w / b),
                ],
            ))
        }
        Op::Resize { sizes, mode, .. } => {
            arity(operands, 1, 1)?;
            let x = operands[0];
            if *mode == ResizeMode::Nearest {
                require_numeric(x, 0)?;
            } else {
                require_float(x, 0)?;
            }
            if sizes.len() != x.rank() {
                return err(format!(
                    "sizes has {} entries for rank {}",
                    sizes.len(),
                    x.rank()
                ));
            }
            for (i, d) in x.shape.iter().enumerate() {
                if let Dim::Static(0) = d
                    && sizes[i] != 0
                {
                    return err(format!("cannot resize the empty axis {i} to {}", sizes[i]));
                }
            }
            one(TensorType::fixed(x.elem, sizes))
        }
        Op::Einsum { equation } => {
            let (ins, out) = parse_einsum(equation)?;
            if ins.len() != operands.len() {
                return err(format!(
                    "equation has {} inputs, op has {} operands",
                    ins.len(),
                    operands.len()
                ));
            }
            same_elem(operands)?;
            require_numeric(operands[0], 0)?;
            let mut dims: BTreeMap<char, Dim> = BTreeMap::new();
            for (i, (term, t)) in ins.iter().zip(operands).enumerate() {
                if term.len() != t.rank() {
                    return err(format!(
                        "term `{}` has {} letters, operand {i} has rank {}",
                        term.iter().collect::<String>(),
                        term.len(),
                        t.rank()
                    ));
                }
                for (c, d) in term.iter().zip(&t.shape) {
                    match dims.get(c) {
                        Some(prev) => dims_agree(prev, d, &format!("extents of `{c}`"))?,
                        None => {
                            dims.insert(*c, d.clone());
                        }
                    }
                }
            }
            let mut shape = Vec::new();
            for c in &out {
                match dims.get(c) {
                    Some(d) => shape.push(d.clone()),
                    None => {
                        return err(format!("output letter `{c}` does not appear in any input"));
                    }
                }
            }
            one(TensorType::new(operands[0].elem, shape))
        }
        Op::Shape { start, end } => {
            arity(operands, 1, 1)?;
            if start > end || *end > operands[0].rank() {
                return err(format!(
                    "axes {start}..{end} are out of range for rank {}",
                    operands[0].rank()
                ));
            }
            one(TensorType::fixed(ElemType::I64, &[(end - start) as u64]))
        }
        Op::Size => {
            arity(operands, 1, 1)?;
            one(TensorType::fixed(ElemType::I64, &[]))
        }
        Op::Fill { shape, elem, .. } => {
            arity(operands, 0, 0)?;
            element_key(shape)?;
            one(TensorType::new(*elem, shape.clone()))
        }
        Op::Range { size } => {
            arity(operands, 3, 3)?;
            same_elem(operands)?;
            require_numeric(operands[0], 0)?;
            for (i, t) in operands.iter().enumerate() {
                if t.rank() != 0 {
                    return err(format!("operand {i} must be a scalar, got {t}"));
                }
            }
            one(TensorType::new(operands[0].elem, vec![size.clone()]))
        }
        Op::RandomUniform { shape, elem, .. } => {
            arity(operands, 2, 2)?;
            for (i, t) in operands.iter().enumerate() {
                if t.elem != ElemType::I64 || t.rank() != 0 {
                    return err(format!("operand {i} must be an i64 scalar, got {t}"));
                }
            }
            if !elem.is_float() {
                return err(format!("`elem` must be a floating-point type, not {elem}"));
            }
            element_key(shape)?;
            one(TensorType::new(*elem, shape.clone()))
        }
        Op::Dropout { ratio } => {
            arity(operands, 1, 1)?;
            if !(0.0..=1.0).contains(ratio) {
                return err(format!("`ratio` must be in [0, 1], got {ratio}"));
            }
            require_float(operands[0], 0)?;
            Ok(vec![
                operands[0].clone(),
                TensorType::new(ElemType::Bool, operands[0].shape.clone()),
            ])
        }
        Op::Transfer { from, to } => {
            arity(operands, 1, 1)?;
            if from.is_empty() || to.is_empty() {
                return err("`from` and `to` must name devices");
            }
            one(operands[0].clone())
        }
        Op::AllReduce { axes }
        | Op::AllGather { axes }
        | Op::AllSlice { axes }
        | Op::ReduceScatter { axes }
        | Op::AllToAll { axes } => {
            arity(operands, 1, 1)?;
            if axes.is_empty() {
                return err("`axes` must list at least one mesh axis");
            }
            if !axes.windows(2).all(|w| w[0] < w[1]) {
                return err(format!("mesh axes {axes:?} must be strictly increasing"));
            }
            if matches!(op, Op::AllReduce { .. } | Op::ReduceScatter { .. }) {
                require_numeric(operands[0], 0)?;
            }
            one(operands[0].clone())
        }
        Op::If {
            then_branch,
            else_branch,
        } => infer_if(then_branch, else_branch, operands),
        Op::Loop {
            carried,
            trip,
            body,
        } => infer_loop(*carried, trip, body, operands),
        Op::Scan(s) => infer_scan(s, operands),
    }
}

/// Checks that region `name`'s inputs have exactly the types `want`.
fn region_inputs(name: &str, body: &Graph, want: &[TensorType]) -> Result<()> {
    let got = body.inputs();
    if got.len() != want.len() {
        return err(format!(
            "the {name} region takes {} inputs, the op gives it {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (&v, w)) in got.iter().zip(want).enumerate() {
        if !body.is_valid_value(v) {
            return err(format!("the {name} region's input {i} is invalid"));
        }
        if body.ty(v) != w {
            return err(format!(
                "the {name} region's input {i} is declared {}, the op gives it {w}",
                body.ty(v)
            ));
        }
    }
    Ok(())
}

/// The types of a region's outputs.
fn region_outputs(name: &str, body: &Graph) -> Result<Vec<TensorType>> {
    body.outputs()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if body.is_valid_value(v) {
                Ok(body.ty(v).clone())
            } else {
                err(format!("the {name} region's output {i} is invalid"))
            }
        })
        .collect()
}

fn bool_scalar(t: &TensorType, what: &str) -> Result<()> {
    if t.elem != ElemType::Bool || t.rank() != 0 {
        return err(format!("{what} must be a bool scalar, got {t}"));
    }
    Ok(())
}

fn infer_if(then_b: &Graph, else_b: &Graph, operands: &[&TensorType]) -> Result<Vec<TensorType>> {
    arity(operands, 1, usize::MAX)?;
    bool_scalar(operands[0], "the condition (operand 0)")?;
    let captured: Vec<TensorType> = operands[1..].iter().map(|&t| t.clone()).collect();
    region_inputs("then", then_b, &captured)?;
    region_inputs("else", else_b, &captured)?;
    let t = region_outputs("then", then_b)?;
    let e = region_outputs("else", else_b)?;
    if t.len() != e.len() {
        return err(format!(
            "the then region returns {} values, the else region {}",
            t.len(),
            e.len()
        ));
    }
    for (i, (a, b)) in t.iter().zip(&e).enumerate() {
        if a != b {
            return err(format!(
                "result {i} is {a} in the then region but {b} in the else region"
            ));
        }
    }
    Ok(t)
}

fn infer_loop(
    carried: usize,
    trip: &Dim,
    body: &Graph,
    operands: &[&TensorType],
) -> Result<Vec<TensorType>> {
    arity(operands, 2 + carried, usize::MAX)?;
    let i64_scalar = TensorType::new(ElemType::I64, vec![]);
    if *operands[0] != i64_scalar {
        return err(format!(
            "the trip limit (operand 0) must be an i64 scalar, got {}",
            operands[0]
        ));
    }
    bool_scalar(operands[1], "the condition (operand 1)")?;
    let mut want = vec![i64_scalar, TensorType::new(ElemType::Bool, vec![])];
    want.extend(operands[2..].iter().map(|&t| t.clone()));
    region_inputs("body", body, &want)?;
    let outs = region_outputs("body", body)?;
    if outs.len() < 1 + carried {
        return err(format!(
            "the body returns {} values, it must return the condition and {carried} carried values",
            outs.len()
        ));
    }
    bool_scalar(&outs[0], "the body's output 0 (the next condition)")?;
    for i in 0..carried {
        if outs[1 + i] != *operands[2 + i] {
            return err(format!(
                "carried value {i} enters the loop as {} but the body returns {}",
                operands[2 + i],
                outs[1 + i]
            ));
        }
    }
    let mut results: Vec<TensorType> = outs[1..1 + carried].to_vec();
    for t in &outs[1 + carried..] {
        let mut shape = vec![trip.clone()];
        shape.extend(t.shape.iter().cloned());
        results.push(TensorType::new(t.elem, shape));
    }
    Ok(results)
}

fn infer_scan(s: &ScanAttrs, operands: &[&TensorType]) -> Result<Vec<TensorType>> {
    let inputs = s.input_axes.len();
    if s.input_reverse.len() != inputs {
        return err(format!(
            "{} scan inputs but {} input directions",
            inputs,
            s.input_reverse.len()
        ));
    }
    if s.output_reverse.len() != s.output_axes.len() {
        return err(format!(
            "{} scan outputs but {} output directions",
            s.output_axes.len(),
            s.output_reverse.len()
        ));
    }
    if inputs == 0 {
        return err("a scan needs at least one scan input");
    }
    arity(operands, s.state + inputs, usize::MAX)?;
    let mut want: Vec<TensorType> = operands[..s.state].iter().map(|&t| t.clone()).collect();
    let mut trip: Option<Dim> = None;
    for (j, &axis) in s.input_axes.iter().enumerate() {
        let t = operands[s.state + j];
        if axis >= t.rank() {
            return err(format!(
                "scan input {j} ({t}) has no axis {axis} to scan along"
            ));
        }
        let d = t.shape[axis].clone();
        match &trip {
            None => trip = Some(d),
            Some(first) if *first != d => {
                return err(format!(
                    "scan inputs have different extents along their scan axes: {first} and {d}"
                ));
            }
            Some(_) => {}
        }
        let mut shape = t.shape.clone();
        shape.remove(axis);
        want.push(TensorType::new(t.elem, shape));
    }
    want.extend(operands[s.state + inputs..].iter().map(|&t| t.clone()));
    region_inputs("body", &s.body, &want)?;
    let outs = region_outputs("body", &s.body)?;
    if outs.len() != s.state + s.output_axes.len() {
        return err(format!(
            "the body returns {} values, the scan has {} state values and {} scan outputs",
            outs.len(),
            s.state,
            s.output_axes.len()
        ));
    }
    for i in 0..s.state {
        if outs[i] != *operands[i] {
            return err(format!(
                "state value {i} enters the scan as {} but the body returns {}",
                operands[i], outs[i]
            ));
        }
    }
    let trip = trip.unwrap_or(Dim::Static(0));
    let mut results: Vec<TensorType> = outs[..s.state].to_vec();
    for (k, &axis) in s.output_axes.iter().enumerate() {
        let t = &outs[s.state + k];
        if axis > t.rank() {
            return err(format!(
                "scan output {k} ({t} per iteration) has no axis {axis} to stack along"
            ));
        }
        let mut shape = t.shape.clone();
        shape.insert(axis, trip.clone());
        results.push(TensorType::new(t.elem, shape));
    }
    Ok(results)
}

/// Numpy broadcasting of two shapes (see the crate's op conventions).
pub fn broadcast(a: &[Dim], b: &[Dim]) -> Result<Shape> {
    let r = a.len().max(b.len());
    let one = Dim::Static(1);
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let x = if i + a.len() >= r {
            &a[i + a.len() - r]
        } else {
            &one
        };
        let y = if i + b.len() >= r {
            &b[i + b.len() - r]
        } else {
            &one
        };
        out.push(match (x, y) {
            (x, y) if x == y => x.clone(),
            (Dim::Static(1), y) => y.clone(),
            (x, Dim::Static(1)) => x.clone(),
            (Dim::Sym(_), Dim::Static(n)) | (Dim::Static(n), Dim::Sym(_)) => Dim::Static(*n),
            (x, y) => {
                return err(format!(
                    "shapes [{}] and [{}] do not broadcast: extents {x} and {y} differ",
                    join(a),
                    join(b)
                ));
            }
        });
    }
    Ok(out)
}

/// The result shape of numpy `matmul`.
pub fn matmul_shape(a: &[Dim], b: &[Dim]) -> Result<Shape> {
    if a.is_empty() || b.is_empty() {
        return err("matmul operands must have rank >= 1");
    }
    let one = Dim::Static(1);
    let a2: Shape = if a.len() == 1 {
        vec![one.clone(), a[0].clone()]
    } else {
        a.to_vec()
    };
    let b2: Shape = if b.len() == 1 {
        vec![b[0].clone(), one.clone()]
    } else {
        b.to_vec()
    };
    let (ra, rb) = (a2.len(), b2.len());
    dims_agree(&a2[ra - 1], &b2[rb - 2], "contraction extents")?;
    let mut out = broadcast(&a2[..ra - 2], &b2[..rb - 2])?;
    if a.len() > 1 {
        out.push(a2[ra - 2].clone());
    }
    if b.len() > 1 {
        out.push(b2[rb - 1].clone());
    }
    Ok(out)
}

/// Splits an einsum equation `ab,bc->ac` into input terms and the output term.
pub fn parse_einsum(equation: &str) -> Result<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    if eq.contains('.') {
        return err(format!(
            "einsum equation `{equation}`: ellipsis is not supported"
        ));
    }
    let Some((lhs, rhs)) = eq.split_once("->") else {
        return err(format!(
            "einsum equation `{equation}` needs an explicit `->` output"
        ));
    };
    let term = |s: &str| -> Result<Vec<char>> {
        if let Some(c) = s.chars().find(|c| !c.is_ascii_alphabetic()) {
            return err(format!(
                "einsum equation `{equation}`: unsupported character `{c}` (letters only; no ellipsis)"
            ));
        }
        Ok(s.chars().collect())
    };
    let ins = lhs.split(',').map(term).collect::<Result<Vec<_>>>()?;
    let out = term(rhs)?;
    for (i, c) in out.iter().enumerate() {
        if out[..i].contains(c) {
            return err(format!(
                "einsum equation `{equation}`: output letter `{c}` repeats"
            ));
        }
    }
    Ok((ins, out))
}

/// The number of elements a numpy-style slice of an axis of extent `d` selects.
pub fn slice_len(d: u64, start: i64, end: i64, step: i64) -> u64 {
    let d = i128::from(d);
    let norm = |x: i64| {
        let x = i128::from(x);
        if x < 0 { x + d } else { x }
    };
    let (s, e) = if step > 0 {
        (norm(start).clamp(0, d), norm(end).clamp(0, d))
    } else {
        (norm(start).clamp(-1, d - 1), norm(end).clamp(-1, d - 1))
    };
    let step = i128::from(step);
    let n = if step > 0 {
        if e > s { (e - s + step - 1) / step } else { 0 }
    } else if s > e {
        (s - e + (-step) - 1) / (-step)
    } else {
        0
    };
    n as u64
}

/// The number of windows of a pooling or convolution sweep along one axis.
///
/// `d` is the input extent, `k` the kernel extent, `pad_begin`/`pad_end` the pads and
/// `dilation` the tap spacing; the window covers `dilation * (k - 1) + 1` positions of the
/// padded extent `d + pad_begin + pad_end`. With `ceil`, a partial last window counts, except
/// one that would start inside the trailing padding. This is the one definition of the formula:
/// inference and the interpreter both use it.
pub fn window_extent(
    d: u64,
    k: u64,
    stride: u64,
    pad_begin: u64,
    pad_end: u64,
    dilation: u64,
    ceil: bool,
) -> Result<u64> {
    if k == 0 {
        return err("kernel extent is 0");
    }
    if stride == 0 || dilation == 0 {
        return err("strides and dilations must be at least 1");
    }
    let padded = checked_add(checked_add(d, pad_begin)?, pad_end)?;
    let eff = checked_add(checked_mul(dilation, k - 1)?, 1)?;
    if eff > padded {
        return err(format!(
            "window of extent {eff} (kernel {k}, dilation {dilation}) is larger than the padded input extent {padded}"
        ));
    }
    let span = padded - eff;
    if !ceil {
        return Ok(span / stride + 1);
    }
    let out = span.div_ceil(stride) + 1;
    // A last window that would start inside the trailing padding is dropped. Its start,
    // `(out - 1) * stride`, may not fit u64; then it is certainly past `d + pad_begin`.
    let last_start = (out - 1).checked_mul(stride);
    let begin_of_trailing_pad = checked_add(d, pad_begin)?;
    if last_start.is_none_or(|s| s >= begin_of_trailing_pad) {
        return Ok(out - 1);
    }
    Ok(out)
}

fn check_conv_attrs(a: &ConvAttrs, spatial: usize) -> Result<()> {
    check_window_lists(&a.strides, &a.pads, &a.dilations, spatial)?;
    if a.groups == 0 {
        return err("groups must be at least 1");
    }
    Ok(())
}

fn check_pool_attrs(p: &PoolAttrs, spatial: usize) -> Result<()> {
    if p.kernel.len() != spatial {
        return err(format!(
            "kernel has {} entries for {spatial} spatial axes",
            p.kernel.len()
        ));
    }
    check_window_lists(&p.strides, &p.pads, &p.dilations, spatial)
}

fn check_window_lists(
    strides: &[u64],
    pads: &[u64],
    dilations: &[u64],
    spatial: usize,
) -> Result<()> {
    if strides.len() != spatial || dilations.len() != spatial || pads.len() != 2 * spatial {
        return err(format!(
            "strides ({}), dilations ({}) need {spatial} entries and pads ({}) {} for {spatial} spatial axes",
            strides.len(),
            dilations.len(),
            pads.len(),
            2 * spatial
        ));
    }
    if strides.contains(&0) || dilations.contains(&0) {
        return err("strides and dilations must be at least 1");
    }
    Ok(())
}

fn spatial_rank(x: &TensorType) -> Result<usize> {
    if !(3..=5).contains(&x.rank()) {
        return err(format!(
            "input must be [N, C, D...] with 1 to 3 spatial axes, got {x}"
        ));
    }
    Ok(x.rank() - 2)
}

fn check_bias(bias: Option<&TensorType>, m: u64) -> Result<()> {
    if let Some(b) = bias
        && b.shape != [Dim::Static(m)]
    {
        return err(format!("bias must be [{m}], got {b}"));
    }
    Ok(())
}

fn per_channel(p: &TensorType, i: usize, c: &Dim) -> Result<()> {
    if p.rank() != 1 {
        return err(format!(
            "operand {i} must be a per-channel vector [{c}], got {p}"
        ));
    }
    dims_agree(&p.shape[0], c, &format!("operand {i} extent and channels"))
}

fn check_epsilon(eps: f64) -> Result<()> {
    if !(eps >= 0.0 && eps.is_finite()) {
        return err(format!("epsilon must be finite and >= 0, got {eps}"));
    }
    Ok(())
}

fn scale_dim(d: &Dim, b: u64, what: &str) -> Result<Dim> {
    match d {
        d if b == 1 => Ok(d.clone()),
        Dim::Static(n) => Ok(Dim::Static(checked_mul(*n, b)?)),
        d => err(format!(
            "{what} is the symbolic extent {d}: bind it to a number first"
        )),
    }
}

/// A canonical key for the element count of a shape: the product of static extents and the
/// multiset of symbols. Two shapes with equal keys have equal element counts for every binding.
fn element_key(shape: &[Dim]) -> Result<(u64, BTreeMap<&str, usize>)> {
    let mut n = 1u64;
    let mut syms = BTreeMap::new();
    for d in shape {
        match d {
            Dim::Static(k) => n = checked_mul(n, *k)?,
            Dim::Sym(s) => *syms.entry(s.as_str()).or_insert(0) += 1,
        }
    }
    if n == 0 {
        syms.clear();
    }
    Ok((n, syms))
}

fn static_dim(d: &Dim, what: &str) -> Result<u64> {
    match d {
        Dim::Static(n) => Ok(*n),
        Dim::Sym(s) => err(format!(
            "{what} is the symbolic extent {s}: bind it to a number first"
        )),
    }
}

fn dims_agree(a: &Dim, b: &Dim, what: &str) -> Result<()> {
    match (a, b) {
        (Dim::Static(x), Dim::Static(y)) if x != y => err(format!("{what} differ: {x} and {y}")),
        (Dim::Sym(x), Dim::Sym(y)) if x != y => err(format!("{what} differ: {x} and {y}")),
        _ => Ok(()),
    }
}

fn check_axis(axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return err(format!("axis {axis} is out of range for rank {rank}"));
    }
    Ok(())
}

fn check_axes(axes: &[usize], rank: usize) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        check_axis(a, rank)?;
        if i > 0 && axes[i - 1] >= a {
            return err(format!("axes {axes:?} must be strictly increasing"));
        }
    }
    Ok(())
}

fn arity(operands: &[&TensorType], min: usize, max: usize) -> Result<()> {
    let n = operands.len();
    if n < min || n > max {
        let want = if min == max {
            format!("{min}")
        } else if max == usize::MAX {
            format!("at least {min}")
        } else {
            format!("{min} to {max}")
        };
        return err(format!("expects {want} operands, got {n}"));
    }
    Ok(())
}

fn same_elem(operands: &[&TensorType]) -> Result<()> {
    if let Some(first) = operands.first() {
        for (i, t) in operands.iter().enumerate().skip(1) {
            if t.elem != first.elem {
                return err(format!(
                    "operand element types differ: {} (operand 0) and {} (operand {i})",
                    first.elem, t.elem
                ));
            }
        }
    }
    Ok(())
}

fn require_elem(t: &TensorType, i: usize, ok: impl Fn(ElemType) -> bool, what: &str) -> Result<()> {
    if !ok(t.elem) {
        return err(format!("operand {i} must be {what}, got {}", t.elem));
    }
    Ok(())
}

fn require_float(t: &TensorType, i: usize) -> Result<()> {
    require_elem(t, i, ElemType::is_float, "a floating-point tensor")
}

fn require_numeric(t: &TensorType, i: usize) -> Result<()> {
    require_elem(t, i, ElemType::is_numeric, "numeric (not bool)")
}

fn require_index(t: &TensorType, i: usize) -> Result<()> {
    require_elem(t, i, ElemType::is_int, "an integer index tensor")
}

fn require_rank(t: &TensorType, i: usize, rank: usize) -> Result<()> {
    if t.rank() != rank {
        return err(format!("operand {i} must have rank {rank}, got {t}"));
    }
    Ok(())
}

fn overflow() -> InferError {
    InferError {
        message: "extent overflows u64".into(),
    }
}

fn checked_add(a: u64, b: u64) -> Result<u64> {
    a.checked_add(b).ok_or_else(overflow)
}

fn checked_mul(a: u64, b: u64) -> Result<u64> {
    a.checked_mul(b).ok_or_else(overflow)
}

fn join(dims: &[Dim]) -> String {
    dims.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
