//! Makes a pipeline's output independent of the run that made it.
//!
//! Two things in MLIR 22's upstream pipelines differ from run to run on the same input:
//! - one-shot module bufferization visits functions in an order taken from a pointer-keyed
//!   map, and names the globals it makes for tensor constants in that order
//!   (`@__constant_xf32`, `@__constant_xf32_0`, ...), so the same constant gets another name
//!   and another place among the globals;
//! - serializing a GPU module records how long it took (`LLVMIRToISATimeInMs = 3 : i64` in the
//!   `gpu.object`'s properties).
//!
//! [`canonical_text`] renames the constant globals by their first use in the module's text
//! (functions are in a fixed order, so the first use is), sorts each run of their
//! declarations to match, and drops the timing property. The set of globals (one per
//! distinct value and type) is the same in every run; only names and order change.

use std::collections::{BTreeMap, HashMap};

/// The prefix of the globals bufferization makes for tensor constants.
pub const CONSTANT_PREFIX: &str = "__constant_";

/// The `gpu.object` property that records serialization time.
const TIMING_PROPERTY: &str = "LLVMIRToISATimeInMs = ";

/// The module text with constant globals named and ordered by first use and without
/// serialization timings; `None` when there is nothing to change.
pub fn canonical_text(text: &str) -> Option<String> {
    let has_constants = text.contains(&format!("@{CONSTANT_PREFIX}"));
    let has_timing = text.contains(TIMING_PROPERTY);
    if !has_constants && !has_timing {
        return None;
    }
    let text = if has_timing {
        drop_timing(text)
    } else {
        text.to_string()
    };
    if !has_constants {
        return Some(text);
    }
    let lines: Vec<&str> = text.split('\n').collect();
    // The declaration line of each global.
    let decl: Vec<Option<&str>> = lines.iter().map(|l| declared(l)).collect();
    let declared_names: HashMap<&str, usize> = decl
        .iter()
        .enumerate()
        .filter_map(|(i, d)| d.map(|n| (n, i)))
        .collect();
    // Names in order of their first use outside declarations, then unused ones by their
    // declaration's text (which holds the value, so it is the same in every run).
    let mut order: Vec<&str> = Vec::new();
    let mut rank: HashMap<&str, usize> = HashMap::new();
    for (i, line) in lines.iter().enumerate() {
        if decl[i].is_some() {
            continue;
        }
        for name in symbols(line) {
            if declared_names.contains_key(name) && !rank.contains_key(name) {
                rank.insert(name, order.len());
                order.push(name);
            }
        }
    }
    let mut unused: Vec<&str> = declared_names
        .keys()
        .copied()
        .filter(|n| !rank.contains_key(n))
        .collect();
    unused.sort_by_key(|n| (lines[declared_names[n]].replace(n, ""), *n));
    for n in unused {
        rank.insert(n, order.len());
        order.push(n);
    }
    // New names: the type part of the old one, uniqued by first use.
    let mut next: BTreeMap<&str, usize> = BTreeMap::new();
    let mut renamed: HashMap<&str, String> = HashMap::new();
    for n in &order {
        let base = base_name(n);
        let k = next.entry(base).or_insert(0);
        let name = if *k == 0 {
            base.to_string()
        } else {
            format!("{base}_{}", *k - 1)
        };
        *k += 1;
        renamed.insert(n, name);
    }
    // Each run of declaration lines, sorted by rank.
    let mut out_lines: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if decl[i].is_none() {
            out_lines.push(lines[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && decl[i].is_some() {
            i += 1;
        }
        let mut run: Vec<usize> = (start..i).collect();
        run.sort_by_key(|&j| decl[j].map(|n| rank[n]));
        out_lines.extend(run.into_iter().map(|j| lines[j]));
    }
    Some(rename(&out_lines.join("\n"), &renamed))
}

/// Removes every `LLVMIRToISATimeInMs = N : i64` entry from property dictionaries.
fn drop_timing(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(TIMING_PROPERTY) {
        let after = &rest[at + TIMING_PROPERTY.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let tail = &after[digits..];
        match tail.strip_prefix(" : i64") {
            Some(t) if digits > 0 => {
                let t = t.strip_prefix(", ").unwrap_or(t);
                out.push_str(&rest[..at]);
                rest = t;
            }
            _ => {
                out.push_str(&rest[..at + TIMING_PROPERTY.len()]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The global a line declares (`memref.global` or `llvm.mlir.global`), when it is one of
/// bufferization's constants.
fn declared(line: &str) -> Option<&str> {
    let t = line.trim_start();
    if !(t.starts_with("memref.global ") || t.starts_with("llvm.mlir.global ")) {
        return None;
    }
    symbols(t).next()
}

/// The next constant-global symbol in `text`: where its name starts (after the `@`), and
/// the name.
fn next_symbol(text: &str) -> Option<(usize, &str)> {
    let start = text.find(&format!("@{CONSTANT_PREFIX}"))? + 1;
    let len = text[start..]
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    Some((start, &text[start..start + len]))
}

/// The constant-global symbols a line refers to, in order.
fn symbols(line: &str) -> impl Iterator<Item = &str> {
    let mut rest = line;
    std::iter::from_fn(move || {
        let (start, name) = next_symbol(rest)?;
        rest = &rest[start + name.len()..];
        Some(name)
    })
}

/// `__constant_64xf32` of `__constant_64xf32_3`: the name without bufferization's
/// uniquing suffix (the part after the element type).
fn base_name(name: &str) -> &str {
    // The element type ends in letters and digits (`f32`, `i1`, `bf16`); a uniquing suffix
    // is `_` and digits after it.
    match name.rfind('_') {
        Some(at)
            if at + 1 < name.len()
                && name[at + 1..].bytes().all(|b| b.is_ascii_digit())
                && at > CONSTANT_PREFIX.len() =>
        {
            &name[..at]
        }
        _ => name,
    }
}

/// Replaces every `@old` symbol by `@new`.
fn rename(text: &str, renamed: &HashMap<&str, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some((start, name)) = next_symbol(rest) {
        out.push_str(&rest[..start]);
        out.push_str(renamed.get(name).map_or(name, String::as_str));
        rest = &rest[start + name.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_named_and_ordered_by_first_use() {
        let a = "module {\n  memref.global \"private\" constant @__constant_xf32_0 : memref<f32> = dense<2.0>\n  memref.global \"private\" constant @__constant_xf32 : memref<f32> = dense<1.0>\n  memref.global \"private\" constant @__constant_4xf32 : memref<4xf32> = dense<0.0>\n  func.func @step0() {\n    %0 = memref.get_global @__constant_xf32 : memref<f32>\n    %1 = memref.get_global @__constant_4xf32 : memref<4xf32>\n    %2 = memref.get_global @__constant_xf32_0 : memref<f32>\n  }\n}";
        // The same module from another run: names and order swapped.
        let b = "module {\n  memref.global \"private\" constant @__constant_4xf32 : memref<4xf32> = dense<0.0>\n  memref.global \"private\" constant @__constant_xf32 : memref<f32> = dense<2.0>\n  memref.global \"private\" constant @__constant_xf32_0 : memref<f32> = dense<1.0>\n  func.func @step0() {\n    %0 = memref.get_global @__constant_xf32_0 : memref<f32>\n    %1 = memref.get_global @__constant_4xf32 : memref<4xf32>\n    %2 = memref.get_global @__constant_xf32 : memref<f32>\n  }\n}";
        let ca = canonical_text(a).expect("changed");
        assert_eq!(Some(ca.clone()), canonical_text(b));
        assert_eq!(
            ca,
            "module {\n  memref.global \"private\" constant @__constant_xf32 : memref<f32> = dense<1.0>\n  memref.global \"private\" constant @__constant_4xf32 : memref<4xf32> = dense<0.0>\n  memref.global \"private\" constant @__constant_xf32_0 : memref<f32> = dense<2.0>\n  func.func @step0() {\n    %0 = memref.get_global @__constant_xf32 : memref<f32>\n    %1 = memref.get_global @__constant_4xf32 : memref<4xf32>\n    %2 = memref.get_global @__constant_xf32_0 : memref<f32>\n  }\n}"
        );
    }

    #[test]
    fn serialization_time_is_dropped() {
        let t = "gpu.binary @k [#gpu.object<#nvvm.target, properties = {LLVMIRToISATimeInMs = 5 : i64, O = 2 : i32}, assembly = \"x\">]";
        assert_eq!(
            canonical_text(t).as_deref(),
            Some(
                "gpu.binary @k [#gpu.object<#nvvm.target, properties = {O = 2 : i32}, assembly = \"x\">]"
            )
        );
        assert_eq!(canonical_text("func.func @f()"), None);
    }

    #[test]
    fn base_names_drop_only_the_uniquing_suffix() {
        assert_eq!(base_name("__constant_64xf32_3"), "__constant_64xf32");
        assert_eq!(base_name("__constant_64xf32"), "__constant_64xf32");
        assert_eq!(base_name("__constant_2x3xbf16_10"), "__constant_2x3xbf16");
    }
}
