//! `tessera report DIR`: draws `report.html` again from a compile's output directory;
//! `tessera report --compare DIR_A DIR_B`: two compiles side by side (`compare.html`).

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

/// Runs `tessera report --compare DIR_A DIR_B`.
pub fn compare(a: &Path, b: &Path, output: Option<&Path>) -> Result<()> {
    let ia = report::Inputs::load(a)?;
    let ib = report::Inputs::load(b)?;
    let (na, nb) = (a.display().to_string(), b.display().to_string());
    let page = report::compare::render(
        &report::compare::Side {
            name: &na,
            inputs: &ia,
        },
        &report::compare::Side {
            name: &nb,
            inputs: &ib,
        },
    );
    let out = output.map_or_else(|| b.join("compare.html"), Path::to_path_buf);
    super::write_atomically(&out, page.as_bytes())?;
    super::print_stdout(&format!("wrote {}\n", out.display()))
}
