//! Running the `tessera` binary from tests.

use std::path::PathBuf;

use assert_cmd::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tessera` in the repository root, without the user's target path.
pub fn tessera() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tessera"));
    cmd.env_remove("TESSERA_TARGET_PATH");
    cmd.current_dir(repo());
    cmd
}

/// Runs a command that must succeed; returns its standard output.
pub fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs a command that must fail with exit code 1; returns its standard error.
pub fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().expect("runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stderr).expect("utf-8")
}

/// Max |a - b| over the elements; the shapes must agree.
pub fn max_diff(a: &tessera_ir::Tensor, b: &tessera_ir::Tensor) -> f64 {
    assert_eq!(a.ty(), b.ty());
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}
