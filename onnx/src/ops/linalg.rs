//! Linear-algebra ONNX ops: MatMul, Gemm and Einsum.

use tessera_ir::Op;

use super::{Arity, VARIADIC};
use super::{Registry, input, opt_input};

/// The input counts of this family's ops, as `(since opset, min, max)` rows, from the ONNX
/// schemas (`onnx.defs` of onnx 1.23.2); see [`super::Arity`].
pub(crate) const ARITY: &[(&str, &[Arity])] = &[
    ("Einsum", &[(12, 1, VARIADIC)]),
    ("Gemm", &[(1, 3, 3), (11, 2, 3)]),
    ("MatMul", &[(1, 2, 2)]),
];

pub(crate) fn register(r: &mut Registry) {
    r.arities(ARITY);
    r.add("MatMul", 1, |cx, n| {
        let (a, b) = (input(cx, n, 0)?, input(cx, n, 1)?);
        Ok(vec![cx.emit1(Op::MatMul, &[a, b])?])
    });
    r.add("Gemm", 1, |cx, n| {
        let alpha = f64::from(n.attr_f_or("alpha", 1.0)?);
        let beta = f64::from(n.attr_f_or("beta", 1.0)?);
        let trans_a = n.attr_i_or("transA", 0)? != 0;
        let trans_b = n.attr_i_or("transB", 0)? != 0;
        let mut operands = vec![input(cx, n, 0)?, input(cx, n, 1)?];
        // C is required before opset 11.
        match opt_input(cx, n, 2)? {
            Some(c) => operands.push(c),
            None if cx.opset < 11 => return Err("input 2 (C) is required before opset 11".into()),
            None => {}
        }
        let op = Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        };
        Ok(vec![cx.emit1(op, &operands)?])
    });
    r.add("Einsum", 12, |cx, n| {
        let equation = n
            .attr_s("equation")?
            .ok_or("attribute `equation` is required")?;
        let xs = super::inputs(cx, n)?;
        let ranks: Vec<usize> = xs.iter().map(|&x| cx.ty(x).rank()).collect();
        let equation = explicit_einsum(&equation, &ranks)?;
        Ok(vec![cx.emit1(Op::Einsum { equation }, &xs)?])
    });
}

/// One term of an einsum equation: letters, with at most one ellipsis.
struct Term {
    letters: Vec<char>,
    /// Position of the ellipsis among the letters, if any.
    ellipsis: Option<usize>,
}

fn parse_term(s: &str, equation: &str) -> Result<Term, String> {
    let (before, after, ellipsis) = match s.split_once("...") {
        Some((b, a)) => (b, a, true),
        None => (s, "", false),
    };
    let mut letters = Vec::new();
    for part in [before, after] {
        for c in part.chars() {
            if !c.is_ascii_alphabetic() {
                return Err(format!(
                    "einsum equation `{equation}`: unexpected character `{c}`"
                ));
            }
            letters.push(c);
        }
    }
    Ok(Term {
        ellipsis: ellipsis.then_some(before.len()),
        letters,
    })
}

/// Rewrites an ONNX einsum equation into the IR's explicit form: whitespace dropped, the
/// ellipsis expanded into unused letters (right-aligned across operands, as numpy
/// broadcasts), and an implicit output made explicit (the ellipsis axes, then the letters
/// that occur once, in alphabetical order).
fn explicit_einsum(equation: &str, ranks: &[usize]) -> Result<String, String> {
    let eq: String = equation.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms = lhs
        .split(',')
        .map(|t| parse_term(t, equation))
        .collect::<Result<Vec<_>, _>>()?;
    if terms.len() != ranks.len() {
        return Err(format!(
            "einsum equation `{equation}` has {} inputs, the node has {}",
            terms.len(),
            ranks.len()
        ));
    }
    // Extent of each operand's ellipsis, and the widest.
    let mut widths = Vec::with_capacity(terms.len());
    for (i, (t, &rank)) in terms.iter().zip(ranks).enumerate() {
        let width = match (t.ellipsis, rank.checked_sub(t.letters.len())) {
            (Some(_), Some(w)) => w,
            (None, Some(0)) => 0,
            _ => {
                return Err(format!(
                    "einsum equation `{equation}`: term {i} does not match input {i} of rank {rank}"
                ));
            }
        };
        widths.push(width);
    }
    let width = widths.iter().copied().max().unwrap_or(0);
    let used: Vec<char> = eq.chars().filter(char::is_ascii_alphabetic).collect();
    let fresh: Vec<char> = ('A'..='Z')
        .chain('a'..='z')
        .filter(|c| !used.contains(c))
        .take(width)
        .collect();
    if fresh.len() < width {
        return Err(format!(
            "einsum equation `{equation}`: not enough unused letters to expand the ellipsis"
        ));
    }
    let expand = |t: &Term, w: usize| -> String {
        let mut s: Vec<char> = t.letters.clone();
        if let Some(pos) = t.ellipsis {
            s.splice(pos..pos, fresh[width - w..].iter().copied());
        }
        s.into_iter().collect()
    };
    let ins: Vec<String> = terms
        .iter()
        .zip(&widths)
        .map(|(t, &w)| expand(t, w))
        .collect();
    let out = match rhs {
        Some(r) => {
            let t = parse_term(r, equation)?;
            if t.ellipsis.is_none() && width > 0 {
                // numpy sums ellipsis axes that the output omits.
                expand(&t, 0)
            } else {
                expand(&t, width)
            }
        }
        None => {
            let mut once: Vec<char> = used
                .iter()
                .copied()
                .filter(|c| used.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            fresh.iter().copied().chain(once).collect()
        }
    };
    Ok(format!("{}->{out}", ins.join(",")))
}

#[cfg(test)]
mod tests {
    use super::explicit_einsum;

    #[test]
    fn einsum_equations() {
        let e = |eq: &str, ranks: &[usize]| explicit_einsum(eq, ranks).expect("valid equation");
        assert_eq!(e("ij, jk", &[2, 2]), "ij,jk->ik");
        assert_eq!(e("i,i", &[1, 1]), "i,i->");
        assert_eq!(e("ba", &[2]), "ba->ab");
        assert_eq!(e("...ii ->...i", &[3]), "Aii->Ai");
        assert_eq!(e("...ij,...jk", &[4, 2]), "ABij,jk->ABik");
        assert_eq!(e("...ij,...jk->...ik", &[3, 4]), "Bij,ABjk->ABik");
        assert_eq!(e("->", &[0]), "->");
        assert!(explicit_einsum("ij->i", &[3]).is_err());
        assert!(explicit_einsum("i1->i", &[2]).is_err());
    }
}
