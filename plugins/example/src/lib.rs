//! An example tessera plugin, written as an out-of-tree crate would be: it adds a target
//! whose accelerators are 128x128 systolic arrays, and a pass, then builds its own `tessera`
//! binary through [`tessera::driver::Driver`] (see `main.rs`).
//!
//! - **Target `example-npu`**: a host CPU and two NPUs, described in an embedded target file
//!   (`example-npu.toml`). What the file cannot say is in Rust: a matmul on an NPU is cut into
//!   128x128 output tiles, each taking `K + 2·128` cycles at 1 GHz to fill, stream and drain
//!   the array (four times as many for `f32`, which the array runs in four passes), so small
//!   or ragged matmuls pay for whole tiles; and the NPUs have no `f64` datapath.
//! - **Its own backend**: the NPUs' `lowering` is `example-npu`, a name the plugin registers.
//!   [`Target::device_pipeline`] gives them [`NPU_PIPELINE`] (linalg to affine loops, every
//!   loop nest tiled by 128 for the array), and [`Target::device_artifact`] writes what the
//!   NPU's runtime would load, `<device>.npu.mlir` ([`npu_program`]: a kernel table, then the
//!   tiled module). `tessera compile -o DIR` writes it; `tessera run DIR` still runs the
//!   portable modules on the CPU.
//! - **Pass `pin-matmuls`**: puts every unplaced matmul, gemm and conv on one device (option
//!   `device`, default `npu0`); `tessera compile` then places the rest.

use std::sync::Arc;

use tessera_ir::{ElemType, Graph, Op, OpId, TensorType};
use tessera_passes::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};
use tessera_targets::{
    Artifact, Device, DevicePipeline, Target, TargetSpec, Work, parse_target, register_lowering,
};

/// The side of the systolic array.
pub const ARRAY: u64 = 128;
/// The array's clock in Hz.
pub const CLOCK: f64 = 1e9;

/// The lowering name of the NPUs (`lowering = "example-npu"` in the target file).
pub const LOWERING: &str = "example-npu";

/// The NPUs' MLIR pipeline: bufferize, linalg to affine loops, every loop nest tiled by the
/// array's side ([`ARRAY`]), so a matmul becomes loops over 128x128 output tiles.
pub const NPU_PIPELINE: &str = "builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-affine-loops,affine-loop-tile{tile-size=128}),canonicalize)";

/// The `example-npu` target.
pub struct NpuTarget {
    spec: TargetSpec,
}

/// The `example-npu` target, ready to register.
pub fn npu_target() -> Arc<dyn Target> {
    // The NPUs' lowering must be known before the file naming it is read.
    register_lowering(LOWERING).unwrap_or_else(|e| panic!("the lowering name is invalid: {e}"));
    let spec = parse_target(
        include_str!("../example-npu.toml"),
        "<example>/example-npu.toml",
    )
    .unwrap_or_else(|e| panic!("the example target file is invalid: {e}"));
    Arc::new(NpuTarget { spec })
}

fn static_dims(ty: &TensorType) -> Option<Vec<u64>> {
    ty.shape.iter().map(|d| d.as_static()).collect()
}

/// `(batch, m, n, k)` of a 2-D-or-batched matmul or a gemm, from its operand and result types.
fn matmul_dims(graph: &Graph, op: OpId) -> Option<(u64, u64, u64, u64)> {
    let data = graph.op(op);
    let out = static_dims(graph.ty(*data.results.first()?))?;
    let a = static_dims(graph.ty(*data.operands.first()?))?;
    let k = match &data.op {
        Op::MatMul => *a.last()?,
        Op::Gemm { trans_a, .. } => {
            if *trans_a {
                *a.first()?
            } else {
                *a.last()?
            }
        }
        _ => return None,
    };
    let (m, n) = match out.len() {
        0 => (1, 1),
        1 => (1, out[0]),
        r => (out[r - 2], out[r - 1]),
    };
    let batch = out
        .iter()
        .rev()
        .skip(2)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    Some((batch, m, n, k))
}

/// Seconds for a `(batch, m, n, k)` matmul in element type `elem` on the array. The cycle
/// count is computed in `f64`: for the largest shapes a user can write it exceeds `u64`.
pub fn systolic_seconds(batch: u64, m: u64, n: u64, k: u64, elem: ElemType) -> f64 {
    let tiles = m.div_ceil(ARRAY) as f64 * n.div_ceil(ARRAY) as f64;
    let passes = if elem == ElemType::F32 { 4.0 } else { 1.0 };
    batch as f64 * tiles * (k as f64 + 2.0 * ARRAY as f64) * passes / CLOCK
}

impl Target for NpuTarget {
    fn spec(&self) -> &TargetSpec {
        &self.spec
    }

    fn op_time(&self, graph: &Graph, op: OpId, device: &Device, work: &Work) -> Option<f64> {
        if device.kind != "npu" {
            return None;
        }
        let (batch, m, n, k) = matmul_dims(graph, op)?;
        let compute = systolic_seconds(batch, m, n, k, work.elem);
        Some(device.op_overhead + compute.max(work.bytes / device.memory_bandwidth))
    }

    fn unsupported(&self, graph: &Graph, op: OpId, device: &Device) -> Option<String> {
        let data = graph.op(op);
        let f64_used = data
            .operands
            .iter()
            .chain(&data.results)
            .any(|&v| graph.ty(v).elem == ElemType::F64);
        (device.kind == "npu" && f64_used).then(|| format!("{} has no f64 datapath", device.name))
    }

    fn device_pipeline(&self, device: &Device) -> Option<DevicePipeline> {
        (device.lowering == LOWERING).then(|| DevicePipeline::Passes(NPU_PIPELINE.to_string()))
    }

    fn device_artifact(&self, device: &Device, lowered: &str) -> Result<Vec<Artifact>, String> {
        Ok(vec![Artifact {
            name: format!("{}.npu.mlir", device.name),
            bytes: npu_program(&device.name, lowered)?.into_bytes(),
        }])
    }
}

/// The program an NPU's runtime loads, made from its lowered module: a header naming the
/// device and the array, a kernel table (each function of the module: the kernels, and the
/// steps the manifest calls, which call them; each with its count of tiled loops), then the
/// module itself. An error when the
/// module has no kernel.
pub fn npu_program(device: &str, lowered: &str) -> Result<String, String> {
    let mut kernels: Vec<(String, usize)> = Vec::new();
    for line in lowered.lines() {
        let line = line.trim_start();
        let function = line
            .strip_prefix("func.func ")
            .map(|r| r.trim_start_matches("private "));
        if let Some(rest) = function.and_then(|r| r.strip_prefix('@')) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            kernels.push((name, 0));
        } else if line.starts_with("affine.for ")
            && line.contains(&format!(" step {ARRAY} "))
            && let Some(k) = kernels.last_mut()
        {
            k.1 += 1;
        }
    }
    if kernels.is_empty() {
        return Err(format!("the lowered module of {device} has no kernel"));
    }
    let mut out = format!(
        "// example-npu program for {device}: {ARRAY}x{ARRAY} systolic array, {} kernels\n",
        kernels.len()
    );
    for (name, tiled) in &kernels {
        out.push_str(&format!("// kernel @{name}: {tiled} tiled loops\n"));
    }
    out.push_str(lowered);
    Ok(out)
}

/// The `pin-matmuls` pass.
pub const PIN_MATMULS: PassInfo = PassInfo {
    name: "pin-matmuls",
    summary: "Place every unplaced matmul, gemm and conv on one device",
    options: &[OptionInfo {
        name: "device",
        kind: OptionKind::Str,
        default: "npu0",
        doc: "the device to place them on",
    }],
    create: |options: &Options| {
        let device = options.string("device").to_string();
        if device.is_empty() {
            return Err(PassError::new("option `device` must not be empty"));
        }
        Ok(Box::new(PinMatmuls { device }))
    },
};

struct PinMatmuls {
    device: String,
}

impl Pass for PinMatmuls {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let mut pinned = 0;
        for op in graph.ops().to_vec() {
            let data = graph.op_mut(op);
            if data.device.is_none()
                && matches!(data.op, Op::MatMul | Op::Gemm { .. } | Op::Conv(_))
            {
                data.device = Some(self.device.clone());
                pinned += 1;
            }
        }
        stats.add("ops-pinned", "ops placed on the device", pinned);
        Ok(pinned > 0)
    }
}
