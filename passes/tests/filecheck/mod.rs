//! A small FileCheck for pass tests (the subset of LLVM's FileCheck that MLIR tests use).
//!
//! A test file holds cases separated by lines `// -----`. The first line of the file is
//! `// RUN: PIPELINE`. In each case:
//! - `// CHECK: PATTERN` matches a line at or after the previous match;
//! - `// CHECK-NEXT: PATTERN` matches the line right after the previous match;
//! - `// CHECK-NOT: PATTERN` must not match between the previous match and the next one;
//! - `// expected-error: TEXT` says the pipeline fails with an error containing TEXT.
//!
//! A pattern is literal text in which `{{REGEX}}` is a regular expression.

use regex::Regex;

/// One directive.
#[derive(Debug, Clone)]
pub enum Check {
    /// `CHECK`.
    Here(String),
    /// `CHECK-NEXT`.
    Next(String),
    /// `CHECK-NOT`.
    Not(String),
}

/// One case of a test file.
#[derive(Debug, Clone)]
pub struct Case {
    /// 1-based line of the case's first line in the file.
    pub line: usize,
    /// The case's text (the IR input).
    pub input: String,
    /// Checks in order.
    pub checks: Vec<Check>,
    /// Expected error substrings.
    pub errors: Vec<String>,
}

/// Splits a test file into its pipeline and cases.
pub fn parse_test_file(text: &str) -> Result<(String, Vec<Case>), String> {
    let first = text.lines().next().unwrap_or_default();
    let pipeline = first
        .trim()
        .strip_prefix("// RUN:")
        .ok_or("the first line must be `// RUN: PIPELINE`")?
        .trim()
        .to_string();
    let mut cases = Vec::new();
    let mut cur = Case {
        line: 2,
        input: String::new(),
        checks: Vec::new(),
        errors: Vec::new(),
    };
    for (i, line) in text.lines().enumerate().skip(1) {
        let t = line.trim();
        if t == "// -----" {
            cases.push(std::mem::replace(
                &mut cur,
                Case {
                    line: i + 2,
                    input: String::new(),
                    checks: Vec::new(),
                    errors: Vec::new(),
                },
            ));
            continue;
        }
        if let Some(p) = t.strip_prefix("// CHECK-NEXT:") {
            cur.checks.push(Check::Next(p.trim().to_string()));
        } else if let Some(p) = t.strip_prefix("// CHECK-NOT:") {
            cur.checks.push(Check::Not(p.trim().to_string()));
        } else if let Some(p) = t.strip_prefix("// CHECK:") {
            cur.checks.push(Check::Here(p.trim().to_string()));
        } else if let Some(p) = t.strip_prefix("// expected-error:") {
            cur.errors.push(p.trim().to_string());
        } else if t.starts_with("// CHECK") {
            return Err(format!("line {}: unknown directive `{t}`", i + 1));
        }
        cur.input.push_str(line);
        cur.input.push('\n');
    }
    cases.push(cur);
    Ok((pipeline, cases))
}

fn pattern(p: &str) -> Result<Regex, String> {
    let mut re = String::new();
    let mut rest = p;
    while let Some(start) = rest.find("{{") {
        re.push_str(&regex::escape(&rest[..start]));
        let end = rest[start + 2..]
            .find("}}")
            .ok_or_else(|| format!("unclosed `{{{{` in `{p}`"))?;
        re.push('(');
        re.push_str(&rest[start + 2..start + 2 + end]);
        re.push(')');
        rest = &rest[start + 2 + end + 2..];
    }
    re.push_str(&regex::escape(rest));
    Regex::new(&re).map_err(|e| format!("bad pattern `{p}`: {e}"))
}

/// Checks `output` against `checks`; the error says which check failed and shows the output.
pub fn check(output: &str, checks: &[Check]) -> Result<(), String> {
    let lines: Vec<&str> = output.lines().collect();
    // Index of the line after the previous match.
    let mut pos = 0usize;
    let mut pending_not: Vec<(Regex, &str)> = Vec::new();
    let fail = |what: String| Err(format!("{what}\n--- output ---\n{output}--------------"));
    for c in checks {
        match c {
            Check::Not(p) => pending_not.push((pattern(p)?, p)),
            Check::Here(p) | Check::Next(p) => {
                let re = pattern(p)?;
                let found = match c {
                    Check::Next(_) => lines.get(pos).filter(|l| re.is_match(l)).map(|_| pos),
                    _ => (pos..lines.len()).find(|&i| re.is_match(lines[i])),
                };
                let Some(at) = found else {
                    let kind = if matches!(c, Check::Next(_)) {
                        "CHECK-NEXT"
                    } else {
                        "CHECK"
                    };
                    return fail(format!("{kind}: `{p}` not found after output line {pos}"));
                };
                for (nre, np) in &pending_not {
                    if let Some(i) = (pos..at).find(|&i| nre.is_match(lines[i])) {
                        return fail(format!("CHECK-NOT: `{np}` found at output line {}", i + 1));
                    }
                }
                pending_not.clear();
                pos = at + 1;
            }
        }
    }
    for (nre, np) in &pending_not {
        if let Some(i) = (pos..lines.len()).find(|&i| nre.is_match(lines[i])) {
            return fail(format!("CHECK-NOT: `{np}` found at output line {}", i + 1));
        }
    }
    Ok(())
}
