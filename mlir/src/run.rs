//! Running a lowered program on this CPU: every device's module goes through the CPU
//! pipeline and the JIT, then the steps run in the manifest's order, each result kept until
//! the steps (and outputs) that need it have read it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tessera_ir::{Tensor, TensorType};

use crate::jit::Buffer;
use crate::manifest::{Arg, Manifest};
use crate::{Error, Jit, Mlir, PipelineOptions, pipelines};

/// The compiled, runnable form of a program: one JIT per device.
pub struct Runner {
    manifest: Manifest,
    jits: BTreeMap<String, Jit>,
    weights: BTreeMap<String, Buffer>,
    /// The manifest's types, parsed once: each input's, each step's results'.
    input_types: Vec<TensorType>,
    result_types: Vec<Vec<TensorType>>,
    /// The mesh index argument of each mesh device (`tensor<i64>`).
    mesh_index: Vec<Buffer>,
    /// Time spent in MLIR pipelines and the JIT.
    pub compile_time: Duration,
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

impl Runner {
    /// JIT-compiles every device module (MLIR text per device name) for this CPU.
    pub fn new(
        mlir: &Mlir,
        manifest: Manifest,
        modules: &BTreeMap<String, String>,
        weights: BTreeMap<String, Tensor>,
        opt_level: usize,
    ) -> Result<Runner, Error> {
        let start = Instant::now();
        let mut jits = BTreeMap::new();
        for d in &manifest.devices {
            let text = modules.get(&d.name).ok_or_else(|| Error::Run {
                message: format!("no module for device {}", d.name),
            })?;
            let what = format!("{} ({})", d.module, d.name);
            let mut m = mlir.parse(text, &what)?;
            mlir.run_pipeline(&mut m, pipelines::CPU, &PipelineOptions::default(), &what)?;
            jits.insert(d.name.clone(), Jit::new(&m, opt_level));
        }
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
        let mesh_index = (0..manifest.mesh.as_ref().map_or(0, |mm| mm.devices.len()))
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
            weights: weights
                .iter()
                .map(|(n, t)| (n.clone(), Buffer::from_tensor(t)))
                .collect(),
            input_types,
            result_types,
            mesh_index,
            compile_time: start.elapsed(),
        })
    }

    /// Loads a compiled directory (`manifest.json`, the modules, the weights).
    pub fn load(mlir: &Mlir, dir: &Path, opt_level: usize) -> Result<Runner, Error> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|e| Error::Run {
                message: format!("{}: {e}", p.display()),
            })
        };
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
        let mut modules = BTreeMap::new();
        for d in &manifest.devices {
            modules.insert(d.name.clone(), read(&dir.join(&d.module))?);
        }
        let weights = match &manifest.weights {
            Some(w) => crate::weights::read(&dir.join(w))?,
            None => BTreeMap::new(),
        };
        Runner::new(mlir, manifest, &modules, weights, opt_level)
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Runs the program on `inputs` (in the manifest's input order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, Error> {
        let m = &self.manifest;
        if inputs.len() != m.inputs.len() {
            return Err(Error::Run {
                message: format!(
                    "the program takes {} inputs ({}), got {}",
                    m.inputs.len(),
                    m.inputs
                        .iter()
                        .map(|i| i.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    inputs.len()
                ),
            });
        }
        for ((i, t), want) in m.inputs.iter().zip(inputs).zip(&self.input_types) {
            if *want != t.ty() {
                return Err(Error::Run {
                    message: format!("input {} is {}, the program takes {}", i.name, t.ty(), want),
                });
            }
        }
        let encoded: Vec<Buffer> = inputs.iter().map(Buffer::from_tensor).collect();
        let by_name: BTreeMap<&str, &Buffer> = m
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .zip(&encoded)
            .collect();
        // Per step, per result: one tensor, or one per mesh device for a step on a mesh.
        let mut results: Vec<Vec<Vec<Buffer>>> = Vec::with_capacity(m.steps.len());
        let missing = |a: &Arg| Error::Run {
            message: format!("the manifest refers to a missing value: {a:?}"),
        };
        let (weights, mesh_index) = (&self.weights, &self.mesh_index);
        for (st, tys) in m.steps.iter().zip(&self.result_types) {
            if let Some(kind) = &st.collective {
                let Some(Arg::Step { step, result, .. }) = st.args.first() else {
                    return Err(missing(&st.args[0]));
                };
                let parts = results
                    .get(*step)
                    .and_then(|r| r.get(*result))
                    .ok_or_else(|| missing(&st.args[0]))?;
                let whole = match kind.as_str() {
                    // The sum of every mesh device's partial.
                    "all-reduce" => {
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
                    // Every device's block in its place.
                    "all-gather" => {
                        let mm = m.mesh.as_ref().ok_or_else(|| Error::Run {
                            message: format!(
                                "step {} gathers over a mesh the manifest lacks",
                                st.id
                            ),
                        })?;
                        let mesh = tessera_ir::Mesh {
                            name: mm.name.clone(),
                            shape: mm.shape.clone(),
                            devices: mm.devices.clone(),
                        };
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
                            crate::lower::spmd::insert_block(
                                &mesh, &sharding, &ty, &mut bytes, &block, i,
                            )
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
                };
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
            let mut per_result: Vec<Vec<Buffer>> = vec![Vec::new(); tys.len()];
            for (dev, name) in devices {
                let refs: Vec<&Buffer> = st
                    .args
                    .iter()
                    .map(|a| {
                        lookup(a, dev, &by_name, weights, mesh_index, &results)
                            .ok_or_else(|| missing(a))
                    })
                    .collect::<Result<_, _>>()?;
                let jit = self.jits.get(name).ok_or_else(|| Error::Run {
                    message: format!("step {} runs on {name}, which has no module", st.id),
                })?;
                for (k, t) in jit
                    .call_buffers(&st.function, &refs, tys)?
                    .into_iter()
                    .enumerate()
                {
                    per_result[k].push(t);
                }
            }
            results.push(per_result);
        }
        m.outputs
            .iter()
            .map(|o| {
                lookup(&o.source, None, &by_name, weights, mesh_index, &results)
                    .ok_or_else(|| missing(&o.source))?
                    .to_tensor()
            })
            .collect()
    }
}

/// The buffer argument `a` names, for mesh device `dev` (index and name) if any.
fn lookup<'a>(
    a: &Arg,
    dev: Option<(usize, &str)>,
    inputs: &BTreeMap<&str, &'a Buffer>,
    weights: &'a BTreeMap<String, Buffer>,
    mesh_index: &'a [Buffer],
    results: &'a [Vec<Vec<Buffer>>],
) -> Option<&'a Buffer> {
    match a {
        Arg::Input { input, .. } => inputs.get(input.as_str()).copied(),
        Arg::Weight {
            weight, per_device, ..
        } => match (per_device, dev) {
            (true, Some((_, d))) => weights.get(&format!("{weight}@{d}")),
            (true, None) => None,
            (false, _) => weights.get(weight),
        },
        Arg::MeshIndex { .. } => dev.and_then(|(i, _)| mesh_index.get(i)),
        Arg::Step { step, result, .. } => {
            results
                .get(*step)
                .and_then(|r| r.get(*result))
                .and_then(|copies| match copies.len() {
                    1 => copies.first(),
                    _ => copies.get(dev.map_or(0, |(i, _)| i)),
                })
        }
    }
}
