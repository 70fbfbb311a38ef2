//! `tessera plugin new NAME [--path DIR]`: writes a plugin crate that builds outside this
//! repository, as `cargo new` writes a package (and MLIR's `standalone` example is a
//! template for out-of-tree dialects).
//!
//! The crate depends on the tessera crates of the checkout this binary was built from, by
//! path (`CARGO_MANIFEST_DIR`, baked in at build time): tessera is not published, and a path
//! dependency on the very sources of the running binary is the one that surely builds. It
//! gets the checkout's `Cargo.lock` (so it resolves the same versions, offline) and the
//! workspace's dev profile overrides (so the same builds of the shared crates are reused
//! when `CARGO_TARGET_DIR` points at the checkout's `target/`), an empty `[workspace]` (its
//! own root, wherever it lives) and `.cargo/config.toml` with the MLIR environment melior's
//! build needs, taken from the workspace's own.
//!
//! What it writes: `Cargo.toml`, `.cargo/config.toml`, `.gitignore`, `NAME.toml` (a host CPU
//! and an accelerator whose `lowering` is the plugin's), `src/lib.rs` (a target with a cost
//! hook, the device pipeline hook and the artifact hook; a pass `NAME-pin-matmuls`),
//! `src/main.rs` (the driver) and `README.md`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The checkout this binary was built from.
pub const CHECKOUT: &str = env!("CARGO_MANIFEST_DIR");

/// The workspace's Cargo configuration (its `[env]` is the MLIR environment).
const CARGO_CONFIG: &str = include_str!("../../.cargo/config.toml");

/// The workspace's manifest (its `[profile.*]` tables are copied).
const WORKSPACE_MANIFEST: &str = include_str!("../../Cargo.toml");

/// The tessera crates a plugin depends on: package name and folder in the checkout.
const DEPENDENCIES: [(&str, &str); 4] = [
    ("tessera", ""),
    ("tessera-ir", "ir"),
    ("tessera-passes", "passes"),
    ("tessera-targets", "targets"),
];

/// Names a plugin crate cannot take: Rust's keywords (the library's name would be one),
/// the standard crates, and names that are the tessera crates' own.
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "try",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "std",
    "core",
    "alloc",
    "proc_macro",
    "proc-macro",
    "test",
    "build",
];

/// Runs `tessera plugin new`.
pub fn new(name: &str, path: Option<&Path>) -> Result<()> {
    check_name(name)?;
    let dir = path.map_or_else(|| PathBuf::from(name), Path::to_path_buf);
    check_empty(&dir)?;
    let checkout = Path::new(CHECKOUT);
    if !checkout.join("Cargo.toml").is_file() {
        bail!(
            "this tessera was built from {}, which has no Cargo.toml any more: a plugin \
             depends on the tessera crates of that checkout by path",
            checkout.display()
        );
    }
    let files = files(name, checkout)?;
    for (rel, text) in &files {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        super::write_atomically(&p, text.as_bytes())?;
    }
    let mut out = format!(
        "wrote the plugin crate {name} in {} (depending on the tessera crates in {}):\n",
        dir.display(),
        checkout.display()
    );
    for (rel, _) in &files {
        out.push_str(&format!("  {rel}\n"));
    }
    out.push_str(&format!(
        "build it and run its binary:\n  cd {}\n  cargo build\n  target/debug/{name} \
         compile MODEL --target {} --passes {}-pin-matmuls -o out\n",
        dir.display(),
        kebab(name),
        kebab(name)
    ));
    super::print_stdout(&out)
}

/// NAME with `_` as `-`: the target's, the lowering's and the pass's prefix.
fn kebab(name: &str) -> String {
    name.replace('_', "-")
}

/// A crate name that also makes a kebab-case pass name and a target name: lowercase ASCII
/// letters and digits in words joined by single `-` or `_`, starting with a letter, none of
/// [`RESERVED`], the tessera crates' or the built-in targets' names.
fn check_name(name: &str) -> Result<()> {
    let words_ok = name.split(['-', '_']).all(|w| {
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    });
    if !words_ok || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        bail!(
            "`{}` is not a valid plugin crate name: use lowercase letters and digits in words \
             joined by single `-` or `_`, starting with a letter (e.g. `acme-npu`)",
            name.escape_debug()
        );
    }
    if name.len() > 64 {
        bail!("`{name}` is not a valid plugin crate name: longer than 64 characters");
    }
    if RESERVED.contains(&name) {
        bail!("`{name}` is not a valid plugin crate name: it is reserved in Rust");
    }
    if name == "tessera" || name.starts_with("tessera-") || name.starts_with("tessera_") {
        bail!("`{name}` is not a valid plugin crate name: tessera's own crates use the prefix");
    }
    if tessera_targets::BUILTIN_NAMES.contains(&kebab(name).as_str()) {
        bail!("`{name}` is not a valid plugin crate name: it is a built-in target's name");
    }
    Ok(())
}

/// The folder must not exist, or be empty.
fn check_empty(dir: &Path) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", dir.display())),
        Ok(m) if !m.is_dir() => bail!("{} exists and is not a folder", dir.display()),
        Ok(_) => {
            let mut entries =
                std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
            if entries.next().is_some() {
                bail!(
                    "{} exists and is not empty: give a new or empty folder (--path DIR)",
                    dir.display()
                );
            }
            Ok(())
        }
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The tables of a TOML file whose header satisfies `keep`, each with the comment lines
/// just above it, in file order.
fn tables(text: &str, keep: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let mut comments = String::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = keep(t);
            if inside {
                out.push_str(&comments);
                out.push_str(line);
                out.push('\n');
            }
            comments.clear();
        } else if t.starts_with('#') {
            comments.push_str(line);
            comments.push('\n');
        } else {
            if inside && !t.is_empty() {
                out.push_str(&comments);
                out.push_str(line);
                out.push('\n');
            }
            comments.clear();
        }
    }
    out
}

/// The files of the crate, by path relative to its folder.
fn files(name: &str, checkout: &Path) -> Result<Vec<(String, String)>> {
    let kebab = kebab(name);
    let lib = name.replace('-', "_");
    let checkout_str = checkout
        .to_str()
        .with_context(|| format!("{}: the checkout's path is not UTF-8", checkout.display()))?;
    let mut deps = String::new();
    for (package, folder) in DEPENDENCIES {
        let p = if folder.is_empty() {
            checkout_str.to_string()
        } else {
            format!("{checkout_str}/{folder}")
        };
        deps.push_str(&format!("{package} = {{ path = {} }}\n", toml_str(&p)));
    }
    let profiles = tables(WORKSPACE_MANIFEST, |h| h.starts_with("[profile."));
    let cargo_toml = format!(
        "[package]\nname = \"{name}\"\ndescription = \"A tessera plugin: a target with its own \
         MLIR pipeline and artifact, and a pass, in its own tessera binary\"\nversion = \
         \"0.1.0\"\nedition = \"2024\"\npublish = false\n\n# The tessera crates of the checkout \
         `tessera plugin new` was built from.\n[dependencies]\n{deps}\n# Its own workspace, \
         wherever this folder is.\n[workspace]\n\n# tessera's own dev profile, so that a \
         CARGO_TARGET_DIR shared with the checkout reuses its builds.\n{profiles}"
    );
    let env = tables(CARGO_CONFIG, |h| h == "[env]");
    let config =
        format!("# Written by `tessera plugin new` from tessera's own .cargo/config.toml.\n{env}");
    let mut out = vec![
        ("Cargo.toml".to_string(), cargo_toml),
        (".cargo/config.toml".to_string(), config),
        (".gitignore".to_string(), "/target\n".to_string()),
        (format!("{kebab}.toml"), target_file(&kebab)),
        ("src/lib.rs".to_string(), lib_rs(name, &kebab)),
        ("src/main.rs".to_string(), main_rs(name, &kebab, &lib)),
        ("README.md".to_string(), readme(name, &kebab, checkout_str)),
    ];
    // The checkout's lock file: the same versions as tessera's own build, resolved offline.
    // Without one cargo resolves afresh (which needs the registry).
    if let Ok(lock) = std::fs::read_to_string(checkout.join("Cargo.lock")) {
        out.insert(1, ("Cargo.lock".to_string(), lock));
    }
    Ok(out)
}

fn target_file(kebab: &str) -> String {
    format!(
        r#"# The {kebab} target: a host CPU and one accelerator, whose modules the plugin's own MLIR
# pipeline lowers (its `lowering` is the plugin's, registered in src/lib.rs).
name = "{kebab}"
description = "a CPU and one accelerator (plugin {kebab})"
host = "cpu0"

[[device]]
name = "cpu0"
kind = "cpu"
memory = 16_000_000_000
memory_bandwidth = 50e9
compute = {{ f32 = 0.5e12 }}
lowering = "cpu"

[[device]]
name = "acc0"
kind = "accelerator"
memory = 1_000_000_000
memory_bandwidth = 200e9
compute = {{ f16 = 32e12, f32 = 8e12 }}
lowering = "{kebab}"

[[interconnect.link]]
a = "cpu0"
b = "acc0"
bandwidth = 16e9
latency = 1e-6
"#
    )
}

fn lib_rs(name: &str, kebab: &str) -> String {
    format!(
        r#"//! {name}: a tessera plugin, written by `tessera plugin new`.
//!
//! - The target `{kebab}` ({kebab}.toml, embedded): a host CPU and an accelerator `acc0`
//!   whose `lowering` is `{kebab}`. In Rust: [`Target::device_pipeline`] gives the
//!   accelerator its own MLIR pipeline ([`PIPELINE`]) and [`Target::device_artifact`] writes
//!   `acc0.{kebab}.mlir`, what its runtime would load, from the lowered module.
//! - The pass `{kebab}-pin-matmuls`: every unplaced matmul and gemm on one device.

use std::sync::Arc;

use tessera_ir::{{Graph, Op}};
use tessera_passes::{{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics}};
use tessera_targets::{{
    Artifact, Device, DevicePipeline, Target, TargetSpec, parse_target, register_lowering,
}};

/// The accelerator's lowering name.
pub const LOWERING: &str = "{kebab}";

/// The accelerator's MLIR pipeline (`mlir-opt --pass-pipeline` syntax): bufferize, linalg to
/// affine loops, every loop nest tiled by 32. Replace it with your backend's.
pub const PIPELINE: &str = "builtin.module(one-shot-bufferize{{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map}},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-affine-loops,affine-loop-tile{{tile-size=32}}),canonicalize)";

/// The `{kebab}` target.
pub struct Accelerator {{
    spec: TargetSpec,
}}

/// The `{kebab}` target, ready to register (its lowering name is registered first, so the
/// file may use it).
pub fn target() -> Result<Arc<dyn Target>, String> {{
    register_lowering(LOWERING).map_err(|e| e.to_string())?;
    let spec = parse_target(include_str!("../{kebab}.toml"), "{kebab}.toml")
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(Accelerator {{ spec }}))
}}

impl Target for Accelerator {{
    fn spec(&self) -> &TargetSpec {{
        &self.spec
    }}

    fn device_pipeline(&self, device: &Device) -> Option<DevicePipeline> {{
        (device.lowering == LOWERING).then(|| DevicePipeline::Passes(PIPELINE.to_string()))
    }}

    fn device_artifact(&self, device: &Device, lowered: &str) -> Result<Vec<Artifact>, String> {{
        // What the accelerator's runtime loads. Here: the lowered module, headed by its
        // kernels (the functions the manifest's steps call).
        let kernels: Vec<&str> = lowered
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("func.func @"))
            .filter_map(|l| l.split('(').next())
            .collect();
        if kernels.is_empty() {{
            return Err(format!("the module of {{}} has no kernel", device.name));
        }}
        let mut text = format!("// {kebab} program for {{}}: @{{}}\n", device.name, kernels.join(", @"));
        text.push_str(lowered);
        Ok(vec![Artifact {{
            name: format!("{{}}.{kebab}.mlir", device.name),
            bytes: text.into_bytes(),
        }}])
    }}
}}

/// The `{kebab}-pin-matmuls` pass.
pub const PIN_MATMULS: PassInfo = PassInfo {{
    name: "{kebab}-pin-matmuls",
    summary: "Place every unplaced matmul and gemm on one device",
    options: &[OptionInfo {{
        name: "device",
        kind: OptionKind::Str,
        default: "acc0",
        doc: "the device to place them on",
    }}],
    create: |options: &Options| {{
        let device = options.string("device").to_string();
        if device.is_empty() {{
            return Err(PassError::new("option `device` must not be empty"));
        }}
        Ok(Box::new(PinMatmuls {{ device }}))
    }},
}};

struct PinMatmuls {{
    device: String,
}}

impl Pass for PinMatmuls {{
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {{
        let mut pinned = 0;
        for op in graph.ops().to_vec() {{
            let data = graph.op_mut(op);
            if data.device.is_none() && matches!(data.op, Op::MatMul | Op::Gemm {{ .. }}) {{
                data.device = Some(self.device.clone());
                pinned += 1;
            }}
        }}
        stats.add("ops-pinned", "ops placed on the device", pinned);
        Ok(pinned > 0)
    }}
}}
"#
    )
}

fn main_rs(name: &str, kebab: &str, lib: &str) -> String {
    format!(
        r#"//! `{name}`: tessera with the {kebab} target and pass registered.

use std::process::ExitCode;

fn main() -> ExitCode {{
    let target = match {lib}::target() {{
        Ok(t) => t,
        Err(e) => {{
            eprintln!("error: {name}: {{e}}");
            return ExitCode::FAILURE;
        }}
    }};
    tessera::driver::Driver::new("{name}")
        .pass({lib}::PIN_MATMULS)
        .target(target)
        .main()
}}
"#
    )
}

fn readme(name: &str, kebab: &str, checkout: &str) -> String {
    format!(
        r#"# {name}

A tessera plugin: its own `tessera` binary, `{name}`, with the target `{kebab}` and the
pass `{kebab}-pin-matmuls`. Written by `tessera plugin new`; it depends on the tessera
crates in `{checkout}` by path (see `Cargo.toml`).

Build it (melior needs MLIR 22: `.cargo/config.toml` sets its environment) and compile a
model for the target:

```sh
cargo build
target/debug/{name} compile {checkout}/testdata/models/mlp.tir --input-shape x=4x16 \
    --target {kebab} --passes 'canonicalize,{kebab}-pin-matmuls,cse' -o out --emit lowered
ls out   # acc0.mlir, acc0.{kebab}.mlir (the artifact), acc0.lowered.mlir, ...
target/debug/{name} run out --input x={checkout}/testdata/models/mlp.input.npy
```

With `CARGO_TARGET_DIR={checkout}/target` the tessera crates already built there are reused.

- `src/lib.rs`: the target (`{kebab}.toml` embedded) with the hooks of `tessera_targets::Target`:
  cost (`op_time`, `unsupported`, `transfer_time`), the accelerator's MLIR pipeline
  (`device_pipeline`: an `mlir-opt` pass pipeline string, or a function over the module's
  text) and the file it writes (`device_artifact`); and the pass.
- `src/main.rs`: `tessera::driver::Driver`, which registers them and runs the command line.

`compile -o` lowers the accelerator's module with the plugin's pipeline and writes the
artifact; `run` runs every device's portable module (`acc0.mlir`) on this CPU.
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["acme-npu", "npu", "my_npu2", "a1-b2_c3"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Acme",
            "1npu",
            "-npu",
            "npu-",
            "a--b",
            "a b",
            "fn",
            "test",
            "tessera",
            "tessera-x",
            "cpu",
            "mcm-2x2",
            "np/u",
            "ü",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_environment_and_profiles_are_the_workspaces() {
        let env = tables(CARGO_CONFIG, |h| h == "[env]");
        assert!(
            env.starts_with("[env]\n") || env.contains("\n[env]\n"),
            "{env}"
        );
        assert!(env.contains("MLIR_SYS_220_PREFIX"), "{env}");
        let profiles = tables(WORKSPACE_MANIFEST, |h| h.starts_with("[profile."));
        assert!(
            profiles.contains("[profile.dev.package.ndarray]\nopt-level = 3"),
            "{profiles}"
        );
        assert!(!profiles.contains("[package]"), "{profiles}");
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }
}
