//! `tessera report DIR`: draws `report.html` again from a compile's output directory.

use std::path::Path;

use anyhow::Result;

use crate::report;

/// Runs `tessera report`.
pub fn run(dir: &Path, output: Option<&Path>) -> Result<()> {
    let path = match output {
        None => report::write_dir(dir)?,
        Some(out) => {
            let page = report::Inputs::load(dir)?.render();
            super::write_atomically(out, page.as_bytes())?;
            out.to_path_buf()
        }
    };
    super::print_stdout(&format!("wrote {}\n", path.display()))
}
