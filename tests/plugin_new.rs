//! `tessera plugin new`: the crate it writes builds outside the repository (a temp dir) with
//! a plain `cargo build`, and its binary compiles a model with the plugin's target, whose
//! accelerator is lowered by the plugin's own MLIR pipeline into the plugin's artifact.
//!
//! The build shares this workspace's target directory (`CARGO_TARGET_DIR`), so the
//! registry crates (melior and its MLIR build scripts above all) are reused. The tessera
//! crates are built once more: cargo hashes a path dependency by its path relative to the
//! workspace root, and the plugin is its own workspace. That second build is stable across
//! runs (every plugin outside the checkout hashes them alike), so it is redone only after
//! tessera's sources change: about 4 min of CPU on 2 cores then, seconds otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use assert_cmd::Command as Cmd;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tessera() -> Cmd {
    Cmd::cargo_bin("tessera").expect("the tessera binary")
}

/// The target directory of this build (`target/tmp` is in it).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .to_path_buf()
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(c: &mut Cmd) -> String {
    let out = c.output().expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn refuses_bad_names_and_folders_in_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, why) in [
        ("Acme", "not a valid plugin crate name"),
        ("acme npu", "not a valid plugin crate name"),
        ("acme--npu", "not a valid plugin crate name"),
        ("9npu", "not a valid plugin crate name"),
        ("fn", "reserved in Rust"),
        ("tessera-ir", "tessera's own crates"),
        ("mcm-2x2", "a built-in target's name"),
    ] {
        let err = fails(
            tessera()
                .current_dir(dir.path())
                .args(["plugin", "new", name]),
        );
        assert!(err.contains(why), "{name}: {err}");
        assert!(std::fs::read_dir(dir.path()).expect("dir").next().is_none());
    }
    let used = dir.path().join("used");
    std::fs::create_dir(&used).expect("mkdir");
    std::fs::write(used.join("keep.txt"), "mine").expect("write");
    let err = fails(
        tessera()
            .args(["plugin", "new", "acme-npu", "--path"])
            .arg(&used),
    );
    assert!(
        err.contains(&format!("{} exists and is not empty", used.display())),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&used).expect("dir").count(), 1);
    let file = dir.path().join("file");
    std::fs::write(&file, "").expect("write");
    let err = fails(
        tessera()
            .args(["plugin", "new", "acme-npu", "--path"])
            .arg(&file),
    );
    assert!(err.contains("exists and is not a folder"), "{err}");
}

#[test]
fn the_new_crate_builds_outside_the_repository_and_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let krate = dir.path().join("acme-npu");
    // An empty folder is fine.
    std::fs::create_dir(&krate).expect("mkdir");
    let out = ok(&tessera()
        .args(["plugin", "new", "acme-npu", "--path"])
        .arg(&krate)
        .output()
        .expect("runs"));
    assert!(out.contains("wrote the plugin crate acme-npu in"), "{out}");
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml")).expect("Cargo.toml");
    let checkout = repo();
    let checkout = checkout.to_str().expect("utf-8");
    assert!(
        manifest.contains(&format!("tessera = {{ path = \"{checkout}\" }}")),
        "{manifest}"
    );
    assert!(
        manifest.contains(&format!(
            "tessera-targets = {{ path = \"{checkout}/targets\" }}"
        )),
        "{manifest}"
    );
    let config = std::fs::read_to_string(krate.join(".cargo/config.toml")).expect("config");
    assert!(
        config.contains("MLIR_SYS_220_PREFIX = \"/usr/lib/llvm-22\""),
        "{config}"
    );

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let start = Instant::now();
    let build = Command::new(cargo)
        .arg("build")
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("cargo runs");
    eprintln!(
        "plugin_new: cargo build of the new crate took {:.1} s",
        start.elapsed().as_secs_f64()
    );
    ok(&build);
    let bin = target_dir().join("debug").join("acme-npu");
    let tool = || {
        let mut c = Command::new(&bin);
        c.current_dir(dir.path());
        c
    };
    let passes = ok(&tool().arg("passes").output().expect("runs"));
    assert!(passes.contains("acme-npu-pin-matmuls"), "{passes}");
    let model = dir.path().join("mm.tir");
    std::fs::write(
        &model,
        "graph @g(%a: f32[64, 64], %b: f32[64, 64]) {\n  %0 = matmul %a, %b : f32[64, 64]\n  \
         return %0\n}\n",
    )
    .expect("write");
    let out_dir = dir.path().join("out");
    let out = ok(&tool()
        .args([
            "compile",
            "--target",
            "acme-npu",
            "--passes",
            "acme-npu-pin-matmuls",
            "--emit",
            "lowered",
            "-o",
        ])
        .arg(&out_dir)
        .arg(&model)
        .output()
        .expect("runs"));
    assert!(
        out.contains("lowering     acc0: acme-npu's own pipeline; wrote acc0.acme-npu.mlir ("),
        "{out}"
    );
    let artifact = std::fs::read_to_string(out_dir.join("acc0.acme-npu.mlir")).expect("artifact");
    assert!(
        artifact.starts_with("// acme-npu program for acc0: @step0\n"),
        "{artifact}"
    );
    // The template's pipeline tiles every loop nest by 32.
    assert!(
        artifact.contains("affine.for %arg2 = 0 to 64 step 32 {"),
        "{artifact}"
    );
    assert!(!artifact.contains("linalg."), "{artifact}");
    let lowered = std::fs::read_to_string(out_dir.join("acc0.lowered.mlir")).expect("lowered");
    assert!(artifact.ends_with(&lowered));
}
