//! The subcommands, one file each, and what they share: loading a verified model (text IR or
//! ONNX), `--input-shape`, and writing to standard output.

pub mod calibrate;
pub mod compile;
pub mod emit;
pub mod fmt;
pub mod import;
pub mod opt;
pub mod outdir;
pub mod passes;
pub mod place;
pub mod plugin;
pub mod profile;
pub mod report;
pub mod run;
pub mod targets;
pub mod train;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result, bail};
use tessera_ir::{Dim, Graph, TensorType, text};
use tessera_onnx::ImportOptions;

/// One `--input-shape NAME=D0xD1x...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputShape {
    /// The graph input's name.
    pub name: String,
    /// Its extents.
    pub dims: Vec<u64>,
}

/// The `--input-shape` options as a map by name; a name given twice is an error.
pub fn shape_map(shapes: &[InputShape]) -> Result<BTreeMap<String, Vec<u64>>> {
    let mut map = BTreeMap::new();
    for s in shapes {
        if map.insert(s.name.clone(), s.dims.clone()).is_some() {
            bail!("--input-shape {} is given twice", s.name);
        }
    }
    Ok(map)
}

/// Loads a model and runs the verifier on it: a `.onnx` file is imported (with `shapes` as
/// static input shapes), anything else is read as text IR (`shapes` then bind its inputs'
/// symbolic dimensions).
///
/// On verifier errors the IR is printed to standard error with every error shown at its
/// entity, and the returned error is the one-line summary.
pub fn load_model(path: &Path, shapes: &[InputShape]) -> Result<Graph> {
    load_model_for(path, shapes, false)
}

/// [`load_model`], for training when `training` (an ONNX model's float initializers stay
/// whole constants: [`ImportOptions::keep_parameters`]).
pub fn load_model_for(path: &Path, shapes: &[InputShape], training: bool) -> Result<Graph> {
    if tessera_onnx::is_onnx_path(path) {
        let options = ImportOptions {
            input_shapes: shape_map(shapes)?,
            keep_parameters: training,
            ..ImportOptions::default()
        };
        return import_verified(path, &options).map_err(|e| {
            let declared = tessera_onnx::model_inputs(path)
                .map(|(_, inputs)| inputs)
                .unwrap_or_default();
            let unbound: Vec<(String, TensorType)> = declared
                .into_iter()
                .filter(|(n, _)| !options.input_shapes.contains_key(n))
                .collect();
            with_unbound_hint(e, &unbound)
        });
    }
    check_readable(path)?;
    // Verify the file as written first: binding shapes infers every type again, which would
    // hide a wrong declared type.
    let mut graph = verified(text::load(path)?, path, "")?;
    if shapes.is_empty() {
        return Ok(graph);
    }
    bind_input_shapes(&mut graph, &shape_map(shapes)?)
        .with_context(|| format!("{}", path.display()))?;
    verified(graph, path, " after --input-shape")
}

/// A model's inputs as the file declares them (before `--input-shape` binds anything):
/// each one's name and type.
pub fn declared_inputs(path: &Path) -> Result<Vec<(String, TensorType)>> {
    check_readable(path)?;
    if tessera_onnx::is_onnx_path(path) {
        return Ok(tessera_onnx::model_inputs(path)?.1);
    }
    let graph = text::load(path)?;
    Ok(graph
        .inputs()
        .iter()
        .map(|&v| {
            let name = graph.value(v).name.clone().unwrap_or_else(|| v.to_string());
            (name, graph.ty(v).clone())
        })
        .collect())
}

/// Adds to a failure the inputs whose extents are still symbolic, when there are any: an
/// unbound dimension is the usual cause of a shape error or an unsized buffer, and the user
/// may not know that `--input-shape` exists.
pub fn with_unbound_hint(e: anyhow::Error, inputs: &[(String, TensorType)]) -> anyhow::Error {
    let unbound: Vec<&(String, TensorType)> = inputs
        .iter()
        .filter(|(_, t)| t.shape.iter().any(|d| !matches!(d, Dim::Static(_))))
        .collect();
    if unbound.is_empty() {
        return e;
    }
    let mut hint = String::from(
        "the model has inputs with symbolic extents, not bound by --input-shape (a shape \
         error may come from them):",
    );
    let mut example = Vec::new();
    for (name, ty) in &unbound {
        hint.push_str(&format!("\n  {name}: {ty}"));
        let dims: Vec<String> = ty
            .shape
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Dim::Static(n) => n.to_string(),
                Dim::Sym(_) if i == 0 => "1".to_string(),
                Dim::Sym(_) => "8".to_string(),
            })
            .collect();
        example.push(format!("--input-shape {name}={}", dims.join("x")));
    }
    hint.push_str(&format!(
        "\nbind every one, for example: {}",
        example.join(" ")
    ));
    anyhow::anyhow!("{e:#}\n{hint}")
}

/// Imports an ONNX model (whatever its extension) and runs the verifier on the result.
pub fn import_verified(path: &Path, options: &ImportOptions) -> Result<Graph> {
    check_readable(path)?;
    // With the external data file exporters write next to the model (`model.onnx.data`).
    let len = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut data = path.as_os_str().to_owned();
    data.push(".data");
    let size = len(path) + len(Path::new(&data));
    let stages = crate::instrument::Stages::new();
    stages.stage(format!(
        "importing {} ({})",
        path.display(),
        tessera_targets::sim::bytes(size)
    ));
    let graph = tessera_onnx::import_file(path, options)?;
    stages.stage(format!(
        "verifying the imported graph ({} ops)",
        graph.ops().len()
    ));
    verified(graph, path, " in the imported graph (an importer bug)")
}

/// Says plainly when the file is not there, before the parser or importer gets to it.
pub(crate) fn check_readable(path: &Path) -> Result<()> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.is_dir() {
        bail!("cannot read {}: it is a directory", path.display());
    }
    Ok(())
}

fn verified(graph: Graph, path: &Path, what: &str) -> Result<Graph> {
    if let Err(findings) = tessera_ir::verify::verify(&graph) {
        let notes: Vec<_> = findings
            .iter()
            .map(|f| (f.entity, f.message.clone()))
            .collect();
        let mut err = io::stderr().lock();
        let _ = err.write_all(text::print_annotated(&graph, &notes).as_bytes());
        let n = findings.len();
        bail!(
            "{}: the verifier found {n} error{}{what} (shown in the IR above)",
            path.display(),
            if n == 1 { "" } else { "s" }
        );
    }
    Ok(graph)
}

/// Binds `--input-shape` extents on a text IR graph: every symbol in the named inputs'
/// shapes takes the given extent throughout the graph and every type is inferred again (the
/// `shape-infer` pass).
pub fn bind_input_shapes(graph: &mut Graph, shapes: &BTreeMap<String, Vec<u64>>) -> Result<()> {
    let shapes: Vec<(String, Vec<u64>)> =
        shapes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    tessera_passes::bind_shapes(
        graph,
        &shapes,
        &[],
        &mut tessera_passes::Statistics::default(),
    )
    .map_err(|m| anyhow::anyhow!("--input-shape {m}"))?;
    Ok(())
}

/// Writes text to standard output. A closed pipe (`tessera fmt x.tir | head`) ends the
/// output quietly instead of failing.
pub fn print_stdout(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to standard output")
        }
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` atomically (see [`tessera_ir::text::write_atomically`]).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    text::write_atomically(path, |f| f.write_all(bytes))
        .with_context(|| format!("cannot write {}", path.display()))
}
