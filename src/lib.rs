//! The `tessera` package: the command line of the tessera ML compiler, as a library so that
//! tests (and, later, out-of-tree target crates) can drive it.
//!
//! - [`cli`]: argument definitions, dispatch, exit codes;
//! - [`commands`]: one module per subcommand;
//! - [`driver`]: the entry an out-of-tree crate calls to build its own `tessera` with extra
//!   passes and targets;
//! - [`npy`]: `.npy` files as [`tessera_ir::Tensor`]s;
//! - [`names`]: file-safe, distinct file names for graph outputs;
//! - [`summary`]: the printed summary of a tensor;
//! - [`check`]: the one place the IR verifier is called.

pub mod cli;
pub mod commands;
pub mod driver;
pub mod instrument;
pub use tessera_ir::names;
pub mod npy;
pub mod report;
pub mod summary;
