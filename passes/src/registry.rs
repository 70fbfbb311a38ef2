//! The pass registry: every built-in pass, plus passes a plugin registers at startup, looked up
//! by name.
//!
//! Built-in passes are a static table. An out-of-tree crate that builds its own `tessera`
//! binary (through the driver in the `tessera` crate) calls [`register`] before parsing any
//! pipeline, as out-of-tree MLIR tools register their passes before `MlirOptMain` runs.

use std::sync::RwLock;

use crate::pass::PassInfo;

const BUILTIN: &[PassInfo] = &[
    crate::bucket::INFO,
    crate::canonicalize::INFO,
    crate::cse::INFO,
    crate::dce::INFO,
    crate::grad::INFO,
    crate::shape_infer::INFO,
    crate::shard_state::INFO,
    crate::train::INFO,
    crate::unfuse_split::INFO,
];

/// Passes registered at run time. Each record is leaked once, so lookups hand out `'static`
/// references like the built-in table does.
static REGISTERED: RwLock<Vec<&'static PassInfo>> = RwLock::new(Vec::new());

/// Why [`register`] refused a pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The name is not kebab-case (lowercase ASCII letters and digits separated by single
    /// hyphens, starting with a letter).
    #[error("pass name `{0}` is not kebab-case")]
    BadName(String),
    /// A pass of that name is already registered (built-in or earlier registration).
    #[error("a pass named `{0}` is already registered")]
    Duplicate(String),
}

/// Registers a pass so pipelines, `tessera passes` and the instrumentation flags know it.
pub fn register(info: PassInfo) -> Result<(), RegisterError> {
    if !is_kebab(info.name) {
        return Err(RegisterError::BadName(info.name.to_string()));
    }
    let mut extra = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if BUILTIN.iter().any(|p| p.name == info.name) || extra.iter().any(|p| p.name == info.name) {
        return Err(RegisterError::Duplicate(info.name.to_string()));
    }
    extra.push(Box::leak(Box::new(info)));
    Ok(())
}

fn is_kebab(name: &str) -> bool {
    name.split('-').all(|part| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    }) && name.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Every pass, built-in and registered, sorted by name.
pub fn registry() -> Vec<&'static PassInfo> {
    let extra = REGISTERED.read().unwrap_or_else(|e| e.into_inner());
    let mut all: Vec<&'static PassInfo> = BUILTIN.iter().chain(extra.iter().copied()).collect();
    all.sort_by_key(|p| p.name);
    all
}

/// The pass called `name`.
pub fn lookup(name: &str) -> Option<&'static PassInfo> {
    BUILTIN.iter().find(|p| p.name == name).or_else(|| {
        REGISTERED
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .find(|p| p.name == name)
    })
}

/// The candidate closest to `word` in edit distance, when it is close enough to be a
/// plausible typo (at most a third of the word's length, and at least one edit allowed).
pub fn closest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (strsim::osa_distance(word, c), *c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kebab_names() {
        for ok in ["cse", "shape-infer", "pin-matmuls-2"] {
            assert!(is_kebab(ok), "{ok}");
        }
        for bad in ["", "-cse", "cse-", "Cse", "a--b", "2x", "a_b"] {
            assert!(!is_kebab(bad), "{bad}");
        }
    }
}
