//! The pass instrumentation of the command line, shared by every command that runs passes:
//! IR printing before/after passes, numbered IR dumps, timing and statistics reports, crash
//! reproducers and a progress bar. The flags mirror `mlir-opt`'s.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use tessera_ir::{Graph, text};
use tessera_passes::{Failure, Instrumentation, PassSpec, Report};

/// Instrumentation flags (flattened into every command that runs passes).
#[derive(Debug, Clone, Default, Args)]
pub struct PassFlags {
    /// Print the IR before the named passes (comma-separated pass names: tessera's, or the
    /// MLIR passes of the device pipelines, by argument or by the class name that
    /// --print-ir-after-all shows).
    #[arg(long, value_name = "PASS,...", value_delimiter = ',')]
    pub print_ir_before: Vec<String>,
    /// Print the IR after the named passes (comma-separated pass names: tessera's, or the
    /// MLIR passes of the device pipelines, as for --print-ir-before).
    #[arg(long, value_name = "PASS,...", value_delimiter = ',')]
    pub print_ir_after: Vec<String>,
    /// Print the IR before every pass.
    #[arg(long)]
    pub print_ir_before_all: bool,
    /// Print the IR after every pass.
    #[arg(long)]
    pub print_ir_after_all: bool,
    /// Print the IR after a pass only when it changed the IR (with --print-ir-after or
    /// --print-ir-after-all; alone, after every pass that changed it).
    #[arg(long)]
    pub print_ir_after_change: bool,
    /// Print the IR after a pass that failed, as the pass left it.
    #[arg(long)]
    pub print_ir_after_failure: bool,
    /// Write the input IR and the IR after every pass to numbered files in DIR
    /// (`00-input.tir`, `01-after-canonicalize.tir`, ...), each a valid input of `tessera opt`.
    #[arg(long, value_name = "DIR")]
    pub ir_dump_dir: Option<PathBuf>,
    /// Print a table of wall time per pass and in total.
    #[arg(long)]
    pub timing: bool,
    /// Print the counters every pass reports.
    #[arg(long)]
    pub pass_statistics: bool,
    /// Run the verifier after each pass (the default; the last of --verify-each and
    /// --no-verify-each wins).
    #[arg(long, overrides_with = "no_verify_each")]
    pub verify_each: bool,
    /// Do not run the verifier after each pass.
    #[arg(long, overrides_with = "verify_each")]
    pub no_verify_each: bool,
    /// Where to write the crash reproducer when a pass fails or panics (the IR the pass
    /// started from, and the pipeline); replay it with `tessera opt --run-reproducer FILE`.
    #[arg(
        long,
        value_name = "FILE.tir",
        default_value = "tessera-reproducer.tir"
    )]
    pub crash_reproducer: PathBuf,
    /// Print each pipeline before it runs, to stderr: tessera's passes as the `--passes`
    /// string `tessera opt` takes, and (for `compile`) each device's MLIR pipeline as the
    /// `--pass-pipeline` string `mlir-opt` takes, every option spelled out as MLIR expands it
    /// (mlir-opt's flag of the same name).
    #[arg(long)]
    pub dump_pass_pipeline: bool,
    /// Explain what the passes did: turns on `eqsat`'s `explain` option and prints, after the
    /// pipeline, the chain of rules behind each op it rewrote (to stderr).
    #[arg(long)]
    pub explain: bool,
}

/// The line that starts a reproducer file; the pipeline follows it.
pub const REPRODUCER_HEADER: &str = "// tessera-reproducer: --passes ";

/// Prints and dumps as the flags ask. Errors writing dumps are kept and reported after the
/// pipeline (the pass manager's hooks cannot fail).
pub struct CliInstrumentation<'a> {
    flags: &'a PassFlags,
    before: BTreeSet<String>,
    after: BTreeSet<String>,
    progress: Option<indicatif::ProgressBar>,
    /// The weights file the next IR dump shares when its large constants are all in it.
    dump_weights: PathBuf,
    /// The first error writing a dump.
    pub dump_error: Option<anyhow::Error>,
}

impl<'a> CliInstrumentation<'a> {
    /// Instrumentation for `flags`; shows a progress bar on a terminal once the command has
    /// run for [`SPINNER_AFTER`].
    pub fn new(flags: &'a PassFlags, graph: &Graph, passes: usize) -> Result<Self> {
        let progress = std::io::IsTerminal::is_terminal(&std::io::stderr()).then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(passes as u64),
                indicatif::ProgressDrawTarget::hidden(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} pass {pos}/{len} {msg} [{elapsed}]",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            show_later(&bar);
            bar
        });
        let mut me = CliInstrumentation {
            flags,
            before: flags.print_ir_before.iter().cloned().collect(),
            after: flags.print_ir_after.iter().cloned().collect(),
            progress,
            dump_weights: PathBuf::new(),
            dump_error: None,
        };
        // Names that are not tessera passes may be MLIR passes of the device pipelines
        // (`convert-linalg-to-loops`, or `ConvertLinalgToLoopsPass` as the headers of
        // `--print-ir-after-all` print it): the lowering prints after those.
        let mut mlir: Option<tessera_mlir::Mlir> = None;
        for name in me.before.iter().chain(&me.after) {
            if tessera_passes::lookup(name).is_none()
                && !tessera_mlir::context::is_mlir_pass(
                    mlir.get_or_insert_with(tessera_mlir::Mlir::new),
                    name,
                )
            {
                let names: Vec<&str> = tessera_passes::registry().iter().map(|p| p.name).collect();
                let hint = tessera_passes::closest(name, &names)
                    .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
                anyhow::bail!("--print-ir-before/--print-ir-after: unknown pass `{name}`{hint}");
            }
        }
        if let Some(dir) = &flags.ir_dump_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            dump(dir, "00-input.tir", graph)?;
        }
        if let Some(dir) = &flags.ir_dump_dir {
            me.dump_weights = dir.join("00-input.safetensors");
        }
        Ok(me)
    }

    fn print(&self, header: &str, graph: &Graph) {
        let text = format!(
            "// -----// IR Dump {header} //----- //\n{}\n",
            text::print(graph)
        );
        let write = || {
            let mut err = std::io::stderr().lock();
            err.write_all(text.as_bytes())
        };
        match &self.progress {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
        .ok();
    }

    /// Ends the progress bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.progress {
            bar.finish_and_clear();
        }
    }
}

fn dump(dir: &Path, file: &str, graph: &Graph) -> Result<()> {
    let path = dir.join(file);
    text::save(graph, &path).with_context(|| format!("cannot write the IR dump {}", path.display()))
}

/// Writes `NN-after-NAME.tir` (NN = `index`) into an IR dump folder after a compile step
/// that is not a pass (placement, scheduling, transfer insertion), sharing the previous
/// dump's weights when they hold the graph's large constants.
pub fn dump_after(dir: &Path, index: usize, name: &str, graph: &Graph) -> Result<()> {
    let previous = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().is_some_and(|x| x == "safetensors")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.get(..2))
                    .and_then(|n| n.parse::<usize>().ok())
                    .is_some_and(|k| k < index)
        })
        .max();
    let shared = match previous {
        Some(p) => match std::fs::read_link(&p) {
            Ok(target) => dir.join(target),
            Err(_) => p,
        },
        None => dir.join("00-input.safetensors"),
    };
    dump_sharing(dir, &format!("{index:02}-after-{name}.tir"), graph, &shared).map(|_| ())
}

/// Writes an IR dump whose sidecar is a link to `shared` (an earlier dump's weights) when
/// that holds every large constant of the graph; returns the sidecar the next dump may
/// share: `shared`, or this dump's own when it had to write one.
fn dump_sharing(dir: &Path, file: &str, graph: &Graph, shared: &Path) -> Result<PathBuf> {
    let path = dir.join(file);
    let linked = text::save_sharing(graph, &path, shared)
        .with_context(|| format!("cannot write the IR dump {}", path.display()))?;
    let own = text::sidecar_path(&path);
    Ok(if linked || !own.exists() {
        shared.to_path_buf()
    } else {
        own
    })
}

impl Instrumentation for CliInstrumentation<'_> {
    fn before_pass(&mut self, index: usize, spec: &PassSpec, graph: &Graph) {
        if let Some(bar) = &self.progress {
            bar.set_position(index as u64);
            bar.set_message(spec.info.name);
        }
        if self.flags.print_ir_before_all || self.before.contains(spec.info.name) {
            self.print(&format!("Before {}", spec.info.name), graph);
        }
    }

    fn after_pass(&mut self, index: usize, spec: &PassSpec, graph: &Graph, changed: bool) {
        let name = spec.info.name;
        let (all, only_changes) = (
            self.flags.print_ir_after_all,
            self.flags.print_ir_after_change,
        );
        // `--print-ir-after-change` narrows the selected passes to those that changed the IR;
        // alone it selects every pass.
        let selected = all || self.after.contains(name) || (only_changes && self.after.is_empty());
        if selected && (changed || !only_changes) {
            self.print(&format!("After {name}"), graph);
        }
        if let Some(dir) = &self.flags.ir_dump_dir
            && self.dump_error.is_none()
        {
            let file = format!("{:02}-after-{name}.tir", index + 1);
            match dump_sharing(dir, &file, graph, &self.dump_weights) {
                Ok(next) => self.dump_weights = next,
                Err(e) => self.dump_error = Some(e),
            }
        }
        if let Some(bar) = &self.progress {
            bar.set_position(index as u64 + 1);
        }
    }

    fn after_failure(&mut self, _index: usize, spec: &PassSpec, graph: &Graph, _failure: &Failure) {
        if self.flags.print_ir_after_failure {
            self.print(&format!("After Failure {}", spec.info.name), graph);
        }
    }
}

/// Writes a crash reproducer: the IR the failed pass started from, headed by the pipeline
/// that reproduces the failure (the failed pass alone).
pub fn write_reproducer(path: &Path, pipeline: &str, input: &Graph) -> Result<()> {
    // Save through the text module (atomic, with a sidecar for large constants), then put the
    // header line in front.
    text::save(input, path)
        .with_context(|| format!("cannot write the reproducer {}", path.display()))?;
    let body = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read back {}", path.display()))?;
    let content = format!("{REPRODUCER_HEADER}{pipeline}\n{body}");
    crate::commands::write_atomically(path, content.as_bytes())
}

/// The pipeline of a reproducer file (its first line).
pub fn reproducer_pipeline(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let first = text.lines().next().unwrap_or_default();
    first
        .strip_prefix(REPRODUCER_HEADER)
        .map(|p| p.trim().to_string())
        .with_context(|| {
            format!(
                "{}: not a reproducer (the first line must start with `{REPRODUCER_HEADER}`)",
                path.display()
            )
        })
}

/// Prints the timing report, like `-mlir-timing`.
pub fn print_timing(report: &Report) {
    let total = report.total.as_secs_f64();
    let verify: f64 = report
        .runs
        .iter()
        .map(|r| r.verify_elapsed.as_secs_f64())
        .sum();
    let pct = |t: f64| if total > 0.0 { 100.0 * t / total } else { 0.0 };
    let mut s = String::new();
    s.push_str("===-------------------------------------------------------------------------===\n");
    s.push_str("                         ... Execution time report ...\n");
    s.push_str("===-------------------------------------------------------------------------===\n");
    s.push_str(&format!("  Total Execution Time: {total:.4} seconds\n\n"));
    s.push_str("  ----Wall Time----  ----Name----\n");
    for r in &report.runs {
        let t = r.elapsed.as_secs_f64();
        s.push_str(&format!("  {t:>8.4} ({:>5.1}%)  {}\n", pct(t), r.name));
    }
    s.push_str(&format!(
        "  {verify:>8.4} ({:>5.1}%)  (verifier)\n",
        pct(verify)
    ));
    s.push_str(&format!("  {total:>8.4} ({:>5.1}%)  Total\n", 100.0));
    let _ = std::io::stderr().write_all(s.as_bytes());
}

/// Prints the explanation notes passes recorded (`--explain`).
pub fn print_notes(report: &Report) {
    let mut s = String::new();
    for r in &report.runs {
        if r.stats.notes().is_empty() {
            continue;
        }
        s.push_str(&format!("// {} explained:\n", r.name));
        for n in r.stats.notes() {
            s.push_str(&format!("//   {n}\n"));
        }
    }
    let _ = std::io::stderr().write_all(s.as_bytes());
}

/// Prints every pass's counters, like `-mlir-pass-statistics`.
pub fn print_statistics(report: &Report) {
    let mut s = String::new();
    s.push_str("===-------------------------------------------------------------------------===\n");
    s.push_str("                         ... Pass statistics report ...\n");
    s.push_str("===-------------------------------------------------------------------------===\n");
    for r in &report.runs {
        s.push_str(r.name);
        s.push('\n');
        for (name, doc, n) in r.stats.entries() {
            s.push_str(&format!("  (S) {n:>6} {name} - {doc}\n"));
        }
    }
    let _ = std::io::stderr().write_all(s.as_bytes());
}

/// A spinner naming the stage of a long command (import, placement search, simulation,
/// lowering, MLIR pipelines) on a terminal, shown once the process has run for
/// [`SPINNER_AFTER`]: quick commands print nothing, and on a pipe or in tests it does nothing.
pub struct Stages {
    bar: Option<indicatif::ProgressBar>,
}

/// How long a command runs before its spinner shows.
pub const SPINNER_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// When the process started, as near as the command line can tell: the first use of this
/// module's clock ([`process_start`] is called first thing by `cli::main_named`).
static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Marks the process's start for [`SPINNER_AFTER`] (the first call wins).
pub fn process_start() -> std::time::Instant {
    *START.get_or_init(std::time::Instant::now)
}

/// Draws a hidden bar on stderr once the process has run for [`SPINNER_AFTER`]. A thread
/// does it, so a single long stage that makes no calls still gets its bar; the thread holds
/// only a weak handle and ends with the bar.
fn show_later(bar: &indicatif::ProgressBar) {
    let show_at = process_start() + SPINNER_AFTER;
    let weak = bar.downgrade();
    std::thread::spawn(move || {
        std::thread::sleep(show_at.saturating_duration_since(std::time::Instant::now()));
        if let Some(bar) = weak.upgrade()
            && !bar.is_finished()
        {
            bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
        }
    });
}

impl Stages {
    /// A spinner, drawn on a terminal once the process has run for [`SPINNER_AFTER`].
    pub fn new() -> Stages {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return Stages { bar: None };
        }
        let bar =
            indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::hidden());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        show_later(&bar);
        Stages { bar: Some(bar) }
    }

    /// Shows what is being done now.
    pub fn stage(&self, what: impl Into<String>) {
        if let Some(bar) = &self.bar {
            bar.set_message(what.into());
        }
    }
}

impl Default for Stages {
    fn default() -> Self {
        Stages::new()
    }
}

impl Drop for Stages {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
