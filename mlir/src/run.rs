//! Running a lowered program on this CPU: each device's code is a shared library that
//! `compile -o` built, or its module through the CPU pipeline and the JIT; then the steps run
//! in the manifest's order, each result kept until the steps (and outputs) that need it have
//! read it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tessera_ir::{Tensor, TensorType};

use crate::jit::{ArgRef, Buffer};
use crate::manifest::{Arg, Manifest};
use crate::{Error, Jit, Mlir, PipelineOptions, pipelines, profile};

/// The compiled, runnable form of a program: one compiled module per device (a loaded
/// library or the JIT's).
pub struct Runner {
    manifest: Manifest,
    jits: BTreeMap<String, Jit>,
    weights: BTreeMap<String, Buffer>,
    /// The manifest's types, parsed once: each input's, each step's results'.
    input_types: Vec<TensorType>,
    result_types: Vec<Vec<TensorType>>,
    /// The mesh index argument of each mesh device (`tensor<i64>`).
    mesh_index: Vec<Buffer>,
    /// Time spent making the runner: MLIR pipelines and the JIT, or loading the libraries
    /// (and, from a directory, reading the weights).
    pub compile_time: Duration,
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "library" } else { "libraries" }
}

/// Why device `d`'s library in `dir` may not run its module `text` here (`cpu`, the JIT's
/// `opt_level`), or `None` when it may.
fn unusable(
    lib: &crate::manifest::Library,
    dir: &Path,
    d: &crate::manifest::ManifestDevice,
    text: &str,
    cpu: &str,
    opt_level: usize,
) -> Option<String> {
    if Path::new(&lib.file).file_name() != Some(std::ffi::OsStr::new(&lib.file)) {
        Some(format!("not a file name in {}", dir.display()))
    } else if crate::native::library_digest(text) != lib.source_sha256 {
        Some(format!("not built from {} as it is now", d.module))
    } else if lib.host_cpu != cpu || cpu == crate::native::UNKNOWN_CPU {
        Some("built for a CPU with other features".to_string())
    } else if opt_level != 2 {
        Some(format!("built at -O2, not at -O{opt_level}"))
    } else if !dir.join(&lib.file).is_file() {
        Some("missing".to_string())
    } else {
        None
    }
}

/// Where a program's NVIDIA GPU devices (lowering `nvptx`) run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuDevices {
    /// On this CPU, their modules through the CPU pipeline like every other device's.
    #[default]
    OnCpu,
    /// On this machine's NVIDIA GPUs ([`crate::cuda`]): their modules through the NVIDIA
    /// pipeline, the kernels' PTX loaded by the driver.
    OnGpu,
}

/// A module's text through the CPU pipeline; `what` names it in errors.
fn lowered<'c>(mlir: &'c Mlir, text: &str, what: &str) -> Result<melior::ir::Module<'c>, Error> {
    let mut m = mlir.parse(text, what)?;
    mlir.run_pipeline(&mut m, pipelines::CPU, &PipelineOptions::default(), what)?;
    Ok(m)
}

/// The GPU device `d` of `manifest` runs on: the n-th NVIDIA device of the manifest takes
/// this machine's GPU n (GPUs shared round-robin where the machine has fewer), which must
/// run its architecture's PTX.
fn gpu_for(
    manifest: &Manifest,
    d: &crate::manifest::ManifestDevice,
) -> Result<&'static crate::cuda::Gpu, Error> {
    let gpus = crate::cuda::gpus().map_err(|e| Error::Run {
        message: format!(
            "device {} ({}) runs on an NVIDIA GPU here (--gpu): {e}",
            d.name,
            d.arch.as_deref().unwrap_or(pipelines::DEFAULT_NVPTX_ARCH)
        ),
    })?;
    let n = manifest
        .devices
        .iter()
        .filter(|m| m.lowering == "nvptx")
        .position(|m| m.name == d.name)
        .unwrap_or(0);
    let gpu = &gpus[n % gpus.len()];
    let arch = d.arch.as_deref().unwrap_or(pipelines::DEFAULT_NVPTX_ARCH);
    if !crate::cuda::runs(gpu, arch) {
        return Err(Error::Run {
            message: format!(
                "device {}'s kernels are for {arch}; GPU {} ({}, {}) cannot run them",
                d.name,
                gpu.ordinal,
                gpu.name,
                gpu.arch()
            ),
        });
    }
    Ok(gpu)
}

/// A GPU device's module through the NVIDIA pipeline for its architecture, checked for
/// functions its kernels call and nothing defines (libdevice's, where it was not found).
fn lowered_gpu<'c>(
    mlir: &'c Mlir,
    d: &crate::manifest::ManifestDevice,
    text: &str,
    what: &str,
) -> Result<melior::ir::Module<'c>, Error> {
    let mut m = mlir.parse(text, what)?;
    let pipeline = pipelines::nvptx(d.arch.as_deref());
    mlir.run_pipeline(&mut m, &pipeline, &PipelineOptions::default(), what)?;
    let missing = crate::gpu::undefined_functions(&Mlir::print(&m));
    if !missing.is_empty() {
        return Err(Error::Run {
            message: format!(
                "{what}: its kernels call {}, which libdevice defines (the CUDA toolkit's \
                 nvvm/libdevice/libdevice.10.bc), and none was found: set TESSERA_LIBDEVICE \
                 to the file, or CUDA_HOME to the toolkit",
                missing.join(", ")
            ),
        });
    }
    Ok(m)
}

/// A device's module through its pipeline and the JIT: an NVIDIA device's for its GPU
/// under [`GpuDevices::OnGpu`], every other for this CPU; marked for profiling where
/// `profiled`.
fn jit_device(
    mlir: &Mlir,
    manifest: &Manifest,
    d: &crate::manifest::ManifestDevice,
    text: &str,
    opt_level: usize,
    gpus: GpuDevices,
    profiled: bool,
) -> Result<Jit, Error> {
    let marked = if profiled {
        " marked for profiling"
    } else {
        ""
    };
    let what = format!("{} ({}{marked})", d.module, d.name);
    let make = |m: &melior::ir::Module<'_>| {
        if profiled {
            Jit::profiled(m, opt_level)
        } else {
            Jit::new(m, opt_level)
        }
    };
    if gpus == GpuDevices::OnGpu && d.lowering == "nvptx" {
        let gpu = gpu_for(manifest, d)?;
        let m = lowered_gpu(mlir, d, text, &what)?;
        return Ok(make(&m).on_gpu(gpu));
    }
    let m = lowered(mlir, text, &what)?;
    Ok(make(&m))
}

/// With [`GpuDevices::OnGpu`], the program must have an NVIDIA device.
fn check_gpus(manifest: &Manifest, gpus: GpuDevices) -> Result<(), Error> {
    if gpus == GpuDevices::OnGpu && !manifest.devices.iter().any(|d| d.lowering == "nvptx") {
        return Err(Error::Run {
            message: format!(
                "--gpu: the program has no NVIDIA GPU device (its devices: {})",
                manifest
                    .devices
                    .iter()
                    .map(|d| format!("{} ({})", d.name, d.lowering))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    Ok(())
}

/// The module of device `d` in `modules`.
fn module_of<'m>(
    modules: &'m BTreeMap<String, String>,
    d: &crate::manifest::ManifestDevice,
) -> Result<&'m String, Error> {
    modules.get(&d.name).ok_or_else(|| Error::Run {
        message: format!("no module for device {}", d.name),
    })
}

/// Weights as the runner's buffers.
fn buffers(weights: &BTreeMap<String, Tensor>) -> BTreeMap<String, Buffer> {
    weights
        .iter()
        .map(|(n, t)| (n.clone(), Buffer::from_tensor(t)))
        .collect()
}

/// A compiled directory's weights file, mapped (none where the manifest names none).
fn dir_weights(dir: &Path, manifest: &Manifest) -> Result<BTreeMap<String, Buffer>, Error> {
    match &manifest.weights {
        Some(w) => crate::weights::map(&dir.join(w)),
        None => Ok(BTreeMap::new()),
    }
}

/// Each device's module through its pipeline and the JIT ([`jit_device`]), marked for
/// profiling ([`profile::instrument`]) where `profiled`; the marks' sites, numbered
/// across the devices in manifest order (none unmarked).
fn jit_all(
    mlir: &Mlir,
    manifest: &Manifest,
    text_of: &mut dyn FnMut(&crate::manifest::ManifestDevice) -> Result<String, Error>,
    opt_level: usize,
    gpus: GpuDevices,
    profiled: bool,
) -> Result<(BTreeMap<String, Jit>, Vec<profile::Site>), Error> {
    check_gpus(manifest, gpus)?;
    let mut jits = BTreeMap::new();
    let mut sites = Vec::new();
    for d in &manifest.devices {
        let mut text = text_of(d)?;
        if profiled {
            let (marked, more) = profile::instrument(&text, &d.name, sites.len())?;
            sites.extend(more);
            text = marked;
        }
        let jit = jit_device(mlir, manifest, d, &text, opt_level, gpus, profiled)?;
        jits.insert(d.name.clone(), jit);
    }
    Ok((jits, sites))
}

/// Parses a type in tessera's text form (`f32[1, 16]`).
pub fn parse_type(s: &str) -> Result<TensorType, Error> {
    let bad = || Error::Run {
        message: format!("bad type `{s}` in the manifest (expected a static type like f32[1, 16])"),
    };
    let (e, rest) = s.split_once('[').ok_or_else(bad)?;
    let elem = tessera_ir::ElemType::from_name(e.trim()).ok_or_else(bad)?;
    let inner = rest.trim_end().strip_suffix(']').ok_or_else(bad)?;
    let dims: Vec<u64> = if inner.trim().is_empty() {
        Vec::new()
    } else {
        inner
            .split(',')
            .map(|d| d.trim().parse::<u64>().map_err(|_| bad()))
            .collect::<Result<_, _>>()?
    };
    Ok(TensorType::fixed(elem, &dims))
}

fn read(p: &Path) -> Result<String, Error> {
    std::fs::read_to_string(p).map_err(|e| Error::Run {
        message: format!("{}: {e}", p.display()),
    })
}

/// A compiled directory's `manifest.json`, of the format this tessera reads.
fn read_manifest(dir: &Path) -> Result<Manifest, Error> {
    let mpath = dir.join("manifest.json");
    let manifest: Manifest = serde_json::from_str(&read(&mpath)?).map_err(|e| Error::Run {
        message: format!("{}: {e}", mpath.display()),
    })?;
    if manifest.format != crate::manifest::FORMAT {
        return Err(Error::Run {
            message: format!(
                "{}: format `{}`, this tessera reads `{}`",
                mpath.display(),
                manifest.format,
                crate::manifest::FORMAT
            ),
        });
    }
    Ok(manifest)
}

impl Runner {
    /// JIT-compiles every device module (MLIR text per device name) for this CPU.
    pub fn new(
        mlir: &Mlir,
        manifest: Manifest,
        modules: &BTreeMap<String, String>,
        weights: BTreeMap<String, Tensor>,
        opt_level: usize,
        gpus: GpuDevices,
    ) -> Result<Runner, Error> {
        let start = Instant::now();
        let (jits, _) = jit_all(
            mlir,
            &manifest,
            &mut |d| module_of(modules, d).cloned(),
            opt_level,
            gpus,
            false,
        )?;
        Runner::with_engines(manifest, jits, buffers(&weights), start)
    }

    /// [`Runner::new`] with every module marked for profiling; the marks' sites
    /// ([`profile`]).
    pub fn new_profiled(
        mlir: &Mlir,
        manifest: Manifest,
        modules: &BTreeMap<String, String>,
        weights: BTreeMap<String, Tensor>,
        opt_level: usize,
        gpus: GpuDevices,
    ) -> Result<(Runner, Vec<profile::Site>), Error> {
        let start = Instant::now();
        let (jits, sites) = jit_all(
            mlir,
            &manifest,
            &mut |d| module_of(modules, d).cloned(),
            opt_level,
            gpus,
            true,
        )?;
        Ok((
            Runner::with_engines(manifest, jits, buffers(&weights), start)?,
            sites,
        ))
    }

    /// The runner of compiled modules, one per device.
    fn with_engines(
        manifest: Manifest,
        jits: BTreeMap<String, Jit>,
        weights: BTreeMap<String, Buffer>,
        start: Instant,
    ) -> Result<Runner, Error> {
        let input_types = manifest
            .inputs
            .iter()
            .map(|i| parse_type(&i.ty))
            .collect::<Result<_, _>>()?;
        let result_types = manifest
            .steps
            .iter()
            .map(|st| st.results.iter().map(|r| parse_type(&r.ty)).collect())
            .collect::<Result<_, _>>()?;
        // Every weight a step reads is there, with the type the compiled code reads.
        for st in &manifest.steps {
            for a in &st.args {
                let Arg::Weight {
                    weight,
                    per_device,
                    ty,
                } = a
                else {
                    continue;
                };
                let names: Vec<String> = match (per_device, &st.mesh) {
                    (true, Some(devices)) => {
                        devices.iter().map(|d| format!("{weight}@{d}")).collect()
                    }
                    _ => vec![weight.clone()],
                };
                let want = parse_type(ty)?;
                for n in names {
                    match weights.get(&n) {
                        Some(b) if b.ty == want => {}
                        Some(b) => {
                            return Err(Error::Run {
                                message: format!(
                                    "weight {n} is {} in the weights file, step {} reads {want}",
                                    b.ty, st.id
                                ),
                            });
                        }
                        None => {
                            return Err(Error::Run {
                                message: format!(
                                    "step {} reads weight {n}, which the weights file lacks",
                                    st.id
                                ),
                            });
                        }
                    }
                }
            }
        }
        let largest = manifest.meshes.iter().map(|mm| mm.devices.len()).max();
        let mesh_index = (0..largest.unwrap_or(0))
            .map(|i| {
                Tensor::from_le_bytes(tessera_ir::ElemType::I64, &[], &(i as i64).to_le_bytes())
                    .map(|t| Buffer::from_tensor(&t))
            })
            .collect::<Result<_, _>>()
            .map_err(|e| Error::Run {
                message: format!("mesh index: {e}"),
            })?;
        Ok(Runner {
            manifest,
            jits,
            weights,
            input_types,
            result_types,
            mesh_index,
            compile_time: start.elapsed(),
        })
    }

    /// Loads a compiled directory (`manifest.json`, the modules, the weights). A device's
    /// shared library, when the manifest names one built from the module as it is now, is
    /// loaded; the other modules are JIT-compiled, with an MLIR context made only then.
    pub fn load(dir: &Path, opt_level: usize, gpus: GpuDevices) -> Result<Runner, Error> {
        let manifest = read_manifest(dir)?;
        check_gpus(&manifest, gpus)?;
        let start = Instant::now();
        let mut mlir: Option<Mlir> = None;
        let mut jits = BTreeMap::new();
        let mut stale = Vec::new();
        let cpu = crate::native::host_cpu();
        for d in &manifest.devices {
            let text = read(&dir.join(&d.module))?;
            let on_gpu = gpus == GpuDevices::OnGpu && d.lowering == "nvptx";
            let engine = match &d.library {
                Some(lib) if !on_gpu => match unusable(lib, dir, d, &text, &cpu, opt_level) {
                    None => Jit::library(&dir.join(&lib.file))?,
                    Some(why) => {
                        stale.push(format!("{} ({why})", lib.file));
                        let mlir = mlir.get_or_insert_with(Mlir::new);
                        jit_device(mlir, &manifest, d, &text, opt_level, gpus, false)?
                    }
                },
                _ => {
                    let mlir = mlir.get_or_insert_with(Mlir::new);
                    jit_device(mlir, &manifest, d, &text, opt_level, gpus, false)?
                }
            };
            jits.insert(d.name.clone(), engine);
        }
        if !stale.is_empty() {
            eprintln!(
                "note: JIT-compiling instead of loading {}",
                stale.join(", ")
            );
        }
        let weights = dir_weights(dir, &manifest)?;
        Runner::with_engines(manifest, jits, weights, start)
    }

    /// Loads a compiled directory with every device's module marked for profiling and
    /// JIT-compiled (a library `compile -o` built has no marks); the marks' sites
    /// ([`profile`]).
    pub fn load_profiled(
        dir: &Path,
        opt_level: usize,
        gpus: GpuDevices,
    ) -> Result<(Runner, Vec<profile::Site>), Error> {
        let manifest = read_manifest(dir)?;
        let start = Instant::now();
        let (jits, sites) = jit_all(
            &Mlir::new(),
            &manifest,
            &mut |d| read(&dir.join(&d.module)),
            opt_level,
            gpus,
            true,
        )?;
        let weights = dir_weights(dir, &manifest)?;
        Ok((Runner::with_engines(manifest, jits, weights, start)?, sites))
    }

    /// How the runner got its code and how long that took, for messages: `JIT compile 391.1
    /// ms`, or `loaded 1 library in 2.0 ms` (weights read from a directory included).
    pub fn start_note(&self) -> String {
        let ms = self.compile_time.as_secs_f64() * 1e3;
        let libs = self.jits.values().filter(|j| j.is_library()).count();
        match (libs, self.jits.len() - libs) {
            (0, _) => format!("JIT compile {ms:.1} ms"),
            (n, 0) => format!("loaded {n} {} in {ms:.1} ms", plural(n)),
            (n, k) => format!(
                "loaded {n} {}, JIT-compiled {k} module{}: {ms:.1} ms",
                plural(n),
                if k == 1 { "" } else { "s" }
            ),
        }
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Runs the program on `inputs` (in the manifest's input order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        self.check_count(inputs.len())?;
        for ((i, t), want) in self
            .manifest
            .inputs
            .iter()
            .zip(inputs)
            .zip(&self.input_types)
        {
            if *want != t.ty() {
                return Err(Error::Run {
                    message: format!("input {} is {}, the program takes {}", i.name, t.ty(), want),
                });
            }
        }
        let mut encoded: Vec<Buffer> = inputs.iter().map(Buffer::from_tensor).collect();
        let outs = self.run_buffers(&mut encoded)?;
        Runner::decode(&encoded, &outs)
    }

    /// The output tensors of a [`Runner::run_buffers`] call on `inputs`.
    pub fn decode(inputs: &[Buffer], outs: &[OutBuf]) -> Result<Vec<Tensor>, Error> {
        outs.iter()
            .map(|o| match o {
                OutBuf::Input(i) => inputs
                    .get(*i)
                    .ok_or_else(|| Error::Run {
                        message: format!("an output names input {i}, which is not there"),
                    })?
                    .to_tensor(),
                OutBuf::Buffer(b) => b.to_tensor(),
            })
            .collect()
    }

    fn check_count(&self, n: usize) -> Result<(), Error> {
        let m = &self.manifest;
        if n == m.inputs.len() {
            return Ok(());
        }
        Err(Error::Run {
            message: format!(
                "the program takes {} inputs ({}), got {n}",
                m.inputs.len(),
                m.inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
        })
    }

    /// Runs the program on encoded inputs (in the manifest's input order), which stay
    /// resident between runs: a training step's donated state is updated in place in its
    /// input's buffer (see [`crate::manifest::Donated`]), and an output that is that state's
    /// next value is [`OutBuf::Input`].
    pub fn run_buffers(&self, inputs: &mut [Buffer]) -> Result<Vec<OutBuf>, Error> {
        let m = &self.manifest;
        self.check_count(inputs.len())?;
        for ((i, b), want) in m.inputs.iter().zip(inputs.iter()).zip(&self.input_types) {
            if *want != b.ty {
                return Err(Error::Run {
                    message: format!("input {} is {}, the program takes {}", i.name, b.ty, want),
                });
            }
        }
        let by_name: BTreeMap<&str, usize> = m
            .inputs
            .iter()
            .enumerate()
            .map(|(k, i)| (i.name.as_str(), k))
            .collect();
        // Per step, per result: one tensor, or one per mesh device for a step on a mesh.
        let mut results: Vec<Vec<Vec<Buffer>>> = Vec::with_capacity(m.steps.len());
        let missing = |a: &Arg| Error::Run {
            message: format!("the manifest refers to a missing value: {a:?}"),
        };
        let (weights, mesh_index) = (&self.weights, &self.mesh_index);
        // State held split (ZeRO-1): this runner keeps it whole between runs and hands each
        // mesh device its block.
        let mut blocks: BTreeMap<(usize, usize), Buffer> = BTreeMap::new();
        for (k, i) in m.inputs.iter().enumerate() {
            let Some(h) = &i.held else { continue };
            let (mesh, sharding) = m.held_layout(h).ok_or_else(|| unknown_mesh(h))?;
            let bytes = inputs[k].to_tensor()?.to_le_bytes();
            for d in 0..mesh.devices.len() {
                let (ty, block) =
                    crate::lower::spmd::slice_bytes(&mesh, &sharding, &inputs[k].ty, &bytes, d)
                        .map_err(|e| Error::Run {
                            message: format!("input {}: {}", i.name, e.0),
                        })?;
                let t = Tensor::from_typed_le_bytes(&ty, &block).map_err(|e| Error::Run {
                    message: format!("input {}: {e}", i.name),
                })?;
                blocks.insert((k, d), Buffer::from_tensor(&t));
            }
        }
        let blocks = &blocks;
        for (st, tys) in m.steps.iter().zip(&self.result_types) {
            if let Some(kind) = &st.collective {
                let Some(Arg::Step { step, result, .. }) = st.args.first() else {
                    return Err(missing(&st.args[0]));
                };
                let parts = results
                    .get(*step)
                    .and_then(|r| r.get(*result))
                    .ok_or_else(|| missing(&st.args[0]))?;
                let whole = collective(m, st, kind, parts, tys)?;
                results.push(vec![vec![Buffer::from_tensor(&whole)]]);
                continue;
            }
            let devices: Vec<(Option<(usize, &str)>, &str)> = match &st.mesh {
                Some(devs) => devs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| (Some((i, d.as_str())), d.as_str()))
                    .collect(),
                None => vec![(None, st.device.as_str())],
            };
            // Donated state leaves `inputs` for the call (the function writes it) and returns.
            let mut taken: Vec<(usize, Buffer)> = Vec::with_capacity(st.donated.len());
            for d in &st.donated {
                let i = *by_name.get(d.input.as_str()).ok_or_else(|| Error::Run {
                    message: format!("step {} donates unknown input `{}`", st.id, d.input),
                })?;
                if st.mesh.is_some() || taken.iter().any(|(k, _)| *k == i) {
                    return Err(Error::Run {
                        message: format!("step {}: cannot donate input `{}`", st.id, d.input),
                    });
                }
                let empty = Buffer::zeroed(inputs[i].ty.clone(), 0);
                taken.push((i, std::mem::replace(&mut inputs[i], empty)));
            }
            let mut per_result: Vec<Vec<Buffer>> = vec![Vec::new(); tys.len()];
            {
                let mut writes: Vec<Option<&mut Buffer>> =
                    taken.iter_mut().map(|(_, b)| Some(b)).collect();
                for (dev, name) in devices {
                    let mut args: Vec<ArgRef<'_>> = Vec::with_capacity(st.args.len());
                    for a in &st.args {
                        let donated = match a {
                            Arg::Input { input, .. } => {
                                st.donated.iter().position(|d| d.input == *input)
                            }
                            _ => None,
                        };
                        match donated {
                            Some(k) => args
                                .push(ArgRef::Write(writes[k].take().ok_or_else(|| missing(a))?)),
                            None => {
                                let b = lookup(
                                    a, dev, &by_name, inputs, blocks, weights, mesh_index, &results,
                                )
                                .ok_or_else(|| missing(a))?;
                                // Weights and mesh indices live as long as the runner.
                                args.push(match a {
                                    Arg::Weight { .. } | Arg::MeshIndex { .. } => {
                                        ArgRef::Constant(b)
                                    }
                                    _ => ArgRef::Read(b),
                                });
                            }
                        }
                    }
                    if writes.iter().any(Option::is_some) {
                        return Err(Error::Run {
                            message: format!(
                                "step {}: a donated input is not among its arguments",
                                st.id
                            ),
                        });
                    }
                    let jit = self.jits.get(name).ok_or_else(|| Error::Run {
                        message: format!("step {} runs on {name}, which has no module", st.id),
                    })?;
                    for (k, t) in jit
                        .call_buffers(&st.function, &mut args, tys)?
                        .into_iter()
                        .enumerate()
                    {
                        per_result[k].push(t);
                    }
                }
            }
            for (i, b) in taken {
                inputs[i] = b;
            }
            results.push(per_result);
        }
        // Each result moves to the first output that names it; later ones copy it.
        let mut outs: Vec<OutBuf> = Vec::with_capacity(m.outputs.len());
        let mut moved: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for o in &m.outputs {
            let out = match &o.source {
                // The next value of a state held split: its blocks made whole.
                Arg::Step { step, result, .. } if o.held.is_some() => {
                    let parts = results
                        .get(*step)
                        .and_then(|r| r.get(*result))
                        .ok_or_else(|| missing(&o.source))?;
                    let h = o.held.as_ref().ok_or_else(|| missing(&o.source))?;
                    let (mesh, sharding) = m.held_layout(h).ok_or_else(|| unknown_mesh(h))?;
                    // The whole type: each block's extents times the mesh axes they split.
                    let block = parse_type(o.source.ty())?;
                    let dims: Vec<u64> = block
                        .static_dims()
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                        .map(|(a, &d)| {
                            let axes = sharding.axes.get(a).map(Vec::as_slice).unwrap_or_default();
                            d * mesh.size_of(axes.iter().copied())
                        })
                        .collect();
                    let ty = TensorType::fixed(block.elem, &dims);
                    let whole = assemble(&mesh, &sharding, &ty, parts).map_err(|e| Error::Run {
                        message: format!("output {}: {}", o.name, e.0),
                    })?;
                    OutBuf::Buffer(Buffer::from_tensor(&whole))
                }
                Arg::Input { input, .. } => OutBuf::Input(
                    *by_name
                        .get(input.as_str())
                        .ok_or_else(|| missing(&o.source))?,
                ),
                Arg::Step { step, result, .. } => match moved.get(&(*step, *result)) {
                    Some(&k) => match &outs[k] {
                        OutBuf::Buffer(b) => OutBuf::Buffer(b.clone()),
                        OutBuf::Input(i) => OutBuf::Input(*i),
                    },
                    None => {
                        let first = results
                            .get_mut(*step)
                            .and_then(|r| r.get_mut(*result))
                            .and_then(|copies| copies.first_mut())
                            .ok_or_else(|| missing(&o.source))?;
                        let empty = Buffer::zeroed(first.ty.clone(), 0);
                        moved.insert((*step, *result), outs.len());
                        OutBuf::Buffer(std::mem::replace(first, empty))
                    }
                },
                a => OutBuf::Buffer(
                    lookup(
                        a, None, &by_name, inputs, blocks, weights, mesh_index, &results,
                    )
                    .ok_or_else(|| missing(a))?
                    .clone(),
                ),
            };
            outs.push(out);
        }
        Ok(outs)
    }
}

/// Where an output of [`Runner::run_buffers`] is.
#[derive(Debug)]
pub enum OutBuf {
    /// In the input buffer of that index (a donated state's next value, or an input).
    Input(usize),
    /// Its own buffer.
    Buffer(Buffer),
}

/// The value of a collective step (run here, on the host, from every device's part).
fn collective(
    m: &Manifest,
    st: &crate::manifest::ManifestStep,
    kind: &str,
    parts: &[Buffer],
    tys: &[TensorType],
) -> Result<Tensor, Error> {
    Ok(match kind {
        // The sum of every mesh device's partial (a reduce-scatter's devices then cut
        // their blocks from it).
        "all-reduce" | "reduce-scatter" => {
            let mut sum = parts[0].to_tensor()?;
            for p in &parts[1..] {
                sum = tessera_ir::interp::eval_op(
                    &tessera_ir::Op::Binary(tessera_ir::BinaryOp::Add),
                    &[&sum, &p.to_tensor()?],
                )
                .map_err(|e| Error::Run {
                    message: format!("step {} (all-reduce): {e}", st.id),
                })?
                .remove(0);
            }
            sum
        }
        // Every device's block in its place (an all-to-all's devices then cut their blocks
        // of the other split from it).
        "all-gather" | "all-to-all" => {
            let mm = m.mesh_of(&st.device).ok_or_else(|| Error::Run {
                message: format!("step {} gathers over a mesh the manifest lacks", st.id),
            })?;
            let mesh = mm.to_ir();
            let sharding = tessera_ir::Sharding {
                axes: st.sharding.clone().unwrap_or_default(),
            };
            let ty = tys[0].clone();
            let mut bytes = vec![
                0u8;
                ty.static_dims().unwrap_or_default().iter().product::<u64>()
                    as usize
                    * crate::jit::elem_bytes(ty.elem)
            ];
            for (i, p) in parts.iter().enumerate() {
                let block = p.to_tensor()?.to_le_bytes();
                crate::lower::spmd::insert_block(&mesh, &sharding, &ty, &mut bytes, &block, i)
                    .map_err(|e| Error::Run {
                        message: format!("step {} (all-gather): {}", st.id, e.0),
                    })?;
            }
            Tensor::from_typed_le_bytes(&ty, &bytes).map_err(|e| Error::Run {
                message: format!("step {} (all-gather): {e}", st.id),
            })?
        }
        other => {
            return Err(Error::Run {
                message: format!("step {}: unknown collective `{other}`", st.id),
            });
        }
    })
}

/// The error for a state held on a mesh the manifest lacks.
fn unknown_mesh(h: &crate::manifest::Held) -> Error {
    Error::Run {
        message: format!("state held on {}, a mesh the manifest lacks", h.mesh),
    }
}

/// The whole tensor of type `ty` from every mesh device's block of it (`parts`, in the
/// mesh's order).
fn assemble(
    mesh: &tessera_ir::Mesh,
    sharding: &tessera_ir::Sharding,
    ty: &TensorType,
    parts: &[Buffer],
) -> Result<Tensor, crate::lower::LowerError> {
    let n = ty.static_dims().unwrap_or_default().iter().product::<u64>() as usize;
    let mut bytes = vec![0u8; n * crate::jit::elem_bytes(ty.elem)];
    for (i, p) in parts.iter().enumerate() {
        let block = p
            .to_tensor()
            .map_err(|e| crate::lower::LowerError(e.to_string()))?
            .to_le_bytes();
        crate::lower::spmd::insert_block(mesh, sharding, ty, &mut bytes, &block, i)?;
    }
    Tensor::from_typed_le_bytes(ty, &bytes).map_err(|e| crate::lower::LowerError(e.to_string()))
}

/// The buffer argument `a` names, for mesh device `dev` (index and name) if any.
#[allow(clippy::too_many_arguments)]
fn lookup<'a>(
    a: &Arg,
    dev: Option<(usize, &str)>,
    by_name: &BTreeMap<&str, usize>,
    inputs: &'a [Buffer],
    blocks: &'a BTreeMap<(usize, usize), Buffer>,
    weights: &'a BTreeMap<String, Buffer>,
    mesh_index: &'a [Buffer],
    results: &'a [Vec<Vec<Buffer>>],
) -> Option<&'a Buffer> {
    match a {
        Arg::Input {
            input,
            per_device: true,
            ..
        } => by_name
            .get(input.as_str())
            .and_then(|&i| blocks.get(&(i, dev?.0))),
        Arg::Input { input, .. } => by_name.get(input.as_str()).and_then(|&i| inputs.get(i)),
        Arg::Weight {
            weight, per_device, ..
        } => match (per_device, dev) {
            (true, Some((_, d))) => weights.get(&format!("{weight}@{d}")),
            (true, None) => None,
            (false, _) => weights.get(weight),
        },
        Arg::MeshIndex { .. } => dev.and_then(|(i, _)| mesh_index.get(i)),
        // A value from another device or mesh (a transfer) is whole on every device of its
        // step: any copy is it.
        Arg::Step {
            step,
            result,
            transfer,
            ..
        } => results
            .get(*step)
            .and_then(|r| r.get(*result))
            .and_then(|copies| match copies.len() {
                1 => copies.first(),
                _ if transfer.is_some() => copies.first(),
                _ => copies.get(dev.map_or(0, |(i, _)| i)),
            }),
    }
}
