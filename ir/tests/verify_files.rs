//! Verifier negative tests as data: every file in `testdata/verify` is an IR file that parses
//! but does not verify. A line `// expected-error: TEXT` follows the line of the entity the
//! error is about (an op's line, a constant's line, or the `graph` header for inputs and
//! outputs) and TEXT must occur in the error message. The test checks that the verifier
//! reports exactly the expected errors, no more and no fewer, at those entities, and that the
//! same errors appear inline in `print_annotated`'s output.
//!
//! Every file in `testdata/ir` must verify without errors.

use std::path::{Path, PathBuf};

use tessera_ir::text;
use tessera_ir::verify::verify;

fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .{ext} files in {}", dir.display());
    v
}

/// The key of an IR line: `graph` for the header, the text before ` = ` for ops and
/// constants (result names or `const @name`).
fn key(line: &str) -> Option<String> {
    let t = line.trim();
    if t.starts_with("graph ") {
        Some("graph".into())
    } else if t.starts_with("//") || t.is_empty() {
        None
    } else {
        t.split_once(" = ").map(|(k, _)| k.to_string())
    }
}

/// (entity line key, message) for each annotation line starting with `marker`.
fn annotations(text: &str, marker: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut last: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(msg) = t.strip_prefix(marker) {
            let k = last
                .clone()
                .unwrap_or_else(|| panic!("annotation `{t}` follows no IR line"));
            out.push((k, msg.trim().to_string()));
        } else if let Some(k) = key(line) {
            last = Some(k);
        }
    }
    out
}

#[test]
fn invalid_files_report_the_expected_errors() {
    for path in files("testdata/verify", "tir") {
        let src = std::fs::read_to_string(&path).expect("read");
        let graph = text::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let errors =
            verify(&graph).expect_err(&format!("{} verifies, but should not", path.display()));
        let notes: Vec<_> = errors
            .iter()
            .map(|e| (e.entity, e.message.clone()))
            .collect();
        let printed = text::print_annotated(&graph, &notes);
        let mut actual = annotations(&printed, "// error:");
        let expected = annotations(&src, "// expected-error:");
        assert_eq!(
            actual.len(),
            errors.len(),
            "{}: every error is printed inline:\n{printed}",
            path.display()
        );
        for (k, want) in &expected {
            let pos = actual
                .iter()
                .position(|(ak, msg)| ak == k && msg.contains(want.as_str()));
            match pos {
                Some(i) => {
                    actual.remove(i);
                }
                None => panic!(
                    "{}: expected an error at `{k}` containing `{want}`; the verifier said:\n{printed}",
                    path.display()
                ),
            }
        }
        assert!(
            actual.is_empty(),
            "{}: unexpected errors {actual:?}:\n{printed}",
            path.display()
        );
    }
}

#[test]
fn valid_files_verify() {
    for path in files("testdata/ir", "tir") {
        let graph = text::load(&path).unwrap_or_else(|e| panic!("{e}"));
        if let Err(errors) = verify(&graph) {
            let notes: Vec<_> = errors
                .iter()
                .map(|e| (e.entity, e.message.clone()))
                .collect();
            panic!(
                "{} does not verify:\n{}",
                path.display(),
                text::print_annotated(&graph, &notes)
            );
        }
    }
}
