//! Native outputs: object files from LLVM IR (clang-22), PTX text from the NVIDIA pipeline.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Mlir, PipelineOptions, pipelines};

/// The LLVM 22 installation (`TESSERA_LLVM_PREFIX`, default `/usr/lib/llvm-22`).
pub fn llvm_prefix() -> PathBuf {
    std::env::var_os("TESSERA_LLVM_PREFIX")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/llvm-22"))
}

/// clang from [`llvm_prefix`].
pub fn clang() -> PathBuf {
    llvm_prefix().join("bin/clang")
}

fn io(what: &Path, e: std::io::Error) -> Error {
    Error::Run {
        message: format!("{}: {e}", what.display()),
    }
}

/// Runs a command; its error names the command and shows what it printed.
pub fn run_tool(cmd: &mut Command) -> Result<(), Error> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| Error::Run {
        message: format!("cannot run {shown}: {e} (run `make deps` to install LLVM 22 and MPICH)"),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Run {
            message: format!(
                "{shown} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

/// Compiles LLVM IR text to an object file at `out` (written atomically).
pub fn object_file(llvm_ir: &str, out: &Path) -> Result<(), Error> {
    let dir = out.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".tessera-")
        .tempdir_in(dir)
        .map_err(|e| io(dir, e))?;
    let ll = tmp.path().join("module.ll");
    std::fs::write(&ll, llvm_ir).map_err(|e| io(&ll, e))?;
    let obj = tmp.path().join("module.o");
    run_tool(
        Command::new(clang())
            .args(["-c", "-O2", "-fPIC", "-Wno-override-module", "-x", "ir"])
            .arg(&ll)
            .arg("-o")
            .arg(&obj),
    )?;
    std::fs::rename(&obj, out).map_err(|e| io(out, e))
}

/// Runs the NVIDIA pipeline on a module and returns the PTX of its kernels (one section
/// per GPU module, headed by a comment naming it), for [`pipelines::DEFAULT_NVPTX_ARCH`].
pub fn ptx(
    mlir: &Mlir,
    text: &str,
    what: &str,
    options: &PipelineOptions,
) -> Result<String, Error> {
    ptx_for_arch(mlir, text, what, options, None)
}

/// [`ptx`] for the GPU architecture `arch` (a device's `arch`, `sm_70`); `None` is the
/// default.
pub fn ptx_for_arch(
    mlir: &Mlir,
    text: &str,
    what: &str,
    options: &PipelineOptions,
    arch: Option<&str>,
) -> Result<String, Error> {
    let mut m = mlir.parse(text, what)?;
    mlir.run_pipeline(&mut m, &pipelines::nvptx(arch), options, what)?;
    let printed = Mlir::print(&m);
    let mut out = String::new();
    for (name, body) in gpu_objects(&printed) {
        out.push_str(&format!("// gpu.binary @{name}\n"));
        out.push_str(&body);
        if !body.ends_with('\n') {
            out.push('\n');
        }
    }
    if out.is_empty() {
        return Err(Error::Mlir {
            what: what.to_string(),
            stage: "PTX".into(),
            message: "the NVIDIA pipeline produced no gpu.binary (no kernel?)".into(),
        });
    }
    Ok(out)
}

/// The (binary name, decoded string) of every `gpu.object` in a printed module.
fn gpu_objects(printed: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for line in printed.lines() {
        let Some(rest) = line.trim_start().strip_prefix("gpu.binary @") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // The object's string is the last quoted literal on the line.
        let bytes = line.as_bytes();
        let Some(end) = line.rfind('"') else { continue };
        let mut start = end;
        while start > 0 {
            start -= 1;
            if bytes[start] == b'"' && !escaped(bytes, start) {
                break;
            }
        }
        out.push((name, unescape(&line[start + 1..end])));
    }
    out
}

fn escaped(bytes: &[u8], at: usize) -> bool {
    let mut n = 0;
    let mut i = at;
    while i > 0 && bytes[i - 1] == b'\\' {
        n += 1;
        i -= 1;
    }
    n % 2 == 1
}

/// MLIR's string escapes: `\\`, `\"`, `\n`, `\t` and `\XX` (hex).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'\\' => out.push(b'\\'),
                b'"' => out.push(b'"'),
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                _ if i + 2 < b.len() => {
                    if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                        out.push(v);
                        i += 3;
                        continue;
                    }
                    out.push(b[i + 1]);
                }
                c => out.push(c),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
