//! SPMD steps: ops placed on a whole device mesh (`device("@grid")`, from the `shard` pass)
//! run on every mesh device at once, each on its block of every split value.
//!
//! The IR is in the global view (a value is the logical tensor, its [`Sharding`] says how it
//! is cut); a mesh step's function is written in the *local* view: every value has its block's
//! type. A split value that arrives whole (a graph input, a non-mesh step's result, a small
//! inline constant) is cut inside the function, at offsets computed from the device's index
//! in the mesh, which is the function's first argument (`tensor<i64>`). Large split constants
//! are cut at compile time: each mesh device gets its own block in the weights file, named
//! `<constant>@<device>`.

use tessera_ir::{Graph, Mesh, Op, OpId, Sharding, TensorType, ValueId};

use super::body::{Body, LResult, Val, dims, err, tensor_ty};

/// A value's sharding (replicated when it has none).
pub fn sharding_of(g: &Graph, v: ValueId) -> Sharding {
    g.value(v)
        .sharding
        .clone()
        .unwrap_or_else(|| Sharding::replicated(g.ty(v).rank()))
}

/// The block type of a value of type `ty` cut by `s` over `mesh`.
pub fn local_type(mesh: &Mesh, s: &Sharding, ty: &TensorType) -> LResult<TensorType> {
    let d = dims(ty)?;
    let mut out = Vec::with_capacity(d.len());
    for (a, &n) in d.iter().enumerate() {
        let parts = s
            .axes
            .get(a)
            .map_or(1, |ax| mesh.size_of(ax.iter().copied()));
        if parts == 0 || n % parts != 0 {
            return err(format!(
                "{ty}: axis {a} ({n}) does not split into {parts} blocks"
            ));
        }
        out.push(n / parts);
    }
    Ok(TensorType::fixed(ty.elem, &out))
}

/// The coordinates of mesh device `index` (row-major).
pub fn coords(mesh: &Mesh, index: usize) -> Vec<u64> {
    let mut rest = index as u64;
    let mut c = vec![0u64; mesh.shape.len()];
    for (k, &s) in mesh.shape.iter().enumerate().rev() {
        c[k] = rest % u64::from(s.max(1));
        rest /= u64::from(s.max(1));
    }
    c
}

/// The block number along each tensor axis of mesh device `index`.
pub fn block_index(mesh: &Mesh, s: &Sharding, index: usize) -> Vec<u64> {
    let c = coords(mesh, index);
    s.axes
        .iter()
        .map(|axes| {
            axes.iter().fold(0u64, |acc, &m| {
                acc * mesh.axis_size(m) + c.get(m as usize).copied().unwrap_or(0)
            })
        })
        .collect()
}

/// Calls `f(block_at, whole_at, bytes)` for every element of mesh device `index`'s block of
/// a value of type `ty` cut by `s`, in the block's row-major order: the element's byte offset
/// in the block and in the whole tensor, and its size. Returns the block's type.
fn walk_block(
    mesh: &Mesh,
    s: &Sharding,
    ty: &TensorType,
    index: usize,
    mut f: impl FnMut(usize, usize, usize),
) -> LResult<TensorType> {
    let local = local_type(mesh, s, ty)?;
    let gd = dims(ty)?;
    let ld = dims(&local)?;
    let blocks = block_index(mesh, s, index);
    let eb = if ty.elem == tessera_ir::ElemType::Bool {
        1
    } else {
        ty.elem.size_bytes()
    };
    let n: u64 = ld.iter().product();
    let rank = gd.len();
    let mut idx = vec![0u64; rank];
    for k in 0..n as usize {
        let mut flat = 0u64;
        for a in 0..rank {
            flat = flat * gd[a] + blocks[a] * ld[a] + idx[a];
        }
        f(k * eb, flat as usize * eb, eb);
        for a in (0..rank).rev() {
            idx[a] += 1;
            if idx[a] < ld[a] {
                break;
            }
            idx[a] = 0;
        }
    }
    Ok(local)
}

/// Mesh device `index`'s block of row-major little-endian data of type `ty`.
pub fn slice_bytes(
    mesh: &Mesh,
    s: &Sharding,
    ty: &TensorType,
    data: &[u8],
    index: usize,
) -> LResult<(TensorType, Vec<u8>)> {
    let mut out = Vec::new();
    let local = walk_block(mesh, s, ty, index, |_, at, eb| {
        out.extend_from_slice(&data[at..at + eb]);
    })?;
    Ok((local, out))
}

/// Writes mesh device `index`'s block (`block`, row-major) into the whole tensor's data
/// `whole` of type `ty` cut by `s`: the inverse of [`slice_bytes`].
pub fn insert_block(
    mesh: &Mesh,
    s: &Sharding,
    ty: &TensorType,
    whole: &mut [u8],
    block: &[u8],
    index: usize,
) -> LResult<()> {
    walk_block(mesh, s, ty, index, |k, at, eb| {
        whole[at..at + eb].copy_from_slice(&block[k..k + eb]);
    })?;
    Ok(())
}

/// The offsets of mesh device `index`'s block of a value of type `ty` cut by `s`.
pub fn block_offsets(
    mesh: &Mesh,
    s: &Sharding,
    ty: &TensorType,
    index: usize,
) -> LResult<Vec<u64>> {
    let ld = dims(&local_type(mesh, s, ty)?)?;
    Ok(block_index(mesh, s, index)
        .iter()
        .zip(&ld)
        .map(|(b, l)| b * l)
        .collect())
}

/// The offsets of this device's block of a value cut by `s` into blocks of extents `local`,
/// computed inside a mesh step function from `coord` (the `tensor<i64>` holding the device's
/// index in the mesh): an `index` value per split axis, `0` for a whole one.
fn offsets_in_function(
    b: &mut Body,
    mesh: &Mesh,
    s: &Sharding,
    local: &[u64],
    coord: &str,
) -> Vec<String> {
    let i64v = b.assign(format!("tensor.extract {coord}[] : tensor<i64>"));
    let idx = b.assign(format!("arith.index_cast {i64v} : i64 to index"));
    // Coordinates on each mesh axis, row-major.
    let mut mesh_coord = vec![String::new(); mesh.shape.len()];
    let mut stride = 1i64;
    for k in (0..mesh.shape.len()).rev() {
        let st = b.index(stride);
        let q = b.assign(format!("arith.divui {idx}, {st} : index"));
        let sz = b.index(i64::from(mesh.shape[k]));
        mesh_coord[k] = b.assign(format!("arith.remui {q}, {sz} : index"));
        stride *= i64::from(mesh.shape[k]);
    }
    let mut offs = Vec::new();
    for (a, axes) in s.axes.iter().enumerate() {
        if axes.is_empty() {
            offs.push("0".to_string());
            continue;
        }
        let mut lin = b.index(0);
        for &m in axes {
            let sz = b.index(mesh.axis_size(m) as i64);
            let t = b.assign(format!("arith.muli {lin}, {sz} : index"));
            lin = b.assign(format!(
                "arith.addi {t}, {} : index",
                mesh_coord[m as usize]
            ));
        }
        let e = b.index(local[a] as i64);
        offs.push(b.assign(format!("arith.muli {lin}, {e} : index")));
    }
    offs
}

/// Cuts a whole value to this device's block inside a mesh step function; `coord` is the
/// `tensor<i64>` holding the device's index in the mesh.
pub fn slice_in_function(
    b: &mut Body,
    mesh: &Mesh,
    s: &Sharding,
    whole: &Val,
    coord: &str,
) -> LResult<Val> {
    let local = local_type(mesh, s, &whole.ty)?;
    if local == whole.ty {
        return Ok(whole.clone());
    }
    let ld = dims(&local)?;
    let offs = offsets_in_function(b, mesh, s, &ld, coord);
    let sizes: Vec<String> = ld.iter().map(u64::to_string).collect();
    let ones = vec!["1"; ld.len()];
    let name = b.assign(format!(
        "tensor.extract_slice {}[{}] [{}] [{}] : {} to {}",
        whole.name,
        offs.join(", "),
        sizes.join(", "),
        ones.join(", "),
        tensor_ty(&whole.ty)?,
        tensor_ty(&local)?
    ));
    Ok(Val { name, ty: local })
}

/// The mesh-step ops whose local code is not the op on its blocks: `all-slice` (each device
/// cuts its block of what it holds whole) and a `gather` from a table split by rows
/// (vocabulary-parallel: each device gathers the rows it holds, zeros elsewhere, and the
/// all-reduce that follows sums the partial results). `None` for every other op.
pub fn lower_mesh_op(
    b: &mut Body,
    g: &Graph,
    op: OpId,
    mesh: &Mesh,
    args: &[Val],
    results: &[TensorType],
    coord: &str,
) -> LResult<Option<Vec<String>>> {
    let data = g.op(op);
    match data.op {
        Op::AllSlice { .. } => {
            let operand = data.operands[0];
            if !sharding_of(g, operand).is_replicated() {
                return err(format!(
                    "its operand {operand} is already split; only a replicated operand is sliced"
                ));
            }
            let cut =
                slice_in_function(b, mesh, &sharding_of(g, data.results[0]), &args[0], coord)?;
            Ok(Some(vec![cut.name]))
        }
        Op::Gather { axis: 0 } => {
            let table = sharding_of(g, data.operands[0]);
            if table.axes.first().is_none_or(|a| a.is_empty()) {
                return Ok(None);
            }
            let all: Vec<u32> = (0..mesh.shape.len() as u32).collect();
            if table.axes[0] != all
                || table.axes[1..].iter().any(|a| !a.is_empty())
                || !sharding_of(g, data.operands[1]).is_replicated()
                || !sharding_of(g, data.results[0]).is_replicated()
            {
                return err(
                    "a table split by rows lowers only split over the whole mesh, with whole \
                     indices and a partial (whole-typed) result",
                );
            }
            let whole = dims(g.ty(data.operands[0]))?[0];
            let local = dims(&args[0].ty)?;
            let offset = offsets_in_function(b, mesh, &table, &local, coord).swap_remove(0);
            let name = super::index::gather_rows_block(
                b,
                &args[0],
                &args[1],
                whole,
                &offset,
                &results[0],
            )?;
            Ok(Some(vec![name]))
        }
        _ => Ok(None),
    }
}
