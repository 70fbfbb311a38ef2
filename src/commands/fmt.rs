//! `tessera fmt MODEL`: load (or import), verify, print the canonical text. Constants whose
//! data a `.tir` model keeps in its sidecar stay `external` (the output goes with that
//! sidecar); every other constant prints its data inline, whatever its size, so the output
//! parses again (`tessera opt MODEL -o FILE.tir` writes large constants to a sidecar).

use std::path::Path;

use anyhow::Result;
use tessera_ir::text;

use super::InputShape;

/// Runs `tessera fmt`.
pub fn run(path: &Path, shapes: &[InputShape]) -> Result<()> {
    let graph = super::load_model(path, shapes)?;
    let sidecar = text::sidecar_path(path);
    // A constant the sidecar holds packed into panels (`compile -o`'s weights) counts.
    let side = if path.extension().is_some_and(|e| e == "tir") && sidecar.exists() {
        Some(text::Sidecar::open(&sidecar)?)
    } else {
        None
    };
    super::print_stdout(&text::print_with_externals(&graph, &|c| {
        text::is_external(c) && side.as_ref().is_some_and(|s| s.gives(&c.name))
    }))
}
