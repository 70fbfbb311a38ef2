//! tessera's pass manager and passes.
//!
//! A pass is a record ([`PassInfo`]: kebab-case name, summary, typed options) in one
//! [`registry`]; the name is the registry key, the pipeline token, the timing label, the
//! dump-file name and the test folder name, as in MLIR. Pipelines are text
//! (`canonicalize,cse,shape-infer{dims="N=1"}`) that parses into a [`Pipeline`] and prints
//! back canonically. The [`PassManager`] runs a pipeline, verifies after every pass (on by
//! default), times passes, collects [`Statistics`], catches failures and panics with the IR the
//! failed pass started from (a reproducer), and reports every step to an [`Instrumentation`].
//!
//! Passes do no file I/O and print nothing: the command line prints IR, writes dumps and
//! reproducers through the instrumentation hooks.
//!
//! Passes: `bucket-all-reduce` (a data-parallel step's gradients summed in DDP's buckets,
//! [`bucket_all_reduces`]), `canonicalize`, `cse`, `dce`, `grad` (reverse-mode autodiff, [`grad`]),
//! `shape-infer`, `shard-state` (a data-parallel step's optimizer state kept split between
//! steps, ZeRO-1, [`shard_state`]), `train` (a model's training step, [`train`]), `unfuse-split` (a fused
//! projection's split into one projection per piece, [`unfuse_split`]).

mod bucket;
mod canonicalize;
mod cse;
mod dce;
pub mod grad;
mod manager;
mod pass;
mod pipeline;
mod registry;
mod shape_infer;
mod shard_state;
pub mod train;
mod unfuse_split;
mod util;

pub use bucket::{Buckets, DEFAULT_BUCKET_BYTES, bucket_all_reduces};
pub use dce::dce;
pub use manager::{
    Failure, Instrumentation, NoInstrumentation, PassManager, PassRun, PipelineError, Report,
};
pub use pass::{
    OptionInfo, OptionKind, OptionValue, Options, Pass, PassError, PassInfo, Statistics,
};
pub use pipeline::{PassSpec, Pipeline, PipelineParseError};
pub use registry::{RegisterError, closest, lookup, register, registry};
pub use shape_infer::bind_shapes;
pub use shard_state::shard_state;
pub use unfuse_split::unfuse_split;

pub use tessera_ir as ir;
