//! The driver entry for out-of-tree crates: build your own `tessera` binary with extra targets
//! and passes, as out-of-tree MLIR tools register their dialects and passes and then call
//! `MlirOptMain`.
//!
//! ```no_run
//! use std::process::ExitCode;
//! # const MY_PASS: tessera_passes::PassInfo = tessera_passes::PassInfo {
//! #     name: "my-pass", summary: "", options: &[],
//! #     create: |_| Err(tessera_passes::PassError::new("unused")),
//! # };
//! # fn my_target() -> tessera_targets::TargetSpec {
//! #     let file = "host = \"h\"\n[[device]]\nname = \"h\"\nkind = \"cpu\"\nmemory = 1e9\n\
//! #                 memory_bandwidth = 1e9\nlowering = \"cpu\"\n";
//! #     tessera_targets::parse_target(file, "my-board.toml").expect("valid target file")
//! # }
//! fn main() -> ExitCode {
//!     tessera::driver::Driver::new("my-tessera")
//!         .pass(MY_PASS)
//!         .target(std::sync::Arc::new(my_target()))
//!         .main()
//! }
//! ```
//!
//! The binary has every `tessera` command; the extra passes appear in `passes`, in pipelines
//! and in the instrumentation flags, and the extra targets in `targets` and `--target`.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use tessera_passes::PassInfo;
use tessera_targets::Target;

/// A `tessera` command line with extra passes and targets.
pub struct Driver {
    name: String,
    passes: Vec<PassInfo>,
    targets: Vec<Arc<dyn Target>>,
}

impl Driver {
    /// A driver for a binary called `name` (used in help and usage messages).
    pub fn new(name: impl Into<String>) -> Driver {
        Driver {
            name: name.into(),
            passes: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// Adds a pass (its name must be new and kebab-case).
    pub fn pass(mut self, info: PassInfo) -> Driver {
        self.passes.push(info);
        self
    }

    /// Adds a target written in Rust (its name must be new).
    pub fn target(mut self, target: Arc<dyn Target>) -> Driver {
        self.targets.push(target);
        self
    }

    /// Registers the passes and targets, then runs the command line. A registration that
    /// clashes is reported and exits with status 1 before any command runs.
    pub fn main(self) -> ExitCode {
        if let Err(message) = self.register() {
            let _ = writeln!(std::io::stderr(), "error: {}: {message}", self.name);
            return ExitCode::FAILURE;
        }
        crate::cli::main_named(&self.name)
    }

    /// Registers the passes and targets without running anything.
    pub fn register(&self) -> Result<(), String> {
        for p in &self.passes {
            tessera_passes::register(*p).map_err(|e| e.to_string())?;
        }
        for t in &self.targets {
            tessera_targets::register_target(Arc::clone(t)).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
