//! Data movement: `reshape` (collapse to 1-D, expand to the result), `transpose`,
//! `expand`, `concat` (`tensor.insert_slice` into an empty tensor), `slice` (an index
//! generic, so negative steps work), and the other layout ops.

use tessera_ir::{Op, TensorType};

use super::body::{
    Body, In, LResult, Val, affine_map, broadcast_map, dims, err, identity_map, tensor_ty,
};

/// Lowers a data-movement op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    let x = &args[0];
    match op {
        Op::Reshape { .. } => Ok(vec![reshape(b, x, out)?]),
        Op::Transpose { perm } => Ok(vec![transpose(b, x, perm, out)?]),
        Op::Expand { .. } => {
            let od = dims(out)?;
            let xd = dims(&x.ty)?;
            let its = vec!["parallel"; od.len()];
            let r = b.generic(
                &[In {
                    val: x,
                    map: broadcast_map(&xd, &od),
                }],
                &[(out.clone(), identity_map(od.len()), None)],
                &its,
                |_, a| Ok(vec![a[0].clone()]),
            )?;
            Ok(r)
        }
        Op::Concat { axis } => Ok(vec![concat(b, args, *axis, out)?]),
        Op::Slice {
            axes,
            starts,
            ends: _,
            steps,
        } => {
            let xd = dims(&x.ty)?;
            let rank = xd.len();
            // Per axis: first index and step (the interpreter's normalization).
            let mut first = vec![0i64; rank];
            let mut step = vec![1i64; rank];
            for (k, &a) in axes.iter().enumerate() {
                let d = xd[a] as i64;
                let s = starts[k];
                let st = steps[k];
                let norm = if s < 0 { s + d } else { s };
                first[a] = if st > 0 {
                    norm.clamp(0, d)
                } else {
                    norm.clamp(-1, d - 1)
                };
                step[a] = st;
            }
            let r = b.index_generic(out, |b, idx| {
                let src: Vec<String> = idx
                    .iter()
                    .enumerate()
                    .map(|(a, i)| {
                        let m = b.mul_index(i, step[a]);
                        b.add_index(&m, first[a])
                    })
                    .collect();
                b.extract(x, &src)
            })?;
            Ok(vec![r])
        }
        Op::Split { axis, sizes } => {
            let xd = dims(&x.ty)?;
            let xt = tensor_ty(&x.ty)?;
            let mut at = 0u64;
            let mut names = Vec::new();
            for (r, &n) in results.iter().zip(sizes) {
                let offs: Vec<String> = (0..xd.len())
                    .map(|a| {
                        if a == *axis {
                            at.to_string()
                        } else {
                            "0".into()
                        }
                    })
                    .collect();
                let sz: Vec<String> = dims(r)?.iter().map(|d| d.to_string()).collect();
                let ones = vec!["1"; xd.len()];
                names.push(b.assign(format!(
                    "tensor.extract_slice {}[{}] [{}] [{}] : {xt} to {}",
                    x.name,
                    offs.join(", "),
                    sz.join(", "),
                    ones.join(", "),
                    tensor_ty(r)?
                )));
                at += n;
            }
            Ok(names)
        }
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// Reshapes `x` to `to` (same element count, static): collapse to 1-D, expand to `to`.
pub fn reshape(b: &mut Body, x: &Val, to: &TensorType) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let td = dims(to)?;
    if xd == td {
        return Ok(x.name.clone());
    }
    let n: u64 = xd.iter().product();
    let flat_ty = TensorType::fixed(x.ty.elem, &[n]);
    let flat_s = tensor_ty(&flat_ty)?;
    let xs = tensor_ty(&x.ty)?;
    let ts = tensor_ty(to)?;
    let flat = match xd.len() {
        1 => x.name.clone(),
        0 => b.assign(format!(
            "tensor.expand_shape {} [] output_shape [1] : {xs} into {flat_s}",
            x.name
        )),
        r => {
            let all: Vec<String> = (0..r).map(|i| i.to_string()).collect();
            b.assign(format!(
                "tensor.collapse_shape {} [[{}]] : {xs} into {flat_s}",
                x.name,
                all.join(", ")
            ))
        }
    };
    Ok(match td.len() {
        1 => flat,
        0 => b.assign(format!(
            "tensor.collapse_shape {flat} [] : {flat_s} into {ts}"
        )),
        r => {
            let all: Vec<String> = (0..r).map(|i| i.to_string()).collect();
            let shape: Vec<String> = td.iter().map(|d| d.to_string()).collect();
            b.assign(format!(
                "tensor.expand_shape {flat} [[{}]] output_shape [{}] : {flat_s} into {ts}",
                all.join(", "),
                shape.join(", ")
            ))
        }
    })
}

/// `out[i0..] = x[i_perm...]`: result axis `j` is operand axis `perm[j]`.
pub fn transpose(b: &mut Body, x: &Val, perm: &[usize], out: &TensorType) -> LResult<String> {
    let rank = perm.len();
    // The operand is read at: operand axis perm[j] <- loop j.
    let mut e = vec![String::new(); rank];
    for (j, &p) in perm.iter().enumerate() {
        e[p] = format!("d{j}");
    }
    let its = vec!["parallel"; rank];
    let r = b.generic(
        &[In {
            val: x,
            map: affine_map(rank, &e),
        }],
        &[(out.clone(), identity_map(rank), None)],
        &its,
        |_, a| Ok(vec![a[0].clone()]),
    )?;
    Ok(r[0].clone())
}

/// Concatenation along `axis` by inserting each operand into an empty result.
pub fn concat(b: &mut Body, xs: &[Val], axis: usize, out: &TensorType) -> LResult<String> {
    let od = dims(out)?;
    let ot = tensor_ty(out)?;
    let mut acc = b.empty(out)?;
    let mut at = 0u64;
    for x in xs {
        let xd = dims(&x.ty)?;
        if xd[axis] == 0 {
            continue;
        }
        let offs: Vec<String> = (0..od.len())
            .map(|a| {
                if a == axis {
                    at.to_string()
                } else {
                    "0".into()
                }
            })
            .collect();
        let sizes: Vec<String> = xd.iter().map(|d| d.to_string()).collect();
        let ones = vec!["1"; od.len()];
        acc = b.assign(format!(
            "tensor.insert_slice {} into {acc}[{}] [{}] [{}] : {} into {ot}",
            x.name,
            offs.join(", "),
            sizes.join(", "),
            ones.join(", "),
            tensor_ty(&x.ty)?
        ));
        at += xd[axis];
    }
    Ok(acc)
}
