//! Sharding rules and region growing.
//!
//! **Model.** A value in a region is split along exactly one tensor axis into `p` equal
//! blocks, `p` the number of mesh devices (the split uses every mesh axis at once); values
//! outside a region are replicated. Each op kind has a rule that, given which operands are
//! split along which axis, says along which axis its result is split, and which constant
//! operands must be split to match. A rule that cannot keep the split (an op without a rule,
//! a split axis that the op reduces or mixes, an operand that is neither split nor broadcast
//! along the split axis) stops the region there.
//!
//! **Rules** (`d` is the operand's split axis, `t` the result's):
//! - elementwise (unary, binary, `select`, `cast`, `clip`): operands are aligned at their last
//!   axis; every split operand must land on the same result axis `t`; every other operand
//!   is broadcast along `t` (extent 1 or missing), or a constant with the full extent, which
//!   is then split along its aligned axis.
//! - `softmax`, `log-softmax`, `cumsum`: `t = d` when `d` is not the op's axis; `layer-norm`:
//!   `t = d` when `d` is before the normalized axes; `reduce-*`, `argmax`, `argmin`: `d` kept
//!   (renumbered without the reduced axes) when not reduced.
//! - `transpose`: `t` is where the permutation puts `d`.
//! - `reshape` (static shapes): `t` is the first non-unit result axis whose leading extents
//!   multiply to the same number as the operand's axes before `d`, if `p` divides its
//!   extent. Both splits then cut the same contiguous blocks of the row-major data, whether
//!   the reshape splits the axis (`[B, S, H*D] -> [B, S, H, D]`: `H` split) or merges it.
//! - `matmul` (both operands rank 2 or more): a split batch axis stays a batch axis (the
//!   other operand split along the same batch axis, or broadcast there); a split row axis of
//!   the left operand (`M`) gives the result's row axis, a split column axis of the right
//!   operand (`N`) the result's column axis, the other operand replicated. `gemm` with an
//!   untransposed split `A` row axis: the result's row axis (data parallelism).
//! - Tensor parallelism's two ends: a *column-parallel* seed (`matmul` or `gemm` of a
//!   replicated value and a constant 2-D weight, the weight split along its output axis `N`,
//!   the result along its last axis) and a *row-parallel* closer (`matmul` or `gemm` whose
//!   left operand is split along its last, contracting, axis and whose right operand is a
//!   constant 2-D weight, split along `K`): its result is a partial sum that an `all-reduce`
//!   completes.
//!
//! **Regions.** [`grow`] sweeps the body once in order from the seeds: an op with a split
//! operand either follows its rule (and joins the region), or closes it (tensor mode), or
//! the region fails (tensor mode) or gathers the split value before it (data mode). Since
//! the body is in topological order, every operand's split is known when its user is
//! reached. Every value in a region must have a static shape.

use std::collections::{BTreeMap, BTreeSet};

use tessera_ir::{ElemType, Graph, Op, OpId, ValueDef, ValueId};

/// How a region grows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// From column-parallel seeds to row-parallel closers; anything else fails the region.
    Tensor,
    /// From split graph inputs; where a rule fails, the value is gathered instead.
    Data,
}

/// A set of ops that run split over the mesh, and what they need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// Ops placed on the mesh, in body order.
    pub ops: Vec<OpId>,
    /// The split axis of every split value (op results, and graph inputs in data mode).
    pub split: BTreeMap<ValueId, usize>,
    /// Constant operands to split: (op, operand index, axis).
    pub const_splits: Vec<(OpId, usize, usize)>,
    /// Row-parallel ops whose results are partial sums to all-reduce.
    pub closers: Vec<OpId>,
    /// Split values to gather before their uses outside the region (data mode), in order.
    pub gathers: Vec<ValueId>,
}

/// Uses of every value, and the graph outputs.
pub struct Uses {
    users: BTreeMap<ValueId, Vec<OpId>>,
    outputs: BTreeSet<ValueId>,
}

impl Uses {
    /// The uses in `g`.
    pub fn new(g: &Graph) -> Uses {
        let mut users: BTreeMap<ValueId, Vec<OpId>> = BTreeMap::new();
        for &o in g.ops() {
            for &v in &g.op(o).operands {
                let list = users.entry(v).or_default();
                if list.last() != Some(&o) {
                    list.push(o);
                }
            }
        }
        Uses {
            users,
            outputs: g.outputs().iter().copied().collect(),
        }
    }

    /// The ops that use `v`, in body order, each once.
    pub fn users(&self, v: ValueId) -> &[OpId] {
        self.users.get(&v).map_or(&[], Vec::as_slice)
    }

    /// Whether `v` is a graph output.
    pub fn is_output(&self, v: ValueId) -> bool {
        self.outputs.contains(&v)
    }
}

/// Whether `v` is the result of a `const` op.
pub fn is_const(g: &Graph, v: ValueId) -> bool {
    matches!(g.value(v).def, ValueDef::Result(o, _) if matches!(g.op(o).op, Op::Const(_)))
}

fn dims(g: &Graph, v: ValueId) -> Result<Vec<u64>, String> {
    g.ty(v)
        .static_dims()
        .ok_or_else(|| format!("{} has a symbolic shape", g.ty(v)))
}

/// What a rule says about one op.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    /// The op joins the region; its results split along these axes (`None`: replicated).
    Follow {
        results: Vec<Option<usize>>,
        consts: Vec<(usize, usize)>,
    },
    /// A row-parallel op: its result is a partial sum.
    Close { consts: Vec<(usize, usize)> },
}

/// The split of a column-parallel seed: `matmul`/`gemm` of a replicated value with a
/// constant 2-D weight whose output extent `p` divides. Returns the constant splits.
pub fn seed(g: &Graph, op: OpId, p: u64) -> Option<Vec<(usize, usize)>> {
    let data = g.op(op);
    let (n_axis, c_ok) = match &data.op {
        Op::MatMul => (1, data.operands.len() == 2),
        Op::Gemm { trans_b, .. } => (usize::from(!trans_b), true),
        _ => return None,
    };
    let (&w, &r) = (data.operands.get(1)?, data.results.first()?);
    if !c_ok || !is_const(g, w) || g.ty(w).rank() != 2 {
        return None;
    }
    let wd = dims(g, w).ok()?;
    let rd = dims(g, r).ok()?;
    let n = wd[n_axis];
    if n < p || !n.is_multiple_of(p) || rd.last() != Some(&n) {
        return None;
    }
    dims(g, data.operands[0]).ok()?;
    let mut consts = vec![(1, n_axis)];
    if let Some(&c) = data.operands.get(2) {
        let cd = dims(g, c).ok()?;
        match cd.last() {
            None | Some(1) => {}
            Some(&e) if e == n && is_const(g, c) => consts.push((2, cd.len() - 1)),
            Some(_) => return None,
        }
    }
    Some(consts)
}

/// Grows a region from `seeds` (tensor mode: column-parallel ops; their first operands stay
/// replicated) or from split graph inputs `inputs` (data mode). `Err` says why a tensor
/// region fails.
pub fn grow(
    g: &Graph,
    mode: Mode,
    seeds: &[OpId],
    inputs: &[(ValueId, usize)],
    p: u64,
) -> Result<Region, String> {
    let mut region = Region::default();
    region.split.extend(inputs.iter().copied());
    let seed_set: BTreeSet<OpId> = seeds.iter().copied().collect();
    let mut gathered: BTreeSet<ValueId> = BTreeSet::new();
    for &o in g.ops() {
        let data = g.op(o);
        if seed_set.contains(&o) {
            let consts = seed(g, o, p).ok_or_else(|| format!("{o} is not a column-parallel op"))?;
            region.ops.push(o);
            let r = data.results[0];
            region.split.insert(r, g.ty(r).rank() - 1);
            region
                .const_splits
                .extend(consts.into_iter().map(|(i, a)| (o, i, a)));
            continue;
        }
        let splits: Vec<Option<usize>> = data
            .operands
            .iter()
            .map(|v| region.split.get(v).copied())
            .collect();
        if splits.iter().all(Option::is_none) {
            continue;
        }
        match rule(g, o, &splits, mode, p) {
            Ok(Outcome::Follow { results, consts }) => {
                region.ops.push(o);
                for (&r, s) in data.results.iter().zip(results) {
                    if let Some(a) = s {
                        region.split.insert(r, a);
                    }
                }
                region
                    .const_splits
                    .extend(consts.into_iter().map(|(i, a)| (o, i, a)));
            }
            Ok(Outcome::Close { consts }) => {
                region.ops.push(o);
                region.closers.push(o);
                region
                    .const_splits
                    .extend(consts.into_iter().map(|(i, a)| (o, i, a)));
            }
            Err(why) => match mode {
                Mode::Tensor => return Err(format!("`{}` ({o}): {why}", data.op.name())),
                Mode::Data => {
                    for (&v, s) in data.operands.iter().zip(&splits) {
                        if s.is_some() && gathered.insert(v) {
                            region.gathers.push(v);
                        }
                    }
                }
            },
        }
    }
    for &v in g.outputs() {
        if region.split.contains_key(&v) {
            match mode {
                Mode::Tensor => return Err("a split value is a graph output".into()),
                Mode::Data => {
                    if gathered.insert(v) {
                        region.gathers.push(v);
                    }
                }
            }
        }
    }
    // Graph inputs whose every use gathers them are not worth splitting.
    if mode == Mode::Data {
        let used: BTreeSet<ValueId> = region
            .ops
            .iter()
            .flat_map(|&o| g.op(o).operands.iter().copied())
            .collect();
        let idle: Vec<ValueId> = inputs
            .iter()
            .map(|&(v, _)| v)
            .filter(|v| !used.contains(v))
            .collect();
        for v in idle {
            region.split.remove(&v);
            region.gathers.retain(|&x| x != v);
        }
    }
    Ok(region)
}

/// The rule of one op given its operands' splits (see the module doc).
fn rule(
    g: &Graph,
    o: OpId,
    splits: &[Option<usize>],
    mode: Mode,
    p: u64,
) -> Result<Outcome, String> {
    let data = g.op(o);
    let operand_dims: Vec<Vec<u64>> = data
        .operands
        .iter()
        .map(|&v| dims(g, v))
        .collect::<Result<_, _>>()?;
    let result_dims: Vec<Vec<u64>> = data
        .results
        .iter()
        .map(|&v| dims(g, v))
        .collect::<Result<_, _>>()?;
    let one = |t: usize, consts: Vec<(usize, usize)>| -> Result<Outcome, String> {
        let e = result_dims[0][t];
        if !e.is_multiple_of(p) {
            return Err(format!(
                "result axis {t} of extent {e} does not split {p} ways"
            ));
        }
        Ok(Outcome::Follow {
            results: vec![Some(t)],
            consts,
        })
    };
    // The single split operand of a one-operand rule.
    let only = || -> Result<usize, String> {
        match splits {
            [Some(d), rest @ ..] if rest.iter().all(Option::is_none) => Ok(*d),
            _ => Err("only its first operand may be split".into()),
        }
    };
    match &data.op {
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast { .. } | Op::Clip { .. } => {
            let r = result_dims[0].len();
            let mut t = None;
            for (i, s) in splits.iter().enumerate() {
                if let Some(d) = s {
                    let ti = d + r - operand_dims[i].len();
                    if t.is_some_and(|t| t != ti) || operand_dims[i][*d] != result_dims[0][ti] {
                        return Err("its operands are split along different axes".into());
                    }
                    t = Some(ti);
                }
            }
            let t = t.ok_or("no split operand")?;
            let consts = broadcast_operands(
                g,
                data.operands.as_slice(),
                &operand_dims,
                splits,
                r,
                t,
                result_dims[0][t],
            )?;
            one(t, consts)
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } | Op::CumSum { axis, .. } => {
            let d = only()?;
            if d == *axis {
                return Err(format!("it works along the split axis {d}"));
            }
            one(d, vec![])
        }
        Op::LayerNorm { axis, .. } => {
            let d = only()?;
            if d >= *axis {
                return Err(format!("it normalizes over the split axis {d}"));
            }
            one(d, vec![])
        }
        Op::Reduce {
            axes, keep_dims, ..
        } => {
            let d = only()?;
            if axes.is_empty() || axes.contains(&d) {
                return Err(format!("it reduces the split axis {d}"));
            }
            let t = if *keep_dims {
                d
            } else {
                d - axes.iter().filter(|&&a| a < d).count()
            };
            one(t, vec![])
        }
        Op::ArgReduce {
            axis, keep_dims, ..
        } => {
            let d = only()?;
            if d == *axis {
                return Err(format!("it reduces the split axis {d}"));
            }
            one(if *keep_dims || d < *axis { d } else { d - 1 }, vec![])
        }
        Op::Transpose { perm } => {
            let d = only()?;
            let t = perm.iter().position(|&a| a == d).ok_or("bad permutation")?;
            one(t, vec![])
        }
        Op::Reshape { .. } => {
            let d = only()?;
            let (i, out) = (&operand_dims[0], &result_dims[0]);
            let prefix: u64 = i[..d].iter().product();
            let mut acc = 1u64;
            for (t, &e) in out.iter().enumerate() {
                if acc == prefix && e != 1 {
                    return one(t, vec![]);
                }
                acc = acc.saturating_mul(e);
                if acc > prefix {
                    break;
                }
            }
            Err(format!("axis {d} has no counterpart in the result"))
        }
        Op::MatMul => matmul(
            g,
            data.operands.as_slice(),
            &operand_dims,
            &result_dims[0],
            splits,
            mode,
            p,
        ),
        Op::Gemm {
            trans_a,
            trans_b,
            beta,
            ..
        } => {
            let a_split = splits[0];
            if splits[1].is_some() || splits.get(2).copied().flatten().is_some() {
                return Err("only its A operand may be split".into());
            }
            if *trans_a {
                return Err("its A operand is transposed".into());
            }
            match a_split {
                Some(1) if mode == Mode::Tensor => {
                    let w = data.operands[1];
                    if !is_const(g, w) {
                        return Err("its B operand is not a constant".into());
                    }
                    if let Some(&c) = data.operands.get(2) {
                        let elem = g.ty(c).elem;
                        if *beta != 1.0 || !matches!(elem, ElemType::F32 | ElemType::F64) {
                            return Err("its C operand cannot move after the all-reduce".into());
                        }
                    }
                    // B is [K, N], or [N, K] when transposed: split along K.
                    Ok(Outcome::Close {
                        consts: vec![(1, usize::from(*trans_b))],
                    })
                }
                Some(0) => {
                    let m = result_dims[0][0];
                    let mut consts = vec![];
                    if let Some(&c) = data.operands.get(2) {
                        let cd = &operand_dims[2];
                        if cd.len() == 2 && cd[0] != 1 {
                            if is_const(g, c) && cd[0] == m {
                                consts.push((2, 0));
                            } else {
                                return Err("its C operand is not broadcast along the rows".into());
                            }
                        }
                    }
                    one(0, consts)
                }
                _ => Err("its contracting axis is split".into()),
            }
        }
        op => Err(format!("`{}` has no sharding rule", op.name())),
    }
}

/// For an elementwise-like op with result rank `r` split along `t` (extent `e`): every
/// operand that is not split must be broadcast along `t`, or be a constant of full extent
/// there (returned as a constant split).
fn broadcast_operands(
    g: &Graph,
    operands: &[ValueId],
    operand_dims: &[Vec<u64>],
    splits: &[Option<usize>],
    r: usize,
    t: usize,
    e: u64,
) -> Result<Vec<(usize, usize)>, String> {
    let mut consts = Vec::new();
    for (i, (&v, od)) in operands.iter().zip(operand_dims).enumerate() {
        if splits[i].is_some() {
            continue;
        }
        let Some(a) = (t + od.len()).checked_sub(r) else {
            continue;
        };
        match od[a] {
            1 => {}
            x if x == e && is_const(g, v) => consts.push((i, a)),
            _ => {
                return Err(format!(
                    "operand {i} is neither split nor broadcast along axis {t}"
                ));
            }
        }
    }
    Ok(consts)
}

fn matmul(
    g: &Graph,
    operands: &[ValueId],
    operand_dims: &[Vec<u64>],
    result: &[u64],
    splits: &[Option<usize>],
    mode: Mode,
    p: u64,
) -> Result<Outcome, String> {
    let (ra, rb, r) = (operand_dims[0].len(), operand_dims[1].len(), result.len());
    if ra < 2 || rb < 2 {
        return Err("a 1-D operand".into());
    }
    let check = |t: usize, consts: Vec<(usize, usize)>| -> Result<Outcome, String> {
        if !result[t].is_multiple_of(p) {
            return Err(format!("result axis {t} does not split {p} ways"));
        }
        Ok(Outcome::Follow {
            results: vec![Some(t)],
            consts,
        })
    };
    match (splits[0], splits[1]) {
        (Some(d), None) if d == ra - 1 => {
            if mode == Mode::Tensor && is_const(g, operands[1]) && rb == 2 {
                Ok(Outcome::Close {
                    consts: vec![(1, 0)],
                })
            } else {
                Err("its contracting axis is split".into())
            }
        }
        (Some(d), None) if d == ra - 2 => check(r - 2, vec![]),
        (None, Some(d)) if d == rb - 1 => check(r - 1, vec![]),
        (Some(d), other) if d < ra - 2 => {
            let t = d + r - ra;
            let mut consts = vec![];
            match other {
                Some(db) if db < rb - 2 && db + r - rb == t => {}
                Some(_) => return Err("its operands are split along different axes".into()),
                None => consts.extend(batch_broadcast(
                    g,
                    operands[1],
                    &operand_dims[1],
                    1,
                    r,
                    t,
                    result[t],
                )?),
            }
            check(t, consts)
        }
        (None, Some(d)) if d < rb - 2 => {
            let t = d + r - rb;
            let consts = batch_broadcast(g, operands[0], &operand_dims[0], 0, r, t, result[t])?;
            check(t, consts.into_iter().collect())
        }
        (Some(d), _) if d == ra - 1 => Err("its contracting axis is split".into()),
        (_, Some(d)) if d == rb - 2 => Err("its contracting axis is split".into()),
        _ => Err("its operands are split along axes that do not combine".into()),
    }
}

/// The other operand of a matmul split along batch axis `t`: broadcast there, or a constant
/// split with it.
fn batch_broadcast(
    g: &Graph,
    v: ValueId,
    od: &[u64],
    index: usize,
    r: usize,
    t: usize,
    e: u64,
) -> Result<Option<(usize, usize)>, String> {
    let rank = od.len();
    match (t + rank).checked_sub(r) {
        Some(a) if a < rank - 2 => match od[a] {
            1 => Ok(None),
            x if x == e && is_const(g, v) => Ok(Some((index, a))),
            _ => Err(format!("operand {index} is not split along batch axis {t}")),
        },
        _ => Ok(None),
    }
}
