//! The CPU code generation schedule: contractions tiled for registers and the cache and
//! vectorized, through MLIR's transform dialect, before the CPU pipeline's passes run.
//!
//! A contraction is a `linalg.generic` that computes `C += A * B` in `f32` over one
//! reduction dimension `k`, every operand a projected permutation of the loops with a
//! static shape: tessera's `matmul`, `gemm` and batched matmuls lower to one. Its loops are
//! named by their role ([`Contraction`]):
//! - `n`, the vector dimension: C's innermost, which is the innermost of the one operand
//!   that has it (so both load and store whole vectors);
//! - `m`, the rows: C's next-to-innermost, in the other operand only;
//! - `k`, the reduction; every other loop is a batch loop.
//!
//! Each one is tiled so that an `mt × nt` block of C stays in vector registers while `k`
//! runs (`Tiles`): loops over the batch, then over `n` tiles, then over `m` tiles, then
//! over `k` one step at a time. The `k` step is vectorized (`transform.structured.vectorize`)
//! into a contraction of `mt × 1 × nt`, lowered to `mt` broadcast-FMAs of `nt` lanes
//! (`lowering_strategy = "outerproduct"`), and the block of C is hoisted out of the `k` loop
//! (`transform.loop.hoist_loop_invariant_subsets`): it is read and written once per tile
//! instead of once per step. Where C starts as a `linalg.fill` (every product tessera
//! lowers), the contraction is not split and its operands are not computed in its function
//! (`fuse` would pull their producers in and compute them again in every tile), the fill is
//! fused into the tile loops (`transform.structured.fuse`): each block of C starts as zeros
//! in registers, and no
//! memset of all of C precedes the product (MobileNetV2 12.1 -> 11.2 ms). With `n`
//! outside `m`, a panel of B (`K × nt`) is read from memory once and reused from the cache
//! by every row tile. Extents that the tile does not
//! divide are split off first (`transform.structured.split`) and get a tile of their own
//! size, so every vector has a static shape and needs no mask.
//!
//! Measured on this machine (AVX-512, one thread) on GPT-2 small's `16×768 · 768×3072`:
//! 7.1 ms as scalar loops, 1.8 ms tiled `16 × 16` (42 GFLOP/s); the whole model went from
//! 90 to 69 ms when its 16 rows became tiles of `4 × 64` ([`FEW_ROWS`]).
//!
//! Where `n` is not innermost in its operand but `k` is innermost in both (`C = A·Bᵀ`), each
//! element of C is a dot product ([`Contraction::dot`]): a `2 × 8` tile of C keeps 16
//! partial sums per element along `k` in registers and adds them up at the end
//! (`transform.structured.tile_reduction_using_for`); the same kernel in that form went
//! from 34.7 ms to 1.65 ms.
//!
//! A product from a fill followed by elementwise generics, each the only reader of the one
//! before with the identity map on it ([`Epilogue`]: a convolution's bias and ReLU, which
//! the lowering writes on the product's own `[N, M, pixels]` shape; a matmul's bias and
//! activation), is tiled through its last generic instead ([`fused_piece`]): that generic is
//! split and tiled like C, and the others, the product and its fill are fused into its
//! loops (`transform.structured.fuse_into_containing_op`). Each tile then starts its block
//! of C as zeros, runs `k`, and computes the epilogue from the block in registers: C is
//! never stored and read back, and no memset precedes it (one thread: MobileNetV2 11.05 ->
//! 9.39 ms, SqueezeNet 9.64 -> 8.62, YOLO-shaped net 15.6 -> 13.3). Where A does not fit a
//! core's L2 cache and B does, the row tiles go outermost and `n` is split and tiled within
//! each ([`rows_first`]), so A is read once.
//!
//! With threads ([`crate::pipelines::threaded`]), a contraction of at least
//! `PARALLEL_FLOPS` (2^23 FLOPs) or `PARALLEL_BYTES` (2 MiB of operands) runs the outer and
//! row tiles of each of its pieces as an `scf.forall`, which the CPU pipeline lowers to
//! OpenMP; its loops are put in the order batch, `n`, `m`, `k` first
//! (`transform.structured.interchange`), so that OpenMP's static schedule gives each thread
//! a run of tiles that reuse one panel of B. `k` stays in one thread, so every element sums
//! its products in the same order on any number of threads. Every other op with work
//! enough runs its outer loops on threads too: the second named sequence, [`THREADS`],
//! applied after the CPU pipeline has fused elementwise ops ([`apply_threads`], [`spread`]).
//!
//! Convolutions arrive as contractions already: the lowering writes an ungrouped one as an
//! im2col copy and a product with the filter (`F × C·KH·KW` by `C·KH·KW × OH·OW`). The
//! copy, where its rows are read at stride 1, is vectorized along them ([`patches`],
//! [`patch_rows`]): LLVM vectorized it across rows with gathers and scatters, which an AMD
//! EPYC (Zen 4) runs slowly (resnet_small 0.44 -> 0.31 ms, the CNN 0.077 -> 0.037). A
//! depthwise convolution, all-parallel loops over its result with each tap's window a
//! slice ([`depthwise`]), is vectorized along the result's rows, each row of each window a
//! contiguous read at stride 1 (`stencil`); LLVM left it scalar (MobileNetV2's stride-1
//! depthwise convolutions took about a third less time vectorized). A max pooling is
//! written the same way, the maximum of its taps' windows ([`max_taps`]): YOLO-shaped
//! net's 5×5 pools of stride 1 took 3.4 ms of its 20 as a reduction over the window. A
//! max pooling of stride 2 or more along its rows reads its input deinterleaved in phases,
//! which the lowering makes in the same pass as the padding, one generic that swaps the
//! last two axes of `[.., columns, s]` ([`deinterleave`]): each tile reads `16 × s`
//! contiguous floats and shuffles them ([`phases`]), and the taps' windows are then rows
//! at stride 1 (SqueezeNet's three 3×3 pools of stride 2: 1.6 -> 0.9 ms, the whole model
//! 8.4 -> 7.4 on one thread). A depthwise convolution of stride 1 with short rows comes in
//! the lowering's flat form (`linalg.rs`'s `FlatGrid`: one row per channel, the windows at
//! offsets along it, a mask operand per column shift), vectorized the same way along that
//! row. Its epilogue, fused after the contraction sequence and expanded back to the
//! image's short rows, is vectorized by the threads sequence ([`short_rows`]); LLVM
//! unrolled it into scalar code (with the stride-2 form below, MobileNetV2 on an AMD EPYC:
//! 9.65 -> 8.69 ms on one thread, 5.70 -> 5.09 on two). So is any elementwise generic with
//! rows of at most 16, which LLVM vectorized across rows with gathers and scatters (BERT
//! tiny's softmax and attention transposes; with softmax's maximum by `maxnumf`, which x86
//! folds in a few shuffles where `maximumf` took a scalar chain: 0.071 -> 0.064 ms). One of stride 2 over an even input takes the flat form from the input's
//! four phases (`flat_phases`: a copy that moves both the row and the column phase out,
//! which [`deinterleave`] picks too); MobileNetV2's four: 1.1 -> 1.0 ms, its first (96
//! channels of 112 × 112, read from memory) unchanged. Other depthwise convolutions of
//! stride 2 are LLVM's: with column phases only MobileNetV2's first took 1.47 ms against
//! 1.05 (the `[16, 2]` read is unrolled into 16 reads of 8 bytes, see
//! `convert-vector-to-scf`).
//!
//! A reduction along its innermost loop ([`row_reduction`]: softmax's maximum and sum,
//! layer norm's sums, `Reduce*` over the last axis) keeps 16 partial results per row in a
//! vector and folds them into one at the end of the row ([`reduce_rows`]); the CPU
//! pipeline lowers that last fold as a tree (`reassociate-fp-reductions`). LLVM, which may
//! not reorder a floating-point sum, had folded every element in turn. The order is fixed
//! by the schedule, so results do not depend on the number of threads.
//!
//! A kernel that writes its result into a block of its last argument and gives that back
//! (the lowering's destinations: a concatenation's pieces) has its ops made to compute
//! there at the end of the contraction sequence ([`in_place_functions`], [`in_place`]), so
//! bufferization copies nothing (SqueezeNet, one thread: 8.25 -> 7.89 ms; two threads:
//! 5.80 -> 5.16).
//!
//! The schedule is a transform library written for the module at hand ([`apply`],
//! [`apply_threads`], [`library`]): the named sequences [`CONTRACTIONS`] and [`THREADS`].
//! They find their ops by function name and place among the function's ops of the names
//! they look at, so `mlir-opt` with `transform-preload-library` and `transform-interpreter`
//! applies them to the module as `compile -o` wrote it
//! ([`crate::pipelines::with_schedule`]). [`crate::Mlir::run_pipeline`] applies the
//! contraction sequence with [`crate::pipelines::CPU`] and
//! [`crate::pipelines::CPU_MPI_BUFFERS`] (see [`crate::pipelines::scheduled`]), and the
//! threads sequence with `CPU`, after its fusion of elementwise ops.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use melior::ir::attribute::ArrayAttribute;
use melior::ir::operation::{OperationLike, WalkOrder, WalkResult};
use melior::ir::r#type::RankedTensorType;
use melior::ir::{BlockLike, Module, RegionLike, ShapedTypeLike, TypeLike, ValueLike};

use crate::{Error, Mlir};

/// What the schedule is: its own source, part of a library's digest
/// ([`crate::native::library_digest`]), so code built by another schedule is not loaded.
pub const SOURCE: &str = include_str!("schedule.rs");

/// Lanes of one vector register of `f32` (AVX-512; two registers each on AVX2).
const LANES: u64 = 16;

/// Vector registers of C the tile may hold (of 32 on AVX-512: the rest hold B's vector and
/// the broadcasts).
const ACCUMULATORS: u64 = 16;

/// The work (floating-point operations) from which a contraction's outer tiles run in
/// parallel, when the pipeline has threads: about 0.2 ms on one core of this machine. With
/// 2^20, resnet_small's 1.2 MFLOP convolutions ran 0.70 ms on one thread and 0.89 ms on
/// two (the fork and join cost more than they save).
const PARALLEL_FLOPS: u64 = 1 << 23;

/// The operands' bytes from which a contraction's tiles run in parallel, when the pipeline
/// has threads, whatever its work ([`Contraction::threaded`]).
const PARALLEL_BYTES: u64 = 2 << 20;

/// Rows of C per tile when the contraction has more than [`ACCUMULATORS`] rows: 8 rows of
/// 2 vectors, 8 broadcasts and 2 loads per 16 FMAs.
const ROWS: u64 = 8;

/// Rows of C per tile, at most, when the contraction has at most [`ACCUMULATORS`] rows
/// (GPT-2's 16 tokens, a convolution's 16 channels): 4 rows of 4 vectors, 4 broadcasts and
/// 4 loads of one contiguous run of B per 16 FMAs. All 16 rows of one vector each took 17
/// loads per 16 FMAs and read B 64 bytes at a time: GPT-2 small took 90 ms with them, 69
/// with these, and a 16-channel 3×3 convolution of 80×80 pixels 0.76 ms against 0.62.
const FEW_ROWS: u64 = 4;

/// A contraction's loops by role (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contraction {
    /// The loops' extents.
    pub extents: Vec<u64>,
    /// The vector loop.
    pub n: usize,
    /// The row loop, if C has one that only the other operand has.
    pub m: Option<usize>,
    /// The reduction loop.
    pub k: usize,
    /// Whether `k`, not `n`, is the innermost loop of both operands (`C = A·Bᵀ`): each
    /// element of C is then a dot product, vectorized along `k` (see the module doc).
    pub dot: bool,
    /// Whether C starts as a `linalg.fill` (tessera's contractions start from zeros) and A
    /// and B come from no op `transform.structured.fuse` would pull into the tile loops
    /// ([`untileable`]): the schedule then fills each block of C in registers instead
    /// (see [`piece`]).
    pub filled: bool,
}

/// The tile of one piece of a contraction: its extents, and `nt` and `mt`, each the whole
/// extent or a divisor of it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Tiles {
    extents: Vec<u64>,
    nt: u64,
    mt: u64,
}

/// The result expressions of an affine map's text (`affine_map<(d0, d1) -> (d0 + d1, d1)>`:
/// `["d0 + d1", "d1"]`).
fn map_results(map: &str) -> Option<Vec<&str>> {
    let results = map.split_once("->")?.1.trim();
    let results = results.strip_suffix('>')?.trim();
    let inner = results.strip_prefix('(')?.strip_suffix(')')?;
    if inner.trim().is_empty() {
        return Some(Vec::new());
    }
    Some(inner.split(',').map(str::trim).collect())
}

/// The dimensions of an affine map's results if each is a plain `dN`
/// (`affine_map<(d0, d1, d2) -> (d0, d2)>`), `None` otherwise.
fn map_dims(map: &str) -> Option<Vec<usize>> {
    map_results(map)?
        .iter()
        .map(|r| r.strip_prefix('d')?.parse().ok())
        .collect()
}

/// A static `f32` tensor's shape.
fn f32_shape(t: melior::ir::Type<'_>) -> Option<Vec<u64>> {
    let ranked = RankedTensorType::try_from(t).ok()?;
    if !ranked.element().is_f32() {
        return None;
    }
    static_shape(t)
}

fn op_name<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> String {
    op.name().as_string_ref().as_str().unwrap_or("").to_string()
}

/// Whether a generic's body is `yield(addf(c, mulf(a, b)))` on its block arguments `a, b, c`.
fn multiply_accumulate<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<()> {
    let block = op.region(0).ok()?.first_block()?;
    if block.argument_count() != 3 {
        return None;
    }
    let arg = |i: usize| block.argument(i).ok().map(|a| a.to_raw().ptr);
    let (a, b, c) = (arg(0)?, arg(1)?, arg(2)?);
    let mul = block.first_operation()?;
    let add = mul.next_in_block()?;
    let ret = add.next_in_block()?;
    if op_name(&mul) != "arith.mulf"
        || op_name(&add) != "arith.addf"
        || op_name(&ret) != "linalg.yield"
        || ret.next_in_block().is_some()
    {
        return None;
    }
    let operands = |o: &melior::ir::OperationRef<'_, '_>| -> Option<Vec<_>> {
        (0..o.operand_count())
            .map(|i| o.operand(i).ok().map(|v| v.to_raw().ptr))
            .collect()
    };
    let mut m = operands(&mul)?;
    m.sort();
    let mut ab = vec![a, b];
    ab.sort();
    let product = mul.result(0).ok()?.to_raw().ptr;
    let sum = add.result(0).ok()?.to_raw().ptr;
    let s = operands(&add)?;
    let adds = s == [c, product] || s == [product, c];
    (m == ab && adds && operands(&ret)? == [sum]).then_some(())
}

/// A multiply-accumulate `linalg.generic` of two inputs and one output: its indexing maps
/// as MLIR prints them and which of its loops are reductions. What [`contraction`] starts
/// from.
fn multiply_accumulate_generic<'c: 'a, 'a>(
    op: &impl OperationLike<'c, 'a>,
) -> Option<(Vec<String>, Vec<bool>)> {
    if op_name(op) != "linalg.generic" || op.operand_count() != 3 || op.result_count() != 1 {
        return None;
    }
    multiply_accumulate(op)?;
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let maps: Vec<String> = (0..maps.len())
        .map(|i| maps.element(i).ok().map(|m| m.to_string()))
        .collect::<Option<_>>()?;
    let reduction = op
        .attribute("iterator_types")
        .ok()?
        .to_string()
        .split(',')
        .map(|t| t.contains("reduction"))
        .collect();
    (maps.len() == 3).then_some((maps, reduction))
}

/// The width of the panels a weight `B` (`[K, N]`) of a product with `m` rows is packed
/// into at compile time (see `lower`'s packed weights): the lanes of the tile the schedule
/// gives that product's `n` ([`rows_and_lanes`], as [`Contraction::tile`]), at most `N`
/// rounded up to whole vectors.
pub fn panel_width(m: u64, n: u64) -> u64 {
    rows_and_lanes(m.max(1))
        .1
        .min(n.div_ceil(LANES).max(1) * LANES)
}

/// The rows of C's tile for `mx` rows along `m` (up to [`FEW_ROWS`] where there are at
/// most [`ACCUMULATORS`], else [`ROWS`]) and its lanes along `n`: as many whole vectors as
/// the accumulators allow, at most four.
fn rows_and_lanes(mx: u64) -> (u64, u64) {
    let mt = if mx <= ACCUMULATORS {
        mx.min(FEW_ROWS)
    } else {
        ROWS
    };
    // A power of two: a vector of 3 registers (48 lanes) is not one LLVM keeps in registers
    // (see `Contraction::splits`).
    let vectors = (ACCUMULATORS / mt).clamp(1, 4);
    let vectors = 1 << vectors.ilog2();
    (mt, vectors * LANES)
}

/// The op whose result `v` is, if it is one (not a block argument).
fn producer<'c, 'a>(v: melior::ir::Value<'c, 'a>) -> Option<melior::ir::OperationRef<'c, 'a>> {
    melior::ir::operation::OperationResult::try_from(v)
        .ok()
        .map(|r| r.owner())
}

/// Whether a map's results are distinct loops (a projected permutation, not `(d0, d0)`).
fn distinct(map: &[usize]) -> bool {
    let mut d = map.to_vec();
    d.sort_unstable();
    d.dedup();
    d.len() == map.len()
}

/// Whether an operand comes from no op that `transform.structured.fuse` would tile into a
/// contraction's loops (a `linalg` op or a `tensor.pad`, through slices): a block argument,
/// a constant or a reshape. `fuse` fuses every producer it reaches, and one of those would
/// be computed again in every tile.
fn untileable(v: melior::ir::Value<'_, '_>) -> bool {
    let mut v = v;
    loop {
        let Some(op) = producer(v) else {
            return true;
        };
        let name = op_name(&op);
        if name == "tensor.extract_slice" {
            match op.operand(0) {
                Ok(source) => v = source,
                Err(_) => return false,
            }
            continue;
        }
        return !(name.starts_with("linalg.") || name == "tensor.pad");
    }
}

/// The contraction a `linalg.generic` computes, if it is one the schedule tiles (see the
/// module doc).
pub fn contraction<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Contraction> {
    let (maps, reduction) = multiply_accumulate_generic(op)?;
    let maps: Vec<Vec<usize>> = maps.iter().map(|m| map_dims(m)).collect::<Option<_>>()?;
    let rank = reduction.len();
    let mut extents = vec![0u64; rank];
    let mut seen = vec![false; rank];
    for (i, map) in maps.iter().enumerate() {
        let shape = f32_shape(op.operand(i).ok()?.r#type())?;
        if shape.len() != map.len() {
            return None;
        }
        for (&d, &e) in map.iter().zip(&shape) {
            if d >= rank || (seen[d] && extents[d] != e) {
                return None;
            }
            (extents[d], seen[d]) = (e, true);
        }
    }
    let [a, b, c] = [&maps[0], &maps[1], &maps[2]];
    // Every operand a projected permutation: a repeated loop (an einsum's diagonal,
    // `iij,jk->ik`) is not vectorized.
    if !distinct(a) || !distinct(b) {
        return None;
    }
    let mut ks = (0..rank).filter(|&d| reduction[d]);
    let k = ks.next()?;
    if ks.next().is_some()
        || !seen.iter().all(|&s| s)
        || extents.contains(&0)
        || c.contains(&k)
        || !a.contains(&k)
        || !b.contains(&k)
    {
        return None;
    }
    if !distinct(c) || c.len() != rank - 1 {
        return None;
    }
    let n = *c.last()?;
    let (vector, other) = if b.contains(&n) { (b, a) } else { (a, b) };
    if other.contains(&n) {
        return None;
    }
    // `n` innermost in its operand; else `k` innermost in both, and long enough to fill
    // a vector.
    let dot = if vector.last() == Some(&n) {
        false
    } else if vector.last() == Some(&k) && other.last() == Some(&k) && extents[k] >= LANES {
        true
    } else {
        return None;
    };
    let m = (c.len() >= 2)
        .then(|| c[c.len() - 2])
        .filter(|d| other.contains(d) && !vector.contains(d));
    let filled = producer(op.operand(2).ok()?).is_some_and(|f| op_name(&f) == "linalg.fill")
        && (0..2).all(|i| op.operand(i).is_ok_and(untileable));
    Some(Contraction {
        extents,
        n,
        m,
        k,
        dot,
        filled,
    })
}

impl Contraction {
    /// The tile of C for `n` and `m` extents `nx` and `mx`, as `(nt, mt)`.
    ///
    /// Vectors along `n`: `mt` rows ([`FEW_ROWS`] at most up to [`ACCUMULATORS`], else [`ROWS`]) by
    /// `nt` lanes (whole vectors, as many as the accumulators allow, at most four; all of
    /// `n` where it is narrower). Dot products: two rows by eight columns (one row by
    /// sixteen), each element a vector of [`LANES`] partial sums along `k`; measured on
    /// `16×768 · (3072×768)ᵀ`, 2×8 ran 1.65 ms, 4×4 2.25, 8×2 1.91, 16×1 2.79.
    fn tile(&self, nx: u64, mx: u64) -> (u64, u64) {
        if self.dot {
            let mt = mx.min(2);
            return ((ACCUMULATORS / mt).min(nx), mt);
        }
        let (mt, lanes) = rows_and_lanes(mx);
        (lanes.min(nx), mt)
    }

    /// Whether the contraction's tiles run on threads where the pipeline has them: at
    /// least [`PARALLEL_FLOPS`] of work or [`PARALLEL_BYTES`] of operands (a matrix-vector
    /// product reads its matrix at the speed of memory, faster from two cores). Every
    /// piece of such a contraction with two tiles or more does, the pieces that the tile
    /// does not divide too: they follow the main piece while the threads are up, and
    /// their narrow vectors make them slower than their work says (MobileNetV2's 49
    /// pixels: 32, 16 and 1).
    fn threaded(&self) -> bool {
        let flops = self.extents.iter().fold(2u64, |f, &e| f.saturating_mul(e));
        let batch: u64 = (0..self.extents.len())
            .filter(|&d| d != self.n && d != self.k && Some(d) != self.m)
            .map(|d| self.extents[d])
            .fold(1, u64::saturating_mul);
        let rows = self.m.map_or(1, |m| self.extents[m]);
        let bytes = (rows.saturating_add(self.extents[self.n]))
            .saturating_mul(self.extents[self.k])
            .saturating_mul(batch)
            .saturating_mul(4);
        flops >= PARALLEL_FLOPS || bytes >= PARALLEL_BYTES
    }

    /// [`Contraction::tile`] of the whole contraction, which every piece keeps.
    fn tile_of_whole(&self) -> (u64, u64) {
        self.tile(self.extents[self.n], self.m.map_or(1, |m| self.extents[m]))
    }

    /// The splits that leave every piece's extents divisible by its tile, in order, each
    /// as `(loop, tile)`: a piece splits where its extent stops being a multiple of the
    /// tile, if anywhere. `n` by its tile, then by 32 lanes where the tile is wider, then by
    /// [`LANES`], so that every piece's vectors are a power of two of registers or less
    /// than one (a rest of 17 lanes would be a vector of 17, which LLVM spills; a piece of
    /// 48 lanes, 3 registers, was carried through the `k` loop as shuffles and spills: a
    /// `4×4608 · 4608×49` product took 0.59 ms against 0.042 ms for `…×64`); `m` by its
    /// tile, and for dot products `k` by [`LANES`]. `split` hands back both pieces, in
    /// order.
    fn splits(&self) -> Vec<(usize, u64)> {
        let (nt, mt) = self.tile_of_whole();
        let mut out = vec![(self.n, nt)];
        if !self.dot && nt > 2 * LANES {
            out.push((self.n, 2 * LANES));
        }
        out.push((self.n, LANES));
        if let Some(m) = self.m {
            out.push((m, mt));
        }
        if self.dot {
            out.push((self.k, LANES));
        }
        out
    }
}

/// Writes the transform ops that tile and vectorize one piece, `%{h}` a handle to it; adds
/// the handle of its `k` loop, if it has one, to `loops`.
fn piece(
    s: &mut String,
    c: &Contraction,
    t: &Tiles,
    h: &str,
    parallel: bool,
    loops: &mut Vec<String>,
) {
    let rank = t.extents.len();
    // The fill of C fused into the tile loops (`transform.structured.fuse`, which tiles the
    // contraction and its producers together): each tile's block of C starts as a vector of
    // zeros in registers instead of being read back from a buffer filled beforehand (a
    // memset of all of C). Only for a contraction that was not split: a piece's C is a
    // slice of the fill, which does not fuse. Not for dot products, whose partial sums have
    // a fill of their own.
    let fused = c.filled && !c.dot && t.extents == c.extents;
    let tile_op = if fused {
        "transform.structured.fuse"
    } else {
        "transform.structured.tile_using_for"
    };
    // The loop the fused fill ends up in, whose fills are then vectorized.
    let mut fill_loop = None;
    if fused {
        let _ = writeln!(
            s,
            "    %{h}_fill = transform.get_producer_of_operand %{h}[2] \
             : (!transform.any_op) -> !transform.any_op"
        );
    }
    // The outer tiles (batch and n), the row tiles, the k steps.
    let mut outer = vec![0u64; rank];
    let mut rows = vec![0u64; rank];
    let mut k = vec![0u64; rank];
    for d in 0..rank {
        if d == c.n {
            outer[d] = if t.nt < t.extents[d] { t.nt } else { 0 };
        } else if Some(d) == c.m {
            rows[d] = if t.mt < t.extents[d] { t.mt } else { 0 };
        } else if d == c.k {
            k[d] = u64::from(t.extents[d] > 1 && !c.dot);
        } else if t.extents[d] > 1 {
            outer[d] = 1;
        }
    }
    let any = |n: usize| vec!["!transform.any_op"; n].join(", ");
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let count = |v: &[u64]| v.iter().filter(|&&x| x > 0).count();
    let tiles: u64 = (0..rank)
        .filter(|&d| outer[d] > 0)
        .map(|d| t.extents[d].div_ceil(outer[d]))
        .fold(1u64, u64::saturating_mul);
    let row_tiles: u64 = (0..rank)
        .filter(|&d| rows[d] > 0)
        .map(|d| t.extents[d].div_ceil(rows[d]))
        .fold(1u64, u64::saturating_mul);
    let mut op = h.to_string();
    // Loops over the batch, then n tiles, then row tiles, then k: a panel of B is reused
    // from the cache by the row tiles that follow each other.
    let mut order: Vec<usize> = (0..rank)
        .filter(|&d| d != c.n && Some(d) != c.m && d != c.k)
        .collect();
    order.push(c.n);
    order.extend(c.m);
    order.push(c.k);
    // Where k is among the loops (it moves last when the loops are interchanged).
    let mut kd = c.k;
    if parallel && tiles.saturating_mul(row_tiles) >= 2 && c.threaded() {
        // The outer and row tiles in parallel (`scf.forall`, to OpenMP, whose static
        // schedule gives each thread a run of tiles in the order above: its own panels of
        // B and blocks of C). The forall's dimensions are the op's loops in their order,
        // so the op's loops are put in that order first. With the row tiles inside each
        // thread's outer tile instead, a few outer tiles split unevenly (SqueezeNet's
        // classifier: five tiles of 32 pixels, three on one thread and two on the other).
        let mut shared: Vec<u64> = (0..rank).map(|d| outer[d].max(rows[d])).collect();
        if order.iter().enumerate().any(|(i, &d)| i != d) {
            let perm: Vec<String> = order.iter().map(usize::to_string).collect();
            let _ = writeln!(
                s,
                "    %{h}_i = transform.structured.interchange %{h} iterator_interchange = [{}] \
                 : (!transform.any_op) -> !transform.any_op",
                perm.join(", ")
            );
            shared = order.iter().map(|&d| shared[d]).collect();
            k = order.iter().map(|&d| k[d]).collect();
            kd = rank - 1;
            op = format!("{h}_i");
        }
        forall(s, h, &op, &shared);
        op = format!("{h}_p");
        if fused {
            let _ = writeln!(
                s,
                "    %{h}_ff, %{h}_fn = transform.structured.fuse_into_containing_op \
                 %{h}_fill into %{h}_forall : (!transform.any_op, !transform.any_op) -> ({})",
                any(2)
            );
            fill_loop = Some(format!("{h}_forall"));
        }
    } else {
        let mut sizes = outer.clone();
        for d in 0..rank {
            sizes[d] = sizes[d].max(rows[d]);
        }
        let tiled = count(&sizes);
        if tiled > 0 {
            let names: Vec<String> = (0..tiled).map(|i| format!("%{h}_l{i}")).collect();
            let interchange = order.iter().map(usize::to_string).collect::<Vec<_>>();
            // (`fuse` spells its interchange without `=`.)
            let eq = if fused { "" } else { " =" };
            let _ = writeln!(
                s,
                "    %{h}_t, {} = {tile_op} %{h} tile_sizes [{}] \
                 interchange{eq} [{}] : (!transform.any_op) -> ({})",
                names.join(", "),
                list(&sizes),
                interchange.join(", "),
                any(tiled + 1)
            );
            if fused {
                fill_loop = Some(format!("{h}_l0"));
            }
            op = format!("{h}_t");
        }
    }
    if let Some(l) = fill_loop {
        let _ = writeln!(
            s,
            "    %{h}_fills = transform.structured.match ops{{[\"linalg.fill\"]}} in %{l} \
             : (!transform.any_op) -> !transform.any_op\n    \
             transform.structured.vectorize %{h}_fills : !transform.any_op"
        );
    }
    if c.dot {
        // Partial sums of LANES products per element, carried in registers along k, then
        // added up (`tile_reduction_using_for`); a piece of at most LANES is one vector.
        if t.extents[c.k] > LANES {
            loops.push(partial_results(s, &op, rank, kd));
            return;
        }
    } else if count(&k) > 0 {
        let _ = writeln!(
            s,
            "    %{op}_k, %{op}_kl = transform.structured.tile_using_for %{op} tile_sizes [{}] \
             : (!transform.any_op) -> ({})",
            list(&k),
            any(2)
        );
        loops.push(format!("%{op}_kl"));
        op = format!("{op}_k");
    }
    let _ = writeln!(
        s,
        "    transform.structured.vectorize %{op} : !transform.any_op"
    );
}

/// Writes `%{h}_p, %{h}_forall = transform.structured.tile_using_forall %{target}` with
/// `sizes`: the tiled op and its `scf.forall`.
fn forall(s: &mut String, h: &str, target: &str, sizes: &[u64]) {
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let _ = writeln!(
        s,
        "    %{h}_p, %{h}_forall = transform.structured.tile_using_forall %{target} \
         tile_sizes [{}] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)",
        list.join(", ")
    );
}

/// Writes `%{h}_t, %{h}_l0, .. = transform.structured.tile_using_for %{h}` with `sizes`
/// (one loop per nonzero size) and, if given, the loops' `order` (its `interchange`), and
/// returns the tiled op's handle, `{h}_t`; `h` itself where no size is nonzero.
fn tile_for(s: &mut String, h: &str, sizes: &[u64], order: Option<&[usize]>) -> String {
    let tiled = sizes.iter().filter(|&&t| t > 0).count();
    if tiled == 0 {
        return h.to_string();
    }
    let names: Vec<String> = (0..tiled).map(|i| format!("%{h}_l{i}")).collect();
    let list: Vec<String> = sizes.iter().map(u64::to_string).collect();
    let interchange = order.map_or(String::new(), |o| {
        let o: Vec<String> = o.iter().map(usize::to_string).collect();
        format!(" interchange = [{}]", o.join(", "))
    });
    let any = vec!["!transform.any_op"; tiled + 1].join(", ");
    let _ = writeln!(
        s,
        "    %{h}_t, {} = transform.structured.tile_using_for %{h} tile_sizes [{}]{interchange} \
         : (!transform.any_op) -> ({any})",
        names.join(", "),
        list.join(", ")
    );
    format!("{h}_t")
}

/// Writes the ops that fold loop `dim` (of `rank`) of `%{op}` into [`LANES`] partial
/// results carried in one vector, [`LANES`] elements a step, then into one
/// (`transform.structured.tile_reduction_using_for`), each part vectorized; returns the
/// handle of the loop of steps, `%{op}_kl`.
fn partial_results(s: &mut String, op: &str, rank: usize, dim: usize) -> String {
    let mut lanes = vec![0u64; rank];
    lanes[dim] = LANES;
    let lanes: Vec<String> = lanes.iter().map(u64::to_string).collect();
    let _ = writeln!(
        s,
        "    %{op}_fill, %{op}_part, %{op}_merge, %{op}_kl = \
         transform.structured.tile_reduction_using_for %{op} by tile_sizes = [{}] \
         : (!transform.any_op) -> (!transform.any_op, !transform.any_op, \
         !transform.any_op, !transform.any_op)",
        lanes.join(", ")
    );
    for part in ["part", "merge", "fill"] {
        let _ = writeln!(
            s,
            "    transform.structured.vectorize %{op}_{part} : !transform.any_op"
        );
    }
    format!("%{op}_kl")
}

/// Splits `%{h}` along `dim` after `main`, writes its two pieces' handles `%{h}_0`, `%{h}_1`.
fn split(s: &mut String, h: &str, dim: usize, main: u64) {
    let _ = writeln!(
        s,
        "    %{h}_s = transform.structured.split %{h} after {main} {{dimension = {dim}}} \
         : !transform.any_op\n    %{h}_0, %{h}_1 = transform.split_handle %{h}_s \
         : (!transform.any_op) -> (!transform.any_op, !transform.any_op)"
    );
}

/// Splits `%{h}` (of `extents`, the contraction's loops) by `splits`, each a loop of the
/// contraction and the tile its extent is split to a multiple of ([`Contraction::splits`];
/// `dim` maps a loop of the contraction to the op's dimension): its pieces in order, each a
/// handle, its extents and how many splits made it (the slices between it and what its
/// operands read).
fn pieces<'a>(
    s: &mut String,
    h: &str,
    extents: &[u64],
    splits: impl IntoIterator<Item = &'a (usize, u64)>,
    dim: impl Fn(usize) -> usize,
) -> Vec<(String, Vec<u64>, usize)> {
    let mut handles = vec![(h.to_string(), extents.to_vec(), 0)];
    for &(d, tile) in splits {
        let mut next = Vec::new();
        for (ph, ext, depth) in handles {
            let main = ext[d] - ext[d] % tile;
            if main == 0 || main == ext[d] {
                next.push((ph, ext, depth));
                continue;
            }
            split(s, &ph, dim(d), main);
            let (mut first, mut rest) = (ext.clone(), ext);
            first[d] = main;
            rest[d] -= main;
            next.push((format!("{ph}_0"), first, depth + 1));
            next.push((format!("{ph}_1"), rest, depth + 1));
        }
        handles = next;
    }
    handles
}

/// Writes the ops that make each slice of a slice in function `%{f}` one slice of the
/// first's source.
fn merge_slices(s: &mut String, f: &str) {
    let _ = writeln!(
        s,
        "    transform.apply_patterns to %{f} {{\n      \
         transform.apply_patterns.tensor.merge_consecutive_insert_extract_slice\n    \
         }} : !transform.any_op"
    );
}

/// The tiling of a piece of an epilogue's last generic, in the generic's loops (C's
/// dimensions): its tile sizes, the order of its tile loops, and whether they are an
/// `scf.forall` (threads) rather than `scf.for` loops.
struct Tiling {
    sizes: Vec<u64>,
    order: Vec<usize>,
    forall: bool,
}

/// Writes the ops that tile piece `%{h}` of an epilogue's last generic (`depth` slices
/// between it and the generic before it) as `tiling` says, and fuse the epilogue's other
/// generics, the contraction and its fill into its loops
/// (`transform.structured.fuse_into_containing_op`), each found from the piece through the
/// operands that read them. Returns the handles of the tiled generic and of the fused tiles,
/// in the order: the epilogue's generics from the last but one, the contraction, the fill.
/// Pieces are taken last first: fusing a producer into a piece makes a tile of it there and
/// leaves it whole for the pieces before, which come earlier in the function. `f` is the
/// function's handle.
fn tile_and_fuse(
    s: &mut String,
    ep: &Epilogue,
    h: &str,
    depth: usize,
    f: &str,
    tiling: &Tiling,
) -> (String, Vec<String>) {
    let any = |n: usize| vec!["!transform.any_op"; n].join(", ");
    let producer = |s: &mut String, to: &str, of: &str, operand: usize| {
        let _ = writeln!(
            s,
            "    %{to} = transform.get_producer_of_operand %{of}[{operand}] \
             : (!transform.any_op) -> !transform.any_op"
        );
    };
    // The ops behind the piece, in the order they are fused.
    let last = ep.ops.len() - 1;
    let (mut of, mut operand) = (h.to_string(), ep.ops[last].1);
    for level in 0..depth {
        let to = format!("{h}_s{level}");
        producer(s, &to, &of, operand);
        (of, operand) = (to, 0);
    }
    let mut fuse = Vec::new();
    for j in (0..last).rev() {
        let to = format!("{h}_e{j}");
        producer(s, &to, &of, operand);
        (of, operand) = (to.clone(), ep.ops[j].1);
        fuse.push(to);
    }
    let contraction = format!("{h}_c");
    producer(s, &contraction, &of, operand);
    let fill = format!("{h}_fill");
    producer(s, &fill, &contraction, 2);
    fuse.push(contraction);
    fuse.push(fill);
    let rank = tiling.sizes.len();
    let identity = tiling.order.iter().enumerate().all(|(i, &r)| i == r);
    // The tiled generic, the loop the others are fused into, and the interchange to undo.
    let (mut root, within, undo);
    if tiling.forall {
        // The forall's dimensions are the generic's loops in their order: the loops are put
        // in the tiling's order first, and back after.
        let mut op = h.to_string();
        let mut sizes = tiling.sizes.clone();
        if identity {
            undo = None;
        } else {
            let perm: Vec<String> = tiling.order.iter().map(usize::to_string).collect();
            let _ = writeln!(
                s,
                "    %{h}_i = transform.structured.interchange %{h} iterator_interchange = [{}] \
                 : (!transform.any_op) -> !transform.any_op",
                perm.join(", ")
            );
            sizes = tiling.order.iter().map(|&r| sizes[r]).collect();
            let mut inverse = vec![0usize; rank];
            for (i, &r) in tiling.order.iter().enumerate() {
                inverse[r] = i;
            }
            undo = Some(inverse);
            op = format!("{h}_i");
        }
        forall(s, h, &op, &sizes);
        root = format!("{h}_p");
        within = format!("{h}_forall");
    } else {
        undo = None;
        let tiled = tiling.sizes.iter().filter(|&&x| x > 0).count();
        root = tile_for(s, h, &tiling.sizes, Some(&tiling.order));
        within = format!("{h}_l{}", tiled.saturating_sub(1));
    }
    // The piece's slices of the generic before it, slices of the split's slices, made
    // slices of that generic itself, which is then used inside the loop.
    merge_slices(s, f);
    let mut within = within;
    let mut tiled = Vec::new();
    for (j, p) in fuse.iter().enumerate() {
        let _ = writeln!(
            s,
            "    %{h}_t{j}, %{h}_in{j} = transform.structured.fuse_into_containing_op \
             %{p} into %{within} : (!transform.any_op, !transform.any_op) -> ({})",
            any(2)
        );
        tiled.push(format!("{h}_t{j}"));
        within = format!("{h}_in{j}");
    }
    if let Some(inverse) = undo {
        let perm: Vec<String> = inverse.iter().map(usize::to_string).collect();
        let _ = writeln!(
            s,
            "    %{h}_u = transform.structured.interchange %{root} iterator_interchange = [{}] \
             : (!transform.any_op) -> !transform.any_op",
            perm.join(", ")
        );
        root = format!("{h}_u");
    }
    (root, tiled)
}

/// The tile sizes of an epilogue's last generic for contraction tile `t` (batch loops by 1,
/// `n` by `nt`, `m` by `mt`, a size of 0 where the tile is the whole extent), and the
/// number of outer (batch and `n`) and row tiles.
fn epilogue_sizes(c: &Contraction, ep: &Epilogue, t: &Tiles) -> (Vec<u64>, u64, u64) {
    let mut sizes = vec![0u64; ep.out.len()];
    let (mut tiles, mut row_tiles) = (1u64, 1u64);
    for (r, &d) in ep.out.iter().enumerate() {
        let e = t.extents[d];
        if d == c.n {
            sizes[r] = if t.nt < e { t.nt } else { 0 };
            tiles = tiles.saturating_mul(e.div_ceil(t.nt.max(1)));
        } else if Some(d) == c.m {
            sizes[r] = if t.mt < e { t.mt } else { 0 };
            row_tiles = row_tiles.saturating_mul(e.div_ceil(t.mt.max(1)));
        } else {
            sizes[r] = u64::from(e > 1);
            tiles = tiles.saturating_mul(e);
        }
    }
    (sizes, tiles, row_tiles)
}

/// Writes the transform ops for one piece `%{h}` of an epilogue's last generic (`depth`
/// splits from the whole): the generic tiled like the contraction's C (`t`: batch loops by
/// 1, `n` by `nt`, `m` by `mt`, in that order; on threads as [`piece`] decides), the
/// epilogue's other generics, the contraction and its fill fused into its tiles
/// ([`tile_and_fuse`]). Each tile then fills its block of C with zeros, runs `k` one step
/// at a time (its loop added to `loops`), and computes the epilogue from the block, every
/// op vectorized.
#[allow(clippy::too_many_arguments)]
fn fused_piece(
    s: &mut String,
    c: &Contraction,
    ep: &Epilogue,
    t: &Tiles,
    h: &str,
    depth: usize,
    f: &str,
    parallel: bool,
    loops: &mut Vec<String>,
) {
    let (mut sizes, tiles, row_tiles) = epilogue_sizes(c, ep, t);
    let pos = |d: usize| ep.out.iter().position(|&o| o == d);
    let mut order: Vec<usize> = (0..ep.out.len())
        .filter(|&r| ep.out[r] != c.n && Some(ep.out[r]) != c.m)
        .collect();
    order.extend(pos(c.n));
    order.extend(c.m.and_then(pos));
    let forall = parallel && tiles.saturating_mul(row_tiles) >= 2 && c.threaded();
    // One tile: a loop of one step all the same, to fuse into.
    if !forall
        && sizes.iter().all(|&x| x == 0)
        && let Some(r) = pos(c.n)
    {
        sizes[r] = t.extents[c.n];
    }
    let tiling = Tiling {
        sizes,
        order,
        forall,
    };
    let (root, tiled) = tile_and_fuse(s, ep, h, depth, f, &tiling);
    // The contraction's tile, k one step at a time.
    let n = tiled.len();
    let mut product = tiled[n - 2].clone();
    if t.extents[c.k] > 1 {
        let mut k = vec![0u64; t.extents.len()];
        k[c.k] = 1;
        let list: Vec<String> = k.iter().map(u64::to_string).collect();
        let _ = writeln!(
            s,
            "    %{product}_k, %{product}_kl = transform.structured.tile_using_for %{product} \
             tile_sizes [{}] : (!transform.any_op) -> (!transform.any_op, !transform.any_op)",
            list.join(", ")
        );
        loops.push(format!("%{product}_kl"));
        product = format!("{product}_k");
    }
    let mut vectorize = vec![tiled[n - 1].clone(), product];
    vectorize.extend(tiled[..n - 2].iter().rev().cloned());
    vectorize.push(root);
    for v in vectorize {
        let _ = writeln!(
            s,
            "    transform.structured.vectorize %{v} : !transform.any_op"
        );
    }
}

/// Whether a product with an epilogue runs its row tiles outermost ([`rows_first`]): when B
/// (`K × N`) fits half of a core's L2 cache and A does not fit it, as in a late
/// convolution of a network (ResNet-18's 512 × 4608 by 4608 × 49: A 9.4 MB, B 0.9 MB; the
/// model 38.6 -> 37.0 ms). With A in the cache it measured no better (MobileNetV2's
/// 1280 × 320 by 320 × 49 slower).
fn rows_outermost(c: &Contraction) -> bool {
    let Some(m) = c.m else {
        return false;
    };
    let (nx, mx, kx) = (c.extents[c.n], c.extents[m], c.extents[c.k]);
    let b = kx.saturating_mul(nx).saturating_mul(4);
    let a = kx.saturating_mul(mx).saturating_mul(4);
    !c.dot && b <= B_CACHED && a > A_STREAMED && mx > c.tile_of_whole().1
}

/// The most bytes of B that [`rows_first`] reads from the cache for every row tile.
const B_CACHED: u64 = 1 << 20;

/// The bytes of A from which [`rows_first`] reads it once rather than once per tile of `n`:
/// a core's L2 cache.
const A_STREAMED: u64 = 2 << 20;

/// Writes the transform ops for a product with an epilogue whose rows go outermost
/// ([`rows_outermost`]): the epilogue's last generic `%{root}` split along `m` only and
/// tiled by rows (batch loops by 1, `m` by the tile's rows, all of `n`; on threads as
/// [`piece`] decides), everything fused into those tiles ([`tile_and_fuse`]), and each row
/// tile's last generic then split along `n` and scheduled as [`fused_piece`] within it. A
/// row tile reads its rows of A once, B from the cache; with `n` outermost, A was read
/// again for every `n` tile and every piece of `n` (49 pixels: 32, 16 and 1).
#[allow(clippy::too_many_arguments)]
fn rows_first(
    s: &mut String,
    c: &Contraction,
    ep: &Epilogue,
    root: &str,
    f: &str,
    parallel: bool,
    loops: &mut Vec<String>,
) {
    let (nt, mt) = c.tile_of_whole();
    let dim = |d: usize| ep.out.iter().position(|&o| o == d).unwrap_or(d);
    let m = c.m.unwrap_or(c.n);
    let splits = c.splits();
    let rows = pieces(
        s,
        root,
        &c.extents,
        splits.iter().filter(|&&(d, _)| d == m),
        dim,
    );
    if rows.iter().any(|(_, _, depth)| *depth > 1) {
        merge_slices(s, f);
    }
    for (rh, extents, depth) in rows.into_iter().rev() {
        let rows_mt = mt.min(extents[m]);
        let t = Tiles {
            extents: extents.clone(),
            nt: extents[c.n],
            mt: rows_mt,
        };
        let (mut sizes, tiles, row_tiles) = epilogue_sizes(c, ep, &t);
        let forall = parallel && tiles.saturating_mul(row_tiles) >= 2 && c.threaded();
        if !forall && sizes.iter().all(|&x| x == 0) {
            sizes[dim(m)] = rows_mt;
        }
        let tiling = Tiling {
            sizes,
            order: (0..ep.out.len()).collect(),
            forall,
        };
        let (tile, _) = tile_and_fuse(s, ep, &rh, depth.min(1), f, &tiling);
        // Within each row tile: n's pieces, each tiled and fused again.
        let mut inner = extents;
        for (d, e) in inner.iter_mut().enumerate() {
            if d == m {
                *e = rows_mt;
            } else if d != c.n && d != c.k {
                *e = 1;
            }
        }
        let cols = pieces(
            s,
            &tile,
            &inner,
            splits.iter().filter(|&&(d, _)| d == c.n),
            dim,
        );
        if cols.iter().any(|(_, _, depth)| *depth > 1) {
            merge_slices(s, f);
        }
        for (ph, extents, depth) in cols.into_iter().rev() {
            let t = Tiles {
                nt: nt.min(extents[c.n]),
                mt: rows_mt,
                extents,
            };
            fused_piece(s, c, ep, &t, &ph, depth.min(1), f, false, loops);
        }
    }
}

/// The named sequence that tiles and vectorizes contractions.
pub const CONTRACTIONS: &str = "tessera_contractions";

/// The ops the contraction sequence looks at.
const GENERIC: &[&str] = &["linalg.generic"];

/// The ops of one function with one of the names a sequence looks at (`linalg.generic`, or
/// also `linalg.copy` and `linalg.fill`), in walk order, and what the schedule makes of the
/// ones it picked (by their place among them).
struct Generics<T> {
    function: String,
    count: usize,
    picked: Vec<(usize, T)>,
}

/// The address of an MLIR value or op, which tells it apart from others while the module
/// lives.
fn ptr<T>(p: *const T) -> usize {
    p as usize
}

/// An elementwise generic that reads a value (see [`Uses`]).
struct Reader {
    /// Its place among its function's ops of the names the sequence looks at.
    place: usize,
    /// Which of its operands reads the value.
    operand: usize,
    /// Whether that operand's map is the identity.
    identity: bool,
    /// Its result, and the result's shape if it is a static `f32` tensor.
    result: usize,
    shape: Option<Vec<u64>>,
}

/// What the schedule knows of a function besides the op it looks at: how many uses each
/// value has, and which elementwise generics read it ([`epilogue`]).
#[derive(Default)]
struct Uses {
    count: BTreeMap<usize, usize>,
    readers: BTreeMap<usize, Vec<Reader>>,
}

/// Whether an op of a generic's body vectorizes as it is: `arith` and `math` ops and the
/// yield (no index, no `tensor.extract`, no region).
fn vectorizable_body<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> bool {
    let Some(block) = op.region(0).ok().and_then(|r| r.first_block()) else {
        return false;
    };
    let mut o = block.first_operation();
    while let Some(x) = o {
        let name = op_name(&x);
        if !(name.starts_with("arith.") || name.starts_with("math.") || name == "linalg.yield")
            || x.region_count() > 0
        {
            return false;
        }
        o = x.next_in_block();
    }
    true
}

/// The reads of an elementwise generic (all loops parallel, one result with the identity
/// map, `f32` operands, a body that vectorizes), for [`Uses::readers`].
fn elementwise_reads<'c: 'a, 'a>(
    op: &impl OperationLike<'c, 'a>,
    place: usize,
) -> Option<Vec<(usize, Reader)>> {
    if op_name(op) != "linalg.generic" || op.result_count() != 1 {
        return None;
    }
    let its = op.attribute("iterator_types").ok()?.to_string();
    if its.contains("reduction") || !vectorizable_body(op) {
        return None;
    }
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let inputs = op.operand_count().checked_sub(1)?;
    let out = map_dims(&maps.element(inputs).ok()?.to_string())?;
    if out != (0..out.len()).collect::<Vec<_>>() {
        return None;
    }
    // Every operand `f32` (a tensor of `i1` would be read as packed bits by a vector).
    let f32s = (0..op.operand_count()).all(|i| {
        op.operand(i).is_ok_and(|v| {
            RankedTensorType::try_from(v.r#type()).is_ok_and(|t| t.element().is_f32())
        })
    });
    if !f32s {
        return None;
    }
    let result = op.result(0).ok()?;
    let shape = f32_shape(result.r#type());
    let result = ptr(result.to_raw().ptr);
    (0..inputs)
        .map(|i| {
            let map = maps.element(i).ok().and_then(|m| map_dims(&m.to_string()));
            Some((
                ptr(op.operand(i).ok()?.to_raw().ptr),
                Reader {
                    place,
                    operand: i,
                    identity: map.is_some_and(|m| m == out),
                    result,
                    shape: shape.clone(),
                },
            ))
        })
        .collect()
}

/// The [`Uses`] of function `func`, whose ops named in `ops` are placed in walk order.
fn function_uses(func: &melior::ir::OperationRef<'_, '_>, ops: &[&str]) -> Uses {
    let mut uses = Uses::default();
    let mut place = 0;
    // Reshapes, as (operand, result): one whose result nothing reads does not count as
    // a use (the lowering leaves a convolution's expanded product unread where the ops
    // after it read the product itself, see `Body::elementwise`).
    let mut reshapes = Vec::new();
    func.walk(WalkOrder::PreOrder, |op| {
        for i in 0..op.operand_count() {
            if let Ok(v) = op.operand(i) {
                *uses.count.entry(ptr(v.to_raw().ptr)).or_default() += 1;
            }
        }
        let name = op_name(&op);
        if (name == "tensor.expand_shape" || name == "tensor.collapse_shape")
            && let (Ok(v), Ok(r)) = (op.operand(0), op.result(0))
        {
            reshapes.push((ptr(v.to_raw().ptr), ptr(r.to_raw().ptr)));
        }
        if ops.contains(&name.as_str()) {
            for (v, r) in elementwise_reads(&op, place).unwrap_or_default() {
                uses.readers.entry(v).or_default().push(r);
            }
            place += 1;
        }
        WalkResult::Advance
    });
    for (v, r) in reshapes {
        if !uses.count.contains_key(&r)
            && let Some(n) = uses.count.get_mut(&v)
        {
            *n -= 1;
        }
    }
    uses
}

/// Each function of the module with an op named in `ops` that `pick` takes (see
/// [`Generics`]); with `wanted`, `pick` also gets the function's [`Uses`] (empty without).
fn generics<T>(
    module: &Module<'_>,
    ops: &[&str],
    wanted: bool,
    pick: impl Fn(&melior::ir::OperationRef<'_, '_>, &Uses) -> Option<T>,
) -> Vec<Generics<T>> {
    let mut out = Vec::new();
    let body = module.body();
    let mut f = body.first_operation();
    while let Some(func) = f {
        f = func.next_in_block();
        let Some(function) = crate::context::func_name(&func) else {
            continue;
        };
        let uses = if wanted {
            function_uses(&func, ops)
        } else {
            Uses::default()
        };
        let (mut count, mut picked) = (0, Vec::new());
        func.walk(WalkOrder::PreOrder, |op| {
            if ops.contains(&op_name(&op).as_str()) {
                if let Some(t) = pick(&op, &uses) {
                    picked.push((count, t));
                }
                count += 1;
            }
            WalkResult::Advance
        });
        if !picked.is_empty() {
            out.push(Generics {
                function,
                count,
                picked,
            });
        }
    }
    out
}

/// The elementwise generics that take a contraction's result in turn, each the only user
/// of the one before (of the contraction, for the first), with the identity map on it and
/// a result of the contraction's shape: a convolution's bias and activation, a product's
/// GELU. Their tiles are computed in the contraction's ([`fused_piece`]), from its block
/// of C in registers, so C is never written to memory and read back. Only for a
/// contraction that starts from a `linalg.fill` (its tiles start from zeros) and is not a
/// dot product.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epilogue {
    /// The contraction's loops of C's dimensions, in order (C's map): the generics' loops.
    out: Vec<usize>,
    /// Each generic's place among its function's generics and which of its operands reads
    /// the one before.
    ops: Vec<(usize, usize)>,
}

/// The [`Epilogue`] of contraction `op` (`c`), if it has one.
fn epilogue<'c: 'a, 'a>(
    op: &impl OperationLike<'c, 'a>,
    c: &Contraction,
    uses: &Uses,
) -> Option<Epilogue> {
    let fill = producer(op.operand(2).ok()?);
    if c.dot || fill.is_none_or(|f| op_name(&f) != "linalg.fill") {
        return None;
    }
    let (maps, _) = multiply_accumulate_generic(op)?;
    let out = map_dims(&maps[2])?;
    let result = op.result(0).ok()?;
    let shape = f32_shape(result.r#type())?;
    let mut v = ptr(result.to_raw().ptr);
    let mut ops = Vec::new();
    while uses.count.get(&v) == Some(&1) {
        let Some(r) = uses.readers.get(&v).and_then(|r| r.first()) else {
            break;
        };
        if !r.identity || r.shape.as_ref() != Some(&shape) {
            break;
        }
        ops.push((r.place, r.operand));
        v = r.result;
    }
    (!ops.is_empty()).then_some(Epilogue { out, ops })
}

/// Writes the ops that find function `g.function`'s generics (by name and place: the
/// script needs no mark on the module, so `mlir-opt` runs it on the module as written) and
/// returns a handle to each picked one, `%{prefix}{i}_{place}`, with what was picked. The
/// handles of the function are `%{prefix}{i}_f`.
fn find<'t, T>(
    s: &mut String,
    prefix: &str,
    ops: &[&str],
    i: usize,
    g: &'t Generics<T>,
) -> Vec<(String, &'t T)> {
    let any = |n: usize| vec!["!transform.any_op"; n].join(", ");
    let h = format!("{prefix}{i}");
    let names = ops
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let _ = writeln!(
        s,
        "    %{h}_f = transform.structured.match ops{{[\"func.func\"]}} \
         attributes{{sym_name = \"{}\"}} in %root : (!transform.any_op) -> !transform.any_op\n    \
         %{h}_all = transform.structured.match ops{{[{names}]}} in %{h}_f \
         : (!transform.any_op) -> !transform.any_op",
        g.function
    );
    let names: Vec<String> = (0..g.count).map(|p| format!("%{h}_{p}")).collect();
    let _ = writeln!(
        s,
        "    {} = transform.split_handle %{h}_all : (!transform.any_op) -> ({})",
        names.join(", "),
        any(g.count)
    );
    g.picked
        .iter()
        .map(|(p, t)| (format!("{h}_{p}"), t))
        .collect()
}

fn sequence(name: &str, body: &str) -> String {
    format!(
        "  transform.named_sequence @{name}(%root: !transform.any_op {{transform.readonly}}) \
         {{\n{body}    transform.yield\n  }}\n"
    )
}

/// What the contraction sequence makes of a generic it picked.
enum Pick {
    /// Tiled and vectorized as a contraction (see the module doc), with its epilogue.
    Contraction(Contraction, Option<Epilogue>),
    /// A depthwise convolution or a max pooling ([`depthwise`], [`max_taps`]) of these
    /// extents and inputs, vectorized along its rows ([`stencil`]).
    Stencil(Vec<u64>, usize),
    /// A reduction along rows ([`row_reduction`]) of these extents and inputs, vectorized
    /// with partial results ([`reduce_rows`]).
    Rows(Vec<u64>, usize),
    /// A deinterleaving copy ([`deinterleave`]) of these extents and phase loop, vectorized
    /// along its phases and columns together ([`phases`]).
    Phases(Vec<u64>, usize),
    /// An im2col copy of stride 1 ([`patches`]) of these extents, vectorized along its
    /// rows ([`patch_rows`]).
    Patches(Vec<u64>),
}

/// The ops that tile and vectorize the picked contractions (see the module doc), depthwise
/// convolutions and max poolings.
fn contractions(gs: &[Generics<Pick>], parallel: bool) -> String {
    let mut s = String::new();
    if gs.is_empty() {
        return s;
    }
    let mut loops = Vec::new();
    let mut funcs = Vec::new();
    // Functions with deinterleaving copies, whose transposes become shuffles.
    let mut shuffled = Vec::new();
    // Whether an epilogue was fused (its tiles then read C's block from the registers once
    // the block is hoisted out of the `k` loop, which canonicalization after the hoisting
    // sees).
    let mut fused = false;
    for (i, g) in gs.iter().enumerate() {
        // Only functions with contractions get the clean-up patterns. A depthwise
        // convolution's kernel has none (a kernel is one op and the elementwise ops around
        // it), and its vectorized rows need no clean-up.
        if g.picked
            .iter()
            .any(|(_, p)| matches!(p, Pick::Contraction(..) | Pick::Rows(..)))
        {
            funcs.push(format!("%c{i}_f"));
        }
        for (h, pick) in find(&mut s, "c", GENERIC, i, g) {
            let (c, ep) = match pick {
                Pick::Contraction(c, ep) => (c, ep),
                Pick::Stencil(extents, inputs) => {
                    stencil(&mut s, &h, extents, *inputs, parallel);
                    continue;
                }
                Pick::Rows(extents, inputs) => {
                    reduce_rows(&mut s, &h, extents, *inputs, parallel);
                    continue;
                }
                Pick::Phases(extents, phase) => {
                    phases(&mut s, &h, extents, *phase, parallel);
                    shuffled.push(format!("%c{i}_f"));
                    continue;
                }
                Pick::Patches(extents) => {
                    patch_rows(&mut s, &h, extents, parallel);
                    continue;
                }
            };
            let (nt, mt) = c.tile_of_whole();
            if let Some(ep) = ep {
                // The last generic of the epilogue is split and tiled, the rest and the
                // contraction fused into its tiles; last piece first (see `fused_piece`).
                let root = format!("c{i}_{}", ep.ops[ep.ops.len() - 1].0);
                let dim = |d: usize| ep.out.iter().position(|&o| o == d).unwrap_or(d);
                let f = format!("c{i}_f");
                if rows_outermost(c) {
                    rows_first(&mut s, c, ep, &root, &f, parallel, &mut loops);
                    fused = true;
                    continue;
                }
                let split = pieces(&mut s, &root, &c.extents, &c.splits(), dim);
                // Slices of slices (a piece of a piece) made one slice each: every piece
                // then reads one slice of the generic before it, whatever the slices the
                // pieces after it merge.
                if split.iter().any(|(_, _, depth)| *depth > 1) {
                    merge_slices(&mut s, &f);
                }
                for (ph, extents, depth) in split.into_iter().rev() {
                    let depth = depth.min(1);
                    let nt = nt.min(extents[c.n]);
                    let mt = mt.min(c.m.map_or(1, |m| extents[m]));
                    let t = Tiles { extents, nt, mt };
                    fused_piece(&mut s, c, ep, &t, &ph, depth, &f, parallel, &mut loops);
                }
                fused = true;
                continue;
            }
            for (ph, extents, _) in pieces(&mut s, &h, &c.extents, &c.splits(), |d| d) {
                // A main piece is a multiple of the tile; a rest is narrower and whole.
                let nt = nt.min(extents[c.n]);
                let mt = mt.min(c.m.map_or(1, |m| extents[m]));
                piece(
                    &mut s,
                    c,
                    &Tiles { extents, nt, mt },
                    &ph,
                    parallel,
                    &mut loops,
                );
            }
        }
    }
    for f in shuffled {
        // A transposing read as a read and a transpose, the transpose as one shuffle of
        // the flattened vector (LLVM: two-source lane permutations).
        let _ = writeln!(
            s,
            "    transform.apply_patterns to {f} {{\n      \
             transform.apply_patterns.vector.transfer_permutation_patterns\n      \
             transform.apply_patterns.vector.lower_transpose lowering_strategy = \"shuffle_1d\"\n    \
             }} : !transform.any_op"
        );
    }
    if funcs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "    %funcs = transform.merge_handles {} {{deduplicate}} : !transform.any_op",
        funcs.join(", ")
    );
    s.push_str(
        "    transform.apply_patterns to %funcs {\n      \
         transform.apply_patterns.vector.reduction_to_contract\n      \
         transform.apply_patterns.vector.transfer_permutation_patterns\n    \
         } : !transform.any_op\n    transform.apply_patterns to %funcs {\n      \
         transform.apply_patterns.canonicalization\n    } : !transform.any_op\n",
    );
    for l in &loops {
        let _ = writeln!(
            s,
            "    transform.loop.hoist_loop_invariant_subsets {l} : !transform.any_op"
        );
    }
    if fused {
        s.push_str(
            "    transform.apply_patterns to %funcs {\n      \
             transform.apply_patterns.canonicalization\n    } : !transform.any_op\n",
        );
    }
    // Transfers unrolled into rows (`full_unroll`), as the CPU pipeline's
    // `convert-vector-to-scf` does: no temporary on the stack in every tile.
    s.push_str(
        "    transform.apply_patterns to %funcs {\n      \
         transform.apply_patterns.vector.lower_contraction lowering_strategy = \"outerproduct\"\n      \
         transform.apply_patterns.vector.lower_outerproduct\n      \
         transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = \"innerreduction\"\n      \
         transform.apply_patterns.vector.transfer_to_scf full_unroll = true\n    } : !transform.any_op\n",
    );
    s
}

/// The schedule file: the named sequences in a transform library, what
/// `transform-preload-library` loads for `mlir-opt` ([`crate::pipelines::with_schedule`]):
/// the contractions' ([`apply`]) and, for a pipeline that fuses elementwise ops between
/// them, the threads' ([`apply_threads`]).
pub fn library(contractions: &str, threads: Option<&str>) -> String {
    let threads = threads.map(|t| sequence(THREADS, t)).unwrap_or_default();
    format!(
        "module attributes {{transform.with_named_sequence}} {{\n{}{threads}}}\n",
        sequence(CONTRACTIONS, contractions)
    )
}

/// The named sequence that runs the outer loops of the ops the contraction sequence left
/// on threads.
pub const THREADS: &str = "tessera_threads";

/// The ops the threads sequence looks at.
const SPREAD: &[&str] = &["linalg.generic", "linalg.copy", "linalg.fill"];

/// The work (the product of the op's loop extents, times its inputs) from which an op the
/// contraction sequence left runs its outer loops on threads, in a function that has a
/// parallel loop already ([`LONE_ITERATIONS`] otherwise): a few tens of
/// microseconds of one core for a copy or an elementwise op, against a few microseconds
/// to start and join the threads.
const PARALLEL_ITERATIONS: u64 = 1 << 16;

/// The work from which an op runs its outer loops on threads in a function whose other ops
/// do not (no contraction large enough to run in parallel): its result is then read by one
/// core, which has to fetch what the other threads wrote from their caches. resnet_small's
/// first convolution (an im2col copy of 150k elements, a product of 2.4 MFLOP) took 0.48
/// ms on two threads against 0.42 on one with its copy on threads.
const LONE_ITERATIONS: u64 = 1 << 18;

/// The outer tiles a threaded op is cut into at least, if its outer loops have as many:
/// enough for the threads to share evenly.
const THREAD_TILES: u64 = 16;

/// A static tensor's shape, of any element type.
fn static_shape(t: melior::ir::Type<'_>) -> Option<Vec<u64>> {
    let t = RankedTensorType::try_from(t).ok()?;
    (0..t.rank())
        .map(|i| match t.dim_size(i).ok()? {
            melior::ir::r#type::DimSize::Static(s) => Some(s),
            melior::ir::r#type::DimSize::Dynamic => None,
        })
        .collect()
}

/// The tile sizes with which [`THREADS`] runs an op on threads (`tile_using_forall`), if
/// it does: a `linalg.generic`, `linalg.copy` or `linalg.fill` of one static tensor result,
/// not inside a loop the contraction sequence made parallel, with at least
/// [`PARALLEL_ITERATIONS`] of work ([`LONE_ITERATIONS`] in a function with no parallel
/// loop). Its outer parallel loops that the result has, in loop order, are tiled by 1 until
/// there are [`THREAD_TILES`] tiles; the innermost loop and the result's innermost
/// dimension of more than one element (a contiguous run, and the vector loop) stay whole.
pub fn spread<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Spread> {
    let name = op_name(op);
    if op.result_count() != 1 {
        return None;
    }
    let out = static_shape(op.result(0).ok()?.r#type())?;
    // Each loop's parallel or not, the result's map, and the operands' maps (where each
    // result is a plain loop), which give the extents of the loops.
    let (parallel, out_map, maps): (Vec<bool>, Vec<usize>, Vec<Option<Vec<usize>>>) =
        match name.as_str() {
            "linalg.generic" => {
                let its = op.attribute("iterator_types").ok()?.to_string();
                let parallel = its.split(',').map(|t| t.contains("parallel")).collect();
                let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
                let maps: Vec<Option<Vec<usize>>> = (0..maps.len())
                    .map(|i| maps.element(i).ok().and_then(|m| map_dims(&m.to_string())))
                    .collect();
                (parallel, maps.last()?.clone()?, maps)
            }
            "linalg.copy" | "linalg.fill" => {
                let identity: Vec<usize> = (0..out.len()).collect();
                (
                    vec![true; out.len()],
                    identity.clone(),
                    vec![Some(identity)],
                )
            }
            _ => return None,
        };
    let rank = parallel.len();
    if out_map.len() != out.len() || out_map.iter().any(|&d| d >= rank) {
        return None;
    }
    // Not inside a parallel loop.
    let mut parent = op.parent_operation();
    let mut function = None;
    while let Some(p) = parent {
        let name = op_name(&p);
        if name == "scf.forall" {
            return None;
        }
        if name == "func.func" {
            function = Some(p);
        }
        parent = p.parent_operation();
    }
    // The work: every loop's extent, from the operands whose map gives it (a pool's
    // window gives its reduction loops).
    let mut extents = vec![1u64; rank];
    let operands = op.operand_count();
    for (i, map) in maps.iter().enumerate() {
        // A fill's map is its result's; its operand is the scalar.
        let v = if maps.len() == 1 {
            op.result(0).ok().map(|r| r.into())
        } else {
            (i < operands).then(|| op.operand(i).ok()).flatten()
        };
        let (Some(map), Some(shape)) = (
            map,
            v.and_then(|v: melior::ir::Value| static_shape(v.r#type())),
        ) else {
            continue;
        };
        for (&d, &e) in map.iter().zip(&shape) {
            if d < rank {
                extents[d] = extents[d].max(e);
            }
        }
    }
    // Each input read once per iteration (a pool's taps are inputs of their own).
    let inputs = maps.len().saturating_sub(1).max(1) as u64;
    let work = extents.iter().fold(inputs, |n, &e| n.saturating_mul(e));
    let rows = short_rows(op, &parallel, &out_map, &maps, &out);
    let lone = Spread {
        forall: Vec::new(),
        rows: rows.clone(),
    };
    if work < PARALLEL_ITERATIONS {
        return lone.rows.is_some().then_some(lone);
    }
    // Below LONE_ITERATIONS, only in a function that has a parallel loop already (a
    // contraction's). The walk is only taken for ops between the two thresholds.
    if work < LONE_ITERATIONS {
        let mut threaded = false;
        if let Some(f) = function {
            f.walk(WalkOrder::PreOrder, |o| {
                if op_name(&o) == "scf.forall" {
                    threaded = true;
                    return WalkResult::Interrupt;
                }
                WalkResult::Advance
            });
        }
        if !threaded {
            return lone.rows.is_some().then_some(lone);
        }
    }
    // The result's innermost dimension of more than one element (a copy's views end in a
    // unit axis) stays whole, and so does every dimension after it.
    let row = out.iter().rposition(|&e| e > 1)?;
    let mut sizes = vec![0u64; rank];
    let mut tiles = 1u64;
    for d in 0..rank.saturating_sub(1) {
        if tiles >= THREAD_TILES {
            break;
        }
        let Some(pos) = out_map.iter().position(|&o| o == d) else {
            continue;
        };
        if !parallel[d] || pos >= row || out[pos] < 2 {
            continue;
        }
        sizes[d] = 1;
        tiles = tiles.saturating_mul(out[pos]);
    }
    if tiles < 2 {
        return lone.rows.is_some().then_some(lone);
    }
    Some(Spread {
        forall: sizes,
        rows,
    })
}

/// What the threads sequence does with an op ([`spread`]).
pub struct Spread {
    /// The tile sizes of its `scf.forall` (none where empty).
    pub forall: Vec<u64>,
    /// Where its rows are short, the sizes its loops (in its tile) are tiled by before the
    /// rest is vectorized ([`short_rows`]).
    pub rows: Option<Vec<u64>>,
}

/// Rows of up to this many elements are vectorized by the threads sequence, not left to
/// LLVM. (LLVM vectorized rows of 16 across rows, with gathers and scatters: BERT tiny's
/// softmax and attention transposes.)
const SHORT_ROW: u64 = 16;

/// The most elements of a short-row op's vector.
const SHORT_ROW_VECTOR: u64 = 256;

/// For an elementwise generic whose rows are short (at most [`SHORT_ROW`] elements, as a
/// depthwise convolution's epilogue on a 14 × 14 image), which LLVM unrolls into scalar
/// code or vectorizes across rows: the tile sizes that leave its innermost loops whole (at most
/// [`SHORT_ROW_VECTOR`] elements) and run the others one at a time, to vectorize the tile
/// whole. `None` for any other op: all loops parallel, the result's map the identity, every
/// map plain loops, `f32` operands and a body of `arith` and `math` ops only.
fn short_rows<'c: 'a, 'a>(
    op: &impl OperationLike<'c, 'a>,
    parallel: &[bool],
    out_map: &[usize],
    maps: &[Option<Vec<usize>>],
    out: &[u64],
) -> Option<Vec<u64>> {
    let rank = out.len();
    let row = *out.last()?;
    if op_name(op) != "linalg.generic"
        || !(2..=SHORT_ROW).contains(&row)
        || parallel.len() != rank
        || !parallel.iter().all(|&p| p)
        || out_map != (0..rank).collect::<Vec<_>>()
        || maps.iter().any(Option::is_none)
        || !vectorizable_body(op)
    {
        return None;
    }
    // (A zero extent does not vectorize.)
    for i in 0..op.operand_count() {
        if f32_shape(op.operand(i).ok()?.r#type())?.contains(&0) {
            return None;
        }
    }
    // The innermost loops whose elements fit one vector stay whole.
    let mut sizes = vec![0u64; rank];
    let mut elements = 1u64;
    for d in (0..rank).rev() {
        elements = elements.saturating_mul(out[d]);
        if elements > SHORT_ROW_VECTOR {
            for (e, size) in out[..=d].iter().zip(&mut sizes) {
                *size = u64::from(*e > 1);
            }
            break;
        }
    }
    Some(sizes)
}

/// The ops of the threads sequence: each op [`spread`] picks tiled by its sizes into an
/// `scf.forall` (with threads, `parallel`), which the CPU pipeline lowers to OpenMP, and
/// vectorized where its rows are short.
fn threads(gs: &[Generics<Spread>], parallel: bool) -> String {
    let mut s = String::new();
    for (i, g) in gs.iter().enumerate() {
        for (h, spread) in find(&mut s, "t", SPREAD, i, g) {
            let mut target = h.clone();
            if parallel && !spread.forall.is_empty() {
                forall(&mut s, &h, &h, &spread.forall);
                target = format!("{h}_p");
            }
            if let Some(rows) = &spread.rows {
                let t = tile_for(&mut s, &target, rows, None);
                let _ = writeln!(
                    s,
                    "    transform.structured.vectorize %{t} : !transform.any_op"
                );
            }
        }
    }
    s
}

/// The extents of a depthwise convolution's generic as the lowering writes it (`lower`'s
/// `depthwise`): all loops parallel, inputs in pairs (a tap's window of the input, read
/// like the result at stride 1, and the tap's weights, one per channel), then, in the flat
/// form, masks read along the row only; the body a chain of `acc + window * weight` from
/// the first product, a window selected by a mask's compare (`arith.cmpf`, `arith.select`,
/// constants) before its product where it has one; every operand a static `f32` tensor
/// with a map of plain loop dimensions. The schedule vectorizes it along the result's rows
/// (`stencil`).
pub fn depthwise<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Vec<u64>> {
    // Inputs in pairs, the first of each pair a window, then (the flat form's) masks: each
    // read along the row only.
    let inputs = op.operand_count().checked_sub(1)?;
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let rank = f32_shape(op.result(0).ok()?.r#type())?.len();
    let masks = (0..inputs)
        .rev()
        .take_while(|&i| {
            maps.element(i).ok().and_then(|m| map_dims(&m.to_string()))
                == Some(vec![rank.saturating_sub(1)])
        })
        .count();
    let pairs = inputs - masks;
    let out = windowed(op, |i, _| {
        pairs >= 2 && pairs % 2 == 0 && i < pairs && i % 2 == 0
    })?;
    // The body: a compare per mask, then per pair its window (selected by a mask, or as it
    // is) times its weight, summed from the first product; the yield of the last sum.
    let block = op.region(0).ok()?.first_block()?;
    let mut names = Vec::new();
    let mut next = block.first_operation();
    while let Some(o) = next {
        names.push(op_name(&o));
        next = o.next_in_block();
    }
    let (yield_op, body) = names.split_last()?;
    let mut products = 0;
    let mut ops = body.iter();
    while let Some(name) = ops.next() {
        match name.as_str() {
            "arith.constant" | "arith.cmpf" | "arith.select" => {}
            "arith.mulf" => {
                if products > 0 && ops.next().map(String::as_str) != Some("arith.addf") {
                    return None;
                }
                products += 1;
            }
            _ => return None,
        }
    }
    (yield_op == "linalg.yield" && products == pairs / 2).then_some(out)
}

/// The extents of a max pooling's generic as the lowering writes it (`lower`'s `pool`):
/// all loops parallel, every input a tap's window (read like the result, at stride 1),
/// the body a chain of `arith.maximumf` from the first window, each step taking the next.
/// Vectorized like a depthwise convolution (`stencil`).
pub fn max_taps<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Vec<u64>> {
    let out = windowed(op, |_, inputs| inputs >= 1)?;
    let inputs = op.operand_count() - 1;
    let block = op.region(0).ok()?.first_block()?;
    let arg = |i: usize| block.argument(i).ok().map(|a| a.to_raw().ptr);
    let mut acc = arg(0)?;
    let mut next = block.first_operation();
    for i in 1..inputs {
        let max = next?;
        let operands: Option<Vec<_>> = (0..max.operand_count())
            .map(|j| max.operand(j).ok().map(|v| v.to_raw().ptr))
            .collect();
        if op_name(&max) != "arith.maximumf" || operands? != [acc, arg(i)?] {
            return None;
        }
        acc = max.result(0).ok()?.to_raw().ptr;
        next = max.next_in_block();
    }
    let ret = next?;
    let yields = ret.operand(0).ok()?.to_raw().ptr == acc;
    (op_name(&ret) == "linalg.yield" && ret.next_in_block().is_none() && yields).then_some(out)
}

/// The result's shape of an all-parallel generic of static `f32` operands whose result
/// has the identity map, every input's map plain loop dimensions, and the inputs that
/// `window(input, inputs)` names read like the result: the same shape, the identity map,
/// rows at stride 1 ([`unit_rows`]). What [`depthwise`] and [`max_taps`] start from.
fn windowed<'c: 'a, 'a>(
    op: &impl OperationLike<'c, 'a>,
    window: impl Fn(usize, usize) -> bool,
) -> Option<Vec<u64>> {
    if op_name(op) != "linalg.generic" || op.result_count() != 1 {
        return None;
    }
    let inputs = op.operand_count().checked_sub(1)?;
    if !(0..inputs).any(|i| window(i, inputs)) {
        return None;
    }
    let its = op.attribute("iterator_types").ok()?.to_string();
    if its.contains("reduction") {
        return None;
    }
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let out = f32_shape(op.result(0).ok()?.r#type())?;
    let identity = map_dims(&maps.element(inputs).ok()?.to_string())?;
    // (A zero extent does not vectorize.)
    if identity != (0..out.len()).collect::<Vec<_>>() || out.is_empty() || out.contains(&0) {
        return None;
    }
    for i in 0..inputs {
        let shape = f32_shape(op.operand(i).ok()?.r#type())?;
        let map = map_dims(&maps.element(i).ok()?.to_string())?;
        if !distinct(&map)
            || (window(i, inputs)
                && (shape != out || map != identity || !unit_rows(op.operand(i).ok()?)))
        {
            return None;
        }
    }
    Some(out)
}

/// The extents and the phase loop of a deinterleaving copy as the lowering writes it
/// (`linalg.rs`'s `phases`: a window's columns at a stride of 2 or more made rows at stride
/// 1; `flat_phases`: a stride-2 depthwise convolution's input in four phases): an
/// all-parallel generic of one static `f32` input and result, the result with the
/// identity map, the input read by a permutation of the loops that ends with the result's
/// last loop (its columns) and the phase loop (`[.., s, w]` from `[.., w, s]`; `[.., 2, 2,
/// h, w]` from `[.., h, 2, w, 2]`), the body the input's element.
pub fn deinterleave<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<(Vec<u64>, usize)> {
    if op_name(op) != "linalg.generic" || op.operand_count() != 2 || op.result_count() != 1 {
        return None;
    }
    if op
        .attribute("iterator_types")
        .ok()?
        .to_string()
        .contains("reduction")
    {
        return None;
    }
    let out = f32_shape(op.result(0).ok()?.r#type())?;
    let input = f32_shape(op.operand(0).ok()?.r#type())?;
    let rank = out.len();
    if rank < 2 || out.contains(&0) || input.len() != rank {
        return None;
    }
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let read = map_dims(&maps.element(0).ok()?.to_string())?;
    // The input read by a permutation of the loops whose last two are the result's row and
    // the phase, swapped.
    let phase = *read.last()?;
    let mut seen = vec![false; rank];
    for &d in &read {
        if d >= rank || std::mem::replace(&mut seen[d], true) {
            return None;
        }
    }
    if map_dims(&maps.element(1).ok()?.to_string())? != (0..rank).collect::<Vec<_>>()
        || read[rank - 2] != rank - 1
        || phase == rank - 1
        || read.iter().zip(&input).any(|(&d, &e)| out[d] != e)
    {
        return None;
    }
    yields_input(op)?.then_some((out, phase))
}

/// Whether a generic's body is the yield of its first input's element: a copy.
fn yields_input<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<bool> {
    let block = op.region(0).ok()?.first_block()?;
    let ret = block.first_operation()?;
    Some(
        op_name(&ret) == "linalg.yield"
            && ret.operand_count() == 1
            && ret.operand(0).ok()?.to_raw().ptr == block.argument(0).ok()?.to_raw().ptr,
    )
}

/// The extents of an im2col copy of stride 1 as the lowering writes it (`linalg.rs`'s
/// `im2col`: `cols[n, c, k..., o...] = x[n, c, o + k · dil]`): an all-parallel generic of
/// one static `f32` input and result, the result with the identity map and rows of at
/// most [`STENCIL_ROW`] elements, the body the input's element, the input read at
/// `d_last` or `d_last + d_j` along its last axis (a row of the result a contiguous run of
/// the input's row), `d_last` nowhere else, and some other loop along an affine sum (not
/// a plain permutation of the loops, which is a copy of another kind). LLVM vectorized
/// these across rows, with gathers and scatters: on an AMD EPYC (Zen 4), where those are
/// slow, resnet_small's 16-channel 3×3 convolutions of 16×16 pixels spent 72% of their
/// time in them.
pub fn patches<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Vec<u64>> {
    if op_name(op) != "linalg.generic" || op.operand_count() != 2 || op.result_count() != 1 {
        return None;
    }
    let its = op.attribute("iterator_types").ok()?.to_string();
    if its.contains("reduction") {
        return None;
    }
    let out = f32_shape(op.result(0).ok()?.r#type())?;
    f32_shape(op.operand(0).ok()?.r#type())?;
    let rank = out.len();
    let row = *out.last()?;
    // (Some loop past batch and channels that is not a unit: the tiles' loops hold each
    // row, see `patch_rows`.)
    if rank < 3 || out.contains(&0) || row > STENCIL_ROW || out[2..rank - 1].iter().all(|&e| e == 1)
    {
        return None;
    }
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    if map_dims(&maps.element(1).ok()?.to_string())? != (0..rank).collect::<Vec<_>>() {
        return None;
    }
    let read = maps.element(0).ok()?.to_string();
    if map_dims(&read).is_some() {
        return None;
    }
    let exprs = map_results(&read)?;
    let last = format!("d{}", rank - 1);
    let plain = |e: &str| {
        e.strip_prefix('d')
            .is_some_and(|n| n.parse::<usize>().is_ok())
    };
    let terms: Vec<&str> = exprs.last()?.split('+').map(str::trim).collect();
    let contiguous =
        terms.contains(&last.as_str()) && terms.len() <= 2 && terms.iter().all(|t| plain(t));
    let elsewhere = exprs[..exprs.len() - 1].iter().any(|e| {
        e.split(|c: char| !c.is_ascii_alphanumeric())
            .any(|t| t == last)
    });
    if !contiguous || elsewhere {
        return None;
    }
    // The input's own rows at stride 1 (not a strided view).
    if let Some(p) = producer(op.operand(0).ok()?)
        && op_name(&p) == "tensor.extract_slice"
        && !last_stride_one(&p)
    {
        return None;
    }
    yields_input(op)?.then_some(out)
}

/// Writes the transform ops that vectorize the im2col copy `%{h}` of `extents`
/// ([`patches`]) along its rows: the batch and channel loops an `scf.forall` (with threads
/// and at least [`PARALLEL_ITERATIONS`] of work), every loop but the row tiled by 1, the
/// unit loops then folded away (`fold_unit_extent_dims_via_slices`, inside the innermost
/// loop: the vectorizer takes only maps that are permutations, and the read's sum of two
/// loops is one loop once the other is a unit), and the row one vector, read and written
/// whole.
fn patch_rows(s: &mut String, h: &str, extents: &[u64], parallel: bool) {
    let rank = extents.len();
    let work = extents.iter().fold(1u64, |n, &e| n.saturating_mul(e));
    let mut inner = extents.to_vec();
    let h = lead_forall(s, h, 2, work, parallel, &mut inner);
    let mut sizes: Vec<u64> = inner.iter().map(|&e| u64::from(e > 1)).collect();
    sizes[rank - 1] = 0;
    // At least one loop: `patches` has a loop past the forall's that is not a unit.
    let loops = sizes.iter().filter(|&&t| t > 0).count();
    tile_for(s, &h, &sizes, None);
    let innermost = format!("{h}_l{}", loops.saturating_sub(1));
    let _ = writeln!(
        s,
        "    transform.apply_patterns to %{innermost} {{\n      \
         transform.apply_patterns.linalg.fold_unit_extent_dims_via_slices\n    \
         }} : !transform.any_op\n    \
         %{h}_row = transform.structured.match ops{{[\"linalg.generic\"]}} in %{innermost} \
         : (!transform.any_op) -> !transform.any_op\n    \
         transform.structured.vectorize %{h}_row : !transform.any_op"
    );
}

/// Columns of a deinterleaving copy per vector: one register of each phase (two, read as
/// 32 contiguous floats and shuffled into two of 16, at stride 2).
const PHASE_COLUMNS: u64 = LANES;

/// Writes the transform ops that vectorize the deinterleaving copy `%{h}` of `extents`
/// (`[.., w]` with its phase loop `phase`, [`deinterleave`]): every loop but the phase and
/// the columns tiled by 1 (with threads and at least [`PARALLEL_ITERATIONS`] of work, the
/// outer two as an `scf.forall`), the columns in tiles of [`PHASE_COLUMNS`] (the rest a
/// tile of its own), each tile one vector read of its `[columns, s]` block of the input,
/// transposed.
fn phases(s: &mut String, h: &str, extents: &[u64], phase: usize, parallel: bool) {
    let rank = extents.len();
    let lead = rank - 2;
    let columns = extents[rank - 1];
    let work = extents.iter().fold(1u64, |n, &e| n.saturating_mul(e));
    let mut inner = extents.to_vec();
    let h = lead_forall(s, h, lead.min(2), work, parallel, &mut inner);
    let h = h.as_str();
    let main = columns - columns % PHASE_COLUMNS;
    let mut pieces = vec![(h.to_string(), columns > PHASE_COLUMNS)];
    if columns > PHASE_COLUMNS && main != columns {
        split(s, h, rank - 1, main);
        pieces = vec![(format!("{h}_0"), true), (format!("{h}_1"), false)];
    }
    for (ph, tiled) in pieces {
        let mut sizes: Vec<u64> = inner.iter().map(|&e| u64::from(e > 1)).collect();
        sizes[phase] = 0;
        sizes[rank - 1] = if tiled { PHASE_COLUMNS } else { 0 };
        let op = tile_for(s, &ph, &sizes, None);
        let _ = writeln!(
            s,
            "    transform.structured.vectorize %{op} : !transform.any_op"
        );
    }
}

/// The extents of a reduction along rows: a `linalg.generic` of static `f32` operands and
/// one result whose innermost loop, a multiple of [`LANES`] long, is its only reduction,
/// the result that of the other loops in order (`(d0, d1, d2) -> (d0, d1)`), each input's
/// map loops in increasing order (a row of every input that has the innermost loop is
/// contiguous; one without it is read once per row), and whose body folds each element
/// into the result by one `arith.addf`, `arith.mulf`, `arith.maximumf`, `arith.maxnumf` or
/// `arith.minimumf` with the result's argument (a sum, a sum of squares, a maximum).
/// Softmax, layer norm and `Reduce*` over the last axis lower to these; the schedule keeps
/// [`LANES`] partial results per row in a vector ([`reduce_rows`]), which LLVM did not:
/// without reassociation, it folded every element in turn.
pub fn row_reduction<'c: 'a, 'a>(op: &impl OperationLike<'c, 'a>) -> Option<Vec<u64>> {
    if op_name(op) != "linalg.generic" || op.result_count() != 1 {
        return None;
    }
    let inputs = op.operand_count().checked_sub(1)?;
    let its = op.attribute("iterator_types").ok()?.to_string();
    let reduction: Vec<bool> = its.split(',').map(|t| t.contains("reduction")).collect();
    let rank = reduction.len();
    if rank == 0 || !reduction[rank - 1] || reduction[..rank - 1].iter().any(|&r| r) {
        return None;
    }
    let maps = ArrayAttribute::try_from(op.attribute("indexing_maps").ok()?).ok()?;
    let out_map = map_dims(&maps.element(inputs).ok()?.to_string())?;
    if out_map != (0..rank - 1).collect::<Vec<_>>() {
        return None;
    }
    let mut extents = f32_shape(op.result(0).ok()?.r#type())?;
    let mut row = None;
    for i in 0..inputs {
        let shape = f32_shape(op.operand(i).ok()?.r#type())?;
        let map = map_dims(&maps.element(i).ok()?.to_string())?;
        if shape.len() != map.len() || map.windows(2).any(|w| w[0] >= w[1]) {
            return None;
        }
        for (&d, &e) in map.iter().zip(&shape) {
            if d == rank - 1 {
                row = Some(e);
            } else if extents.get(d) != Some(&e) {
                return None;
            }
        }
    }
    let row = row?;
    if row % LANES != 0 || extents.contains(&0) {
        return None;
    }
    extents.push(row);
    // The body: its last op before the yield folds into the result's argument, which
    // nothing else reads.
    let block = op.region(0).ok()?.first_block()?;
    let acc = block.argument(inputs).ok()?;
    let ret = block.terminator()?;
    let fold = producer(ret.operand(0).ok()?)?;
    let combiners = [
        "arith.addf",
        "arith.mulf",
        "arith.maximumf",
        "arith.maxnumf",
        "arith.minimumf",
    ];
    if op_name(&ret) != "linalg.yield"
        || !combiners.contains(&op_name(&fold).as_str())
        || fold.next_in_block().map(|n| n.to_raw().ptr) != Some(ret.to_raw().ptr)
    {
        return None;
    }
    let acc_ptr = acc.to_raw().ptr;
    let reads = |o: &melior::ir::OperationRef<'_, '_>| {
        (0..o.operand_count())
            .filter(|&j| o.operand(j).is_ok_and(|v| v.to_raw().ptr == acc_ptr))
            .count()
    };
    let mut total = 0;
    let mut o = block.first_operation();
    while let Some(x) = o {
        total += reads(&x);
        o = x.next_in_block();
    }
    (reads(&fold) == 1 && total == 1).then_some(extents)
}

/// Writes the transform ops that vectorize the row reduction `%{h}` of `extents`
/// ([`row_reduction`]): every other loop tiled by 1 (with threads and at least
/// [`PARALLEL_ITERATIONS`] of work, as an `scf.forall`), each row folded into [`LANES`]
/// partial results, one vector, a step of [`LANES`] elements at a time
/// (`transform.structured.tile_reduction_using_for`), which are then folded into one. The
/// order of the sum is fixed by the schedule, the same on any number of threads.
fn reduce_rows(s: &mut String, h: &str, extents: &[u64], inputs: usize, parallel: bool) {
    let rank = extents.len();
    let rows: Vec<u64> = (0..rank)
        .map(|d| u64::from(d + 1 < rank && extents[d] > 1))
        .collect();
    let work = extents
        .iter()
        .fold(inputs as u64, |n, &e| n.saturating_mul(e));
    let op = if parallel && work >= PARALLEL_ITERATIONS && rows.contains(&1) {
        forall(s, h, h, &rows);
        format!("{h}_p")
    } else {
        tile_for(s, h, &rows, None)
    };
    partial_results(s, &op, rank, rank - 1);
}

/// Whether a window of a depthwise convolution or a max pooling reads rows of its input
/// contiguously: it is a `tensor.extract_slice` whose innermost stride is 1, or such a
/// slice of a deinterleaved input with its unit phase axis folded away (a row of a window
/// at stride 2 would be read element by element; such a convolution is left to LLVM).
fn unit_rows(window: melior::ir::Value<'_, '_>) -> bool {
    let Some(mut slice) = producer(window) else {
        return false;
    };
    // A window of a deinterleaved input (`linalg.rs`'s `windows`): its unit phase axis
    // folded into the row.
    if op_name(&slice) == "tensor.collapse_shape" {
        match slice.operand(0).ok().and_then(producer) {
            Some(p) => slice = p,
            None => return false,
        }
    }
    op_name(&slice) == "tensor.extract_slice" && last_stride_one(&slice)
}

/// Whether a `tensor.extract_slice` steps by 1 along its last axis.
fn last_stride_one<'c: 'a, 'a>(slice: &impl OperationLike<'c, 'a>) -> bool {
    slice.attribute("static_strides").is_ok_and(|a| {
        a.to_string()
            .trim_end_matches('>')
            .rsplit([',', ':'])
            .next()
            .is_some_and(|last| last.trim() == "1")
    })
}

/// Rows of a depthwise convolution longer than this are vectorized in pieces of
/// [`STENCIL_LANES`].
const STENCIL_ROW: u64 = 128;

/// The vector length along a long row of a depthwise convolution.
const STENCIL_LANES: u64 = 64;

/// Writes the transform ops that vectorize the depthwise convolution `%{h}` of `extents`
/// along its innermost loop (a row of the result, and of each window: contiguous at stride
/// 1): every other loop tiled by 1, the row one vector (a row longer than [`STENCIL_ROW`]
/// in pieces of [`STENCIL_LANES`], its rest a piece of its own). With threads and at least
/// [`PARALLEL_ITERATIONS`] of work, the loops outside the result's rows (batch and
/// channels) are an `scf.forall` first.
fn stencil(s: &mut String, h: &str, extents: &[u64], inputs: usize, parallel: bool) {
    let rank = extents.len();
    let row = extents[rank - 1];
    // The loops outside the rows: batch and channels (and the depth of a 3-D one), never
    // the row loop.
    let lead = rank.saturating_sub(2).max(2).min(rank.saturating_sub(1));
    let work = extents
        .iter()
        .fold(inputs as u64, |n, &e| n.saturating_mul(e));
    // The extents of each tile of the forall, if there is one.
    let mut inner = extents.to_vec();
    let h = lead_forall(s, h, lead, work, parallel, &mut inner);
    let h = h.as_str();
    // Each piece, and whether its row is tiled.
    let mut pieces = vec![(h.to_string(), row > STENCIL_ROW)];
    if row > STENCIL_ROW {
        let main = row - row % STENCIL_LANES;
        if main != row {
            split(s, h, rank - 1, main);
            pieces = vec![(format!("{h}_0"), true), (format!("{h}_1"), false)];
        }
    }
    for (ph, tiled_row) in pieces {
        let mut sizes: Vec<u64> = inner[..rank - 1]
            .iter()
            .map(|&e| u64::from(e > 1))
            .collect();
        sizes.push(if tiled_row { STENCIL_LANES } else { 0 });
        let op = tile_for(s, &ph, &sizes, None);
        let _ = writeln!(
            s,
            "    transform.structured.vectorize %{op} : !transform.any_op"
        );
    }
}

/// With threads and at least [`PARALLEL_ITERATIONS`] of `work`, the first `lead` loops of
/// `%{h}` (of extents `inner`) as an `scf.forall` of tiles of 1, where they make two tiles
/// or more: returns the handle of the op to tile further (`{h}_p`, or `h`) and leaves
/// `inner` the extents of each of its tiles.
fn lead_forall(
    s: &mut String,
    h: &str,
    lead: usize,
    work: u64,
    parallel: bool,
    inner: &mut [u64],
) -> String {
    let tiles = inner[..lead].iter().fold(1u64, |n, &e| n.saturating_mul(e));
    if !parallel || work < PARALLEL_ITERATIONS || tiles < 2 {
        return h.to_string();
    }
    let sizes: Vec<u64> = (0..inner.len())
        .map(|d| u64::from(d < lead && inner[d] > 1))
        .collect();
    forall(s, h, h, &sizes);
    inner[..lead].fill(1);
    format!("{h}_p")
}

/// Applies the named sequence `entry` of the transform library `text` to `module`.
fn run_sequence(
    mlir: &Mlir,
    module: &mut Module<'_>,
    text: &str,
    entry: &str,
    what: &str,
) -> Result<(), Error> {
    let schedule = mlir.parse(text, &format!("{what} (schedule)"))?;
    let body = schedule.body();
    let mut op = body.first_operation();
    while let Some(o) = op {
        if crate::context::sym_name(&o).as_deref() == Some(entry) {
            return mlir.apply_transform(module, &o, &schedule, what);
        }
        op = o.next_in_block();
    }
    Err(Error::Mlir {
        what: what.to_string(),
        stage: "schedule".into(),
        message: format!("the schedule has no named sequence @{entry}"),
    })
}

/// Applies the contraction sequence to a module of the CPU pipeline (see the module doc):
/// every contraction tiled and vectorized, every depthwise convolution of stride 1
/// vectorized. Returns the sequence's body, for [`library`]; it is empty where the module
/// has nothing to schedule.
pub fn apply(
    mlir: &Mlir,
    module: &mut Module<'_>,
    parallel: bool,
    what: &str,
) -> Result<String, Error> {
    let picks = generics(module, GENERIC, true, |op, uses| {
        let inputs = op.operand_count().saturating_sub(1);
        contraction(op)
            .map(|c| {
                let e = epilogue(op, &c, uses);
                Pick::Contraction(c, e)
            })
            .or_else(|| {
                let extents = depthwise(op).or_else(|| max_taps(op))?;
                Some(Pick::Stencil(extents, inputs))
            })
            .or_else(|| Some(Pick::Rows(row_reduction(op)?, inputs)))
            .or_else(|| deinterleave(op).map(|(e, p)| Pick::Phases(e, p)))
            .or_else(|| Some(Pick::Patches(patches(op)?)))
    });
    let mut contracts = contractions(&picks, parallel);
    contracts.push_str(&in_place(&in_place_functions(module)));
    if !contracts.is_empty() {
        run_sequence(mlir, module, &library(&contracts, None), CONTRACTIONS, what)?;
    }
    Ok(contracts)
}

/// Rounds of [`in_place`]: each makes one more level of the pieces that splitting a loop
/// left (the part tiles do not divide, its own rest) write into the destination.
const IN_PLACE_ROUNDS: usize = 4;

/// The functions of the module that return one of their arguments with their result
/// written into it (`tensor.insert_slice`, through reshapes): the lowering's kernels with a
/// destination (a concatenation's pieces), by name.
fn in_place_functions(module: &Module<'_>) -> Vec<String> {
    let mut names = Vec::new();
    let mut op = module.body().first_operation();
    while let Some(f) = op {
        op = f.next_in_block();
        let ret = (op_name(&f) == "func.func")
            .then(|| f.region(0).ok()?.first_block()?.terminator())
            .flatten();
        let Some(mut v) = ret.and_then(|r| r.operand(0).ok()) else {
            continue;
        };
        // Back from the returned value to an argument, through the destinations of
        // insertions and through reshapes.
        let mut inserted = false;
        let into_argument = loop {
            let Some(p) = producer(v) else {
                break inserted;
            };
            let through = match op_name(&p).as_str() {
                "tensor.insert_slice" => {
                    inserted = true;
                    1
                }
                "tensor.expand_shape" | "tensor.collapse_shape" => 0,
                _ => break false,
            };
            match p.operand(through) {
                Ok(next) => v = next,
                Err(_) => break false,
            }
        };
        if let (true, Some(name)) = (into_argument, crate::context::sym_name(&f)) {
            names.push(name);
        }
    }
    names
}

/// The end of the contraction sequence for the functions [`in_place_functions`] finds:
/// the `tensor.empty` that each op (each of its tiles' loops) writes and the function then
/// inserts into its argument becomes that block of the argument
/// (`transform.bufferization.eliminate_empty_tensors`), so nothing is copied.
/// `eliminate_empty_tensors` replaces an empty tensor only where the insertion reads it:
/// where a split loop's first part writes a slice of the empty tensor that the rest is
/// inserted into, that slice is made an empty tensor of its own first
/// (`fold_tensor_empty`), and the next round replaces it.
fn in_place(functions: &[String]) -> String {
    let mut s = String::new();
    if functions.is_empty() {
        return s;
    }
    let mut handles = Vec::new();
    for (i, name) in functions.iter().enumerate() {
        let _ = writeln!(
            s,
            "    %in_place{i} = transform.structured.match ops{{[\"func.func\"]}} \
             attributes{{sym_name = \"{name}\"}} in %root : (!transform.any_op) -> !transform.any_op"
        );
        handles.push(format!("%in_place{i}"));
    }
    let _ = writeln!(
        s,
        "    %in_place = transform.merge_handles {} {{deduplicate}} : !transform.any_op",
        handles.join(", ")
    );
    for _ in 0..IN_PLACE_ROUNDS {
        s.push_str(
            "    transform.apply_patterns to %in_place {\n      \
             transform.apply_patterns.tensor.fold_tensor_empty\n    \
             } : !transform.any_op\n    \
             transform.bufferization.eliminate_empty_tensors %in_place : !transform.any_op\n",
        );
    }
    s
}

/// Applies the threads sequence to a module the contraction sequence and the fusion of
/// elementwise ops have been through: every op [`spread`] picks runs its outer loops on
/// threads (with `parallel`), and one whose rows are short is vectorized
/// ([`short_rows`]). Returns the sequence's body, for [`library`] (empty where it picks
/// nothing).
pub fn apply_threads(
    mlir: &Mlir,
    module: &mut Module<'_>,
    parallel: bool,
    what: &str,
) -> Result<String, Error> {
    let body = threads(
        &generics(module, SPREAD, false, |op, _| {
            spread(op).filter(|s| parallel || s.rows.is_some())
        }),
        parallel,
    );
    if !body.is_empty() {
        run_sequence(mlir, module, &library("", Some(&body)), THREADS, what)?;
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_results_are_read_as_dimensions() {
        assert_eq!(
            map_dims("affine_map<(d0, d1, d2) -> (d0, d2)>"),
            Some(vec![0, 2])
        );
        assert_eq!(map_dims("affine_map<(d0) -> ()>"), Some(vec![]));
        assert_eq!(map_dims("affine_map<(d0, d1) -> (d0 + d1)>"), None);
        assert_eq!(map_dims("affine_map<(d0, d1) -> (0, d1)>"), None);
    }

    fn contraction(
        extents: Vec<u64>,
        n: usize,
        m: Option<usize>,
        k: usize,
        dot: bool,
    ) -> Contraction {
        Contraction {
            extents,
            n,
            m,
            k,
            dot,
            filled: false,
        }
    }

    #[test]
    fn tiles_keep_c_in_sixteen_registers() {
        let c = contraction(vec![16, 768, 3072], 2, Some(0), 1, false);
        // GPT-2's 16 rows: four rows of four vectors; one row: four vectors.
        assert_eq!(c.tile(3072, 16), (64, 4));
        assert_eq!(c.tile(3072, 1), (64, 1));
        assert_eq!(c.tile(3072, 4), (64, 4));
        assert_eq!(c.tile(3072, 5), (64, 4));
        // More than 16 rows: eight rows of two vectors.
        assert_eq!(c.tile(3072, 100), (32, 8));
        // Three rows: four vectors, not five (a power of two of registers, at most four).
        assert_eq!(c.tile(3072, 3), (64, 3));
        // Narrower than a tile: all of it.
        assert_eq!(c.tile(10, 100), (10, 8));
        // Dot products: 2 rows by 8 columns of 16 partial sums.
        let d = contraction(vec![16, 3072, 768], 1, Some(0), 2, true);
        assert_eq!(d.tile(3072, 16), (8, 2));
        assert_eq!(d.tile(3072, 1), (16, 1));
        assert_eq!(d.tile(5, 16), (5, 2));
    }

    #[test]
    fn extents_the_tile_does_not_divide_are_split_off() {
        // n by tiles of 32, then by whole vectors, then m by tiles of 8.
        let c = contraction(vec![1, 20, 768, 50257], 3, Some(1), 2, false);
        assert_eq!(c.splits(), vec![(3, 32), (3, 16), (1, 8)]);
        let c = contraction(vec![16, 768, 3072], 2, Some(0), 1, false);
        assert_eq!(c.splits(), vec![(2, 64), (2, 32), (2, 16), (0, 4)]);
        // Four rows of 49 lanes: a tile of 49, then 32 lanes, 16, and the one left.
        let c = contraction(vec![4, 4608, 49], 2, Some(0), 1, false);
        assert_eq!(c.splits(), vec![(2, 49), (2, 32), (2, 16), (0, 4)]);
        // A dot product's k too, by whole vectors.
        let d = contraction(vec![3, 30, 100], 1, Some(0), 2, true);
        assert_eq!(d.splits(), vec![(1, 8), (1, 16), (0, 2), (2, 16)]);
    }
}
