//! The `Target` trait: a target's description plus what a file cannot say, and the registry of
//! targets that plugins add in code.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::ir::{Graph, OpId};
use crate::{Device, TargetError, TargetSpec, Work};

/// A hardware target as the compiler uses it.
///
/// Every target file is a target ([`TargetSpec`] implements this trait with the defaults). A
/// plugin crate implements it for what a description cannot say: measured or analytic op
/// times that replace the roofline, its own transfer model, or extra rules about which ops a
/// device can run. The cost model asks these hooks first and falls back to the description.
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
