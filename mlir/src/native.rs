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

/// Runs a command; its error names the command and shows what it printed. The command dies
/// with tessera: a compile killed while clang runs leaves no clang behind writing into the
/// temporary folder that the next compile removes (the processes clang itself starts, the
/// linker, do not inherit this; they finish or fail on their own).
pub fn run_tool(cmd: &mut Command) -> Result<(), Error> {
    let shown = format!("{cmd:?}");
    die_with_parent(cmd);
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

/// Makes `cmd`'s process receive SIGKILL when the thread that starts it ends (Linux's
/// parent-death signal). [`run_tool`] waits for the command on that thread, so this happens
/// only when tessera itself is killed. A parent killed before the child set the signal is
/// caught by comparing the parent's pid after setting it.
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the forked child before `exec`; it makes two system calls
    // (prctl, getppid), both async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(
                    rustix::io::Errno::SRCH.raw_os_error(),
                ));
            }
            Ok(())
        });
    }
}

/// clang's flags for an object file of tessera's code: for this machine's CPU, position
/// independent (a library's part).
const COMPILE: [&str; 5] = [
    "-c",
    "-O2",
    "-march=native",
    "-fPIC",
    "-Wno-override-module",
];

/// Compiles LLVM IR text to an object file for this machine's CPU (`-march=native`, as the
/// JIT compiles for it) at `out` (written atomically).
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
            .args(COMPILE)
            .args(["-x", "ir"])
            .arg(&ll)
            .arg("-o")
            .arg(&obj),
    )?;
    std::fs::rename(&obj, out).map_err(|e| io(out, e))
}

/// The C symbol of a function's packed entry in a shared library ([`shared_library`]):
/// `void f(void **args)`, `args[i]` pointing to the function's i-th C-interface argument, as
/// MLIR's execution engine calls its own (`invoke_packed`).
pub fn packed_symbol(function: &str) -> String {
    format!("_tessera_packed_{function}")
}

/// The convention of the libraries [`shared_library`] builds (the packed entries, the memref
/// descriptors they take): part of [`library_digest`], so that a tessera with another
/// convention does not call an old library.
const LIBRARY_ABI: &str = "tessera-library/1";

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The C source of the runtime functions a CPU library defines itself: `memrefCopy`, which
/// bufferized copies between layouts call, copying whole contiguous runs (MLIR's runner
/// utilities copy element by element: with them, strided copies were 11% of GPT-2 tiny's
/// time).
pub const RUNTIME: &str = include_str!("runtime.c");

/// What a library is built from, as a SHA-256 in hex: the library convention, the CPU
/// pipeline, its schedule (the digest of [`crate::schedule::SOURCE`], and whether OpenMP's
/// runtime is there for its threads), its runtime functions ([`RUNTIME`]) and the module's
/// text. A library names it, so that a module changed since (or a
/// tessera with another pipeline) does not run through an old library.
pub fn library_digest(module: &str) -> String {
    sha256_hex(
        format!(
            "{LIBRARY_ABI}\0{}\0{}\0{}\0{}\0{module}",
            pipelines::CPU,
            sha256_hex(crate::schedule::SOURCE.as_bytes()),
            crate::jit::openmp_runtime().is_some(),
            sha256_hex(RUNTIME.as_bytes())
        )
        .as_bytes(),
    )
}

/// What identifies this machine's CPU for its native code (`-march=native`): the SHA-256 of
/// the features `/proc/cpuinfo` lists for its first processor (`flags`, or `Features` on
/// Arm), [`UNKNOWN_CPU`] where there is none. A library built on a CPU with other features
/// may use instructions this one lacks.
pub fn host_cpu() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("flags") || l.starts_with("Features"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, f)| sha256_hex(f.trim().as_bytes()))
        .unwrap_or_else(|| UNKNOWN_CPU.to_string())
}

/// [`host_cpu`] where the features cannot be read: it matches no CPU, not even itself.
pub const UNKNOWN_CPU: &str = "unknown";

/// Compiles a CPU module's LLVM IR to a shared library at `out` (written atomically), with a
/// packed entry ([`packed_symbol`]) for each of `entries`: a function with the C interface
/// and how many parameters its `_mlir_ciface_` function takes (results first, as one
/// pointer). The library defines its own `memrefCopy` ([`RUNTIME`]) and links MLIR's C
/// runner utilities for the rest by their full path.
/// The files are compiled under relative names, so the bytes depend only on the input.
/// `object`: also keep the module's object file there (what [`object_file`] writes).
pub fn shared_library(
    llvm_ir: &str,
    entries: &[(String, usize)],
    out: &Path,
    object: Option<&Path>,
) -> Result<(), Error> {
    let dir = out.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".tessera-")
        .tempdir_in(dir)
        .map_err(|e| io(dir, e))?;
    let mut c = String::from(
        "/* tessera: each step's packed entry; args[i] points to its i-th argument. */\n",
    );
    for (f, n) in entries {
        let params = if *n == 0 {
            "void".to_string()
        } else {
            vec!["void *"; *n].join(", ")
        };
        let args: Vec<String> = (0..*n).map(|i| format!("*(void **)a[{i}]")).collect();
        c.push_str(&format!(
            "extern void _mlir_ciface_{f}({params});\nvoid {}(void **a) {{ (void)a; _mlir_ciface_{f}({}); }}\n",
            packed_symbol(f),
            args.join(", ")
        ));
    }
    // Absolute, as the compiles run in the temporary folder and the rpath is read at load.
    let prefix = std::fs::canonicalize(llvm_prefix()).unwrap_or_else(|_| llvm_prefix());
    let cc = prefix.join("bin/clang");
    let sources = [
        ("module.ll", "module.o", llvm_ir),
        ("entries.c", "entries.o", c.as_str()),
        ("runtime.c", "runtime.o", RUNTIME),
    ];
    for (src, obj, text) in sources {
        let p = tmp.path().join(src);
        std::fs::write(&p, text).map_err(|e| io(&p, e))?;
        run_tool(
            Command::new(&cc)
                .current_dir(tmp.path())
                .args(COMPILE)
                .args([src, "-o", obj]),
        )?;
    }
    let utils = prefix.join("lib");
    run_tool(
        Command::new(&cc)
            .current_dir(tmp.path())
            // Every symbol resolved at link time; calls inside the library stay in it.
            .args(["-shared", "-Wl,-z,defs", "-Wl,-Bsymbolic"])
            .args(sources.map(|(_, obj, _)| obj))
            .args(["-o", "library.so"])
            .arg(format!("-L{}", utils.display()))
            .arg(format!("-Wl,-rpath,{}", utils.display()))
            .args(["-lmlir_c_runner_utils", "-lm"])
            // OpenMP's runtime, where the schedule's parallel loops call it.
            .args(llvm_ir.contains("@__kmpc_").then_some("-lomp")),
    )?;
    std::fs::rename(tmp.path().join("library.so"), out).map_err(|e| io(out, e))?;
    if let Some(o) = object {
        std::fs::rename(tmp.path().join("module.o"), o).map_err(|e| io(o, e))?;
    }
    Ok(())
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
pub(crate) fn gpu_objects(printed: &str) -> Vec<(String, String)> {
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
