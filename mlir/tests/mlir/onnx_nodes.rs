//! The ONNX backend node tests through the compiled path: every case the reference
//! interpreter passes (`testdata/onnx-conformance/expected-pass.txt`) is imported, lowered
//! to MLIR for the `cpu` target, run through the CPU pipeline and the JIT, and compared with
//! the expected outputs, with the interpreter's tolerances.
//!
//! A case that passes in the interpreter must pass here unless
//! `testdata/onnx-conformance/jit-exceptions.txt` lists it with its reason; a listed case
//! that passes fails the test too (the list must stay true). `TESSERA_BLESS=1` rewrites the
//! list from this run. `TESSERA_NODE_FILTER=text` runs only the cases whose name contains
//! `text` and asserts nothing (for working on one op).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use tessera_ir::{Graph, Tensor};
use tessera_mlir::Mlir;
use tessera_mlir::lower::{LowerOptions, lower};

use crate::common::node_suite::{
    Outcome, cache_dir, ensure_cache, op_table, read_manifest, run_all,
};
use crate::common::repo_root;

thread_local! {
    static MLIR: RefCell<Option<Mlir>> = const { RefCell::new(None) };
}

/// Lowers for `cpu`, JIT-compiles, runs.
fn jit(g: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let target = tessera_targets::resolve("cpu", &[]).map_err(|e| e.to_string())?;
    let program = lower(
        g,
        &LowerOptions {
            target: target.spec(),
            model: g.name.clone(),
            donate_state: true,
        },
    )
    .map_err(|e| format!("lower: {}", e.0))?;
    let weights = program.weight_tensors().map_err(|e| e.0)?;
    MLIR.with(|m| {
        let mut m = m.borrow_mut();
        let mlir = m.get_or_insert_with(Mlir::new);
        let runner = tessera_mlir::Runner::new(
            mlir,
            program.manifest.clone(),
            &program.module_map(),
            weights,
            0,
            tessera_mlir::GpuDevices::OnCpu,
        )
        .map_err(|e| format!("mlir: {e}"))?;
        runner.run(inputs).map_err(|e| format!("run: {e}"))
    })
}

fn exceptions_path() -> PathBuf {
    repo_root().join("testdata/onnx-conformance/jit-exceptions.txt")
}

/// `case<TAB>reason` lines.
fn read_exceptions() -> BTreeMap<String, String> {
    std::fs::read_to_string(exceptions_path())
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once('\t') {
            Some((c, r)) => (c.trim().to_string(), r.trim().to_string()),
            None => (l.trim().to_string(), String::new()),
        })
        .collect()
}

fn one_line(m: &str) -> String {
    let mut m = m.replace(['\n', '\t'], " ");
    if m.len() > 200 {
        let mut end = 200;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
        m.push_str("...");
    }
    m
}

#[test]
fn onnx_node_tests_compiled() {
    let dir = cache_dir();
    ensure_cache(&dir);
    let expected = read_manifest(&repo_root().join("testdata/onnx-conformance/expected-pass.txt"));
    let filter = std::env::var("TESSERA_NODE_FILTER")
        .ok()
        .filter(|f| !f.is_empty());
    let cases: Vec<(String, PathBuf)> = expected
        .iter()
        .filter(|n| filter.as_ref().is_none_or(|f| n.contains(f.as_str())))
        .map(|n| (n.clone(), dir.join("node").join(n)))
        .collect();
    let start = Instant::now();
    let results = run_all(&cases, &jit);
    let elapsed = start.elapsed();
    let passed = results
        .iter()
        .filter(|r| r.outcome == Outcome::Passed)
        .count();
    let failed: Vec<_> = results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed)
        .collect();
    println!(
        "ONNX node tests through MLIR and the JIT: {} cases pass in the interpreter; {passed} \
         pass compiled, {} do not ({:.1} s)",
        results.len(),
        failed.len(),
        elapsed.as_secs_f64()
    );
    if !failed.is_empty() {
        println!(
            "\ncases that fail compiled, per op type:\n| op | cases | first case | first reason |\n|---|---|---|---|\n{}",
            op_table(&failed, true)
        );
    }
    if filter.is_some() {
        for r in &failed {
            if let Outcome::Failed(m) | Outcome::Unsupported(m) = &r.outcome {
                println!("{}: {}", r.name, one_line(m));
            }
        }
        return;
    }
    let listed = read_exceptions();
    if std::env::var_os("TESSERA_BLESS").is_some_and(|v| v == "1") {
        let mut text = format!(
            "# ONNX node tests that pass in the interpreter but not compiled (MLIR + JIT), with\n\
             # the reason: {} of {}. mlir/tests/mlir/onnx_nodes.rs checks this list both ways.\n\
             # Regenerate: TESSERA_BLESS=1 cargo test -p tessera-mlir --test mlir onnx_node\n",
            failed.len(),
            results.len()
        );
        for r in &failed {
            if let Outcome::Failed(m) | Outcome::Unsupported(m) = &r.outcome {
                let _ = writeln!(text, "{}\t{}", r.name, one_line(m));
            }
        }
        std::fs::write(exceptions_path(), text).expect("write the exceptions list");
        println!("TESSERA_BLESS=1: wrote {}", exceptions_path().display());
        return;
    }
    let mut problems = String::new();
    for r in &results {
        match (&r.outcome, listed.get(&r.name)) {
            (Outcome::Passed, Some(_)) => {
                let _ = writeln!(
                    problems,
                    "  {}: passes now; remove it from the list",
                    r.name
                );
            }
            (Outcome::Failed(m) | Outcome::Unsupported(m), None) => {
                let _ = writeln!(problems, "  {}: {}", r.name, one_line(m));
            }
            _ => {}
        }
    }
    for name in listed.keys() {
        if !expected.contains(name) {
            let _ = writeln!(
                problems,
                "  {name}: listed, but not a case the interpreter passes"
            );
        }
    }
    assert!(
        problems.is_empty(),
        "the compiled path disagrees with {}:\n{problems}",
        exceptions_path().display()
    );
}
