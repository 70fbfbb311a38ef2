//! `tessera fmt MODEL`: load (or import), verify, print the canonical text.

use std::path::Path;

use anyhow::Result;
use tessera_ir::text;

use super::InputShape;

/// Runs `tessera fmt`.
pub fn run(path: &Path, shapes: &[InputShape]) -> Result<()> {
    let graph = super::load_model(path, shapes)?;
    super::print_stdout(&text::print(&graph))
}
