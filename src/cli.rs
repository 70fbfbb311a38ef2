//! The command line: argument definitions (clap), dispatch, and errors turned into messages
//! and exit codes: 0 on success, 1 on any error (printed as `error: ...` with its causes), 2
//! for usage errors (from clap).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  tessera fmt testdata/models/mlp.tir
  tessera run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy
  tessera run testdata/models/mlp.tir --input x=in.npy --output-dir out/";

/// tessera: an ahead-of-time ML compiler.
///
/// tessera reads models into its own graph IR, and will rewrite, place and shard them across
/// the devices of a machine and lower them to MLIR. Today it loads, verifies, prints and
/// interprets graphs written in its text format (.tir).
#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load, verify and print a text IR file in canonical form.
    ///
    /// The file is parsed, checked by the IR verifier and printed to standard output in the
    /// canonical text format (printing the output again gives the same text). Constants with
    /// more than 16 elements stay in the safetensors sidecar next to the file.
    ///
    /// When the verifier finds errors, the IR is printed to standard error with each error
    /// shown at the entity it is about, followed by a one-line summary, and the exit code is 1.
    #[command(after_help = "Example:\n  tessera fmt testdata/models/mlp.tir")]
    Fmt(FmtArgs),
    /// Run a text IR file on .npy inputs with the reference interpreter.
    ///
    /// The file is loaded and verified; every graph input must be given exactly once with
    /// `--input NAME=FILE.npy`. Each file's dtype must match the input's element type, its
    /// rank the input's rank, and every static dimension its extent; symbolic dimensions
    /// (such as `N`) take the extent of the file, consistently across inputs.
    ///
    /// Without `--output-dir` a short summary of each output is printed (type, min, max,
    /// mean, first values). With it, each output is written to `DIR/<name>.npy`, where the
    /// output's value name is made file-safe: characters outside [A-Za-z0-9_.-] become `_`,
    /// and clashing names get a `_1`, `_2`, ... suffix. Files are written atomically.
    ///
    /// bf16 values have no numpy dtype: they are read and written as 2-byte raw data (`V2`),
    /// as `np.save` stores `ml_dtypes.bfloat16` arrays.
    #[command(after_help = "Examples:\n  \
        tessera run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy\n  \
        tessera run model.tir -i tokens=tokens.npy -i mask=mask.npy --output-dir out/")]
    Run(RunArgs),
}

/// Arguments of `tessera fmt`.
#[derive(Debug, Args)]
struct FmtArgs {
    /// The text IR file to format (.tir).
    #[arg(value_name = "FILE.tir")]
    file: PathBuf,
}

/// Arguments of `tessera run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// The text IR file to run (.tir).
    #[arg(value_name = "FILE.tir")]
    file: PathBuf,
    /// Bind a graph input to a .npy file; repeat once per input. An input without a name
    /// is addressed by its position, `#0`, `#1`, ...
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    inputs: Vec<crate::commands::run::Binding>,
    /// Write each output to DIR/<output name>.npy (DIR is created if needed) instead of
    /// printing a summary.
    #[arg(short, long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
}

fn parse_binding(s: &str) -> Result<crate::commands::run::Binding, String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok(crate::commands::run::Binding {
                name: name.to_string(),
                file: PathBuf::from(file),
            })
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

/// Parses the command line, runs the subcommand and turns the result into an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Fmt(a) => crate::commands::fmt::run(&a.file),
        Command::Run(a) => crate::commands::run::run(&a.file, &a.inputs, a.output_dir.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {}", error_message(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, `context: cause: root cause`. A cause whose text
/// the message already holds (errors that print their source themselves) is not repeated.
pub fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.is_empty() {
            msg = text;
        } else if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_chain_without_repeats() {
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "m.safetensors: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Wrapped(io)).context("loading m.tir");
        assert_eq!(error_message(&e), "loading m.tir: m.safetensors: gone");
        let e = anyhow::anyhow!("root").context("middle").context("top");
        assert_eq!(error_message(&e), "top: middle: root");
    }

    #[test]
    fn parses_bindings() {
        let b = parse_binding("x=a=b.npy").expect("valid");
        assert_eq!((b.name.as_str(), b.file.to_str()), ("x", Some("a=b.npy")));
        assert!(parse_binding("x").is_err());
        assert!(parse_binding("=a.npy").is_err());
        assert!(parse_binding("x=").is_err());
    }
}
