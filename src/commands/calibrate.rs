//! `tessera calibrate --target T --device D -o calib.toml [MODEL...]`: measures the ops of
//! the given models (or of a standard set of op shapes) on device D and writes a
//! calibration file, which `compile --calibration` reads.
//!
//! Each model is compiled as `compile` would (the default pass pipeline), every op pinned to
//! D, and lowered; its modules are JIT-compiled with a mark after every kernel call
//! ([`tessera_mlir::profile`]) and run once to warm up, then `--repeat` times, on the
//! model's inputs (`--input`, one model) or made-up ones (floats from a fixed sequence in
//! [-1, 1), integers and booleans one: indices in range, masks that keep everything). A kernel call's median time is shared among the ops it computes in
//! proportion to their modelled (uncalibrated) times, so an elementwise op fused into a
//! product costs what it adds; an op met several times with the same operand types gets the
//! median of its shares. Ops modelled at no time (views) are not measured. For the
//! shapes not measured, the file scales the modelled time, `overhead + factor × modelled`,
//! fitted per op kind to its measured shapes and, for ops not measured at all, to every
//! shape ([`fit`]).
//!
//! Only CPU devices run here: a device of another kind needs its runtime.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tessera_ir::{ElemType, Graph, OpId, Tensor};
use tessera_targets::limits::{MAX_SCALE, MAX_SECONDS, MIN_SCALE};
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
}

/// The standard set of op shapes, measured when no model is given: products (square ones,
/// and 8 rows against a 4 MiB matrix, which memory bounds; with a bias too, as the passes
/// make most products), a convolution, softmax, layer norm, elementwise ops and a
/// transpose, each on its own
/// (every operand a graph input, every result an output, so nothing is fused).
pub const STANDARD: &str = "graph @standard(%a: f32[128, 256], %b: f32[256, 256], %c: f32[256, 512], %d: f32[512, 512], %img: f32[1, 32, 56, 56], %w: f32[64, 32, 3, 3], %s: f32[64, 256], %t: f32[256, 1024], %g: f32[1024], %u: f32[8, 64, 128], %r: f32[8, 1024], %k: f32[1024, 1024], %bias: f32[256]) {
  %mm = matmul %a, %b : f32[128, 256]
  %mm.large = matmul %c, %d : f32[256, 512]
  %mm.rows = matmul %r, %k : f32[8, 1024]
  %gemm = gemm %a, %b, %bias {alpha = 1.0, beta = 1.0, trans-a = false, trans-b = false} : f32[128, 256]
  %gemm.rows = gemm %r, %k, %g {alpha = 1.0, beta = 1.0, trans-a = false, trans-b = false} : f32[8, 1024]
  %bmm = matmul %u, %a : f32[8, 64, 256]
  %conv = conv %img, %w {dilations = [1, 1], groups = 1, pads = [1, 1, 1, 1], strides = [1, 1]} : f32[1, 64, 56, 56]
  %sm = softmax %s {axis = 1} : f32[64, 256]
  %ln = layer-norm %t, %g {axis = 1, epsilon = 1e-5} : f32[256, 1024]
  %add = add %t, %t : f32[256, 1024]
  %mul = mul %t, %g : f32[256, 1024]
  %relu = relu %t : f32[256, 1024]
  %tanh = tanh %t : f32[256, 1024]
  %tr = transpose %u {perm = [0, 2, 1]} : f32[8, 128, 64]
  return %mm, %mm.large, %mm.rows, %gemm, %gemm.rows, %bmm, %conv, %sm, %ln, %add, %mul, %relu, %tanh, %tr
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

/// The scale `overhead + factor × modelled` that fits `points` (`(modelled, measured)`
/// seconds) with the least squared relative error, `Σ ((overhead + factor·x) / y - 1)²`,
/// so that a small op's point counts as much as a large one's. Where that fit needs a
/// negative overhead or factor, or the points do not tell the two apart (one shape), the
/// median measured / modelled ratio alone.
pub fn fit(points: &[(f64, f64)]) -> Scale {
    let mut ratios: Vec<f64> = points.iter().map(|&(x, y)| y / x).collect();
    let plain = Scale {
        factor: tessera_mlir::profile::median(&mut ratios).clamp(MIN_SCALE, MAX_SCALE),
        overhead: 0.0,
    };
    // Normal equations of min Σ (a·u + b·v - 1)², u = 1/y, v = x/y.
    let (mut uu, mut uv, mut vv, mut u1, mut v1) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let (u, v) = (1.0 / y, x / y);
        uu += u * u;
        uv += u * v;
        vv += v * v;
        u1 += u;
        v1 += v;
    }
    let det = uu * vv - uv * uv;
    if points.len() < 2 || det.is_nan() || det <= 1e-9 * uu * vv {
        return plain;
    }
    let overhead = (u1 * vv - v1 * uv) / det;
    let factor = (uu * v1 - uv * u1) / det;
    if !((0.0..=MAX_SECONDS).contains(&overhead) && (MIN_SCALE..=MAX_SCALE).contains(&factor)) {
        return plain;
    }
    // (Below a picosecond, none: a subnormal would not read back as seconds.)
    let overhead = if overhead < 1e-12 { 0.0 } else { overhead };
    Scale { factor, overhead }
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

/// Each op's shares of its kernels' times, with the op's modelled (uncalibrated) seconds.
type Shares = BTreeMap<Key, Vec<(f64, f64)>>;

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
    let mut measured_models = Vec::new();
    if req.models.is_empty() {
        let graph = tessera_ir::text::parse(STANDARD, None)
            .map_err(|e| anyhow!("the standard set: {e}"))?;
        measure_model(
            graph,
            "the standard set",
            &*target,
            (device, gpus),
            req,
            &mut shares,
        )?;
        measured_models.push("the standard set".to_string());
    }
    for path in req.models {
        let graph = super::load_model(path, req.shapes)?;
        let what = path.display().to_string();
        measure_model(graph, &what, &*target, (device, gpus), req, &mut shares)?;
        measured_models.push(what);
    }
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# tessera calibrate: measured on {} of target {} ({}), {} runs after a warm-up run,",
        req.device,
        spec.name,
        cpu_name(),
        req.repeat
    );
    let _ = writeln!(text, "# each op's median share of its kernel's median time");
    // (A path's control characters would end the comment.)
    let named: String = measured_models
        .join(", ")
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let _ = writeln!(text, "# of: {named}");
    // Scales for the shapes not measured, fitted per op kind and for any op: each op's
    // share against its modelled time, one point per shape (the median share).
    let mut points: BTreeMap<Option<String>, Vec<(f64, f64)>> = BTreeMap::new();
    for ((_, op, _), pairs) in &shares {
        let mut values: Vec<f64> = pairs.iter().map(|&(s, _)| s).collect();
        let share = tessera_mlir::profile::median(&mut values);
        let modelled = pairs.first().map_or(0.0, |&(_, m)| m);
        if modelled > 0.0 && share > 0.0 {
            points
                .entry(Some(op.clone()))
                .or_default()
                .push((modelled, share));
            points.entry(None).or_default().push((modelled, share));
        }
    }
    for ((dev, op, operands), pairs) in shares {
        let mut values: Vec<f64> = pairs.iter().map(|&(s, _)| s).collect();
        let seconds = tessera_mlir::profile::median(&mut values);
        let operands: Vec<String> = operands.iter().map(|o| toml_string(o)).collect();
        // (A subnormal time would not read back as seconds.)
        let seconds = if seconds < f64::MIN_POSITIVE {
            0.0
        } else {
            seconds
        };
        let _ = write!(
            text,
            "\n[[measurement]]\ndevice = {}\nop = {}\noperands = [{}]\nseconds = {seconds:e}\n",
            toml_string(&dev),
            toml_string(&op),
            operands.join(", ")
        );
    }
    for (op, points) in points {
        let scale = fit(&points);
        let op = op.map_or_else(String::new, |op| format!("op = {}\n", toml_string(&op)));
        let _ = write!(
            text,
            "\n[[scale]]\ndevice = {}\n{op}factor = {:e}\noverhead = {:e}\n",
            toml_string(req.device),
            scale.factor,
            scale.overhead
        );
    }
    // What is written must read back.
    let out = req.output.display().to_string();
    let check = Calibration::parse(&text, &out)?;
    check.check(spec)?;
    super::write_atomically(req.output, text.as_bytes())?;
    super::print_stdout(&format!(
        "wrote {} ({} measurements and {} scales of {} on {})\n",
        out,
        check.len(),
        check.scales(),
        measured_models.join(", "),
        req.device
    ))
}

/// Compiles `graph` with every op on `device` (run where `gpus` says), runs it marked, and
/// adds each op's share of its kernel's median time to `shares`.
fn measure_model(
    graph: Graph,
    what: &str,
    target: &dyn Target,
    (device, gpus): (usize, tessera_mlir::GpuDevices),
    req: &CalibrateRequest<'_>,
    shares: &mut Shares,
) -> Result<()> {
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
    let inputs = if req.bindings.is_empty() {
        inputs(&stub, what)?
    } else {
        super::run::compiled_inputs(&runner, req.bindings, None)?
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
            let data = placed.op(op);
            let key = (
                name.clone(),
                data.op.name().to_string(),
                data.operands
                    .iter()
                    .map(|&v| placed.ty(v).to_string())
                    .collect(),
            );
            shares.entry(key).or_default().push((share, t));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_an_overhead_and_a_factor() {
        let points: Vec<(f64, f64)> = [1e-7, 1e-6, 1e-5, 1e-4]
            .iter()
            .map(|&x| (x, 2e-7 + 5.0 * x))
            .collect();
        let s = fit(&points);
        assert!((s.overhead - 2e-7).abs() < 1e-12, "{s:?}");
        assert!((s.factor - 5.0).abs() < 1e-6, "{s:?}");
        // One shape: the ratio alone.
        assert_eq!(
            fit(&[(1e-6, 3e-6)]),
            Scale {
                factor: 3.0,
                overhead: 0.0
            }
        );
        // A fit that wants a negative overhead: the median ratio (of 1, 2, 3).
        let s = fit(&[(1e-6, 1e-6), (2e-6, 4e-6), (3e-6, 9e-6)]);
        assert_eq!(s.overhead, 0.0, "{s:?}");
        assert_eq!(s.factor, 2.0);
    }

    #[test]
    fn the_standard_set_parses() {
        let g = tessera_ir::text::parse(STANDARD, None).expect("parses");
        assert_eq!(g.outputs().len(), 14);
    }
}
