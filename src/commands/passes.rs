//! `tessera passes`: list every registered pass with its summary and options.

use anyhow::Result;

/// The listing, as `tessera passes` prints it.
pub fn listing() -> String {
    let mut s = String::new();
    for p in tessera_passes::registry() {
        s.push_str(&format!("{:<14}{}\n", p.name, p.summary));
        for o in p.options {
            let default = if o.default.is_empty() {
                "\"\""
            } else {
                o.default
            };
            s.push_str(&format!(
                "    {:<24}{} (default {default})\n",
                format!("{}=<{}>", o.name, o.kind),
                o.doc
            ));
        }
    }
    s
}

/// Runs `tessera passes`.
pub fn run() -> Result<()> {
    super::print_stdout(&listing())
}
