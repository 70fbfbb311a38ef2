//! The subcommands, one file each, and what they share: loading a verified graph and
//! writing to standard output.

pub mod fmt;
pub mod run;

use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use tessera_ir::{Graph, text};

use crate::check;

/// Loads a text IR file and runs the verifier on it.
///
/// On verifier errors the IR is printed to standard error with every error shown at its
/// entity, and the returned error is the one-line summary.
pub fn load_verified(path: &Path) -> Result<Graph> {
    // Say plainly when the file is not there, before the parser gets to it.
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_dir() {
        bail!("cannot read {}: it is a directory", path.display());
    }
    let graph = text::load(path)?;
    if let Err(findings) = check::verify(&graph) {
        let notes: Vec<_> = findings
            .iter()
            .map(|f| (f.entity, f.message.clone()))
            .collect();
        let mut err = io::stderr().lock();
        let _ = err.write_all(text::print_annotated(&graph, &notes).as_bytes());
        let n = findings.len();
        bail!(
            "{}: the verifier found {n} error{} (shown in the IR above)",
            path.display(),
            if n == 1 { "" } else { "s" }
        );
    }
    Ok(graph)
}

/// Writes text to standard output. A closed pipe (`tessera fmt x.tir | head`) ends the
/// output quietly instead of failing.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}
