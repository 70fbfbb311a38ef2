//! `resize`: nearest, linear and cubic interpolation with every coordinate transform.
//!
//! Every source coordinate is known when lowering (static shapes), so the taps are computed
//! here exactly as the interpreter computes them (f64) and become constant tables:
//! - nearest: per resized axis, the source index of each output index (`tensor<O x i64>`);
//!   one index generic reads `x` at the looked-up coordinates (any element type);
//! - linear and cubic: separable, as in the interpreter: one index generic per axis whose
//!   mapping is not the identity, each output element the f64 sum of up to four taps
//!   (`tensor<O x T x i64>` indices, `tensor<O x T x f64>` weights; unused taps have weight
//!   0 and are skipped). Between axes values are rounded to the element type (f32 for
//!   16-bit floats, as the interpreter computes them).

use tessera_ir::{CoordTransform, ElemType, NearestMode, Op, ResizeMode, TensorType};

use super::body::{Body, LResult, Val, dims, err, tensor_ty};
use super::elementwise;
use super::linalg::{acc_type, narrow};

/// Lowers `resize`.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    match op {
        Op::Resize {
            sizes,
            mode,
            coord,
            nearest,
            cubic_coeff,
        } => Ok(vec![resize(
            b,
            &args[0],
            sizes,
            *mode,
            *coord,
            *nearest,
            *cubic_coeff,
            &results[0],
        )?]),
        other => err(format!("no lowering for {}", other.name())),
    }
}

fn taps(
    inn: usize,
    out: usize,
    mode: ResizeMode,
    coord: CoordTransform,
    nearest: NearestMode,
    a: f64,
) -> Vec<Vec<(usize, f64)>> {
    tessera_ir::interp::resize_taps(inn, out, mode, coord, nearest, a)
}

fn is_identity(t: &[Vec<(usize, f64)>], inn: usize) -> bool {
    t.len() == inn
        && t.iter()
            .enumerate()
            .all(|(o, v)| v.as_slice() == [(o, 1.0)])
}

/// An inline constant tensor from little-endian element bytes.
fn table(b: &mut Body, elem: ElemType, d: &[u64], bytes: &[u8]) -> LResult<Val> {
    let ty = TensorType::fixed(elem, d);
    let lit = super::dense_literal(&ty, bytes)?;
    let name = b.assign(format!("arith.constant {lit} : {}", tensor_ty(&ty)?));
    Ok(Val { name, ty })
}

#[allow(clippy::too_many_arguments)]
fn resize(
    b: &mut Body,
    x: &Val,
    sizes: &[u64],
    mode: ResizeMode,
    coord: CoordTransform,
    nearest: NearestMode,
    cubic_coeff: f64,
    out: &TensorType,
) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let od = dims(out)?;
    if sizes.len() != xd.len() || od != sizes {
        return err(format!(
            "sizes {sizes:?} do not match the input rank {} and result {od:?}",
            xd.len()
        ));
    }
    if od.contains(&0) {
        return b.empty(out);
    }
    if xd.contains(&0) {
        return err("cannot resize an empty axis to a non-empty extent");
    }
    let all: Vec<Vec<Vec<(usize, f64)>>> = xd
        .iter()
        .zip(&od)
        .map(|(&i, &o)| taps(i as usize, o as usize, mode, coord, nearest, cubic_coeff))
        .collect();
    let e = x.ty.elem;
    if mode == ResizeMode::Nearest {
        let mut tabs: Vec<Option<Val>> = Vec::new();
        for (axis, t) in all.iter().enumerate() {
            if is_identity(t, xd[axis] as usize) {
                tabs.push(None);
                continue;
            }
            let bytes: Vec<u8> = t
                .iter()
                .flat_map(|v| (v[0].0 as i64).to_le_bytes())
                .collect();
            tabs.push(Some(table(b, ElemType::I64, &[od[axis]], &bytes)?));
        }
        return b.index_generic(out, |b, idx| {
            let mut src = Vec::new();
            for (i, t) in idx.iter().zip(&tabs) {
                src.push(match t {
                    None => i.clone(),
                    Some(t) => {
                        let v = b.extract(t, std::slice::from_ref(i))?;
                        b.index_of(&v, ElemType::I64)
                    }
                });
            }
            b.extract(x, &src)
        });
    }
    if !e.is_float() {
        return err("linear and cubic resize need a float operand");
    }
    let f = acc_type(e);
    let w = ElemType::F64;
    let axes: Vec<usize> = (0..xd.len())
        .filter(|&a| !is_identity(&all[a], xd[a] as usize))
        .collect();
    let Some(&last) = axes.last() else {
        return Ok(x.name.clone());
    };
    let mut cur = x.clone();
    let mut cd = xd.clone();
    for &axis in &axes {
        let t = &all[axis];
        let nt = t.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let mut ib = Vec::new();
        let mut wb = Vec::new();
        for v in t {
            for k in 0..nt {
                let (i, wt) = v.get(k).copied().unwrap_or((0, 0.0));
                ib.extend((i as i64).to_le_bytes());
                wb.extend(wt.to_le_bytes());
            }
        }
        let n = od[axis];
        let it = table(b, ElemType::I64, &[n, nt as u64], &ib)?;
        let wt = table(b, w, &[n, nt as u64], &wb)?;
        cd[axis] = n;
        let re = if axis == last { e } else { f };
        let ty = TensorType::fixed(re, &cd);
        let ce = cur.ty.elem;
        let src = cur.clone();
        let name = b.index_generic(&ty, |b, idx| {
            let mut sum: Option<String> = None;
            let z = b.scalar(w, 0.0);
            for k in 0..nt {
                let kc = b.index(k as i64);
                let at = [idx[axis].clone(), kc];
                let iv = b.extract(&it, &at)?;
                let wv = b.extract(&wt, &at)?;
                let mut si = idx.to_vec();
                si[axis] = b.index_of(&iv, ElemType::I64);
                let xv = b.extract(&src, &si)?;
                let xv = elementwise::cast(b, ce, w, &xv);
                let p = b.assign(format!("arith.mulf {wv}, {xv} : f64"));
                sum = Some(match sum {
                    None => p,
                    Some(s) => {
                        let a = b.assign(format!("arith.addf {s}, {p} : f64"));
                        let used = b.assign(format!("arith.cmpf une, {wv}, {z} : f64"));
                        elementwise::pick(b, &used, &a, &s, w)
                    }
                });
            }
            let s = sum.unwrap_or(z);
            Ok(if re == f {
                elementwise::cast(b, w, f, &s)
            } else {
                narrow(b, w, re, &s)
            })
        })?;
        cur = Val { name, ty };
    }
    Ok(cur.name)
}
