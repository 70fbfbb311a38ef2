//! tessera's equality saturation pass (`eqsat`), with egg.
//!
//! A region of the graph (a run of ops) becomes an e-graph ([`convert`]) in the language of
//! [`lang`], whose analysis ([`analysis`]) carries every class's types and small constant
//! values. The rules ([`rules`]) grow it, each guarded so that no rewrite changes a type;
//! extraction ([`extract`]) picks the cheapest equivalent by the target's cost model,
//! counting shared subterms once; the pass ([`pass`]) keeps it only when it is cheaper.

pub mod analysis;
pub mod convert;
pub mod extract;
pub mod lang;
pub mod pass;
pub mod rules;

pub use pass::{INFO, NodeCost, Settings, run_eqsat, saturate_and_extract, set_default_target};
pub use tessera_ir as ir;

/// Registers the `eqsat` pass in the pass registry (the `tessera` binary does this at
/// startup; it lives outside `tessera-passes` because it needs the targets' cost model).
pub fn register() -> Result<(), tessera_passes::RegisterError> {
    if tessera_passes::lookup(INFO.name).is_some() {
        return Ok(());
    }
    tessera_passes::register(INFO)
}
