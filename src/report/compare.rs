//! `tessera report --compare DIR_A DIR_B`: two compiles side by side on one self-contained
//! page (`compare.html`): the headline numbers of each (simulated latency, period and
//! throughput, the busiest resource, transfers; the placement model's objective value, lower
//! bound and gap) with the change from A to B, each device's busy time and ops, and every op
//! whose device changed. Ops are matched by their key ([`super::op_key`], the first result's
//! name in `placed.tir`), so two compiles of the same model line up op by op.
//!
//! The browser test finds the parts by id: `compare-summary`, `compare-devices`,
//! `compare-ops`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use tessera_ir::Op;
use tessera_targets::sim::{rate, seconds};

use super::Inputs;
use super::html::{CSS, esc, file_name};

/// One compile of the comparison: its files and the name it is shown by (its directory).
pub struct Side<'a> {
    /// The directory, as given.
    pub name: &'a str,
    /// What was read from it.
    pub inputs: &'a Inputs,
}

/// The change from `a` to `b` in words: `+12.3%`, `-4.0%`, `same`.
fn change(a: f64, b: f64) -> String {
    if a == b {
        "same".to_string()
    } else if a == 0.0 || !a.is_finite() || !b.is_finite() {
        "-".to_string()
    } else {
        format!("{:+.1}%", 100.0 * (b - a) / a)
    }
}

/// Each non-`const` op's device, by key.
fn devices(i: &Inputs) -> BTreeMap<String, (String, String)> {
    let g = &i.graph;
    let names = tessera_ir::text::value_names(g);
    g.ops()
        .iter()
        .filter(|&&op| !matches!(g.op(op).op, Op::Const(_)))
        .map(|&op| {
            (
                super::op_key(g, &names, op),
                (
                    g.op(op).op.name().to_string(),
                    g.op(op).device.clone().unwrap_or_else(|| "?".into()),
                ),
            )
        })
        .collect()
}

/// The comparison page.
pub fn render(a: &Side<'_>, b: &Side<'_>) -> String {
    let mut h = String::new();
    let title = |s: &Side<'_>| {
        format!(
            "{} on {}",
            file_name(&s.inputs.data.model),
            s.inputs.data.target.name
        )
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>tessera compare: {} vs {}</title>\n<style>{CSS}\
         td.a, th.a {{ background: #edf2ff; }} td.b, th.b {{ background: #fff4e6; }}\
         tr.moved td {{ font-weight: 600; }}</style>\n</head>\n<body>\n",
        esc(&title(a)),
        esc(&title(b))
    );
    let _ = writeln!(
        h,
        "<h1>tessera compare</h1>\n<p class=\"sub\"><b>A</b>: <code>{}</code>, {} ({})<br>\
         <b>B</b>: <code>{}</code>, {} ({})</p>",
        esc(a.name),
        esc(&title(a)),
        esc(&a.inputs.data.model),
        esc(b.name),
        esc(&title(b)),
        esc(&b.inputs.data.model)
    );
    // Headline numbers.
    h.push_str(
        "<section>\n<h2>Summary</h2>\n<table id=\"compare-summary\"><tr><th>measure</th>\
         <th class=\"num a\">A</th><th class=\"num b\">B</th><th class=\"num\">B against A</th></tr>\n",
    );
    let row = |h: &mut String, what: &str, va: String, vb: String, ch: String| {
        let _ = writeln!(
            h,
            "<tr data-measure=\"{}\"><td>{}</td><td class=\"num a\">{}</td><td class=\"num b\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(what),
            esc(what),
            esc(&va),
            esc(&vb),
            esc(&ch)
        );
    };
    let (sa, sb) = (&a.inputs.data.simulation, &b.inputs.data.simulation);
    let (pa, pb) = (&a.inputs.plan, &b.inputs.plan);
    let secs = |h: &mut String, what: &str, x: f64, y: f64| {
        row(h, what, seconds(x), seconds(y), change(x, y));
    };
    secs(&mut h, "simulated latency", sa.latency, sb.latency);
    secs(&mut h, "simulated period", sa.period, sb.period);
    row(
        &mut h,
        "simulated throughput",
        format!("{}samples/s", rate(sa.throughput)),
        format!("{}samples/s", rate(sb.throughput)),
        change(sa.throughput, sb.throughput),
    );
    row(
        &mut h,
        "busiest resource (busy per sample)",
        format!("{} ({})", sa.bottleneck, seconds(sa.bound_period)),
        format!("{} ({})", sb.bottleneck, seconds(sb.bound_period)),
        change(sa.bound_period, sb.bound_period),
    );
    row(
        &mut h,
        "transfers per sample",
        sa.transfers.to_string(),
        sb.transfers.to_string(),
        change(sa.transfers as f64, sb.transfers as f64),
    );
    row(
        &mut h,
        "placement: strategy (chosen)",
        format!("{} ({})", pa.strategy, pa.chosen),
        format!("{} ({})", pb.strategy, pb.chosen),
        String::new(),
    );
    row(
        &mut h,
        "placement model: objective value",
        format!("{:?} {}", pa.objective, seconds(pa.value)).to_lowercase(),
        format!("{:?} {}", pb.objective, seconds(pb.value)).to_lowercase(),
        // Values of different objectives do not compare.
        if pa.objective == pb.objective {
            change(pa.value, pb.value)
        } else {
            "-".to_string()
        },
    );
    secs(
        &mut h,
        "placement model: lower bound",
        pa.lower_bound.value,
        pb.lower_bound.value,
    );
    row(
        &mut h,
        "placement model: gap = (value - bound) / value",
        crate::summary::gap_percent(pa.value, pa.lower_bound.value),
        crate::summary::gap_percent(pb.value, pb.lower_bound.value),
        String::new(),
    );
    h.push_str("</table>\n</section>\n");

    // Devices.
    let names: BTreeSet<&str> = sa
        .devices
        .iter()
        .chain(&sb.devices)
        .map(|d| d.name.as_str())
        .collect();
    // In A's target order, then B's devices A lacks.
    let mut order: Vec<&str> = sa.devices.iter().map(|d| d.name.as_str()).collect();
    order.extend(
        sb.devices
            .iter()
            .map(|d| d.name.as_str())
            .filter(|n| !sa.devices.iter().any(|d| d.name == *n)),
    );
    debug_assert_eq!(order.len(), names.len());
    h.push_str(
        "<section>\n<h2>Devices</h2>\n<table id=\"compare-devices\"><tr><th>device</th>\
         <th class=\"num a\">ops A</th><th class=\"num b\">ops B</th><th class=\"num a\">busy A</th>\
         <th class=\"num b\">busy B</th><th class=\"num\">B against A</th></tr>\n",
    );
    for n in order {
        let da = sa.devices.iter().find(|d| d.name == n);
        let db = sb.devices.iter().find(|d| d.name == n);
        let cell = |d: Option<&super::SimDevice>, f: &dyn Fn(&super::SimDevice) -> String| {
            d.map_or_else(|| "-".to_string(), f)
        };
        let _ = writeln!(
            h,
            "<tr data-device=\"{}\"><td>{}</td><td class=\"num a\">{}</td><td class=\"num b\">{}</td>\
             <td class=\"num a\">{}</td><td class=\"num b\">{}</td><td class=\"num\">{}</td></tr>",
            esc(n),
            esc(n),
            cell(da, &|d| d.ops.to_string()),
            cell(db, &|d| d.ops.to_string()),
            cell(da, &|d| seconds(d.busy)),
            cell(db, &|d| seconds(d.busy)),
            match (da, db) {
                (Some(x), Some(y)) => change(x.busy, y.busy),
                _ => "-".to_string(),
            }
        );
    }
    h.push_str("</table>\n</section>\n");

    // Ops whose device changed.
    let (oa, ob) = (devices(a.inputs), devices(b.inputs));
    let keys: BTreeSet<&String> = oa.keys().chain(ob.keys()).collect();
    let mut moved = String::new();
    let (mut n_moved, mut only_a, mut only_b, mut same) = (0, 0, 0, 0);
    for k in keys {
        let (kind, da, db) = match (oa.get(k), ob.get(k)) {
            (Some((kind, x)), Some((_, y))) if x == y => {
                same += 1;
                continue;
            }
            (Some((kind, x)), Some((_, y))) => {
                n_moved += 1;
                (kind, x.as_str(), y.as_str())
            }
            (Some((kind, x)), None) => {
                only_a += 1;
                (kind, x.as_str(), "(not in B)")
            }
            (None, Some((kind, y))) => {
                only_b += 1;
                (kind, "(not in A)", y.as_str())
            }
            (None, None) => continue,
        };
        let _ = writeln!(
            moved,
            "<tr class=\"moved\" data-op=\"{}\"><td><code>{}</code></td><td>{}</td>\
             <td class=\"a\">{}</td><td class=\"b\">{}</td></tr>",
            esc(k),
            esc(k),
            esc(kind),
            esc(da),
            esc(db)
        );
    }
    let _ = writeln!(
        h,
        "<section>\n<h2>Ops by device</h2>\n<p id=\"compare-ops-count\">{n_moved} ops on another \
         device in B, {same} on the same device, {only_a} only in A, {only_b} only in B (ops \
         matched by their first result's name).</p>"
    );
    if moved.is_empty() {
        h.push_str("<p>No op changed device.</p>\n");
    }
    let _ = writeln!(
        h,
        "<table id=\"compare-ops\"><tr><th>op</th><th>kind</th><th class=\"a\">device A</th>\
         <th class=\"b\">device B</th></tr>\n{moved}</table>\n</section>\n</body>\n</html>"
    );
    h
}
