//! Runs every FileCheck-style test file under `testdata/passes/<pass>/`, and tests the
//! checker itself (a wrong CHECK line must fail).

mod filecheck;

use std::path::{Path, PathBuf};

use filecheck::{Check, check, parse_test_file};
use tessera_ir::text;
use tessera_passes::{NoInstrumentation, PassManager, Pipeline, registry};

fn test_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/passes");
    let mut files = Vec::new();
    for dir in std::fs::read_dir(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display())) {
        let dir = dir.expect("dir entry").path();
        // Passes registered by other crates run their folders in the binary's
        // `tests/registered_pass_files.rs`.
        if dir
            .file_name()
            .is_some_and(|n| n == "shard" || n == "place" || n == "schedule")
        {
            continue;
        }
        for f in std::fs::read_dir(&dir).expect("pass folder") {
            let f = f.expect("dir entry").path();
            if f.extension().is_some_and(|e| e == "tir") {
                files.push(f);
            }
        }
    }
    files.sort();
    files
}

/// Runs one case; returns the printed IR or the pipeline's error.
fn run_case(pipeline: &Pipeline, input: &str) -> Result<String, String> {
    let mut graph = text::parse(input, None).map_err(|e| format!("input does not parse: {e}"))?;
    if let Err(es) = tessera_ir::verify::verify(&graph) {
        return Err(format!("input does not verify: {}", es[0]));
    }
    PassManager::new(pipeline.clone())
        .run(&mut graph, &mut NoInstrumentation)
        .map_err(|e| e.to_string())?;
    Ok(text::print(&graph))
}

#[test]
fn pass_test_files() {
    let files = test_files();
    let mut failures = Vec::new();
    for path in &files {
        let src = std::fs::read_to_string(path).expect("read test file");
        let (pipeline, cases) =
            parse_test_file(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let pipeline =
            Pipeline::parse(&pipeline).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for case in cases {
            let at = format!("{}:{}", path.display(), case.line);
            match (run_case(&pipeline, &case.input), case.errors.is_empty()) {
                (Ok(out), true) => {
                    if let Err(e) = check(&out, &case.checks) {
                        failures.push(format!("{at}: {e}"));
                    }
                }
                (Ok(out), false) => failures.push(format!(
                    "{at}: expected an error, the pipeline succeeded:\n{out}"
                )),
                (Err(e), true) => failures.push(format!("{at}: {e}")),
                (Err(e), false) => {
                    for want in &case.errors {
                        if !e.contains(want.as_str()) {
                            failures.push(format!(
                                "{at}: expected an error containing `{want}`, got: {e}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_pass_has_a_test_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/passes");
    for p in registry() {
        assert!(
            root.join(p.name).is_dir(),
            "pass `{}` has no folder testdata/passes/{}",
            p.name,
            p.name
        );
    }
}

#[test]
fn the_checker_rejects_wrong_checks() {
    let out = "graph @g(%x: f32[2]) {\n  %y = relu %x : f32[2]\n  return %y\n}\n";
    let ok = [
        Check::Here("relu %x".into()),
        Check::Next("return %y".into()),
    ];
    assert_eq!(check(out, &ok), Ok(()));
    let cases: Vec<(Vec<Check>, &str)> = vec![
        (
            vec![Check::Here("sigmoid %x".into())],
            "CHECK: `sigmoid %x` not found",
        ),
        (
            vec![Check::Here("graph".into()), Check::Next("return".into())],
            "CHECK-NEXT: `return` not found",
        ),
        (
            vec![Check::Not("relu".into()), Check::Here("return".into())],
            "CHECK-NOT: `relu` found at output line 2",
        ),
        (
            vec![Check::Here("return".into()), Check::Here("relu".into())],
            "CHECK: `relu` not found after output line 3",
        ),
        (
            vec![Check::Here("%y = {{[a-z]+}} %x : f32[3]".into())],
            "not found",
        ),
    ];
    for (checks, want) in cases {
        let err = check(out, &checks).expect_err("a wrong check must fail");
        assert!(err.contains(want), "`{want}` not in:\n{err}");
    }
    assert_eq!(
        check(out, &[Check::Here("%y = {{[a-z]+}} %x : f32[2]".into())]),
        Ok(())
    );
}

#[test]
fn the_test_file_parser_splits_cases() {
    let src = "// RUN: dce\ngraph @a() {}\n// CHECK: x\n// -----\n// expected-error: boom\n";
    let (p, cases) = parse_test_file(src).expect("parses");
    assert_eq!(p, "dce");
    assert_eq!(cases.len(), 2);
    assert_eq!(cases[1].line, 5);
    assert_eq!(cases[1].errors, vec!["boom".to_string()]);
    assert!(parse_test_file("graph @a() {}").is_err());
    assert!(parse_test_file("// RUN: dce\n// CHECK-NEXTT: x\n").is_err());
}
