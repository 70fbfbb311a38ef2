//! `tessera import MODEL.onnx [-o OUT.tir] [--input-shape NAME=DIMS ...]`: import an ONNX
//! model, verify it, and print it or save it with its sidecar.

use std::path::Path;

use anyhow::{Context, Result};
use tessera_ir::text;
use tessera_onnx::ImportOptions;

use super::InputShape;

/// Runs `tessera import`.
pub fn run(path: &Path, output: Option<&Path>, shapes: &[InputShape]) -> Result<()> {
    let options = ImportOptions {
        input_shapes: super::shape_map(shapes)?,
        ..ImportOptions::default()
    };
    let graph = super::import_verified(path, &options)?;
    let Some(out) = output else {
        // Standard output has no sidecar: every constant prints its data inline, so the
        // text parses again (`-o` writes large constants to a sidecar).
        return super::print_stdout(&text::print_with_externals(&graph, &|_| false));
    };
    text::save(&graph, out).with_context(|| format!("cannot write {}", out.display()))?;
    let external = graph.consts().any(|(_, c)| {
        c.ty.num_elements()
            .is_none_or(|n| n > text::INLINE_LIMIT as u64)
    });
    let weights = if external {
        format!(", large constants in {}", text::sidecar_path(out).display())
    } else {
        String::new()
    };
    super::print_stdout(&format!(
        "{} -> {}: {} ops, {} constants{weights}\n",
        path.display(),
        out.display(),
        graph.ops().len(),
        graph.num_consts(),
    ))
}
