//! Running lowered modules in-process: MLIR's execution engine (ORC JIT) on a module in the
//! LLVM dialect, called through the C interface (`llvm.emit_c_interface`) with memref
//! descriptors built from [`Tensor`]s.
//!
//! A rank-N memref descriptor is `{allocated ptr, aligned ptr, offset, sizes[N], strides[N]}`,
//! all 8-byte fields. A function's results come back through one out-parameter: a struct of
//! their descriptors in order. Result buffers are allocated by the compiled code with
//! `malloc`; they may also alias an argument or a global constant (a step that returns what
//! it was given), so they are copied out and never freed here: the process owns them until
//! it exits. Runs are short-lived; this costs the size of the outputs per call.

#![allow(unsafe_code)]

use melior::ExecutionEngine;
use melior::ir::Module;
use tessera_ir::{ElemType, Tensor, TensorType};

use crate::Error;

/// A JIT-compiled module.
pub struct Jit {
    engine: ExecutionEngine,
}

/// The byte size MLIR's LLVM lowering gives one element (`i1` is one byte).
pub fn elem_bytes(e: ElemType) -> usize {
    match e {
        ElemType::Bool => 1,
        e => e.size_bytes(),
    }
}

impl Jit {
    /// JIT-compiles a module already lowered to the LLVM dialect (`opt_level` 0 to 3).
    /// MLIR's C runner utilities (`memrefCopy`, which bufferized copies call) are loaded
    /// from the LLVM installation.
    pub fn new(module: &Module<'_>, opt_level: usize) -> Jit {
        // MLIR reads the path as a C string: end it with a NUL.
        let utils = runner_utils().map(|p| format!("{p}\0"));
        let libs: Vec<&str> = utils.iter().map(String::as_str).collect();
        Jit {
            engine: ExecutionEngine::new(module, opt_level, &libs, false, false),
        }
    }

    /// Calls `name` (a function with `llvm.emit_c_interface`) on `args`; its results have the
    /// types `results` (static shapes).
    pub fn call(
        &self,
        name: &str,
        args: &[&Tensor],
        results: &[TensorType],
    ) -> Result<Vec<Tensor>, Error> {
        // Argument buffers (8-byte aligned copies) and their descriptors.
        let mut buffers: Vec<Vec<u64>> = Vec::with_capacity(args.len());
        for a in args {
            let bytes = a.to_le_bytes();
            let mut buf = vec![0u64; bytes.len().div_ceil(8).max(1)];
            // SAFETY: `buf` holds at least `bytes.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    buf.as_mut_ptr() as *mut u8,
                    bytes.len(),
                );
            }
            buffers.push(buf);
        }
        let mut descs: Vec<Vec<i64>> = Vec::with_capacity(args.len());
        for (a, buf) in args.iter().zip(buffers.iter_mut()) {
            let shape = a.shape();
            let mut d = vec![buf.as_mut_ptr() as i64, buf.as_mut_ptr() as i64, 0];
            d.extend(shape.iter().map(|&s| s as i64));
            d.extend(contiguous_strides(shape));
            descs.push(d);
        }
        let mut result_shapes = Vec::with_capacity(results.len());
        let mut out_len = 0;
        for t in results {
            let dims = t.static_dims().ok_or_else(|| Error::Run {
                message: format!("{name}: result type {t} is not static"),
            })?;
            out_len += 3 + 2 * dims.len();
            result_shapes.push(dims);
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
        // the C interface's for the declared types; buffers outlive the call.
        unsafe { self.engine.invoke_packed(name, &mut packed) }.map_err(|e| Error::Run {
            message: format!("calling `{name}`: {e}"),
        })?;
        let mut tensors = Vec::with_capacity(results.len());
        let mut at = 0;
        for (t, dims) in results.iter().zip(&result_shapes) {
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
            let mut bytes = vec![0u8; n * eb];
            let base = d[1] as *const u8;
            let offset = d[2];
            let mut idx = vec![0usize; rank];
            for k in 0..n {
                let mut e = offset;
                for (i, &s) in idx.iter().zip(&strides) {
                    e += *i as i64 * s;
                }
                // SAFETY: the descriptor came from the compiled code; element `e` is in its
                // buffer by the memref's own sizes and strides.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        base.offset(e as isize * eb as isize),
                        bytes.as_mut_ptr().add(k * eb),
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
            let tensor = Tensor::from_typed_le_bytes(t, &bytes).map_err(|e| Error::Run {
                message: format!("{name}: result {t}: {e}"),
            })?;
            tensors.push(tensor);
        }
        Ok(tensors)
    }
}

/// The shared library with MLIR's C runner utilities, when installed.
pub fn runner_utils() -> Option<String> {
    let p = crate::native::llvm_prefix().join("lib/libmlir_c_runner_utils.so");
    p.is_file().then(|| p.display().to_string())
}

fn contiguous_strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for k in (0..shape.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * shape[k + 1] as i64;
    }
    s
}
