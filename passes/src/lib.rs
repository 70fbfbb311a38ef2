//! tessera's passes and pass manager.
//!
//! This crate will hold the pass manager with its MLIR-style instrumentation and the passes
//! (canonicalization, equality saturation, placement, sharding). Passes take a
//! [`tessera_ir::Graph`], return errors and statistics, and do no file I/O and no printing.
//! It is empty until the pass-manager work lands; it exists now so the workspace has its
//! final shape and the dependency rule (`passes` depends on `ir`, never on MLIR) is fixed.

pub use tessera_ir as ir;
