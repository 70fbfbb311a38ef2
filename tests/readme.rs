//! The README's commands, run, so that the guide cannot rot.
//!
//! `README.md` is read as a sequence of fenced blocks, and every block whose info string is
//! `sh` is run, in README order, as one `bash -euo pipefail` script per block, all in ONE
//! scratch directory, so that a later block can use what an earlier one wrote (the
//! walkthrough's `gpt2-mcm/`, `build/`, ...). The scratch directory looks like the repository
//! root after a build, without letting a command write into the repository:
//!
//! - `testdata/`, `plugins/` and `targets/` are symbolic links to the repository's folders
//!   (the README only reads them; a block that writes must write elsewhere);
//! - `target/debug/tessera` links to the binary under test, and the directory of that binary
//!   comes first on `PATH`, so `tessera` is the binary under test;
//! - `target/debug/tessera-example` links to the example plugin's binary next to it.
//!
//! What the README's blocks may say, and how each kind is treated:
//!
//! - ```` ```sh ````: run. A command line that begins with `! ` is one the README shows
//!   failing: the shell's `!` would not stop a `set -e` script if it succeeded, so it is run
//!   through a function that requires exit code 1 (an error, not a crash or a success).
//! - ```` ```sh no-run ````: not run. Only the blocks of [`NO_RUN`] may be marked so, each
//!   with its reason; the test fails on any other `no-run` block, so nobody can opt a command
//!   out silently. The quick start's `make demo` and `make test` are covered by
//!   `quick_start_runs_in_ci`: `.ci/run` must run both (`make test` is this test suite).
//! - ```` ```text output ````: the output of the `sh` block just before it. Each of its lines
//!   (but `...`, which elides) must appear in the block's real output (stdout and stderr), in
//!   order, with numbers masked and runs of spaces taken as one (timings change; device
//!   names, strategies and the lines themselves must not).
//!   The blocks that print the walkthrough's results must have one ([`CHECKED_OUTPUT`]).
//! - `file=PATH` (any block, given by a `<!-- readme-test: file=PATH -->` comment on the line
//!   before the fence, invisible on GitHub, so that the fence stays `` ```toml ``, which other
//!   tests look for): the block's text is written to `PATH` in the scratch directory when the
//!   test reaches it, so the README can show a complete file and then use it
//!   (`boards/my-board.toml`, `calibration.toml`).
//! - `same-as=PATH` (given the same way): the block must be the repository file `PATH`,
//!   verbatim (the placement problem example).
//! - Other blocks (`text`, `rust`, `toml`, `mlir`, bare) are not run. `bash`, `shell` or
//!   `console` blocks are refused: write `sh`, so that the block runs.
//!
//! **Plugins.** The README builds the example plugin with `cargo build -p
//! tessera-plugin-example` and runs `target/debug/tessera-example`. Inside the blocks `cargo`
//! is a shell function that accepts only that command: if `tessera-example` already exists
//! next to the binary under test (as it does under `make test`, which builds the whole
//! workspace before running any test), it is used as it is; otherwise it is built for real,
//! into the same target directory, which can take minutes (it links MLIR statically). A
//! `tessera-example` older than the `tessera` under test is used as it is.
//!
//! A failing command fails the test with the README line of the command, the command, the
//! exit code and the block's output. Blocks run with a timeout ([`BLOCK_TIMEOUT`]). The whole
//! README runs in about 25 s with a debug build on 2 cores (it prints each block's time),
//! most of it in five compiles of GPT-2 tiny and the JIT.

use std::fmt::Write as _;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use regex::Regex;

/// The only `sh no-run` blocks, by content, with the reason each is not run here.
const NO_RUN: &[(&str, &str)] = &[(
    "make demo\nmake test\n",
    "the quick start: `make test` is this test suite, and `make demo` installs system \
     packages and builds the workspace; `.ci/run` runs both (checked by \
     `quick_start_runs_in_ci`)",
)];

/// Commands whose README output must be checked by a following `text output` block.
const CHECKED_OUTPUT: &[&str] = &[
    "tessera compile testdata/models/onnx/gpt2_tiny/model.onnx --input-shape input_ids=1x16 \
     --target mcm-2x2 -o gpt2-mcm",
    "tessera run gpt2-mcm --input input_ids=testdata/models/onnx/gpt2_tiny/input_0_input_ids.npy",
    "tessera explain gpt2-mcm/plan.json --op node_linear",
];

/// The repository folders the scratch directory links to.
const LINKED: &[&str] = &["testdata", "plugins", "targets"];

/// How long one block may run.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// A comment that gives the next block attributes without changing its fence (other tests
/// find blocks by their fence, e.g. the first `` ```toml ``).
const DIRECTIVE: &str = "<!-- readme-test:";

/// The marker the ERR trap prints before the failing command's script line.
const FAILED: &str = "@@readme-failed@@";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    fs::read_to_string(repo().join("README.md")).expect("README.md")
}

/// One fenced block of the README.
#[derive(Debug)]
struct Block {
    /// The README line of the opening fence (1-based).
    line: usize,
    /// The info string's first word.
    lang: String,
    /// The info string's other words.
    attrs: Vec<String>,
    /// The text between the fences, each line ending in `\n`.
    body: String,
}

impl Block {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find_map(|a| a.strip_prefix(key)?.strip_prefix('='))
    }

    fn has(&self, flag: &str) -> bool {
        self.attrs.iter().any(|a| a == flag)
    }

    fn runs(&self) -> bool {
        self.lang == "sh" && !self.has("no-run")
    }
}

/// The README's fenced blocks, with the attributes of a directive comment just before one.
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, Vec<String>)> = None;
    let mut lines = text.lines().enumerate();
    while let Some((i, l)) = lines.next() {
        if let Some(d) = l
            .strip_prefix(DIRECTIVE)
            .and_then(|d| d.trim_end().strip_suffix("-->"))
        {
            pending = Some((i + 1, d.split_whitespace().map(str::to_string).collect()));
            continue;
        }
        let Some(info) = l.strip_prefix("```") else {
            if let Some((at, _)) = pending.as_ref().filter(|_| !l.trim().is_empty()) {
                panic!("README.md:{at}: a `{DIRECTIVE}` comment must come just before its block");
            }
            continue;
        };
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("").to_string();
        let mut attrs: Vec<String> = words.map(str::to_string).collect();
        attrs.extend(pending.take().map(|(_, a)| a).unwrap_or_default());
        let mut body = String::new();
        let mut closed = false;
        for (_, l) in lines.by_ref() {
            if l.trim_end() == "```" {
                closed = true;
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        assert!(closed, "README.md:{}: the block is never closed", i + 1);
        out.push(Block {
            line: i + 1,
            lang,
            attrs,
            body,
        });
    }
    out
}

/// The block's command lines, continuation lines joined, each with its README line.
fn commands(b: &Block) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continues = false;
    for (i, l) in b.body.lines().enumerate() {
        let text = l.trim().trim_end_matches('\\').trim_end();
        if continues {
            let last = out.last_mut().expect("a command to continue");
            last.1.push(' ');
            last.1.push_str(text);
        } else if !text.is_empty() {
            out.push((b.line + 1 + i, text.to_string()));
        }
        continues = l.trim_end().ends_with('\\');
    }
    out
}

/// Single-quotes a path for bash.
fn quote(p: &Path) -> String {
    let s = p.to_str().expect("a UTF-8 path");
    assert!(!s.contains('\''), "path with a quote: {s}");
    format!("'{s}'")
}

/// The script run before each block: strict mode, stderr into stdout (one ordered output),
/// the ERR trap that names the failing line, the expected-failure helper and `cargo`.
fn prelude(bin_dir: &Path) -> String {
    let target_dir = bin_dir.parent().expect("the target directory");
    let profile = bin_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile directory");
    let profile_flag = if profile == "debug" {
        String::new()
    } else {
        format!(" --profile {profile}")
    };
    format!(
        r#"set -euo pipefail
exec 2>&1
trap 'echo "{FAILED} $LINENO $?"' ERR
__readme_fails() {{
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "tests/readme.rs: this command was to fail with exit code 1; it exited with $rc"
    return 1
  fi
}}
cargo() {{
  if [ "$*" != "build -p tessera-plugin-example" ]; then
    echo "tests/readme.rs: the README may run \`cargo build -p tessera-plugin-example\` only, not \`cargo $*\`"
    return 1
  fi
  if [ -x {bin_dir}/tessera-example ]; then
    echo "tests/readme.rs: using {bin_dir}/tessera-example as it is"
    return 0
  fi
  CARGO_TARGET_DIR={target_dir} command cargo build --manifest-path {manifest} -p tessera-plugin-example{profile_flag}
}}
"#,
        bin_dir = quote(bin_dir),
        target_dir = quote(target_dir),
        manifest = quote(&repo().join("Cargo.toml")),
    )
}

/// Numbers masked (a digit run not inside a name: `chip0` stays), spaces collapsed.
fn normalize(line: &str, number: &Regex) -> String {
    let masked = number.replace_all(line, "${1}#");
    masked.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks that the lines of `expected` appear in `actual` in order, numbers masked.
fn check_output(expected: &Block, actual: &str) -> Result<(), String> {
    let number = Regex::new(r"(^|[^A-Za-z0-9_])[0-9][0-9.,]*").expect("regex");
    let got: Vec<String> = actual.lines().map(|l| normalize(l, &number)).collect();
    let mut at = 0;
    for (i, want) in expected.body.lines().enumerate() {
        if want.trim().is_empty() || want.trim() == "..." {
            continue;
        }
        let norm = normalize(want, &number);
        match got[at..].iter().position(|g| *g == norm) {
            Some(k) => at += k + 1,
            None => {
                return Err(format!(
                    "README.md:{}: this line of the output shown is not in the real output \
                     (numbers aside), in order:\n  {want}\nreal output:\n{actual}",
                    expected.line + 1 + i
                ));
            }
        }
    }
    Ok(())
}

/// Where a `file=` block is written: relative, inside the scratch directory, not through a
/// link into the repository.
fn scratch_path(scratch: &Path, b: &Block, rel: &str) -> PathBuf {
    let p = Path::new(rel);
    let ok = p.components().all(|c| matches!(c, Component::Normal(_)))
        && p.components().next().is_some_and(|c| {
            let first = c.as_os_str().to_str().unwrap_or("");
            !LINKED.contains(&first) && first != "target"
        });
    assert!(
        ok,
        "README.md:{}: file={rel} must be a relative path outside {LINKED:?} and target/",
        b.line
    );
    scratch.join(p)
}

/// Runs one block's script in `dir`; returns the exit status (None: timed out) and output.
fn run_script(dir: &Path, script: &str, log: &Path, bin_dir: &Path) -> (Option<i32>, String) {
    let out = fs::File::create(log).expect("log file");
    let err = out.try_clone().expect("log file");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![bin_dir.to_path_buf()];
    paths.extend(std::env::split_paths(&path));
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", std::env::join_paths(paths).expect("PATH"))
        .env_remove("TESSERA_TARGET_PATH")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("bash runs");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s.code().unwrap_or(-1));
        }
        if start.elapsed() > BLOCK_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = String::from_utf8_lossy(&fs::read(log).expect("log")).into_owned();
    (status, text)
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn every_sh_block_of_the_readme_runs() {
    let readme = readme();
    let blocks = blocks(&readme);
    let tessera = PathBuf::from(env!("CARGO_BIN_EXE_tessera"));
    let bin_dir = tessera.parent().expect("bin dir").to_path_buf();

    let scratch = tempfile::tempdir().expect("scratch dir");
    let logs = tempfile::tempdir().expect("log dir");
    for name in LINKED {
        std::os::unix::fs::symlink(repo().join(name), scratch.path().join(name)).expect("link");
    }
    let debug = scratch.path().join("target/debug");
    fs::create_dir_all(&debug).expect("target/debug");
    std::os::unix::fs::symlink(&tessera, debug.join("tessera")).expect("link");
    std::os::unix::fs::symlink(
        bin_dir.join("tessera-example"),
        debug.join("tessera-example"),
    )
    .expect("link");

    let prelude = prelude(&bin_dir);
    let prelude_lines = prelude.lines().count();
    let mut last_output: Option<(usize, String)> = None;
    let mut checked: Vec<usize> = Vec::new();
    let mut times = String::new();
    for (n, b) in blocks.iter().enumerate() {
        assert!(
            !["bash", "shell", "console", "zsh"].contains(&b.lang.as_str()),
            "README.md:{}: a `{}` block: write `sh` so that tests/readme.rs runs it",
            b.line,
            b.lang
        );
        for a in &b.attrs {
            let known = matches!(a.as_str(), "no-run" | "output")
                || a.starts_with("file=")
                || a.starts_with("same-as=");
            assert!(known, "README.md:{}: unknown block attribute `{a}`", b.line);
        }
        if let Some(rel) = b.attr("file") {
            let path = scratch_path(scratch.path(), b, rel);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(&path, &b.body).expect("write file= block");
        }
        if let Some(rel) = b.attr("same-as") {
            let want = fs::read_to_string(repo().join(rel))
                .unwrap_or_else(|e| panic!("README.md:{}: same-as={rel}: {e}", b.line));
            assert_eq!(
                b.body.trim_end(),
                want.trim_end(),
                "README.md:{}: the block is not {rel}",
                b.line
            );
        }
        if b.has("output") {
            assert_eq!(
                b.lang, "text",
                "README.md:{}: output blocks are `text`",
                b.line
            );
            let prev = n.checked_sub(1).map(|p| &blocks[p]);
            let Some((line, out)) = last_output
                .as_ref()
                .filter(|_| prev.is_some_and(|p| p.runs()))
            else {
                panic!(
                    "README.md:{}: a `text output` block must follow the `sh` block it shows",
                    b.line
                );
            };
            if let Err(e) = check_output(b, out) {
                panic!("output of the block at README.md:{line}: {e}");
            }
            checked.push(*line);
        }
        if !b.runs() {
            continue;
        }
        let body: String = b
            .body
            .lines()
            .map(|l| match l.strip_prefix("! ") {
                Some(rest) => format!("__readme_fails {rest}\n"),
                None => format!("{l}\n"),
            })
            .collect();
        let script = format!("{prelude}{body}");
        let start = Instant::now();
        let log = logs.path().join(format!("block-{}.log", b.line));
        let (status, output) = run_script(scratch.path(), &script, &log, &bin_dir);
        let _ = writeln!(
            times,
            "README.md:{:<5} {:>6.1} s  {}",
            b.line,
            start.elapsed().as_secs_f64(),
            b.body.lines().next().unwrap_or("")
        );
        match status {
            Some(0) => {}
            None => panic!(
                "README.md:{}: the block ran longer than {BLOCK_TIMEOUT:?}:\n{}\noutput:\n{}",
                b.line,
                b.body,
                tail(&output, 60)
            ),
            Some(code) => {
                let failed = output
                    .lines()
                    .rev()
                    .find_map(|l| l.strip_prefix(FAILED))
                    .and_then(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
                    .filter(|&l| l > prelude_lines)
                    .map(|l| b.line + l - prelude_lines);
                let what = match failed
                    .and_then(|l| commands(b).into_iter().rev().find(|(at, _)| *at <= l))
                {
                    Some((at, cmd)) => format!("README.md:{at}: `{cmd}` failed"),
                    None => format!("README.md:{}: the block failed", b.line),
                };
                let shown: String = output
                    .lines()
                    .filter(|l| !l.starts_with(FAILED))
                    .map(|l| format!("{l}\n"))
                    .collect();
                panic!(
                    "{what} (exit code {code}); the block's output (stdout and stderr):\n{}",
                    tail(&shown, 60)
                );
            }
        }
        last_output = Some((b.line, output));
    }
    eprintln!("README blocks run:\n{times}");

    for cmd in CHECKED_OUTPUT {
        let b = blocks
            .iter()
            .find(|b| b.runs() && commands(b).iter().any(|(_, c)| c == cmd))
            .unwrap_or_else(|| panic!("the README no longer runs `{cmd}`"));
        assert!(
            checked.contains(&b.line),
            "README.md:{}: the output of `{cmd}` must be shown in a `text output` block after it",
            b.line
        );
    }
}

#[test]
fn no_run_blocks_are_the_allowed_ones() {
    let no_run: Vec<(usize, String)> = blocks(&readme())
        .into_iter()
        .filter(|b| b.lang == "sh" && b.has("no-run"))
        .map(|b| (b.line, b.body))
        .collect();
    let bodies: Vec<&str> = no_run.iter().map(|(_, b)| b.as_str()).collect();
    let allowed: Vec<&str> = NO_RUN.iter().map(|(b, _)| *b).collect();
    assert_eq!(
        bodies,
        allowed,
        "the README's `sh no-run` blocks (at {:?}) must be exactly those of NO_RUN in \
         tests/readme.rs, each with its reason",
        no_run.iter().map(|(l, _)| l).collect::<Vec<_>>()
    );
    for (_, reason) in NO_RUN {
        assert!(!reason.is_empty());
    }
}

#[test]
fn quick_start_runs_in_ci() {
    // The quick start's two commands are not run by this test (see NO_RUN); CI runs them.
    let readme = readme();
    let quick = blocks(&readme)
        .into_iter()
        .next()
        .expect("the README's first block");
    assert!(
        readme.starts_with("# tessera\n") && readme.contains("\n## Quick start\n"),
        "the README starts with `# tessera` and its quick start"
    );
    assert_eq!(
        quick.body, "make demo\nmake test\n",
        "the quick start's two commands"
    );

    let ci = fs::read_to_string(repo().join(".ci/run")).expect(".ci/run");
    let script: String = ci
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let demo = script.find("make demo");
    let test = script.find("make test");
    assert!(
        demo.is_some() && test.is_some() && demo < test,
        ".ci/run must run `make demo`, then `make test` (the README's quick start):\n{ci}"
    );
    let makefile = fs::read_to_string(repo().join("Makefile")).expect("Makefile");
    for target in ["demo:", "test:"] {
        assert!(
            makefile.lines().any(|l| l.starts_with(target)),
            "Makefile has no `{target}` target"
        );
    }
}
