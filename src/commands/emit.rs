//! What `tessera compile -o DIR` writes after placement: the per-device MLIR modules, the
//! manifest, the weights, and the further outputs `--emit` asks for (MLIR after the target
//! pipeline, LLVM IR, object files, PTX, an MPI executable).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use tessera_ir::Graph;
use tessera_mlir::lower::{LowerOptions, Program, lower};
use tessera_mlir::{Mlir, PipelineOptions, pipelines};
use tessera_targets::TargetSpec;

use crate::instrument::PassFlags;

/// A further output of `tessera compile -o DIR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Emit {
    /// `<device>.lowered.mlir`: each module after its device's MLIR pipeline (CPU: the LLVM
    /// dialect; NVIDIA GPU: GPU host code with the PTX kernels; others: affine loops).
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
    }
}

/// Lowers a placed graph; the error names the model.
pub fn lower_graph(graph: &Graph, target: &TargetSpec, model: &Path) -> Result<Program> {
    lower(
        graph,
        &LowerOptions {
            target,
            model: model.display().to_string(),
        },
    )
    .map_err(|e| anyhow::anyhow!("{}: lowering to MLIR: {}", model.display(), e.0))
}

/// Lowers `graph`, checks every module with MLIR's verifier, and writes the modules, the
/// manifest, the weights and the `emits` to `dir`, which becomes `shown` when the compile
/// ends (the name messages give it).
pub fn write(
    dir: &Path,
    shown: &Path,
    graph: &Graph,
    target: &TargetSpec,
    model: &Path,
    emits: &[Emit],
    flags: &PassFlags,
) -> Result<Program> {
    let stages = crate::instrument::Stages::new();
    stages.stage("lowering to MLIR");
    let program = lower_graph(graph, target, model)?;
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
    let manifest = serde_json::to_string_pretty(&program.manifest)? + "\n";
    super::write_atomically(&dir.join("manifest.json"), manifest.as_bytes())?;
    let wpath = dir.join(tessera_mlir::manifest::WEIGHTS_FILE);
    let weight_bytes = if program.weights.is_empty() {
        // A stale weights file from an earlier compile would be misleading.
        let _ = std::fs::remove_file(&wpath);
        Vec::new()
    } else {
        let bytes = tessera_mlir::weights::serialize(&program.weights)?;
        super::write_atomically(&wpath, &bytes)?;
        bytes
    };
    let lowering = |dev: &str| {
        target
            .devices
            .iter()
            .find(|d| d.name == dev)
            .map(|d| d.lowering.clone())
            .unwrap_or_default()
    };
    // Each CPU device's module after the CPU pipeline (printed) and as LLVM IR, made once for
    // `lowered`, `llvm` and `object` together.
    let mut cpu: BTreeMap<String, (String, String)> = BTreeMap::new();
    let cpu_outputs =
        |cpu: &mut BTreeMap<String, (String, String)>, dev: &str, text: &str| -> Result<()> {
            if !cpu.contains_key(dev) {
                let what = format!("{dev}.mlir");
                let mut m = mlir.parse(text, &what)?;
                mlir.run_pipeline(&mut m, pipelines::CPU, &popts, &what)?;
                let done = (Mlir::print(&m), mlir.to_llvm_ir(&m, &what)?);
                cpu.insert(dev.to_string(), done);
            }
            Ok(())
        };
    for &e in emits {
        stages.stage(format!("--emit {e:?}").to_lowercase());
        match e {
            Emit::Lowered => {
                for (dev, text) in &program.modules {
                    let out = if lowering(dev) == "cpu" {
                        cpu_outputs(&mut cpu, dev, text)?;
                        cpu[dev].0.clone()
                    } else {
                        let what = format!("{dev}.mlir");
                        let mut m = mlir.parse(text, &what)?;
                        let l = lowering(dev);
                        mlir.run_pipeline(&mut m, pipelines::for_lowering(&l), &popts, &what)?;
                        Mlir::print(&m)
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
                    } else {
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
                    let ptx =
                        tessera_mlir::native::ptx(&mlir, text, &format!("{dev}.mlir"), &popts)?;
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
                tessera_mlir::mpi::build(
                    &mlir,
                    &program,
                    &weight_bytes,
                    &dir.join("program"),
                    &popts,
                )
                .context("--emit mpi")?;
                let ranks = tessera_mlir::mpi::ranks(&program);
                eprintln!(
                    "mpi: {} ranks ({}): mpirun -np {} {}/program{} OUTDIR",
                    ranks.len(),
                    ranks.join(", "),
                    ranks.len(),
                    shown.display(),
                    tessera_mlir::mpi::input_args(&program)
                );
            }
        }
    }
    Ok(program)
}
