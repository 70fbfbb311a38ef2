//! tessera's targets: what a machine is and what running a graph on it costs.
//!
//! - [`TargetSpec`], [`Device`], [`Link`]: the resolved description, with hop-count routing
//!   ([`Router`] for routes from many sources); read from TOML target files ([`parse_target`],
//!   [`load_file`]) whose errors name file, line and field, with every number in the ranges
//!   of [`limits`]; built-ins and search-path files ([`lookup`], [`list_targets`]).
//! - [`Target`]: the trait the compiler uses; a description is one, and a plugin crate writes
//!   its own for what a file cannot say (cost overrides, a device's own MLIR pipeline as a
//!   [`DevicePipeline`] and the [`Artifact`]s it writes). [`register_target`] and
//!   [`resolve`] add and find targets written in code.
//! - [`op_work`]: FLOPs and bytes of every IR op from its shapes; [`CostModel`]: roofline op
//!   times, transfers along routes, ring collectives, and [`Calibration`] files of measured op
//!   times.
//! - [`simulate`]: a discrete-event simulation of a placed graph (latency, pipelined
//!   throughput, busy time per device and link direction, peak memory per device), with ops
//!   on a device mesh run SPMD on all its devices and collectives on its links.
//!
//! This crate never links MLIR: the lowering lives in `tessera-mlir`, which reads a device's
//! `lowering` and `arch` from here.

mod calibration;
pub mod cost;
mod error;
mod file;
pub mod limits;
mod model;
mod registry;
pub mod sim;
mod target;
mod work;

pub use calibration::{Calibration, Measurement, Scale, operands_fit, type_fits};
pub use cost::{CostModel, OpTime, TimeSource, hierarchical_phases, two_levels};
pub use error::TargetError;
pub use file::{BUILTIN_LOWERINGS, MAX_LINKS, NVPTX_ARCHS, load_file, parse_target};
pub use model::{Device, Layout, LayoutKind, Link, RouteTree, Router, TargetSpec};
pub use registry::{
    BUILTIN_NAMES, TargetEntry, TargetSource, builtin_target, builtin_targets, env_search_path,
    list_targets, lookup,
};
pub use sim::{
    ON_MESH, SimError, SimOptions, SimReport, Span, SpanKind, Trace, mesh_slot, on_mesh,
    placement_from_graph, simulate, trace,
};
pub use target::{
    Artifact, DevicePipeline, ModuleFn, Target, known_lowerings, pass_target, register_lowering,
    register_target, registered_targets, resolve, set_default_target,
};
pub use tessera_ir as ir;
pub use work::{Work, WorkError, op_work};
