//! Data movement: `reshape` (collapse to 1-D, expand to the result), `transpose`,
//! `expand`, `concat` (`tensor.insert_slice` into an empty tensor), `split`
//! (`tensor.extract_slice`), `trilu` (a masking generic), and index generics (each output
//! element computes its source coordinates): `slice` (so negative steps work), `pad` (every
//! mode; negative pads crop), `tile`, `depth-to-space` and `space-to-depth`.

use tessera_ir::{DepthToSpaceMode, ElemType, Op, PadMode, Scalar, TensorType};

use super::body::{
    Body, In, LResult, Val, affine_map, broadcast_map, dims, elem, err, identity_map, tensor_ty,
};
use super::elementwise;

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
                if n == 0 || is_empty(r)? {
                    // An empty piece (its offset may be the axis' end, which MLIR rejects).
                    names.push(b.empty(r)?);
                    at += n;
                    continue;
                }
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
        Op::Pad { pads, mode, value } => Ok(vec![pad(b, x, pads, *mode, *value, out)?]),
        Op::Tile { .. } => {
            if is_empty(out)? {
                return Ok(vec![b.empty(out)?]);
            }
            let xd = dims(&x.ty)?;
            let r = b.index_generic(out, |b, idx| {
                let src: Vec<String> = idx
                    .iter()
                    .zip(&xd)
                    .map(|(i, &d)| rem_index(b, i, d))
                    .collect();
                b.extract(x, &src)
            })?;
            Ok(vec![r])
        }
        Op::Trilu { upper, k } => {
            let rank = x.ty.rank();
            if rank < 2 {
                return err("trilu needs rank >= 2");
            }
            let e = x.ty.elem;
            let (upper, k) = (*upper, *k);
            let its = vec!["parallel"; rank];
            let r = b.generic(
                &[In {
                    val: x,
                    map: identity_map(rank),
                }],
                &[(out.clone(), identity_map(rank), None)],
                &its,
                |b, a| {
                    let i = b.assign(format!("linalg.index {} : index", rank - 2));
                    let j = b.assign(format!("linalg.index {} : index", rank - 1));
                    let ii = b.assign(format!("arith.index_cast {i} : index to i64"));
                    let ji = b.assign(format!("arith.index_cast {j} : index to i64"));
                    let diff = b.assign(format!("arith.subi {ji}, {ii} : i64"));
                    let kc = b.int("i64", k);
                    let pred = if upper { "sge" } else { "sle" };
                    let keep = b.assign(format!("arith.cmpi {pred}, {diff}, {kc} : i64"));
                    let z = b.scalar(e, 0.0);
                    Ok(vec![elementwise::pick(b, &keep, &a[0], &z, e)])
                },
            )?;
            Ok(r)
        }
        Op::DepthToSpace { block, mode } => {
            // out[n, c, h*bs + y, w*bs + x] = x[n, ch, h, w] with ch = (y*bs + x)*C' + c
            // (DCR) or (c*bs + y)*bs + x (CRD), C' = C / bs².
            let bs = *block as i64;
            let cc = dims(out)?[1] as i64;
            let mode = *mode;
            let r = b.index_generic(out, |b, o| {
                let (h, y) = (div_index(b, &o[2], bs), rem_index(b, &o[2], bs as u64));
                let (w, xx) = (div_index(b, &o[3], bs), rem_index(b, &o[3], bs as u64));
                let ch = match mode {
                    DepthToSpaceMode::Dcr => {
                        let t = b.mul_index(&y, bs);
                        let t = b.assign(format!("arith.addi {t}, {xx} : index"));
                        let t = b.mul_index(&t, cc);
                        b.assign(format!("arith.addi {t}, {} : index", o[1]))
                    }
                    DepthToSpaceMode::Crd => {
                        let t = b.mul_index(&o[1], bs);
                        let t = b.assign(format!("arith.addi {t}, {y} : index"));
                        let t = b.mul_index(&t, bs);
                        b.assign(format!("arith.addi {t}, {xx} : index"))
                    }
                };
                b.extract(x, &[o[0].clone(), ch, h, w])
            })?;
            Ok(vec![r])
        }
        Op::SpaceToDepth { block } => {
            // out[n, (y*bs + x)*C + c, h, w] = x[n, c, h*bs + y, w*bs + x].
            let bs = *block as i64;
            let c = dims(&x.ty)?[1] as i64;
            let r = b.index_generic(out, |b, o| {
                let ci = rem_index(b, &o[1], c as u64);
                let q = div_index(b, &o[1], c);
                let y = div_index(b, &q, bs);
                let xx = rem_index(b, &q, bs as u64);
                let hh = b.mul_index(&o[2], bs);
                let hh = b.assign(format!("arith.addi {hh}, {y} : index"));
                let ww = b.mul_index(&o[3], bs);
                let ww = b.assign(format!("arith.addi {ww}, {xx} : index"));
                b.extract(x, &[o[0].clone(), ci, hh, ww])
            })?;
            Ok(vec![r])
        }
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// Whether a type has no elements.
fn is_empty(t: &TensorType) -> LResult<bool> {
    Ok(dims(t)?.contains(&0))
}

/// `i / d` on non-negative indices (`d` a positive constant).
fn div_index(b: &mut Body, i: &str, d: i64) -> String {
    if d == 1 {
        return i.to_string();
    }
    let c = b.index(d);
    b.assign(format!("arith.divui {i}, {c} : index"))
}

/// `i % d` on non-negative indices (`d` a positive constant).
fn rem_index(b: &mut Body, i: &str, d: u64) -> String {
    if d == 1 {
        return b.index(0);
    }
    let c = b.index(d as i64);
    b.assign(format!("arith.remui {i}, {c} : index"))
}

/// A scalar attribute as a constant of element type `e`, with the interpreter's cast
/// semantics (integers wrap, floats truncate and saturate into integers, bool is `!= 0`).
pub fn scalar_const(b: &mut Body, e: ElemType, s: Scalar) -> String {
    if e.is_float() {
        return b.scalar(e, s.as_f64());
    }
    let v: i64 = match (e, s) {
        (ElemType::Bool, s) => i64::from(s.as_f64() != 0.0),
        (ElemType::I8, Scalar::Int(i)) => i64::from(i as i8),
        (ElemType::U8, Scalar::Int(i)) => i64::from(i as u8 as i8),
        (ElemType::I16, Scalar::Int(i)) => i64::from(i as i16),
        (ElemType::I32, Scalar::Int(i)) => i64::from(i as i32),
        (_, Scalar::Int(i)) => i,
        (ElemType::I8, Scalar::Float(x)) => i64::from(x as i8),
        (ElemType::U8, Scalar::Float(x)) => i64::from(x as u8 as i8),
        (ElemType::I16, Scalar::Float(x)) => i64::from(x as i16),
        (ElemType::I32, Scalar::Float(x)) => i64::from(x as i32),
        (_, Scalar::Float(x)) => x as i64,
    };
    if e == ElemType::Bool {
        return b.int("i1", v);
    }
    b.int(elem(e), v)
}

/// Padding (negative pads crop): each output coordinate maps back per axis by the mode;
/// in constant mode a coordinate outside the operand reads the fill value.
fn pad(
    b: &mut Body,
    x: &Val,
    pads: &[i64],
    mode: PadMode,
    value: Scalar,
    out: &TensorType,
) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let r = xd.len();
    if pads.len() != 2 * r {
        return err(format!("pads has {} entries for rank {r}", pads.len()));
    }
    let e = x.ty.elem;
    if is_empty(out)? {
        return b.empty(out);
    }
    if xd.contains(&0) {
        if mode != PadMode::Constant {
            return err(format!("cannot pad an empty axis in {mode:?} mode"));
        }
        let t = b.empty(out)?;
        let c = scalar_const(b, e, value);
        let ty = tensor_ty(out)?;
        return Ok(b.assign(format!(
            "linalg.fill ins({c} : {}) outs({t} : {ty}) -> {ty}",
            elem(e)
        )));
    }
    b.index_generic(out, |b, o| {
        let mut src = Vec::with_capacity(r);
        let mut inside: Option<String> = None;
        for (a, &d) in xd.iter().enumerate() {
            let d = d as i64;
            // i = o - begin, as a signed index.
            let i = b.add_index(&o[a], -pads[a]);
            if pads[a] <= 0 && pads[r + a] <= 0 {
                // Only cropping on this axis: always inside.
                src.push(i);
                continue;
            }
            let z = b.index(0);
            let last = b.index(d - 1);
            let s = match mode {
                PadMode::Constant | PadMode::Edge => {
                    if mode == PadMode::Constant {
                        let ge = b.assign(format!("arith.cmpi sge, {i}, {z} : index"));
                        let le = b.assign(format!("arith.cmpi sle, {i}, {last} : index"));
                        let ok = b.assign(format!("arith.andi {ge}, {le} : i1"));
                        inside = Some(match inside.take() {
                            Some(p) => b.assign(format!("arith.andi {p}, {ok} : i1")),
                            None => ok,
                        });
                    }
                    let lo = b.assign(format!("arith.maxsi {i}, {z} : index"));
                    b.assign(format!("arith.minsi {lo}, {last} : index"))
                }
                PadMode::Wrap => rem_euclid(b, &i, d),
                PadMode::Reflect => {
                    if d == 1 {
                        z
                    } else {
                        let p = 2 * (d - 1);
                        let j = rem_euclid(b, &i, p);
                        let pc = b.index(p);
                        let dc = b.index(d);
                        let back = b.assign(format!("arith.subi {pc}, {j} : index"));
                        let far = b.assign(format!("arith.cmpi sge, {j}, {dc} : index"));
                        b.assign(format!("arith.select {far}, {back}, {j} : index"))
                    }
                }
            };
            src.push(s);
        }
        let v = b.extract(x, &src)?;
        Ok(match inside {
            Some(ok) => {
                let c = scalar_const(b, e, value);
                elementwise::pick(b, &ok, &v, &c, e)
            }
            None => v,
        })
    })
}

/// `i mod d` in `[0, d)` for a signed index `i` (`d` a positive constant).
fn rem_euclid(b: &mut Body, i: &str, d: i64) -> String {
    let dc = b.index(d);
    let r = b.assign(format!("arith.remsi {i}, {dc} : index"));
    let z = b.index(0);
    let neg = b.assign(format!("arith.cmpi slt, {r}, {z} : index"));
    let w = b.assign(format!("arith.addi {r}, {dc} : index"));
    b.assign(format!("arith.select {neg}, {w}, {r} : index"))
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
    let acc = b.empty(out)?;
    let shapes = xs
        .iter()
        .map(|x| dims(&x.ty))
        .collect::<LResult<Vec<_>>>()?;
    let pieces: Vec<(Val, Vec<u64>)> = xs
        .iter()
        .zip(concat_offsets(&shapes, axis))
        .filter_map(|(x, at)| Some((x.clone(), at?)))
        .collect();
    concat_into(b, acc, &pieces, out)
}

/// Where each operand of a concatenation along `axis` (of these shapes) starts in its
/// result; `None` for an operand with nothing along `axis`.
pub fn concat_offsets(shapes: &[Vec<u64>], axis: usize) -> Vec<Option<Vec<u64>>> {
    let mut at = 0u64;
    shapes
        .iter()
        .map(|d| {
            (d[axis] != 0).then(|| {
                let offsets = (0..d.len())
                    .map(|a| if a == axis { at } else { 0 })
                    .collect();
                at += d[axis];
                offsets
            })
        })
        .collect()
}

/// `pieces` (each with its offsets) inserted into `acc`, a tensor of type `out`; returns
/// the result's name.
pub fn concat_into(
    b: &mut Body,
    mut acc: String,
    pieces: &[(Val, Vec<u64>)],
    out: &TensorType,
) -> LResult<String> {
    for (x, offsets) in pieces {
        let dest = Val {
            name: acc,
            ty: out.clone(),
        };
        acc = super::kernel::insert_block(b, x, &dest, offsets)?.name;
    }
    Ok(acc)
}
