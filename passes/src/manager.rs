//! The pass manager: runs a pipeline, verifies after each pass, times passes, collects
//! statistics, and tells an [`Instrumentation`] what happens so the caller can print IR,
//! write dumps and reproducers (the pass manager itself does no I/O).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use tessera_ir::Graph;
use tessera_ir::verify::{VerifyError, verify};

use crate::pass::{PassError, Statistics};
use crate::pipeline::{PassSpec, Pipeline};

/// Hooks called around every pass, like MLIR's `PassInstrumentation`. All default to doing
/// nothing.
pub trait Instrumentation {
    /// Before pass number `index` (0-based) runs on `graph`.
    fn before_pass(&mut self, _index: usize, _spec: &PassSpec, _graph: &Graph) {}
    /// After pass `index` succeeded (and verified, when verification is on).
    fn after_pass(&mut self, _index: usize, _spec: &PassSpec, _graph: &Graph, _changed: bool) {}
    /// After pass `index` failed; `graph` is the IR as the failed pass left it.
    fn after_failure(
        &mut self,
        _index: usize,
        _spec: &PassSpec,
        _graph: &Graph,
        _failure: &Failure,
    ) {
    }
}

/// No instrumentation.
pub struct NoInstrumentation;

impl Instrumentation for NoInstrumentation {}

/// How a pass failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The pass returned an error.
    Error(PassError),
    /// The pass panicked (a bug in the pass); the panic message.
    Panic(String),
    /// The pass produced IR that does not verify.
    Verify(Vec<VerifyError>),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Error(e) => write!(f, "{e}"),
            Failure::Panic(m) => write!(f, "the pass panicked: {m}"),
            Failure::Verify(es) => {
                write!(
                    f,
                    "the IR does not verify after the pass ({} error(s))",
                    es.len()
                )?;
                for e in es.iter().take(3) {
                    write!(f, "\n  {e}")?;
                }
                Ok(())
            }
        }
    }
}

/// A pipeline failed at one pass.
#[derive(Debug, Clone, thiserror::Error)]
#[error("pass `{pass}` (#{}) failed: {failure}", .index + 1)]
pub struct PipelineError {
    /// 0-based position of the failed pass.
    pub index: usize,
    /// The failed pass, as pipeline text with its options.
    pub pass: String,
    /// What happened.
    pub failure: Failure,
    /// The IR the failed pass started from: with the pass, a complete reproducer.
    pub input: Box<Graph>,
}

/// What one pass run did.
#[derive(Debug, Clone)]
pub struct PassRun {
    /// The pass name.
    pub name: &'static str,
    /// Whether it changed the IR.
    pub changed: bool,
    /// Wall time of the pass itself (verification excluded).
    pub elapsed: Duration,
    /// Wall time of the verification after it.
    pub verify_elapsed: Duration,
    /// Its counters.
    pub stats: Statistics,
}

/// What a whole pipeline run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One entry per pass, in order.
    pub runs: Vec<PassRun>,
    /// Wall time of the whole run.
    pub total: Duration,
}

/// Runs pipelines.
#[derive(Clone, Debug)]
pub struct PassManager {
    pipeline: Pipeline,
    verify_each: bool,
}

impl PassManager {
    /// A manager for `pipeline`, verifying after each pass.
    pub fn new(pipeline: Pipeline) -> Self {
        PassManager {
            pipeline,
            verify_each: true,
        }
    }

    /// Turns verification after each pass on or off (on by default).
    pub fn verify_each(mut self, on: bool) -> Self {
        self.verify_each = on;
        self
    }

    /// The pipeline.
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Runs the pipeline on `graph`. On failure `graph` holds the IR the failed pass left
    /// and the error holds the IR it started from.
    pub fn run(
        &self,
        graph: &mut Graph,
        inst: &mut dyn Instrumentation,
    ) -> Result<Report, PipelineError> {
        let start = Instant::now();
        let mut report = Report::default();
        for (index, spec) in self.pipeline.passes.iter().enumerate() {
            inst.before_pass(index, spec, graph);
            let input = graph.clone();
            let mut stats = Statistics::default();
            let t = Instant::now();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut pass = (spec.info.create)(&spec.options)?;
                pass.run(graph, &mut stats)
            }));
            let elapsed = t.elapsed();
            let result = match outcome {
                Ok(Ok(changed)) => Ok(changed),
                Ok(Err(e)) => Err(Failure::Error(e)),
                Err(payload) => Err(Failure::Panic(panic_message(payload.as_ref()))),
            };
            let t = Instant::now();
            let result = result.and_then(|changed| match self.verify_each {
                true => verify(graph).map(|()| changed).map_err(Failure::Verify),
                false => Ok(changed),
            });
            let verify_elapsed = t.elapsed();
            match result {
                Ok(changed) => {
                    inst.after_pass(index, spec, graph, changed);
                    report.runs.push(PassRun {
                        name: spec.info.name,
                        changed,
                        elapsed,
                        verify_elapsed,
                        stats,
                    });
                }
                Err(failure) => {
                    inst.after_failure(index, spec, graph, &failure);
                    return Err(PipelineError {
                        index,
                        pass: spec.to_string(),
                        failure,
                        input: Box::new(input),
                    });
                }
            }
        }
        report.total = start.elapsed();
        Ok(report)
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}
