//! The MLIR pass pipelines, per device lowering. Strings are `mlir-opt --pass-pipeline`
//! syntax and run in-process (see [`crate::Mlir::run_pipeline`]).
//!
//! [`for_target_device`] chooses a device's pipeline: the target's own first
//! ([`tessera_targets::Target::device_pipeline`], a plugin's backend), then tessera's for a
//! built-in lowering, and for a lowering registered without a hook the portable loops
//! ([`LOOPS`]), which [`DeviceLowering::fallback_note`] says aloud. [`lower_device`] runs the
//! choice on a module.

use std::borrow::Cow;

use tessera_targets::{BUILTIN_LOWERINGS, Device, DevicePipeline, Target};

use crate::{Error, Mlir, PipelineOptions};

/// Tensors to the LLVM dialect for the CPU: fuse the elementwise generics the schedule left
/// (a convolution's bias and the activation after it become one loop over the result:
/// MobileNetV2 13.9 -> 12.1 ms), bufferize (function boundaries with identity layouts;
/// `scf.while`/`scf.for` bodies may yield new buffers, as region ops' loops do; a result
/// that is an argument's buffer, a kernel's destination, dropped, so the caller's buffer is
/// written and nothing is cloned), then
/// free what is no longer used, linalg to loops, vectors (the schedule's, see
/// [`scheduled`]; a vector's sum or product folded as a tree, `reassociate-fp-reductions`:
/// the schedule's row reductions end in one per row; transfers of more than one dimension
/// unrolled into rows, `full-unroll`, not staged through a temporary on the stack, which
/// code built at -O0 allocated again in every iteration of the loops around it: GPT-2 tiny's
/// LM head overflowed a 2 MiB thread stack) and everything else to LLVM.
///
/// The deallocation is `buffer-deallocation-pipeline`'s passes without
/// `buffer-deallocation-simplification`, which compares every pair of buffers a block frees
/// (`BufferOriginAnalysis`): a step of GPT-2 small's width with 48 layers frees some
/// thousands of its kernels' results at its end, and the pass took 5.2 s of a 6.7 s
/// pipeline. The frees it would have proven unconditional are checked at run time against
/// the step's few results.
pub const CPU: &str = "builtin.module(linalg-fuse-elementwise-ops,convert-math-to-funcs,one-shot-bufferize{allow-return-allocs-from-loops=1 bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},canonicalize,drop-equivalent-buffer-results,cse,expand-realloc,canonicalize,ownership-based-buffer-deallocation,canonicalize,bufferization-lower-deallocations,cse,canonicalize,convert-bufferization-to-memref,func.func(convert-linalg-to-loops),convert-vector-to-scf{full-unroll=1},scf-forall-to-parallel,convert-scf-to-openmp,expand-strided-metadata,lower-affine,convert-vector-to-llvm{reassociate-fp-reductions=1},finalize-memref-to-llvm,convert-scf-to-cf,convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-ub-to-llvm,convert-openmp-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,convert-index-to-llvm,reconcile-unrealized-casts)";

/// Whether [`crate::Mlir::run_pipeline`] applies the CPU code generation schedule
/// ([`crate::schedule`]) to a module before `pipeline`'s passes: it does for [`CPU`] and
/// [`CPU_MPI_BUFFERS`], whose modules are still linalg on tensors.
pub fn scheduled(pipeline: &str) -> bool {
    pipeline == CPU || pipeline == CPU_MPI_BUFFERS
}

/// Whether `pipeline` runs OpenMP's threads (`scf.forall` to `omp.parallel`): [`CPU`]
/// does where LLVM's OpenMP runtime is installed (its code calls it); the MPI program's
/// ranks are single-threaded processes.
pub fn threaded(pipeline: &str) -> bool {
    pipeline == CPU && crate::jit::openmp_runtime().is_some()
}

/// The file name of a device's schedule (`cpu0.schedule.mlir`), which `compile -o` writes
/// beside its module for [`with_schedule`].
pub fn schedule_file(device: &str) -> String {
    format!("{device}.schedule.mlir")
}

/// The pass that fuses elementwise ops, which [`CPU`] starts with.
const FUSION: &str = "linalg-fuse-elementwise-ops";

/// A pipeline that starts by fusing elementwise ops ([`CPU`]) as two pipelines, the fusion
/// and the rest: the schedule's threads sequence runs between them, on the fused ops
/// ([`crate::schedule::apply_threads`]). `None` for a pipeline that starts otherwise.
pub fn fusion_first(pipeline: &str) -> Option<(String, String)> {
    let rest = pipeline.strip_prefix(&format!("builtin.module({FUSION},"))?;
    Some((
        format!("builtin.module({FUSION})"),
        format!("builtin.module({rest}"),
    ))
}

/// `pipeline` as `mlir-opt` runs it on `device`'s module: for a [`scheduled`] pipeline,
/// its schedule ([`schedule_file`], loaded by `transform-preload-library`) applied first by
/// `transform-interpreter` (the contraction sequence; for [`CPU`], then the fusion of
/// elementwise ops and the threads sequence, as [`crate::Mlir::run_pipeline`] runs them);
/// any other pipeline as it is.
pub fn with_schedule(pipeline: &str, device: &str) -> String {
    if !scheduled(pipeline) {
        return pipeline.to_string();
    }
    let inner = pipeline
        .strip_prefix("builtin.module(")
        .and_then(|p| p.strip_suffix(')'))
        .unwrap_or(pipeline);
    let inner = match inner.strip_prefix(&format!("{FUSION},")) {
        Some(rest) => format!(
            "{FUSION},transform-interpreter{{entry-point={}}},{rest}",
            crate::schedule::THREADS
        ),
        None => inner.to_string(),
    };
    format!(
        "builtin.module(transform-preload-library{{transform-library-paths={}}},\
         transform-interpreter{{entry-point={}}},{inner})",
        schedule_file(device),
        crate::schedule::CONTRACTIONS
    )
}

/// The same for a program with MPI calls, in two parts. MPI's ops declare no memory
/// effects, so `buffer-deallocation-pipeline` rejects them: the program calls a declared
/// function for each ([`crate::mpi`]) while [`CPU_MPI_BUFFERS`] bufferizes it and frees
/// what each function no longer uses, and those functions get their bodies, the MPI
/// dialect's ops on the buffers ([`crate::Mlir::define_functions`]), before
/// [`CPU_MPI_LOWER`] takes everything to LLVM. `convert-to-llvm` lowers the MPI dialect (for
/// the implementation the module's `dlti.map` names); tensor-level `arith` casts of the
/// messages become linalg first.
///
/// The deallocation is `buffer-deallocation-pipeline`'s passes without
/// `buffer-deallocation-simplification`. That pass compares every buffer a block frees with
/// every value it returns (`BufferOriginAnalysis`), and a rank function frees hundreds and
/// returns the whole state it holds: GPT-2 tiny's data-parallel program spent 20 s in it
/// (0.6 s without); GPT-2 small's compile was still in it after 9 minutes. Without it,
/// more frees stay conditional (checked at run time), so fewer move up
/// ([`crate::dealloc`]), and GPT-2 tiny's steps take about 12% longer.
pub const CPU_MPI_BUFFERS: &str = "builtin.module(convert-elementwise-to-linalg,convert-math-to-funcs,one-shot-bufferize{allow-return-allocs-from-loops=1 bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},canonicalize,drop-equivalent-buffer-results,cse,expand-realloc,canonicalize,ownership-based-buffer-deallocation,canonicalize,bufferization-lower-deallocations,cse,canonicalize)";

/// The second part of the MPI program's pipeline (see [`CPU_MPI_BUFFERS`]). Buffers are
/// allocated and freed by the generic functions (`_mlir_memref_to_llvm_alloc` and `_free`),
/// which the program's C driver defines to count each rank's bytes.
pub const CPU_MPI_LOWER: &str = "builtin.module(convert-bufferization-to-memref,func.func(convert-linalg-to-loops),convert-vector-to-scf{full-unroll=1},convert-scf-to-cf,expand-strided-metadata,lower-affine,convert-vector-to-llvm{reassociate-fp-reductions=1},finalize-memref-to-llvm{use-generic-functions=1},convert-math-to-llvm,convert-math-to-libm,convert-to-llvm,reconcile-unrealized-casts,symbol-dce)";

/// NVIDIA GPUs: fuse elementwise ops and bufferize as [`CPU`] does (function boundaries
/// with identity layouts, a kernel's destination written in place, what is no longer used
/// freed), make each linalg op a parallel loop and each loop a kernel launch (in-process,
/// [`GPU_LOOPS`] is [`crate::gpu::map_loops`]: each loop's dimensions innermost first,
/// tiled into blocks of threads by the function's [`crate::gpu::thread_tile`]), outline the
/// kernels, lower them to NVVM and serialize them as PTX text (`format=isa`: no CUDA
/// toolkit needed), and lower the host code to LLVM: buffers come from the generic
/// allocation functions (`_mlir_memref_to_llvm_alloc`, `_free`), which
/// [`crate::cuda`] gives managed memory, and each launch calls MLIR's GPU runtime
/// interface (`mgpuLaunchKernel`). In-process, the tensor constants are first staged into
/// buffers ([`crate::gpu::stage_constants`]). `mlir-opt` runs this string with every loop
/// tiled 64x4 in its own order and the constants left as host globals.
pub const NVPTX: &str = "builtin.module(linalg-fuse-elementwise-ops,convert-math-to-funcs,one-shot-bufferize{allow-return-allocs-from-loops=1 bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},canonicalize,drop-equivalent-buffer-results,cse,expand-realloc,canonicalize,ownership-based-buffer-deallocation,canonicalize,bufferization-lower-deallocations,cse,canonicalize,convert-bufferization-to-memref,func.func(convert-linalg-to-parallel-loops,scf-parallel-loop-tiling{parallel-loop-tile-sizes=64,4 no-min-max-bounds=1},gpu-map-parallel-loops,convert-parallel-loops-to-gpu),gpu-kernel-outlining,expand-strided-metadata,lower-affine,convert-scf-to-cf,nvvm-attach-target{chip=sm_80 features=+ptx80 O=3},gpu.module(convert-gpu-to-nvvm,canonicalize,cse,reconcile-unrealized-casts),finalize-memref-to-llvm{use-generic-functions=1},convert-math-to-llvm,convert-math-to-libm,convert-arith-to-llvm,convert-index-to-llvm,convert-cf-to-llvm,convert-func-to-llvm,gpu-to-llvm,gpu-module-to-binary{format=isa},canonicalize,cse,reconcile-unrealized-casts)";

/// The passes of [`NVPTX`] that [`crate::Mlir::run_pipeline`] runs as
/// `convert-linalg-to-parallel-loops` then [`crate::gpu::map_loops`].
pub const GPU_LOOPS: &str = "func.func(convert-linalg-to-parallel-loops,scf-parallel-loop-tiling{parallel-loop-tile-sizes=64,4 no-min-max-bounds=1},gpu-map-parallel-loops,convert-parallel-loops-to-gpu)";

/// A pipeline with [`GPU_LOOPS`] as the pipelines before and after it, the first ending
/// with `convert-linalg-to-parallel-loops`; `None` for any other pipeline.
pub fn gpu_stages(pipeline: &str) -> Option<(String, String)> {
    let (before, after) = pipeline.split_once(&format!(",{GPU_LOOPS}"))?;
    let after = after.strip_prefix(',')?;
    Some((
        format!("{before},func.func(convert-linalg-to-parallel-loops))"),
        format!("builtin.module({after}"),
    ))
}

/// The GPU architecture [`NVPTX`] compiles for, and `nvptx` devices without an `arch`.
pub const DEFAULT_NVPTX_ARCH: &str = "sm_80";

/// The PTX ISA version (`ptx80` is PTX 8.0) LLVM's NVPTX backend needs for an architecture:
/// 8.0, the default's, for everything up to `sm_90`, and the first version that knows each
/// newer one.
pub fn ptx_version(arch: &str) -> &'static str {
    match arch {
        "sm_100" | "sm_101" => "ptx86",
        "sm_120" => "ptx87",
        "sm_103" | "sm_121" => "ptx88",
        "sm_88" | "sm_110" => "ptx90",
        _ => "ptx80",
    }
}

/// The NVIDIA pipeline ([`NVPTX`]) for the GPU architecture `arch` (`sm_70`; a target
/// file's `arch`, validated there), [`DEFAULT_NVPTX_ARCH`] when `None`, with libdevice
/// ([`crate::gpu::libdevice`]) linked into the kernels where this machine has it (the
/// kernels' `math` ops call its functions; without it they stay undefined in the PTX,
/// which the driver then cannot load).
pub fn nvptx(arch: Option<&str>) -> String {
    let arch = arch.unwrap_or(DEFAULT_NVPTX_ARCH);
    let link = crate::gpu::libdevice()
        .map(|p| format!(" l={}", p.display()))
        .unwrap_or_default();
    NVPTX.replace(
        "chip=sm_80 features=+ptx80 O=3",
        &format!("chip={arch} features=+{} O=3{link}", ptx_version(arch)),
    )
}

/// Devices without a toolchain here (chiplets, plugins' lowerings): bufferize and lower
/// linalg to affine loops on memrefs, the form a vendor backend takes.
pub const LOOPS: &str = "builtin.module(one-shot-bufferize{allow-return-allocs-from-loops=1 bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline,convert-bufferization-to-memref,func.func(convert-linalg-to-affine-loops),canonicalize)";

/// The target pipeline of a device lowering (`cpu`, `nvptx`, anything else).
pub fn for_lowering(lowering: &str) -> &'static str {
    match lowering {
        "cpu" => CPU,
        "nvptx" => NVPTX,
        _ => LOOPS,
    }
}

/// tessera's pipeline of a device: [`for_lowering`], with an `nvptx` device's own
/// architecture ([`nvptx`]). A target's own pipeline is [`for_target_device`]'s.
pub fn for_device(device: &Device) -> Cow<'static, str> {
    if device.lowering == "nvptx" {
        Cow::Owned(nvptx(device.arch.as_deref()))
    } else {
        Cow::Borrowed(for_lowering(&device.lowering))
    }
}

/// The pipeline of one device, and where it comes from.
#[derive(Clone, Debug)]
pub enum DeviceLowering {
    /// The target's own ([`Target::device_pipeline`]).
    Target(DevicePipeline),
    /// tessera's, for a built-in lowering ([`for_device`]; `chiplet` is the portable loops by
    /// design: chiplets have no toolchain here).
    Builtin(Cow<'static, str>),
    /// A lowering registered by a plugin whose target gives no pipeline: the portable loops
    /// ([`LOOPS`]), in place of a backend this binary does not have.
    Portable,
}

impl DeviceLowering {
    /// Whether the pipeline is the target's own (its artifacts are then asked for).
    pub fn is_target_own(&self) -> bool {
        matches!(self, DeviceLowering::Target(_))
    }

    /// The pass pipeline this choice runs (`None` for a target's function of the module).
    pub fn passes(&self) -> Option<&str> {
        match self {
            DeviceLowering::Target(DevicePipeline::Module(_)) => None,
            DeviceLowering::Target(DevicePipeline::Passes(p)) => Some(p),
            DeviceLowering::Builtin(p) => Some(p),
            DeviceLowering::Portable => Some(LOOPS),
        }
    }

    /// What a user must be told about this choice for `device`: a fallback to the portable
    /// loops is never silent. `None` for the other choices.
    pub fn fallback_note(&self, device: &Device) -> Option<String> {
        matches!(self, DeviceLowering::Portable).then(|| {
            format!(
                "{}: no MLIR pipeline for lowering `{}` in this binary (its target has no \
                 device_pipeline hook): the portable affine loops stand in for its backend",
                device.name, device.lowering
            )
        })
    }
}

/// The pipeline of `device` of `target`: the target's hook, else tessera's for a built-in
/// lowering, else [`DeviceLowering::Portable`].
pub fn for_target_device(target: &dyn Target, device: &Device) -> DeviceLowering {
    if let Some(p) = target.device_pipeline(device) {
        DeviceLowering::Target(p)
    } else if BUILTIN_LOWERINGS.contains(&device.lowering.as_str()) {
        DeviceLowering::Builtin(for_device(device))
    } else {
        DeviceLowering::Portable
    }
}

/// Lowers one device's module (MLIR text, `what` naming it in errors) with `lowering`, and
/// returns the result as MLIR prints it. What a target's function returns is parsed and
/// verified like any module; its error is an [`Error::Mlir`] naming the device.
pub fn lower_device(
    mlir: &Mlir,
    lowering: &DeviceLowering,
    device: &Device,
    text: &str,
    options: &PipelineOptions,
    what: &str,
) -> Result<String, Error> {
    if let DeviceLowering::Target(DevicePipeline::Module(f)) = lowering {
        let out = f(device, text).map_err(|message| Error::Mlir {
            what: what.to_string(),
            stage: format!("pipeline of {}'s target", device.name),
            message,
        })?;
        let m = mlir.parse(&out, &format!("{what} (after {}'s pipeline)", device.name))?;
        return Ok(Mlir::print(&m));
    }
    // Every other choice is a pass pipeline.
    let pipeline = lowering.passes().unwrap_or(LOOPS);
    let mut m = mlir.parse(text, what)?;
    mlir.run_pipeline(&mut m, pipeline, options, what)?;
    Ok(Mlir::print(&m))
}
