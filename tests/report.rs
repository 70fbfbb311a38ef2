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
    let page = fs::read_to_string(dir.join("report.html")).expect("page");
    let probe = dir.join("probe.html");
    fs::write(&probe, page.replace("</body>", &format!("{PROBE}</body>"))).expect("write");
    let dom = headless(&chromium, &["--dump-dom"], &probe);
    let needle = "<pre id=\"tessera-probe\">";
    let start = dom.find(needle).expect("the probe ran") + needle.len();
    let end = start + dom[start..].find("</pre>").expect("end");
    let m: Value = serde_json::from_str(&dom[start..end]).expect("json");
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
