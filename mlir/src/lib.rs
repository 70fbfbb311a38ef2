//! Lowering of tessera's placed IR to MLIR, one module per device, and what runs it: MLIR
//! pipelines in-process (melior), the JIT, LLVM IR, object files, PTX and MPI executables.

pub mod canonical;
pub mod context;
pub mod cuda;
pub mod dealloc;
pub mod gpu;
pub mod jit;

pub use context::{Mlir, PipelineOptions};
pub use jit::{ArgRef, Buffer, Jit};

/// An error of lowering, of MLIR, or of running compiled code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// MLIR rejected something (parse, verify, a pass pipeline, translation).
    #[error("{what}: MLIR {stage} failed:\n{message}")]
    Mlir {
        /// The module (device) or file it is about.
        what: String,
        /// Which stage failed.
        stage: String,
        /// MLIR's diagnostics.
        message: String,
    },
    /// Running compiled code failed.
    #[error("{message}")]
    Run {
        /// What went wrong.
        message: String,
    },
}

pub mod lower;
pub mod manifest;
pub mod pipelines;
pub mod profile;
pub mod run;
pub mod weights;

pub use run::{GpuDevices, OutBuf, Runner};
pub mod mpi;
pub mod native;
pub mod schedule;
