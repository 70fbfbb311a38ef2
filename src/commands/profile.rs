//! `tessera run DIR --profile`: the compiled program measured kernel by kernel on this CPU
//! and set beside the compile's prediction.
//!
//! Every device module of DIR is JIT-compiled with a mark after each kernel call
//! ([`tessera_mlir::profile`]), run to warm up (once, then for 50 ms: a program of microseconds
//! runs steadily only after hundreds of calls) and then `--repeat` times; each kernel
//! call's median time is compared with the modelled seconds of the ops it computes (the
//! compile's `report.json` `op_seconds`), each step's with its ops', and the steps' total
//! with the simulated latency (the runner's work around the steps, copying inputs and
//! handing out outputs, is reported beside it: the model does not cover it). A program of
//! several devices runs here one step after another, every device's code on this CPU, so
//! its total is not the simulated latency's equal (devices overlap there, and transfers and
//! collectives take time no mark measures): compare its kernels and steps. The result is printed and written into DIR/report.json
//! (`measured`), and DIR/report.html is drawn again with it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use tessera_ir::Tensor;
use tessera_mlir::Runner;
use tessera_mlir::profile::{self, RunTimes, Site, SiteKind};

use super::run::{Binding, Execution};
use crate::report::{self, Measured, MeasuredKernel, MeasuredStep};

/// Kernels the printed table lists (the longest); `report.json` has all.
const LISTED: usize = 15;

/// Runs a marked program to warm up ([`super::run::WARM_UP`]), then `runs` times: each timed run's times, and
/// the last run's outputs.
pub fn measure(
    runner: &Runner,
    inputs: &[Tensor],
    sites: &[Site],
    runs: usize,
) -> Result<(Vec<RunTimes>, Vec<Tensor>)> {
    // The warm-up's marks are not recorded; room for every timed call's, so that
    // recording does not allocate.
    profile::pause();
    let (clocks, outputs) = super::run::call_runs(runner, inputs, runs, true, &mut || {
        profile::start(runs.max(1) * (2 * sites.len() + 16));
    })?;
    let marks = profile::take();
    // Each timed call's marks: those between its start and end.
    let mut rest = &marks[..];
    let mut times = Vec::with_capacity(clocks.len());
    for &(start, end) in &clocks {
        let from = rest.partition_point(|&(_, t)| t < start);
        let to = from + rest[from..].partition_point(|&(_, t)| t <= end);
        times.push(profile::charge(sites, &rest[from..to], start, end)?);
        rest = &rest[to..];
    }
    Ok((times, outputs))
}

/// The modelled seconds of `ops` (each `(op, kind)`), `None` where one has none.
fn predict(ops: &[(String, String)], op_seconds: &BTreeMap<String, f64>) -> Option<f64> {
    ops.iter().map(|(op, _)| op_seconds.get(op).copied()).sum()
}

/// What the timed runs measured, site by site and step by step, beside the prediction
/// (`op_seconds`, and `predicted` for the whole run).
pub fn summarize(
    sites: &[Site],
    runs: &[RunTimes],
    op_seconds: &BTreeMap<String, f64>,
    predicted: f64,
    threads: Option<u16>,
) -> Measured {
    let median_of = |f: &dyn Fn(&RunTimes) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        profile::median(&mut v)
    };
    // The median run, for the timeline.
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|&a, &b| runs[a].total.total_cmp(&runs[b].total).then(a.cmp(&b)));
    let mid = order.get(order.len() / 2).map(|&i| &runs[i]);
    let mut kernels = Vec::new();
    let mut seen = vec![false; sites.len()];
    for &(n, start, end) in mid.map_or(&[][..], |r| &r.spans[..]) {
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        let site = &sites[n];
        let kernel = match &site.kind {
            SiteKind::Kernel(k) => k.clone(),
            SiteKind::Exit if !site.ops.is_empty() => String::new(),
            _ => continue,
        };
        kernels.push(MeasuredKernel {
            step: site.step,
            device: site.device.clone(),
            kernel,
            ops: site.ops.iter().map(|(o, k)| format!("{o} {k}")).collect(),
            predicted: predict(&site.ops, op_seconds),
            measured: median_of(&|r| r.charged[n]),
            start,
            end,
        });
    }
    // Steps, in the order their sites come (the modules' in manifest order).
    let mut steps: Vec<(String, usize)> = Vec::new();
    for s in sites {
        let key = (s.device.clone(), s.step);
        if !steps.contains(&key) {
            steps.push(key);
        }
    }
    let steps = steps
        .into_iter()
        .map(|(device, step)| {
            let mine: Vec<usize> = (0..sites.len())
                .filter(|&i| sites[i].device == device && sites[i].step == step)
                .collect();
            let ops: Vec<(String, String)> = mine
                .iter()
                .flat_map(|&i| sites[i].ops.iter().cloned())
                .collect();
            MeasuredStep {
                step,
                device,
                predicted: predict(&ops, op_seconds),
                measured: median_of(&|r| mine.iter().map(|&i| r.charged[i]).sum()),
            }
        })
        .collect();
    // The steps' time: every interval but the runner's (before each step's entry).
    let measured = median_of(&|r| r.charged.iter().sum());
    Measured {
        runs: runs.len(),
        threads,
        predicted,
        measured,
        error: error(predicted, measured),
        run: median_of(&|r| r.total),
        steps,
        kernels,
    }
}

/// `(predicted - measured) / measured`, 0 when nothing was measured.
pub fn error(predicted: f64, measured: f64) -> f64 {
    if measured > 0.0 {
        (predicted - measured) / measured
    } else {
        0.0
    }
}

fn us(s: f64) -> String {
    format!("{:.3}", s * 1e6)
}

fn pct(p: Option<f64>, m: f64) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{:+.1}%", 100.0 * error(p, m)))
}

/// The printed table: the run, each step, the longest kernels.
pub fn table(m: &Measured) -> String {
    let mut t = String::new();
    let predicted = if m.predicted > 0.0 {
        format!(
            "predicted {} us ({:+.1}%)",
            us(m.predicted),
            100.0 * m.error
        )
    } else {
        "nothing predicted".to_string()
    };
    let _ = writeln!(
        t,
        "profile: {} runs after a warm-up; steps {} us (median), {predicted}; median run \
         {} us with the runner's work",
        m.runs,
        us(m.measured),
        us(m.run)
    );
    let _ = writeln!(
        t,
        "{:>6}  {:<12} {:>14} {:>14} {:>9}",
        "step", "device", "predicted us", "measured us", "error"
    );
    for s in &m.steps {
        let _ = writeln!(
            t,
            "{:>6}  {:<12} {:>14} {:>14} {:>9}",
            s.step,
            s.device,
            s.predicted.map_or_else(|| "-".into(), us),
            us(s.measured),
            pct(s.predicted, s.measured)
        );
    }
    let mut longest: Vec<&MeasuredKernel> = m.kernels.iter().collect();
    longest.sort_by(|a, b| b.measured.total_cmp(&a.measured));
    let total: f64 = m.kernels.iter().map(|k| k.measured).sum();
    let _ = writeln!(
        t,
        "{:<28} {:>6} {:>14} {:>14} {:>9} {:>7}  ops",
        if m.kernels.len() > LISTED {
            format!("kernel (longest {LISTED} of {})", m.kernels.len())
        } else {
            "kernel".to_string()
        },
        "step",
        "predicted us",
        "measured us",
        "error",
        "share"
    );
    for k in longest.iter().take(LISTED) {
        let ops: Vec<&str> = k.ops.iter().map(String::as_str).collect();
        let _ = writeln!(
            t,
            "{:<28} {:>6} {:>14} {:>14} {:>9} {:>6.1}%  {}",
            if k.kernel.is_empty() {
                "(step return)"
            } else {
                &k.kernel
            },
            k.step,
            k.predicted.map_or_else(|| "-".into(), us),
            us(k.measured),
            pct(k.predicted, k.measured),
            if total > 0.0 {
                100.0 * k.measured / total
            } else {
                0.0
            },
            ops.join(", ")
        );
    }
    t
}

/// Runs `tessera run DIR --profile`.
pub fn run_dir(
    dir: &Path,
    bindings: &[Binding],
    output_dir: Option<&Path>,
    exec: &Execution<'_>,
) -> Result<()> {
    let (runner, sites) = Runner::load_profiled(dir, 2, exec.gpus)
        .with_context(|| format!("{}: loading the compiled program", dir.display()))?;
    let inputs = super::run::compiled_inputs(&runner, bindings, output_dir)?;
    let (runs, outputs) = measure(&runner, &inputs, &sites, exec.repeat)
        .with_context(|| format!("{}: running", dir.display()))?;
    // The prediction: the compile's report (and the files its page is drawn from), where
    // there is one.
    let data_path = dir.join(report::DATA_FILE);
    let report = if data_path.is_file() {
        Some(report::Inputs::load(dir)?)
    } else {
        None
    };
    let empty = BTreeMap::new();
    let (op_seconds, predicted) = match &report {
        Some(r) => (&r.data.op_seconds, r.data.simulation.latency),
        None => (&empty, 0.0),
    };
    let measured = summarize(&sites, &runs, op_seconds, predicted, exec.threads);
    eprint!("{}", table(&measured));
    match report {
        Some(mut r) => {
            if r.data.op_seconds.is_empty() {
                eprintln!(
                    "note: {} has no op_seconds (compiled by an older tessera): kernels are \
                     not compared with the model",
                    data_path.display()
                );
            }
            r.data.measured = Some(measured);
            super::write_atomically(&data_path, r.data.to_json()?.as_bytes())?;
            let html = dir.join(report::HTML_FILE);
            super::write_atomically(&html, r.render().as_bytes())?;
            eprintln!(
                "profile: wrote {} and {}",
                data_path.display(),
                html.display()
            );
        }
        None => eprintln!(
            "note: no {} in {}: nothing predicted to compare with, nothing written",
            report::DATA_FILE,
            dir.display()
        ),
    }
    super::run::show_compiled_outputs(&runner, output_dir, &outputs)
}
