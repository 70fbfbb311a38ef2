//! Contractions: `matmul` (numpy semantics: 1-D promotion, broadcast batch axes) and
//! `gemm` as `linalg.generic` reductions; convolutions and `einsum`.

use tessera_ir::{ElemType, Op, TensorType};

use super::body::{Body, In, LResult, Val, affine_map, dims, err};
use super::elementwise;

/// Lowers a contraction op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::MatMul => Ok(vec![matmul(b, &args[0], &args[1], out)?]),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => gemm(b, args, out, *alpha, *beta, *trans_a, *trans_b).map(|r| vec![r]),
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// The accumulator type of a contraction on `e` (f32 for 16-bit floats).
pub fn acc_type(e: ElemType) -> ElemType {
    match e {
        ElemType::F16 | ElemType::BF16 => ElemType::F32,
        e => e,
    }
}

/// `a @ b` with numpy semantics, result type `out`.
pub fn matmul(b: &mut Body, x: &Val, y: &Val, out: &TensorType) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let yd = dims(&y.ty)?;
    let od = dims(out)?;
    // Loops: the result's axes, then k. A 1-D operand has no row (x) or column (y) axis in
    // the result.
    let r = od.len();
    let k = format!("d{r}");
    let x_exprs: Vec<String> = if xd.len() == 1 {
        vec![k.clone()]
    } else {
        let batch = xd.len() - 2;
        // Result axes: [batch..., m, n] (m absent if x is 1-D, n absent if y is 1-D).
        let m_axis = if yd.len() == 1 { r - 1 } else { r - 2 };
        let ob = m_axis; // number of result batch axes
        let mut e: Vec<String> = (0..batch)
            .map(|i| {
                let ra = ob - batch + i;
                if xd[i] == 1 && od[ra] != 1 {
                    "0".to_string()
                } else {
                    format!("d{ra}")
                }
            })
            .collect();
        e.push(format!("d{m_axis}"));
        e.push(k.clone());
        e
    };
    let y_exprs: Vec<String> = if yd.len() == 1 {
        vec![k.clone()]
    } else {
        let batch = yd.len() - 2;
        let n_axis = r - 1;
        let ob = if xd.len() == 1 { r - 1 } else { r - 2 };
        let mut e: Vec<String> = (0..batch)
            .map(|i| {
                let ra = ob - batch + i;
                if yd[i] == 1 && od[ra] != 1 {
                    "0".to_string()
                } else {
                    format!("d{ra}")
                }
            })
            .collect();
        e.push(k.clone());
        e.push(format!("d{n_axis}"));
        e
    };
    contract(b, x, y, out, x_exprs, y_exprs, r)
}

/// `out[d0..d(r-1)] = sum_k x[x_exprs] * y[y_exprs]` over one reduction loop `d<r>`.
fn contract(
    b: &mut Body,
    x: &Val,
    y: &Val,
    out: &TensorType,
    x_exprs: Vec<String>,
    y_exprs: Vec<String>,
    r: usize,
) -> LResult<String> {
    let e = out.elem;
    let acc = acc_type(e);
    let acc_ty = out.with_elem(acc);
    let init = b.filled(&acc_ty, 0.0)?;
    let out_exprs: Vec<String> = (0..r).map(|i| format!("d{i}")).collect();
    let mut its = vec!["parallel"; r];
    its.push("reduction");
    let ins = [
        In {
            val: x,
            map: affine_map(r + 1, &x_exprs),
        },
        In {
            val: y,
            map: affine_map(r + 1, &y_exprs),
        },
    ];
    let res = b.generic(
        &ins,
        &[(acc_ty.clone(), affine_map(r + 1, &out_exprs), Some(init))],
        &its,
        |b, a| {
            let p = elementwise::cast(b, x.ty.elem, acc, &a[0]);
            let q = elementwise::cast(b, y.ty.elem, acc, &a[1]);
            let m = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, acc, &p, &q)?;
            Ok(vec![elementwise::binary(
                b,
                &tessera_ir::BinaryOp::Add,
                acc,
                &a[2],
                &m,
            )?])
        },
    )?;
    let res = Val {
        name: res[0].clone(),
        ty: acc_ty,
    };
    if acc == e {
        Ok(res.name)
    } else {
        b.elementwise(&[&res], out, |b, s| Ok(elementwise::cast(b, acc, e, &s[0])))
    }
}

#[allow(clippy::too_many_arguments)]
fn gemm(
    b: &mut Body,
    args: &[Val],
    out: &TensorType,
    alpha: f64,
    beta: f64,
    ta: bool,
    tb: bool,
) -> LResult<String> {
    let xe = if ta { ["d2", "d0"] } else { ["d0", "d2"] };
    let ye = if tb { ["d1", "d2"] } else { ["d2", "d1"] };
    let prod = contract(
        b,
        &args[0],
        &args[1],
        out,
        xe.iter().map(|s| s.to_string()).collect(),
        ye.iter().map(|s| s.to_string()).collect(),
        2,
    )?;
    let e = out.elem;
    let p = Val {
        name: prod,
        ty: out.clone(),
    };
    let mut ins = vec![&p];
    if let Some(c) = args.get(2) {
        ins.push(c);
    }
    let has_c = ins.len() == 2;
    if alpha == 1.0 && !has_c {
        return Ok(p.name);
    }
    b.elementwise(&ins, out, |b, s| {
        let mut v = s[0].clone();
        if alpha != 1.0 {
            let a = b.scalar(e, alpha);
            v = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, e, &v, &a)?;
        }
        if has_c {
            let mut c = s[1].clone();
            if beta != 1.0 {
                let bt = b.scalar(e, beta);
                c = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, e, &c, &bt)?;
            }
            v = elementwise::binary(b, &tessera_ir::BinaryOp::Add, e, &v, &c)?;
        }
        Ok(v)
    })
}
