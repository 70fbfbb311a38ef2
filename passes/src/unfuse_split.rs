//! `unfuse-split`: a `split` of a product by a constant matrix along the product's columns
//! becomes one product per piece, each with its own columns of the matrix (a fused QKV
//! projection becomes the three projections it fuses).
//!
//! The pattern: `matmul %x, %w` or `gemm %x, %w[, %c]` whose right operand is a 2-D
//! constant, then any reshapes that keep the last axis's extent, then a `split` along the
//! last axis; every value in between has one use. Each piece `j` (columns `c0..c1`) gets a
//! constant `w[:, c0..c1]` (rows of a transposed `gemm` operand), the bias's columns when the
//! bias has them (a bias that broadcasts along the columns is shared), the same product and
//! the same reshapes with the last extent `c1 - c0`. The rewrite is exact: column `c` of a
//! product depends only on column `c` of the matrix and of the bias.
//!
//! Why: Hugging Face GPT-2 computes query, key and value with one `gemm` and splits the
//! result. Split by columns over `k` devices, each device would hold contiguous columns that
//! straddle the three pieces, so the heads that follow cannot be split without gathering the
//! product first. Three products split by columns give each device its block of each piece,
//! Megatron-LM's layout for its fused QKV weight (Shoeybi et al. 2019, section 3), and the
//! heads split follows with no communication. Placement applies this to the graphs it splits
//! (`tessera compile --split auto|force`); graphs placed whole keep the one product.
//!
//! Ops with a device, and values with a sharding, are left alone. The old constant goes when
//! nothing else reads it (the pass ends with `dce`).

use std::collections::{BTreeMap, BTreeSet};

use tessera_ir::{Bytes, Constant, Dim, Graph, Op, OpId, ValueDef, ValueId, infer::infer};

use crate::pass::{Options, Pass, PassError, PassInfo, Statistics};

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "unfuse-split",
    summary: "Turn a split of a product by a constant matrix into one product per piece",
    options: &[],
    create: |_: &Options| Ok(Box::new(UnfuseSplit)),
};

struct UnfuseSplit;

impl Pass for UnfuseSplit {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        unfuse_split(graph, stats)
    }
}

/// One match: the split, the reshapes from the product outward, the product.
struct Fused {
    split: OpId,
    reshapes: Vec<OpId>,
    product: OpId,
    /// Which axis of the constant matrix holds the product's columns.
    column_axis: usize,
}

/// Applies the rewrite everywhere it matches; returns whether the graph changed.
pub fn unfuse_split(graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
    let mut uses: BTreeMap<ValueId, usize> = BTreeMap::new();
    for &o in graph.ops() {
        for &v in &graph.op(o).operands {
            *uses.entry(v).or_default() += 1;
        }
    }
    for &v in graph.outputs() {
        *uses.entry(v).or_default() += 1;
    }
    let found: Vec<Fused> = graph
        .ops()
        .iter()
        .filter_map(|&o| matched(graph, o, &uses))
        .collect();
    // New constants take fresh names, which their `const` ops' values take too.
    let mut names: BTreeSet<String> = graph.consts().map(|(_, c)| c.name.clone()).collect();
    names.extend(
        (0..graph.num_values()).filter_map(|i| graph.value(ValueId::from_index(i)).name.clone()),
    );
    for f in &found {
        rewrite(graph, f, &mut names)?;
    }
    stats.add(
        "splits-unfused",
        "splits of products turned into one product per piece",
        found.len() as u64,
    );
    if !found.is_empty() {
        crate::dce::dce(graph, stats);
    }
    Ok(!found.is_empty())
}

/// The constant a value is read from, if a `const` op makes it.
fn constant_of(g: &Graph, v: ValueId) -> Option<tessera_ir::ConstId> {
    match g.value(v).def {
        ValueDef::Result(op, 0) => match g.op(op).op {
            Op::Const(c) => Some(c),
            _ => None,
        },
        _ => None,
    }
}

fn last_dim(g: &Graph, v: ValueId) -> Option<u64> {
    g.ty(v).shape.last().and_then(Dim::as_static)
}

fn untouched(g: &Graph, op: OpId) -> bool {
    let data = g.op(op);
    data.device.is_none()
        && data
            .results
            .iter()
            .chain(&data.operands)
            .all(|&v| g.value(v).sharding.is_none())
}

fn matched(g: &Graph, split: OpId, uses: &BTreeMap<ValueId, usize>) -> Option<Fused> {
    let data = g.op(split);
    let Op::Split { axis, sizes } = &data.op else {
        return None;
    };
    let input = *data.operands.first()?;
    let rank = g.ty(input).rank();
    if *axis + 1 != rank || sizes.len() < 2 || !untouched(g, split) {
        return None;
    }
    let n = last_dim(g, input)?;
    let one_use = |v: ValueId| uses.get(&v).copied() == Some(1);
    let mut reshapes = Vec::new();
    let mut cur = input;
    loop {
        if !one_use(cur) {
            return None;
        }
        let ValueDef::Result(op, 0) = g.value(cur).def else {
            return None;
        };
        if !untouched(g, op) {
            return None;
        }
        let d = g.op(op);
        match &d.op {
            Op::Reshape { .. } => {
                let from = *d.operands.first()?;
                if last_dim(g, from) != Some(n) {
                    return None;
                }
                reshapes.push(op);
                cur = from;
            }
            Op::MatMul | Op::Gemm { .. } => {
                let w = *d.operands.get(1)?;
                let wc = constant_of(g, w)?;
                let wty = &g.constant(wc).ty;
                if wty.rank() != 2 || g.ty(*d.operands.first()?).rank() < 2 {
                    return None;
                }
                let column_axis = match d.op {
                    Op::Gemm { trans_b: true, .. } => 0,
                    _ => 1,
                };
                if wty.shape[column_axis].as_static() != Some(n) {
                    return None;
                }
                // A bias broadcasts along the columns (rank 0, or a last extent of 1) and is
                // shared, or has them (a constant, cut); a dynamic extent is neither known.
                if let Some(&c) = d.operands.get(2) {
                    let shared = g.ty(c).rank() == 0 || last_dim(g, c) == Some(1);
                    let cut = last_dim(g, c) == Some(n) && constant_of(g, c).is_some();
                    if !shared && !cut {
                        return None;
                    }
                }
                reshapes.reverse();
                return Some(Fused {
                    split,
                    reshapes,
                    product: op,
                    column_axis,
                });
            }
            _ => return None,
        }
    }
}

/// The bytes of `c` with axis `axis` cut to `start..end`.
fn cut(c: &Constant, axis: usize, start: u64, end: u64) -> Option<Vec<u8>> {
    let dims = c.ty.static_dims()?;
    let outer: u64 = dims[..axis].iter().product();
    let inner = dims[axis + 1..].iter().product::<u64>() * c.ty.elem.size_bytes() as u64;
    let mut out = Vec::with_capacity(((end - start) * inner * outer) as usize);
    for o in 0..outer {
        let base = (o * dims[axis] + start) * inner;
        let stop = (o * dims[axis] + end) * inner;
        out.extend_from_slice(c.data.get(base as usize..stop as usize)?);
    }
    Some(out)
}

/// A constant with axis `axis` of `c` cut to `start..end`, under a fresh name.
fn cut_constant(
    g: &mut Graph,
    names: &mut BTreeSet<String>,
    c: tessera_ir::ConstId,
    axis: usize,
    (start, end): (u64, u64),
    piece: usize,
) -> Result<(tessera_ir::ConstId, tessera_ir::TensorType), PassError> {
    let old = g.constant(c).clone();
    let data = cut(&old, axis, start, end).ok_or_else(|| {
        PassError::new(format!(
            "constant @{}: its data does not match its type {}",
            old.name, old.ty
        ))
    })?;
    let mut ty = old.ty.clone();
    ty.shape[axis] = Dim::Static(end - start);
    let mut name = format!("{}.{piece}", old.name);
    let mut n = 1;
    while names.contains(&name) {
        name = format!("{}.{piece}_{n}", old.name);
        n += 1;
    }
    names.insert(name.clone());
    let id = g.add_const(Constant {
        name,
        ty: ty.clone(),
        data: Bytes::from(data),
    });
    Ok((id, ty))
}

/// Inserts `op` at `*pos` of the body (moving `pos` past it) with inferred result types;
/// returns its first result.
fn insert(
    g: &mut Graph,
    pos: &mut usize,
    op: Op,
    operands: Vec<ValueId>,
    loc: Option<String>,
) -> Result<ValueId, PassError> {
    let tys: Vec<_> = operands.iter().map(|&v| g.ty(v)).collect();
    let types = infer(g, &op, &tys).map_err(|e| PassError::new(format!("unfuse-split: {e}")))?;
    let id = g.insert_op(*pos, op, operands, types);
    *pos += 1;
    g.op_mut(id).loc = loc;
    Ok(g.op(id).results[0])
}

fn rewrite(g: &mut Graph, f: &Fused, names: &mut BTreeSet<String>) -> Result<(), PassError> {
    let split = g.op(f.split).clone();
    let Op::Split { sizes, .. } = &split.op else {
        unreachable!("matched a split");
    };
    let product = g.op(f.product).clone();
    let mut pos = g
        .ops()
        .iter()
        .position(|&o| o == f.split)
        .expect("the split is in the body");
    let w = constant_of(g, product.operands[1]).expect("matched a constant matrix");
    // A bias with the columns is cut with them; one that broadcasts along them is shared.
    let bias = product
        .operands
        .get(2)
        .copied()
        .filter(|&c| g.ty(c).rank() > 0 && last_dim(g, c) != Some(1))
        .map(|b| {
            let c = constant_of(g, b).expect("matched a constant bias");
            (c, g.ty(b).rank() - 1)
        });
    let mut start = 0u64;
    for (j, (&size, &piece)) in sizes.iter().zip(&split.results).enumerate() {
        let range = (start, start + size);
        start += size;
        let mut operands = product.operands.clone();
        let cuts = std::iter::once((1, w, f.column_axis)).chain(bias.map(|(c, a)| (2, c, a)));
        for (i, c, axis) in cuts {
            let (id, ty) = cut_constant(g, names, c, axis, range, j)?;
            let op = g.insert_op(pos, Op::Const(id), Vec::new(), vec![ty]);
            pos += 1;
            let v = g.op(op).results[0];
            g.set_name(v, g.constant(id).name.clone());
            operands[i] = v;
        }
        let mut v = insert(
            g,
            &mut pos,
            product.op.clone(),
            operands,
            product.loc.clone(),
        )?;
        for &r in &f.reshapes {
            let d = g.op(r).clone();
            let Op::Reshape { shape } = &d.op else {
                unreachable!("matched a reshape");
            };
            let mut shape = shape.clone();
            *shape.last_mut().expect("a reshape to the split's rank") = Dim::Static(size);
            v = insert(g, &mut pos, Op::Reshape { shape }, vec![v], d.loc.clone())?;
        }
        g.replace_all_uses(piece, v);
        if let Some(name) = g.value_mut(piece).name.take() {
            g.set_name(v, name);
        }
    }
    g.remove_op(f.split);
    Ok(())
}
