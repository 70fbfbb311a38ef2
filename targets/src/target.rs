//! The `Target` trait: a target's description plus what a file cannot say (cost hooks, and a
//! device's own MLIR pipeline and artifact), and the registry of targets that plugins add in
//! code.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::ir::{Graph, OpId};
use crate::{Device, TargetError, TargetSpec, Work};

/// A function that lowers a device's module: given the device and the module as MLIR text (the
/// portable linalg-on-tensors module `tessera compile -o` writes as `<device>.mlir`), it
/// returns the lowered module as MLIR text, or a message saying why it cannot.
pub type ModuleFn = Arc<dyn Fn(&Device, &str) -> Result<String, String> + Send + Sync>;

/// A device's own MLIR pipeline, what [`Target::device_pipeline`] returns.
///
/// This is the `mlir-opt` / IREE shape of a backend: a vendor's lowering is a pass pipeline
/// (IREE's `buildTranslationPassPipeline`), written here as the textual pipeline MLIR tools
/// already accept, so this crate never links MLIR and a pipeline can be tried with `mlir-opt
/// --pass-pipeline='...'` first. Where a pipeline string is not enough (the transform dialect
/// driven from Rust, an external compiler), [`DevicePipeline::Module`] is a function over
/// MLIR text: text is the one form of a module that crosses crate (and tool) boundaries
/// without a shared MLIR context, and the function may run `tessera_mlir` itself.
///
/// tessera parses and verifies what either one gives before using it, so a broken pipeline
/// is an error naming the device, not a broken file.
#[derive(Clone)]
pub enum DevicePipeline {
    /// An `mlir-opt --pass-pipeline` string anchored on the module (`builtin.module(...)`),
    /// run in-process on the device's module. An unknown pass is an error; a pass nested at
    /// the wrong level aborts MLIR itself (test the string with `mlir-opt` first).
    Passes(String),
    /// A function given the device's module as MLIR text, returning the lowered module.
    Module(ModuleFn),
}

impl fmt::Debug for DevicePipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevicePipeline::Passes(p) => f.debug_tuple("Passes").field(p).finish(),
            DevicePipeline::Module(_) => f.write_str("Module(<fn>)"),
        }
    }
}

/// A file a device's backend writes into the output directory of `tessera compile -o`
/// ([`Target::device_artifact`]): the program its runtime loads, IREE's serialized
/// executable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The file name: `<device>.<something>` (`npu0.npu.mlir`), a plain name in the output
    /// directory that is none of tessera's own files (`<device>.mlir`, `.lowered.mlir`, `.ll`,
    /// `.o`, `.ptx`).
    pub name: String,
    /// Its contents.
    pub bytes: Vec<u8>,
}

/// A hardware target as the compiler uses it.
///
/// Every target file is a target ([`TargetSpec`] implements this trait with the defaults). A
/// plugin crate implements it for what a description cannot say: measured or analytic op
/// times that replace the roofline, its own transfer model, or extra rules about which ops a
/// device can run. The cost model asks these hooks first and falls back to the description.
///
/// Two hooks make a vendor backend a plugin rather than a fork: [`Target::device_pipeline`]
/// (the device's own MLIR pipeline) and [`Target::device_artifact`] (the file(s) it writes).
/// `tessera compile -o DIR` runs a device's pipeline on its module, writes the artifacts the
/// target makes of the result, and `--emit lowered` writes the result itself as
/// `<device>.lowered.mlir`. `tessera run` does not use them: it runs every device's portable
/// module (`<device>.mlir`) JIT-compiled on this CPU, a functional check of the program,
/// whatever hardware the artifacts are for.
pub trait Target: Send + Sync {
    /// The devices, links and host. Every hook below answers about devices of this spec.
    fn spec(&self) -> &TargetSpec;

    /// Seconds that `op` (whose device-independent work is `work`) takes on `device`, in
    /// place of the roofline; `None` keeps the roofline. A calibration file still wins over
    /// this hook, since it holds measurements. A time that is not finite or is negative makes
    /// the op unsupported there, with the reason.
    fn op_time(&self, graph: &Graph, op: OpId, device: &Device, work: &Work) -> Option<f64> {
        let _ = (graph, op, device, work);
        None
    }

    /// Why `device` cannot run `op`, beyond the spec's `supported_ops` (a shape limit, a
    /// missing instruction); `None` when it can.
    fn unsupported(&self, graph: &Graph, op: OpId, device: &Device) -> Option<String> {
        let _ = (graph, op, device);
        None
    }

    /// Seconds to move `bytes` from device `from` to device `to` (indices into
    /// `spec().devices`), in place of the link model along the route; `None` keeps it. A
    /// time that is not finite or is negative is ignored (the link model answers).
    fn transfer_time(&self, from: usize, to: usize, bytes: f64) -> Option<f64> {
        let _ = (from, to, bytes);
        None
    }

    /// The MLIR pipeline that lowers `device`'s module for its hardware, in place of the one
    /// tessera has for the device's `lowering` (`cpu`, `nvptx`; `chiplet` and lowerings
    /// registered without a hook get the portable affine loops, and `tessera compile` says
    /// so). `None` keeps tessera's.
    fn device_pipeline(&self, device: &Device) -> Option<DevicePipeline> {
        let _ = device;
        None
    }

    /// The files `tessera compile -o` writes for `device`, made from `lowered`, its module
    /// after [`Target::device_pipeline`] (MLIR text, printed by MLIR). Asked only for devices
    /// with work whose pipeline comes from that hook; the default writes nothing more. An
    /// `Err` fails the compile with the message, naming the device.
    fn device_artifact(&self, device: &Device, lowered: &str) -> Result<Vec<Artifact>, String> {
        let _ = (device, lowered);
        Ok(Vec::new())
    }
}

impl Target for TargetSpec {
    fn spec(&self) -> &TargetSpec {
        self
    }
}

/// Targets registered in code, by name (a plugin's driver registers them at startup).
static REGISTERED: RwLock<Vec<Arc<dyn Target>>> = RwLock::new(Vec::new());

/// Registers a target written in Rust, so `--target NAME` and `tessera targets` find it. Its
/// name must not clash with a built-in or an earlier registration.
pub fn register_target(target: Arc<dyn Target>) -> Result<(), TargetError> {
    let name = target.spec().name.clone();
    let mut all = REGISTERED.write().unwrap_or_else(|e| e.into_inner());
    if crate::BUILTIN_NAMES.contains(&name.as_str()) || all.iter().any(|t| t.spec().name == name) {
        return Err(TargetError::DuplicateTarget { name });
    }
    all.push(target);
    Ok(())
}

/// The targets registered in code, in registration order.
pub fn registered_targets() -> Vec<Arc<dyn Target>> {
    REGISTERED.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Device lowerings registered in code, beyond [`crate::BUILTIN_LOWERINGS`].
static LOWERINGS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Registers a device lowering name, so that target files may give it as a device's
/// `lowering` (a plugin registers the name of its backend before it resolves targets).
/// Registering a name twice, or a built-in one, does nothing; an empty name is refused.
pub fn register_lowering(name: &str) -> Result<(), TargetError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(TargetError::Invalid {
            file: "<register_lowering>".into(),
            line: 1,
            field: Some("lowering".into()),
            message: "must not be empty".into(),
        });
    }
    let mut all = LOWERINGS.write().unwrap_or_else(|e| e.into_inner());
    if !crate::BUILTIN_LOWERINGS.contains(&name) && !all.iter().any(|n| n == name) {
        all.push(name.to_string());
    }
    Ok(())
}

/// The lowerings a target file may name: the built-in ones, then those registered in code
/// (in registration order).
pub fn known_lowerings() -> Vec<String> {
    crate::BUILTIN_LOWERINGS
        .iter()
        .map(|s| s.to_string())
        .chain(
            LOWERINGS
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .cloned(),
        )
        .collect()
}

/// Finds a target by name, as `--target` does: a name ending in `.toml` is a file; otherwise
/// a target registered in code, then a built-in, then `<dir>/<name>.toml` on `search_path`.
pub fn resolve(name: &str, search_path: &[PathBuf]) -> Result<Arc<dyn Target>, TargetError> {
    if !name.ends_with(".toml")
        && let Some(t) = registered_targets()
            .into_iter()
            .find(|t| t.spec().name == name)
    {
        return Ok(t);
    }
    Ok(Arc::new(crate::lookup(name, search_path)?))
}

/// The compile target of this process: the target passes cost with when their own `target`
/// option is empty (`tessera compile --target T` sets it). Passes take their target through
/// this because pipeline options are text.
static DEFAULT_TARGET: RwLock<Option<Arc<dyn Target>>> = RwLock::new(None);

/// Sets (or clears) the process's compile target; see [`default_target`].
pub fn set_default_target(target: Option<Arc<dyn Target>>) {
    *DEFAULT_TARGET.write().unwrap_or_else(|e| e.into_inner()) = target;
}

/// The target a pass uses: `name` when not empty (resolved as `--target` does, with the
/// `TESSERA_TARGET_PATH` search path), else the compile target, else `cpu`.
pub fn pass_target(name: &str) -> Result<Arc<dyn Target>, TargetError> {
    if name.is_empty()
        && let Some(t) = DEFAULT_TARGET
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    {
        return Ok(t);
    }
    let name = if name.is_empty() { "cpu" } else { name };
    resolve(name, &crate::env_search_path())
}
