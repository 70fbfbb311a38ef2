//! `tessera`: the command line of the tessera ML compiler (see the library's `cli` module).

use std::process::ExitCode;

fn main() -> ExitCode {
    tessera::cli::main()
}
