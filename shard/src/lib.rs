//! tessera's sharding pass (`shard`): SPMD tensor and data parallelism over a device mesh,
//! chosen by the target's cost model.
//!
//! The pass declares a [`Mesh`](tessera_ir::Mesh) of the target's devices, finds regions of
//! the graph that can run split over it, and keeps a region split only when the cost model
//! says it is faster, collectives included. The IR stays in the *global view* of GSPMD and
//! Shardy: every value is the logical full tensor, its [`Sharding`](tessera_ir::Sharding)
//! says how it is laid out, ops that run split carry `device("@grid")`, and the pass inserts
//! the `all-reduce` and `all-gather` ops where layouts meet. The interpreter's results do
//! not change.
//!
//! - [`propagate`]: the sharding rules of each op kind and the region growing that applies
//!   them, one split tensor axis per value (over every mesh axis at once).
//! - [`rewrite`]: a chosen region into annotated, placed ops with their collectives.
//! - [`pass`]: the options, the mesh, the candidates (tensor-parallel regions, data
//!   parallelism, nothing) and their costs.
//!
//! The strategies follow Megatron-LM's tensor parallelism (column-parallel then row-parallel
//! matmuls joined by one all-reduce, in transformer MLPs and attention) and plain data
//! parallelism (the batch axis split, weights replicated).

pub mod pass;
pub mod propagate;
pub mod rewrite;

pub use pass::{INFO, Settings, Strategy, run_shard, set_default_target};

/// Registers the `shard` pass in the pass registry (the `tessera` binary, or a test, does
/// this at startup; the pass lives outside `tessera-passes` because it needs the cost model).
pub fn register() -> Result<(), tessera_passes::RegisterError> {
    if tessera_passes::lookup(INFO.name).is_some() {
        return Ok(());
    }
    tessera_passes::register(INFO)
}
