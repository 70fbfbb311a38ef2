//! `tessera calibrate --target T --device D -o calib.toml [MODEL...]`: measures the ops of
//! the given models (or of a standard set of op shapes) on device D and writes a
//! calibration file, which `compile --calibration` reads.
//!
//! Each model is compiled as `compile` would (the default pass pipeline), every op pinned to
//! D, and lowered; its modules are JIT-compiled with a mark after every kernel call
//! ([`tessera_mlir::profile`]) and run to warm up (once, then for 50 ms), then `--repeat` times, on the
//! model's inputs (`--input`, one model) or made-up ones (floats from a fixed sequence in
//! [-1, 1), integers and booleans one: indices in range, masks that keep everything). A
//! kernel call's median time is shared among the ops it computes in proportion to their
//! modelled (uncalibrated) times, so an elementwise op fused into a product costs what it
//! adds; an op met several times with the same operand types gets the mean of its shares
//! (so that the model's total is kept: the same op costs more in some kernels than in
//! others). Ops modelled at no time (views) are not measured. A model with symbolic
//! dimensions is measured again with each doubled, and all of them ([`doubled`]). For the
//! shapes not measured, the file scales the op's work, `overhead + flop_seconds × FLOPs +
//! byte_seconds × bytes`, fitted per op kind to its measured shapes, per operand pattern
//! (an op's types with the extents that doubled as `?`: [`patterns`]) and, for ops not
//! measured at all, to every shape ([`fit`]).
//!
//! CPU devices run here, NVIDIA GPU devices on this machine's GPU.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tessera_ir::{ElemType, Graph, OpId, Tensor};
use tessera_targets::limits::{MAX_SECONDS, MAX_WORK_SECONDS};
use tessera_targets::{Calibration, CostModel, Scale, Target};

use super::InputShape;
use super::run::Binding;

/// What `tessera calibrate` was asked.
pub struct CalibrateRequest<'a> {
    /// The models whose ops are measured; none: [`STANDARD`].
    pub models: &'a [PathBuf],
    /// The target.
    pub target: &'a str,
    /// `--target-path` directories.
    pub target_path: &'a [PathBuf],
    /// The device measured.
    pub device: &'a str,
    /// The calibration file written.
    pub output: &'a Path,
    /// Timed runs of each model.
    pub repeat: usize,
    /// `--input-shape`.
    pub shapes: &'a [InputShape],
    /// `--input`: the model's inputs (one model only) instead of made-up ones.
    pub bindings: &'a [Binding],
    /// `--one-shape`: each model at its given shapes only, not again with its symbolic
    /// dimensions doubled.
    pub one_shape: bool,
    /// `--merge`: calibration files whose measurements are merged (nothing is measured).
    pub merge: &'a [PathBuf],
}

/// The standard set of op shapes, measured when no model is given: products (square ones,
/// 4 rows against a 256 KiB matrix and 8 against a 4 MiB one, which their weights bound;
/// with a bias too, as the passes make most products), convolutions (a wide image, and 4x4
/// pixels of 128 channels, which its weights bound), softmax, layer norm, elementwise ops
/// and a transpose, each on its own
/// (every operand a graph input, every result an output, so nothing is fused).
pub const STANDARD: &str = "graph @standard(%a: f32[128, 256], %b: f32[256, 256], %c: f32[256, 512], %d: f32[512, 512], %img: f32[1, 32, 56, 56], %w: f32[64, 32, 3, 3], %s: f32[64, 256], %t: f32[256, 1024], %g: f32[1024], %u: f32[8, 64, 128], %r: f32[8, 1024], %k: f32[1024, 1024], %bias: f32[256], %q: f32[4, 256], %deep: f32[1, 128, 4, 4], %wdeep: f32[128, 128, 3, 3]) {
  %mm = matmul %a, %b : f32[128, 256]
  %mm.few = matmul %q, %b : f32[4, 256]
  %mm.large = matmul %c, %d : f32[256, 512]
  %mm.rows = matmul %r, %k : f32[8, 1024]
  %gemm = gemm %a, %b, %bias {alpha = 1.0, beta = 1.0, trans-a = false, trans-b = false} : f32[128, 256]
  %gemm.rows = gemm %r, %k, %g {alpha = 1.0, beta = 1.0, trans-a = false, trans-b = false} : f32[8, 1024]
  %bmm = matmul %u, %a : f32[8, 64, 256]
  %conv = conv %img, %w {dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]} : f32[1, 64, 56, 56]
  %conv.deep = conv %deep, %wdeep {dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]} : f32[1, 128, 4, 4]
  %sm = softmax %s {axis = 1} : f32[64, 256]
  %ln = layer-norm %t, %g {axis = 1, epsilon = 1e-5} : f32[256, 1024]
  %add = add %t, %t : f32[256, 1024]
  %mul = mul %t, %g : f32[256, 1024]
  %relu = relu %t : f32[256, 1024]
  %tanh = tanh %t : f32[256, 1024]
  %tr = transpose %u {perm = [0, 2, 1]} : f32[8, 128, 64]
  return %mm, %mm.few, %mm.large, %mm.rows, %gemm, %gemm.rows, %bmm, %conv, %conv.deep, %sm, %ln, %add, %mul, %relu, %tanh, %tr
}
";

/// Made-up inputs of the given types: floats from a fixed sequence in [-1, 1), integers
/// and booleans one (an index in range of any axis longer than one; a mask that keeps
/// everything), other types zero.
fn inputs(graph: &Graph, what: &str) -> Result<Vec<Tensor>> {
    let mut state: u32 = 0x9e37_79b9;
    let mut next = || {
        // xorshift32: a fixed, well-spread sequence.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (f64::from(state) / f64::from(u32::MAX)) * 2.0 - 1.0
    };
    graph
        .inputs()
        .iter()
        .map(|&v| {
            let ty = graph.ty(v);
            let dims = ty.static_dims().ok_or_else(|| {
                anyhow!("{what}: input {ty} is not static: bind its dimensions with --input-shape")
            })?;
            let shape: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
            let n: usize = shape.iter().product();
            let made = match ty.elem {
                ElemType::F32 => {
                    let bytes: Vec<u8> =
                        (0..n).flat_map(|_| (next() as f32).to_le_bytes()).collect();
                    Tensor::from_le_bytes(ty.elem, &shape, &bytes).map_err(|e| e.to_string())
                }
                ElemType::F64 => {
                    let bytes: Vec<u8> = (0..n).flat_map(|_| next().to_le_bytes()).collect();
                    Tensor::from_le_bytes(ty.elem, &shape, &bytes).map_err(|e| e.to_string())
                }
                e if !e.is_float() => {
                    let mut one = vec![0u8; e.size_bytes()];
                    one[0] = 1;
                    let bytes: Vec<u8> = (0..n).flat_map(|_| one.iter().copied()).collect();
                    Tensor::from_le_bytes(e, &shape, &bytes).map_err(|e| e.to_string())
                }
                e => Tensor::zeros(e, &shape).map_err(|e| e.to_string()),
            };
            made.map_err(|e| anyhow!("{what}: input {ty}: {e}"))
        })
        .collect()
}

/// One measured shape of an op: its work and measured seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// FLOPs.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
    /// The measured seconds.
    pub seconds: f64,
}

/// The scale that fits `points` best: `overhead + flop_seconds × FLOPs + byte_seconds ×
/// bytes`, the device's own balance of compute and memory, with the least squared relative
/// error `Σ (predicted / measured - 1)²` (a small op's point counts as much as a large
/// one's) and no term negative. Each subset of the three terms is fitted by least squares
/// and the best fit whose terms are all non-negative is kept (the non-negative least
/// squares solution: with three terms, trying every subset is exact); a fit with more terms
/// only where its error is a hundredth less, and between fits as good as each other, the
/// one with fewer terms, then work before overhead, FLOPs before bytes:
/// one shape is fitted by its FLOPs alone (or bytes, where it has none), two by an overhead
/// and one kind of work. `None` without points.
pub fn fit(points: &[Point]) -> Option<Scale> {
    // Subsets of the terms (flops, bytes, overhead), fewest first.
    const SUBSETS: [&[usize]; 7] = [&[0], &[1], &[2], &[0, 2], &[1, 2], &[0, 1], &[0, 1, 2]];
    let mut best: Option<([f64; 3], f64)> = None;
    for subset in SUBSETS {
        let Some(coef) = least_squares(points, subset) else {
            continue;
        };
        if coef.iter().any(|c| !c.is_finite() || *c < 0.0) {
            continue;
        }
        let residual: f64 = points
            .iter()
            .map(|p| {
                let x = terms(p);
                let predicted: f64 = (0..3).map(|k| coef[k] * x[k]).sum();
                (predicted / p.seconds - 1.0).powi(2)
            })
            .sum();
        // A fit with more terms only where it is better by a hundredth (and more than
        // round-off): an exact or near fit with fewer terms stays, rather than terms that
        // few points cannot tell apart.
        if best.is_none_or(|(_, r)| residual < 0.99 * r - 1e-12) {
            best = Some((coef, residual));
        }
    }
    let ([flop_seconds, byte_seconds, overhead], _) = best?;
    // (What the file cannot state is none: a subnormal would not read back, and terms past
    // the limits are not a machine's.)
    let keep = |x: f64, max: f64| {
        if x < f64::MIN_POSITIVE {
            0.0
        } else {
            x.min(max)
        }
    };
    Some(Scale {
        factor: 0.0,
        overhead: keep(overhead, MAX_SECONDS),
        flop_seconds: keep(flop_seconds, MAX_WORK_SECONDS),
        byte_seconds: keep(byte_seconds, MAX_WORK_SECONDS),
    })
}

/// A point's terms: its FLOPs, its bytes and 1 (the overhead's).
fn terms(p: &Point) -> [f64; 3] {
    [p.flops, p.bytes, 1.0]
}

/// The least-squares coefficients of the terms in `subset` (indices into [`terms`], the
/// others 0) for `Σ (Σ_k c_k · x_k / y - 1)²`, or `None` where the terms do not tell the
/// coefficients apart. The columns are normalized first, so that FLOPs, bytes and a
/// constant compare.
fn least_squares(points: &[Point], subset: &[usize]) -> Option<[f64; 3]> {
    let n = subset.len();
    let rows: Vec<Vec<f64>> = points
        .iter()
        .map(|p| {
            let x = terms(p);
            subset.iter().map(|&k| x[k] / p.seconds).collect()
        })
        .collect();
    let norms: Vec<f64> = (0..n)
        .map(|j| rows.iter().map(|r| r[j] * r[j]).sum::<f64>().sqrt())
        .collect();
    if norms.iter().any(|&s| !(s.is_finite() && s > 0.0)) {
        return None;
    }
    // Normal equations of the normalized columns: a[i][j] = Σ r_i r_j, b[i] = Σ r_i.
    let mut a = vec![vec![0.0; n + 1]; n];
    for r in &rows {
        for i in 0..n {
            for j in 0..n {
                a[i][j] += r[i] / norms[i] * r[j] / norms[j];
            }
            a[i][n] += r[i] / norms[i];
        }
    }
    // Gaussian elimination with partial pivoting; a pivot near 0 is a column that the
    // others (nearly) make.
    for col in 0..n {
        let pivot = (col..n).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
        if a[pivot][col].abs() < 1e-6 {
            return None;
        }
        a.swap(col, pivot);
        let pivot_row = a[col].clone();
        for (row, r) in a.iter_mut().enumerate() {
            if row != col {
                let f = r[col] / pivot_row[col];
                for (x, p) in r.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut coef = [0.0; 3];
    for (i, &k) in subset.iter().enumerate() {
        coef[k] = a[i][n] / a[i][i] / norms[i];
    }
    Some(coef)
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// This machine's CPU as `/proc/cpuinfo` names it, or `this CPU`.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|r| r.split_once(':'))
                .map(|(_, n)| n.trim().to_string())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "this CPU".to_string())
}

/// `(device, op name, operand types)`.
type Key = (String, String, Vec<String>);

/// Each op's work (FLOPs, bytes) and its shares of its kernels' times.
type Shares = BTreeMap<Key, ((f64, f64), Vec<f64>)>;

/// Runs `tessera calibrate`.
pub fn run(req: &CalibrateRequest<'_>) -> Result<()> {
    let target = super::targets::resolve(req.target, req.target_path).context("--target")?;
    let spec = target.spec();
    let Some(device) = spec.devices.iter().position(|d| d.name == req.device) else {
        let names: Vec<&str> = spec.devices.iter().map(|d| d.name.as_str()).collect();
        bail!(
            "--device {}: target {} has no such device (its devices: {})",
            req.device,
            spec.name,
            names.join(", ")
        );
    };
    if !req.merge.is_empty() {
        return run_merge(req, spec);
    }
    let (kind, lowering) = (&spec.devices[device].kind, &spec.devices[device].lowering);
    let gpus = if lowering == "nvptx" {
        tessera_mlir::GpuDevices::OnGpu
    } else if kind == "cpu" {
        tessera_mlir::GpuDevices::OnCpu
    } else {
        bail!(
            "--device {}: a `{kind}` device of lowering `{lowering}`; only `cpu` devices (on \
             this CPU) and NVIDIA GPUs (`nvptx`, on this machine's GPU) can be measured",
            req.device
        );
    };
    if gpus == tessera_mlir::GpuDevices::OnGpu {
        tessera_mlir::cuda::gpus()
            .with_context(|| format!("--device {}: an NVIDIA GPU, measured on one", req.device))?;
    }
    if !req.bindings.is_empty() && req.models.len() != 1 {
        bail!(
            "--input gives one model's inputs: give exactly one MODEL with it (got {})",
            req.models.len()
        );
    }
    let mut shares: Shares = BTreeMap::new();
    let mut operand_patterns = Patterns::new();
    let mut measured_models = Vec::new();
    let on = (&*target, device, gpus);
    if req.models.is_empty() {
        let graph = tessera_ir::text::parse(STANDARD, None)
            .map_err(|e| anyhow!("the standard set: {e}"))?;
        let m = measure_model(graph, "the standard set", on, req, Feed::MadeUp)?;
        merge(&mut shares, m.shares);
        measured_models.push("the standard set".to_string());
    }
    for path in req.models {
        let graph = super::load_model(path, req.shapes)?;
        let what = path.display().to_string();
        let feed = if req.bindings.is_empty() {
            Feed::MadeUp
        } else {
            Feed::Given
        };
        let given = measure_model(graph, &what, on, req, feed)?;
        merge(&mut shares, given.shares);
        measured_models.push(what.clone());
        if req.one_shape {
            continue;
        }
        // Again with each symbolic dimension doubled, and with all of them where there are
        // several: how each op's time grows with them.
        let declared = super::declared_inputs(path)?;
        let mut symbols: Vec<Vec<&str>> = Vec::new();
        for (_, ty) in &declared {
            for d in &ty.shape {
                if let tessera_ir::Dim::Sym(s) = d
                    && !symbols.iter().any(|v| v == &[s.as_str()])
                {
                    symbols.push(vec![s.as_str()]);
                }
            }
        }
        if symbols.len() > 1 {
            symbols.push(symbols.concat());
        }
        for which in symbols {
            let tile = !req.bindings.is_empty();
            let (shapes, tiled) = match doubled(&declared, &which, &given.fed, tile) {
                Ok(Some(d)) => d,
                Ok(None) => continue,
                Err(e) => {
                    let which = which.join(", ");
                    eprintln!("warning: {what} with {which} doubled: {e:#}; not measured");
                    continue;
                }
            };
            let at = format!("{what} at {}", shapes_text(&shapes));
            let again = super::load_model(path, &shapes).and_then(|graph| {
                let feed = tiled.map_or(Feed::MadeUp, Feed::These);
                measure_model(graph, &at, on, req, feed)
            });
            match again {
                Ok(more) => {
                    merge(&mut shares, more.shares);
                    patterns(&given.keys, &more.keys, &mut operand_patterns);
                    measured_models.push(at);
                }
                Err(e) => eprintln!("warning: {at}: {e:#}; not measured"),
            }
        }
    }
    let mut header = String::new();
    let _ = writeln!(
        header,
        "# tessera calibrate: measured on {} of target {} ({}), {} runs after a warm-up,",
        req.device,
        spec.name,
        cpu_name(),
        req.repeat
    );
    let _ = writeln!(
        header,
        "# each op's share of its kernel's median time (the mean of its shares where it is met \
         several times)"
    );
    let _ = writeln!(header, "# of: {}", comment(&measured_models.join(", ")));
    let measured: Measured = shares
        .into_iter()
        .map(|((dev, op, operands), (work, values))| {
            let seconds = values.iter().sum::<f64>() / values.len().max(1) as f64;
            ((dev, op, Some(operands)), (seconds, Some(work)))
        })
        .collect();
    let what = format!("{} on {}", measured_models.join(", "), req.device);
    write(req, spec, header, (measured, operand_patterns), &what)
}

/// `s` with its control characters as `?`, for a comment (a newline would end it).
fn comment(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// `(device, op name, operand types or None for any)`.
type MeasuredKey = (String, String, Option<Vec<String>>);

/// An op's FLOPs and bytes.
type Work = (f64, f64);

/// Measured seconds and work by [`MeasuredKey`].
type Measured = BTreeMap<MeasuredKey, (f64, Option<Work>)>;

/// `tessera calibrate --merge`: the measurements of `req.device` in each file; one met in
/// several takes the median of their seconds. The scales are fitted again to them all, the
/// files' operand patterns among them.
fn run_merge(req: &CalibrateRequest<'_>, spec: &tessera_targets::TargetSpec) -> Result<()> {
    if !req.models.is_empty() || !req.bindings.is_empty() || !req.shapes.is_empty() || req.one_shape
    {
        bail!(
            "--merge reads calibration files and measures nothing: give no MODEL, --input, \
             --input-shape or --one-shape with it"
        );
    }
    // Each measurement's seconds in every file, and its work; the operand patterns.
    let mut all: BTreeMap<MeasuredKey, (Vec<f64>, Option<Work>)> = BTreeMap::new();
    let mut operand_patterns = Patterns::new();
    for path in req.merge {
        let calibration = Calibration::load(path)?;
        calibration.check(spec)?;
        for (device, op, patterns) in calibration.operand_patterns() {
            if device == req.device {
                operand_patterns.insert((device.to_string(), op.to_string(), patterns.to_vec()));
            }
        }
        let mut without = 0;
        for m in calibration
            .measurements()
            .filter(|m| m.device == req.device)
        {
            let key = (
                m.device.to_string(),
                m.op.to_string(),
                m.operands.map(<[String]>::to_vec),
            );
            let entry = all.entry(key).or_insert((Vec::new(), m.work));
            entry.0.push(m.seconds);
            entry.1 = entry.1.or(m.work);
            without += usize::from(m.work.is_none());
        }
        if without > 0 {
            eprintln!(
                "warning: {}: {without} measurements of {} give no work (flops and bytes): \
                 the scales are fitted without them",
                path.display(),
                req.device
            );
        }
    }
    let files: Vec<String> = req.merge.iter().map(|p| p.display().to_string()).collect();
    let mut header = String::new();
    let _ = writeln!(
        header,
        "# tessera calibrate --merge: the measurements of {} (target {}) in",
        req.device, spec.name
    );
    let _ = writeln!(header, "# {}", comment(&files.join(", ")));
    let _ = writeln!(
        header,
        "# (one met in several files: the median of their seconds), scales fitted to them,\n\
         # the files' operand patterns among them"
    );
    let measured: Measured = all
        .into_iter()
        .map(|(key, (mut values, work))| (key, (tessera_mlir::profile::median(&mut values), work)))
        .collect();
    let what = format!("{} merged for {}", files.join(", "), req.device);
    write(req, spec, header, (measured, operand_patterns), &what)
}

/// Writes the calibration file: `header`, each measurement, and the scales fitted to
/// those with their work, per op kind, for any op and per operand pattern (to the measurements that fit it;
/// one point per shape). `what` says what it holds in the line printed.
fn write(
    req: &CalibrateRequest<'_>,
    spec: &tessera_targets::TargetSpec,
    mut text: String,
    (measured, operand_patterns): (Measured, Patterns),
    what: &str,
) -> Result<()> {
    let mut points: BTreeMap<Option<String>, Vec<Point>> = BTreeMap::new();
    for ((_, op, _), &(seconds, work)) in &measured {
        if let Some((flops, bytes)) = work
            && seconds > 0.0
        {
            let point = Point {
                flops,
                bytes,
                seconds,
            };
            points.entry(Some(op.clone())).or_default().push(point);
            points.entry(None).or_default().push(point);
        }
    }
    for ((dev, op, operands), &(seconds, work)) in &measured {
        // (A subnormal time would not read back as seconds.)
        let seconds = if seconds < f64::MIN_POSITIVE {
            0.0
        } else {
            seconds
        };
        let _ = write!(
            text,
            "\n[[measurement]]\ndevice = {}\nop = {}\n",
            toml_string(dev),
            toml_string(op),
        );
        if let Some(operands) = operands {
            let operands: Vec<String> = operands.iter().map(|o| toml_string(o)).collect();
            let _ = writeln!(text, "operands = [{}]", operands.join(", "));
        }
        let _ = writeln!(text, "seconds = {seconds:e}");
        if let Some((flops, bytes)) = work {
            let _ = writeln!(text, "flops = {flops:e}\nbytes = {bytes:e}");
        }
    }
    let mut scales: Vec<(Option<String>, Option<Vec<String>>, Scale)> = points
        .into_iter()
        .filter_map(|(op, points)| Some((op, None, fit(&points)?)))
        .collect();
    for (dev, op, patterns) in operand_patterns {
        let points: Vec<Point> = measured
            .iter()
            .filter(|((d, o, operands), _)| {
                d == &dev
                    && o == &op
                    && operands
                        .as_ref()
                        .is_some_and(|types| tessera_targets::operands_fit(&patterns, types))
            })
            .filter_map(|(_, &(seconds, work))| {
                let (flops, bytes) = work?;
                (seconds > 0.0).then_some(Point {
                    flops,
                    bytes,
                    seconds,
                })
            })
            .collect();
        // (A pattern fitted to the op kind's own points says nothing more.)
        if points.len() >= 2
            && let Some(scale) = fit(&points)
            && !scales.contains(&(Some(op.clone()), None, scale))
        {
            scales.push((Some(op), Some(patterns), scale));
        }
    }
    for (op, patterns, scale) in scales {
        let _ = write!(text, "\n[[scale]]\ndevice = {}\n", toml_string(req.device));
        if let Some(op) = op {
            let _ = writeln!(text, "op = {}", toml_string(&op));
        }
        if let Some(patterns) = patterns {
            let patterns: Vec<String> = patterns.iter().map(|p| toml_string(p)).collect();
            let _ = writeln!(text, "operands = [{}]", patterns.join(", "));
        }
        let _ = write!(
            text,
            "overhead = {:e}\nflop_seconds = {:e}\nbyte_seconds = {:e}\n",
            scale.overhead, scale.flop_seconds, scale.byte_seconds
        );
    }
    // What is written must read back.
    let out = req.output.display().to_string();
    let check = Calibration::parse(&text, &out)?;
    check.check(spec)?;
    super::write_atomically(req.output, text.as_bytes())?;
    super::print_stdout(&format!(
        "wrote {} ({} measurements and {} scales of {what})\n",
        out,
        check.len(),
        check.scales(),
    ))
}

/// Adds `more`'s shares to `shares`.
fn merge(shares: &mut Shares, more: Shares) {
    for (key, (work, values)) in more {
        shares
            .entry(key)
            .or_insert((work, Vec::new()))
            .1
            .extend(values);
    }
}

/// The inputs a model is measured on.
enum Feed {
    /// Made up ([`inputs`]).
    MadeUp,
    /// `--input`'s files.
    Given,
    /// These tensors.
    These(Vec<Tensor>),
}

/// `--input-shape NAME=AxB,...` as text.
fn shapes_text(shapes: &[InputShape]) -> String {
    let each: Vec<String> = shapes
        .iter()
        .map(|s| {
            let dims: Vec<String> = s.dims.iter().map(u64::to_string).collect();
            format!("{}={}", s.name, dims.join("x"))
        })
        .collect();
    each.join(", ")
}

/// The shapes of a model's inputs (`declared` as the file declares them) with each
/// symbolic dimension named in `which` twice its extent in `fed` (the inputs it was
/// measured on, by name; every input with a symbolic dimension is bound, at its extents
/// in `fed` where not doubled), and, where `tile`, those inputs tiled along the doubled
/// axes (each block twice). `None` where no extent doubles.
fn doubled(
    declared: &[(String, tessera_ir::TensorType)],
    which: &[&str],
    fed: &[(String, Tensor)],
    tile: bool,
) -> Result<Option<Doubled>> {
    let mut shapes = Vec::new();
    let mut tiled = Vec::new();
    let mut any = false;
    for (name, tensor) in fed {
        let declared = declared.iter().find(|(n, _)| n == name).map(|(_, ty)| ty);
        let symbolic = |pick: &dyn Fn(&str) -> bool| -> Vec<usize> {
            declared.map_or_else(Vec::new, |ty| {
                (ty.shape.iter().enumerate())
                    .filter(|(_, d)| matches!(d, tessera_ir::Dim::Sym(s) if pick(s)))
                    .map(|(k, _)| k)
                    .filter(|&k| k < tensor.shape().len())
                    .collect()
            })
        };
        let axes = symbolic(&|s| which.contains(&s));
        let mut t = tensor.clone();
        if !symbolic(&|_| true).is_empty() {
            let dims: Vec<u64> = (tensor.shape().iter().enumerate())
                .map(|(k, &d)| d as u64 * if axes.contains(&k) { 2 } else { 1 })
                .collect();
            shapes.push(InputShape {
                name: name.clone(),
                dims,
            });
        }
        any |= !axes.is_empty();
        if tile {
            for &k in &axes {
                t = twice_along(&t, k)
                    .with_context(|| format!("input `{name}` tiled along axis {k}"))?;
            }
        }
        tiled.push(t);
    }
    Ok(any.then(|| (shapes, tile.then_some(tiled))))
}

/// A model's input shapes with some of its symbolic dimensions doubled, and its inputs
/// tiled to them where it was given inputs.
type Doubled = (Vec<InputShape>, Option<Vec<Tensor>>);

/// `t` with each of its blocks along `axis` twice (`numpy.concatenate([t, t], axis)`).
fn twice_along(t: &Tensor, axis: usize) -> Result<Tensor> {
    let shape = t.shape();
    let outer: usize = shape[..axis].iter().product();
    let bytes = t.to_le_bytes();
    let block = bytes.len() / outer.max(1);
    let mut out = Vec::new();
    out.try_reserve_exact(bytes.len().saturating_mul(2))
        .map_err(|_| anyhow!("{} bytes twice over do not fit in memory", bytes.len()))?;
    for chunk in bytes.chunks(block.max(1)) {
        out.extend_from_slice(chunk);
        out.extend_from_slice(chunk);
    }
    let mut doubled = shape.to_vec();
    doubled[axis] *= 2;
    Tensor::from_le_bytes(t.elem(), &doubled, &out).map_err(|e| anyhow!("{e}"))
}

/// Compiles `graph` with every op on `device` (run where `gpus` says), runs it marked on
/// what `feed` says: each op's shares of its kernels' median times, and the inputs by name.
fn measure_model(
    graph: Graph,
    what: &str,
    (target, device, gpus): (&dyn Target, usize, tessera_mlir::GpuDevices),
    req: &CalibrateRequest<'_>,
    feed: Feed,
) -> Result<Measuring> {
    let mut shares = Shares::new();
    let mut keys = BTreeMap::new();
    let spec = target.spec();
    let name = &spec.devices[device].name;
    let mut graph = super::run::default_passes(graph, Path::new(what))?;
    let ops: Vec<OpId> = graph.ops().to_vec();
    for op in ops {
        graph.op_mut(op).device = Some(name.clone());
    }
    let (placed, runner, sites) =
        super::run::jit_marked(graph, target, Path::new(what), 2, true, gpus)
            .with_context(|| format!("{what}: with every op on {name}"))?;
    let placed = &placed;
    let stub = super::run::manifest_inputs(&runner)?;
    let inputs = match feed {
        Feed::MadeUp => inputs(&stub, what)?,
        Feed::Given => super::run::compiled_inputs(&runner, req.bindings, None)?,
        Feed::These(t) => t,
    };
    let (runs, _) = super::profile::measure(&runner, &inputs, &sites, req.repeat)
        .with_context(|| format!("{what}: running"))?;
    // Each op by the name the modules' comments give it, with its modelled time.
    let cost = CostModel::new(target, None);
    let by_name: BTreeMap<String, OpId> = placed
        .ops()
        .iter()
        .map(|&op| (op.to_string(), op))
        .collect();
    // Each op's identity across compiles of the model at other shapes, where its number
    // may differ (shapes fold differently): its source location, kind and place among the
    // ops of both.
    let mut seen: BTreeMap<(Option<&str>, &str), usize> = BTreeMap::new();
    let identity: BTreeMap<OpId, String> = placed
        .ops()
        .iter()
        .map(|&op| {
            let data = placed.op(op);
            let n = seen
                .entry((data.loc.as_deref(), data.op.name()))
                .or_default();
            *n += 1;
            let id = format!(
                "{} {} {n}",
                data.loc.as_deref().unwrap_or(""),
                data.op.name()
            );
            (op, id)
        })
        .collect();
    for (n, site) in sites.iter().enumerate() {
        if site.ops.is_empty() {
            continue;
        }
        let mut values: Vec<f64> = runs.iter().map(|r| r.charged[n]).collect();
        let seconds = tessera_mlir::profile::median(&mut values);
        let ops: Vec<(OpId, f64)> = site
            .ops
            .iter()
            .filter_map(|(o, _)| by_name.get(o).copied())
            .map(|op| {
                let t = cost
                    .op_time(placed, op, device)
                    .ok()
                    .and_then(|t| t.seconds())
                    .unwrap_or(0.0);
                (op, t)
            })
            .collect();
        // Ops modelled at no time (views) take no share, and a call of nothing else is not
        // measured.
        let modelled: f64 = ops.iter().map(|(_, t)| t).sum();
        if modelled <= 0.0 {
            continue;
        }
        for &(op, t) in ops.iter().filter(|(_, t)| *t > 0.0) {
            let share = seconds * t / modelled;
            let work = tessera_targets::op_work(placed, op)
                .with_context(|| format!("{what}: the work of {op}"))?;
            let data = placed.op(op);
            let key = (
                name.clone(),
                data.op.name().to_string(),
                data.operands
                    .iter()
                    .map(|&v| placed.ty(v).to_string())
                    .collect(),
            );
            keys.insert(identity[&op].clone(), key.clone());
            shares
                .entry(key)
                .or_insert(((work.flops, work.bytes), Vec::new()))
                .1
                .push(share);
        }
    }
    let names = stub.inputs().iter().map(|&v| {
        let value = stub.value(v);
        value.name.clone().unwrap_or_else(|| v.to_string())
    });
    Ok(Measuring {
        shares,
        fed: names.zip(inputs).collect(),
        keys,
    })
}

/// What [`measure_model`] measured.
struct Measuring {
    /// Each op's shares of its kernels' times.
    shares: Shares,
    /// The inputs, by name.
    fed: Vec<(String, Tensor)>,
    /// Each op measured (by its identity: its source location, kind and place among the
    /// ops of both): its key in `shares`.
    keys: BTreeMap<String, Key>,
}

/// A type's element type and extents (`f32[8, 512]`: `("f32", [8, 512])`).
fn split_type(ty: &str) -> Option<(&str, Vec<u64>)> {
    let (elem, rest) = ty.split_once('[')?;
    let dims = rest.strip_suffix(']')?.trim();
    if dims.is_empty() {
        return Some((elem, Vec::new()));
    }
    let dims = dims.split(',').map(|d| d.trim().parse().ok());
    Some((elem, dims.collect::<Option<_>>()?))
}

/// The operand patterns of an op measured with operand types `given` and, the model's
/// symbolic dimensions doubled, `doubled`: each extent that doubled is `?`. `None` where
/// the types differ otherwise, or no extent doubled.
fn pattern(given: &[String], doubled: &[String]) -> Option<Vec<String>> {
    if given.len() != doubled.len() {
        return None;
    }
    let mut any = false;
    let mut out = Vec::new();
    for (g, d) in given.iter().zip(doubled) {
        let ((ge, gd), (de, dd)) = (split_type(g)?, split_type(d)?);
        if ge != de || gd.len() != dd.len() {
            return None;
        }
        let mut dims = Vec::new();
        for (&a, &b) in gd.iter().zip(&dd) {
            if a == b {
                dims.push(a.to_string());
            } else if Some(b) == a.checked_mul(2) {
                any = true;
                dims.push("?".to_string());
            } else {
                return None;
            }
        }
        out.push(format!("{ge}[{}]", dims.join(", ")));
    }
    any.then_some(out)
}

/// The operand patterns of the ops measured both at the given shapes (`given`) and with
/// the symbolic dimensions doubled (`doubled`): the same op (by identity) of the same kind
/// with types that [`pattern`] relates.
fn patterns(given: &BTreeMap<String, Key>, doubled: &BTreeMap<String, Key>, into: &mut Patterns) {
    for (name, g) in given {
        let Some(d) = doubled.get(name) else {
            continue;
        };
        if g.0 != d.0 || g.1 != d.1 {
            continue;
        }
        if let Some(p) = pattern(&g.2, &d.2) {
            into.insert((g.0.clone(), g.1.clone(), p));
        }
    }
}

/// Operand patterns: `(device, op name, patterns)`. Each is fitted to the measurements of
/// its op whose operand types fit it.
type Patterns = std::collections::BTreeSet<(String, String, Vec<String>)>;

#[cfg(test)]
mod tests {
    use super::*;

    fn point(flops: f64, bytes: f64, seconds: f64) -> Point {
        Point {
            flops,
            bytes,
            seconds,
        }
    }

    #[test]
    fn the_fit_recovers_an_overhead_and_the_work_terms() {
        // Products of 8 to 64 rows against weights of 64 KiB to 1 MiB: the FLOPs and the
        // bytes do not grow together, so both terms are found.
        let points: Vec<Point> = [(8.0, 128.0), (32.0, 128.0), (8.0, 512.0), (64.0, 512.0)]
            .iter()
            .map(|&(m, n): &(f64, f64)| {
                let (flops, bytes) = (2.0 * m * n * n, 4.0 * (2.0 * m * n + n * n));
                point(flops, bytes, 3e-7 + 2e-11 * flops + 1e-10 * bytes)
            })
            .collect();
        let s = fit(&points).expect("a fit");
        assert!((s.overhead - 3e-7).abs() < 1e-12, "{s:?}");
        assert!((s.flop_seconds - 2e-11).abs() < 1e-16, "{s:?}");
        assert!((s.byte_seconds - 1e-10).abs() < 1e-15, "{s:?}");
        assert_eq!(s.factor, 0.0);
        // One shape: its FLOPs alone (bytes alone where it has no FLOPs).
        assert_eq!(
            fit(&[point(1e6, 4e3, 1e-4)]),
            Some(Scale {
                flop_seconds: 1e-10,
                ..Scale::default()
            })
        );
        assert_eq!(
            fit(&[point(0.0, 4e3, 1e-6)]),
            Some(Scale {
                byte_seconds: 2.5e-10,
                ..Scale::default()
            })
        );
        // Two shapes: an overhead and a kind of work, exactly.
        let s = fit(&[point(1e6, 1e4, 2e-6), point(4e6, 4e4, 5e-6)]).expect("a fit");
        assert!((s.overhead - 1e-6).abs() < 1e-15, "{s:?}");
        assert!((s.flop_seconds - 1e-12).abs() < 1e-20, "{s:?}");
        assert_eq!(s.byte_seconds, 0.0);
        // Times that fall as the work grows: no term may be negative, so the best fit
        // with none is kept (a constant, the mean time in relative terms).
        let s = fit(&[point(1e6, 1e4, 4e-6), point(4e6, 4e4, 2e-6)]).expect("a fit");
        assert!(s.overhead > 2e-6 && s.overhead < 4e-6, "{s:?}");
        assert_eq!((s.flop_seconds, s.byte_seconds), (0.0, 0.0));
        assert_eq!(fit(&[]), None);
    }

    #[test]
    fn operand_patterns_mark_the_extents_that_doubled() {
        let s = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pattern(
                &s(&["f32[2, 16, 64]", "f32[64, 64]"]),
                &s(&["f32[4, 32, 64]", "f32[64, 64]"])
            ),
            Some(s(&["f32[?, ?, 64]", "f32[64, 64]"]))
        );
        // An extent equal in both stays, even where it is the symbolic one's value.
        assert_eq!(
            pattern(&s(&["f32[2, 2]"]), &s(&["f32[4, 2]"])),
            Some(s(&["f32[?, 2]"]))
        );
        // Nothing doubled, another element type, rank or growth: none.
        assert_eq!(pattern(&s(&["f32[2, 3]"]), &s(&["f32[2, 3]"])), None);
        assert_eq!(pattern(&s(&["f32[2]"]), &s(&["i64[4]"])), None);
        assert_eq!(pattern(&s(&["f32[2]"]), &s(&["f32[4, 1]"])), None);
        assert_eq!(pattern(&s(&["f32[2, 3]"]), &s(&["f32[6, 3]"])), None);
        assert_eq!(pattern(&s(&["f32[]"]), &s(&["f32[]"])), None);
    }

    #[test]
    fn tiling_repeats_each_block_along_the_axis() {
        let t = Tensor::from_le_bytes(
            ElemType::I32,
            &[2, 2],
            &[1i32, 2, 3, 4]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<_>>(),
        )
        .expect("tensor");
        let values = |t: &Tensor| t.to_f64_vec();
        let rows = twice_along(&t, 0).expect("rows");
        assert_eq!(rows.shape(), &[4, 2]);
        assert_eq!(values(&rows), [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]);
        let cols = twice_along(&t, 1).expect("cols");
        assert_eq!(cols.shape(), &[2, 4]);
        assert_eq!(values(&cols), [1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0]);
    }

    #[test]
    fn the_standard_set_parses() {
        let g = tessera_ir::text::parse(STANDARD, None).expect("parses");
        assert_eq!(g.outputs().len(), 16);
    }
}
