//! Control flow: `If`. A condition known at import time inlines the branch it selects. A
//! condition computed at run time is if-converted: both branches are inlined and each output
//! is `select(cond, then, else)`, which needs both branches to give outputs of the same type.
//! (Both branches then run; a branch that would fail at run time on inputs where it is not
//! taken, such as an out-of-range gather, makes the whole graph fail.)

use tessera_ir::{Op, ValueId};

use super::Arity;
use super::{Node, Registry, input};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[("If", &[(1, 1, 1)])];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("If", 1, |cx, n| {
        let name = n.p.input.first().map_or("", String::as_str);
        match cx.known_name(name) {
            Some(t) => {
                let cond = t.to_f64_vec();
                let [c] = cond.as_slice() else {
                    return Err(format!(
                        "the condition must hold one value, got {}",
                        cond.len()
                    ));
                };
                branch(
                    cx,
                    n,
                    if *c != 0.0 {
                        "then_branch"
                    } else {
                        "else_branch"
                    },
                )
            }
            None => if_convert(cx, n),
        }
    });
}

fn branch(cx: &mut Ctx<'_>, n: &Node<'_>, which: &str) -> Result<Vec<ValueId>, String> {
    let g = n
        .attr_g(which)?
        .ok_or_else(|| format!("attribute `{which}` is required"))?;
    let outs = cx.inline_subgraph(g).map_err(|m| format!("{which}: {m}"))?;
    if outs.len() < n.num_outputs() {
        return Err(format!(
            "{which} has {} outputs, the node uses {}",
            outs.len(),
            n.num_outputs()
        ));
    }
    Ok(outs)
}

fn if_convert(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let cond = input(cx, n, 0)?;
    let ty = cx.ty(cond).clone();
    if ty.num_elements() != Some(1) {
        return Err(format!("the condition must hold one value, got {ty}"));
    }
    let cond = if ty.rank() == 0 {
        cond
    } else {
        cx.emit1(Op::Reshape { shape: vec![] }, &[cond])?
    };
    let then = branch(cx, n, "then_branch")?;
    let els = branch(cx, n, "else_branch")?;
    let mut outs = Vec::with_capacity(then.len());
    for (i, (&t, &e)) in then.iter().zip(&els).enumerate().take(n.num_outputs()) {
        if cx.ty(t) != cx.ty(e) {
            return Err(format!(
                "the condition is computed at run time, and output {i} has type {} in then_branch \
                 but {} in else_branch, so the branches cannot be merged with a select",
                cx.ty(t),
                cx.ty(e)
            ));
        }
        outs.push(cx.emit1(Op::Select, &[cond, t, e])?);
    }
    Ok(outs)
}
