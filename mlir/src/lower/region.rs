//! Region ops inside a step: `if` to `scf.if`, `loop` to `scf.while`, `scan` to `scf.for`.
//!
//! A region body lowers op by op into the scf region, through the same dispatch as a step's
//! ops ([`super::lower_op`]), with its inputs bound to the values the op gives it (the
//! captured operands are values of the enclosing function, visible inside scf regions).
//! Conditions and iteration numbers cross between tensors (`tensor<i1>`, `tensor<i64>`, as
//! the IR has them) and scalars with `tensor.extract` / `tensor.from_elements`. Per-iteration
//! scan values are written into `tensor.empty` accumulators with `tensor.insert_slice`, so
//! every shape must be static: a `loop` lowers only with a static `trip` (the importer gives
//! one when the iteration count is known), and then the loop must run exactly `trip` times,
//! which the importer guarantees by giving a static `trip` only to loops whose condition
//! stays true.

use std::collections::BTreeMap;

use tessera_ir::{ElemType, Graph, ScanAttrs, TensorType, ValueId};

use super::body::{Body, LResult, LowerError, Val, dims, err, tensor_ty};

/// Lowers the ops of `body` with its inputs bound to `inputs`; returns its outputs.
fn lower_body(b: &mut Body, body: &Graph, inputs: &[Val]) -> LResult<Vec<Val>> {
    if body.inputs().len() != inputs.len() {
        return err(format!(
            "the region takes {} inputs, {} given",
            body.inputs().len(),
            inputs.len()
        ));
    }
    let mut env: BTreeMap<ValueId, Val> = BTreeMap::new();
    for (&v, val) in body.inputs().iter().zip(inputs) {
        env.insert(v, val.clone());
    }
    for &op in body.ops() {
        let data = body.op(op);
        b.op_comment(op, data.op.name(), data.loc.as_deref());
        let args = data
            .operands
            .iter()
            .map(|v| {
                env.get(v)
                    .cloned()
                    .ok_or_else(|| LowerError(format!("region op {op}: operand {v} is undefined")))
            })
            .collect::<LResult<Vec<Val>>>()?;
        let results: Vec<TensorType> = data.results.iter().map(|&r| body.ty(r).clone()).collect();
        for t in &results {
            dims(t)?;
        }
        let names = super::lower_op(b, body, op, &args, &results).map_err(|e| {
            LowerError(format!(
                "in a region, op {op} ({}): {}",
                data.op.name(),
                e.0
            ))
        })?;
        for ((&r, name), ty) in data.results.iter().zip(names).zip(results) {
            env.insert(r, Val { name, ty });
        }
    }
    body.outputs()
        .iter()
        .map(|v| {
            env.get(v)
                .cloned()
                .ok_or_else(|| LowerError(format!("region output {v} is undefined")))
        })
        .collect()
}

/// `%r` for one result, `%r#i` for several.
fn result_names(r: &str, n: usize) -> Vec<String> {
    if n == 1 {
        vec![r.to_string()]
    } else {
        (0..n).map(|i| format!("{r}#{i}")).collect()
    }
}

fn lhs(r: &str, n: usize) -> String {
    if n == 1 {
        r.to_string()
    } else {
        format!("{r}:{n}")
    }
}

fn yield_line(b: &mut Body, vals: &[String], tys: &[String]) {
    if vals.is_empty() {
        b.line("scf.yield");
    } else {
        b.line(format!(
            "scf.yield {} : {}",
            vals.join(", "),
            tys.join(", ")
        ));
    }
}

fn types(results: &[TensorType]) -> LResult<Vec<String>> {
    results.iter().map(tensor_ty).collect()
}

/// `if` as `scf.if`.
pub(super) fn lower_if(
    b: &mut Body,
    then_b: &Graph,
    else_b: &Graph,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    let Some((cond, captured)) = args.split_first() else {
        return err("an `if` needs its condition");
    };
    let c = b.assign(format!("tensor.extract {}[] : tensor<i1>", cond.name));
    let tys = types(results)?;
    let r = b.fresh();
    if results.is_empty() {
        b.line(format!("scf.if {c} {{"));
    } else {
        b.line(format!(
            "{} = scf.if {c} -> ({}) {{",
            lhs(&r, results.len()),
            tys.join(", ")
        ));
    }
    for (k, region) in [then_b, else_b].into_iter().enumerate() {
        if k == 1 {
            b.line("} else {");
        }
        b.open();
        let outs = lower_body(b, region, captured)?;
        let names: Vec<String> = outs.iter().map(|v| v.name.clone()).collect();
        yield_line(b, &names, &tys);
        b.close();
    }
    b.line("}");
    Ok(result_names(&r, results.len()))
}

/// `tensor.insert_slice` of `elem` into `acc` at `at` (an index) along `axis`.
fn insert_at(b: &mut Body, elem: &Val, acc: &Val, axis: usize, at: &str) -> LResult<String> {
    let ad = dims(&acc.ty)?;
    let offsets: Vec<String> = (0..ad.len())
        .map(|i| {
            if i == axis {
                at.to_string()
            } else {
                "0".into()
            }
        })
        .collect();
    let sizes: Vec<String> = ad
        .iter()
        .enumerate()
        .map(|(i, d)| if i == axis { "1".into() } else { d.to_string() })
        .collect();
    let strides = vec!["1"; ad.len()].join(", ");
    Ok(b.assign(format!(
        "tensor.insert_slice {} into {}[{}] [{}] [{strides}] : {} into {}",
        elem.name,
        acc.name,
        offsets.join(", "),
        sizes.join(", "),
        tensor_ty(&elem.ty)?,
        tensor_ty(&acc.ty)?
    )))
}

/// `loop` as `scf.while` over (iteration, condition, carried values, scan accumulators).
pub(super) fn lower_loop(
    b: &mut Body,
    carried: usize,
    body: &Graph,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    if args.len() < 2 + carried {
        return err("a `loop` needs its trip limit, condition and carried values");
    }
    let m = b.assign(format!("tensor.extract {}[] : tensor<i64>", args[0].name));
    let c0 = b.assign(format!("tensor.extract {}[] : tensor<i1>", args[1].name));
    let i0 = b.int("i64", 0);
    let one = b.int("i64", 1);
    let captured = &args[2 + carried..];
    let mut inits = vec![(i0, "i64".to_string()), (c0, "i1".to_string())];
    for v in &args[2..2 + carried] {
        inits.push((v.name.clone(), tensor_ty(&v.ty)?));
    }
    let scans = &results[carried.min(results.len())..];
    for t in scans {
        let e = b.empty(t)?;
        inits.push((e, tensor_ty(t)?));
    }
    let n = inits.len();
    let tys: Vec<String> = inits.iter().map(|(_, t)| t.clone()).collect();
    let before: Vec<String> = (0..n).map(|_| b.fresh()).collect();
    let after: Vec<String> = (0..n).map(|_| b.fresh()).collect();
    let r = b.fresh();
    let binds: Vec<String> = before
        .iter()
        .zip(&inits)
        .map(|(a, (v, _))| format!("{a} = {v}"))
        .collect();
    b.line(format!(
        "{} = scf.while ({}) : ({}) -> ({}) {{",
        lhs(&r, n),
        binds.join(", "),
        tys.join(", "),
        tys.join(", ")
    ));
    b.open();
    let lt = b.assign(format!("arith.cmpi slt, {}, {m} : i64", before[0]));
    let go = b.assign(format!("arith.andi {lt}, {} : i1", before[1]));
    b.line(format!(
        "scf.condition({go}) {} : {}",
        before.join(", "),
        tys.join(", ")
    ));
    b.close();
    b.line("} do {");
    let params: Vec<String> = after
        .iter()
        .zip(&tys)
        .map(|(a, t)| format!("{a}: {t}"))
        .collect();
    b.line(format!("^bb0({}):", params.join(", ")));
    b.open();
    let it = b.assign(format!("tensor.from_elements {} : tensor<i64>", after[0]));
    let ct = b.assign(format!("tensor.from_elements {} : tensor<i1>", after[1]));
    let mut inputs = vec![
        Val {
            name: it,
            ty: TensorType::new(ElemType::I64, vec![]),
        },
        Val {
            name: ct,
            ty: TensorType::new(ElemType::Bool, vec![]),
        },
    ];
    for (k, v) in args[2..2 + carried].iter().enumerate() {
        inputs.push(Val {
            name: after[2 + k].clone(),
            ty: v.ty.clone(),
        });
    }
    inputs.extend(captured.iter().cloned());
    let outs = lower_body(b, body, &inputs)?;
    if outs.len() != 1 + carried + scans.len() {
        return err("the loop body's outputs do not fit the op");
    }
    let nc = b.assign(format!("tensor.extract {}[] : tensor<i1>", outs[0].name));
    let ni = b.assign(format!("arith.addi {}, {one} : i64", after[0]));
    let idx = b.assign(format!("arith.index_cast {} : i64 to index", after[0]));
    let mut next = vec![ni, nc];
    next.extend(outs[1..1 + carried].iter().map(|v| v.name.clone()));
    for (k, t) in scans.iter().enumerate() {
        let acc = Val {
            name: after[2 + carried + k].clone(),
            ty: t.clone(),
        };
        next.push(insert_at(b, &outs[1 + carried + k], &acc, 0, &idx)?);
    }
    yield_line(b, &next, &tys);
    b.close();
    b.line("}");
    Ok(result_names(&r, n)[2..].to_vec())
}

/// `scan` as `scf.for` over the slices, with the state and the scan accumulators carried.
pub(super) fn lower_scan(
    b: &mut Body,
    s: &ScanAttrs,
    args: &[Val],
    results: &[TensorType],
) -> LResult<Vec<String>> {
    let m = s.input_axes.len();
    if args.len() < s.state + m || m == 0 {
        return err("a `scan` needs its state and scan inputs");
    }
    let scanned = &args[s.state..s.state + m];
    let captured = &args[s.state + m..];
    let trips = dims(&scanned[0].ty)?[s.input_axes[0]];
    let lb = b.assign("arith.constant 0 : index");
    let ub = b.index(trips as i64);
    let step = b.index(1);
    let last = b.index(trips as i64 - 1);
    let mut inits: Vec<(String, String)> = Vec::new();
    for v in &args[..s.state] {
        inits.push((v.name.clone(), tensor_ty(&v.ty)?));
    }
    let outs_ty = &results[s.state.min(results.len())..];
    for t in outs_ty {
        let e = b.empty(t)?;
        inits.push((e, tensor_ty(t)?));
    }
    let n = inits.len();
    let tys: Vec<String> = inits.iter().map(|(_, t)| t.clone()).collect();
    let t = b.fresh();
    let iters: Vec<String> = (0..n).map(|_| b.fresh()).collect();
    let r = b.fresh();
    let binds: Vec<String> = iters
        .iter()
        .zip(&inits)
        .map(|(a, (v, _))| format!("{a} = {v}"))
        .collect();
    let head = format!("scf.for {t} = {lb} to {ub} step {step}");
    if n == 0 {
        b.line(format!("{head} {{"));
    } else {
        b.line(format!(
            "{} = {head} iter_args({}) -> ({}) {{",
            lhs(&r, n),
            binds.join(", "),
            tys.join(", ")
        ));
    }
    b.open();
    let rev = b.assign(format!("arith.subi {last}, {t} : index"));
    let mut inputs: Vec<Val> = Vec::new();
    for (k, v) in args[..s.state].iter().enumerate() {
        inputs.push(Val {
            name: iters[k].clone(),
            ty: v.ty.clone(),
        });
    }
    for (j, x) in scanned.iter().enumerate() {
        let axis = s.input_axes[j];
        let at = if s.input_reverse[j] { &rev } else { &t };
        let xd = dims(&x.ty)?;
        let offsets: Vec<String> = (0..xd.len())
            .map(|i| if i == axis { at.clone() } else { "0".into() })
            .collect();
        let sizes: Vec<String> = xd
            .iter()
            .enumerate()
            .map(|(i, d)| if i == axis { "1".into() } else { d.to_string() })
            .collect();
        let mut ed = x.ty.shape.clone();
        ed.remove(axis);
        let ety = TensorType::new(x.ty.elem, ed);
        let slice = b.assign(format!(
            "tensor.extract_slice {}[{}] [{}] [{}] : {} to {}",
            x.name,
            offsets.join(", "),
            sizes.join(", "),
            vec!["1"; xd.len()].join(", "),
            tensor_ty(&x.ty)?,
            tensor_ty(&ety)?
        ));
        inputs.push(Val {
            name: slice,
            ty: ety,
        });
    }
    inputs.extend(captured.iter().cloned());
    let outs = lower_body(b, &s.body, &inputs)?;
    if outs.len() != s.state + outs_ty.len() {
        return err("the scan body's outputs do not fit the op");
    }
    let mut next: Vec<String> = outs[..s.state].iter().map(|v| v.name.clone()).collect();
    for (k, ty) in outs_ty.iter().enumerate() {
        let acc = Val {
            name: iters[s.state + k].clone(),
            ty: ty.clone(),
        };
        let at = if s.output_reverse[k] { &rev } else { &t };
        next.push(insert_at(
            b,
            &outs[s.state + k],
            &acc,
            s.output_axes[k],
            at,
        )?);
    }
    yield_line(b, &next, &tys);
    b.close();
    b.line("}");
    Ok(result_names(&r, n))
}
