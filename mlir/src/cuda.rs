//! NVIDIA GPUs through the CUDA driver API, which is loaded when first asked for (cudarc's
//! `dynamic-loading`): tessera builds, and everything but a GPU run works, on a machine
//! with no NVIDIA driver and no CUDA toolkit.
//!
//! A GPU device's module, lowered by [`crate::pipelines::NVPTX`], keeps its kernels as PTX
//! text in `gpu.binary` ops and calls MLIR's GPU runtime interface from its host code: the
//! global constructor of each binary loads it (`mgpuModuleLoadJIT`), and each
//! `gpu.launch_func` gets its function, makes a stream, launches and waits
//! (`mgpuModuleGetFunction`, `mgpuStreamCreate`, `mgpuLaunchKernel`,
//! `mgpuStreamSynchronize`, `mgpuStreamDestroy`). Its buffers come from the generic
//! allocation functions (`_mlir_memref_to_llvm_alloc` and `_free`). This module defines
//! all of them over the driver API, and [`crate::jit::Jit::on_gpu`] registers them with the
//! JIT in place of MLIR's CUDA runtime library, which would link `libcuda` at build time.
//!
//! Buffers are CUDA managed memory (`cuMemAllocManaged`): the kernels and the host code
//! (the deallocation's checks, copies between buffers, a loop's scalar reads) both reach
//! them, and the driver moves pages where they are used. Every launch is waited for
//! before the host code goes on.
//!
//! The functions are called from compiled code, so they never unwind: a driver error is
//! kept ([`take_fault`], per thread: the compiled code calls them on the thread that called
//! it) and turns later launches into no-ops; the runner reports it after the call. A failed
//! allocation falls back to host memory (so the host code does not write through a null
//! pointer) and is reported the same way.

#![allow(unsafe_code)]

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys as cu;

use crate::Error;

/// One NVIDIA GPU of this machine.
#[derive(Debug)]
pub struct Gpu {
    /// Its ordinal (`cuDeviceGet`).
    pub ordinal: usize,
    /// Its name (`NVIDIA H200`).
    pub name: String,
    /// Its compute capability (major, minor): (9, 0) is `sm_90`.
    pub capability: (u32, u32),
    /// The driver's handle.
    device: cu::CUdevice,
    /// Its primary context, retained when first made current and kept for the process's
    /// life (a GPU that is never used is never touched: another job may hold it).
    context: OnceLock<Result<Context, String>>,
}

/// A CUDA context handle. Contexts may be made current on any thread.
#[derive(Debug)]
struct Context(cu::CUcontext);

// SAFETY: a CUDA context is not tied to the thread that retained it; the driver
// serializes what needs serializing.
unsafe impl Send for Context {}
// SAFETY: as above; the handle is only passed to the driver.
unsafe impl Sync for Context {}

impl Gpu {
    /// `sm_90` for compute capability 9.0.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.capability.0, self.capability.1)
    }

    /// Makes this GPU's context the calling thread's, for the launches and allocations
    /// that follow (retaining it the first time).
    pub fn make_current(&self) -> Result<(), Error> {
        let context = self.context.get_or_init(|| {
            let mut ctx: cu::CUcontext = std::ptr::null_mut();
            // SAFETY: the driver is loaded (this GPU was listed by `init`); an out-pointer
            // to a local.
            check(
                unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, self.device) },
                "cuDevicePrimaryCtxRetain",
            )
            .map(|()| Context(ctx))
        });
        let fail = |e: &str| Error::Run {
            message: format!("GPU {} ({}): {e}", self.ordinal, self.name),
        };
        let context = context.as_ref().map_err(|e| fail(e))?;
        // SAFETY: a retained context, never released.
        let r = unsafe { cu::cuCtxSetCurrent(context.0) };
        check(r, "cuCtxSetCurrent").map_err(|e| fail(&e))
    }
}

/// The GPUs of this machine, the driver initialized on first use; the error names what is
/// missing (the driver library, a GPU).
pub fn gpus() -> Result<&'static [Gpu], Error> {
    static GPUS: OnceLock<Result<Vec<Gpu>, String>> = OnceLock::new();
    match GPUS.get_or_init(init) {
        Ok(g) => Ok(g),
        Err(message) => Err(Error::Run {
            message: message.clone(),
        }),
    }
}

fn init() -> Result<Vec<Gpu>, String> {
    // SAFETY: only tries to open the library.
    if !unsafe { cu::is_culib_present() } {
        return Err(
            "no NVIDIA GPU driver: the CUDA driver library (libcuda.so.1, which \
                    NVIDIA's driver installs) is not on this machine's library path"
                .into(),
        );
    }
    // SAFETY: the library is present (checked above), so cudarc's lazy loading of each
    // symbol finds it; every out-pointer below is a live local.
    unsafe {
        check(cu::cuInit(0), "cuInit").map_err(|e| format!("no usable NVIDIA GPU: {e}"))?;
        let mut count: c_int = 0;
        check(cu::cuDeviceGetCount(&mut count), "cuDeviceGetCount")?;
        if count <= 0 {
            return Err("no NVIDIA GPU: the driver is installed but finds no device".into());
        }
        let mut gpus = Vec::new();
        for ordinal in 0..count {
            let mut dev: cu::CUdevice = 0;
            check(cu::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
            let mut name = [0 as c_char; 128];
            check(
                cu::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev),
                "cuDeviceGetName",
            )?;
            let name = CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned();
            let attribute = |a: cu::CUdevice_attribute| -> Result<u32, String> {
                let mut v: c_int = 0;
                check(
                    cu::cuDeviceGetAttribute(&mut v, a, dev),
                    "cuDeviceGetAttribute",
                )?;
                Ok(v.max(0) as u32)
            };
            let major =
                attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
            let minor =
                attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
            gpus.push(Gpu {
                ordinal: ordinal as usize,
                name,
                capability: (major, minor),
                device: dev,
                context: OnceLock::new(),
            });
        }
        Ok(gpus)
    }
}

/// `sm_80` as (8, 0); `None` for anything else.
pub fn capability_of(arch: &str) -> Option<(u32, u32)> {
    let digits = arch.strip_prefix("sm_")?;
    let digits = digits.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (major, minor) = digits.split_at(digits.len() - 1);
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Whether `gpu` runs PTX written for `arch`: PTX is compiled by the driver for the GPU
/// at hand, so any GPU of the same or a later compute capability runs it; PTX for an
/// architecture's own features (`sm_90a`) runs on that architecture only.
pub fn runs(gpu: &Gpu, arch: &str) -> bool {
    let specific = arch.ends_with(|c: char| c.is_ascii_alphabetic());
    capability_of(arch).is_some_and(|c| {
        if specific {
            c == gpu.capability
        } else {
            c <= gpu.capability
        }
    })
}

/// The driver's name of a result (`CUDA_ERROR_NO_DEVICE`).
fn error_name(r: cu::CUresult) -> String {
    let mut s: *const c_char = std::ptr::null();
    // SAFETY: the driver writes a pointer to a static string, or leaves it null.
    let ok = unsafe { cu::cuGetErrorName(r, &mut s) } == cu::CUresult::CUDA_SUCCESS;
    if ok && !s.is_null() {
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    } else {
        format!("{r:?}")
    }
}

fn check(r: cu::CUresult, call: &str) -> Result<(), String> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{call}: {}", error_name(r)))
    }
}

thread_local! {
    /// The first error of the runtime functions on this thread since the last
    /// [`take_fault`].
    static FAULT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Host allocations made where managed memory was refused (freed with `free`).
static HOST_FALLBACK: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn fault(message: String) {
    FAULT.with(|f| {
        let mut f = f.borrow_mut();
        if f.is_none() {
            *f = Some(message);
        }
    });
}

/// Whether the driver is loaded and a GPU found; otherwise the fault says why. Every
/// runtime function asks first: a driver function called without the library would
/// abort the process.
fn ready() -> bool {
    match gpus() {
        Ok(_) => true,
        Err(e) => {
            fault(e.to_string());
            false
        }
    }
}

fn faulted() -> bool {
    FAULT.with(|f| f.borrow().is_some())
}

/// The first error the runtime functions met on this thread since the last call, cleared.
pub fn take_fault() -> Option<String> {
    FAULT.with(|f| f.borrow_mut().take())
}

/// The size of the buffer the PTX compiler's error log is written into.
const JIT_LOG: usize = 16 << 10;

/// `mgpuModuleLoadJIT(ptx, opt)`: loads a module from NUL-terminated PTX text, which the
/// driver compiles for the current GPU.
extern "C" fn module_load_jit(data: *const c_void, _opt: c_int) -> cu::CUmodule {
    if !ready() {
        return std::ptr::null_mut();
    }
    let mut log = vec![0u8; JIT_LOG];
    let mut options = [
        cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [log.as_mut_ptr() as *mut c_void, JIT_LOG as *mut c_void];
    let mut module: cu::CUmodule = std::ptr::null_mut();
    // SAFETY: `data` is the module's NUL-terminated PTX constant; the options' values
    // are a live buffer of the size given and that size as a pointer-sized integer.
    let r = unsafe {
        cu::cuModuleLoadDataEx(
            &mut module,
            data,
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if let Err(e) = check(r, "cuModuleLoadDataEx (the kernels' PTX)") {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]);
        fault(if log.trim().is_empty() {
            e
        } else {
            format!("{e}: {}", log.trim())
        });
        return std::ptr::null_mut();
    }
    module
}

/// `mgpuModuleLoad(cubin, size)`: loads a module from a binary image.
extern "C" fn module_load(data: *const c_void, _size: u64) -> cu::CUmodule {
    if !ready() {
        return std::ptr::null_mut();
    }
    let mut module: cu::CUmodule = std::ptr::null_mut();
    // SAFETY: `data` is a module image the compiled code embeds.
    let r = unsafe { cu::cuModuleLoadData(&mut module, data) };
    if let Err(e) = check(r, "cuModuleLoadData") {
        fault(e);
        return std::ptr::null_mut();
    }
    module
}

/// `mgpuModuleUnload(module)`.
extern "C" fn module_unload(module: cu::CUmodule) {
    if !module.is_null() && ready() {
        // SAFETY: a module `module_load*` returned, unloaded once (by its destructor).
        let _ = unsafe { cu::cuModuleUnload(module) };
    }
}

/// `mgpuModuleGetFunction(module, name)`.
extern "C" fn module_get_function(module: cu::CUmodule, name: *const c_char) -> cu::CUfunction {
    if module.is_null() {
        fault("a kernel's module was not loaded".into());
        return std::ptr::null_mut();
    }
    let mut f: cu::CUfunction = std::ptr::null_mut();
    // SAFETY: a loaded module and the kernel's NUL-terminated name.
    let r = unsafe { cu::cuModuleGetFunction(&mut f, module, name) };
    if let Err(e) = check(r, "cuModuleGetFunction") {
        // SAFETY: as above.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        fault(format!("{e} ({name})"));
        return std::ptr::null_mut();
    }
    f
}

/// `mgpuStreamCreate()`.
extern "C" fn stream_create() -> cu::CUstream {
    if !ready() {
        return std::ptr::null_mut();
    }
    let mut s: cu::CUstream = std::ptr::null_mut();
    // SAFETY: an out-pointer to a local.
    let r =
        unsafe { cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) };
    if let Err(e) = check(r, "cuStreamCreate") {
        fault(e);
        return std::ptr::null_mut();
    }
    s
}

/// `mgpuStreamSynchronize(stream)`: waits for the stream's work; a kernel's fault shows
/// here.
extern "C" fn stream_synchronize(stream: cu::CUstream) {
    if stream.is_null() || !ready() {
        return;
    }
    // SAFETY: a stream `stream_create` made.
    let r = unsafe { cu::cuStreamSynchronize(stream) };
    if let Err(e) = check(r, "a kernel (cuStreamSynchronize)") {
        fault(e);
    }
}

/// `mgpuStreamDestroy(stream)`.
extern "C" fn stream_destroy(stream: cu::CUstream) {
    if !stream.is_null() && ready() {
        // SAFETY: a stream `stream_create` made, destroyed once.
        let _ = unsafe { cu::cuStreamDestroy_v2(stream) };
    }
}

/// `mgpuLaunchKernel(f, grid x y z, block x y z, shared bytes, stream, params, extra,
/// param count)`. Nothing is launched after an earlier fault.
#[allow(clippy::too_many_arguments)]
extern "C" fn launch_kernel(
    f: cu::CUfunction,
    gx: i64,
    gy: i64,
    gz: i64,
    bx: i64,
    by: i64,
    bz: i64,
    shared: i32,
    stream: cu::CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    _count: i64,
) {
    if f.is_null() || faulted() || !ready() {
        return;
    }
    let dims = [gx, gy, gz, bx, by, bz];
    if dims.contains(&0) {
        // An empty loop (a tensor with no elements): nothing to launch.
        return;
    }
    let Ok(d) = dims
        .map(u32::try_from)
        .into_iter()
        .collect::<Result<Vec<u32>, _>>()
    else {
        fault(format!(
            "a kernel launch of {dims:?} blocks and threads is out of range"
        ));
        return;
    };
    // SAFETY: `f` is a loaded kernel; `params` points to one pointer per kernel parameter,
    // as the compiled host code lays them out; the stream is live.
    let r = unsafe {
        cu::cuLaunchKernel(
            f,
            d[0],
            d[1],
            d[2],
            d[3],
            d[4],
            d[5],
            shared.max(0) as u32,
            stream,
            params,
            extra,
        )
    };
    if let Err(e) = check(r, "cuLaunchKernel") {
        fault(format!(
            "{e} (grid {gx}x{gy}x{gz}, blocks of {bx}x{by}x{bz} threads)"
        ));
    }
}

/// `_mlir_memref_to_llvm_alloc(bytes)`: managed memory, which kernels and host code both
/// reach.
extern "C" fn alloc(bytes: u64) -> *mut c_void {
    let size = (bytes as usize).max(1);
    match managed(size) {
        Ok(p) => return p.cast(),
        Err(e) => fault(e),
    }
    // SAFETY: plain `malloc`; freed by `free` below, which knows it by its address.
    let host = unsafe { libc::malloc(size) };
    if !host.is_null() {
        HOST_FALLBACK
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(host as usize);
    }
    host
}

/// `_mlir_memref_to_llvm_free(ptr)`.
extern "C" fn free(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    let host = HOST_FALLBACK
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(p as usize));
    if host {
        // SAFETY: `alloc` got it from `malloc`.
        unsafe { libc::free(p) };
    } else if ready() {
        // SAFETY: `alloc` got it from `cuMemAllocManaged`; freed once.
        let _ = unsafe { cu::cuMemFree_v2(p as cu::CUdeviceptr) };
    }
}

/// A managed buffer of `bytes` bytes (at least one; [`release`] frees it), never host
/// memory in its place; the error says why the driver refused.
pub fn managed(bytes: usize) -> Result<*mut u8, String> {
    if !ready() {
        return Err(take_fault().unwrap_or_else(|| "no NVIDIA GPU".into()));
    }
    let mut p: cu::CUdeviceptr = 0;
    // SAFETY: an out-pointer to a local.
    let r = unsafe {
        cu::cuMemAllocManaged(
            &mut p,
            bytes.max(1),
            cu::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
        )
    };
    if r == cu::CUresult::CUDA_SUCCESS && p != 0 {
        Ok(p as *mut u8)
    } else {
        Err(format!(
            "cuMemAllocManaged of {bytes} bytes: {}",
            error_name(r)
        ))
    }
}

/// Frees what [`managed`] or the compiled code's allocation returned.
///
/// # Safety
/// `p` came from [`managed`] or `_mlir_memref_to_llvm_alloc` and is not used again.
pub unsafe fn release(p: *mut u8) {
    free(p as *mut c_void)
}

/// The runtime functions by the names the compiled host code calls.
pub fn symbols() -> Vec<(&'static str, *mut ())> {
    type LoadJit = extern "C" fn(*const c_void, c_int) -> cu::CUmodule;
    type Load = extern "C" fn(*const c_void, u64) -> cu::CUmodule;
    type Unload = extern "C" fn(cu::CUmodule);
    type GetFunction = extern "C" fn(cu::CUmodule, *const c_char) -> cu::CUfunction;
    type Create = extern "C" fn() -> cu::CUstream;
    type Stream = extern "C" fn(cu::CUstream);
    type Launch = extern "C" fn(
        cu::CUfunction,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i32,
        cu::CUstream,
        *mut *mut c_void,
        *mut *mut c_void,
        i64,
    );
    type Alloc = extern "C" fn(u64) -> *mut c_void;
    type Free = extern "C" fn(*mut c_void);
    vec![
        ("mgpuModuleLoadJIT", module_load_jit as LoadJit as *mut ()),
        ("mgpuModuleLoad", module_load as Load as *mut ()),
        ("mgpuModuleUnload", module_unload as Unload as *mut ()),
        (
            "mgpuModuleGetFunction",
            module_get_function as GetFunction as *mut (),
        ),
        ("mgpuStreamCreate", stream_create as Create as *mut ()),
        (
            "mgpuStreamSynchronize",
            stream_synchronize as Stream as *mut (),
        ),
        ("mgpuStreamDestroy", stream_destroy as Stream as *mut ()),
        ("mgpuLaunchKernel", launch_kernel as Launch as *mut ()),
        ("_mlir_memref_to_llvm_alloc", alloc as Alloc as *mut ()),
        ("_mlir_memref_to_llvm_free", free as Free as *mut ()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architectures_read_as_compute_capabilities() {
        assert_eq!(capability_of("sm_80"), Some((8, 0)));
        assert_eq!(capability_of("sm_90a"), Some((9, 0)));
        assert_eq!(capability_of("sm_100"), Some((10, 0)));
        assert_eq!(capability_of("sm_7"), None);
        assert_eq!(capability_of("gfx90a"), None);
    }

    #[test]
    fn a_gpu_runs_ptx_of_its_own_or_an_older_architecture() {
        let gpu = |capability| Gpu {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            capability,
            device: 0,
            context: OnceLock::new(),
        };
        let h200 = gpu((9, 0));
        assert_eq!(h200.arch(), "sm_90");
        assert!(runs(&h200, "sm_70") && runs(&h200, "sm_80") && runs(&h200, "sm_90"));
        assert!(!runs(&h200, "sm_100") && !runs(&h200, "bogus"));
        // Architecture-specific PTX runs on its own architecture only.
        assert!(runs(&h200, "sm_90a") && !runs(&gpu((10, 0)), "sm_90a"));
    }

    #[test]
    fn without_a_driver_the_runtime_functions_fault_instead_of_aborting() {
        // SAFETY: only tries to open the library.
        if unsafe { cu::is_culib_present() } {
            return;
        }
        take_fault();
        let ptx = c"// no kernels\n";
        assert!(module_load_jit(ptx.as_ptr() as *const c_void, 2).is_null());
        let f = take_fault().expect("a fault");
        assert!(f.contains("libcuda.so.1"), "{f}");
        // An allocation falls back to host memory the host code can use, and says so.
        let p = alloc(64) as *mut u8;
        assert!(!p.is_null());
        // SAFETY: 64 bytes of host memory.
        unsafe { std::ptr::write_bytes(p, 7, 64) };
        assert!(take_fault().is_some_and(|f| f.contains("libcuda.so.1")));
        free(p as *mut c_void);
        assert!(HOST_FALLBACK.lock().expect("lock").is_empty());
        // Nothing is launched, streams are null, and nothing aborts.
        assert!(stream_create().is_null());
        stream_synchronize(std::ptr::null_mut());
        stream_destroy(std::ptr::null_mut());
        launch_kernel(
            std::ptr::null_mut(),
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        );
        take_fault();
    }

    #[test]
    fn without_a_driver_the_error_names_what_is_missing() {
        // SAFETY: only tries to open the library.
        if unsafe { cu::is_culib_present() } {
            // A machine with NVIDIA's driver: the GPUs are listed instead.
            if let Ok(g) = gpus() {
                assert!(g.iter().all(|g| g.capability.0 > 0));
            }
            return;
        }
        let e = gpus().expect_err("no driver here").to_string();
        assert!(
            e.contains("libcuda.so.1") && e.contains("no NVIDIA GPU driver"),
            "{e}"
        );
    }
}
