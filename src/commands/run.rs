//! `tessera run FILE.tir --input NAME=FILE.npy ... [--output-dir DIR]`: run a graph on `.npy`
//! inputs with the reference interpreter; `tessera run DIR` runs what `tessera compile -o DIR`
//! wrote, and `tessera run MODEL --target T` compiles for `T` first: both JIT-compile the
//! per-device MLIR modules on this CPU and run their steps in the manifest's order.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use tessera_ir::{Dim, Graph, Tensor, ValueId, interp};

use super::InputShape;
use crate::{names, npy, summary};

/// One `--input NAME=FILE.npy`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The graph input's name (or `#position` for an unnamed input).
    pub name: String,
    /// The `.npy` file.
    pub file: PathBuf,
}

/// How `tessera run` executes.
pub struct Execution<'a> {
    /// Compile for this target and run the compiled program (JIT) instead of interpreting.
    pub target: Option<&'a str>,
    /// `--target-path` directories.
    pub target_path: &'a [PathBuf],
    /// Run this many times and report the median time.
    pub repeat: usize,
    /// Measure each kernel and step of a compiled directory (`--profile`).
    pub profile: bool,
    /// `--threads`, where given (recorded with a profile).
    pub threads: Option<u16>,
    /// Where the NVIDIA GPU devices run (`--gpu`: on this machine's GPUs).
    pub gpus: tessera_mlir::GpuDevices,
}

/// Runs `tessera run`.
pub fn run(
    path: &Path,
    bindings: &[Binding],
    output_dir: Option<&Path>,
    shapes: &[InputShape],
    exec: &Execution<'_>,
) -> Result<()> {
    if path.is_dir() {
        if exec.target.is_some() {
            bail!(
                "{}: a compiled directory was compiled for its own target; drop --target",
                path.display()
            );
        }
        if exec.profile {
            return super::profile::run_dir(path, bindings, output_dir, exec);
        }
        return run_compiled(path, bindings, output_dir, exec);
    }
    if exec.profile {
        bail!(
            "{}: --profile measures a compiled directory: compile it with `tessera compile {} \
             -o DIR`, then run `tessera run DIR --profile`",
            path.display(),
            path.display()
        );
    }
    let (graph, inputs) = if tessera_onnx::is_onnx_path(path) {
        prepare_onnx(path, bindings, shapes)?
    } else {
        let graph = super::load_model(path, shapes)?;
        let files = match_inputs(&graph, bindings)?;
        let inputs = read_inputs(&graph, &files)?;
        (graph, inputs)
    };
    if let Some(dir) = output_dir {
        // Fail before running, not after, when the outputs cannot be written.
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create output directory {}", dir.display()))?;
    }
    if let Some(target) = exec.target {
        return run_model_jit(path, graph, &inputs, target, output_dir, exec);
    }

    let outputs = interp::run(&graph, &inputs).map_err(|e| {
        let at =
            e.op.filter(|op| op.index() < graph.num_op_handles())
                .map(|op| {
                    let data = graph.op(op);
                    let results: Vec<String> = data
                        .results
                        .iter()
                        .map(|&r| format!("%{}", value_label(&graph, r)))
                        .collect();
                    format!(" at {op} ({} -> {})", data.op.name(), results.join(", "))
                })
                .unwrap_or_default();
        anyhow!(
            "{}: the interpreter failed{at}: {}",
            path.display(),
            e.message
        )
    })?;
    if outputs.len() != graph.outputs().len() {
        bail!(
            "{}: the interpreter returned {} outputs, the graph has {}",
            path.display(),
            outputs.len(),
            graph.outputs().len()
        );
    }

    let labels = tessera_ir::text::output_names(&graph);
    show_outputs(output_dir, &labels, &outputs)
}

fn show_outputs(output_dir: Option<&Path>, labels: &[String], outputs: &[Tensor]) -> Result<()> {
    match output_dir {
        Some(dir) => write_outputs(dir, labels, outputs),
        None => {
            let mut text = String::new();
            for (label, t) in labels.iter().zip(outputs) {
                let _ = writeln!(text, "%{label}: {}", t.ty());
                text.push_str(&summary::summarize(t));
            }
            super::print_stdout(&text)
        }
    }
}

/// Runs a JIT runner `exec.repeat` times (after untimed warm-up runs when repeating: the
/// JIT materializes code on first call, and caches, branch predictors and the clock
/// frequency settle over the next; see [`WARM_UP`]); prints the timing on stderr. What is timed is the
/// call on inputs already in the program's buffers, its outputs left in its own, as
/// `iree-benchmark-module` times a function: each run gets a fresh copy of the inputs (a
/// step that donates its state writes them), made before its clock starts, and only the
/// last run's outputs are converted to tensors.
fn time_runs(
    runner: &tessera_mlir::Runner,
    inputs: &[Tensor],
    exec: &Execution<'_>,
) -> Result<Vec<Tensor>> {
    let (clocks, outputs) = call_runs(runner, inputs, exec.repeat, exec.repeat > 1, &mut || {})?;
    let mut times: Vec<f64> = clocks
        .iter()
        .map(|(start, end)| end.duration_since(*start).as_secs_f64() * 1e3)
        .collect();
    times.sort_by(f64::total_cmp);
    if times.len() == 1 {
        eprintln!(
            "run: first call {:.3} ms (--repeat N times the steady state); {}",
            times[0],
            runner.start_note(),
        );
    } else {
        eprintln!(
            "run: median {:.3} ms over {} runs ({})",
            times[times.len() / 2],
            times.len(),
            runner.start_note(),
        );
    }
    Ok(outputs)
}

/// A call's start and end.
pub(crate) type Clock = (Instant, Instant);

/// How long untimed runs go on before the timed ones (at least one run): a program of a few
/// microseconds runs steadily only after hundreds of calls (its first ones take twice as
/// long on a 2-core Xeon), one of many milliseconds after one.
pub(crate) const WARM_UP: std::time::Duration = std::time::Duration::from_millis(50);

/// Calls `runner` `runs` times (at least once; after [`WARM_UP`] of untimed calls when
/// `warm_up`, then `ready`), each on a fresh copy of `inputs` made before its clock starts:
/// each call's start and end, and the last call's outputs.
pub(crate) fn call_runs(
    runner: &tessera_mlir::Runner,
    inputs: &[Tensor],
    runs: usize,
    warm_up: bool,
    ready: &mut dyn FnMut(),
) -> Result<(Vec<Clock>, Vec<Tensor>)> {
    tessera_mlir::jit::retain_freed_memory();
    let encoded: Vec<tessera_mlir::jit::Buffer> = inputs
        .iter()
        .map(tessera_mlir::jit::Buffer::from_tensor)
        .collect();
    if warm_up {
        // The first call JIT-compiles; the warm-up's clock starts after it.
        runner.run_buffers(&mut encoded.clone())?;
        let start = Instant::now();
        while start.elapsed() < WARM_UP {
            runner.run_buffers(&mut encoded.clone())?;
        }
    }
    ready();
    let mut clocks = Vec::with_capacity(runs.max(1));
    let mut last = None;
    for _ in 0..runs.max(1) {
        let mut args = encoded.clone();
        let start = Instant::now();
        let outs = runner.run_buffers(&mut args)?;
        clocks.push((start, Instant::now()));
        last = Some((args, outs));
    }
    let outputs = match &last {
        Some((args, outs)) => tessera_mlir::Runner::decode(args, outs)?,
        None => Vec::new(),
    };
    Ok((clocks, outputs))
}

/// `tessera run DIR`: the compiled program in DIR, its libraries loaded (or its modules
/// JIT-compiled) on this CPU.
fn run_compiled(
    dir: &Path,
    bindings: &[Binding],
    output_dir: Option<&Path>,
    exec: &Execution<'_>,
) -> Result<()> {
    let stages = crate::instrument::Stages::new();
    stages.stage(format!("loading {}", dir.display()));
    let runner = tessera_mlir::Runner::load(dir, 2, exec.gpus)
        .with_context(|| format!("{}: loading the compiled program", dir.display()))?;
    drop(stages);
    let inputs = compiled_inputs(&runner, bindings, output_dir)?;
    let outputs =
        time_runs(&runner, &inputs, exec).with_context(|| format!("{}: running", dir.display()))?;
    show_compiled_outputs(&runner, output_dir, &outputs)
}

/// The inputs of a compiled program, matched by name against its manifest and read; the
/// output directory made, where given, before anything runs.
pub(crate) fn compiled_inputs(
    runner: &tessera_mlir::Runner,
    bindings: &[Binding],
    output_dir: Option<&Path>,
) -> Result<Vec<Tensor>> {
    let stub = manifest_inputs(runner)?;
    let files = match_inputs(&stub, bindings)?;
    let inputs = read_inputs(&stub, &files)?;
    if let Some(d) = output_dir {
        std::fs::create_dir_all(d)
            .with_context(|| format!("cannot create output directory {}", d.display()))?;
    }
    Ok(inputs)
}

/// A graph of a compiled program's inputs only (its manifest's names and types).
pub(crate) fn manifest_inputs(runner: &tessera_mlir::Runner) -> Result<Graph> {
    let m = runner.manifest();
    let mut stub = Graph::new(m.graph.clone());
    for i in &m.inputs {
        stub.add_input(Some(i.name.clone()), tessera_mlir::run::parse_type(&i.ty)?);
    }
    Ok(stub)
}

/// Prints (or writes) a compiled program's outputs under their manifest names.
pub(crate) fn show_compiled_outputs(
    runner: &tessera_mlir::Runner,
    output_dir: Option<&Path>,
    outputs: &[Tensor],
) -> Result<()> {
    let labels: Vec<String> = runner
        .manifest()
        .outputs
        .iter()
        .map(|o| o.name.clone())
        .collect();
    show_outputs(output_dir, &labels, outputs)
}

/// `tessera run MODEL --target T`: compile (default pipeline, placement) and run the
/// lowered program with the JIT.
fn run_model_jit(
    path: &Path,
    graph: Graph,
    inputs: &[Tensor],
    target: &str,
    output_dir: Option<&Path>,
    exec: &Execution<'_>,
) -> Result<()> {
    let target = super::targets::resolve(target, exec.target_path).context("--target")?;
    tessera_targets::set_default_target(Some(target.clone()));
    let graph = default_passes(graph, path)?;
    let (_, runner) = jit(graph, &*target, path, 2, exec.gpus)?;
    let outputs =
        time_runs(&runner, inputs, exec).with_context(|| format!("{}: running", path.display()))?;
    show_compiled_outputs(&runner, output_dir, &outputs)
}

/// `graph` through `compile`'s default pass pipeline; `path` names the model in messages.
pub(crate) fn default_passes(graph: Graph, path: &Path) -> Result<Graph> {
    let pipeline = tessera_passes::Pipeline::parse(super::compile::DEFAULT_PIPELINE)?;
    let flags = crate::instrument::PassFlags::default();
    Ok(super::opt::run_pipeline(graph, &pipeline, &flags, path)?.0)
}

/// Places `graph` (the pass pipeline already run) on `target`, lowers it and JIT-compiles
/// the program on this CPU at LLVM `opt_level`; returns the placed graph and the runner.
/// `path` names the model in messages.
pub(crate) fn jit(
    graph: Graph,
    target: &dyn tessera_targets::Target,
    path: &Path,
    opt_level: usize,
    gpus: tessera_mlir::GpuDevices,
) -> Result<(Graph, tessera_mlir::Runner)> {
    let (graph, runner, _) = jit_marked(graph, target, path, opt_level, false, gpus)?;
    Ok((graph, runner))
}

/// [`jit`], with every module marked for profiling where `profiled`
/// ([`tessera_mlir::profile`]); the marks' sites too (none unmarked).
pub(crate) fn jit_marked(
    graph: Graph,
    target: &dyn tessera_targets::Target,
    path: &Path,
    opt_level: usize,
    profiled: bool,
    gpus: tessera_mlir::GpuDevices,
) -> Result<(
    Graph,
    tessera_mlir::Runner,
    Vec<tessera_mlir::profile::Site>,
)> {
    let compiled = super::compile::compile(
        graph,
        target,
        None,
        None,
        &super::compile::PlaceSettings::default(),
    )
    .with_context(|| format!("{}: compiling for {}", path.display(), target.spec().name))?;
    let program = super::emit::lower_graph(&compiled.graph, target.spec(), path, true)?;
    let mlir = tessera_mlir::Mlir::new();
    let weights = program
        .weight_tensors()
        .map_err(|e| anyhow!("{}: {}", path.display(), e.0))?;
    let (manifest, modules) = (program.manifest.clone(), program.module_map());
    let (runner, sites) = if profiled {
        tessera_mlir::Runner::new_profiled(&mlir, manifest, &modules, weights, opt_level, gpus)?
    } else {
        let runner =
            tessera_mlir::Runner::new(&mlir, manifest, &modules, weights, opt_level, gpus)?;
        (runner, Vec::new())
    };
    Ok((compiled.graph, runner, sites))
}

/// Reads one `.npy` file per graph input, checked against the input's type, and checks
/// that symbolic dimensions are bound consistently.
fn read_inputs(graph: &Graph, files: &[PathBuf]) -> Result<Vec<Tensor>> {
    let mut inputs = Vec::with_capacity(files.len());
    for (&v, file) in graph.inputs().iter().zip(files) {
        let what = format!("input `{}`", input_label(graph, v));
        inputs.push(npy::read_expecting(file, graph.ty(v), &what)?);
    }
    check_symbols(graph, &inputs, files)?;
    Ok(inputs)
}

/// Reads the inputs of an ONNX model against its declared input types, then imports it
/// with every input's shape bound to its file's shape (so shape computations fold), and its
/// values available where an operator needs them at import time, and verifies the result.
fn prepare_onnx(
    path: &Path,
    bindings: &[Binding],
    shapes: &[InputShape],
) -> Result<(Graph, Vec<Tensor>)> {
    let explicit = super::shape_map(shapes)?;
    super::check_readable(path)?;
    let (name, declared) = tessera_onnx::model_inputs(path)?;
    // The declared inputs, as a graph with inputs only, to match and check the bindings.
    let mut stub = Graph::new(name);
    for (n, ty) in &declared {
        stub.add_input(Some(n.clone()), ty.clone());
    }
    let files = match_inputs(&stub, bindings)?;
    for s in explicit.keys() {
        if !declared.iter().any(|(n, _)| n == s) {
            let names: Vec<String> = declared.iter().map(|(n, _)| n.clone()).collect();
            bail!(
                "{}: --input-shape {s}: not a graph input (inputs: {})",
                path.display(),
                names.join(", ")
            );
        }
    }
    let inputs = read_inputs(&stub, &files)?;
    let mut input_shapes = BTreeMap::new();
    for (((n, _), t), file) in declared.iter().zip(&inputs).zip(&files) {
        let dims: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
        if let Some(want) = explicit.get(n)
            && *want != dims
        {
            bail!(
                "{}: input `{n}` has shape {}, but --input-shape gives {n}={}",
                file.display(),
                npy::shape_string(t.shape()),
                want.iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join("x")
            );
        }
        input_shapes.insert(n.clone(), dims);
    }
    // The inputs' values too: where an operator needs an input's contents at import time (a
    // reshape's target shape, top-k's k, ...), the import specializes on them.
    let input_values = declared
        .iter()
        .zip(&inputs)
        .map(|((n, _), t)| (n.clone(), t.clone()))
        .collect();
    let options = tessera_onnx::ImportOptions {
        input_shapes,
        input_values,
        ..tessera_onnx::ImportOptions::default()
    };
    let graph = super::import_verified(path, &options)?;
    if graph.inputs().len() != inputs.len() {
        bail!(
            "{}: the imported graph has {} inputs, the model declares {}",
            path.display(),
            graph.inputs().len(),
            inputs.len()
        );
    }
    Ok((graph, inputs))
}

/// Matches the `--input` bindings to the graph inputs; returns one file per input, in order.
fn match_inputs(graph: &Graph, bindings: &[Binding]) -> Result<Vec<PathBuf>> {
    let labels: Vec<String> = graph
        .inputs()
        .iter()
        .map(|&v| input_label(graph, v))
        .collect();
    let mut files: Vec<Option<PathBuf>> = vec![None; labels.len()];
    for b in bindings {
        let Some(pos) = labels.iter().position(|l| *l == b.name) else {
            let known = if labels.is_empty() {
                "it has no inputs".to_string()
            } else {
                format!(
                    "its inputs are {}",
                    labels
                        .iter()
                        .map(|l| format!("`{l}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            bail!(
                "unknown input `{}` in --input {}={}: graph @{} has no input of that name; {known}",
                b.name,
                b.name,
                b.file.display(),
                graph.name
            );
        };
        if let Some(first) = &files[pos] {
            bail!(
                "input `{}` is given twice: --input {}={} and --input {}={}",
                b.name,
                b.name,
                first.display(),
                b.name,
                b.file.display()
            );
        }
        files[pos] = Some(b.file.clone());
    }
    let missing: Vec<String> = graph
        .inputs()
        .iter()
        .zip(&files)
        .zip(&labels)
        .filter(|((_, f), _)| f.is_none())
        .map(|((&v, _), l)| format!("`{l}` ({})", graph.ty(v)))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing --input for graph input{} {} (give each as --input NAME=FILE.npy)",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", ")
        );
    }
    Ok(files.into_iter().flatten().collect())
}

/// Checks that every symbolic dimension takes one extent across all inputs.
fn check_symbols(graph: &Graph, inputs: &[Tensor], files: &[PathBuf]) -> Result<()> {
    let mut seen: BTreeMap<&str, (usize, usize, usize)> = BTreeMap::new(); // sym -> (extent, input, axis)
    for (i, (&v, t)) in graph.inputs().iter().zip(inputs).enumerate() {
        for (axis, (d, &n)) in graph.ty(v).shape.iter().zip(t.shape()).enumerate() {
            let Dim::Sym(s) = d else { continue };
            match seen.get(s.as_str()) {
                Some(&(m, j, a)) if m != n => bail!(
                    "{}: symbolic dimension {s} is {n} here (axis {axis} of input `{}`), but {m} in {} (axis {a} of input `{}`)",
                    files[i].display(),
                    input_label(graph, v),
                    files[j].display(),
                    input_label(graph, graph.inputs()[j])
                ),
                Some(_) => {}
                None => {
                    seen.insert(s, (n, i, axis));
                }
            }
        }
    }
    Ok(())
}

/// The name a user gives a graph input on the command line: its value name, or `#i`.
fn input_label(graph: &Graph, v: ValueId) -> String {
    match (
        &graph.value(v).name,
        graph.inputs().iter().position(|&x| x == v),
    ) {
        (Some(n), _) => n.clone(),
        (None, Some(i)) => format!("#{i}"),
        (None, None) => v.to_string(),
    }
}

fn value_label(graph: &Graph, v: ValueId) -> String {
    graph.value(v).name.clone().unwrap_or_else(|| v.to_string())
}

fn write_outputs(dir: &Path, labels: &[String], outputs: &[Tensor]) -> Result<()> {
    let stems = names::file_stems(labels.iter().map(String::as_str));
    let mut text = String::new();
    for ((label, stem), t) in labels.iter().zip(&stems).zip(outputs) {
        let file = dir.join(format!("{stem}.npy"));
        npy::write(&file, t).with_context(|| format!("cannot write output `{label}`"))?;
        let _ = writeln!(text, "%{label}: {} -> {}", t.ty(), file.display());
    }
    super::print_stdout(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::{ElemType, TensorType};

    fn graph() -> Graph {
        let mut g = Graph::new("g");
        g.add_input(
            Some("x".into()),
            TensorType::new(ElemType::F32, vec![Dim::sym("N"), Dim::Static(2)]),
        );
        g.add_input(None, TensorType::new(ElemType::F32, vec![Dim::sym("N")]));
        g
    }

    fn bind(name: &str, file: &str) -> Binding {
        Binding {
            name: name.into(),
            file: file.into(),
        }
    }

    fn err(r: Result<impl std::fmt::Debug>) -> String {
        format!("{:#}", r.expect_err("should fail"))
    }

    #[test]
    fn matches_inputs_by_name_and_position() {
        let g = graph();
        let files = match_inputs(&g, &[bind("#1", "b.npy"), bind("x", "a.npy")]).expect("complete");
        assert_eq!(files, [PathBuf::from("a.npy"), PathBuf::from("b.npy")]);
    }

    #[test]
    fn input_errors() {
        let g = graph();
        let e = err(match_inputs(&g, &[bind("y", "a.npy")]));
        assert!(
            e.contains("unknown input `y` in --input y=a.npy")
                && e.contains("its inputs are `x`, `#1`"),
            "{e}"
        );
        let e = err(match_inputs(&g, &[bind("x", "a.npy"), bind("x", "b.npy")]));
        assert!(
            e.contains("input `x` is given twice: --input x=a.npy and --input x=b.npy"),
            "{e}"
        );
        let e = err(match_inputs(&g, &[]));
        assert!(
            e.contains("missing --input for graph inputs `x` (f32[N, 2]), `#1` (f32[N])"),
            "{e}"
        );
        let e = err(match_inputs(&g, &[bind("x", "a.npy")]));
        assert!(e.contains("graph input `#1` (f32[N])"), "{e}");
    }

    #[test]
    fn symbols_bind_consistently() {
        let g = graph();
        let t = |shape: &[usize]| Tensor::zeros(ElemType::F32, shape).expect("small");
        let files = [PathBuf::from("a.npy"), PathBuf::from("b.npy")];
        assert!(check_symbols(&g, &[t(&[3, 2]), t(&[3])], &files).is_ok());
        let e = err(check_symbols(&g, &[t(&[3, 2]), t(&[4])], &files));
        assert!(
            e.contains("b.npy: symbolic dimension N is 4 here (axis 0 of input `#1`), but 3 in a.npy (axis 0 of input `x`)"),
            "{e}"
        );
    }
}
