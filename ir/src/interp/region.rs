//! Region ops: `if` runs the branch its condition selects, `loop` and `scan` iterate their
//! body. Bodies run through the same graph evaluator as the top level ([`super::run_refs`]);
//! iteration is an ordinary loop, and only nesting recurses, at most
//! [`MAX_REGION_DEPTH`](crate::verify::MAX_REGION_DEPTH) levels deep (deeper is an error).

use std::cell::Cell;

use ndarray::{ArrayD, Axis};

use super::common::*;
use crate::graph::Graph;
use crate::op::ScanAttrs;
use crate::tensor::Tensor;
use crate::types::{ElemType, TensorType};
use crate::verify::MAX_REGION_DEPTH;

thread_local! {
    /// How many region bodies are running on this thread, one inside the other.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// Runs a region body on `inputs`, one level deeper.
fn run_body(body: &Graph, name: &str, inputs: &[&Tensor]) -> R<Vec<Tensor>> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
    let depth = DEPTH.with(|d| {
        let n = d.get() + 1;
        d.set(n);
        n
    });
    let _leave = Leave;
    if depth > MAX_REGION_DEPTH {
        bail!("regions nest more than {MAX_REGION_DEPTH} deep");
    }
    super::run_refs(body, inputs).map_err(|e| ierr!("in the {name} region: {e}"))
}

fn bool_scalar(t: &Tensor, what: &str) -> R<bool> {
    match t {
        Tensor::Bool(a) if a.len() == 1 => Ok(a.iter().next().copied().unwrap_or(false)),
        _ => bail!("{what} must be a bool scalar, got {}", t.ty()),
    }
}

/// `if`: operand 0 selects the branch, the rest are its inputs.
pub(crate) fn if_op(then_b: &Graph, else_b: &Graph, xs: &[&Tensor]) -> R<Vec<Tensor>> {
    let Some((cond, captured)) = xs.split_first() else {
        bail!("expected at least 1 operand (the condition), got 0");
    };
    if bool_scalar(cond, "the condition")? {
        run_body(then_b, "then", captured)
    } else {
        run_body(else_b, "else", captured)
    }
}

/// `loop`: iterates while the trip count is below the limit and the condition holds.
/// The iteration count is checked against the declared `trip` extent by the caller's result
/// type check.
pub(crate) fn loop_op(carried: usize, body: &Graph, xs: &[&Tensor]) -> R<Vec<Tensor>> {
    if xs.len() < 2 + carried {
        bail!(
            "expected at least {} operands (limit, condition, {carried} carried), got {}",
            2 + carried,
            xs.len()
        );
    }
    let limit = match xs[0] {
        Tensor::I64(a) if a.len() == 1 => a.iter().next().copied().unwrap_or(0),
        t => bail!("the trip limit must be an i64 scalar, got {}", t.ty()),
    };
    let mut cond = bool_scalar(xs[1], "the condition")?;
    let mut state: Vec<Tensor> = xs[2..2 + carried].iter().map(|&t| t.clone()).collect();
    let captured = &xs[2 + carried..];
    let scans = body.outputs().len().saturating_sub(1 + carried);
    let mut stacks: Vec<Vec<Tensor>> = vec![Vec::new(); scans];
    let mut i: i64 = 0;
    while i < limit && cond {
        let iter = Tensor::I64(ArrayD::from_elem(ndarray::IxDyn(&[]), i));
        let c = Tensor::Bool(ArrayD::from_elem(ndarray::IxDyn(&[]), cond));
        let mut inputs: Vec<&Tensor> = Vec::with_capacity(2 + state.len() + captured.len());
        inputs.push(&iter);
        inputs.push(&c);
        inputs.extend(state.iter());
        inputs.extend(captured.iter().copied());
        let outs = run_body(body, "body", &inputs).map_err(|e| ierr!("iteration {i}: {e}"))?;
        drop(inputs);
        if outs.len() != 1 + carried + scans {
            bail!(
                "the body returned {} values, expected {}",
                outs.len(),
                1 + carried + scans
            );
        }
        let mut outs = outs.into_iter();
        let next = outs
            .next()
            .ok_or_else(|| ierr!("the body returned nothing"))?;
        cond = bool_scalar(&next, "the body's next condition")?;
        state = outs.by_ref().take(carried).collect();
        for (stack, t) in stacks.iter_mut().zip(outs) {
            stack.push(t);
        }
        i += 1;
    }
    let mut results = state;
    let elems = &body.outputs()[(1 + carried).min(body.outputs().len())..];
    for (k, stack) in stacks.into_iter().enumerate() {
        let ty = elems.get(k).map(|&v| body.ty(v).clone());
        results.push(stack_along(stack, 0, false, ty.as_ref(), "scan output")?);
    }
    Ok(results)
}

/// `scan`: iterates over slices of the scan inputs.
pub(crate) fn scan_op(s: &ScanAttrs, xs: &[&Tensor]) -> R<Vec<Tensor>> {
    let inputs = s.input_axes.len();
    if xs.len() < s.state + inputs || s.input_reverse.len() != inputs {
        bail!(
            "expected at least {} operands ({} state, {inputs} scan inputs), got {}",
            s.state + inputs,
            s.state,
            xs.len()
        );
    }
    if inputs == 0 {
        bail!("a scan needs at least one scan input");
    }
    let scanned = &xs[s.state..s.state + inputs];
    let captured = &xs[s.state + inputs..];
    let mut trips = None;
    for (j, (&t, &axis)) in scanned.iter().zip(&s.input_axes).enumerate() {
        let Some(&n) = t.shape().get(axis) else {
            bail!("scan input {j} ({}) has no axis {axis}", t.ty());
        };
        match trips {
            None => trips = Some(n),
            Some(m) if m != n => {
                bail!("scan inputs have extents {m} and {n} along their scan axes")
            }
            Some(_) => {}
        }
    }
    let trips = trips.unwrap_or(0);
    let mut state: Vec<Tensor> = xs[..s.state].iter().map(|&t| t.clone()).collect();
    let outputs = s.output_axes.len();
    let mut stacks: Vec<Vec<Tensor>> = vec![Vec::new(); outputs];
    for t in 0..trips {
        let slices = scanned
            .iter()
            .zip(s.input_axes.iter().zip(&s.input_reverse))
            .map(|(&x, (&axis, &rev))| {
                let at = if rev { trips - 1 - t } else { t };
                slice_at(x, axis, at)
            })
            .collect::<R<Vec<Tensor>>>()?;
        let mut inputs: Vec<&Tensor> = Vec::with_capacity(xs.len());
        inputs.extend(state.iter());
        inputs.extend(slices.iter());
        inputs.extend(captured.iter().copied());
        let outs = run_body(&s.body, "body", &inputs).map_err(|e| ierr!("iteration {t}: {e}"))?;
        drop(inputs);
        if outs.len() != s.state + outputs {
            bail!(
                "the body returned {} values, expected {}",
                outs.len(),
                s.state + outputs
            );
        }
        let mut outs = outs.into_iter();
        state = outs.by_ref().take(s.state).collect();
        for (stack, x) in stacks.iter_mut().zip(outs) {
            stack.push(x);
        }
    }
    let mut results = state;
    let elems = &s.body.outputs()[s.state.min(s.body.outputs().len())..];
    for (k, stack) in stacks.into_iter().enumerate() {
        let ty = elems.get(k).map(|&v| s.body.ty(v).clone());
        let axis = s.output_axes.get(k).copied().unwrap_or(0);
        let rev = s.output_reverse.get(k).copied().unwrap_or(false);
        results.push(stack_along(stack, axis, rev, ty.as_ref(), "scan output")?);
    }
    Ok(results)
}

/// Slice `at` of `x` along `axis`, the axis removed.
fn slice_at(x: &Tensor, axis: usize, at: usize) -> R<Tensor> {
    check_axis(axis, x.shape().len())?;
    dispatch_any!(x.elem(), T => {
        let a = arr::<T>(x)?;
        Ok(T::wrap(a.index_axis(Axis(axis), at).to_owned()))
    })
}

/// Stacks the per-iteration tensors along a new axis `axis` (last first when `reverse`).
/// With no iterations the result has extent 0 there and the element type's static extents
/// elsewhere (a symbolic extent counts as 0).
fn stack_along(
    mut items: Vec<Tensor>,
    axis: usize,
    reverse: bool,
    ty: Option<&TensorType>,
    what: &str,
) -> R<Tensor> {
    if reverse {
        items.reverse();
    }
    let Some(first) = items.first() else {
        let ty = ty.ok_or_else(|| ierr!("{what}: no element type"))?;
        let mut shape: Vec<usize> = ty
            .shape
            .iter()
            .map(|d| d.as_static().map_or(Ok(0), to_usize))
            .collect::<R<_>>()?;
        if axis > shape.len() {
            bail!("{what}: no axis {axis} to stack along");
        }
        shape.insert(axis, 0);
        return Tensor::zeros(ty.elem, &shape).map_err(|e| ierr!("{what}: {e}"));
    };
    let elem: ElemType = first.elem();
    let shape = first.shape().to_vec();
    if axis > shape.len() {
        bail!("{what}: no axis {axis} to stack along");
    }
    for (i, t) in items.iter().enumerate() {
        if t.elem() != elem || t.shape() != shape.as_slice() {
            bail!(
                "{what}: iteration {i} gives {}, iteration 0 gave {}",
                t.ty(),
                first.ty()
            );
        }
    }
    let mut out_shape = shape.clone();
    out_shape.insert(axis, items.len());
    numel_of(&out_shape, elem)?;
    dispatch_any!(elem, T => {
        let views = items
            .iter()
            .map(|t| arr::<T>(t).map(|a| a.view()))
            .collect::<R<Vec<_>>>()?;
        ndarray::stack(Axis(axis), &views)
            .map(T::wrap)
            .map_err(|e| ierr!("internal: {e}"))
    })
}
