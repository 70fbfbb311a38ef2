//! The one place the command line calls the IR verifier.
//!
//! Commands call [`verify`] here rather than `tessera_ir::verify::verify` directly, so that the
//! command line has one place to adapt if the verifier's interface changes.

use tessera_ir::{Entity, Graph};

/// One verifier finding: the entity it is about and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The op, value, constant or the graph the finding is about.
    pub entity: Entity,
    /// What is wrong.
    pub message: String,
}

/// Runs the IR verifier on `graph`.
pub fn verify(graph: &Graph) -> Result<(), Vec<Finding>> {
    tessera_ir::verify::verify(graph).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| Finding {
                entity: e.entity,
                message: e.message,
            })
            .collect()
    })
}
