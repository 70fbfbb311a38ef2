//! tessera's placement: where each op of a model runs on a multi-chip module or a
//! heterogeneous machine, so that it runs fast, fits in memory, and says why.
//!
//! - [`problem`]: placement problems as data (the JSON schema) and their indexed form.
//! - [`eval`]: the objectives (pipelined throughput, one-sample latency), memory and the
//!   constraints of an assignment.
//! - [`split`]: split alternatives (an op over a device group) and the resharding they imply.
//! - [`bound`]: lower bounds on the optimum, so every plan reports its gap.
//! - [`strategy`]: the solvers, each documented with its source, and `auto`.
//! - [`plan`]: the solved plan as JSON, with per-op explanations ([`explain`]).
//! - [`build`]: the problem a graph and a target give ([`alternatives`]: its ops' splits).
//! - [`pass`]: the `place` and `schedule` passes over the IR.

pub mod alternatives;
pub mod apply;
pub mod bound;
pub mod build;
pub mod eval;
pub mod explain;
pub mod pass;
pub mod pipeline;
pub mod plan;
pub mod problem;
pub mod recompute;
pub mod split;
pub mod strategy;

pub use bound::{LowerBound, lower_bound};
pub use eval::{Evaluation, Objective, evaluate, violation};
pub use plan::{Plan, solve};
pub use problem::{Instance, Problem, ProblemError};
pub use strategy::{STRATEGIES, Solution, SolveOptions};
