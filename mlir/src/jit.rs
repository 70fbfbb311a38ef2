//! Running lowered modules in-process: MLIR's execution engine (ORC JIT) on a module in the
//! LLVM dialect, called through the C interface (`llvm.emit_c_interface`) with memref
//! descriptors built from [`Tensor`]s.
//!
//! A rank-N memref descriptor is `{allocated ptr, aligned ptr, offset, sizes[N], strides[N]}`,
//! all 8-byte fields. A function's results come back through one out-parameter: a struct of
//! their descriptors in order. Result buffers are allocated by the compiled code with
//! `malloc` and owned by the caller: the CPU pipeline's ownership-based deallocation gives
//! every returned buffer to the caller (a result that would alias an argument or a global
//! constant is cloned). They are copied out and freed, each allocation once (two results
//! may share one); an allocation that is one of the arguments, or MLIR's marker for a global
//! (`0xdeadbeef`), is never freed, should a pipeline return one. A training step's outputs
//! are its whole state, so keeping them would grow memory by the model's size every step.

#![allow(unsafe_code)]

use melior::ExecutionEngine;
use melior::ir::Module;
use tessera_ir::{ElemType, Tensor, TensorType};

use crate::Error;

/// A compiled module: JIT-compiled in this process, or a shared library `compile -o` built
/// ([`crate::native::shared_library`]). Both are called the same way.
pub struct Jit {
    engine: Engine,
    /// The GPU whose kernels it launches ([`Jit::on_gpu`]), its arguments staged there.
    gpu: Option<Staging>,
}

/// What a GPU module's calls need: the GPU, and the constant arguments (weights,
/// [`ArgRef::Constant`]) already copied into its managed memory, by their address and
/// length.
struct Staging {
    gpu: &'static crate::cuda::Gpu,
    weights: std::sync::Mutex<std::collections::BTreeMap<(usize, usize), usize>>,
}

impl Drop for Jit {
    fn drop(&mut self) {
        if let Some(s) = &self.gpu {
            let _ = s.gpu.make_current();
            let weights = s.weights.lock().unwrap_or_else(|e| e.into_inner());
            for &p in weights.values() {
                // SAFETY: staged by `stage`, freed once, here.
                unsafe { crate::cuda::release(p as *mut u8) };
            }
        }
    }
}

enum Engine {
    Jit(ExecutionEngine),
    /// A library and the packed entries looked up so far.
    Library(
        libloading::os::unix::Library,
        std::sync::Mutex<std::collections::BTreeMap<String, Packed>>,
    ),
}

/// The packed entry of a function (`void f(void **args)`).
type Packed = unsafe extern "C" fn(*mut *mut ());

/// The byte size MLIR's LLVM lowering gives one element (`i1` is one byte).
pub fn elem_bytes(e: ElemType) -> usize {
    match e {
        ElemType::Bool => 1,
        e => e.size_bytes(),
    }
}

impl Jit {
    /// JIT-compiles a module already lowered to the LLVM dialect (`opt_level` 0 to 3).
    /// MLIR's C runner utilities (`memrefCopy`, which bufferized copies call) and the
    /// OpenMP runtime (the schedule's parallel loops) are loaded from the LLVM installation.
    pub fn new(module: &Module<'_>, opt_level: usize) -> Jit {
        // MLIR reads the paths as C strings: end them with a NUL.
        let libs: Vec<String> = [runner_utils(), openmp_runtime()]
            .into_iter()
            .flatten()
            .map(|p| format!("{p}\0"))
            .collect();
        let libs: Vec<&str> = libs.iter().map(String::as_str).collect();
        Jit {
            engine: Engine::Jit(ExecutionEngine::new(module, opt_level, &libs, false, false)),
            gpu: None,
        }
    }

    /// This JIT-compiled module (lowered by [`crate::pipelines::NVPTX`]) run on `gpu`: MLIR's
    /// GPU runtime functions and the allocation functions resolved to [`crate::cuda`]'s,
    /// each call's arguments staged into the GPU's managed memory (a constant's once,
    /// kept), its results copied out and freed there. Called before the first call (the
    /// kernels' modules load at the first lookup).
    pub fn on_gpu(mut self, gpu: &'static crate::cuda::Gpu) -> Jit {
        if let Engine::Jit(e) = &self.engine {
            for (name, f) in crate::cuda::symbols() {
                // SAFETY: each function has the C signature the lowering's host code
                // declares for the name (MLIR's GPU runtime interface and the generic
                // allocation functions) and lives as long as the process; registered
                // before the first lookup.
                unsafe { e.register_symbol(name, f) };
            }
            self.gpu = Some(Staging {
                gpu,
                weights: Default::default(),
            });
        }
        self
    }

    /// JIT-compiles a module that [`crate::profile::instrument`] marked, its marks resolved
    /// to [`crate::profile::tessera_mark`].
    pub fn profiled(module: &Module<'_>, opt_level: usize) -> Jit {
        let jit = Jit::new(module, opt_level);
        if let Engine::Jit(e) = &jit.engine {
            let mark: extern "C" fn(i64) = crate::profile::tessera_mark;
            // SAFETY: the module declares the mark `(i64) -> ()`, which is the C ABI of
            // `tessera_mark`, a function that lives as long as the process; registered before
            // the first lookup, so before any code that calls it is materialized.
            unsafe { e.register_symbol(crate::profile::MARK, mark as *mut ()) };
        }
        jit
    }

    /// Loads a shared library of a module's steps ([`crate::native::shared_library`]).
    pub fn library(path: &std::path::Path) -> Result<Jit, Error> {
        // SAFETY: the library is tessera's own build of a module: loading it runs no
        // initializers besides the C runtime's and the runner utilities'.
        // Every symbol bound now, so a missing one is this error, not an abort at a call.
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL;
        let lib =
            unsafe { libloading::os::unix::Library::open(Some(path), flags) }.map_err(|e| {
                Error::Run {
                    message: format!("{}: {e}", path.display()),
                }
            })?;
        Ok(Jit {
            engine: Engine::Library(lib, Default::default()),
            gpu: None,
        })
    }

    /// Whether this is a loaded library.
    pub fn is_library(&self) -> bool {
        matches!(self.engine, Engine::Library(..))
    }

    /// Calls the packed entry of `name`.
    ///
    /// # Safety
    /// `packed` must hold what the function's C interface takes (see [`Jit::call_buffers`]).
    unsafe fn invoke_packed(&self, name: &str, packed: &mut [*mut ()]) -> Result<(), String> {
        match &self.engine {
            // SAFETY: the caller's.
            Engine::Jit(e) => unsafe { e.invoke_packed(name, packed) }.map_err(|e| e.to_string()),
            Engine::Library(lib, entries) => {
                let mut entries = entries.lock().unwrap_or_else(|e| e.into_inner());
                let f = match entries.get(name) {
                    Some(f) => *f,
                    None => {
                        let symbol = crate::native::packed_symbol(name);
                        // SAFETY: the library defines the symbol as a `Packed` function; the
                        // pointer is used only while the library (held beside it) is loaded.
                        let f = *unsafe { lib.get::<Packed>(symbol.as_bytes()) }
                            .map_err(|e| format!("the library has no `{symbol}`: {e}"))?;
                        entries.insert(name.to_string(), f);
                        f
                    }
                };
                drop(entries);
                // SAFETY: the caller's.
                unsafe { f(packed.as_mut_ptr()) };
                Ok(())
            }
        }
    }

    /// Calls `name` (a function with `llvm.emit_c_interface`) on `args`; its results have the
    /// types `results` (static shapes). Arguments and results are buffers: a program's steps
    /// pass tensors along without decoding them, and weights are encoded once. A
    /// [`ArgRef::Write`] argument is donated state the function updates in place.
    pub fn call_buffers(
        &self,
        name: &str,
        args: &mut [ArgRef<'_>],
        results: &[TensorType],
    ) -> Result<Vec<Buffer>, Error> {
        let mut result_shapes = Vec::with_capacity(results.len());
        let mut out_len = 0;
        for t in results {
            let dims = t.static_dims().ok_or_else(|| Error::Run {
                message: format!("{name}: result type {t} is not static"),
            })?;
            out_len += 3 + 2 * dims.len();
            result_shapes.push(dims);
        }
        let mut descs: Vec<Vec<i64>> = Vec::with_capacity(args.len());
        let mut arg_ptrs: Vec<i64> = Vec::with_capacity(args.len());
        // A GPU module's arguments, copied into managed memory for this call.
        let mut staged: Vec<Staged> = Vec::new();
        if let Some(s) = &self.gpu {
            s.gpu.make_current()?;
            crate::cuda::take_fault();
        }
        for a in args.iter_mut() {
            let ptr = match (&mut *a, &self.gpu) {
                (ArgRef::Read(b) | ArgRef::Constant(b), None) => b.as_ptr() as i64,
                (ArgRef::Write(b), None) => b.as_mut_bytes().as_mut_ptr() as i64,
                (a, Some(s)) => match s.stage(a, &mut staged) {
                    Ok(p) => p as i64,
                    Err(e) => {
                        s.unstage(args, staged, false);
                        return Err(e);
                    }
                },
            };
            arg_ptrs.push(ptr);
            let a = a.buffer();
            let mut d = vec![ptr, ptr, 0];
            d.extend(
                a.ty.static_dims()
                    .unwrap_or_default()
                    .iter()
                    .map(|&s| s as i64),
            );
            d.extend(contiguous_strides(&a.shape()));
            descs.push(d);
        }
        let mut out = vec![0i64; out_len.max(1)];
        let mut out_ptr: *mut i64 = out.as_mut_ptr();
        let mut desc_ptrs: Vec<*mut i64> = descs.iter_mut().map(|d| d.as_mut_ptr()).collect();
        let mut packed: Vec<*mut ()> = Vec::with_capacity(1 + args.len());
        if !results.is_empty() {
            packed.push(&mut out_ptr as *mut *mut i64 as *mut ());
        }
        for p in desc_ptrs.iter_mut() {
            packed.push(p as *mut *mut i64 as *mut ());
        }
        // SAFETY: every packed entry points to a live pointer to a descriptor whose layout is
        // the C interface's for the declared types; the compiled code only reads arguments
        // (`bufferization.writable = false`) except the `Write` ones, which are borrowed
        // mutably and hold exactly their type's bytes; the buffers outlive the call.
        let called = unsafe { self.invoke_packed(name, &mut packed) }
            .map_err(|e| Error::Run {
                message: format!("calling `{name}`: {e}"),
            })
            .and_then(|()| {
                let Some(s) = &self.gpu else { return Ok(()) };
                match crate::cuda::take_fault() {
                    Some(f) => Err(Error::Run {
                        message: format!("`{name}` on GPU {} ({}): {f}", s.gpu.ordinal, s.gpu.name),
                    }),
                    None => Ok(()),
                }
            });
        // The results are read before the staged arguments are freed (a result may be one).
        let copied = called.and_then(|()| copy_results(name, results, &result_shapes, &out));
        if let Some(s) = &self.gpu {
            s.unstage(args, staged, copied.is_ok());
        }
        let mut allocations = Vec::with_capacity(result_shapes.len());
        let mut at = 0;
        for dims in &result_shapes {
            if let Some(&p) = out.get(at) {
                allocations.push(p);
            }
            at += 3 + 2 * dims.len();
        }
        self.free_allocations(allocations, &arg_ptrs);
        copied
    }

    /// Frees each allocation of a call's results once: not an argument's, not a global's.
    fn free_allocations(&self, mut allocations: Vec<i64>, arg_ptrs: &[i64]) {
        allocations.sort_unstable();
        allocations.dedup();
        for p in allocations {
            if p != 0 && p != GLOBAL_MARKER && !arg_ptrs.contains(&p) {
                // SAFETY: the compiled code allocated `p` (with `malloc`, or on a GPU with
                // the managed allocation function) and handed it to the caller (see the
                // module doc); it is freed once, after its data was copied.
                unsafe {
                    if self.gpu.is_some() {
                        crate::cuda::release(p as *mut u8);
                    } else {
                        free(p as *mut std::ffi::c_void);
                    }
                }
            }
        }
    }
}

/// The results of a call, copied out of the descriptors `out` that the compiled code wrote
/// (types `results`, extents `shapes`), each checked against its static extents.
fn copy_results(
    name: &str,
    results: &[TensorType],
    shapes: &[Vec<u64>],
    out: &[i64],
) -> Result<Vec<Buffer>, Error> {
    let mut buffers = Vec::with_capacity(results.len());
    let mut at = 0;
    for (t, dims) in results.iter().zip(shapes) {
        let rank = dims.len();
        let d = &out[at..at + 3 + 2 * rank];
        at += 3 + 2 * rank;
        let eb = elem_bytes(t.elem);
        let sizes: Vec<usize> = d[3..3 + rank].iter().map(|&s| s as usize).collect();
        if sizes.iter().zip(dims).any(|(&a, &b)| a as u64 != b) {
            return Err(Error::Run {
                message: format!("{name}: a result came back as {sizes:?}, expected {dims:?}"),
            });
        }
        let strides: Vec<i64> = d[3 + rank..].to_vec();
        let n: usize = sizes.iter().product();
        let mut buf = Buffer::zeroed(t.clone(), n * eb);
        let dst = buf.as_mut_bytes().as_mut_ptr();
        let base = d[1] as *const u8;
        let offset = d[2];
        if strides == contiguous_strides(&sizes) {
            // SAFETY: a contiguous result of `n` elements starts at `offset`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    base.offset(offset as isize * eb as isize),
                    dst,
                    n * eb,
                );
            }
        } else {
            let mut idx = vec![0usize; rank];
            for k in 0..n {
                let mut e = offset;
                for (i, &s) in idx.iter().zip(&strides) {
                    e += *i as i64 * s;
                }
                // SAFETY: element `e` is in the result's buffer by its own sizes and
                // strides; `dst` holds `n * eb` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.offset(e as isize * eb as isize),
                        dst.add(k * eb),
                        eb,
                    );
                }
                for ax in (0..rank).rev() {
                    idx[ax] += 1;
                    if idx[ax] < sizes[ax] {
                        break;
                    }
                    idx[ax] = 0;
                }
            }
        }
        buffers.push(buf);
    }
    Ok(buffers)
}

/// An argument copied into a GPU's managed memory for one call (the n-th staged is the
/// n-th argument's): the copy, and whether it is freed after the call (a weight's stays).
struct Staged {
    ptr: *mut u8,
    temporary: bool,
}

impl Staging {
    /// The managed-memory copy of an argument: a constant's (a weight's) made once and
    /// kept, any other made for this call (`staged` records it).
    fn stage(&self, a: &ArgRef<'_>, staged: &mut Vec<Staged>) -> Result<*mut u8, Error> {
        let b = a.buffer();
        let key = (b.as_ptr() as usize, b.len);
        let kept = matches!(a, ArgRef::Constant(_));
        if kept
            && let Some(&p) = self
                .weights
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
        {
            staged.push(Staged {
                ptr: p as *mut u8,
                temporary: false,
            });
            return Ok(p as *mut u8);
        }
        let p = crate::cuda::managed(b.len).map_err(|e| Error::Run {
            message: format!("GPU {} ({}): {e}", self.gpu.ordinal, self.gpu.name),
        })?;
        // SAFETY: `p` holds at least `len` bytes (managed memory the host may write), the
        // buffer `len` initialized bytes; they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p, b.len) };
        if kept {
            self.weights
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key, p as usize);
        }
        staged.push(Staged {
            ptr: p,
            temporary: !kept,
        });
        Ok(p)
    }

    /// After a call: each donated argument's new value copied back (when the call
    /// succeeded), each temporary copy freed.
    fn unstage(&self, args: &mut [ArgRef<'_>], staged: Vec<Staged>, written: bool) {
        for (a, s) in args.iter_mut().zip(staged) {
            if written && let ArgRef::Write(b) = a {
                let dst = b.as_mut_bytes();
                // SAFETY: the copy holds the argument's `len` bytes, which the call
                // updated in place; the kernels are done (every launch is waited for).
                unsafe { std::ptr::copy_nonoverlapping(s.ptr, dst.as_mut_ptr(), dst.len()) };
            }
            if s.temporary {
                // SAFETY: made by `stage` for this call; freed once.
                unsafe { crate::cuda::release(s.ptr) };
            }
        }
    }
}

/// An argument of [`Jit::call_buffers`].
pub enum ArgRef<'a> {
    /// Read only.
    Read(&'a Buffer),
    /// Read only, and neither changed nor freed while the [`Jit`] lives (a weight the
    /// runner holds): a GPU module copies it into its memory once and keeps the copy.
    Constant(&'a Buffer),
    /// Donated: the function writes its new value into it.
    Write(&'a mut Buffer),
}

impl ArgRef<'_> {
    fn buffer(&self) -> &Buffer {
        match self {
            ArgRef::Read(b) | ArgRef::Constant(b) => b,
            ArgRef::Write(b) => b,
        }
    }
}

/// Maps a file read-only, for [`Buffer`]s of its bytes.
pub(crate) fn map_file(file: &std::fs::File) -> std::io::Result<std::sync::Arc<memmap2::Mmap>> {
    // SAFETY: the map is read-only; a compiled directory's files are not written while a
    // program runs from them (compile writes each new file and renames it over the old one,
    // which leaves this mapping on the old file).
    unsafe { memmap2::Mmap::map(file) }.map(std::sync::Arc::new)
}

/// The allocated pointer MLIR's LLVM lowering gives a `memref.get_global` (not heap memory).
const GLOBAL_MARKER: i64 = 0xdead_beef;

unsafe extern "C" {
    /// The C library's `free`, which the compiled code's `malloc` pairs with.
    fn free(p: *mut std::ffi::c_void);
}

/// A tensor's bytes as the compiled code reads them: little-endian, row-major, `i1` one
/// byte per element; 8-byte aligned, or a weight in a mapped weights file at an offset that
/// is a multiple of its element's size.
#[derive(Clone, Debug)]
pub struct Buffer {
    store: Store,
    len: usize,
    /// The tensor's type (static).
    pub ty: TensorType,
}

#[derive(Clone, Debug)]
enum Store {
    Owned(Vec<u64>),
    /// Read-only bytes of a mapped file, from an offset.
    Mapped(std::sync::Arc<memmap2::Mmap>, usize),
}

impl Buffer {
    pub(crate) fn zeroed(ty: TensorType, len: usize) -> Buffer {
        Buffer {
            store: Store::Owned(vec![0u64; len.div_ceil(8).max(1)]),
            len,
            ty,
        }
    }

    /// `len` bytes of a mapped file from `offset` (checked to lie in it), as a tensor of
    /// type `ty`. An offset that is not a multiple of the element's size gets a copy.
    pub(crate) fn mapped(
        map: &std::sync::Arc<memmap2::Mmap>,
        offset: usize,
        len: usize,
        ty: TensorType,
    ) -> Option<Buffer> {
        let bytes = map.get(offset..offset.checked_add(len)?)?;
        if !offset.is_multiple_of(elem_bytes(ty.elem)) {
            let mut b = Buffer::zeroed(ty, len);
            b.as_mut_bytes().copy_from_slice(bytes);
            return Some(b);
        }
        Some(Buffer {
            store: Store::Mapped(map.clone(), offset),
            len,
            ty,
        })
    }

    fn as_ptr(&self) -> *const u8 {
        match &self.store {
            Store::Owned(w) => w.as_ptr() as *const u8,
            // SAFETY: `mapped` checked that the offset lies in the map.
            Store::Mapped(m, at) => unsafe { m.as_ptr().add(*at) },
        }
    }

    /// The bytes, writable: a mapped buffer is copied first (weights are never written).
    fn as_mut_bytes(&mut self) -> &mut [u8] {
        if let Store::Mapped(..) = self.store {
            let mut owned = Buffer::zeroed(self.ty.clone(), self.len);
            owned.as_mut_bytes().copy_from_slice(self.bytes());
            *self = owned;
        }
        let Store::Owned(w) = &mut self.store else {
            unreachable!("made owned above")
        };
        // SAFETY: `w` holds at least `len` bytes (len <= 8 * w.len()).
        unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr() as *mut u8, self.len) }
    }

    /// Encodes a tensor.
    pub fn from_tensor(t: &Tensor) -> Buffer {
        let bytes = t.to_le_bytes();
        let mut b = Buffer::zeroed(t.ty(), bytes.len());
        b.as_mut_bytes().copy_from_slice(&bytes);
        b
    }

    /// The extents.
    pub fn shape(&self) -> Vec<usize> {
        self.ty
            .static_dims()
            .unwrap_or_default()
            .iter()
            .map(|&d| d as usize)
            .collect()
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the store holds `len` initialized bytes from `as_ptr`.
        unsafe { std::slice::from_raw_parts(self.as_ptr(), self.len) }
    }

    /// Decodes into a tensor.
    pub fn to_tensor(&self) -> Result<Tensor, Error> {
        Tensor::from_typed_le_bytes(&self.ty, self.bytes()).map_err(|e| Error::Run {
            message: format!("{}: {e}", self.ty),
        })
    }
}

/// The shared library with MLIR's C runner utilities, when installed.
pub fn runner_utils() -> Option<String> {
    let p = crate::native::llvm_prefix().join("lib/libmlir_c_runner_utils.so");
    p.is_file().then(|| p.display().to_string())
}

/// The OpenMP runtime (LLVM's `libomp`), which the CPU code's parallel loops call, when
/// installed.
pub fn openmp_runtime() -> Option<String> {
    let p = crate::native::llvm_prefix().join("lib/libomp.so");
    p.is_file().then(|| p.display().to_string())
}

/// Sets how many threads the CPU code's parallel loops use from now on
/// (`omp_set_num_threads` of the OpenMP runtime that libraries and the JIT load): for the
/// calling thread, which is the one that runs the steps. Without it, the runtime's default
/// (`OMP_NUM_THREADS`, else one per core).
pub fn set_threads(n: usize) -> Result<(), Error> {
    let missing = |why: String| Error::Run {
        message: format!("--threads {n}: cannot load the OpenMP runtime: {why}"),
    };
    let path = openmp_runtime()
        .ok_or_else(|| missing("libomp.so is not installed (`make deps` installs it)".into()))?;
    let count = i32::try_from(n).map_err(|_| missing("too many threads".into()))?;
    // SAFETY: libomp's initializers are safe to run; `omp_set_num_threads` has this C
    // signature (omp.h), and the library stays loaded (it is never closed) while code that
    // uses the setting runs.
    #[allow(unsafe_code)]
    unsafe {
        let lib = libloading::Library::new(&path).map_err(|e| missing(e.to_string()))?;
        let set: libloading::Symbol<'_, unsafe extern "C" fn(i32)> = lib
            .get(b"omp_set_num_threads\0")
            .map_err(|e| missing(e.to_string()))?;
        set(count);
        std::mem::forget(lib);
    }
    Ok(())
}

fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as i64;
    }
    s
}

/// Makes this process's `malloc` keep the memory that is freed, for the next run of a
/// compiled program: allocations up to 32 MiB (glibc's largest threshold) come from the heap
/// instead of fresh `mmap`s, and the heap is not trimmed. Each run of a program allocates
/// and frees its intermediate buffers again (the compiled code's `memref.alloc`s, its
/// results); with glibc's defaults, those of more than 128 KiB were new mappings every
/// run, each page faulted in and zeroed by the kernel: a third of MobileNetV2's time at
/// 224x224. onnxruntime's arena and IREE's caching allocator keep their memory the same
/// way. Idempotent; the memory a run needs stays mapped between runs.
pub fn retain_freed_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `mallopt` only changes glibc's allocation thresholds; it takes no
        // pointers, and glibc serializes it with allocations.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    });
}
