//! NVIDIA GPU code generation between the passes of [`crate::pipelines::NVPTX`]: the
//! constants a kernel reads staged into buffers it can reach, the launch shape of each
//! kernel (how its loops map onto blocks and threads), and libdevice, the CUDA toolkit's
//! math library that the kernels' `math` ops call.
//!
//! [`crate::Mlir::run_pipeline`] runs the NVIDIA pipeline in two parts around
//! [`crate::pipelines::GPU_LOOPS`]: first [`stage_constants`] on the tensors, the first part
//! (bufferization, deallocation, linalg to parallel loops), then [`map_loops`], then the
//! second part (kernel outlining, NVVM, PTX, the host code to LLVM).
//!
//! **Launch shape.** `convert-linalg-to-parallel-loops` makes one `scf.parallel` per op over
//! its parallel dimensions, outermost first (a reduction's dimensions are `scf.for` loops
//! inside). MLIR's greedy mapper gives a loop's first three dimensions to the grid's x, y
//! and z and any nested loop's to the threads, in order. Untiled, every block is one
//! thread; tiled as written, the first (outermost) dimensions would be split across a
//! block's threads, whose neighbours in a warp then read elements a row apart. So each
//! loop's dimensions are first reversed (innermost, contiguous, first) and the loops of
//! each function tiled by [`thread_tile`] of the largest of them: a block's x threads
//! cover consecutive elements of a row (coalesced), its y threads consecutive rows, and the
//! grid the tiles; a fourth and later dimension (a batch) is a loop inside the kernel.

#![allow(unsafe_code)]

use std::path::PathBuf;

use melior::ir::attribute::AttributeLike;
use melior::ir::operation::{OperationLike, OperationRef};
use melior::ir::{Module, RegionLike};

use crate::{Error, Mlir};

/// The most threads a block gets.
pub const BLOCK_THREADS: u64 = 256;

/// The most blocks along the grid's y and z (CUDA's limit).
pub const GRID_YZ: u64 = 65_535;

/// The most threads along a block's z (CUDA's limit).
const BLOCK_Z: u64 = 64;

/// The thread tile (x, y, z) of a loop nest whose extents are listed innermost first: x up
/// to [`BLOCK_THREADS`] consecutive elements of the innermost dimension (its extent rounded
/// up to a power of two: a row of 50 takes 64 threads, not two blocks of 32), y the
/// threads left for the next dimension, z one unless the third dimension has more than
/// [`GRID_YZ`] elements. The second and third dimensions are tiled further where their
/// blocks would pass the grid's limit; `None` where even that cannot fit (more than 1,024
/// threads a block).
pub fn thread_tile(extents: &[u64]) -> Option<[u64; 3]> {
    let x = extent(extents, 0).next_power_of_two().min(BLOCK_THREADS);
    let y = if extents.len() > 1 {
        extent(extents, 1)
            .next_power_of_two()
            .min(BLOCK_THREADS / x)
    } else {
        1
    };
    // Each of y and z at least what keeps its blocks under the grid's limit.
    let y = y.max(least_tile(extents, 1));
    let z = least_tile(extents, 2);
    (z <= BLOCK_Z && x * y * z <= 1024).then_some([x, y, z])
}

/// Dimension `d` of a loop nest's extents (one past its rank).
fn extent(extents: &[u64], d: usize) -> u64 {
    extents.get(d).copied().unwrap_or(1).max(1)
}

/// The least tile of dimension `d` (1 or 2) that keeps its blocks within the grid's limit.
fn least_tile(extents: &[u64], d: usize) -> u64 {
    extent(extents, d).div_ceil(GRID_YZ).next_power_of_two()
}

/// The grid (x, y, z) of a loop nest, extents innermost first, tiled by `tile`.
pub fn grid(extents: &[u64], tile: [u64; 3]) -> [u64; 3] {
    [0, 1, 2].map(|d| extent(extents, d).div_ceil(tile[d]))
}

/// The thread tile of a function's loops (extents innermost first): the largest loop's
/// (by its elements), its y and z widened where another loop's blocks would pass the
/// grid's limits; `None` where no tile within a block's limits covers them all.
fn function_tile(loops: &[Vec<u64>]) -> Option<[u64; 3]> {
    let largest = loops
        .iter()
        .max_by_key(|e| e.iter().product::<u64>())
        .cloned()
        .unwrap_or_default();
    let [x, mut y, mut z] = thread_tile(&largest)?;
    for e in loops {
        y = y.max(least_tile(e, 1));
        z = z.max(least_tile(e, 2));
    }
    (z <= BLOCK_Z && x * y * z <= 1024).then_some([x, y, z])
}

/// Stages every tensor constant of `module`'s functions into a fresh buffer
/// (`bufferization.alloc_tensor() copy(%cst)`): bufferized as they are, constants are
/// globals of the host code, which a kernel cannot read; the copy is host code writing
/// into the GPU-visible memory of the allocation functions, freed like any other buffer.
pub fn stage_constants(mlir: &Mlir, module: &mut Module<'_>, what: &str) -> Result<(), Error> {
    let ctx = mlir.context();
    let mut constants: Vec<mlir_sys::MlirOperation> = Vec::new();
    module
        .as_operation()
        .walk(melior::ir::operation::WalkOrder::PreOrder, |op| {
            if op.name().as_string_ref().as_str() == Ok("arith.constant")
                && op.result(0).is_ok_and(|v| {
                    melior::ir::r#type::RankedTensorType::try_from(melior::ir::ValueLike::r#type(
                        &v,
                    ))
                    .is_ok()
                })
            {
                constants.push(op.to_raw());
            }
            melior::ir::operation::WalkResult::Advance
        });
    let segments: melior::ir::Attribute<'_> =
        melior::ir::attribute::DenseI32ArrayAttribute::new(ctx, &[0, 1, 0]).into();
    for def in constants {
        // SAFETY: `def` is a live `arith.constant` of the module with one tensor result;
        // the copy made here goes right after it and takes over every use of the constant
        // but its own.
        unsafe {
            let value = mlir_sys::mlirOperationGetResult(def, 0);
            let copy = mlir_sys::mlirOperationCreate(&mut {
                let mut state = mlir_sys::mlirOperationStateGet(
                    melior::StringRef::new("bufferization.alloc_tensor").to_raw(),
                    mlir_sys::mlirOperationGetLocation(def),
                );
                let mut operands = [value];
                mlir_sys::mlirOperationStateAddOperands(&mut state, 1, operands.as_mut_ptr());
                let mut results = [mlir_sys::mlirValueGetType(value)];
                mlir_sys::mlirOperationStateAddResults(&mut state, 1, results.as_mut_ptr());
                let mut attributes = [mlir_sys::mlirNamedAttributeGet(
                    mlir_sys::mlirIdentifierGet(
                        ctx.to_raw(),
                        melior::StringRef::new("operandSegmentSizes").to_raw(),
                    ),
                    segments.to_raw(),
                )];
                mlir_sys::mlirOperationStateAddAttributes(&mut state, 1, attributes.as_mut_ptr());
                state
            });
            if copy.ptr.is_null() {
                return Err(Error::Mlir {
                    what: what.to_string(),
                    stage: "GPU constants".into(),
                    message: "cannot make a bufferization.alloc_tensor".into(),
                });
            }
            let block = mlir_sys::mlirOperationGetBlock(def);
            mlir_sys::mlirBlockInsertOwnedOperationAfter(block, def, copy);
            let staged = mlir_sys::mlirOperationGetResult(copy, 0);
            let mut except = [copy];
            mlir_sys::mlirValueReplaceAllUsesExcept(value, staged, 1, except.as_mut_ptr());
        }
    }
    mlir.verify(module, what)
}

/// The constant an index value is (`arith.constant N : index`), if it is one.
fn constant_index(v: mlir_sys::MlirValue) -> Option<i64> {
    // SAFETY: reads a value of a live module.
    unsafe {
        if !mlir_sys::mlirValueIsAOpResult(v) {
            return None;
        }
        let op = OperationRef::from_raw(mlir_sys::mlirOpResultGetOwner(v));
        if op.name().as_string_ref().as_str() != Ok("arith.constant") {
            return None;
        }
        let a = op.attribute("value").ok()?;
        melior::ir::attribute::IntegerAttribute::try_from(a)
            .ok()
            .map(|i| i.value())
    }
}

/// Reverses the dimensions of an `scf.parallel` (bounds, steps and the uses of its
/// induction variables), and returns its extents in the new order (`None` where a bound
/// is not a constant).
///
/// # Safety
/// `op` is a live `scf.parallel` without reductions.
unsafe fn reverse(op: mlir_sys::MlirOperation) -> Vec<Option<u64>> {
    unsafe {
        let region = mlir_sys::mlirOperationGetRegion(op, 0);
        let block = mlir_sys::mlirRegionGetFirstBlock(region);
        let n = mlir_sys::mlirBlockGetNumArguments(block) as usize;
        let count = mlir_sys::mlirOperationGetNumOperands(op) as usize;
        let operands: Vec<mlir_sys::MlirValue> = (0..count)
            .map(|i| mlir_sys::mlirOperationGetOperand(op, i as isize))
            .collect();
        let mut reordered = operands.clone();
        for group in 0..3 {
            for i in 0..n {
                reordered[group * n + i] = operands[group * n + n - 1 - i];
            }
        }
        mlir_sys::mlirOperationSetOperands(op, count as isize, reordered.as_ptr());
        // Swap the uses of induction variables i and n-1-i through a temporary argument.
        let arg = |i: usize| mlir_sys::mlirBlockGetArgument(block, i as isize);
        let index = mlir_sys::mlirValueGetType(arg(0));
        let loc = mlir_sys::mlirOperationGetLocation(op);
        let temp = mlir_sys::mlirBlockAddArgument(block, index, loc);
        for i in 0..n / 2 {
            let (a, b) = (arg(i), arg(n - 1 - i));
            mlir_sys::mlirValueReplaceAllUsesOfWith(a, temp);
            mlir_sys::mlirValueReplaceAllUsesOfWith(b, a);
            mlir_sys::mlirValueReplaceAllUsesOfWith(temp, b);
        }
        mlir_sys::mlirBlockEraseArgument(block, n as u32);
        (0..n)
            .map(|i| {
                let lb = constant_index(reordered[i])?;
                let ub = constant_index(reordered[n + i])?;
                let step = constant_index(reordered[2 * n + i])?;
                (step > 0 && ub >= lb).then(|| ((ub - lb) as u64).div_ceil(step as u64))
            })
            .collect()
    }
}

/// Whether an op has an `scf.parallel` inside it.
fn has_nested_parallel(op: &OperationRef<'_, '_>) -> bool {
    let mut found = false;
    let root = op.to_raw().ptr;
    op.walk(melior::ir::operation::WalkOrder::PreOrder, |o| {
        if o.to_raw().ptr != root && o.name().as_string_ref().as_str() == Ok("scf.parallel") {
            found = true;
            return melior::ir::operation::WalkResult::Interrupt;
        }
        melior::ir::operation::WalkResult::Advance
    });
    found
}

/// The passes [`map_loops`] runs on each function, for its thread tile.
pub fn function_passes(tile: [u64; 3]) -> String {
    format!(
        "func.func(scf-parallel-loop-tiling{{parallel-loop-tile-sizes={},{},{} \
         no-min-max-bounds=1}},gpu-map-parallel-loops,convert-parallel-loops-to-gpu)",
        tile[0], tile[1], tile[2]
    )
}

/// Maps every function's parallel loops onto GPU launches (see the module doc): each
/// outermost `scf.parallel` reversed, then the function's loops tiled by its thread tile,
/// mapped (`gpu-map-parallel-loops`) and made launches (`convert-parallel-loops-to-gpu`).
pub fn map_loops(mlir: &Mlir, module: &mut Module<'_>, what: &str) -> Result<(), Error> {
    let body = module.body();
    let mut op = melior::ir::BlockLike::first_operation(&body);
    while let Some(f) = op {
        op = f.next_in_block();
        if f.name().as_string_ref().as_str() != Ok("func.func")
            || f.region(0).ok().and_then(|r| r.first_block()).is_none()
        {
            continue;
        }
        let mut loops: Vec<(mlir_sys::MlirOperation, bool)> = Vec::new();
        f.walk(melior::ir::operation::WalkOrder::PreOrder, |o| {
            if o.name().as_string_ref().as_str() == Ok("scf.parallel") {
                loops.push((o.to_raw(), !has_nested_parallel(&o)));
                // Its nested loops stay as they are.
                return melior::ir::operation::WalkResult::Skip;
            }
            melior::ir::operation::WalkResult::Advance
        });
        if loops.is_empty() {
            continue;
        }
        let name = crate::context::func_name(&f).unwrap_or_default();
        let fail = |message: String| Error::Mlir {
            what: what.to_string(),
            stage: "GPU launches".into(),
            message: format!("@{name}: {message}"),
        };
        let mut tiled = Vec::with_capacity(loops.len());
        for (l, innermost) in loops {
            // SAFETY: an `scf.parallel` of the module, from linalg: no reductions.
            let e: Vec<u64> = unsafe { reverse(l) }
                .into_iter()
                .map(|e| e.unwrap_or(1 << 20))
                .collect();
            if innermost {
                tiled.push(e);
            } else if e.iter().skip(1).take(2).any(|&n| n > GRID_YZ) {
                // A loop with a parallel loop inside (a reduction between parallel
                // dimensions) is not tiled: each iteration is a block.
                return Err(fail(format!(
                    "a loop of {e:?} iterations around another is more blocks than CUDA's \
                     grid takes ({GRID_YZ} along y and z)"
                )));
            }
        }
        let tile = function_tile(&tiled).ok_or_else(|| {
            fail(format!(
                "loops of {tiled:?} iterations need more than 1,024 threads a block to stay \
                 within CUDA's grid ({GRID_YZ} blocks along y and z)"
            ))
        })?;
        mlir.run_on_function(&f, &function_passes(tile), what)?;
    }
    mlir.verify(module, what)
}

/// libdevice (`libdevice.10.bc`, the CUDA toolkit's math functions as LLVM bitcode), which
/// the kernels' `math` ops call (`__nv_expf`): `TESSERA_LIBDEVICE` (the file), else
/// `nvvm/libdevice/libdevice.10.bc` under `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda` or
/// `/usr/lib/cuda`, else Debian's `/usr/lib/nvidia-cuda-toolkit/libdevice/`. Only a path
/// that a pass option can hold (no spaces, commas or braces) is taken.
pub fn libdevice() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("TESSERA_LIBDEVICE") {
        candidates.push(p.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = std::env::var_os(var) {
            candidates.push(PathBuf::from(root).join("nvvm/libdevice/libdevice.10.bc"));
        }
    }
    for root in ["/usr/local/cuda", "/usr/lib/cuda"] {
        candidates.push(PathBuf::from(root).join("nvvm/libdevice/libdevice.10.bc"));
    }
    candidates.push("/usr/lib/nvidia-cuda-toolkit/libdevice/libdevice.10.bc".into());
    candidates.into_iter().find(|p| {
        p.is_file()
            && p.to_str().is_some_and(|s| {
                s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c))
            })
    })
}

/// The functions the kernels of a lowered module call but do not define (`.extern .func`
/// in their PTX: libdevice's, when it was not linked), sorted and each once.
pub fn undefined_functions(lowered: &str) -> Vec<String> {
    let mut out = std::collections::BTreeSet::new();
    for (_, ptx) in crate::native::gpu_objects(lowered) {
        for line in ptx.lines() {
            let Some(rest) = line.trim().strip_prefix(".extern .func") else {
                continue;
            };
            // `.extern .func  (.param .b32 func_retval0) __nv_expf` or `.extern .func f(`.
            let after = rest.rsplit(')').next().unwrap_or(rest);
            let after = if after.trim().is_empty() { rest } else { after };
            let name: String = after
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '$')
                .collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_to_the_threads_x_and_rows_to_y() {
        // A row of 768 (GPT-2 small's width) over 16 positions: 256 threads along the row.
        assert_eq!(thread_tile(&[768, 16]), Some([256, 1, 1]));
        assert_eq!(grid(&[768, 16], [256, 1, 1]), [3, 16, 1]);
        // A 56x56 image of 64 channels: 64 threads along a row (56 used), 4 rows.
        assert_eq!(thread_tile(&[56, 56, 64, 1]), Some([64, 4, 1]));
        assert_eq!(grid(&[56, 56, 64, 1], [64, 4, 1]), [1, 14, 64]);
        // A 7x7 image: 8x8 threads, 49 of them used.
        assert_eq!(thread_tile(&[7, 7, 512]), Some([8, 8, 1]));
        // One dimension: blocks of 256.
        assert_eq!(thread_tile(&[1000]), Some([256, 1, 1]));
        assert_eq!(grid(&[1000], [256, 1, 1]), [4, 1, 1]);
        // Few elements: one block as large as they are.
        assert_eq!(thread_tile(&[3]), Some([4, 1, 1]));
        assert_eq!(thread_tile(&[1, 1]), Some([1, 1, 1]));
        assert_eq!(thread_tile(&[]), Some([1, 1, 1]));
    }

    #[test]
    fn the_grid_stays_within_cudas_limits() {
        // 200,000 rows of 4: y must take 4 rows a block (50,000 blocks).
        let t = thread_tile(&[4, 200_000]).expect("fits");
        assert_eq!(t, [4, 64, 1]);
        assert!(grid(&[4, 200_000], t)[1] <= GRID_YZ);
        // 200,000 rows of 256: each block still 256 wide, y widened to 4.
        let t = thread_tile(&[256, 200_000]).expect("fits");
        assert_eq!(t, [256, 4, 1]);
        assert!(grid(&[256, 200_000], t)[1] <= GRID_YZ);
        // A third dimension past the limit is tiled too.
        let t = thread_tile(&[32, 1, 100_000]).expect("fits");
        assert_eq!(t, [32, 1, 2]);
        assert!(grid(&[32, 1, 100_000], t)[2] <= GRID_YZ);
        // Beyond what 1,024 threads a block can cover: no tile.
        assert_eq!(thread_tile(&[256, 1 << 40]), None);
        // Every tile within the block's limits.
        for e in [[1u64, 1], [31, 33], [257, 3], [5, 70_000], [2048, 2048]] {
            let t = thread_tile(&e).expect("fits");
            assert!(t[0] * t[1] * t[2] <= 1024 && t[2] <= 64, "{e:?} {t:?}");
            let g = grid(&e, t);
            assert!(g[1] <= GRID_YZ && g[2] <= GRID_YZ, "{e:?} {g:?}");
        }
    }

    #[test]
    fn a_function_takes_its_largest_loops_tile() {
        // A fill of 16 rows and a product's 16x768 result: the result's tile.
        assert_eq!(function_tile(&[vec![16], vec![768, 16]]), Some([256, 1, 1]));
        assert_eq!(function_tile(&[]), Some([1, 1, 1]));
        // A smaller loop of many rows widens y so that its blocks fit the grid.
        let loops = [vec![512, 512], vec![1, 100_000]];
        let t = function_tile(&loops).expect("fits");
        assert_eq!(t, [256, 2, 1]);
        for e in &loops {
            let g = grid(e, t);
            assert!(g[1] <= GRID_YZ && g[2] <= GRID_YZ, "{e:?} {g:?}");
        }
        // None where no block can cover them.
        assert_eq!(function_tile(&[vec![256, 1], vec![1, 1 << 40]]), None);
    }

    #[test]
    fn a_bad_function_pipeline_is_an_error_not_an_abort() {
        let mlir = Mlir::new();
        let m = mlir
            .parse("func.func @f() {\n  return\n}\n", "f")
            .expect("parses");
        let body = m.body();
        let f = melior::ir::BlockLike::first_operation(&body).expect("a function");
        let e = mlir
            .run_on_function(&f, "func.func(no-such-pass)", "f")
            .expect_err("no such pass")
            .to_string();
        assert!(e.contains("no-such-pass"), "{e}");
        mlir.run_on_function(&f, &function_passes([64, 4, 1]), "f")
            .expect("runs");
    }

    #[test]
    fn functions_the_kernels_leave_undefined_are_found() {
        let lowered = "module {\n  gpu.binary @k  [#gpu.object<#nvvm.target, assembly = \"//\\0A.extern .func  (.param .b32 func_retval0) __nv_expf\\0A(\\0A.param .b32 __nv_expf_param_0\\0A)\\0A;\\0A.extern .func __nv_tanhf(\\0A.visible .entry k()\\0A\">]\n}\n";
        assert_eq!(undefined_functions(lowered), ["__nv_expf", "__nv_tanhf"]);
        assert!(undefined_functions("module {\n}\n").is_empty());
    }
}
