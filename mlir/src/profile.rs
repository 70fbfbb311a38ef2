//! Measuring a compiled program kernel by kernel (`tessera run DIR --profile`, `tessera
//! calibrate`).
//!
//! [`instrument`] adds a mark to a device module as the lowering wrote it: at the entry of
//! each step function, before the return of each step function and part, and after every
//! kernel call in them. A mark is a call of `@tessera_mark(i64)` with the mark's number, a
//! function the JIT resolves to [`tessera_mark`], which records the number and the time.
//! Everything between two marks (the views and copies of the arguments at a call, the call)
//! is charged to the later one, so a step's kernels add up to the step. The kernels
//! themselves are untouched: the schedule finds its ops by function name and place, and
//! the CPU pipeline compiles them as in `compile -o`'s library.
//!
//! Each kernel call is headed by the lowering's comments naming the ops it computes
//! (`// op6 layer-norm "node_layer_norm"`); a mark's [`Site`] lists the ops named since the
//! mark before, which is how a measured time is set beside the cost model's.

use std::sync::Mutex;
use std::time::Instant;

use crate::Error;

/// The function a mark calls.
pub const MARK: &str = "tessera_mark";

/// What a mark follows (or, at a step's entry, precedes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// The entry of step function `@step<N>`.
    Entry,
    /// A call of the kernel of this name.
    Kernel(String),
    /// The return of a step function or part (what follows its last kernel call: views
    /// written inline, the return).
    Exit,
}

/// One mark in a device's module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The device whose module it is in.
    pub device: String,
    /// The step's id (`@step3`, `@step3_part1`: 3).
    pub step: usize,
    /// The function it is in.
    pub function: String,
    /// What it marks.
    pub kind: SiteKind,
    /// The ops the lowering's comments name since the mark before in the same function, as
    /// `(op, kind)`: `("op6", "layer-norm")`.
    pub ops: Vec<(String, String)>,
}

/// The step id of a step function's name (`step3`, `step3_part1`), or `None`.
fn step_of(function: &str) -> Option<(usize, bool)> {
    let rest = function.strip_prefix("step")?;
    let (id, part) = match rest.split_once("_part") {
        Some((id, part)) if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
            (id, true)
        }
        Some(_) => return None,
        None => (rest, false),
    };
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id.parse().ok()?, part))
}

/// The name of the function a `func.func` line defines (`  func.func private @k3_add(...`).
fn defined_function(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("func.func ")?;
    let rest = rest.strip_prefix("private ").unwrap_or(rest);
    let name = rest.strip_prefix('@')?;
    let end = name.find('(')?;
    Some(&name[..end])
}

/// The callee of a kernel call line (`%v3 = func.call @k2_matmul(...`), when it calls a
/// kernel (`@k<N>_...`).
fn kernel_call(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let call = match t.find(" = func.call @") {
        Some(at) if t.starts_with('%') => &t[at + " = ".len()..],
        _ => t,
    };
    let name = call.strip_prefix("func.call @")?;
    let name = &name[..name.find('(')?];
    let digits = name.strip_prefix('k')?;
    let n = digits.find('_').unwrap_or(digits.len());
    (n > 0 && digits[..n].bytes().all(|b| b.is_ascii_digit())).then_some(name)
}

/// The op and its kind of an op comment (`// op6 layer-norm "node_layer_norm"`).
fn op_comment(line: &str) -> Option<(String, String)> {
    let rest = line.trim_start().strip_prefix("// op")?;
    let n = rest.find(' ')?;
    if n == 0 || !rest[..n].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kind = rest[n + 1..].split(' ').next()?;
    Some((format!("op{}", &rest[..n]), kind.to_string()))
}

/// `module` with a mark at each step function's entry and return and after every kernel
/// call in a step function; the marks' sites in their numbers' order, numbered from
/// `first`. `device` names the module in errors and sites.
pub fn instrument(module: &str, device: &str, first: usize) -> Result<(String, Vec<Site>), Error> {
    let mut out = String::with_capacity(module.len() + module.len() / 8);
    let mut sites: Vec<Site> = Vec::new();
    // The function being read: its name, step id, and whether it is a step's top function.
    let mut current: Option<(String, usize, bool)> = None;
    let mut ops: Vec<(String, String)> = Vec::new();
    let mut declared = false;
    let mut mark = |out: &mut String, indent: &str, site: Site| {
        let n = first + sites.len();
        out.push_str(&format!(
            "{indent}%tessera_mark{n} = arith.constant {n} : i64\n\
             {indent}func.call @{MARK}(%tessera_mark{n}) : (i64) -> ()\n"
        ));
        sites.push(site);
    };
    for line in module.lines() {
        let indent = &line[..line.len() - line.trim_start().len()];
        if let Some(f) = defined_function(line) {
            current = step_of(f).map(|(id, part)| (f.to_string(), id, !part));
            ops.clear();
            out.push_str(line);
            out.push('\n');
            if let Some((f, id, true)) = &current {
                if !line.trim_end().ends_with('{') {
                    return Err(Error::Run {
                        message: format!(
                            "{device}: step function @{f} does not open its body on its first line"
                        ),
                    });
                }
                let site = Site {
                    device: device.to_string(),
                    step: *id,
                    function: f.clone(),
                    kind: SiteKind::Entry,
                    ops: Vec::new(),
                };
                mark(&mut out, &format!("{indent}  "), site);
            }
            continue;
        }
        if !declared && line.starts_with("module") && line.trim_end().ends_with('{') {
            out.push_str(line);
            out.push('\n');
            out.push_str(&format!("  func.func private @{MARK}(i64)\n"));
            declared = true;
            continue;
        }
        let Some((f, id, _)) = &current else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        if let Some(op) = op_comment(line) {
            ops.push(op);
        }
        let returns = line.trim_start().starts_with("return");
        if returns {
            let site = Site {
                device: device.to_string(),
                step: *id,
                function: f.clone(),
                kind: SiteKind::Exit,
                ops: std::mem::take(&mut ops),
            };
            mark(&mut out, indent, site);
        }
        out.push_str(line);
        out.push('\n');
        if let Some(k) = kernel_call(line) {
            let site = Site {
                device: device.to_string(),
                step: *id,
                function: f.clone(),
                kind: SiteKind::Kernel(k.to_string()),
                ops: std::mem::take(&mut ops),
            };
            mark(&mut out, indent, site);
        }
        if line.trim_end() == "}" && indent.len() <= 2 {
            current = None;
        }
    }
    if !declared {
        return Err(Error::Run {
            message: format!("{device}: no `module {{` line to declare @{MARK} in"),
        });
    }
    Ok((out, sites))
}

/// The marks recorded since [`start`]: each mark's number and time.
static MARKS: Mutex<Vec<(u32, Instant)>> = Mutex::new(Vec::new());

/// Whether marks are recorded ([`start`] to [`pause`]).
static RECORDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// What a mark calls: records its number and the time (while recording; it reads the
/// clock either way, so that a warm-up run costs what a timed one does).
pub extern "C" fn tessera_mark(n: i64) {
    let now = Instant::now();
    if !RECORDING.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let mut marks = MARKS.lock().unwrap_or_else(|e| e.into_inner());
    marks.push((u32::try_from(n).unwrap_or(u32::MAX), now));
}

/// Stops recording marks until the next [`start`] (for warm-up runs).
pub fn pause() {
    RECORDING.store(false, std::sync::atomic::Ordering::Relaxed);
}

/// Forgets the marks recorded so far and records from now on (with room for `capacity`
/// more, touched, so that recording neither allocates nor faults).
pub fn start(capacity: usize) {
    let mut marks = MARKS.lock().unwrap_or_else(|e| e.into_inner());
    // Room for `capacity`, touched now, so that no mark takes a page fault.
    marks.clear();
    marks.resize(capacity, (0, Instant::now()));
    marks.clear();
    RECORDING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The marks recorded since [`start`], in order.
pub fn take() -> Vec<(u32, Instant)> {
    let mut marks = MARKS.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut *marks)
}

/// The time one run of a marked program spent, site by site.
#[derive(Clone, Debug, PartialEq)]
pub struct RunTimes {
    /// The run's wall time, seconds (the runner's work between steps included).
    pub total: f64,
    /// The seconds charged to each site (by its index in the sites), 0 where it was not
    /// reached: from the mark before it to its own. An entry mark is charged nothing.
    pub charged: Vec<f64>,
    /// Each charged interval in the run's order: the site and its start and end, seconds
    /// from the run's start.
    pub spans: Vec<(usize, f64, f64)>,
}

/// Charges the intervals between a run's marks (`marks`, as [`take`] gives them; the run
/// from `start` to `end`) to the marks' sites: each interval to the mark that ends it,
/// unless that mark is a step's entry (the time before it is the runner's).
pub fn charge(
    sites: &[Site],
    marks: &[(u32, Instant)],
    start: Instant,
    end: Instant,
) -> Result<RunTimes, Error> {
    let since = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let mut charged = vec![0.0; sites.len()];
    let mut spans = Vec::new();
    let mut before: Option<Instant> = None;
    for &(n, t) in marks {
        let site = sites.get(n as usize).ok_or_else(|| Error::Run {
            message: format!(
                "profile: mark {n} is not one of the program's {} marks",
                sites.len()
            ),
        })?;
        if let (Some(b), false) = (before, site.kind == SiteKind::Entry) {
            let secs = t.saturating_duration_since(b).as_secs_f64();
            charged[n as usize] += secs;
            spans.push((n as usize, since(b), since(t)));
        }
        before = Some(t);
    }
    Ok(RunTimes {
        total: end.saturating_duration_since(start).as_secs_f64(),
        charged,
        spans,
    })
}

/// The median of `values` (the upper one of an even count); 0 for none.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODULE: &str = "module @cpu0 {
  func.func private @k0_add(%arg0: tensor<4xf32>) -> (tensor<4xf32>) attributes {passthrough = [\"noinline\"]} {
    return %arg0 : tensor<4xf32>
  }
  func.func private @step0_part0(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    // op1 add \"node_a\"
    // op2 relu \"node_b\"
    %v0 = func.call @k0_add(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>) loc(fused[\"node_a\", \"node_b\"])
    // op3 reshape \"node_c\"
    %v1 = func.call @k0_add(%v0) : (tensor<4xf32>) -> (tensor<4xf32>) loc(\"node_c\")
    // op4 reshape \"node_d\"
    return %v1 : tensor<4xf32>
  }
  func.func @step0(%arg0: tensor<4xf32>) -> (tensor<4xf32>) attributes {llvm.emit_c_interface} {
    %v0 = func.call @step0_part0(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>)
    return %v0 : tensor<4xf32>
  }
}
";

    #[test]
    fn marks_each_kernel_call_and_the_step_s_entry_and_return() {
        let (text, sites) = instrument(MODULE, "cpu0", 5).expect("instruments");
        let kinds: Vec<(&str, &SiteKind, Vec<&str>)> = sites
            .iter()
            .map(|s| {
                (
                    s.function.as_str(),
                    &s.kind,
                    s.ops.iter().map(|(o, _)| o.as_str()).collect(),
                )
            })
            .collect();
        let k = |n: &str| SiteKind::Kernel(n.to_string());
        assert_eq!(
            kinds,
            [
                ("step0_part0", &k("k0_add"), vec!["op1", "op2"]),
                ("step0_part0", &k("k0_add"), vec!["op3"]),
                ("step0_part0", &SiteKind::Exit, vec!["op4"]),
                ("step0", &SiteKind::Entry, vec![]),
                ("step0", &SiteKind::Exit, vec![]),
            ]
        );
        assert!(sites.iter().all(|s| s.step == 0 && s.device == "cpu0"));
        assert_eq!(sites[1].ops, [("op3".to_string(), "reshape".to_string())]);
        // Numbered from 5, in the text's order; the kernel itself untouched.
        let expected = "module @cpu0 {
  func.func private @tessera_mark(i64)
  func.func private @k0_add(%arg0: tensor<4xf32>) -> (tensor<4xf32>) attributes {passthrough = [\"noinline\"]} {
    return %arg0 : tensor<4xf32>
  }
  func.func private @step0_part0(%arg0: tensor<4xf32>) -> (tensor<4xf32>) {
    // op1 add \"node_a\"
    // op2 relu \"node_b\"
    %v0 = func.call @k0_add(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>) loc(fused[\"node_a\", \"node_b\"])
    %tessera_mark5 = arith.constant 5 : i64
    func.call @tessera_mark(%tessera_mark5) : (i64) -> ()
    // op3 reshape \"node_c\"
    %v1 = func.call @k0_add(%v0) : (tensor<4xf32>) -> (tensor<4xf32>) loc(\"node_c\")
    %tessera_mark6 = arith.constant 6 : i64
    func.call @tessera_mark(%tessera_mark6) : (i64) -> ()
    // op4 reshape \"node_d\"
    %tessera_mark7 = arith.constant 7 : i64
    func.call @tessera_mark(%tessera_mark7) : (i64) -> ()
    return %v1 : tensor<4xf32>
  }
  func.func @step0(%arg0: tensor<4xf32>) -> (tensor<4xf32>) attributes {llvm.emit_c_interface} {
    %tessera_mark8 = arith.constant 8 : i64
    func.call @tessera_mark(%tessera_mark8) : (i64) -> ()
    %v0 = func.call @step0_part0(%arg0) : (tensor<4xf32>) -> (tensor<4xf32>)
    %tessera_mark9 = arith.constant 9 : i64
    func.call @tessera_mark(%tessera_mark9) : (i64) -> ()
    return %v0 : tensor<4xf32>
  }
}
";
        assert_eq!(text, expected);
    }

    #[test]
    fn intervals_are_charged_to_the_mark_that_ends_them() {
        let (_, sites) = instrument(MODULE, "cpu0", 0).expect("instruments");
        // Execution order: the entry (3), the two kernels (0, 1), the part's return (2),
        // the step's (4).
        let t0 = Instant::now();
        let at = |us: u64| t0 + std::time::Duration::from_micros(us);
        let marks = [
            (3, at(10)),
            (0, at(40)),
            (1, at(45)),
            (2, at(46)),
            (4, at(47)),
        ];
        let run = charge(&sites, &marks, t0, at(50)).expect("charges");
        let us: Vec<i64> = run
            .charged
            .iter()
            .map(|s| (s * 1e6).round() as i64)
            .collect();
        assert_eq!(us, [30, 5, 1, 0, 1]);
        assert_eq!((run.total * 1e6).round(), 50.0);
        let spans: Vec<(usize, i64, i64)> = run
            .spans
            .iter()
            .map(|&(s, a, b)| (s, (a * 1e6).round() as i64, (b * 1e6).round() as i64))
            .collect();
        assert_eq!(spans, [(0, 10, 40), (1, 40, 45), (2, 45, 46), (4, 46, 47)]);
        let e = charge(&sites, &[(9, at(1))], t0, at(2)).expect_err("not a mark");
        assert!(
            e.to_string()
                .contains("mark 9 is not one of the program's 5 marks"),
            "{e}"
        );
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut []), 0.0);
    }

    #[test]
    fn names() {
        assert_eq!(step_of("step12"), Some((12, false)));
        assert_eq!(step_of("step3_part10"), Some((3, true)));
        for f in ["step", "stepx", "step3_part", "step3_partx", "k0_step"] {
            assert_eq!(step_of(f), None, "{f}");
        }
        assert_eq!(
            kernel_call("    func.call @k4_copy(%a) : ..."),
            Some("k4_copy")
        );
        assert_eq!(kernel_call("    %v2:2 = func.call @k10(%a)"), Some("k10"));
        assert_eq!(kernel_call("    %v2 = func.call @step0_part1(%a)"), None);
        assert_eq!(kernel_call("    %v2 = func.call @kx_y(%a)"), None);
        assert_eq!(
            op_comment("    // op17 layer-norm \"n\""),
            Some(("op17".into(), "layer-norm".into()))
        );
        assert_eq!(op_comment("    // open"), None);
    }

    #[test]
    fn a_module_without_a_module_line_is_an_error() {
        let e = instrument("func.func @step0() {\n}\n", "gpu1", 0).expect_err("no module");
        assert!(e.to_string().contains("gpu1: no `module {` line"), "{e}");
    }
}
