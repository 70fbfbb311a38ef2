//! File names for graph outputs: safe on every file system, deterministic, distinct.

use std::collections::BTreeSet;

/// Turns value names into distinct file stems, in order.
///
/// Every character outside `[A-Za-z0-9_.-]` becomes `_`; a leading `.` becomes `_` (no hidden
/// files, no `.` or `..`); an empty name becomes `_`. When a stem is already taken (compared
/// without case, for case-insensitive file systems) the first free `stem_1`, `stem_2`, ... is
/// used instead.
pub fn file_stems<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut taken = BTreeSet::new();
    let mut out = Vec::new();
    for name in names {
        let base = sanitize(name);
        let mut stem = base.clone();
        let mut n = 1usize;
        while taken.contains(&stem.to_lowercase()) {
            stem = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(stem.to_lowercase());
        out.push(stem);
    }
    out
}

/// Replaces every character outside `[A-Za-z0-9_.-]` by `_`, and a leading `.` too.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        s.replace_range(..s.chars().next().map_or(0, char::len_utf8), "_");
        if s.is_empty() {
            s.push('_');
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizes() {
        let cases = [
            ("y", "y"),
            ("logits.0", "logits.0"),
            ("a/b", "a_b"),
            ("a b:c", "a_b_c"),
            ("..", "_."),
            (".hidden", "_hidden"),
            ("", "_"),
            ("ünï", "_n_"),
            ("x-1_Z", "x-1_Z"),
        ];
        for (input, want) in cases {
            assert_eq!(sanitize(input), want, "{input:?}");
        }
    }

    #[test]
    fn disambiguates_in_order() {
        assert_eq!(
            file_stems(["a/b", "a_b", "a:b", "a_b_1", "A_B", "c"]),
            ["a_b", "a_b_1", "a_b_2", "a_b_1_1", "A_B_3", "c"]
        );
    }
}
