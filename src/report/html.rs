//! `report.html`: one self-contained page (inline SVG, CSS and a few lines of script; nothing
//! from the network) drawn from a compile's outputs.
//!
//! Sections (the browser test finds each by the `id` of its section or drawing):
//! - `summary`: the headline numbers (simulated latency and throughput, the placement's lower
//!   bound and gap);
//! - `topology`: the target's devices and links, laid out in layers by hops from the host,
//!   each device filled by its load (busy time over the period) with a bar for its memory;
//! - `timeline`: a Gantt chart of the simulated stream ([`super::TIMELINE_SAMPLES`] samples):
//!   one lane per busy device and per link direction that carries data;
//! - `memory`: each device's peak memory (weights and activations) against its capacity;
//! - `placement`: the strategy, the lower bound's components and the gap, what `auto` tried;
//! - `ops`: the ops grouped by the model's modules ([`super::scopes`]) with their devices and
//!   the placement's reason, and a search box;
//! - `passes`: the pass pipeline's wall times and every pass's counters (eqsat's e-graph
//!   statistics among them), and the compile's stages.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use tessera_ir::{Graph, Op, OpId};
use tessera_targets::sim::{bytes, seconds};

use super::scopes::{self, Scope};
use tessera_place::Plan;

use super::{ReportData, op_key, op_label};

/// Colours of devices in the op list (by target order, cycling).
const DEVICE_COLOURS: [&str; 10] = [
    "#4263eb", "#e8590c", "#2b8a3e", "#ae3ec9", "#c92a2a", "#1098ad", "#f08c00", "#5c940d",
    "#862e9c", "#495057",
];
/// Colours of samples in the timeline.
const SAMPLE_COLOURS: [&str; 3] = ["#4263eb", "#f08c00", "#2b8a3e"];
/// Above this many spans the timeline draws the first sample only.
const MAX_SPANS: usize = 40_000;

pub(super) const CSS: &str = r#"
:root { --fg: #212529; --muted: #6c757d; --line: #dee2e6; --bg: #ffffff; --panel: #f8f9fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; padding: 24px 32px 64px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 16px 0 6px; }
p.sub { color: var(--muted); margin: 0 0 16px; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 18px; font-weight: 600; }
table { border-collapse: collapse; margin: 6px 0 12px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 10px; text-align: left; vertical-align: top; }
th { background: var(--panel); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
svg text { font-family: system-ui, "DejaVu Sans", sans-serif; }
.chart { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; background: #fff; }
.legend { color: var(--muted); font-size: 12px; margin: 4px 0 8px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 4px 0 10px; vertical-align: -1px; }
.dev { display: inline-block; padding: 0 6px; border-radius: 3px; color: #fff; font-size: 12px; white-space: nowrap; }
#op-search { font: inherit; padding: 5px 8px; width: 420px; max-width: 100%; border: 1px solid #adb5bd; border-radius: 4px; }
#op-tree details { margin-left: 16px; }
#op-tree > details { margin-left: 0; }
#op-tree summary { cursor: pointer; padding: 2px 0; }
#op-tree .scope { font-weight: 600; }
#op-tree .count { color: var(--muted); margin: 0 6px; }
#op-tree table { margin: 2px 0 6px 16px; }
#op-tree td { font-size: 13px; }
.why { color: var(--muted); }
.hidden { display: none; }
code { font-size: 12.5px; }
.zoom { margin: 0 0 6px; }
.zoom button { font: inherit; font-size: 12px; padding: 2px 10px; border: 1px solid #adb5bd; border-radius: 4px; background: #fff; cursor: pointer; }
#timeline { cursor: grab; user-select: none; }
#timeline a.span-link rect { cursor: pointer; }
#op-tree tr.op { cursor: pointer; }
#op-tree tr.op.picked td { background: #fff3bf; }
#op-tree tr.drill > td { background: var(--panel); }
.drill-body { padding: 4px 2px 8px; font-size: 13px; }
.drill-body table { margin: 4px 0; }
.drill-body tr.chosen td { font-weight: 600; }
"#;

const SCRIPT: &str = r#"
(function () {
  var box = document.getElementById('op-search');
  var tree = document.getElementById('op-tree');
  if (!box || !tree) return;
  var rows = tree.querySelectorAll('tr.op');
  var groups = tree.querySelectorAll('details');
  var initial = [];
  groups.forEach(function (d) { initial.push(d.open); });
  box.addEventListener('input', function () {
    var q = box.value.trim().toLowerCase();
    var shown = 0;
    rows.forEach(function (r) {
      var hit = q === '' || r.getAttribute('data-search').indexOf(q) >= 0;
      r.classList.toggle('hidden', !hit);
      var drill = document.getElementById('drill-' + r.id);
      if (!hit && drill) drill.classList.add('hidden');
      if (hit) shown++;
    });
    groups.forEach(function (d, i) {
      var any = d.querySelector('tr.op:not(.hidden)') !== null;
      d.classList.toggle('hidden', !any);
      d.open = q === '' ? initial[i] : any;
    });
    document.getElementById('op-count').textContent = shown + ' of ' + rows.length + ' ops';
  });
  // A click on an op shows or hides its drill-down row.
  rows.forEach(function (r) {
    r.addEventListener('click', function () {
      var drill = document.getElementById('drill-' + r.id);
      if (drill) drill.classList.toggle('hidden');
    });
  });
  // Shows op `id` (`op-7`): opens the modules holding it and its drill-down, marks it.
  function showOp(id) {
    var row = document.getElementById(id);
    if (!row) return;
    for (var e = row.parentElement; e; e = e.parentElement) {
      if (e.tagName === 'DETAILS') { e.open = true; e.classList.remove('hidden'); }
    }
    row.classList.remove('hidden');
    tree.querySelectorAll('tr.op.picked').forEach(function (p) { p.classList.remove('picked'); });
    row.classList.add('picked');
    var drill = document.getElementById('drill-' + id);
    if (drill) drill.classList.remove('hidden');
    row.scrollIntoView({block: 'center'});
  }
  document.querySelectorAll('#timeline a.span-link').forEach(function (a) {
    a.addEventListener('click', function (ev) {
      ev.preventDefault();
      var id = a.getAttribute('href').slice(1);
      showOp(id);
      if (history.replaceState) history.replaceState(null, '', '#' + id);
    });
  });
  if (location.hash.indexOf('#op-') === 0) showOp(location.hash.slice(1));
  window.addEventListener('hashchange', function () {
    if (location.hash.indexOf('#op-') === 0) showOp(location.hash.slice(1));
  });
})();
(function () {
  // The timeline's zoom: spans are redrawn for the time window [t0, t1].
  var svg = document.getElementById('timeline');
  if (!svg) return;
  var L = +svg.getAttribute('data-label'), P = +svg.getAttribute('data-plot');
  var END = +svg.getAttribute('data-end');
  var top = +svg.getAttribute('data-top'), bottom = +svg.getAttribute('data-bottom');
  var rects = Array.prototype.slice.call(svg.querySelectorAll('rect.span'));
  var ticks = document.getElementById('timeline-ticks');
  var range = document.getElementById('timeline-range');
  var view = [0, END > 0 ? END : 1];
  var NS = 'http://www.w3.org/2000/svg';
  function secs(s) {
    if (s === 0) return '0.000 s';
    var u = [[1e-9, 'ns'], [1e-6, 'us'], [1e-3, 'ms'], [1, 's']], i = 0;
    if (s >= 1) i = 3; else if (s >= 1e-3) i = 2; else if (s >= 1e-6) i = 1;
    return (s / u[i][0]).toFixed(3) + ' ' + u[i][1];
  }
  function step(span) {
    var raw = span / 6, p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = [1, 2, 5, 10];
    for (var i = 0; i < m.length; i++) if (span / (m[i] * p) <= 8) return m[i] * p;
    return 10 * p;
  }
  function draw() {
    var t0 = view[0], t1 = view[1], k = P / (t1 - t0);
    rects.forEach(function (r) {
      var s = +r.getAttribute('data-start'), e = +r.getAttribute('data-end');
      if (e < t0 || s > t1) { r.style.display = 'none'; return; }
      r.style.display = '';
      var a = Math.max(s, t0), b = Math.min(e, t1);
      r.setAttribute('x', (L + (a - t0) * k).toFixed(2));
      r.setAttribute('width', Math.max((b - a) * k, 0.6).toFixed(2));
    });
    while (ticks.firstChild) ticks.removeChild(ticks.firstChild);
    var d = step(t1 - t0);
    for (var t = Math.ceil(t0 / d) * d; t <= t1 + d * 1e-9; t += d) {
      var x = L + (t - t0) * k;
      var line = document.createElementNS(NS, 'line');
      line.setAttribute('x1', x); line.setAttribute('x2', x);
      line.setAttribute('y1', top); line.setAttribute('y2', bottom);
      line.setAttribute('stroke', '#e9ecef');
      var text = document.createElementNS(NS, 'text');
      text.setAttribute('x', x); text.setAttribute('y', 14);
      text.setAttribute('font-size', 10); text.setAttribute('fill', '#6c757d');
      text.setAttribute('text-anchor', 'middle');
      text.textContent = secs(t);
      ticks.appendChild(line); ticks.appendChild(text);
    }
    range.textContent = secs(t0) + ' to ' + secs(t1);
  }
  // Zooms by `f` (below 1: in) around time `at`, within the whole stream.
  function zoom(f, at) {
    var w = Math.min((view[1] - view[0]) * f, END > 0 ? END : 1);
    var a = at - (at - view[0]) * f;
    a = Math.max(0, Math.min(a, (END > 0 ? END : 1) - w));
    view = [a, a + w];
    draw();
  }
  function timeAt(clientX) {
    var box = svg.getBoundingClientRect();
    var x = (clientX - box.left) * (svg.viewBox.baseVal.width / box.width);
    return view[0] + (x - L) * (view[1] - view[0]) / P;
  }
  document.querySelectorAll('#timeline-zoom button').forEach(function (b) {
    b.addEventListener('click', function () {
      var mid = (view[0] + view[1]) / 2, z = b.getAttribute('data-zoom');
      if (z === 'in') zoom(0.5, mid);
      else if (z === 'out') zoom(2, mid);
      else { view = [0, END > 0 ? END : 1]; draw(); }
    });
  });
  svg.addEventListener('wheel', function (ev) {
    ev.preventDefault();
    zoom(ev.deltaY < 0 ? 0.8 : 1.25, timeAt(ev.clientX));
  }, {passive: false});
  var drag = null;
  svg.addEventListener('mousedown', function (ev) { drag = [ev.clientX, view[0], view[1]]; });
  window.addEventListener('mouseup', function () { drag = null; });
  window.addEventListener('mousemove', function (ev) {
    if (!drag) return;
    var box = svg.getBoundingClientRect();
    var dt = (ev.clientX - drag[0]) * (svg.viewBox.baseVal.width / box.width) * (drag[2] - drag[1]) / P;
    var w = drag[2] - drag[1], a = Math.max(0, Math.min(drag[1] - dt, (END > 0 ? END : 1) - w));
    view = [a, a + w];
    draw();
  });
  window.tesseraTimeline = { zoom: function (t0, t1) { view = [t0, t1]; draw(); }, view: function () { return view.slice(); } };
  range.textContent = secs(0) + ' to ' + secs(view[1]);
})();
"#;

/// Escapes text for HTML and SVG.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A fill from pale (idle) to deep orange (busy all the period).
fn load_colour(load: f64) -> String {
    let t = load.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        lerp(233.0, 217.0),
        lerp(236.0, 72.0),
        lerp(239.0, 15.0)
    )
}

/// What the page is drawn from.
pub struct Page<'a> {
    /// `report.json`.
    pub data: &'a ReportData,
    /// `plan.json`.
    pub plan: &'a Plan,
    /// The placed graph (`placed.tir`).
    pub graph: &'a Graph,
}

/// Renders the page.
pub fn render(inputs: &Page<'_>) -> String {
    let d = &inputs.data;
    let mut h = String::new();
    let title = format!(
        "{} on {}",
        file_name(&d.model),
        if d.target.name.is_empty() {
            "?"
        } else {
            &d.target.name
        }
    );
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>tessera report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n",
        esc(&title)
    );
    let _ = writeln!(
        h,
        "<h1>tessera report: {}</h1>\n<p class=\"sub\">{} compiled for target <b>{}</b>: {}</p>",
        esc(&title),
        esc(&d.model),
        esc(&d.target.name),
        esc(&d.target.description)
    );
    // Each op's element id (`op-7`, from its position in the body, which survives writing
    // and reading `placed.tir`; handles do not), by its key.
    let names = tessera_ir::text::value_names(inputs.graph);
    let ids: BTreeMap<String, String> = inputs
        .graph
        .ops()
        .iter()
        .enumerate()
        .map(|(pos, &op)| (op_key(inputs.graph, &names, op), format!("op-{pos}")))
        .collect();
    summary(&mut h, inputs);
    topology(&mut h, d);
    timeline(&mut h, d, &ids);
    measured(&mut h, d);
    memory(&mut h, d);
    placement(&mut h, inputs);
    ops(&mut h, inputs, &ids);
    passes(&mut h, d);
    let _ = write!(h, "<script>{SCRIPT}</script>\n</body>\n</html>\n");
    h
}

pub(super) fn file_name(path: &str) -> String {
    let p = std::path::Path::new(path);
    // `model.onnx` says little: name the model by its folder then.
    match (p.file_stem(), p.parent().and_then(|q| q.file_name())) {
        (Some(stem), Some(dir)) if stem == "model" => dir.to_string_lossy().into_owned(),
        (Some(stem), _) => stem.to_string_lossy().into_owned(),
        _ => path.to_string(),
    }
}

fn card(h: &mut String, key: &str, value: &str) {
    let _ = write!(
        h,
        "<div class=\"card\"><div class=\"k\">{}</div><div class=\"v\">{}</div></div>",
        esc(key),
        esc(value)
    );
}

fn summary(h: &mut String, inputs: &Page<'_>) {
    let s = &inputs.data.simulation;
    let plan = &inputs.plan;
    // The simulator's numbers and the placement model's, each group with its own bound.
    h.push_str("<section id=\"summary\">\n<h3>Simulated (the placed graph in the simulator)</h3>\n<div class=\"cards\">");
    card(h, "latency (one sample)", &seconds(s.latency));
    card(
        h,
        "throughput (1 / period)",
        &if s.throughput.is_finite() {
            format!("{}samples/s", tessera_targets::sim::rate(s.throughput))
        } else {
            "unbounded".to_string()
        },
    );
    card(
        h,
        &format!("period (over {} samples)", s.samples),
        &seconds(s.period),
    );
    card(
        h,
        &format!(
            "busiest resource: {}",
            if s.bottleneck.is_empty() {
                "none"
            } else {
                &s.bottleneck
            }
        ),
        &format!("{} per sample", seconds(s.bound_period)),
    );
    card(
        h,
        "period over the busiest's busy time",
        &if s.bound_period > 0.0 {
            format!("{:.1}%", 100.0 * (s.period / s.bound_period - 1.0).max(0.0))
        } else {
            "-".to_string()
        },
    );
    card(
        h,
        &format!(
            "transfers per sample ({} transfer ops)",
            s.transfer_count.ops
        ),
        &s.transfers.to_string(),
    );
    h.push_str("</div>\n");
    let _ = writeln!(
        h,
        "<p id=\"transfers-why\" class=\"legend\">Transfers: {}.</p>",
        esc(&crate::summary::transfers_text(&s.transfer_count))
    );
    match &s.period_excess {
        Some(p) => {
            let _ = writeln!(
                h,
                "<p id=\"period-why\">The period {} is {} longer than the busiest resource's \
                 busy time ({}, {} per sample): {}.</p>",
                seconds(s.period),
                seconds(s.period - s.bound_period),
                esc(&p.resource),
                seconds(p.busy),
                esc(&p.why())
            );
            if !p.chain.is_empty() {
                let _ = writeln!(
                    h,
                    "<details id=\"period-chain\"><summary>The critical chain, from the last \
                     completion back ({} steps{})</summary><ol>",
                    p.chain_steps,
                    if p.chain_steps > p.chain.len() {
                        format!(", the first {}", p.chain.len())
                    } else {
                        String::new()
                    }
                );
                for step in &p.chain {
                    let _ = writeln!(h, "<li><code>{}</code></li>", esc(step));
                }
                h.push_str("</ol></details>\n");
            }
        }
        None if !s.bottleneck.is_empty() => {
            let _ = writeln!(
                h,
                "<p id=\"period-why\" class=\"legend\">The period equals the busiest \
                 resource's busy time: {} is the bottleneck.</p>",
                esc(&s.bottleneck)
            );
        }
        None => {}
    }
    let (per, what) = match plan.objective {
        tessera_place::Objective::Throughput => (" per sample", "throughput"),
        tessera_place::Objective::Latency => ("", "latency"),
    };
    let _ = write!(
        h,
        "<h3>Placement model (the plan's objective, {what})</h3>\n<div class=\"cards\">"
    );
    card(
        h,
        &format!("objective value ({})", plan.chosen),
        &format!("{}{per}", seconds(plan.value)),
    );
    card(
        h,
        &format!("lower bound ({})", plan.lower_bound.binding()),
        &seconds(plan.lower_bound.value),
    );
    card(
        h,
        "gap = (value - bound) / value",
        &crate::summary::gap_percent(plan.value, plan.lower_bound.value),
    );
    card(h, "strategy", &plan.strategy);
    h.push_str("</div>\n</section>\n");
}

/// Each device's index, by name.
fn device_index(d: &ReportData) -> BTreeMap<&str, usize> {
    d.target
        .devices
        .iter()
        .enumerate()
        .map(|(i, dev)| (dev.name.as_str(), i))
        .collect()
}

/// Device layers by hops from the host over the links (unreachable devices last).
fn layers(d: &ReportData) -> Vec<Vec<usize>> {
    let n = d.target.devices.len();
    let index = device_index(d);
    let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
    for l in &d.target.links {
        if let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) {
            adj[a].push(b);
            adj[b].push(a);
        }
    }
    let mut depth = vec![usize::MAX; n];
    let start = index.get(d.target.host.as_str()).copied().unwrap_or(0);
    let mut queue = std::collections::VecDeque::new();
    if n > 0 {
        depth[start] = 0;
        queue.push_back(start);
    }
    while let Some(u) = queue.pop_front() {
        for &v in &adj[u] {
            if depth[v] == usize::MAX {
                depth[v] = depth[u] + 1;
                queue.push_back(v);
            }
        }
    }
    let deepest = depth.iter().filter(|&&x| x != usize::MAX).max().copied();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); deepest.map_or(0, |x| x + 1)];
    let mut lost = Vec::new();
    for (i, &dd) in depth.iter().enumerate() {
        if dd == usize::MAX {
            lost.push(i);
        } else {
            out[dd].push(i);
        }
    }
    if !lost.is_empty() {
        out.push(lost);
    }
    out
}

fn topology(h: &mut String, d: &ReportData) {
    const W: f64 = 164.0;
    const H: f64 = 78.0;
    const DX: f64 = 236.0;
    const DY: f64 = 104.0;
    const PAD: f64 = 24.0;
    let sim = &d.simulation;
    let period = sim.period;
    let (pos, width, height) = if d.target.layouts.is_empty() {
        let layers = layers(d);
        let rows = layers.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let width = PAD * 2.0 + W + DX * (layers.len().max(1) - 1) as f64;
        let height = PAD * 2.0 + H + DY * (rows - 1) as f64;
        let mut pos = vec![(0.0, 0.0); d.target.devices.len()];
        for (c, layer) in layers.iter().enumerate() {
            let top = PAD + (height - 2.0 * PAD - H - DY * (layer.len() - 1) as f64) / 2.0;
            for (r, &i) in layer.iter().enumerate() {
                pos[i] = (PAD + DX * c as f64, top + DY * r as f64);
            }
        }
        (pos, width, height)
    } else {
        geometry(d, W, H, DX, DY, PAD)
    };
    let index = device_index(d);
    let layout_of: BTreeMap<&str, &str> = d
        .target
        .layouts
        .iter()
        .flat_map(|l| {
            l.members
                .iter()
                .map(|m| (m.as_str(), l.kind.as_str()))
                .chain(l.hub.as_deref().map(|hub| (hub, l.kind.as_str())))
        })
        .collect();
    let _ = writeln!(
        h,
        "<section>\n<h2>Topology</h2>\n<p class=\"legend\">Devices filled by load (busy time per \
         sample over the period {}: <span class=\"swatch\" style=\"background:{}\"></span>idle \
         <span class=\"swatch\" style=\"background:{}\"></span>half <span class=\"swatch\" \
         style=\"background:{}\"></span>the bottleneck); the bar is peak memory over capacity \
         (red when over). Links are as thick as their busier direction's load.</p>",
        seconds(period),
        load_colour(0.0),
        load_colour(0.5),
        load_colour(1.0)
    );
    let _ = writeln!(
        h,
        "<div class=\"chart\"><svg id=\"topology\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">"
    );
    let util = |busy: f64| if period > 0.0 { busy / period } else { 0.0 };
    for (li, l) in d.target.links.iter().enumerate() {
        let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) else {
            continue;
        };
        let s = sim.links.get(li);
        let busy = s.map_or([0.0, 0.0], |s| s.busy);
        let moved = s.map_or([0.0, 0.0], |s| s.bytes);
        let u = util(busy[0].max(busy[1]));
        let (x1, y1) = (pos[a].0 + W / 2.0, pos[a].1 + H / 2.0);
        let (x2, y2) = (pos[b].0 + W / 2.0, pos[b].1 + H / 2.0);
        // A link whose straight line would run through another device bows out to the side
        // (the curve's peak is half way to its control point): within one column of the
        // layered drawing to the right, elsewhere (a torus's wrap-around) away from the line.
        let crosses = d.target.devices.len() <= 512
            && (0..pos.len())
                .any(|k| k != a && k != b && segment_hits_box((x1, y1), (x2, y2), pos[k], W, H));
        let path = if d.target.layouts.is_empty() && (x1 - x2).abs() < 1.0 {
            let bow = x1 + W + 36.0 + 0.1 * (y2 - y1).abs();
            format!(
                "M{x1:.1},{y1:.1} Q{bow:.1},{:.1} {x2:.1},{y2:.1}",
                (y1 + y2) / 2.0
            )
        } else if crosses {
            let (dx, dy) = (x2 - x1, y2 - y1);
            let len = (dx * dx + dy * dy).sqrt().max(1.0);
            let off = 2.0 * (0.5 * H + 30.0);
            let (cx, cy) = (
                (x1 + x2) / 2.0 + dy / len * off,
                (y1 + y2) / 2.0 - dx / len * off,
            );
            format!("M{x1:.1},{y1:.1} Q{cx:.1},{cy:.1} {x2:.1},{y2:.1}")
        } else {
            format!("M{x1:.1},{y1:.1} L{x2:.1},{y2:.1}")
        };
        let _ = writeln!(
            h,
            "<path class=\"link\" d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{:.1}\">\
             <title>{} &lt;-&gt; {}: {:.3} GB/s, {} latency\n{} -&gt; {}: busy {} per sample ({}), {}\n\
             {} -&gt; {}: busy {} per sample ({}), {}</title></path>",
            if u > 0.0 {
                load_colour(0.25 + 0.75 * u)
            } else {
                "#adb5bd".into()
            },
            2.0 + 8.0 * u.min(1.0),
            esc(&l.a),
            esc(&l.b),
            l.bandwidth / 1e9,
            seconds(l.latency),
            esc(&l.a),
            esc(&l.b),
            seconds(busy[0]),
            pct(util(busy[0])),
            bytes(moved[0] as u64),
            esc(&l.b),
            esc(&l.a),
            seconds(busy[1]),
            pct(util(busy[1])),
            bytes(moved[1] as u64),
        );
    }
    for (i, dev) in d.target.devices.iter().enumerate() {
        let (x, y) = pos[i];
        let s = sim.devices.get(i);
        let busy = s.map_or(0.0, |s| s.busy);
        let ops = s.map_or(0, |s| s.ops);
        let peak = s.map_or(0, |s| s.peak_memory);
        let load = util(busy);
        let mem = if dev.memory_bytes > 0 {
            peak as f64 / dev.memory_bytes as f64
        } else {
            0.0
        };
        let host = if dev.name == d.target.host {
            " (host)"
        } else {
            ""
        };
        let text = if load > 0.6 { "#ffffff" } else { "#212529" };
        // A switch holds no memory: no bar.
        let memory = if dev.memory_bytes == 0 {
            String::new()
        } else {
            format!(
                "<rect x=\"{bx:.1}\" y=\"{by:.1}\" width=\"{bw:.1}\" height=\"8\" rx=\"2\" \
                 fill=\"#ffffff\" fill-opacity=\"0.35\" stroke=\"#495057\" stroke-width=\"0.5\"/>\
                 <rect class=\"mem\" x=\"{bx:.1}\" y=\"{by:.1}\" width=\"{mw:.1}\" height=\"8\" \
                 rx=\"2\" fill=\"{mfill}\"/><text x=\"{bx:.1}\" y=\"{ty:.1}\" font-size=\"10\" \
                 fill=\"{text}\">mem {peak} / {cap}</text>",
                bx = x + 10.0,
                by = y + 47.0,
                bw = W - 20.0,
                mw = (W - 20.0) * mem.min(1.0),
                mfill = if mem > 1.0 { "#e03131" } else { "#5c7cfa" },
                ty = y + 70.0,
                peak = bytes(peak),
                cap = bytes(dev.memory_bytes),
            )
        };
        let _ = writeln!(
            h,
            "<g class=\"device\" data-device=\"{name}\"{layout}><title>{name}{host}: {kind}\n{ops} ops, \
             busy {busy} per sample ({load} of the period)\npeak memory {peak} of {cap} ({mem})</title>\
             <rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{W}\" height=\"{H}\" rx=\"8\" fill=\"{fill}\" \
             stroke=\"{stroke}\" stroke-width=\"{sw}\"/>\
             <text x=\"{tx:.1}\" y=\"{ty1:.1}\" font-size=\"14\" font-weight=\"600\" fill=\"{text}\">{name}</text>\
             <text x=\"{tx:.1}\" y=\"{ty2:.1}\" font-size=\"11\" fill=\"{text}\">{kind}{host} · {ops} ops · {load}</text>\
             {memory}</g>",
            name = esc(&dev.name),
            layout = layout_of
                .get(dev.name.as_str())
                .map(|k| format!(" data-layout=\"{}\"", esc(k)))
                .unwrap_or_default(),
            kind = esc(&dev.kind),
            busy = seconds(busy),
            load = pct(load),
            peak = bytes(peak),
            cap = bytes(dev.memory_bytes),
            mem = pct(mem),
            fill = load_colour(load),
            stroke = if load >= 0.999 { "#862e09" } else { "#868e96" },
            sw = if dev.name == d.target.host { 2.0 } else { 1.0 },
            tx = x + 10.0,
            ty1 = y + 20.0,
            ty2 = y + 36.0,
        );
    }
    h.push_str("</svg></div>\n</section>\n");
}

/// Whether the segment from `p` to `q` runs through the box at `at` (top-left) of `w` x `h`,
/// shrunk a little so that lines grazing a corner do not count.
fn segment_hits_box(p: (f64, f64), q: (f64, f64), at: (f64, f64), w: f64, h: f64) -> bool {
    let (x0, y0, x1, y1) = (at.0 + 6.0, at.1 + 6.0, at.0 + w - 6.0, at.1 + h - 6.0);
    // Liang-Barsky clipping of the segment against the box.
    let (dx, dy) = (q.0 - p.0, q.1 - p.1);
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for (pk, qk) in [
        (-dx, p.0 - x0),
        (dx, x1 - p.0),
        (-dy, p.1 - y0),
        (dy, y1 - p.1),
    ] {
        if pk == 0.0 {
            if qk < 0.0 {
                return false;
            }
        } else {
            let r = qk / pk;
            if pk < 0.0 {
                lo = lo.max(r);
            } else {
                hi = hi.min(r);
            }
        }
    }
    lo < hi
}

/// A layout's devices with their positions relative to its top-left, and its width and height.
type Region = (Vec<(usize, (f64, f64))>, f64, f64);

/// Device positions (top-left corners of `w` x `h` boxes) in the geometry of the target's
/// generators: a mesh or torus as its grid, a ring or fully-connected group on a circle, a
/// switch's members on a circle around it; the devices of no layout (the host, explicit
/// extras) in a column on the left. Returns the positions and the drawing's size.
fn geometry(
    d: &ReportData,
    w: f64,
    h: f64,
    dx: f64,
    dy: f64,
    pad: f64,
) -> (Vec<(f64, f64)>, f64, f64) {
    const GAP: f64 = 110.0;
    let n = d.target.devices.len();
    let index = device_index(d);
    let mut pos: Vec<Option<(f64, f64)>> = vec![None; n];
    // Each layout's region: positions relative to its top-left, and its size.
    let mut regions: Vec<Region> = Vec::new();
    let mut placed = vec![false; n];
    for l in &d.target.layouts {
        let members: Vec<usize> = l
            .members
            .iter()
            .filter_map(|m| index.get(m.as_str()).copied())
            .filter(|&i| !placed[i])
            .collect();
        let hub = l
            .hub
            .as_deref()
            .and_then(|hub| index.get(hub).copied())
            .filter(|&i| !placed[i]);
        if members.is_empty() {
            continue;
        }
        let mut at = Vec::new();
        let (rw, rh);
        if (l.kind == "mesh2d" || l.kind == "torus2d")
            && l.cols > 0
            && l.rows * l.cols == members.len()
        {
            for (k, &i) in members.iter().enumerate() {
                at.push((i, (dx * (k % l.cols) as f64, dy * (k / l.cols) as f64)));
            }
            rw = w + dx * (l.cols - 1) as f64;
            rh = h + dy * (l.rows - 1) as f64;
        } else {
            // On a circle, first member at the top, clockwise; boxes whose centres are
            // further apart than their diagonal cannot overlap.
            let m = members.len();
            let apart = (w * w + h * h).sqrt() + 12.0;
            let mut r = if m > 1 {
                apart / (2.0 * (std::f64::consts::PI / m as f64).sin())
            } else {
                0.0
            };
            if hub.is_some() {
                r = r.max(apart);
            }
            let (cx, cy) = (r + w / 2.0, r + h / 2.0);
            for (k, &i) in members.iter().enumerate() {
                let t =
                    -std::f64::consts::FRAC_PI_2 + 2.0 * std::f64::consts::PI * k as f64 / m as f64;
                at.push((i, (cx + r * t.cos() - w / 2.0, cy + r * t.sin() - h / 2.0)));
            }
            if let Some(hub) = hub {
                at.push((hub, (cx - w / 2.0, cy - h / 2.0)));
            }
            rw = 2.0 * r + w;
            rh = 2.0 * r + h;
        }
        for &(i, _) in &at {
            placed[i] = true;
        }
        regions.push((at, rw, rh));
    }
    let others: Vec<usize> = (0..n).filter(|&i| !placed[i]).collect();
    let column = if others.is_empty() {
        0.0
    } else {
        h + dy * (others.len() - 1) as f64
    };
    let tallest = regions.iter().map(|r| r.2).fold(column, f64::max);
    let height = 2.0 * pad + tallest;
    let mut x = pad;
    if !others.is_empty() {
        let top = pad + (tallest - column) / 2.0;
        for (k, &i) in others.iter().enumerate() {
            pos[i] = Some((x, top + dy * k as f64));
        }
        x += w + GAP;
    }
    for (at, rw, rh) in &regions {
        let top = pad + (tallest - rh) / 2.0;
        for &(i, (px, py)) in at {
            pos[i] = Some((x + px, top + py));
        }
        x += rw + GAP;
    }
    let width = x - GAP + pad;
    (
        pos.into_iter().map(|p| p.unwrap_or((pad, pad))).collect(),
        width.max(2.0 * pad + w),
        height,
    )
}

/// Tick spacing for an axis of `max` seconds: 1, 2 or 5 times a power of ten, at most 8 ticks.
fn tick(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / 6.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&t| max / t <= 8.0)
        .unwrap_or(10.0 * p)
}

fn timeline(h: &mut String, d: &ReportData, ids: &BTreeMap<String, String>) {
    const LABEL: f64 = 150.0;
    const PLOT: f64 = 880.0;
    const LANE: f64 = 22.0;
    const TOP: f64 = 24.0;
    let tl = &d.timeline;
    let all = tl.spans.len();
    let spans: Vec<&super::TimelineSpan> = if all > MAX_SPANS {
        tl.spans.iter().filter(|s| s.sample == 0).collect()
    } else {
        tl.spans.iter().collect()
    };
    // Lanes: busy devices in target order, then busy link directions in target order.
    let busy: std::collections::BTreeSet<(bool, &str)> = spans
        .iter()
        .map(|s| (s.kind == "op", s.lane.as_str()))
        .collect();
    let mut lanes: Vec<String> = Vec::new();
    for dev in &d.target.devices {
        if busy.contains(&(true, dev.name.as_str())) {
            lanes.push(dev.name.clone());
        }
    }
    for l in &d.target.links {
        for lane in [format!("{} -> {}", l.a, l.b), format!("{} -> {}", l.b, l.a)] {
            if busy.contains(&(false, lane.as_str())) && !lanes.contains(&lane) {
                lanes.push(lane);
            }
        }
    }
    let lane_of: BTreeMap<&str, usize> = lanes
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str(), i))
        .collect();
    let end = spans.iter().map(|s| s.end).fold(0.0, f64::max);
    let scale = if end > 0.0 { PLOT / end } else { 0.0 };
    let width = LABEL + PLOT + 20.0;
    let height = TOP + LANE * lanes.len() as f64 + 10.0;
    let _ = write!(
        h,
        "<section>\n<h2>Timeline</h2>\n<p class=\"legend\">The simulator's schedule of a stream of \
         {} samples queued at once{}: ops on devices and transfers on link directions. Colour = \
         sample:",
        tl.samples,
        match (spans.len() < all, tl.omitted) {
            (true, _) => format!(" (only sample 0 drawn: {all} spans)"),
            (false, 0) => String::new(),
            (false, n) => format!(" (the {all} longest of {} spans)", all + n),
        }
    );
    for (i, c) in SAMPLE_COLOURS.iter().enumerate().take(tl.samples.max(1)) {
        let _ = write!(
            h,
            "<span class=\"swatch\" style=\"background:{c}\"></span>{i}"
        );
    }
    h.push_str(
        "; transfers and collectives are lighter with a dark edge. Hover for details; click a \
         span for its op.</p>\n<div class=\"zoom\" id=\"timeline-zoom\"><button type=\"button\" \
         data-zoom=\"in\">zoom in</button> <button type=\"button\" data-zoom=\"out\">zoom \
         out</button> <button type=\"button\" data-zoom=\"reset\">whole stream</button> \
         <span class=\"legend\">showing <span id=\"timeline-range\"></span> (the wheel zooms \
         at the pointer, dragging pans)</span></div>\n",
    );
    let _ = writeln!(
        h,
        "<div class=\"chart\"><svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" \
         data-label=\"{LABEL}\" data-plot=\"{PLOT}\" data-end=\"{end}\" data-top=\"{:.1}\" \
         data-bottom=\"{:.1}\">",
        TOP - 4.0,
        height - 6.0
    );
    let step = tick(end);
    let ticks = if scale > 0.0 && step > 0.0 && end.is_finite() {
        ((end / step).floor() as usize).min(20)
    } else {
        0
    };
    h.push_str("<g id=\"timeline-ticks\">");
    for k in 0..=ticks {
        let t = step * k as f64;
        let x = LABEL + t * scale;
        let _ = write!(
            h,
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#e9ecef\"/>\
             <text x=\"{x:.1}\" y=\"14\" font-size=\"10\" fill=\"#6c757d\" text-anchor=\"middle\">{}</text>",
            TOP - 4.0,
            height - 6.0,
            seconds(t)
        );
    }
    h.push_str("</g>\n");
    for (i, lane) in lanes.iter().enumerate() {
        let y = TOP + LANE * i as f64;
        let _ = write!(
            h,
            "<rect x=\"0\" y=\"{y:.1}\" width=\"{width:.0}\" height=\"{LANE}\" fill=\"{}\"/>\
             <text class=\"lane\" x=\"6\" y=\"{:.1}\" font-size=\"12\" fill=\"#212529\">{}</text>",
            if i % 2 == 0 { "#f8f9fa" } else { "#ffffff" },
            y + 15.0,
            esc(lane)
        );
    }
    for s in &spans {
        let Some(&lane) = lane_of.get(s.lane.as_str()) else {
            continue;
        };
        let x = LABEL + s.start * scale;
        let w = ((s.end - s.start) * scale).max(0.6);
        let y = TOP + LANE * lane as f64 + 3.0;
        let colour = SAMPLE_COLOURS[s.sample % SAMPLE_COLOURS.len()];
        let style = if s.kind == "op" {
            format!("fill=\"{colour}\"")
        } else {
            format!(
                "fill=\"{colour}\" fill-opacity=\"0.45\" stroke=\"#343a40\" stroke-width=\"0.6\""
            )
        };
        let link = s.op.as_ref().and_then(|k| ids.get(k));
        if let Some(id) = link {
            let _ = write!(h, "<a class=\"span-link\" href=\"#{id}\">");
        }
        let _ = write!(
            h,
            "<rect class=\"span {}\" x=\"{x:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{:.1}\" \
             data-start=\"{}\" data-end=\"{}\" {style}>\
             <title>sample {}: {} {} ({}) on {}\n{} .. {} ({})</title></rect>",
            esc(&s.kind),
            LANE - 6.0,
            s.start,
            s.end,
            s.sample,
            esc(&s.kind),
            esc(&s.name),
            esc(&s.what),
            esc(&s.lane),
            seconds(s.start),
            seconds(s.end),
            seconds(s.end - s.start)
        );
        h.push_str(if link.is_some() { "</a>\n" } else { "\n" });
    }
    h.push_str("</svg></div>\n</section>\n");
}

fn memory(h: &mut String, d: &ReportData) {
    const LABEL: f64 = 150.0;
    const BAR: f64 = 600.0;
    const ROW: f64 = 26.0;
    let devices: Vec<_> = d
        .simulation
        .devices
        .iter()
        .filter(|s| s.capacity > 0)
        .collect();
    let width = LABEL + BAR + 260.0;
    let height = ROW * devices.len() as f64 + 8.0;
    h.push_str(
        "<section>\n<h2>Memory</h2>\n<p class=\"legend\">Peak memory of one sample against each \
         device's capacity (the bar is the capacity): <span class=\"swatch\" \
         style=\"background:#845ef7\"></span>resident weights <span class=\"swatch\" \
         style=\"background:#74c0fc\"></span>activations and received tensors at the peak.</p>\n",
    );
    let _ = writeln!(
        h,
        "<div class=\"chart\"><svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">"
    );
    for (i, s) in devices.iter().enumerate() {
        let y = 6.0 + ROW * i as f64;
        let cap = s.capacity as f64;
        let wf = (s.weights as f64 / cap).min(1.0);
        let af = ((s.peak_memory.saturating_sub(s.weights)) as f64 / cap).min(1.0 - wf);
        let over = s.peak_memory > s.capacity;
        let _ = writeln!(
            h,
            "<g class=\"memrow\"><title>{name}: weights {w}, peak {p} of {c}</title>\
             <text x=\"6\" y=\"{ty:.1}\" font-size=\"12\">{name}</text>\
             <rect x=\"{LABEL}\" y=\"{y:.1}\" width=\"{BAR}\" height=\"16\" fill=\"#f1f3f5\" stroke=\"{edge}\"/>\
             <rect class=\"bar\" x=\"{LABEL}\" y=\"{y:.1}\" width=\"{ww:.2}\" height=\"16\" fill=\"#845ef7\"/>\
             <rect class=\"bar\" x=\"{ax:.2}\" y=\"{y:.1}\" width=\"{aw:.2}\" height=\"16\" fill=\"#74c0fc\"/>\
             <text x=\"{tx:.1}\" y=\"{ty:.1}\" font-size=\"12\" fill=\"{tc}\">{p} of {c} ({pc})</text></g>",
            name = esc(&s.name),
            w = bytes(s.weights),
            p = bytes(s.peak_memory),
            c = bytes(s.capacity),
            ty = y + 12.5,
            edge = if over { "#e03131" } else { "#ced4da" },
            ww = BAR * wf,
            ax = LABEL + BAR * wf,
            aw = BAR * af,
            tx = LABEL + BAR + 10.0,
            tc = if over { "#e03131" } else { "#212529" },
            pc = pct(s.peak_memory as f64 / cap),
        );
    }
    h.push_str("</svg></div>\n");
    h.push_str(
        "<table id=\"memory-table\"><tr><th>device</th><th class=\"num\">ops</th>\
         <th class=\"num\">busy per sample</th><th class=\"num\">weights</th>\
         <th class=\"num\">peak</th><th class=\"num\">capacity</th><th class=\"num\">used</th></tr>\n",
    );
    for s in &d.simulation.devices {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(&s.name),
            s.ops,
            seconds(s.busy),
            bytes(s.weights),
            bytes(s.peak_memory),
            bytes(s.capacity),
            if s.capacity > 0 {
                pct(s.peak_memory as f64 / s.capacity as f64)
            } else {
                "-".into()
            }
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn placement(h: &mut String, inputs: &Page<'_>) {
    let plan = &inputs.plan;
    let unit = |v: f64| seconds(v);
    let _ = writeln!(
        h,
        "<section id=\"placement\">\n<h2>Placement, lower bound and gap</h2>\n<p>Objective \
         <b>{}</b>; strategy <code>{}</code> chose <b>{}</b>: {} per sample by the placement \
         model (period {}, latency {}). No placement can do better than the lower bound <b>{}</b> \
         (its binding component: <code>{}</code>), so this plan is at most <b>{}</b> above the \
         optimum.{}</p>",
        esc(&format!("{:?}", plan.objective).to_lowercase()),
        esc(&plan.strategy),
        esc(&plan.chosen),
        unit(plan.value),
        unit(plan.period),
        unit(plan.latency),
        unit(plan.lower_bound.value),
        esc(plan.lower_bound.binding()),
        pct(plan.gap),
        plan.selected_by
            .as_deref()
            .map(|s| format!(" Selected by {}.", esc(s)))
            .unwrap_or_default()
    );
    h.push_str(
        "<table id=\"bound-table\"><tr><th>lower-bound component</th><th class=\"num\">value</th></tr>\n",
    );
    for (name, v) in &plan.lower_bound.components {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
            esc(name),
            unit(*v)
        );
    }
    h.push_str("</table>\n");
    if !plan.attempts.is_empty() {
        h.push_str(
            "<table id=\"attempts\"><tr><th>strategy tried</th><th class=\"num\">value</th><th>note</th></tr>\n",
        );
        let json = serde_json::to_value(&plan.attempts).unwrap_or_default();
        for a in json.as_array().into_iter().flatten() {
            let name = a.get("strategy").and_then(|v| v.as_str()).unwrap_or("?");
            let value = a
                .get("value")
                .and_then(|v| v.as_f64())
                .map(unit)
                .unwrap_or_else(|| "-".into());
            let note = a
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| *k != "strategy" && *k != "value")
                .map(|(k, v)| format!("{k}: {}", v.as_str().map_or(v.to_string(), str::to_string)))
                .collect::<Vec<_>>()
                .join("; ");
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                esc(name),
                value,
                esc(&note)
            );
        }
        h.push_str("</table>\n");
    }
    splits(h, inputs);
    h.push_str("</section>\n");
}

/// The device mesh of a split plan and every split op: its group, axis, ways and why.
fn splits(h: &mut String, inputs: &Page<'_>) {
    let meshes = &inputs.graph.meshes;
    if meshes.is_empty() {
        return;
    }
    let split: Vec<_> = inputs
        .plan
        .assignment
        .iter()
        .filter_map(|a| a.split.as_ref().map(|s| (a, s)))
        .collect();
    let replicated = inputs
        .plan
        .split_axes()
        .get(tessera_place::alternatives::REPLICATED)
        .copied()
        .unwrap_or(0);
    let list = meshes
        .iter()
        .map(|m| {
            format!(
                "<code>mesh @{} = {:?}</code>: {}",
                esc(&m.name),
                m.shape,
                esc(&m.devices.join(", "))
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let _ = writeln!(
        h,
        "<h3 id=\"mesh\">Device mesh</h3>\n<p>The graph's ops on <code>device(\"@&lt;mesh&gt;\")</code> \
         run on each of that mesh's devices at once ({list}), each on its block of every split \
         value; {} ops of the plan are split, {} more run whole on every device of their \
         mesh (replicated).</p>",
        split.len() - replicated,
        replicated
    );
    if split.is_empty() {
        return;
    }
    let why: BTreeMap<&str, &str> = inputs
        .plan
        .explanations
        .iter()
        .map(|e| (e.op.as_str(), e.reason.as_str()))
        .collect();
    h.push_str(
        "<table id=\"splits\"><tr><th>op</th><th>group</th><th>axis</th><th class=\"num\">ways</th><th>why</th></tr>\n",
    );
    for (a, s) in split {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            esc(&a.op),
            esc(&a.device),
            esc(&s.axis),
            s.ways,
            esc(why.get(a.op.as_str()).copied().unwrap_or(""))
        );
    }
    h.push_str("</table>\n");
}

fn ops(h: &mut String, inputs: &Page<'_>, ids: &BTreeMap<String, String>) {
    let g = inputs.graph;
    let colours: BTreeMap<&str, &str> = inputs
        .data
        .target
        .devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.as_str(), DEVICE_COLOURS[i % DEVICE_COLOURS.len()]))
        .collect();
    let names = tessera_ir::text::value_names(g);
    let tree = scopes::tree(g);
    let total = tree.all_ops().len();
    let _ = writeln!(
        h,
        "<section id=\"ops\">\n<h2>Ops by module</h2>\n<p class=\"legend\">The ops grouped by the \
         model's own module names (from node names, else from the weights they use, else from \
         their inputs' producers), with their devices and why placement put them there.</p>\n\
         <input id=\"op-search\" type=\"search\" placeholder=\"filter by name, op, device or \
         reason\" aria-label=\"filter ops\"> <span id=\"op-count\" class=\"legend\">{total} ops</span>{}\n\
         <div id=\"op-tree\">",
        if total > super::MAX_LISTED {
            format!(
                " <span class=\"legend\">(the first {} listed one by one; placed.tir and \
                 plan.json have every op)</span>",
                super::MAX_LISTED
            )
        } else {
            String::new()
        }
    );
    let mut runs: BTreeMap<&str, Vec<&super::TimelineSpan>> = BTreeMap::new();
    let mut moves: BTreeMap<&str, Vec<&super::TimelineSpan>> = BTreeMap::new();
    for s in inputs.data.timeline.spans.iter().filter(|s| s.sample == 0) {
        if s.kind == "transfer" {
            moves.entry(s.name.as_str()).or_default().push(s);
        } else if let Some(k) = &s.op {
            runs.entry(k.as_str()).or_default().push(s);
        }
    }
    let ctx = OpsCtx {
        g,
        names: &names,
        colours: &colours,
        why: &inputs.data.reasons,
        costs: &inputs.data.costs,
        ids,
        runs,
        moves,
        rows_left: std::cell::Cell::new(super::MAX_LISTED),
    };
    // The root's own ops (no scope) first, as a group of their own.
    if !tree.ops.is_empty() {
        let mut top = Scope::new("(top level)");
        top.ops = tree.ops.clone();
        scope_html(h, &ctx, &top, 0);
    }
    for c in &tree.children {
        scope_html(h, &ctx, c, 0);
    }
    h.push_str("</div>\n</section>\n");
}

struct OpsCtx<'a> {
    g: &'a Graph,
    names: &'a [String],
    colours: &'a BTreeMap<&'a str, &'a str>,
    why: &'a BTreeMap<String, String>,
    /// Modelled seconds per device, by op key.
    costs: &'a BTreeMap<String, BTreeMap<String, Option<f64>>>,
    /// Each op's element id, by key.
    ids: &'a BTreeMap<String, String>,
    /// The first sample's runs of each op (one per device for a mesh op), by op key.
    runs: BTreeMap<&'a str, Vec<&'a super::TimelineSpan>>,
    /// The first sample's transfer spans, by moved value (`%x`).
    moves: BTreeMap<&'a str, Vec<&'a super::TimelineSpan>>,
    /// Op rows still to write ([`super::MAX_LISTED`] in all).
    rows_left: std::cell::Cell<usize>,
}

fn device_chip(ctx: &OpsCtx<'_>, device: &str) -> String {
    let colour = ctx.colours.get(device).copied().unwrap_or("#495057");
    format!(
        "<span class=\"dev\" style=\"background:{colour}\">{}</span>",
        esc(device)
    )
}

fn scope_html(h: &mut String, ctx: &OpsCtx<'_>, scope: &Scope, depth: usize) {
    let all = scope.all_ops();
    let mut per_device: BTreeMap<String, usize> = BTreeMap::new();
    for &op in &all {
        *per_device
            .entry(ctx.g.op(op).device.clone().unwrap_or_else(|| "?".into()))
            .or_default() += 1;
    }
    // A chain of single-child scopes with no ops of their own reads as one path.
    let mut name = scope.name.clone();
    let mut s = scope;
    while s.ops.is_empty() && s.children.len() == 1 {
        s = &s.children[0];
        name.push('.');
        name.push_str(&s.name);
    }
    let _ = write!(
        h,
        "<details{}><summary><span class=\"scope\">{}</span><span class=\"count\">{} ops</span>",
        if depth == 0 { " open" } else { "" },
        esc(&name),
        all.len()
    );
    for (dev, n) in &per_device {
        let _ = write!(h, "{} ×{n} ", device_chip(ctx, dev));
    }
    h.push_str("</summary>\n");
    for c in &s.children {
        scope_html(h, ctx, c, depth + 1);
    }
    if !s.ops.is_empty() {
        h.push_str("<table class=\"ops\"><tr><th>op</th><th>kind</th><th>result</th><th>device</th><th>why</th></tr>\n");
        // (Each op row is followed by its drill-down row, shown by a click on the op.)
        let mut skipped = 0;
        for &op in &s.ops {
            match ctx.rows_left.get() {
                0 => skipped += 1,
                n => {
                    ctx.rows_left.set(n - 1);
                    op_row(h, ctx, op);
                }
            }
        }
        if skipped > 0 {
            let _ = writeln!(
                h,
                "<tr><td colspan=\"5\" class=\"legend\">{skipped} more ops, not listed</td></tr>"
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</details>\n");
}

fn op_row(h: &mut String, ctx: &OpsCtx<'_>, op: OpId) {
    let data = ctx.g.op(op);
    let label = op_label(ctx.g, ctx.names, op);
    let device = data.device.clone().unwrap_or_else(|| "?".into());
    let kind = data.op.name();
    let ty = data
        .results
        .iter()
        .map(|&r| ctx.g.ty(r).to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let why = match data.op {
        Op::Transfer { .. } => "inserted by placement: its operand is made on another device",
        _ => ctx
            .why
            .get(&op_key(ctx.g, ctx.names, op))
            .map_or("", String::as_str),
    };
    let search = format!("{label} {kind} {device} {why}").to_lowercase();
    let _ = writeln!(
        h,
        "<tr class=\"op\" id=\"{}\" data-search=\"{}\"><td><code>{}</code></td><td>{}</td><td><code>{}</code></td>\
         <td>{}</td><td class=\"why\">{}</td></tr>",
        ctx.ids
            .get(&op_key(ctx.g, ctx.names, op))
            .map_or("", String::as_str),
        esc(&search),
        esc(&label),
        esc(kind),
        esc(&ty),
        device_chip(ctx, &device),
        esc(why)
    );
    drill(h, ctx, op, &device);
}

/// The drill-down row of an op: its work, its modelled time on every device, when it ran in
/// the first sample, and the transfers of its operands and results.
fn drill(h: &mut String, ctx: &OpsCtx<'_>, op: OpId, device: &str) {
    let key = op_key(ctx.g, ctx.names, op);
    let data = ctx.g.op(op);
    let _ = write!(
        h,
        "<tr class=\"drill hidden\" id=\"drill-{}\"><td colspan=\"5\"><div class=\"drill-body\">",
        ctx.ids.get(&key).map_or("", String::as_str)
    );
    let work = match tessera_targets::op_work(ctx.g, op) {
        Ok(w) => format!(
            "{} FLOPs, {} moved to and from memory (computed in {})",
            flops(w.flops),
            bytes(w.bytes as u64),
            w.elem
        ),
        Err(e) => format!("not computable: {e}"),
    };
    let _ = write!(
        h,
        "<div class=\"drill-work\"><b>work</b>: {}</div>",
        esc(&work)
    );
    if let Some(costs) = ctx.costs.get(&key) {
        h.push_str(
            "<table class=\"drill-costs\"><tr><th>device</th><th class=\"num\">modelled time</th></tr>",
        );
        for (dev, t) in costs {
            let chosen = dev == device;
            let _ = write!(
                h,
                "<tr{}><td>{}{}</td><td class=\"num\">{}</td></tr>",
                if chosen { " class=\"chosen\"" } else { "" },
                device_chip(ctx, dev),
                if chosen { " (placed here)" } else { "" },
                t.map_or_else(|| "cannot run".to_string(), seconds)
            );
        }
        h.push_str("</table>");
    }
    match ctx.runs.get(key.as_str()) {
        Some(runs) => {
            h.push_str("<div class=\"drill-runs\"><b>sample 0</b>: ");
            let parts: Vec<String> = runs
                .iter()
                .map(|s| {
                    format!(
                        "on {} from {} to {} ({})",
                        esc(&s.lane),
                        seconds(s.start),
                        seconds(s.end),
                        seconds(s.end - s.start)
                    )
                })
                .collect();
            h.push_str(&parts.join("; "));
            h.push_str("</div>");
        }
        None => h.push_str(
            "<div class=\"drill-runs\"><b>sample 0</b>: not on the timeline (free: its time is \
             on links, or it does no work)</div>",
        ),
    }
    let values: Vec<(&str, tessera_ir::ValueId)> = data
        .operands
        .iter()
        .map(|&v| ("operand", v))
        .chain(data.results.iter().map(|&v| ("result", v)))
        .collect();
    let mut rows = String::new();
    for (role, v) in values {
        let name = format!("%{}", ctx.names[v.index()]);
        for s in ctx.moves.get(name.as_str()).into_iter().flatten() {
            let _ = write!(
                rows,
                "<tr><td><code>{}</code> ({role})</td><td>{}</td><td class=\"num\">{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                esc(&name),
                esc(&s.lane),
                seconds(s.start),
                seconds(s.end),
                seconds(s.end - s.start)
            );
        }
    }
    if rows.is_empty() {
        h.push_str("<div class=\"drill-none\"><b>transfers</b>: none of its operands or results moves</div>");
    } else {
        let _ = write!(
            h,
            "<table class=\"drill-transfers\"><tr><th>transfers (sample 0)</th><th>link direction</th>\
             <th class=\"num\">start</th><th class=\"num\">end</th><th class=\"num\">time</th></tr>{rows}</table>"
        );
    }
    h.push_str("</div></td></tr>\n");
}

/// A FLOP count with a unit: `1.23 MFLOP`-style, three significant digits.
fn flops(f: f64) -> String {
    let (v, unit) = if f >= 1e12 {
        (f / 1e12, "T")
    } else if f >= 1e9 {
        (f / 1e9, "G")
    } else if f >= 1e6 {
        (f / 1e6, "M")
    } else if f >= 1e3 {
        (f / 1e3, "k")
    } else {
        (f, "")
    };
    if unit.is_empty() {
        format!("{v:.0}")
    } else {
        format!("{v:.3} {unit}")
    }
}

/// The change from `predicted` to `measured` as the error of the prediction.
fn error_text(predicted: Option<f64>, measured: f64) -> String {
    match predicted {
        Some(p) if measured > 0.0 => format!("{:+.1}%", 100.0 * (p - measured) / measured),
        _ => "-".into(),
    }
}

/// What `tessera run DIR --profile` measured, beside the prediction: the run, each step,
/// each kernel call with a bar for each.
fn measured(h: &mut String, d: &ReportData) {
    let Some(m) = &d.measured else {
        return;
    };
    let threads = m.threads.map_or_else(String::new, |t| {
        format!(" on {t} thread{}", if t == 1 { "" } else { "s" })
    });
    let _ = writeln!(
        h,
        "<section id=\"measured\">\n<h2>Predicted and measured</h2>\n<p class=\"legend\">\
         <code>tessera run DIR --profile</code>: {} runs after a warm-up (a first run, then 50 ms of runs){threads}, the \
         program JIT-compiled with a mark after each kernel call. Each call's time (from the \
         mark before it: the views and copies of its arguments included) is the median over \
         the runs, beside the modelled seconds of the ops it computes; the error is \
         (predicted - measured) / measured. Measurements differ between runs and machines.</p>",
        m.runs
    );
    h.push_str("<div class=\"cards\">");
    card(h, "predicted (simulated latency)", &seconds(m.predicted));
    card(h, "measured (the steps, median)", &seconds(m.measured));
    card(h, "error", &error_text(Some(m.predicted), m.measured));
    card(h, "median run (with the runner's work)", &seconds(m.run));
    h.push_str("</div>\n");
    h.push_str(
        "<table id=\"measured-steps\"><tr><th class=\"num\">step</th><th>device</th>\
         <th class=\"num\">predicted</th><th class=\"num\">measured</th><th class=\"num\">error</th></tr>\n",
    );
    for s in &m.steps {
        let _ = writeln!(
            h,
            "<tr><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            s.step,
            esc(&s.device),
            s.predicted.map_or_else(|| "-".into(), seconds),
            seconds(s.measured),
            error_text(s.predicted, s.measured)
        );
    }
    h.push_str("</table>\n");
    // Bars on one scale: the longest prediction or measurement.
    let longest = m
        .kernels
        .iter()
        .flat_map(|k| [k.predicted.unwrap_or(0.0), k.measured])
        .fold(0.0f64, f64::max);
    const W: f64 = 240.0;
    let width = |t: f64| {
        if longest > 0.0 {
            (W * t / longest).max(0.5)
        } else {
            0.0
        }
    };
    h.push_str(
        "<table id=\"measured-kernels\"><tr><th>kernel</th><th class=\"num\">step</th><th>ops</th>\
         <th class=\"num\">predicted</th><th class=\"num\">measured</th><th class=\"num\">error</th>\
         <th>predicted (grey) and measured (blue)</th></tr>\n",
    );
    for k in &m.kernels {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td><svg width=\"{W}\" height=\"14\">\
             <rect y=\"0\" height=\"6\" width=\"{:.1}\" fill=\"#adb5bd\"/>\
             <rect y=\"7\" height=\"6\" width=\"{:.1}\" fill=\"#4dabf7\"/></svg></td></tr>",
            if k.kernel.is_empty() {
                "(step return)".to_string()
            } else {
                esc(&k.kernel)
            },
            k.step,
            esc(&k.ops.join(", ")),
            k.predicted.map_or_else(|| "-".into(), seconds),
            seconds(k.measured),
            error_text(k.predicted, k.measured),
            width(k.predicted.unwrap_or(0.0)),
            width(k.measured)
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn passes(h: &mut String, d: &ReportData) {
    let total: f64 = d.passes.iter().map(|p| p.seconds + p.verify_seconds).sum();
    let share = |t: f64| {
        if total > 0.0 {
            pct(t / total)
        } else {
            "-".into()
        }
    };
    h.push_str(
        "<section id=\"passes\">\n<h2>Passes</h2>\n<p class=\"legend\">Wall time of each pass \
         of the pipeline (the verifier after each pass apart), like <code>--timing</code>, and \
         each pass's counters, like <code>--pass-statistics</code>. Times are measurements and \
         differ between runs (0 when <code>SOURCE_DATE_EPOCH</code> was set).</p>\n<table id=\"pass-timing\"><tr><th>pass</th><th>changed the IR</th>\
         <th class=\"num\">wall time</th><th class=\"num\">share</th><th class=\"num\">verifier</th></tr>\n",
    );
    for p in &d.passes {
        let _ = writeln!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            esc(&p.name),
            if p.changed { "yes" } else { "no" },
            seconds(p.seconds),
            share(p.seconds),
            seconds(p.verify_seconds)
        );
    }
    let _ = writeln!(
        h,
        "<tr><th>total</th><th></th><th class=\"num\">{}</th><th class=\"num\">100.0%</th><th></th></tr>\n</table>",
        seconds(total)
    );
    if d.passes.iter().any(|p| !p.statistics.is_empty()) {
        h.push_str(
            "<h3>Pass statistics</h3>\n<table id=\"pass-stats\"><tr><th>pass</th><th>counter</th>\
             <th class=\"num\">value</th><th>meaning</th></tr>\n",
        );
        for p in &d.passes {
            for s in &p.statistics {
                let _ = writeln!(
                    h,
                    "<tr><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                    esc(&p.name),
                    esc(&s.name),
                    s.value,
                    esc(&s.description)
                );
            }
        }
        h.push_str("</table>\n");
    }
    let notes: Vec<_> = d.passes.iter().filter(|p| !p.notes.is_empty()).collect();
    for p in notes {
        let _ = writeln!(h, "<h3>{} explained</h3>\n<ul>", esc(&p.name));
        for n in &p.notes {
            let _ = writeln!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    if !d.stages.is_empty() {
        h.push_str(
            "<h3>Compile stages</h3>\n<table id=\"stages\"><tr><th>stage</th><th class=\"num\">wall time</th></tr>\n",
        );
        for s in &d.stages {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
                esc(&s.name),
                seconds(s.seconds)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick(10.0), 2.0);
        assert_eq!(tick(7.3e-6), 1e-6);
        assert_eq!(tick(0.0), 1.0);
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(load_colour(0.0), "#e9ecef");
        // A line through a box hits it; one past its corner, or ending before it, does not.
        assert!(segment_hits_box(
            (0.0, 50.0),
            (300.0, 50.0),
            (100.0, 0.0),
            100.0,
            100.0
        ));
        assert!(!segment_hits_box(
            (0.0, 0.0),
            (90.0, 200.0),
            (100.0, 0.0),
            100.0,
            100.0
        ));
        assert!(!segment_hits_box(
            (0.0, 50.0),
            (95.0, 50.0),
            (100.0, 0.0),
            100.0,
            100.0
        ));
        assert_eq!(load_colour(2.0), load_colour(1.0));
    }
}
