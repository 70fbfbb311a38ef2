//! Control flow: `If` whose condition is known at import time, inlined.

use super::{Registry, input};

pub(crate) fn register(r: &mut Registry) {
    r.add("If", 1, |cx, n| {
        let name = n.p.input.first().map_or("", String::as_str);
        let cond = match cx.known_name(name) {
            Some(t) => t.to_f64_vec(),
            None => {
                // Report an undefined name as such.
                input(cx, n, 0)?;
                return Err("If with a condition computed at run time is not supported".into());
            }
        };
        let taken = match cond.as_slice() {
            [c] => *c != 0.0,
            _ => {
                return Err(format!(
                    "the condition must hold one value, got {}",
                    cond.len()
                ));
            }
        };
        let branch = if taken { "then_branch" } else { "else_branch" };
        let g = n
            .attr_g(branch)?
            .ok_or_else(|| format!("attribute `{branch}` is required"))?;
        let outs = cx
            .inline_subgraph(g)
            .map_err(|m| format!("{branch}: {m}"))?;
        if outs.len() < n.num_outputs() {
            return Err(format!(
                "{branch} has {} outputs, the node uses {}",
                outs.len(),
                n.num_outputs()
            ));
        }
        Ok(outs)
    });
}
