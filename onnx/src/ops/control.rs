//! Control flow: `If`, `Loop` and `Scan`.
//!
//! An `If` whose condition is a constant of the model (known at import time, not an input's
//! specialization value) inlines the branch it selects (the other
//! is never imported). One whose condition is computed at run time becomes the IR's `if`
//! region op: each branch is imported as a region body, so only the taken branch runs and a
//! branch may compute types the other never does (a rank-5 tensor for an LSTM, say). `Loop`
//! (`M` and `cond` may be left out) becomes `loop` and `Scan` becomes `scan` (the batched
//! opset-8 form a `scan` over the batch whose body is the `scan` over the sequence). Names of the enclosing scopes that
//! a subgraph uses become captured operands of the region op. Sequence- and optional-typed
//! values (`test_if_seq`, `test_loop13_seq`, ...) are not supported, like everywhere else.

use tessera_ir::{Dim, ElemType, Op, Scalar, ScanAttrs, TensorType, ValueId};

use super::Arity;
use super::{Node, Registry, input};
use crate::import::Ctx;

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`]. Opset-8 `Scan`'s schema
/// says at least 2, but its first input (`sequence_lens`) is optional and may be left empty,
/// which the positional check would refuse: its importer checks the count instead.
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("If", &[(1, 1, 1)]),
    ("Loop", &[(1, 0, super::VARIADIC)]),
    ("Scan", &[(8, 0, super::VARIADIC), (9, 1, super::VARIADIC)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("If", 1, |cx, n| {
        let name = n.p.input.first().map_or("", String::as_str);
        // A condition given only as an input's specialization value is not inlined: the
        // `if` then works for every value of it.
        match cx.constant_name(name) {
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
            None => if_region(cx, n),
        }
    });
    r.add("Loop", 1, loop_region);
    r.add("Scan", 8, |cx, n| {
        if cx.opset < 9 {
            batched_scan_region(cx, n)
        } else {
            scan_region(cx, n)
        }
    });
}

fn subgraph<'a>(n: &Node<'a>, which: &str) -> Result<&'a crate::proto::GraphProto, String> {
    n.attr_g(which)?
        .ok_or_else(|| format!("attribute `{which}` is required"))
}

fn branch(cx: &mut Ctx<'_>, n: &Node<'_>, which: &str) -> Result<Vec<ValueId>, String> {
    let g = subgraph(n, which)?;
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

/// A one-element tensor as a scalar (`reshape` when it has a rank); `what` names it.
fn scalar(cx: &mut Ctx<'_>, v: ValueId, elem: ElemType, what: &str) -> Result<ValueId, String> {
    let ty = cx.ty(v).clone();
    if ty.elem != elem || ty.num_elements() != Some(1) {
        return Err(format!("{what} must be a single {elem} value, got {ty}"));
    }
    if ty.rank() == 0 {
        Ok(v)
    } else {
        cx.emit1(Op::Reshape { shape: vec![] }, &[v])
    }
}

fn if_region(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let cond = input(cx, n, 0)?;
    let cond = scalar(cx, cond, ElemType::Bool, "the condition")?;
    let then_g = subgraph(n, "then_branch")?;
    let else_g = subgraph(n, "else_branch")?;
    let mut then_r = cx.import_region(then_g, "then_branch", &[], &[])?;
    // The else branch captures the then branch's values first, in the same order.
    let else_r = cx.import_region(else_g, "else_branch", &[], &then_r.captures)?;
    for &extra in &else_r.captures[then_r.captures.len()..] {
        let ty = cx.ty(extra).clone();
        then_r
            .body
            .add_input(Some(format!("unused_{}", extra.index())), ty);
    }
    let (t_out, e_out) = (then_r.body.outputs().len(), else_r.body.outputs().len());
    if t_out != e_out {
        return Err(format!(
            "then_branch returns {t_out} values, else_branch {e_out}"
        ));
    }
    for (i, (&t, &e)) in then_r
        .body
        .outputs()
        .iter()
        .zip(else_r.body.outputs())
        .enumerate()
    {
        let (tt, et) = (then_r.body.ty(t), else_r.body.ty(e));
        if tt != et {
            return Err(format!(
                "the condition is computed at run time, and output {i} has type {tt} in \
                 then_branch but {et} in else_branch (an `if` gives one type per output)"
            ));
        }
    }
    if t_out < n.num_outputs() {
        return Err(format!(
            "the branches have {t_out} outputs, the node uses {}",
            n.num_outputs()
        ));
    }
    let mut operands = vec![cond];
    operands.extend(&else_r.captures);
    cx.emit(
        Op::If {
            then_branch: Box::new(then_r.body),
            else_branch: Box::new(else_r.body),
        },
        &operands,
    )
}

/// Optional input `i` of a `Loop` as an `elem` scalar, or a `fill` of `default` when it is
/// left out.
fn given_or_fill(
    cx: &mut Ctx<'_>,
    n: &Node<'_>,
    i: usize,
    elem: ElemType,
    default: i64,
    what: &str,
) -> Result<ValueId, String> {
    if n.has_input(i) {
        let v = input(cx, n, i)?;
        return scalar(cx, v, elem, what);
    }
    cx.emit1(
        Op::Fill {
            shape: vec![],
            elem,
            value: Scalar::Int(default),
        },
        &[],
    )
}

fn loop_region(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let known_m = if n.has_input(0) {
        super::known_input(cx, n, 0).map(|t| t.to_f64_vec())
    } else {
        None
    };
    let m = given_or_fill(cx, n, 0, ElemType::I64, i64::MAX, "the trip count M")?;
    let known_cond = if n.has_input(1) {
        super::known_input(cx, n, 1).map(|t| t.to_f64_vec())
    } else {
        Some(vec![1.0])
    };
    let cond = given_or_fill(cx, n, 1, ElemType::Bool, 1, "the condition")?;
    let carried: Vec<ValueId> = (2..n.p.input.len())
        .map(|i| input(cx, n, i))
        .collect::<Result<_, _>>()?;
    let body_g = subgraph(n, "body")?;
    let mut formals = vec![
        TensorType::new(ElemType::I64, vec![]),
        TensorType::new(ElemType::Bool, vec![]),
    ];
    formals.extend(carried.iter().map(|&v| cx.ty(v).clone()));
    let region = cx.import_region(body_g, "body", &formals, &[])?;
    let mut body = region.body;
    let outs = body.outputs().to_vec();
    if outs.len() < 1 + carried.len() {
        return Err(format!(
            "body returns {} values, it must return the condition and the {} loop-carried values",
            outs.len(),
            carried.len()
        ));
    }
    let cond_ty = body.ty(outs[0]).clone();
    if cond_ty.elem != ElemType::Bool || cond_ty.num_elements() != Some(1) {
        return Err(format!(
            "body output 0 (the condition) must be one bool, got {cond_ty}"
        ));
    }
    if cond_ty.rank() != 0 {
        let id = body.push_op(
            Op::Reshape { shape: vec![] },
            vec![outs[0]],
            vec![TensorType::new(ElemType::Bool, vec![])],
        );
        let r = body.op(id).results[0];
        let mut new_outs = outs.clone();
        new_outs[0] = r;
        body.set_outputs(new_outs);
    }
    for (i, &v) in carried.iter().enumerate() {
        let (before, after) = (cx.ty(v), body.ty(body.outputs()[1 + i]));
        if before != after {
            return Err(format!(
                "loop-carried value {i} enters as {before} but the body returns {after} \
                 (a loop-carried value must keep its type)"
            ));
        }
    }
    // The iteration count is static when M is, the condition starts true and the body
    // passes it through unchanged (or returns true).
    let cond_in = body.inputs()[1];
    let passes_cond = body.outputs()[0] == cond_in;
    let trip = match (known_m.as_deref(), known_cond.as_deref()) {
        (Some([m]), Some([c])) if *c != 0.0 && passes_cond && *m >= 0.0 && *m < 1e15 => {
            Dim::Static(*m as u64)
        }
        (Some([m]), _) if *m <= 0.0 => Dim::Static(0),
        _ => Dim::Sym(format!(
            "{}_trips",
            if cx.hint().is_empty() {
                "loop"
            } else {
                cx.hint()
            }
        )),
    };
    let mut operands = vec![m, cond];
    operands.extend(&carried);
    operands.extend(&region.captures);
    let carried_n = carried.len();
    cx.emit(
        Op::Loop {
            carried: carried_n,
            trip,
            body: Box::new(body),
        },
        &operands,
    )
}

/// A `Scan`'s state values and scan inputs (its inputs from `first` on) and the number of
/// scan inputs, `num_scan_inputs`, checked against them.
fn scan_operands(
    cx: &mut Ctx<'_>,
    n: &Node<'_>,
    first: usize,
) -> Result<(Vec<ValueId>, usize), String> {
    let m = n
        .attr_i("num_scan_inputs")?
        .ok_or("attribute `num_scan_inputs` is required")?;
    let all: Vec<ValueId> = (first..n.p.input.len())
        .map(|i| input(cx, n, i))
        .collect::<Result<_, _>>()?;
    let m = usize::try_from(m)
        .ok()
        .filter(|&m| m >= 1 && m <= all.len())
        .ok_or_else(|| {
            format!(
                "num_scan_inputs = {m} must be between 1 and the number of state and scan \
                 inputs ({})",
                all.len()
            )
        })?;
    Ok((all, m))
}

fn scan_region(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let (all, m) = scan_operands(cx, n, 0)?;
    let state = all.len() - m;
    let (states, scans) = all.split_at(state);
    let axes_of = |key: &str, count: usize| -> Result<Vec<i64>, String> {
        let v = n.attr_ints(key)?.unwrap_or_else(|| vec![0; count]);
        if v.len() != count {
            return Err(format!(
                "attribute `{key}` has {} entries, expected {count}",
                v.len()
            ));
        }
        Ok(v)
    };
    let flags = |key: &str, count: usize| -> Result<Vec<bool>, String> {
        let v = axes_of(key, count)?;
        v.iter()
            .map(|&d| match d {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(format!("attribute `{key}` holds {d}, not 0 or 1")),
            })
            .collect()
    };
    let mut input_axes = Vec::with_capacity(m);
    let mut formals: Vec<TensorType> = states.iter().map(|&v| cx.ty(v).clone()).collect();
    for (j, (&v, &a)) in scans
        .iter()
        .zip(&axes_of("scan_input_axes", m)?)
        .enumerate()
    {
        let ty = cx.ty(v).clone();
        let r = ty.rank() as i64;
        let axis = if a < 0 { a + r } else { a };
        if axis < 0 || axis >= r {
            return Err(format!(
                "scan input {j} ({ty}) has no axis {a} to scan along"
            ));
        }
        let mut shape = ty.shape.clone();
        shape.remove(axis as usize);
        formals.push(TensorType::new(ty.elem, shape));
        input_axes.push(axis as usize);
    }
    let input_reverse = flags("scan_input_directions", m)?;
    let body_g = subgraph(n, "body")?;
    let region = cx.import_region(body_g, "body", &formals, &[])?;
    let body = region.body;
    let k = body.outputs().len().checked_sub(state).ok_or_else(|| {
        format!(
            "body returns {} values, fewer than the {state} state values",
            body.outputs().len()
        )
    })?;
    let mut output_axes = Vec::with_capacity(k);
    for (j, &a) in axes_of("scan_output_axes", k)?.iter().enumerate() {
        let r = body.ty(body.outputs()[state + j]).rank() as i64 + 1;
        let axis = if a < 0 { a + r } else { a };
        if axis < 0 || axis >= r {
            return Err(format!("scan output {j} has no axis {a} to stack along"));
        }
        output_axes.push(axis as usize);
    }
    let output_reverse = flags("scan_output_directions", k)?;
    for (i, &v) in states.iter().enumerate() {
        let (before, after) = (cx.ty(v), body.ty(body.outputs()[i]));
        if before != after {
            return Err(format!(
                "state value {i} enters as {before} but the body returns {after} \
                 (a state value must keep its type)"
            ));
        }
    }
    let mut operands = all.clone();
    operands.extend(&region.captures);
    cx.emit(
        Op::Scan(Box::new(ScanAttrs {
            state,
            input_axes,
            input_reverse,
            output_axes,
            output_reverse,
            body,
        })),
        &operands,
    )
}

/// Opset-8 `Scan`: inputs `sequence_lens` (optional), the state values and the scan inputs,
/// every one with a leading batch axis (the scan inputs' sequence axis is axis 1); each batch
/// entry is scanned on its own. It becomes two `scan` ops: one over the batch (every input a
/// scan input along axis 0, no state) whose body holds the other, the opset-9 scan of one
/// batch entry along its sequence (axis 0 of the slices), whose body is the model's. Only the
/// full sequence lengths are supported: `sequence_lens` must be absent or all equal to the
/// sequence extent.
fn batched_scan_region(cx: &mut Ctx<'_>, n: &Node<'_>) -> Result<Vec<ValueId>, String> {
    let (all, m) = scan_operands(cx, n, 1)?;
    let state = all.len() - m;
    // The batch extent, and the sequence extent of the scan inputs.
    let mut batch: Option<Dim> = None;
    let mut seq: Option<Dim> = None;
    let mut formals = Vec::with_capacity(all.len());
    for (j, &v) in all.iter().enumerate() {
        let ty = cx.ty(v).clone();
        let scanned = j >= state;
        if ty.rank() < 1 + usize::from(scanned) {
            return Err(format!(
                "{} {j} ({ty}) needs a batch axis{}",
                if scanned { "scan input" } else { "state value" },
                if scanned { " and a sequence axis" } else { "" }
            ));
        }
        for (have, d) in [(&mut batch, &ty.shape[0])]
            .into_iter()
            .chain(scanned.then_some((&mut seq, &ty.shape[1])))
        {
            match have {
                Some(h) if h != d => {
                    return Err(format!(
                        "inputs disagree on the batch or sequence extent: {h} and {d}"
                    ));
                }
                _ => *have = Some(d.clone()),
            }
        }
        let skip = 1 + usize::from(scanned);
        formals.push(TensorType::new(ty.elem, ty.shape[skip..].to_vec()));
    }
    let seq = seq.ok_or("no scan input")?;
    if n.has_input(0) {
        let lens = super::known_input(cx, n, 0)
            .and_then(|t| super::tensor_ints(&t))
            .ok_or("input 0 (sequence_lens) must be known at import time")?;
        let batch = batch.as_ref().and_then(Dim::as_static);
        if batch.is_some_and(|b| b != lens.len() as u64)
            || lens.iter().any(|&l| l < 0 || Dim::Static(l as u64) != seq)
        {
            return Err(format!(
                "sequence_lens {lens:?}: only the full sequence extent ({seq}) is supported"
            ));
        }
    }
    let reverse = match n.attr_ints("directions")? {
        None => vec![false; m],
        Some(d) if d.len() == m => d
            .iter()
            .map(|&x| match x {
                0 => Ok(false),
                1 => Ok(true),
                _ => Err(format!("attribute `directions` holds {x}, not 0 or 1")),
            })
            .collect::<Result<_, _>>()?,
        Some(d) => {
            return Err(format!(
                "attribute `directions` has {} entries, expected {m}",
                d.len()
            ));
        }
    };
    let body_g = subgraph(n, "body")?;
    // The body sits two region levels down: inside the scan over the batch and the one over
    // the sequence.
    cx.extra_depth += 1;
    let region = cx.import_region(body_g, "body", &formals, &[]);
    cx.extra_depth -= 1;
    let region = region?;
    let k = region
        .body
        .outputs()
        .len()
        .checked_sub(state)
        .ok_or_else(|| {
            format!(
                "body returns {} values, fewer than the {state} state values",
                region.body.outputs().len()
            )
        })?;
    for (i, (before, &out)) in formals
        .iter()
        .zip(region.body.outputs())
        .enumerate()
        .take(state)
    {
        let after = region.body.ty(out);
        if before != after {
            return Err(format!(
                "state value {i} enters as {before} but the body returns {after} (a state \
                 value must keep its type)"
            ));
        }
    }
    // The body of the scan over the batch: one batch entry's state and sequences, and the
    // captured values, scanned along the sequence.
    let inner = Op::Scan(Box::new(ScanAttrs {
        state,
        input_axes: vec![0; m],
        input_reverse: reverse,
        output_axes: vec![0; k],
        output_reverse: vec![false; k],
        body: region.body,
    }));
    let mut outer_body = tessera_ir::Graph::new("batch");
    let mut params = Vec::with_capacity(all.len() + region.captures.len());
    for (j, &v) in all.iter().enumerate() {
        let mut shape = cx.ty(v).shape.clone();
        shape.remove(0);
        params.push(outer_body.add_input(
            Some(format!("entry_{j}")),
            TensorType::new(cx.ty(v).elem, shape),
        ));
    }
    for (j, &v) in region.captures.iter().enumerate() {
        params.push(outer_body.add_input(Some(format!("captured_{j}")), cx.ty(v).clone()));
    }
    let types = {
        let tys: Vec<&TensorType> = params.iter().map(|&v| outer_body.ty(v)).collect();
        tessera_ir::infer::infer(&outer_body, &inner, &tys)
            .map_err(|e| format!("scan: {}", e.message))?
    };
    let op = outer_body.push_op(inner, params, types);
    outer_body.op_mut(op).loc = cx.loc().clone();
    let results = outer_body.op(op).results.clone();
    outer_body.set_outputs(results);
    let mut operands = all.clone();
    operands.extend(&region.captures);
    cx.emit(
        Op::Scan(Box::new(ScanAttrs {
            state: 0,
            input_axes: vec![0; all.len()],
            input_reverse: vec![false; all.len()],
            output_axes: vec![0; state + k],
            output_reverse: vec![false; state + k],
            body: outer_body,
        })),
        &operands,
    )
}
