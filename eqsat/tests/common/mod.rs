//! Shared test harness: build a graph from text, force a rule's rewrite out of the e-graph,
//! and compare the reference interpreter's outputs before and after on given inputs.

#![allow(dead_code)]

use tessera_eqsat::ir::{ElemType, Graph, Tensor, interp, text, verify};
use tessera_eqsat::rules::all_rules;
use tessera_eqsat::{lang::TNode, saturate_and_extract};

/// A deterministic pseudo-random tensor with values in [-2, 2] (integers: -5..=5).
pub fn tensor(elem: ElemType, dims: &[usize], seed: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 33) as f64) / ((1u64 << 31) as f64)
    };
    let vals: Vec<f64> = (0..n).map(|_| next() * 4.0 - 2.0).collect();
    let bytes: Vec<u8> = match elem {
        ElemType::F32 => vals
            .iter()
            .flat_map(|v| (*v as f32).to_le_bytes())
            .collect(),
        ElemType::F64 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ElemType::I32 => vals
            .iter()
            .flat_map(|v| ((v * 2.5).round() as i32).to_le_bytes())
            .collect(),
        ElemType::I64 => vals
            .iter()
            .flat_map(|v| ((v * 2.5).round() as i64).to_le_bytes())
            .collect(),
        other => panic!("test tensors of {other} are not supported"),
    };
    Tensor::from_le_bytes(elem, dims, &bytes).expect("tensor")
}

/// `const @name : f32[dims] = [values]` with deterministic values, or all `fill` if given.
pub fn const_decl(name: &str, dims: &[usize], seed: u64, fill: Option<f64>) -> String {
    let n: usize = dims.iter().product();
    let values: Vec<String> = match fill {
        Some(x) => vec![format!("{x:?}"); n],
        None => tensor(ElemType::F32, dims, seed)
            .to_f64_vec()
            .iter()
            .map(|v| format!("{:?}", *v as f32))
            .collect(),
    };
    let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!(
        "const @{name} : f32[{}] = [{}]\n",
        shape.join(", "),
        values.join(", ")
    )
}

/// `f32[2, 3]` for dims [2, 3].
pub fn ty(elem: &str, dims: &[usize]) -> String {
    let shape: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("{elem}[{}]", shape.join(", "))
}

fn close(a: &Tensor, b: &Tensor, tol: f64) -> Result<(), String> {
    if a.shape() != b.shape() || a.elem() != b.elem() {
        return Err(format!(
            "type differs: {:?} {:?} vs {:?} {:?}",
            a.elem(),
            a.shape(),
            b.elem(),
            b.shape()
        ));
    }
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        let ok = *x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + y.abs());
        if !ok {
            return Err(format!("element {i}: {x} vs {y}"));
        }
    }
    Ok(())
}

/// Runs `rule` alone on the graph in `src`, extracts the rewritten form (new nodes cost 1,
/// nodes of the original graph 100), and checks that the rule fired, the result verifies,
/// differs from the original, and computes the same outputs on `inputs` within `tol`.
pub fn check_rule(rule: &str, src: &str, inputs: &[Tensor], tol: f64) -> Result<Graph, String> {
    let graph = text::parse(src, None).map_err(|e| format!("test graph: {e}\n{src}"))?;
    verify::verify(&graph).map_err(|e| format!("test graph does not verify: {e:?}\n{src}"))?;
    let rules = all_rules();
    let r = rules
        .iter()
        .find(|r| r.name == rule)
        .ok_or_else(|| format!("no rule {rule}"))?;
    let (out, applied) = saturate_and_extract(&graph, &[r], 2, 4096, |_, n, original| match n {
        TNode::Op(..) => {
            if original {
                100.0
            } else {
                1.0
            }
        }
        _ => 0.0,
    })
    .ok_or("extraction failed")?;
    if applied == 0 {
        return Err(format!("{rule} did not apply to\n{src}"));
    }
    verify::verify(&out)
        .map_err(|e| format!("result does not verify: {e:?}\n{}", text::print(&out)))?;
    let (a, b) = (text::print(&graph), text::print(&out));
    if a == b {
        return Err(format!(
            "{rule} applied but the extracted graph is unchanged:\n{a}"
        ));
    }
    let want = interp::run(&graph, inputs).map_err(|e| format!("interp before: {e}"))?;
    let got = interp::run(&out, inputs).map_err(|e| format!("interp after: {e}\n{b}"))?;
    if want.len() != got.len() {
        return Err("output count differs".into());
    }
    for (w, g) in want.iter().zip(&got) {
        close(g, w, tol).map_err(|e| format!("{rule}: {e}\nbefore:\n{a}\nafter:\n{b}"))?;
    }
    Ok(out)
}
