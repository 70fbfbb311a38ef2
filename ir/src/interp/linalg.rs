//! Matrix products: matmul, gemm, einsum.
//!
//! Floats use ndarray's `general_mat_mul` (matrixmultiply); integers use plain loops with
//! wrapping arithmetic. bool operands are an error.
//!
//! `gemm` on integers converts `alpha` and `beta` to the element type with cast semantics
//! (truncation).
//!
//! `einsum` supports explicit outputs (`->` required), any number of operands, letters
//! `a-z`/`A-Z`, repeated letters within one operand (diagonals and traces) and summation over
//! every letter absent from the output. Not supported: ellipsis (`...`), repeated letters in
//! the output, broadcasting of extent-1 axes against other extents of the same letter. Two-operand
//! equations without repeated letters, in which every letter occurs in the output or in both
//! operands, run as a batched matrix product; everything else runs as a direct loop over all
//! letter values.

use ndarray::{ArrayD, ArrayView2, Axis, Dimension, Ix2, IxDyn};

use super::common::*;
use crate::tensor::Tensor;

/// numpy `matmul`.
pub(crate) fn matmul(a: &Tensor, b: &Tensor) -> R<Tensor> {
    same_elem(a, b)?;
    dispatch_num!(a.elem(), T => matmul_t::<T>(arr::<T>(a)?, arr::<T>(b)?).map(T::wrap))
}

fn to2<T>(v: ndarray::ArrayViewD<'_, T>) -> R<ArrayView2<'_, T>> {
    v.into_dimensionality::<Ix2>()
        .map_err(|e| ierr!("internal: {e}"))
}

fn matmul_t<T: Num>(a: &ArrayD<T>, b: &ArrayD<T>) -> R<ArrayD<T>> {
    if a.ndim() == 0 || b.ndim() == 0 {
        bail!(
            "operands must have rank >= 1, got shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        );
    }
    let a2 = if a.ndim() == 1 {
        a.view().insert_axis(Axis(0))
    } else {
        a.view()
    };
    let b2 = if b.ndim() == 1 {
        b.view().insert_axis(Axis(1))
    } else {
        b.view()
    };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let (m, k) = (a2.shape()[ra - 2], a2.shape()[ra - 1]);
    let (k2, n) = (b2.shape()[rb - 2], b2.shape()[rb - 1]);
    if k != k2 {
        bail!("inner dimensions differ: {:?} @ {:?}", a.shape(), b.shape());
    }
    let batch = broadcast_shapes(&a2.shape()[..ra - 2], &b2.shape()[..rb - 2])?;
    let nb = numel(&batch)?;
    let mut out_shape = batch.clone();
    out_shape.extend([m, n]);
    numel_of(&out_shape, T::ELEM)?;
    let mut out = ArrayD::from_elem(IxDyn(&out_shape), T::zero());
    if nb > 0 && m > 0 && n > 0 && k > 0 {
        if rb == 2 {
            // One product with the batch axes of `a` folded into its rows.
            let a_std = a2.as_standard_layout();
            let af = a_std
                .view()
                .into_shape_with_order((nb * m, k))
                .map_err(|e| ierr!("internal: {e}"))?;
            let mut of = out
                .view_mut()
                .into_shape_with_order((nb * m, n))
                .map_err(|e| ierr!("internal: {e}"))?;
            T::gemm(T::one(), af, to2(b2.view())?, &mut of);
        } else {
            let mut fa = batch.clone();
            fa.extend([m, k]);
            let mut fb = batch.clone();
            fb.extend([k, n]);
            let av = a2
                .broadcast(IxDyn(&fa))
                .ok_or_else(|| ierr!("internal: broadcast"))?;
            let bv = b2
                .broadcast(IxDyn(&fb))
                .ok_or_else(|| ierr!("internal: broadcast"))?;
            let mut o3 = out
                .view_mut()
                .into_shape_with_order((nb, m, n))
                .map_err(|e| ierr!("internal: {e}"))?;
            for (bi, idx) in ndarray::indices(IxDyn(&batch)).into_iter().enumerate() {
                let (mut x, mut y) = (av.view(), bv.view());
                for &i in idx.slice() {
                    x = x.index_axis_move(Axis(0), i);
                    y = y.index_axis_move(Axis(0), i);
                }
                T::gemm(
                    T::one(),
                    to2(x)?,
                    to2(y)?,
                    &mut o3.index_axis_mut(Axis(0), bi),
                );
            }
        }
    }
    if b.ndim() == 1 {
        let last = out.ndim() - 1;
        out = out.index_axis_move(Axis(last), 0);
    }
    if a.ndim() == 1 {
        let ax = if b.ndim() == 1 {
            out.ndim() - 1
        } else {
            out.ndim() - 2
        };
        out = out.index_axis_move(Axis(ax), 0);
    }
    Ok(out)
}

/// `alpha * op(A) @ op(B) + beta * C`.
pub(crate) fn gemm(xs: &[&Tensor], alpha: f64, beta: f64, ta: bool, tb: bool) -> R<Tensor> {
    all_same_elem(xs)?;
    dispatch_num!(xs[0].elem(), T => {
        let c = match xs.get(2) {
            Some(c) => Some(arr::<T>(c)?),
            None => None,
        };
        gemm_t::<T>(arr::<T>(xs[0])?, arr::<T>(xs[1])?, c, alpha, beta, ta, tb).map(T::wrap)
    })
}

fn gemm_t<T: Num>(
    a: &ArrayD<T>,
    b: &ArrayD<T>,
    c: Option<&ArrayD<T>>,
    alpha: f64,
    beta: f64,
    ta: bool,
    tb: bool,
) -> R<ArrayD<T>> {
    if a.ndim() != 2 || b.ndim() != 2 {
        bail!(
            "A and B must be 2-D, got shapes {:?} and {:?}",
            a.shape(),
            b.shape()
        );
    }
    let av = to2(a.view())?;
    let bv = to2(b.view())?;
    let av = if ta { av.reversed_axes() } else { av };
    let bv = if tb { bv.reversed_axes() } else { bv };
    let (m, k) = av.dim();
    let (k2, n) = bv.dim();
    if k != k2 {
        bail!("inner dimensions differ: op(A) is [{m}, {k}], op(B) is [{k2}, {n}]");
    }
    numel_of(&[m, n], T::ELEM)?;
    let mut out = ArrayD::from_elem(IxDyn(&[m, n]), T::zero());
    if m > 0 && n > 0 && k > 0 {
        let mut o2 = out
            .view_mut()
            .into_dimensionality::<Ix2>()
            .map_err(|e| ierr!("internal: {e}"))?;
        T::gemm(T::from_f64(alpha), av, bv, &mut o2);
    }
    if let Some(c) = c {
        let cv = c.broadcast(IxDyn(&[m, n])).ok_or_else(|| {
            ierr!(
                "C of shape {:?} does not broadcast to [{m}, {n}]",
                c.shape()
            )
        })?;
        let beta = T::from_f64(beta);
        ndarray::Zip::from(&mut out)
            .and(&cv)
            .for_each(|o, &cv| *o = o.wadd(beta.wmul(cv)));
    }
    Ok(out)
}

/// A parsed einsum equation: letters per operand and output letters.
struct Equation {
    inputs: Vec<Vec<char>>,
    output: Vec<char>,
}

/// Parses with [`crate::infer::parse_einsum`] (the one einsum parser) and checks the equation
/// against the operand count.
fn parse(eq: &str, n: usize) -> R<Equation> {
    let (inputs, output) = crate::infer::parse_einsum(eq).map_err(|e| ierr!("{}", e.message))?;
    if inputs.len() != n {
        bail!(
            "equation {eq:?} has {} operand terms, got {n} operands",
            inputs.len()
        );
    }
    if let Some(c) = output
        .iter()
        .find(|c| !inputs.iter().any(|t| t.contains(c)))
    {
        bail!("output letter {c:?} does not occur in any operand of {eq:?}");
    }
    Ok(Equation { inputs, output })
}

/// Einstein summation.
pub(crate) fn einsum(equation: &str, xs: &[&Tensor]) -> R<Tensor> {
    if xs.is_empty() {
        bail!("expected at least 1 operand, got 0");
    }
    all_same_elem(xs)?;
    let eq = parse(equation, xs.len())?;
    dispatch_num!(xs[0].elem(), T => {
        let arrays = xs.iter().map(|t| arr::<T>(t)).collect::<R<Vec<_>>>()?;
        einsum_t::<T>(&eq, &arrays).map(T::wrap)
    })
}

fn einsum_t<T: Num>(eq: &Equation, xs: &[&ArrayD<T>]) -> R<ArrayD<T>> {
    // Letters: output letters first, then the summed ones in order of appearance.
    let mut letters = eq.output.clone();
    let mut extents: Vec<Option<usize>> = vec![None; letters.len()];
    for (term, x) in eq.inputs.iter().zip(xs) {
        if term.len() != x.ndim() {
            bail!(
                "term {:?} has {} letters but its operand has rank {}",
                term.iter().collect::<String>(),
                term.len(),
                x.ndim()
            );
        }
        for (&c, &d) in term.iter().zip(x.shape()) {
            let i = match letters.iter().position(|&l| l == c) {
                Some(i) => i,
                None => {
                    letters.push(c);
                    extents.push(None);
                    letters.len() - 1
                }
            };
            match extents[i] {
                Some(e) if e != d => bail!("letter {c:?} has extents {e} and {d}"),
                _ => extents[i] = Some(d),
            }
        }
    }
    let extents: Vec<usize> = extents.into_iter().map(|e| e.unwrap_or(0)).collect();
    let out_shape: Vec<usize> = extents[..eq.output.len()].to_vec();
    numel_of(&out_shape, T::ELEM)?;

    if let Some(r) = einsum_as_matmul(eq, xs, &letters, &extents)? {
        return Ok(r);
    }

    // Direct loop. Per operand, the stride of each letter (summed over repeated letters,
    // which walks the diagonal).
    let datas: Vec<_> = xs.iter().map(|x| row_major(x.view())).collect();
    let lstrides: Vec<Vec<usize>> = eq
        .inputs
        .iter()
        .zip(xs)
        .map(|(term, x)| {
            let st = strides_of(x.shape());
            letters
                .iter()
                .map(|&l| {
                    term.iter()
                        .zip(&st)
                        .filter(|(c, _)| **c == l)
                        .map(|(_, s)| s)
                        .sum()
                })
                .collect()
        })
        .collect();
    let nout = numel(&out_shape)?;
    let mut out = vec![T::zero(); nout];
    let nl = letters.len();
    if nout > 0 && extents.iter().all(|&e| e > 0) {
        let mut idx = vec![0usize; nl];
        let mut o = 0usize;
        let no = eq.output.len();
        'outer: loop {
            let mut p = T::one();
            for (d, st) in datas.iter().zip(&lstrides) {
                let off: usize = idx.iter().zip(st).map(|(i, s)| i * s).sum();
                p = p.wmul(d[off]);
            }
            out[o] = out[o].wadd(p);
            // Odometer, last letter fastest; `o` tracks the output position.
            let mut d = nl;
            loop {
                if d == 0 {
                    break 'outer;
                }
                d -= 1;
                idx[d] += 1;
                if idx[d] < extents[d] {
                    break;
                }
                idx[d] = 0;
            }
            if d < no {
                o = idx[..no]
                    .iter()
                    .zip(&extents[..no])
                    .fold(0, |acc, (i, e)| acc * e + i);
            }
        }
    }
    from_vec(&out_shape, out)
}

/// The two-operand case as a batched matrix product, when it applies.
fn einsum_as_matmul<T: Num>(
    eq: &Equation,
    xs: &[&ArrayD<T>],
    letters: &[char],
    extents: &[usize],
) -> R<Option<ArrayD<T>>> {
    if xs.len() != 2 {
        return Ok(None);
    }
    let (ta, tb) = (&eq.inputs[0], &eq.inputs[1]);
    let distinct = |t: &[char]| t.iter().enumerate().all(|(i, c)| !t[..i].contains(c));
    if !distinct(ta) || !distinct(tb) {
        return Ok(None);
    }
    let out = &eq.output;
    let mut batch = vec![];
    let mut left = vec![];
    let mut right = vec![];
    let mut contract = vec![];
    for &c in letters {
        let (ia, ib, io) = (ta.contains(&c), tb.contains(&c), out.contains(&c));
        match (ia, ib, io) {
            (true, true, true) => batch.push(c),
            (true, false, true) => left.push(c),
            (false, true, true) => right.push(c),
            (true, true, false) => contract.push(c),
            _ => return Ok(None),
        }
    }
    let ext = |c: &char| extents[letters.iter().position(|l| l == c).unwrap_or(0)];
    let pos = |t: &[char], c: &char| t.iter().position(|l| l == c).unwrap_or(0);
    let prod = |v: &[char]| v.iter().map(ext).product::<usize>();
    let (nb, nl, nr, nc) = (prod(&batch), prod(&left), prod(&right), prod(&contract));

    let perm_a: Vec<usize> = batch
        .iter()
        .chain(&left)
        .chain(&contract)
        .map(|c| pos(ta, c))
        .collect();
    let perm_b: Vec<usize> = batch
        .iter()
        .chain(&contract)
        .chain(&right)
        .map(|c| pos(tb, c))
        .collect();
    let a = xs[0]
        .view()
        .permuted_axes(perm_a)
        .as_standard_layout()
        .into_owned();
    let b = xs[1]
        .view()
        .permuted_axes(perm_b)
        .as_standard_layout()
        .into_owned();
    let a3 = a
        .into_shape_with_order((nb, nl, nc))
        .map_err(|e| ierr!("internal: {e}"))?;
    let b3 = b
        .into_shape_with_order((nb, nc, nr))
        .map_err(|e| ierr!("internal: {e}"))?;
    let mut o3 = ndarray::Array3::from_elem((nb, nl, nr), T::zero());
    if nl > 0 && nr > 0 && nc > 0 {
        for i in 0..nb {
            T::gemm(
                T::one(),
                a3.index_axis(Axis(0), i),
                b3.index_axis(Axis(0), i),
                &mut o3.index_axis_mut(Axis(0), i),
            );
        }
    }
    let mid: Vec<char> = batch.iter().chain(&left).chain(&right).copied().collect();
    let mid_shape: Vec<usize> = mid.iter().map(ext).collect();
    let o = o3
        .into_shape_with_order(IxDyn(&mid_shape))
        .map_err(|e| ierr!("internal: {e}"))?;
    let perm: Vec<usize> = out.iter().map(|c| pos(&mid, c)).collect();
    Ok(Some(
        o.permuted_axes(perm).as_standard_layout().into_owned(),
    ))
}
