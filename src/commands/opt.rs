//! `tessera opt`: run a pass pipeline on a model, the `mlir-opt` of tessera.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tessera_ir::{Graph, text};
use tessera_passes::{PassManager, Pipeline};

use crate::instrument::{self, CliInstrumentation, PassFlags};

/// What `tessera opt` was asked to do.
pub struct OptRequest<'a> {
    /// The input model (.tir); ignored with a reproducer.
    pub input: Option<&'a Path>,
    /// The pipeline text.
    pub passes: Option<&'a str>,
    /// Where to write the result (stdout when absent).
    pub output: Option<&'a Path>,
    /// A reproducer to replay instead.
    pub reproducer: Option<&'a Path>,
    /// `--input-shape` bindings.
    pub shapes: &'a [super::InputShape],
    /// Instrumentation flags.
    pub flags: &'a PassFlags,
    /// Also write the result as Graphviz DOT here.
    pub dot: Option<&'a Path>,
}

/// Runs `tessera opt`.
pub fn run(req: &OptRequest<'_>) -> Result<()> {
    let parse = |text: &str| Pipeline::parse(text).with_context(|| format!("--passes `{text}`"));
    let (graph, pipeline, origin): (Graph, Pipeline, PathBuf) = match (req.reproducer, req.input) {
        (Some(r), _) => {
            let graph = super::load_model(r, &[])?;
            let pipeline = parse(&instrument::reproducer_pipeline(r)?)?;
            (graph, pipeline, r.to_path_buf())
        }
        (None, Some(i)) => {
            let Some(p) = req.passes else {
                bail!("--passes PIPELINE is required (or --run-reproducer FILE)")
            };
            let pipeline = parse(p)?;
            // A pipeline that builds a training step imports the model to train (its
            // parameters whole, its dropouts kept), as `compile --train` does.
            let training = pipeline.passes.iter().any(|s| s.info.name == "train");
            (
                super::load_model_for(i, req.shapes, training)?,
                pipeline,
                i.to_path_buf(),
            )
        }
        (None, None) => bail!("give an input file, or --run-reproducer FILE"),
    };
    let (graph, _) = run_pipeline(graph, &pipeline, req.flags, &origin)?;
    if let Some(dot) = req.dot {
        super::write_atomically(dot, text::to_dot(&graph).as_bytes())?;
    }
    match req.output {
        Some(out) => {
            text::save(&graph, out).with_context(|| format!("cannot write {}", out.display()))
        }
        None => super::print_stdout(&text::print(&graph)),
    }
}

/// Runs `pipeline` on `graph` with the command line's instrumentation: prints and dumps as
/// the flags ask, reports timing and statistics, and on failure writes a crash reproducer and
/// returns an error that names the pass and the reproducer.
pub fn run_pipeline(
    mut graph: Graph,
    pipeline: &Pipeline,
    flags: &PassFlags,
    origin: &Path,
) -> Result<(Graph, tessera_passes::Report)> {
    if flags.dump_pass_pipeline {
        eprintln!("// tessera passes: tessera opt --passes='{pipeline}'");
    }
    let mut inst = CliInstrumentation::new(flags, &graph, pipeline.passes.len())?;
    let mut pipeline = pipeline.clone();
    if flags.explain {
        for spec in &mut pipeline.passes {
            spec.options
                .replace("explain", tessera_passes::OptionValue::Bool(true));
        }
    }
    let pm = PassManager::new(pipeline).verify_each(!flags.no_verify_each);
    let result = pm.run(&mut graph, &mut inst);
    inst.finish();
    match result {
        Ok(report) => {
            if flags.timing {
                instrument::print_timing(&report);
            }
            if flags.pass_statistics {
                instrument::print_statistics(&report);
            }
            if flags.explain {
                instrument::print_notes(&report);
            }
            if let Some(e) = inst.dump_error {
                return Err(e);
            }
            Ok((graph, report))
        }
        Err(e) => {
            if let tessera_passes::Failure::Verify(errors) = &e.failure {
                let notes: Vec<_> = errors
                    .iter()
                    .map(|v| (v.entity, v.message.clone()))
                    .collect();
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    text::print_annotated(&graph, &notes).as_bytes(),
                );
            }
            let repro = &flags.crash_reproducer;
            if repro.as_os_str().is_empty() {
                // No reproducer asked for (commands without the instrumentation flags). The
                // pass's error stays in the chain, for callers that read its failure.
                return Err(anyhow::Error::new(e).context(origin.display().to_string()));
            }
            match instrument::write_reproducer(repro, &e.pass, &e.input) {
                Ok(()) => Err(anyhow::anyhow!(
                    "{}: {e}\nreproducer written to {} (replay: tessera opt --run-reproducer {})",
                    origin.display(),
                    repro.display(),
                    repro.display()
                )),
                Err(w) => Err(anyhow::anyhow!(
                    "{}: {e}\n(and the reproducer could not be written: {w:#})",
                    origin.display()
                )),
            }
        }
    }
}
