//! What `tessera compile -o DIR` writes after placement: the per-device MLIR modules, the
//! manifest, the weights, the artifacts of devices whose target brings its own pipeline, and
//! the further outputs `--emit` asks for (MLIR after the target pipeline, LLVM IR, object
//! files, PTX, an MPI executable).
//!
//! A device whose target has a pipeline hook (`Target::device_pipeline`, a plugin's backend)
//! is lowered with it at every `-o`, and the target's `device_artifact` files are written
//! from the result. A device whose lowering is a plugin's name without a hook gets the
//! portable affine loops, and the summary and its `--emit lowered` file say so. `tessera run`
//! runs the portable `<device>.mlir` modules on this CPU, whatever the pipelines.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};
use tessera_ir::Graph;
use tessera_mlir::lower::{LowerOptions, Program, lower};
use tessera_mlir::pipelines::DeviceLowering;
use tessera_mlir::{Mlir, PipelineOptions, pipelines};
use tessera_targets::{Artifact, Target, TargetSpec};

use crate::instrument::PassFlags;

/// A further output of `tessera compile -o DIR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Emit {
    /// `<device>.lowered.mlir`: each module after its device's MLIR pipeline (a plugin
    /// target's own when it has one; else CPU: the LLVM dialect; NVIDIA GPU: GPU host code
    /// with the PTX kernels; others: affine loops, headed by a comment when they stand in for
    /// a plugin's backend).
    Lowered,
    /// `<device>.ll`: LLVM IR of each CPU device's module.
    Llvm,
    /// `<device>.o`: an object file of each CPU device's module (clang-22).
    Object,
    /// `<device>.ptx`: the PTX text of each NVIDIA GPU device's kernels.
    Ptx,
    /// `program`: one executable for `mpirun -np K`, rank r running the r-th device with
    /// work (`mpirun -np K DIR/program INPUT.npy... OUTDIR`; see the README).
    Mpi,
}

/// The MLIR pipeline options the pass flags ask for.
pub fn pipeline_options(flags: &PassFlags) -> PipelineOptions {
    PipelineOptions {
        print_ir_after_all: flags.print_ir_after_all,
        print_ir_before_all: flags.print_ir_before_all,
        timing: flags.timing,
        // The names that are not tessera passes are MLIR passes (checked by the
        // instrumentation).
        print_ir_after: mlir_names(&flags.print_ir_after),
        print_ir_before: mlir_names(&flags.print_ir_before),
    }
}

/// The names among `names` that are not tessera passes.
fn mlir_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| tessera_passes::lookup(n).is_none())
        .cloned()
        .collect()
}

/// Lowers a placed graph; the error names the model. `donate_state`: a training step's state
/// is updated in place (not for the MPI program).
pub fn lower_graph(
    graph: &Graph,
    target: &TargetSpec,
    model: &Path,
    donate_state: bool,
) -> Result<Program> {
    lower(
        graph,
        &LowerOptions {
            target,
            model: model.display().to_string(),
            donate_state,
        },
    )
    .map_err(|e| anyhow::anyhow!("{}: lowering to MLIR: {}", model.display(), e.0))
}

/// `--dump-pass-pipeline`'s lines for the devices with work in a placed graph: the MLIR
/// pipeline each device's module gets (what `--emit lowered` runs), as the `mlir-opt` command
/// line that runs it on the module `-o` writes. A target's function of the module is named
/// as such.
pub fn pipelines_text(graph: &Graph, target_hooks: &dyn Target) -> Result<String> {
    let target = target_hooks.spec();
    let used: BTreeSet<&str> = graph
        .ops()
        .iter()
        .filter_map(|&op| graph.op(op).device.as_deref())
        .collect();
    let mlir = Mlir::new();
    let mut out = String::new();
    for d in &target.devices {
        // Unplaced ops run on the host.
        let has_work = used.contains(d.name.as_str()) || (used.is_empty() && d.name == target.host);
        if !has_work {
            continue;
        }
        let head = format!("// {} (lowering `{}`):", d.name, d.lowering);
        let choice = pipelines::for_target_device(target_hooks, d);
        let Some(pipeline) = choice.passes() else {
            out.push_str(&format!(
                "{head} target {}'s own function of the module, not a pass pipeline\n",
                target.name
            ));
            continue;
        };
        let pipeline = pipelines::with_schedule(pipeline, &d.name);
        let expanded = mlir.expand_pipeline(&pipeline, &format!("{}'s pipeline", d.name))?;
        out.push_str(&format!(
            "{head} mlir-opt {}.mlir --pass-pipeline='{expanded}'\n",
            d.name
        ));
    }
    Ok(out)
}

/// The packed entries of `dev`'s library: each step function it runs, with the number of
/// parameters of its C interface (the results' pointer first, when it has results, then one
/// per argument).
fn library_entries(m: &tessera_mlir::manifest::Manifest, dev: &str) -> Vec<(String, usize)> {
    m.steps
        .iter()
        .filter(|st| !st.function.is_empty())
        .filter(|st| st.runners().contains(&dev))
        .map(|st| {
            (
                st.function.clone(),
                st.args.len() + usize::from(!st.results.is_empty()),
            )
        })
        .collect()
}

/// What [`write`] did.
pub struct Written {
    /// The lowered program.
    pub program: Program,
    /// Lines for the compile's summary (`lowering     npu0: ...`): each device lowered by its
    /// target's own pipeline with the artifacts written, and each device whose lowering fell
    /// back to the portable loops. Empty when every device has a built-in lowering.
    pub notes: Vec<String>,
}

/// The summary's label column, as `placement    `.
const NOTE: &str = "lowering     ";

/// Lowers `graph`, checks every module with MLIR's verifier, and writes the modules, the
/// manifest, the weights, the target's device artifacts and the `emits` to `dir`, which
/// becomes `shown` when the compile ends (the name messages give it).
pub fn write(
    dir: &Path,
    shown: &Path,
    graph: &Graph,
    target_hooks: &dyn Target,
    model: &Path,
    emits: &[Emit],
    flags: &PassFlags,
) -> Result<Written> {
    let target = target_hooks.spec();
    let stages = crate::instrument::Stages::new();
    stages.stage("lowering to MLIR");
    let mut program = lower_graph(graph, target, model, !emits.contains(&Emit::Mpi))?;
    let mlir = Mlir::new();
    let popts = pipeline_options(flags);
    // Verify everything before writing anything.
    for (dev, text) in &program.modules {
        stages.stage(format!("verifying {dev}.mlir"));
        mlir.parse(text, &format!("{dev}.mlir"))?;
    }
    for (dev, text) in &program.modules {
        super::write_atomically(&dir.join(format!("{dev}.mlir")), text.as_bytes())?;
    }
    let device = |dev: &str| target.devices.iter().find(|d| d.name == dev);
    let lowering = |dev: &str| device(dev).map(|d| d.lowering.clone()).unwrap_or_default();
    // Each CPU device's module after the CPU pipeline (printed) and as LLVM IR, made once for
    // its library, `lowered`, `llvm` and `object` together; its schedule is written then.
    let mut cpu: BTreeMap<String, (String, String)> = BTreeMap::new();
    let cpu_outputs =
        |cpu: &mut BTreeMap<String, (String, String)>, dev: &str, text: &str| -> Result<()> {
            if !cpu.contains_key(dev) {
                let what = format!("{dev}.mlir");
                let mut m = mlir.parse(text, &what)?;
                let schedule = mlir.run_pipeline(&mut m, pipelines::CPU, &popts, &what)?;
                // What `--dump-pass-pipeline`'s mlir-opt line loads.
                super::write_atomically(
                    &dir.join(pipelines::schedule_file(dev)),
                    schedule.as_bytes(),
                )?;
                let done = (Mlir::print(&m), mlir.to_llvm_ir(&m, &what)?);
                cpu.insert(dev.to_string(), done);
            }
            Ok(())
        };
    // Each CPU device's steps as a shared library `tessera run` loads without compiling
    // (and its object file, when asked for, from the same compile). The MPI program has its
    // own build of every step.
    let mut libraries = BTreeMap::new();
    if !emits.contains(&Emit::Mpi) {
        let host_cpu = tessera_mlir::native::host_cpu();
        for (dev, text) in &program.modules {
            if lowering(dev) != "cpu" {
                continue;
            }
            stages.stage(format!("{dev}: shared library"));
            cpu_outputs(&mut cpu, dev, text)?;
            let entries = library_entries(&program.manifest, dev);
            let file = format!("{dev}.so");
            let object = emits
                .contains(&Emit::Object)
                .then(|| dir.join(format!("{dev}.o")));
            tessera_mlir::native::shared_library(
                &cpu[dev].1,
                &entries,
                &dir.join(&file),
                object.as_deref(),
            )?;
            let library = tessera_mlir::manifest::Library {
                file,
                source_sha256: tessera_mlir::native::library_digest(text),
                host_cpu: host_cpu.clone(),
            };
            libraries.insert(dev.clone(), library);
        }
    }
    for d in &mut program.manifest.devices {
        d.library = libraries.remove(&d.name);
    }
    let manifest = serde_json::to_string_pretty(&program.manifest)? + "\n";
    super::write_atomically(&dir.join("manifest.json"), manifest.as_bytes())?;
    let wpath = dir.join(tessera_mlir::manifest::WEIGHTS_FILE);
    let weight_bytes = if program.weights.is_empty() {
        // A stale weights file from an earlier compile would be misleading.
        let _ = std::fs::remove_file(&wpath);
        Vec::new()
    } else {
        // The placed graph's large constants too, so that `placed.tir`'s sidecar can be a
        // link to this file instead of a second copy of the weights; one held packed into
        // panels is there once, packed, and the sidecar's reader unpacks it.
        let mut all = program.weights.clone();
        // (A packed copy is recognized by its name and its shape, the panels of the
        // constant's `[K, N]`, so a constant that only happens to be named like one is not
        // taken for it.)
        let packed: BTreeSet<&str> = program
            .weights
            .iter()
            .filter_map(|(k, (ty, _))| {
                let (c, p) = tessera_ir::panels::parse(k)?;
                let (_, orig) = graph.consts().find(|(_, g)| g.name == c)?;
                match orig.ty.static_dims().as_deref() {
                    Some(&[rows, cols])
                        if ty.static_dims().as_deref()
                            == Some(&tessera_ir::panels::dims(rows, cols, p)[..]) =>
                    {
                        Some(c)
                    }
                    _ => None,
                }
            })
            .collect();
        for (_, c) in graph.consts() {
            if tessera_ir::text::is_external(c)
                && !all.contains_key(&c.name)
                && !packed.contains(c.name.as_str())
            {
                all.insert(c.name.clone(), (c.ty.clone(), c.data.clone()));
            }
        }
        tessera_mlir::weights::write(&all, &wpath)?;
        // The MPI program embeds the file; nothing else needs its bytes.
        if emits.contains(&Emit::Mpi) {
            std::fs::read(&wpath).with_context(|| format!("cannot read {}", wpath.display()))?
        } else {
            Vec::new()
        }
    };
    // Each device's pipeline; the target's own run now, for their artifacts.
    let choices: BTreeMap<&str, DeviceLowering> = program
        .modules
        .iter()
        .filter_map(|(dev, _)| {
            let d = device(dev)?;
            Some((dev.as_str(), pipelines::for_target_device(target_hooks, d)))
        })
        .collect();
    let mut notes = Vec::new();
    let mut own: BTreeMap<&str, String> = BTreeMap::new();
    let mut taken = own_files(target, &program);
    for (dev, text) in &program.modules {
        let (Some(d), Some(choice)) = (device(dev), choices.get(dev.as_str())) else {
            continue;
        };
        if let Some(note) = choice.fallback_note(d) {
            notes.push(format!("{NOTE}{note}"));
        }
        if !choice.is_target_own() {
            continue;
        }
        stages.stage(format!("{dev}: the target's pipeline"));
        let what = format!("{dev}.mlir");
        let lowered = pipelines::lower_device(&mlir, choice, d, text, &popts, &what)?;
        let artifacts = target_hooks
            .device_artifact(d, &lowered)
            .map_err(|m| anyhow::anyhow!("{dev}: the artifact of target {}: {m}", target.name))?;
        let mut names = Vec::new();
        for a in &artifacts {
            check_artifact(dev, a, &mut taken)?;
            super::write_atomically(&dir.join(&a.name), &a.bytes)?;
            names.push(format!("{} ({} bytes)", a.name, a.bytes.len()));
        }
        notes.push(format!(
            "{NOTE}{dev}: {}'s own pipeline{}",
            target.name,
            if names.is_empty() {
                String::new()
            } else {
                format!("; wrote {}", names.join(", "))
            }
        ));
        own.insert(dev.as_str(), lowered);
    }
    let has_library = |dev: &str| {
        program
            .manifest
            .devices
            .iter()
            .any(|d| d.name == dev && d.library.is_some())
    };
    for &e in emits {
        stages.stage(format!("--emit {e:?}").to_lowercase());
        match e {
            Emit::Lowered => {
                for (dev, text) in &program.modules {
                    let choice = choices.get(dev.as_str());
                    let out = if let Some(done) = own.get(dev.as_str()) {
                        done.clone()
                    } else if lowering(dev) == "cpu" {
                        cpu_outputs(&mut cpu, dev, text)?;
                        cpu[dev].0.clone()
                    } else {
                        let what = format!("{dev}.mlir");
                        match (device(dev), choice) {
                            (Some(d), Some(c)) => {
                                let out =
                                    pipelines::lower_device(&mlir, c, d, text, &popts, &what)?;
                                match c.fallback_note(d) {
                                    Some(note) => format!("// tessera: {note}\n{out}"),
                                    None => out,
                                }
                            }
                            _ => {
                                let mut m = mlir.parse(text, &what)?;
                                let pipeline = pipelines::for_lowering(&lowering(dev));
                                mlir.run_pipeline(&mut m, pipeline, &popts, &what)?;
                                Mlir::print(&m)
                            }
                        }
                    };
                    super::write_atomically(
                        &dir.join(format!("{dev}.lowered.mlir")),
                        out.as_bytes(),
                    )?;
                }
            }
            Emit::Llvm | Emit::Object => {
                let mut any = false;
                for (dev, text) in &program.modules {
                    if lowering(dev) != "cpu" {
                        continue;
                    }
                    any = true;
                    cpu_outputs(&mut cpu, dev, text)?;
                    let ll = &cpu[dev].1;
                    if e == Emit::Llvm {
                        super::write_atomically(&dir.join(format!("{dev}.ll")), ll.as_bytes())?;
                    } else if !has_library(dev) {
                        // (A library's compile wrote its object file.)
                        tessera_mlir::native::object_file(ll, &dir.join(format!("{dev}.o")))?;
                    }
                }
                if !any {
                    bail!(
                        "--emit {}: no CPU device of {} has work",
                        if e == Emit::Llvm { "llvm" } else { "object" },
                        target.name
                    );
                }
            }
            Emit::Ptx => {
                let mut any = false;
                for (dev, text) in &program.modules {
                    if lowering(dev) != "nvptx" {
                        continue;
                    }
                    any = true;
                    let arch = device(dev).and_then(|d| d.arch.as_deref());
                    let what = format!("{dev}.mlir");
                    let ptx = tessera_mlir::native::ptx_for_arch(&mlir, text, &what, &popts, arch)?;
                    super::write_atomically(&dir.join(format!("{dev}.ptx")), ptx.as_bytes())?;
                }
                if !any {
                    bail!(
                        "--emit ptx: no NVIDIA GPU device of {} has work",
                        target.name
                    );
                }
            }
            Emit::Mpi => {
                let training = if graph.state.is_empty() {
                    None
                } else {
                    Some(mpi_training(dir, graph, model).context("--emit mpi")?)
                };
                tessera_mlir::mpi::build(
                    &mlir,
                    &program,
                    &weight_bytes,
                    &dir.join("program"),
                    &popts,
                    training.as_ref(),
                )
                .context("--emit mpi")?;
                let ranks = tessera_mlir::mpi::ranks(&program);
                let args = match &training {
                    Some(t) => format!(
                        "{} --steps N --output-dir OUT",
                        tessera_mlir::mpi::train_input_args(&program, t)
                    ),
                    None => format!("{} OUTDIR", tessera_mlir::mpi::input_args(&program)),
                };
                eprintln!(
                    "mpi: {} ranks ({}): mpirun -np {} {}/program{args}",
                    ranks.len(),
                    ranks.join(", "),
                    ranks.len(),
                    shown.display(),
                );
            }
        }
    }
    Ok(Written { program, notes })
}

/// The files a training step's MPI program reads and patches into its outputs
/// ([`tessera_mlir::mpi::Training`]): its initial state and parameters in `tessera train`'s
/// safetensors layout and, from an ONNX model, the model with `raw_data` initializers.
fn mpi_training(dir: &Path, graph: &Graph, model: &Path) -> Result<tessera_mlir::mpi::Training> {
    use tessera_ir::StateInit;
    use tessera_mlir::mpi::{TRAIN_MODEL, TRAIN_STATE, TRAIN_WEIGHTS, TrainSlot, Training};
    let names = graph.output_names();
    let output = |name: &str| names.iter().position(|n| n.as_deref() == Some(name));
    let (all, weights) = super::train::state_files(graph, |slot| {
        super::train::initial(graph, slot.init, graph.ty(graph.inputs()[slot.input]))
    })?;
    super::train::write_safetensors(&dir.join(TRAIN_STATE), &all)?;
    super::train::write_safetensors(&dir.join(TRAIN_WEIGHTS), &weights)?;
    let offsets = |file: &str| -> Result<BTreeMap<String, (usize, usize)>> {
        let bytes = std::fs::read(dir.join(file))?;
        Ok(tessera_mlir::mpi::safetensors_offsets(&bytes)?)
    };
    let state_at = offsets(TRAIN_STATE)?;
    let weights_at = offsets(TRAIN_WEIGHTS)?;
    let model_at = if tessera_onnx::is_onnx_path(model) {
        let src =
            std::fs::read(model).with_context(|| format!("cannot read {}", model.display()))?;
        let template = tessera_onnx::replace_initializers(&src, &weights)
            .map_err(|e| anyhow::anyhow!("{}: {e}", model.display()))?;
        super::write_atomically(&dir.join(TRAIN_MODEL), &template)?;
        Some(
            tessera_onnx::initializer_data_offsets(&template)
                .map_err(|e| anyhow::anyhow!("{}: {e}", model.display()))?,
        )
    } else {
        let _ = std::fs::remove_file(dir.join(TRAIN_MODEL));
        None
    };
    let loss = output("loss").unwrap_or(0);
    let mut slots = Vec::new();
    for slot in &graph.state {
        let weight = match slot.init {
            StateInit::Const(c) => Some(graph.constant(c).name.clone()),
            StateInit::Zeros => None,
        };
        let found = |at: &BTreeMap<String, (usize, usize)>, name: &str| {
            at.get(name).copied().ok_or_else(|| {
                anyhow::anyhow!("internal: `{name}` is not in the training program's files")
            })
        };
        slots.push(TrainSlot {
            input: slot.input,
            output: output(&slot.next)
                .ok_or_else(|| anyhow::anyhow!("the step has no output `{}`", slot.next))?,
            state: found(&state_at, &slot.next)?,
            weight: weight
                .as_deref()
                .map(|w| found(&weights_at, w))
                .transpose()?,
            model: match (&model_at, &weight) {
                (Some(at), Some(w)) => Some(found(at, w)?),
                _ => None,
            },
        });
    }
    Ok(Training {
        loss,
        slots,
        model: model_at.is_some(),
    })
}

/// The files of the output directory that are tessera's, which no artifact may replace.
fn own_files(target: &TargetSpec, program: &Program) -> BTreeSet<String> {
    let mut taken: BTreeSet<String> = [
        "manifest.json",
        tessera_mlir::manifest::WEIGHTS_FILE,
        "placed.tir",
        "placed.safetensors",
        "summary.txt",
        "plan.json",
        crate::report::DATA_FILE,
        crate::report::HTML_FILE,
        "program",
        tessera_mlir::mpi::TRAIN_STATE,
        tessera_mlir::mpi::TRAIN_WEIGHTS,
        tessera_mlir::mpi::TRAIN_MODEL,
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    let devices = target.devices.iter().map(|d| d.name.as_str());
    for dev in devices.chain(program.modules.iter().map(|(d, _)| d.as_str())) {
        for ext in OWN_EXTENSIONS {
            taken.insert(format!("{dev}.{ext}"));
        }
    }
    taken
}

/// What tessera names `<device>.<ext>` itself (modules, `--emit` outputs).
const OWN_EXTENSIONS: [&str; 5] = ["mlir", "lowered.mlir", "ll", "o", "ptx"];

/// An artifact of device `dev` must be a plain file `<dev>.<something>` that is not one of
/// tessera's own files nor another artifact; it is then taken.
fn check_artifact(dev: &str, a: &Artifact, taken: &mut BTreeSet<String>) -> Result<()> {
    let name = a.name.as_str();
    let rest = name.strip_prefix(dev).and_then(|r| r.strip_prefix('.'));
    let plain = !name.contains(['/', '\\', '\0']) && name != "." && name != "..";
    if !plain || rest.is_none_or(str::is_empty) {
        bail!(
            "{dev}: the target's artifact `{}` must be a file name `{dev}.<something>` in the \
             output directory",
            name.escape_debug()
        );
    }
    if !taken.insert(name.to_string()) {
        bail!(
            "{dev}: the target's artifact `{name}` would replace a file tessera writes there \
             (or another artifact)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tessera_targets::{DevicePipeline, parse_target};

    use super::*;

    fn board() -> TargetSpec {
        parse_target(
            "host = \"h\"\n[[device]]\nname = \"h\"\nkind = \"cpu\"\nmemory = 1e9\n\
             memory_bandwidth = 1e9\nlowering = \"cpu\"\n",
            "board.toml",
        )
        .expect("valid target file")
    }

    #[test]
    fn artifact_names_stay_in_their_devices_namespace() {
        let mut taken: BTreeSet<String> = ["h.mlir", "manifest.json"].map(String::from).into();
        let a = |name: &str| Artifact {
            name: name.to_string(),
            bytes: Vec::new(),
        };
        assert!(check_artifact("h", &a("h.bin"), &mut taken).is_ok());
        for (bad, why) in [
            ("h.bin", "would replace"),
            ("h.mlir", "would replace"),
            ("manifest.json", "must be a file name `h.<something>`"),
            ("h.", "must be a file name"),
            ("h./x", "must be a file name"),
            ("../h.bin", "must be a file name"),
            ("hx.bin", "must be a file name"),
        ] {
            let err = check_artifact("h", &a(bad), &mut taken).expect_err(bad);
            assert!(err.to_string().contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_module_function_is_a_pipeline_and_its_output_is_verified() {
        let spec = board();
        let dev = &spec.devices[0];
        let mlir = Mlir::new();
        let text = "module {\n  func.func @step0() {\n    return\n  }\n}\n";
        let f: tessera_targets::ModuleFn =
            Arc::new(|d, t| Ok(t.replace("@step0", &format!("@{}_kernel", d.name))));
        let choice = DeviceLowering::Target(DevicePipeline::Module(f));
        let popts = PipelineOptions::default();
        let out =
            pipelines::lower_device(&mlir, &choice, dev, text, &popts, "h.mlir").expect("lowers");
        assert!(out.contains("func.func @h_kernel()"), "{out}");
        let broken: tessera_targets::ModuleFn = Arc::new(|_, _| Ok("module {".to_string()));
        let choice = DeviceLowering::Target(DevicePipeline::Module(broken));
        let err = pipelines::lower_device(&mlir, &choice, dev, text, &popts, "h.mlir")
            .expect_err("not MLIR");
        assert!(
            err.to_string().contains("h.mlir (after h's pipeline)"),
            "{err}"
        );
        let refuses: tessera_targets::ModuleFn = Arc::new(|_, _| Err("no backend".into()));
        let choice = DeviceLowering::Target(DevicePipeline::Module(refuses));
        let err = pipelines::lower_device(&mlir, &choice, dev, text, &popts, "h.mlir")
            .expect_err("refused");
        assert!(err.to_string().contains("no backend"), "{err}");
        let choice = DeviceLowering::Target(DevicePipeline::Passes(
            "builtin.module(no-such-pass)".into(),
        ));
        assert!(pipelines::lower_device(&mlir, &choice, dev, text, &popts, "h.mlir").is_err());
    }
}
