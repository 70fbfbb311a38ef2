//! The pass registry: every built-in pass, looked up by name.

use crate::pass::PassInfo;

/// Every built-in pass, sorted by name.
pub fn registry() -> &'static [PassInfo] {
    &[
        crate::canonicalize::INFO,
        crate::cse::INFO,
        crate::dce::INFO,
        crate::shape_infer::INFO,
    ]
}

/// The pass called `name`.
pub fn lookup(name: &str) -> Option<&'static PassInfo> {
    registry().iter().find(|p| p.name == name)
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
