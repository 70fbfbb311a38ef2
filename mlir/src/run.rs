//! Running a lowered program on this CPU: every device's module goes through the CPU
//! pipeline and the JIT, then the steps run in the manifest's order, each result kept until
//! the steps (and outputs) that need it have read it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use tessera_ir::{Tensor, TensorType};

use crate::manifest::{Arg, Manifest};
use crate::{Error, Jit, Mlir, PipelineOptions, pipelines};

/// The compiled, runnable form of a program: one JIT per device.
pub struct Runner {
    manifest: Manifest,
    jits: BTreeMap<String, Jit>,
    weights: BTreeMap<String, Tensor>,
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
        Ok(Runner {
            manifest,
            jits,
            weights,
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
        for (i, t) in m.inputs.iter().zip(inputs) {
            let want = parse_type(&i.ty)?;
            if want != t.ty() {
                return Err(Error::Run {
                    message: format!("input {} is {}, the program takes {}", i.name, t.ty(), want),
                });
            }
        }
        let by_name: BTreeMap<&str, &Tensor> = m
            .inputs
            .iter()
            .map(|i| i.name.as_str())
            .zip(inputs)
            .collect();
        let mut results: Vec<Vec<Tensor>> = Vec::with_capacity(m.steps.len());
        let get = |a: &Arg, results: &Vec<Vec<Tensor>>| -> Result<Tensor, Error> {
            match a {
                Arg::Input { input, .. } => by_name.get(input.as_str()).map(|t| (*t).clone()),
                Arg::Weight { weight, .. } => self.weights.get(weight).cloned(),
                Arg::Step { step, result, .. } => {
                    results.get(*step).and_then(|r| r.get(*result)).cloned()
                }
            }
            .ok_or_else(|| Error::Run {
                message: format!("the manifest refers to a missing value: {a:?}"),
            })
        };
        for st in &m.steps {
            let args: Vec<Tensor> = st
                .args
                .iter()
                .map(|a| get(a, &results))
                .collect::<Result<_, _>>()?;
            let refs: Vec<&Tensor> = args.iter().collect();
            let tys: Vec<TensorType> = st
                .results
                .iter()
                .map(|r| parse_type(&r.ty))
                .collect::<Result<_, _>>()?;
            let jit = self.jits.get(&st.device).ok_or_else(|| Error::Run {
                message: format!("step {} runs on {}, which has no module", st.id, st.device),
            })?;
            results.push(jit.call(&st.function, &refs, &tys)?);
        }
        m.outputs.iter().map(|o| get(&o.source, &results)).collect()
    }
}
