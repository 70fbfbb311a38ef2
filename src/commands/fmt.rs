//! `tessera fmt FILE.tir`: load, verify, print the canonical text.

use std::path::Path;

use anyhow::Result;
use tessera_ir::text;

/// Runs `tessera fmt`.
pub fn run(path: &Path) -> Result<()> {
    let graph = super::load_verified(path)?;
    super::print_stdout(&text::print(&graph))
}
