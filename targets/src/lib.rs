//! tessera's targets: descriptions of devices and interconnects (files and Rust plugins),
//! the cost model, the simulator, and the lowering to MLIR.
//!
//! Empty until the targets work lands; only this crate will ever link MLIR (through melior).

pub use tessera_ir as ir;
