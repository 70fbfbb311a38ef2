//! The short printed summary of a tensor that `tessera run` shows for each output.

use std::fmt::Write;

use tessera_ir::{ElemType, Tensor, format_f64};

/// How many leading values the summary shows.
pub const FIRST_VALUES: usize = 8;

/// Summarises a tensor in two lines: statistics, then the first values.
///
/// ```text
///   min 0.0123  max 0.4567  mean 0.1  (20 values)
///   first: [0.1, 0.2, 0.3, ...]
/// ```
/// NaNs are counted and left out of min/max/mean; bool tensors show how many are true.
pub fn summarize(t: &Tensor) -> String {
    let values = t.to_f64_vec();
    let elem = t.elem();
    let mut out = String::new();
    let n = values.len();
    if n == 0 {
        out.push_str("  (no values)\n");
        return out;
    }
    if elem == ElemType::Bool {
        let trues = values.iter().filter(|&&v| v != 0.0).count();
        let _ = writeln!(out, "  true {trues}  false {}  ({n} values)", n - trues);
    } else {
        let finite_or_inf: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let nans = n - finite_or_inf.len();
        if finite_or_inf.is_empty() {
            let _ = writeln!(out, "  all {n} values are nan");
        } else {
            let min = finite_or_inf.iter().copied().fold(f64::INFINITY, f64::min);
            let max = finite_or_inf
                .iter()
                .copied()
                .fold(f64::NEG_INFINITY, f64::max);
            let mean = finite_or_inf.iter().sum::<f64>() / finite_or_inf.len() as f64;
            let _ = write!(
                out,
                "  min {}  max {}  mean {}  ({n} values",
                number(elem, min),
                number(elem, max),
                short(mean)
            );
            if nans > 0 {
                let _ = write!(out, ", {nans} nan");
            }
            out.push_str(")\n");
        }
    }
    let first: Vec<String> = values
        .iter()
        .take(FIRST_VALUES)
        .map(|&v| number(elem, v))
        .collect();
    let more = if n > FIRST_VALUES { ", ..." } else { "" };
    let _ = writeln!(out, "  first: [{}{more}]", first.join(", "));
    out
}

/// An element printed the way its type reads: integers without a fraction, bools as
/// true/false, floats short.
fn number(elem: ElemType, v: f64) -> String {
    match elem {
        ElemType::Bool => (v != 0.0).to_string(),
        e if e.is_int() => format!("{v:.0}"),
        _ => short(v),
    }
}

/// A float with at most 6 significant digits, as `format_f64` would print it.
fn short(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return format_f64(v);
    }
    let rounded: f64 = format!("{v:.5e}").parse().unwrap_or(v);
    format_f64(rounded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{ArrayD, IxDyn};

    fn t32(v: Vec<f32>) -> Tensor {
        Tensor::F32(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).expect("shape"))
    }

    #[test]
    fn floats() {
        let s = summarize(&t32(vec![1.0, -2.0, 0.1, f32::NAN]));
        assert!(s.contains("min -2.0  max 1.0  mean -0.3"), "{s}");
        assert!(s.contains("(4 values, 1 nan)"), "{s}");
        assert!(s.contains("first: [1.0, -2.0, 0.1, nan]"), "{s}");
    }

    #[test]
    fn many_values_are_cut() {
        let s = summarize(&t32((0..20).map(|i| i as f32).collect()));
        assert!(
            s.contains("first: [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, ...]"),
            "{s}"
        );
    }

    #[test]
    fn ints_and_bools() {
        let i = Tensor::I64(ArrayD::from_shape_vec(IxDyn(&[3]), vec![3, -1, 5]).expect("shape"));
        assert!(
            summarize(&i).contains("min -1  max 5  mean 2.33333"),
            "{}",
            summarize(&i)
        );
        let b = Tensor::Bool(
            ArrayD::from_shape_vec(IxDyn(&[3]), vec![true, false, true]).expect("shape"),
        );
        assert!(
            summarize(&b).contains("true 2  false 1"),
            "{}",
            summarize(&b)
        );
        assert!(
            summarize(&b).contains("first: [true, false, true]"),
            "{}",
            summarize(&b)
        );
    }

    #[test]
    fn empty_and_all_nan() {
        assert!(summarize(&t32(vec![])).contains("no values"));
        assert!(summarize(&t32(vec![f32::NAN])).contains("all 1 values are nan"));
    }
}
