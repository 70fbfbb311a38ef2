//! The compile report: `report.json` and `report.html` from `tessera compile -o`, `tessera
//! report DIR`, the page's content against the compile's own files, bad input, and the page
//! drawn by a real browser (headless Chromium; `make deps` installs it, and `make test` sets
//! `TESSERA_REQUIRE_CHROMIUM=1` so that CI cannot skip it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command as Process;

use serde_json::Value;

mod common;

use common::cli::{fails, ok, tessera};

const GPT2: &str = "testdata/models/onnx/gpt2_tiny/model.onnx";

fn compile_gpt2(dir: &Path) {
    ok(tessera()
        .args(["compile", GPT2, "--input-shape", "input_ids=1x16"])
        .args(["--target", "mcm-2x2", "-o"])
        .arg(dir));
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&fs::read_to_string(path).expect("read")).expect("json")
}

/// The non-`const` ops of a placed graph.
fn placed_ops(dir: &Path) -> Vec<tessera_ir::OpId> {
    let g = tessera_ir::text::load(&dir.join("placed.tir")).expect("placed.tir");
    g.ops()
        .iter()
        .copied()
        .filter(|&o| g.op(o).op.name() != "const")
        .collect()
}

#[test]
fn compile_writes_the_report_and_report_redraws_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("gpt2");
    compile_gpt2(&dir);
    let page = fs::read_to_string(dir.join("report.html")).expect("report.html");
    let data = json(&dir.join("report.json"));
    let plan = json(&dir.join("plan.json"));
    assert_eq!(data["format"], "tessera-report/1");

    // Drawn again from the files alone: the same page.
    fs::remove_file(dir.join("report.html")).expect("rm");
    let out = ok(tessera().arg("report").arg(&dir));
    assert!(out.contains("report.html"), "{out}");
    assert_eq!(
        fs::read_to_string(dir.join("report.html")).expect("again"),
        page
    );
    let elsewhere = tmp.path().join("page.html");
    ok(tessera().arg("report").arg(&dir).arg("-o").arg(&elsewhere));
    assert_eq!(fs::read_to_string(&elsewhere).expect("-o"), page);

    // Self-contained: no scripts, styles, images or fonts from anywhere else.
    for banned in ["<link", "src=", "@import", "url(", "https://"] {
        assert!(
            !page.contains(banned),
            "the page refers outside itself: {banned}"
        );
    }
    for id in [
        "summary",
        "topology",
        "timeline",
        "memory",
        "placement",
        "op-search",
        "op-tree",
        "pass-timing",
        "pass-stats",
    ] {
        assert!(page.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    // Every device of the target is drawn, every op listed once, every span drawn.
    let devices = data["target"]["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 5);
    assert_eq!(page.matches("<g class=\"device\"").count(), devices.len());
    let ops = placed_ops(&dir);
    assert_eq!(page.matches("<tr class=\"op\"").count(), ops.len());
    let spans = data["timeline"]["spans"].as_array().expect("spans");
    assert_eq!(page.matches("<rect class=\"span ").count(), spans.len());
    // Three samples: every op of the placed graph runs once in each.
    assert_eq!(data["timeline"]["samples"], 3);
    let op_spans = spans.iter().filter(|s| s["kind"] == "op").count();
    assert_eq!(op_spans, 3 * ops.len());
    // The transfers placement inserted are on the links (input in, logits' input out).
    assert!(
        spans
            .iter()
            .any(|s| s["kind"] == "transfer" && s["lane"] == "cpu0 -> chip0")
    );
    // The bound and gap shown are the plan's.
    let gap = format!("{:.1}%", 100.0 * plan["gap"].as_f64().expect("gap"));
    assert!(page.contains(&gap), "gap {gap} not shown");
    // The pipeline's passes are all there, eqsat with its counters.
    let passes: Vec<&str> = data["passes"]
        .as_array()
        .expect("passes")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(passes, ["canonicalize", "cse", "eqsat", "dce"]);
    let eqsat = &data["passes"][2]["statistics"];
    assert!(
        eqsat.as_array().expect("stats").len() >= 3,
        "eqsat statistics: {eqsat}"
    );
    assert!(page.contains("<td><code>eqsat</code></td>"));
    // Every op but the inserted transfers has the placement's reason for its device.
    assert!(
        !page.contains("<td class=\"why\"></td>"),
        "an op without its reason"
    );
    // Grouped by the model's modules (GPT-2's weights are named transformer.h.0...).
    assert!(
        page.contains("<span class=\"scope\">transformer</span>"),
        "no module tree"
    );
    assert!(page.contains("h.0"));
}

#[test]
fn source_date_epoch_makes_every_output_byte_identical() {
    let tmp = tempfile::tempdir().expect("tmp");
    let compile = |dir: &Path| {
        ok(tessera()
            .env("SOURCE_DATE_EPOCH", "0")
            .args(["compile", GPT2, "--input-shape", "input_ids=1x16"])
            .args(["--target", "mcm-2x2", "-o"])
            .arg(dir));
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    compile(&a);
    compile(&b);
    let mut names: Vec<_> = fs::read_dir(&a)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert!(names.iter().any(|n| n == "report.html"));
    for n in &names {
        assert_eq!(
            fs::read(a.join(n)).expect("a"),
            fs::read(b.join(n)).expect("b"),
            "{n:?} differs between two compiles"
        );
    }
    let data = json(&a.join("report.json"));
    assert!(
        data["passes"]
            .as_array()
            .expect("passes")
            .iter()
            .all(|p| p["seconds"] == 0.0)
    );
}

#[test]
fn a_sharded_graph_shows_its_collectives() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("tp");
    ok(tessera()
        .args(["compile", "testdata/mlir/tp_mlp.tir", "--target", "mcm-2x2"])
        .args(["--passes", "shard{strategy=tensor},canonicalize", "-o"])
        .arg(&dir));
    let data = json(&dir.join("report.json"));
    let spans = data["timeline"]["spans"].as_array().expect("spans");
    // The all-reduce occupies the mesh's links; mesh ops run on all four chips.
    assert!(
        spans
            .iter()
            .any(|s| s["kind"] == "collective" && s["what"] == "all-reduce")
    );
    for chip in ["chip0", "chip1", "chip2", "chip3"] {
        assert!(
            spans.iter().any(|s| s["kind"] == "op" && s["lane"] == chip),
            "nothing on {chip}"
        );
    }
    let page = fs::read_to_string(dir.join("report.html")).expect("page");
    assert!(page.contains("<rect class=\"span collective\""));
    assert!(page.contains("@grid"), "mesh ops show their device");
    // Ops without model names (a .tir file, and the sharding pass's ops) are matched to the
    // plan's explanations too.
    assert!(
        !page.contains("<td class=\"why\"></td>"),
        "an op without its reason"
    );
}

#[test]
fn names_from_the_model_are_escaped() {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = tmp.path().join("m.tir");
    fs::write(
        &model,
        "graph @g(%x: f32[4]) {\n  %y = relu %x : f32[4] loc(\"<b>bold</b> & 'quoted'\")\n  \
         return %y\n}\n",
    )
    .expect("write");
    let dir = tmp.path().join("out");
    ok(tessera().arg("compile").arg(&model).arg("-o").arg(&dir));
    let page = fs::read_to_string(dir.join("report.html")).expect("page");
    assert!(
        !page.contains("<b>bold"),
        "a model's name reached the page as markup"
    );
    assert!(page.contains("&lt;b&gt;bold&lt;/b&gt; &amp; &#39;quoted&#39;"));
}

/// A graph of more ops than the report lists one by one (MAX_LISTED = 10,000): the page
/// lists the first ones and draws the longest spans, and says how many it leaves out;
/// `report.json` records the counts, and `tessera report` redraws the same page.
#[test]
fn a_huge_graph_gets_a_report_of_bounded_size() {
    let tmp = tempfile::tempdir().expect("tmp");
    let n = 10_500;
    let mut text = String::from("graph @chain(%x: f32[4, 8]) {\n");
    for i in 0..n {
        let (op, prev) = (
            ["relu", "tanh"][i % 2],
            if i == 0 {
                "x".to_string()
            } else {
                format!("v{}", i - 1)
            },
        );
        text.push_str(&format!("  %v{i} = {op} %{prev} : f32[4, 8]\n"));
    }
    text.push_str(&format!("  return %v{}\n}}\n", n - 1));
    let model = tmp.path().join("chain.tir");
    fs::write(&model, text).expect("write");
    let dir = tmp.path().join("o");
    // No passes: every op of the chain stays (the default pipeline would fold relu-tanh pairs
    // no more than it would here, but it takes longer).
    ok(tessera()
        .arg("compile")
        .arg(&model)
        .args(["--passes", "", "-o"])
        .arg(&dir));
    let data = json(&dir.join("report.json"));
    let spans = data["timeline"]["spans"].as_array().expect("spans");
    assert_eq!(spans.len(), 10_000);
    assert_eq!(data["timeline"]["omitted"], 500);
    assert_eq!(data["omitted_ops"], 500);
    assert_eq!(data["reasons"].as_object().expect("reasons").len(), 10_000);
    let page = fs::read_to_string(dir.join("report.html")).expect("page");
    assert!(page.contains("(the 10000 longest of 10500 spans)"));
    assert!(page.contains("(the first 10000 listed one by one;"));
    assert!(page.contains("500 more ops, not listed"));
    assert!(page.len() < 20 << 20, "{} bytes", page.len());
    let before = page;
    ok(tessera().arg("report").arg(&dir));
    assert_eq!(
        fs::read_to_string(dir.join("report.html")).expect("page"),
        before
    );
}

#[test]
fn report_of_a_directory_without_a_compile_is_an_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    let err = fails(tessera().arg("report").arg(tmp.path()));
    assert!(
        err.contains("report.json") && err.contains("tessera compile -o"),
        "{err}"
    );
    assert!(!tmp.path().join("report.html").exists());
    // A data file of another format, or files from different compiles, are refused.
    fs::write(tmp.path().join("report.json"), "{\"format\": 3}").expect("write");
    let err = fails(tessera().arg("report").arg(tmp.path()));
    assert!(err.contains("not a tessera report data file"), "{err}");
    let a = tmp.path().join("a");
    compile_gpt2(&a);
    let b = tmp.path().join("b");
    ok(tessera()
        .args(["compile", GPT2, "--input-shape", "input_ids=1x16"])
        .args(["--target", "hetero-cpu-gpu", "-o"])
        .arg(&b));
    fs::copy(a.join("placed.tir"), b.join("placed.tir")).expect("copy");
    fs::copy(a.join("placed.safetensors"), b.join("placed.safetensors")).expect("copy");
    let err = fails(tessera().arg("report").arg(&b));
    assert!(err.contains("different compiles"), "{err}");
    // A hand-edited timeline that is not one.
    let mut data = json(&a.join("report.json"));
    data["timeline"]["spans"][0]["start"] = Value::from(-1.0);
    fs::write(a.join("report.json"), data.to_string()).expect("write");
    let err = fails(tessera().arg("report").arg(&a));
    assert!(err.contains("not an interval of time"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// In a browser.

/// The Chromium binary, if installed.
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            let out = Process::new("which").arg(name).output().ok()?;
            out.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        })
}

/// Measures what the browser drew, after layout, and writes it into the page as JSON; runs
/// the op filter too. Appended to a copy of the report.
const PROBE: &str = r#"<script>
(function () {
  function box(el) { var r = el.getBoundingClientRect(); return [r.width, r.height]; }
  function visible(el) { return el.checkVisibility ? el.checkVisibility() : true; }
  function drawn(sel) {
    var n = 0;
    document.querySelectorAll(sel).forEach(function (el) {
      var b = box(el); if (b[0] > 0 && b[1] > 0 && visible(el)) n++;
    });
    return n;
  }
  function stroked(sel) {
    var n = 0;
    document.querySelectorAll(sel).forEach(function (el) {
      if (el.getTotalLength() > 0 && visible(el)) n++;
    });
    return n;
  }
  var out = {
    topology: box(document.getElementById('topology')),
    devices: drawn('#topology g.device rect'),
    links: stroked('#topology path.link'),
    timeline: box(document.getElementById('timeline')),
    spans: drawn('#timeline rect.span'),
    spans_outside: (function () {
      var t = document.getElementById('timeline').getBoundingClientRect();
      var n = 0;
      document.querySelectorAll('#timeline rect.span').forEach(function (el) {
        var r = el.getBoundingClientRect();
        if (r.left < t.left || r.right > t.right + 0.5 || r.top < t.top || r.bottom > t.bottom) n++;
      });
      return n;
    })(),
    spans_extent: (function () {
      var lo = Infinity, hi = -Infinity;
      document.querySelectorAll('#timeline rect.span').forEach(function (el) {
        var r = el.getBoundingClientRect();
        lo = Math.min(lo, r.left); hi = Math.max(hi, r.right);
      });
      return hi - lo;
    })(),
    devices_overlapping: (function () {
      var boxes = [];
      document.querySelectorAll('#topology g.device > rect:first-of-type').forEach(function (el) {
        boxes.push(el.getBoundingClientRect());
      });
      var n = 0;
      for (var i = 0; i < boxes.length; i++) for (var j = i + 1; j < boxes.length; j++) {
        var a = boxes[i], b = boxes[j];
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) n++;
      }
      return n;
    })(),
    lanes: drawn('#timeline text.lane'),
    memory_bars: drawn('#memory rect.bar'),
    memory_rows: drawn('#memory-table tr'),
    pass_rows: drawn('#pass-timing tr'),
    stat_rows: drawn('#pass-stats tr'),
    op_rows_open: drawn('#op-tree tr.op'),
  };
  // Where each device was drawn: the centre of its box.
  out.positions = {};
  document.querySelectorAll('#topology g.device').forEach(function (g) {
    var r = g.querySelector('rect').getBoundingClientRect();
    out.positions[g.getAttribute('data-device')] = [r.left + r.width / 2, r.top + r.height / 2];
  });
  // A span's link to its op: the op's row and its drill-down are shown, its modules opened.
  var links = document.querySelectorAll('#timeline a.span-link');
  out.span_links = links.length;
  var hidden_row = null;
  links.forEach(function (a) {
    var row = document.getElementById(a.getAttribute('href').slice(1));
    if (!hidden_row && row && !visible(row)) hidden_row = a;
  });
  if (hidden_row) {
    var id = hidden_row.getAttribute('href').slice(1);
    out.linked_op = id;
    out.linked_hidden_before = true;
    hidden_row.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true}));
    var row = document.getElementById(id), drill = document.getElementById('drill-' + id);
    out.linked_row_drawn = visible(row) && box(row)[1] > 0;
    out.linked_drill_drawn = visible(drill) && box(drill)[1] > 0;
    out.linked_drill_text = drill.textContent;
    out.linked_costs_rows = drill.querySelectorAll('table.drill-costs tr').length;
    out.linked_picked = row.classList.contains('picked');
  }
  // The zoom: "zoom in" halves the window about its middle, so spans inside it are drawn
  // twice as wide, and spans outside it are not drawn; "whole stream" restores the widths.
  var rects = Array.prototype.slice.call(document.querySelectorAll('#timeline rect.span'));
  var svg = document.getElementById('timeline');
  var L = +svg.getAttribute('data-label'), P = +svg.getAttribute('data-plot');
  var sbox = svg.getBoundingClientRect();
  var lo = sbox.left + L + P / 4, hi = sbox.left + L + 3 * P / 4;
  var before = rects.map(function (r) { var b = r.getBoundingClientRect(); return [b.left, b.right, b.width]; });
  out.range_before = document.getElementById('timeline-range').textContent;
  document.querySelector('#timeline-zoom button[data-zoom="in"]').click();
  out.range_after = document.getElementById('timeline-range').textContent;
  var ratios = [], outside = 0, hidden_outside = 0;
  rects.forEach(function (r, i) {
    var b = before[i];
    if (b[0] >= lo && b[1] <= hi && b[2] > 2) ratios.push(r.getBoundingClientRect().width / b[2]);
    if (b[1] < lo - 1 || b[0] > hi + 1) { outside++; if (!visible(r) || r.style.display === 'none') hidden_outside++; }
  });
  out.zoom_inside = ratios.length;
  out.zoom_ratio_min = Math.min.apply(null, ratios);
  out.zoom_ratio_max = Math.max.apply(null, ratios);
  out.zoom_outside = outside;
  out.zoom_hidden_outside = hidden_outside;
  document.querySelector('#timeline-zoom button[data-zoom="reset"]').click();
  var restored = 0;
  rects.forEach(function (r, i) {
    if (Math.abs(r.getBoundingClientRect().width - before[i][2]) < 0.05) restored++;
  });
  out.zoom_restored = restored;
  var search = document.getElementById('op-search');
  search.value = 'matmul';
  search.dispatchEvent(new Event('input'));
  out.matmul_rows = drawn('#op-tree tr.op');
  out.count_text = document.getElementById('op-count').textContent;
  var pre = document.createElement('pre');
  pre.id = 'tessera-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

/// Runs `script` (a `<script>` that writes `<pre id="tessera-probe">`) in `page` in the
/// browser and returns what it measured.
fn probe(chromium: &Path, page: &Path, script: &str) -> Value {
    let html = fs::read_to_string(page).expect("page");
    let probe = page.with_file_name("probe.html");
    fs::write(&probe, html.replace("</body>", &format!("{script}</body>"))).expect("write");
    let dom = headless(chromium, &["--dump-dom"], &probe);
    let needle = "<pre id=\"tessera-probe\">";
    let start = dom.find(needle).expect("the probe ran") + needle.len();
    let end = start + dom[start..].find("</pre>").expect("end");
    serde_json::from_str(&dom[start..end]).expect("json")
}

/// The number of non-`const` ops in DIR's placed graph.
fn ops_count(dir: &Path) -> usize {
    placed_ops(dir).len()
}

fn headless(chromium: &Path, args: &[&str], page: &Path) -> String {
    // A profile of its own (not $HOME's), and a deadline: a browser that hangs fails the test.
    let profile = tempfile::tempdir().expect("profile");
    let out = Process::new("timeout")
        .arg("120")
        .arg(chromium)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args([
            "--headless",
            "--disable-dev-shm-usage",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,2400",
        ])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_report_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("TESSERA_REQUIRE_CHROMIUM").is_none(),
            "TESSERA_REQUIRE_CHROMIUM is set but chromium is not installed (make deps installs it)"
        );
        eprintln!("chromium is not installed: the report's browser test did not run");
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("gpt2");
    compile_gpt2(&dir);
    let data = json(&dir.join("report.json"));
    let m = probe(&chromium, &dir.join("report.html"), PROBE);
    let num = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{k}: {m}"));
    let size = |k: &str| (m[k][0].as_f64().expect("w"), m[k][1].as_f64().expect("h"));

    let devices = data["target"]["devices"].as_array().expect("devices").len() as f64;
    let (w, h) = size("topology");
    assert!(w > 300.0 && h > 100.0, "topology drawn {w}x{h}");
    // Each device is a box and a memory track (the fill can be empty).
    assert!(num("devices") >= 2.0 * devices, "{m}");
    assert_eq!(num("links"), 5.0, "{m}");
    let (w, h) = size("timeline");
    assert!(w > 800.0 && h > 60.0, "timeline drawn {w}x{h}");
    let spans = data["timeline"]["spans"].as_array().expect("spans");
    assert_eq!(
        num("spans"),
        spans.len() as f64,
        "every span of the timeline has an area"
    );
    assert_eq!(num("spans_outside"), 0.0, "spans drawn outside the chart");
    assert!(
        num("spans_extent") > 600.0,
        "the spans are not spread over the time axis: {m}"
    );
    assert_eq!(
        num("devices_overlapping"),
        0.0,
        "devices drawn on top of each other"
    );
    let lanes: std::collections::BTreeSet<&str> = spans
        .iter()
        .map(|s| s["lane"].as_str().expect("lane"))
        .collect();
    assert_eq!(
        num("lanes"),
        lanes.len() as f64,
        "one lane per busy device or link direction"
    );
    assert!(num("memory_bars") >= 2.0, "{m}");
    assert_eq!(num("memory_rows"), devices + 1.0);
    assert_eq!(num("pass_rows"), 6.0, "header, four passes, total");
    assert!(num("stat_rows") >= 4.0, "{m}");
    // The top-level groups are open (their ops are drawn), the modules inside them closed.
    assert!(num("op_rows_open") >= 2.0, "{m}");
    assert!(num("op_rows_open") < placed_ops(&dir).len() as f64, "{m}");
    // The filter opens the groups holding matches and hides the rest.
    let g = tessera_ir::text::load(&dir.join("placed.tir")).expect("placed");
    let matmuls = placed_ops(&dir)
        .iter()
        .filter(|&&o| g.op(o).op.name() == "matmul")
        .count();
    assert!(matmuls > 0);
    assert_eq!(num("matmul_rows"), matmuls as f64, "{m}");
    let ops = placed_ops(&dir).len();
    assert_eq!(
        m["count_text"].as_str().expect("count"),
        format!("{matmuls} of {ops} ops")
    );

    // Every op and collective span links to its op; a click on one whose row was hidden in
    // a closed module opens the module and shows the op's drill-down.
    let linked = spans.iter().filter(|s| s["op"].is_string()).count();
    assert_eq!(num("span_links"), linked as f64, "{m}");
    assert!(linked >= 3 * ops_count(&dir), "{m}");
    assert_eq!(
        m["linked_hidden_before"], true,
        "no span of a hidden op: {m}"
    );
    assert_eq!(m["linked_row_drawn"], true, "{m}");
    assert_eq!(m["linked_drill_drawn"], true, "{m}");
    assert_eq!(m["linked_picked"], true, "{m}");
    // The drill-down: work, the modelled time on every device (a header and one row each),
    // when it ran in sample 0, its transfers.
    let text = m["linked_drill_text"].as_str().expect("drill text");
    for part in ["work", "FLOPs", "sample 0", "from", "to"] {
        assert!(text.contains(part), "drill-down without {part}: {text}");
    }
    assert_eq!(num("linked_costs_rows"), devices + 1.0, "{m}");
    // Zooming in draws the spans inside the middle half twice as wide, hides those
    // outside it, and the whole stream comes back.
    assert!(num("zoom_inside") >= 1.0, "{m}");
    assert!(
        (num("zoom_ratio_min") - 2.0).abs() < 0.02 && (num("zoom_ratio_max") - 2.0).abs() < 0.02,
        "zoom in does not double the widths: {m}"
    );
    assert!(num("zoom_outside") >= 1.0, "{m}");
    assert_eq!(num("zoom_hidden_outside"), num("zoom_outside"), "{m}");
    assert_ne!(m["range_before"], m["range_after"], "{m}");
    assert_eq!(num("zoom_restored"), spans.len() as f64, "{m}");

    // A screenshot, kept for people to look at.
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    fs::create_dir_all(&shots).expect("tmpdir");
    let shot = shots.join("report-gpt2_tiny-mcm-2x2.png");
    let _ = fs::remove_file(&shot);
    headless(
        &chromium,
        &[&format!("--screenshot={}", shot.display())],
        &dir.join("report.html"),
    );
    let png = fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().expect("ihdr"));
    assert_eq!(width, 1400);
    assert!(
        png.len() > 50_000,
        "a blank page compresses to little: {} bytes",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}

/// Compiles GPT-2 tiny for `target` into DIR.
fn compile_gpt2_for(dir: &Path, target: &str) -> String {
    ok(tessera()
        .args(["compile", GPT2, "--input-shape", "input_ids=1x16"])
        .args(["--target", target, "-o"])
        .arg(dir))
}

/// A device's drawn centre from the probe's `positions`.
fn centre(m: &Value, device: &str) -> (f64, f64) {
    let p = &m["positions"][device];
    (
        p[0].as_f64()
            .unwrap_or_else(|| panic!("{device} not drawn: {m}")),
        p[1].as_f64().expect("y"),
    )
}

#[test]
fn topologies_are_drawn_in_their_generators_geometry_in_headless_chromium() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("TESSERA_REQUIRE_CHROMIUM").is_none(),
            "TESSERA_REQUIRE_CHROMIUM is set but chromium is not installed (make deps installs it)"
        );
        eprintln!("chromium is not installed: the report's layout test did not run");
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let probe_of = |target: &str| {
        let dir = tmp.path().join(target);
        compile_gpt2_for(&dir, target);
        let data = json(&dir.join("report.json"));
        (probe(&chromium, &dir.join("report.html"), PROBE), data)
    };

    // A 4x4 mesh is a grid: 4 columns and 4 rows, evenly spaced, members row-major.
    let (m, data) = probe_of("mcm-4x4");
    assert_eq!(data["target"]["layouts"][0]["kind"], "mesh2d");
    assert_eq!(num_of(&m, "devices_overlapping"), 0.0);
    let at: Vec<(f64, f64)> = (0..16).map(|i| centre(&m, &format!("chip{i}"))).collect();
    let distinct = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        v.dedup_by(|a, b| (*a - *b).abs() < 0.5);
        v
    };
    let xs = distinct(at.iter().map(|p| p.0).collect());
    let ys = distinct(at.iter().map(|p| p.1).collect());
    assert_eq!((xs.len(), ys.len()), (4, 4), "not a 4x4 grid: {m}");
    for w in [xs.windows(2), ys.windows(2)] {
        let steps: Vec<f64> = w.map(|p| p[1] - p[0]).collect();
        assert!(
            steps.iter().all(|s| (s - steps[0]).abs() < 0.5),
            "uneven grid: {steps:?}"
        );
    }
    for (i, p) in at.iter().enumerate() {
        assert!(
            (p.0 - xs[i % 4]).abs() < 0.5 && (p.1 - ys[i / 4]).abs() < 0.5,
            "chip{i} at {p:?}"
        );
    }
    // The host is outside the grid.
    let host = centre(&m, "cpu0");
    assert!(host.0 < xs[0], "host {host:?} inside the grid");

    // A ring is a circle, its members in order around it.
    let (m, data) = probe_of("mcm-ring4");
    assert_eq!(data["target"]["layouts"][0]["kind"], "ring");
    let at: Vec<(f64, f64)> = (0..4).map(|i| centre(&m, &format!("chip{i}"))).collect();
    let (cx, cy) = (
        at.iter().map(|p| p.0).sum::<f64>() / 4.0,
        at.iter().map(|p| p.1).sum::<f64>() / 4.0,
    );
    let r: Vec<f64> = at.iter().map(|p| (p.0 - cx).hypot(p.1 - cy)).collect();
    assert!(
        r[0] > 50.0 && r.iter().all(|x| (x - r[0]).abs() < 1.0),
        "not on a circle: {r:?}"
    );
    let angles: Vec<f64> = at.iter().map(|p| (p.1 - cy).atan2(p.0 - cx)).collect();
    for k in 0..4 {
        let mut step = angles[(k + 1) % 4] - angles[k];
        if step < 0.0 {
            step += std::f64::consts::TAU;
        }
        assert!(
            (step - std::f64::consts::FRAC_PI_2).abs() < 0.02,
            "ring order: {angles:?}"
        );
    }
    assert_eq!(num_of(&m, "devices_overlapping"), 0.0);

    // A switch is a star: the switch in the middle of its eight GPUs, all as far from it.
    let (m, data) = probe_of("gpu-8");
    assert_eq!(data["target"]["layouts"][0]["hub"], "nvswitch");
    let hub = centre(&m, "nvswitch");
    let r: Vec<f64> = (0..8)
        .map(|i| {
            let p = centre(&m, &format!("gpu{i}"));
            (p.0 - hub.0).hypot(p.1 - hub.1)
        })
        .collect();
    assert!(
        r[0] > 100.0 && r.iter().all(|x| (x - r[0]).abs() < 1.0),
        "not a star: {r:?}"
    );
    assert_eq!(num_of(&m, "devices_overlapping"), 0.0);
    assert_eq!(
        num_of(&m, "links"),
        data["target"]["links"].as_array().expect("links").len() as f64
    );
}

fn num_of(m: &Value, k: &str) -> f64 {
    m[k].as_f64().unwrap_or_else(|| panic!("{k}: {m}"))
}

/// Measures the compare page.
const COMPARE_PROBE: &str = r#"<script>
(function () {
  function visible(el) { return el.checkVisibility ? el.checkVisibility() : true; }
  function drawn(sel) {
    var n = 0;
    document.querySelectorAll(sel).forEach(function (el) {
      var r = el.getBoundingClientRect(); if (r.width > 0 && r.height > 0 && visible(el)) n++;
    });
    return n;
  }
  var out = {
    summary_rows: drawn('#compare-summary tr'),
    device_rows: drawn('#compare-devices tr'),
    moved_rows: drawn('#compare-ops tr.moved'),
    period: Array.prototype.map.call(
      document.querySelectorAll('#compare-summary tr[data-measure="simulated period"] td'),
      function (td) { return td.textContent; }),
  };
  var pre = document.createElement('pre');
  pre.id = 'tessera-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"#;

#[test]
fn compare_shows_two_compiles_side_by_side() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    compile_gpt2_for(&a, "mcm-2x2");
    compile_gpt2_for(&b, "gpu-8");
    let out = ok(tessera().args(["report", "--compare"]).arg(&a).arg(&b));
    let page_path = b.join("compare.html");
    assert!(out.contains(&page_path.display().to_string()), "{out}");
    let page = fs::read_to_string(&page_path).expect("compare.html");
    // The same input, the same page; and -o writes it elsewhere.
    let elsewhere = tmp.path().join("cmp.html");
    ok(tessera()
        .args(["report", "--compare"])
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&elsewhere));
    assert_eq!(fs::read_to_string(&elsewhere).expect("-o"), page);
    for banned in ["<link", "src=", "@import", "url(", "https://", "<script"] {
        assert!(
            !page.contains(banned),
            "the page refers outside itself: {banned}"
        );
    }
    // The periods of both, from their report.json.
    let (da, db) = (json(&a.join("report.json")), json(&b.join("report.json")));
    let secs = |d: &Value, k: &str| {
        tessera_targets::sim::seconds(d["simulation"][k].as_f64().expect("number"))
    };
    assert!(page.contains(&format!(
        "<tr data-measure=\"simulated period\"><td>simulated period</td><td class=\"num a\">{}</td><td class=\"num b\">{}</td>",
        secs(&da, "period"),
        secs(&db, "period")
    )));
    assert!(page.contains(&secs(&da, "latency")) && page.contains(&secs(&db, "latency")));
    // Every op whose device differs between the two placed graphs is listed, and no other.
    let devices = |dir: &Path| -> std::collections::BTreeMap<String, String> {
        let g = tessera_ir::text::load(&dir.join("placed.tir")).expect("placed");
        let names = tessera_ir::text::value_names(&g);
        g.ops()
            .iter()
            .filter(|&&o| g.op(o).op.name() != "const")
            .map(|&o| {
                let key = match g.op(o).results.first() {
                    Some(v) => format!("%{}", names[v.index()]),
                    None => o.to_string(),
                };
                (key, g.op(o).device.clone().unwrap_or_default())
            })
            .collect()
    };
    let (oa, ob) = (devices(&a), devices(&b));
    let differ = oa
        .keys()
        .chain(ob.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| oa.get(*k) != ob.get(*k))
        .count();
    assert!(differ > 0);
    assert_eq!(page.matches("<tr class=\"moved\"").count(), differ);
    let moved = oa
        .iter()
        .filter(|(k, d)| ob.get(*k).is_some_and(|e| e != *d))
        .count();
    let only = |x: &std::collections::BTreeMap<String, String>,
                y: &std::collections::BTreeMap<String, String>| {
        x.keys().filter(|k| !y.contains_key(*k)).count()
    };
    assert!(moved > 0);
    assert!(page.contains(&format!(
        "<p id=\"compare-ops-count\">{moved} ops on another device in B, {} on the same device, \
         {} only in A, {} only in B",
        oa.len() - moved - only(&oa, &ob),
        only(&oa, &ob),
        only(&ob, &oa)
    )));

    // In the browser: every row is drawn.
    if let Some(chromium) = chromium() {
        let m = probe(&chromium, &page_path, COMPARE_PROBE);
        assert_eq!(num_of(&m, "moved_rows"), differ as f64, "{m}");
        assert_eq!(
            num_of(&m, "summary_rows"),
            10.0,
            "header and nine measures: {m}"
        );
        let devices = da["target"]["devices"].as_array().expect("d").len()
            + db["target"]["devices"].as_array().expect("d").len()
            - 1; // cpu0 is in both
        assert_eq!(num_of(&m, "device_rows"), devices as f64 + 1.0, "{m}");
        assert_eq!(m["period"][1], secs(&da, "period"), "{m}");
    } else {
        assert!(
            std::env::var_os("TESSERA_REQUIRE_CHROMIUM").is_none(),
            "TESSERA_REQUIRE_CHROMIUM is set but chromium is not installed"
        );
    }

    // A folder that is not a compile's output: an error naming it, exit code 1.
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let out = tessera()
        .args(["report", "--compare"])
        .arg(&a)
        .arg(&empty)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&empty.join("report.json").display().to_string())
            && err.contains("tessera compile -o"),
        "{err}"
    );
    assert!(!empty.join("compare.html").exists());
}

/// The numbers of a summary line after `key`, as printed (`3.241 us` -> 3.241e-6).
fn durations(line: &str) -> Vec<f64> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    for w in words.windows(2) {
        let unit = w[1].trim_end_matches([',', ')', ';', ':']);
        let scale = match unit {
            "s" => 1.0,
            "ms" => 1e-3,
            "us" => 1e-6,
            "ns" => 1e-9,
            _ => continue,
        };
        if let Ok(v) = w[0].trim_start_matches('(').parse::<f64>() {
            out.push(v * scale);
        }
    }
    out
}

#[test]
fn the_summary_numbers_check_against_each_other() {
    let tmp = tempfile::tempdir().expect("tmp");
    for target in ["mcm-2x2", "gpu-8"] {
        let dir = tmp.path().join(target);
        // On gpu-8, the plan without splits, measured over a stream of 8 samples: shorter
        // than its steady state needs, so a chain of dependencies across samples paces it
        // (the default stream measures the period of the busiest device).
        let out = if target == "gpu-8" {
            ok(tessera()
                .args(["compile", GPT2, "--input-shape", "input_ids=1x16"])
                .args(["--target", target, "--split", "off", "--samples", "8", "-o"])
                .arg(&dir))
        } else {
            compile_gpt2_for(&dir, target)
        };
        let line = |key: &str| {
            out.lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key} line: {out}"))
        };
        // The placement line: value, bound, then the gap computed from those two.
        let placement = line("placement ");
        assert!(placement.contains("by the placement model"), "{placement}");
        let n = durations(placement);
        let (value, bound) = (n[0], n[1]);
        let gap: f64 = placement
            .split("gap ")
            .nth(1)
            .and_then(|g| g.split('%').next())
            .and_then(|g| g.parse().ok())
            .expect("gap");
        assert!(
            (gap - 100.0 * (value - bound) / value).abs() < 0.1,
            "{placement}"
        );
        assert_eq!(&n[2..5], &[value, bound, value], "{placement}");
        // The throughput is 1 / the period printed beside it.
        let data = json(&dir.join("report.json"));
        let sim = &data["simulation"];
        let period = durations(line("throughput "))[0];
        let p = sim["period"].as_f64().expect("period");
        assert!((period - p).abs() < 1e-3 * p, "{out}");
        // The simulator's floor is the busiest resource's busy time, named as such.
        let busiest = line("busiest ");
        assert!(
            busiest.starts_with(&format!(
                "busiest      {}: busy {} per sample",
                sim["bottleneck"].as_str().expect("name"),
                tessera_targets::sim::seconds(sim["bound_period"].as_f64().expect("busy"))
            )),
            "{busiest}"
        );
        assert!(!out.contains("lower bound") || placement.contains("lower bound"));
        // Transfers per sample: the transfer ops' plus the moves that need none, adding up.
        let t = &sim["transfer_count"];
        let per = t["per_sample"].as_u64().expect("per sample");
        assert_eq!(per, sim["transfers"].as_u64().expect("transfers"));
        let sum: u64 = t["by_reason"]
            .as_array()
            .expect("reasons")
            .iter()
            .map(|r| r[1].as_u64().expect("n"))
            .sum();
        assert_eq!(sum, per);
        let g = tessera_ir::text::load(&dir.join("placed.tir")).expect("placed");
        let transfer_ops = g
            .ops()
            .iter()
            .filter(|&&o| g.op(o).op.name() == "transfer")
            .count();
        assert_eq!(t["ops"].as_u64(), Some(transfer_ops as u64));
        let transfers = line("transfers ");
        assert!(
            transfers.starts_with(&format!("transfers    {per} per sample"))
                && transfers
                    .ends_with(&format!("the placed graph has {transfer_ops} transfer ops")),
            "{transfers}"
        );
        // The period against the busiest resource: equal, or longer with the reason.
        let busy = sim["bound_period"].as_f64().expect("busy");
        match target {
            "mcm-2x2" => {
                assert!(busiest.ends_with("the period equals it"), "{busiest}");
                assert!(sim.get("period_excess").is_none());
            }
            _ => {
                assert!(p > busy * 1.01, "gpu-8's period no longer exceeds: {out}");
                let why = line("why ");
                assert!(
                    why.contains("critical chain") && why.contains("cause: "),
                    "{why}"
                );
                // The chain's time per sample, by lane and by class, adds up to the period.
                let e = &sim["period_excess"];
                let total = |k: &str| -> f64 {
                    e[k].as_array()
                        .expect("shares")
                        .iter()
                        .map(|s| s["seconds"].as_f64().expect("s"))
                        .sum()
                };
                assert!((total("by_lane") - p).abs() < 1e-3 * p, "{e}");
                assert!((total("by_class") - p).abs() < 1e-3 * p, "{e}");
                assert_eq!(e["resource"], sim["bottleneck"]);
                let page = fs::read_to_string(dir.join("report.html")).expect("page");
                assert!(
                    page.contains("<p id=\"period-why\">The period "),
                    "no reason on the page"
                );
                assert!(page.contains("id=\"period-chain\""));
            }
        }
        // The page's gap card is the one computed from the value and bound beside it.
        let page = fs::read_to_string(dir.join("report.html")).expect("page");
        assert!(page.contains(&format!(
            "<div class=\"k\">gap = (value - bound) / value</div><div class=\"v\">{gap:.1}%</div>"
        )));
        assert!(!page.contains("gap to the bound"));
    }
}
