//! Runs the FileCheck-style test files of the passes other crates register (`shard`,
//! `place`, `schedule`: `testdata/passes/<pass>/`, with the checker of `tessera-passes`'
//! tests), and checks every output: it verifies, and the reference interpreter gives
//! bit-identical outputs before and after on pseudo-random inputs.

#[path = "../passes/tests/filecheck/mod.rs"]
mod filecheck;

#[path = "../shard/tests/common/mod.rs"]
mod common;

use std::path::Path;

use common::{parse_with_data, random_inputs, same_bits};
use filecheck::{check, parse_test_file};
use tessera_ir::{interp, text};
use tessera_passes::{NoInstrumentation, PassManager, Pipeline};

/// Runs one case; returns the printed IR and the pass notes, or the pipeline's error.
fn run_case(pipeline: &Pipeline, input: &str) -> Result<(String, Vec<String>), String> {
    let before = parse_with_data(input).map_err(|e| format!("input does not parse: {e}"))?;
    if let Err(es) = tessera_ir::verify::verify(&before) {
        return Err(format!("input does not verify: {}", es[0]));
    }
    let mut after = before.clone();
    let report = PassManager::new(pipeline.clone())
        .run(&mut after, &mut NoInstrumentation)
        .map_err(|e| e.to_string())?;
    if let Err(es) = tessera_ir::verify::verify(&after) {
        return Err(format!("output does not verify: {}", es[0]));
    }
    let inputs = random_inputs(&before, 7);
    let want = interp::run(&before, &inputs).map_err(|e| format!("before: {e}"))?;
    let got = interp::run(&after, &inputs).map_err(|e| format!("after: {e}"))?;
    if !same_bits(&want, &got) {
        return Err("the interpreter's outputs changed".into());
    }
    let notes = report
        .runs
        .iter()
        .flat_map(|r| r.stats.notes().iter().cloned())
        .collect();
    Ok((text::print(&after), notes))
}

#[test]
fn registered_pass_test_files() {
    tessera_shard::register().expect("shard registers");
    tessera_place::pass::register().expect("place registers");
    let mut files = Vec::new();
    for pass in ["shard", "place", "schedule"] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/passes")
            .join(pass);
        let mut in_dir: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "tir"))
            .collect();
        assert!(!in_dir.is_empty(), "{}", dir.display());
        in_dir.sort();
        files.extend(in_dir);
    }
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
                (Ok((out, notes)), true) => {
                    // Notes are checked too, after the IR, as `// note: ...` lines.
                    let mut text = out;
                    for n in notes {
                        text.push_str(&format!("// note: {n}\n"));
                    }
                    if let Err(e) = check(&text, &case.checks) {
                        failures.push(format!("{at}: {e}\n{text}"));
                    }
                }
                (Ok((out, _)), false) => failures.push(format!(
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
