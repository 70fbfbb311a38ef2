//! tessera's targets: descriptions of devices and interconnects (files and, later, Rust
//! plugins), and later the cost model, the simulator, and the lowering to MLIR.
//!
//! Today: the data model ([`TargetSpec`], [`Device`], [`Link`]) with hop-count routing, the TOML
//! target file format ([`parse_target`], [`load_file`]) with errors naming file, line and
//! field, and the registry of built-in targets and search-path files ([`lookup`],
//! [`list_targets`]). Only this crate will ever link MLIR (through melior); it does not yet.

mod error;
mod file;
mod model;
mod registry;
mod work;

pub use error::TargetError;
pub use file::{load_file, parse_target};
pub use model::{Device, Link, TargetSpec};
pub use registry::{
    BUILTIN_NAMES, TargetEntry, TargetSource, builtin_target, builtin_targets, env_search_path,
    list_targets, lookup,
};
pub use tessera_ir as ir;
pub use work::{Work, WorkError, op_work};
