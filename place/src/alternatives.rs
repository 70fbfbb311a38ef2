//! The split alternatives of a graph's ops, for the placement problem ([`crate::build`] with
//! [`crate::build::BuildOptions::splits`]): the device groups a target offers and, per op and
//! group, the ways the op can run split over it, each with the layouts it reads and makes
//! ([`crate::split`]), its share's time from the cost model and its memory per device.
//!
//! **Groups**: per device kind with two or more devices, the devices in a ring order (from the
//! first, each next the nearest unvisited one by hops, ties by target order: a snake through
//! a mesh), cut into consecutive blocks of the three largest powers of two up to their number
//! (and all of them when that is not a power of two), at most
//! [`crate::problem::MAX_GROUP_DEVICES`] devices each.
//!
//! **Rules** (`k` ways; an axis is split only when `k` divides its extent, shapes static;
//! constants and state inputs are weights, resident, split or whole as the rule says):
//! - elementwise ops (unary, binary, `select`, `cast`, `clip`): the result split along its
//!   first or last axis (or the heads axis of a 4-D tensor): operands aligned at their last
//!   axis split the same way, broadcast ones read whole;
//! - `matmul` with a 2-D right operand (a weight, or an activation such as a transposed
//!   embedding): *columns* (left whole, right split by columns, result split along its last
//!   axis), *rows* (left split along its last axis, right by rows, the result partial sums,
//!   Megatron-LM's pair) and, with a weight, *batch* (first axis); `matmul` of two
//!   higher-rank activations: a batch or heads axis; `gemm` (untransposed A, weight B) the same three ways;
//!   `gemm` of two activations with A transposed and no C (a weight's gradient `A^T B`): their
//!   shared first axis, the result partial sums (named `batch`: data parallelism's gradients),
//!   or A's second axis, the result's rows (`columns`, a column-parallel layer's gradient), or
//!   B's other axis, the result's columns (`rows`, a row-parallel layer's);
//! - `gather-elements`, `scatter-elements`: an axis other than the op's, where every operand
//!   has the result's extent;
//! - reductions: a kept axis (each device reduces its block), and for `reduce-sum` a reduced
//!   axis, the result partial sums (a bias's gradient over a split batch);
//! - `softmax`, `log-softmax`: any listed axis but the op's and, with partial reductions, the
//!   op's own (each device the maximum and the sum of exponentials of its block, an
//!   all-gather of the maxima and an all-reduce of the sums, charged in the op's time;
//!   [`crate::apply`] writes the composition); `layer-norm`: one before its normalized axes
//!   and, with partial sums (two all-reduces: the sum, then the sum of squared deviations),
//!   its first normalized axis, scale and bias split with it when they have it;
//! - `transpose`: an axis and where the permutation takes it; `reshape`: an axis and the result
//!   axis whose leading extents multiply to the same (the same contiguous blocks);
//! - `split` and `concat`: an axis other than the op's. (Along the op's own axis each device
//!   would need its block of every piece, and `S<axis>` means contiguous blocks. A fused QKV,
//!   a split of a product by a constant, is instead unfused by the `unfuse-split` pass into
//!   three products that split by columns; `compile` offers split plans of both graphs.)
//! - `gather` from a 2-D weight (an embedding): *vocab* (table split by rows, indices whole,
//!   partial sums: each device fills the rows it holds; indices must be normalized to be
//!   non-negative first) and *hidden* (table by columns);
//! - `einsum`: each letter that appears at most once per term: a letter of the result splits
//!   the operands that have it and the result (named by its result axis), a summed letter
//!   splits the operands that have it and leaves partial sums (*contracted*);
//! - `conv`: *channels* (weight and bias split by output channels, `groups = 1`), *batch*, and
//!   without a bias *contracted* (input and kernel split by input channels, the result
//!   partial sums: the form of a convolution weight's gradient, whose channels are the batch);
//!   `pool`, `batch-norm`: batch and channels.
//!
//! - every op (but communication, random numbers and region ops): *replicated*, whole on
//!   every device of the group (all of the work on each; what Megatron-LM does with layer
//!   norms and residual adds between its split matmuls).
//!
//! Axis names: `batch` (axis 0), `heads` (axis 1 of a 4-D tensor), `channels` (axis 1 of
//! convolutions), `hidden` (the last), `columns`, `rows`, `vocab`, `contracted`, else `axisN`.

use std::collections::{BTreeMap, VecDeque};

use tessera_ir::{ElemType, Graph, Op, OpId, ReduceKind, ValueId};

use crate::problem::{DeviceGroup, Link};
use crate::split::Layout;

/// The axis name of the rule that runs an op whole on every device of a group.
pub const REPLICATED: &str = "replicated";

/// One way to run an op split `k` ways.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// What is split (for reports).
    pub axis: String,
    /// The layout of each operand on the group's devices, weights included (a split weight
    /// is `S<axis>`: each device holds its block).
    pub operands: Vec<Layout>,
    /// The layout of each result.
    pub outputs: Vec<Layout>,
    /// Whether each device does `1/k` of the work (else all of it: `replicated`).
    pub shares: bool,
    /// Whether the op reduces along its split axis (softmax or layer norm over it): each
    /// device reduces its block and collectives combine the partial results (their time is in
    /// the op's); [`crate::apply`] writes it out as that composition.
    pub reduces: bool,
}

impl Rule {
    /// The layout operand `i` arrives in over an edge, or, for a weight (resident, no edge),
    /// how each device's copy of it is cut.
    pub fn input(&self, i: usize) -> Layout {
        self.operands.get(i).copied().unwrap_or(Layout::Replicated)
    }

    /// Whether each device holds only its block of operand `i`.
    pub fn splits_operand(&self, i: usize) -> bool {
        matches!(self.operands.get(i), Some(Layout::Split(_)))
    }
}

fn axis_name(a: usize, rank: usize) -> String {
    match (a, rank) {
        (0, _) => "batch".into(),
        (1, 4) => "heads".into(),
        (a, r) if a + 1 == r => "hidden".into(),
        (a, _) => format!("axis{a}"),
    }
}

fn dims(g: &Graph, v: ValueId) -> Option<Vec<u64>> {
    g.ty(v).static_dims()
}

fn divides(k: u64, extent: u64) -> bool {
    extent >= k && extent.is_multiple_of(k)
}

/// The axes of a rank-`r` result that elementwise-like rules try: first, last, and the heads
/// axis of a 4-D tensor.
fn candidate_axes(r: usize) -> Vec<usize> {
    let mut v = vec![0];
    if r == 4 {
        v.push(1);
    }
    if r >= 2 {
        v.push(r - 1);
    }
    v
}

/// The elementwise rule for result axis `a`: operands aligned at their last axis, split where
/// they have the result's extent there, whole where they broadcast.
fn aligned(g: &Graph, op: OpId, k: u64, a: usize) -> Option<Rule> {
    let data = g.op(op);
    let res = dims(g, *data.results.first()?)?;
    if a >= res.len() || !divides(k, res[a]) {
        return None;
    }
    let r = res.len();
    let mut operands = Vec::new();
    for &v in &data.operands {
        let d = dims(g, v)?;
        let along = (a + d.len()).checked_sub(r).filter(|&x| d[x] == res[a]);
        operands.push(along.map_or(Layout::Replicated, |x| Layout::Split(x as u32)));
    }
    let outputs = data
        .results
        .iter()
        .map(|&v| match dims(g, v) {
            Some(d) if d.len() == r && d[a] == res[a] => Layout::Split(a as u32),
            _ => Layout::Replicated,
        })
        .collect();
    Some(Rule {
        axis: axis_name(a, r),
        operands,
        outputs,
        shares: true,
        reduces: false,
    })
}

/// Every rule of op `op` for `k` ways; `weight` says which values are weights. Every op but
/// communication, random numbers and region ops has the replicated rule, last.
pub fn rules(g: &Graph, op: OpId, k: u64, weight: &dyn Fn(ValueId) -> bool) -> Vec<Rule> {
    let data = g.op(op);
    let mut out = split_rules(g, op, k, weight);
    // Every op can also run whole on every device of the group (Megatron-LM's replicated
    // layer norms and residual adds): no reshard between split neighbours, all the work on
    // each device.
    if !matches!(
        data.op,
        Op::Transfer { .. }
            | Op::AllReduce { .. }
            | Op::AllGather { .. }
            | Op::AllSlice { .. }
            | Op::ReduceScatter { .. }
            | Op::AllToAll { .. }
            | Op::RandomUniform { .. }
    ) && data.op.regions().is_empty()
    {
        out.push(Rule {
            axis: REPLICATED.into(),
            operands: vec![Layout::Replicated; data.operands.len()],
            outputs: vec![Layout::Replicated; data.results.len()],
            shares: false,
            reduces: false,
        });
    }
    out
}

/// The splitting rules of `op` (see the module doc).
fn split_rules(g: &Graph, op: OpId, k: u64, weight: &dyn Fn(ValueId) -> bool) -> Vec<Rule> {
    let data = g.op(op);
    let Some(&res0) = data.results.first() else {
        return Vec::new();
    };
    let Some(res) = dims(g, res0) else {
        return Vec::new();
    };
    let r = res.len();
    let nops = data.operands.len();
    let whole = |n: usize| vec![Layout::Replicated; n];
    let one = |axis: &str, operands: Vec<Layout>, outputs: Vec<Layout>| Rule {
        axis: axis.into(),
        operands,
        outputs,
        shares: true,
        reduces: false,
    };
    let s = |a: usize| Layout::Split(a as u32);
    let mut out = Vec::new();
    match &data.op {
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Cast { .. } | Op::Clip { .. } => {
            out.extend(
                candidate_axes(r)
                    .into_iter()
                    .filter_map(|a| aligned(g, op, k, a)),
            );
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            for a in candidate_axes(r).into_iter().filter(|a| a != axis) {
                out.extend(aligned(g, op, k, a));
            }
            // Over the split axis itself: partial reductions combined by collectives.
            if *axis < r && divides(k, res[*axis]) {
                out.push(Rule {
                    reduces: true,
                    ..one(&axis_name(*axis, r), vec![s(*axis)], vec![s(*axis)])
                });
            }
        }
        Op::LayerNorm { axis, .. } => {
            // Scale and bias are over the normalized axes: they align with no earlier axis.
            for a in candidate_axes(r).into_iter().filter(|a| a < axis) {
                out.extend(aligned(g, op, k, a));
            }
            // Over its first normalized axis: partial sums combined by collectives (f32 and
            // f64, whose constants apply writes); a scale or bias with the whole normalized
            // shape splits along it, one that broadcasts there is read whole.
            let float = matches!(g.ty(res0).elem, ElemType::F32 | ElemType::F64);
            if *axis < r && float && divides(k, res[*axis]) {
                let mut ops = vec![s(*axis)];
                for &p in &data.operands[1..] {
                    ops.push(match dims(g, p) {
                        Some(d) if d.len() == r - axis && d[0] == res[*axis] => s(0),
                        _ => Layout::Replicated,
                    });
                }
                out.push(Rule {
                    reduces: true,
                    ..one(&axis_name(*axis, r), ops, vec![s(*axis)])
                });
            }
        }
        Op::MatMul => {
            let (Some(a), Some(b)) = (
                data.operands.first().and_then(|&v| dims(g, v)),
                data.operands.get(1).and_then(|&v| dims(g, v)),
            ) else {
                return out;
            };
            if a.len() < 2 || b.len() < 2 || weight(data.operands[0]) {
                return out;
            }
            if b.len() == 2 {
                // The right operand a weight or an activation (the transposed embedding of a
                // language-model head): split by columns or rows either way.
                let (kk, n) = (b[0], b[1]);
                if divides(k, n) {
                    out.push(one(
                        "columns",
                        vec![Layout::Replicated, s(1)],
                        vec![s(r - 1)],
                    ));
                }
                if divides(k, kk) {
                    out.push(one(
                        "rows",
                        vec![s(a.len() - 1), s(0)],
                        vec![Layout::Partial],
                    ));
                }
                if weight(data.operands[1]) && divides(k, res[0]) {
                    out.push(one("batch", vec![s(0), Layout::Replicated], vec![s(0)]));
                }
            } else if !weight(data.operands[1]) {
                // Batch axes of two activations (aligned at the matrix axes).
                for ax in candidate_axes(r).into_iter().filter(|&x| x + 2 < r) {
                    if !divides(k, res[ax]) {
                        continue;
                    }
                    let lay = |d: &[u64]| {
                        (ax + d.len())
                            .checked_sub(r)
                            .filter(|&x| d[x] == res[ax])
                            .map_or(Layout::Replicated, s)
                    };
                    out.push(one(&axis_name(ax, r), vec![lay(&a), lay(&b)], vec![s(ax)]));
                }
            }
        }
        Op::Gemm {
            trans_a, trans_b, ..
        } => {
            let Some(b) = data.operands.get(1).and_then(|&v| dims(g, v)) else {
                return out;
            };
            if *trans_a && nops == 2 && !weight(data.operands[0]) && !weight(data.operands[1]) {
                // A weight's gradient (`A^T B` of two activations): each device contracts its
                // rows of both, the result partial sums (data parallelism's gradients).
                let (Some(a), true) = (
                    data.operands.first().and_then(|&v| dims(g, v)),
                    b.len() == 2,
                ) else {
                    return out;
                };
                if a.len() == 2 && divides(k, a[0]) {
                    let b_k = if *trans_b { s(1) } else { s(0) };
                    out.push(one(
                        &axis_name(0, 2),
                        vec![s(0), b_k],
                        vec![Layout::Partial],
                    ));
                }
                // Tensor parallelism's weight gradients: the rows of the result from A's
                // columns (a column-parallel layer's `dY^T X`, named as its forward), its
                // columns from B's (a row-parallel layer's `dY^T H`, H split by rows).
                if a.len() == 2 && divides(k, a[1]) {
                    out.push(one("columns", vec![s(1), Layout::Replicated], vec![s(0)]));
                }
                let n = if *trans_b { b[0] } else { b[1] };
                if a.len() == 2 && divides(k, n) {
                    let b_n = if *trans_b { s(0) } else { s(1) };
                    out.push(one("rows", vec![Layout::Replicated, b_n], vec![s(1)]));
                }
                return out;
            }
            if *trans_a || !weight(data.operands[1]) || weight(data.operands[0]) || b.len() != 2 {
                return out;
            }
            let (kk, n) = if *trans_b { (b[1], b[0]) } else { (b[0], b[1]) };
            let (b_cols, b_rows) = if *trans_b { (s(0), s(1)) } else { (s(1), s(0)) };
            // The bias: split with the columns when it has them, else whole.
            let c = data.operands.get(2).map(|&c| match dims(g, c) {
                Some(d) if d.last() == Some(&n) && n > 1 => s(d.len() - 1),
                _ => Layout::Replicated,
            });
            if divides(k, n) {
                let mut ops = vec![Layout::Replicated, b_cols];
                ops.extend(c);
                out.push(one("columns", ops, vec![s(1)]));
            }
            // Row-parallel sums partial products: a bias would be added on every device.
            if divides(k, kk) && nops == 2 {
                out.push(one("rows", vec![s(1), b_rows], vec![Layout::Partial]));
            }
            if divides(k, res[0]) {
                let mut ops = vec![s(0), Layout::Replicated];
                // A bias with the rows ([M, N] or [M, 1]) splits with them.
                ops.extend(data.operands.get(2).map(|&c| match dims(g, c) {
                    Some(d) if d.len() == 2 && d[0] == res[0] && res[0] > 1 => s(0),
                    _ => Layout::Replicated,
                }));
                out.push(one("batch", ops, vec![s(0)]));
            }
        }
        Op::Transpose { perm } => {
            let Some(input) = data.operands.first().and_then(|&v| dims(g, v)) else {
                return out;
            };
            for (a, &extent) in input.iter().enumerate() {
                if !divides(k, extent) {
                    continue;
                }
                if let Some(b) = perm.iter().position(|&p| p == a) {
                    out.push(one(&axis_name(b, r), vec![s(a)], vec![s(b)]));
                }
            }
        }
        Op::Reshape { .. } => {
            let Some(input) = data.operands.first().and_then(|&v| dims(g, v)) else {
                return out;
            };
            for a in 0..input.len() {
                if !divides(k, input[a]) {
                    continue;
                }
                let lead: u64 = input[..a].iter().product();
                let mut acc = 1u64;
                for (b, &e) in res.iter().enumerate() {
                    if acc == lead && divides(k, e) {
                        let mut ops = whole(nops);
                        ops[0] = s(a);
                        out.push(one(&axis_name(b, r), ops, vec![s(b)]));
                        break;
                    }
                    acc = acc.saturating_mul(e);
                    if acc > lead {
                        break;
                    }
                }
            }
        }
        Op::Split { axis, sizes } => {
            let Some(input) = data.operands.first().and_then(|&v| dims(g, v)) else {
                return out;
            };
            let _ = sizes;
            for c in candidate_axes(input.len())
                .into_iter()
                .filter(|c| c != axis)
            {
                if divides(k, input[c]) {
                    let name = axis_name(c, input.len());
                    out.push(one(&name, vec![s(c)], vec![s(c); data.results.len()]));
                }
            }
        }
        Op::Concat { axis } => {
            let ins: Option<Vec<Vec<u64>>> = data.operands.iter().map(|&v| dims(g, v)).collect();
            let Some(ins) = ins else { return out };
            for c in candidate_axes(r).into_iter().filter(|c| c != axis) {
                if ins.iter().all(|d| divides(k, d[c])) {
                    out.push(one(&axis_name(c, r), vec![s(c); nops], vec![s(c)]));
                }
            }
        }
        Op::Gather { axis: 0 } if nops == 2 && weight(data.operands[0]) => {
            let Some(table) = dims(g, data.operands[0]) else {
                return out;
            };
            if table.len() == 2 && !weight(data.operands[1]) {
                if divides(k, table[0]) {
                    out.push(one(
                        "vocab",
                        vec![s(0), Layout::Replicated],
                        vec![Layout::Partial],
                    ));
                }
                if divides(k, table[1]) {
                    out.push(one(
                        "hidden",
                        vec![s(1), Layout::Replicated],
                        vec![s(r - 1)],
                    ));
                }
            }
        }
        Op::Conv(attrs) => {
            let Some(w) = data.operands.get(1).and_then(|&v| dims(g, v)) else {
                return out;
            };
            let Some(x) = data.operands.first().and_then(|&v| dims(g, v)) else {
                return out;
            };
            if attrs.groups == 1 && nops == 2 && !weight(data.operands[0]) && divides(k, x[1]) {
                // Over the input channels: each device convolves its channels with its
                // channels of the kernel, the result partial sums (a weight's gradient, whose
                // "channels" are the batch, contracts over the batch this way).
                out.push(one("contracted", vec![s(1), s(1)], vec![Layout::Partial]));
            }
            if !weight(data.operands[1]) || weight(data.operands[0]) {
                return out;
            }
            if attrs.groups == 1 && divides(k, w[0]) {
                let mut ops = vec![s(0); nops];
                ops[0] = Layout::Replicated;
                out.push(one("channels", ops, vec![s(1)]));
            }
            if divides(k, res[0]) {
                let mut ops = whole(nops);
                ops[0] = s(0);
                out.push(one("batch", ops, vec![s(0)]));
            }
        }
        Op::Einsum { equation } => {
            let Ok((terms, out_term)) = tessera_ir::infer::parse_einsum(equation) else {
                return out;
            };
            let ins: Option<Vec<Vec<u64>>> = data.operands.iter().map(|&v| dims(g, v)).collect();
            let Some(ins) = ins else { return out };
            // The letters in input order; each is split where it appears in an operand
            // (once per term: a repeated letter is a diagonal, left alone).
            let mut letters: Vec<char> = Vec::new();
            for t in &terms {
                for &c in t {
                    if !letters.contains(&c) {
                        letters.push(c);
                    }
                }
            }
            for c in letters {
                let once = terms
                    .iter()
                    .all(|t| t.iter().filter(|&&x| x == c).count() <= 1);
                let extent = terms
                    .iter()
                    .zip(&ins)
                    .find_map(|(t, d)| t.iter().position(|&x| x == c).map(|p| d[p]));
                if !once || !extent.is_some_and(|e| divides(k, e)) {
                    continue;
                }
                let operands = terms
                    .iter()
                    .map(|t| t.iter().position(|&x| x == c).map_or(Layout::Replicated, s))
                    .collect();
                match out_term.iter().position(|&x| x == c) {
                    // A letter of the result: each device computes its block of it.
                    Some(p) => out.push(one(&axis_name(p, r), operands, vec![s(p)])),
                    // A summed letter: each device sums its part, the result partial sums.
                    None => out.push(one("contracted", operands, vec![Layout::Partial])),
                }
            }
        }
        Op::Reduce {
            kind,
            axes,
            keep_dims,
        } => {
            let Some(input) = data.operands.first().and_then(|&v| dims(g, v)) else {
                return out;
            };
            let reduced = |a: usize| axes.is_empty() || axes.contains(&a);
            for a in candidate_axes(input.len()) {
                if !divides(k, input[a]) {
                    continue;
                }
                let name = axis_name(a, input.len());
                if !reduced(a) {
                    // A kept axis: each device reduces its block of it.
                    let b = if *keep_dims {
                        a
                    } else {
                        a - (0..a).filter(|&x| reduced(x)).count()
                    };
                    out.push(one(&name, vec![s(a)], vec![s(b)]));
                } else if *kind == ReduceKind::Sum {
                    // A summed axis: each device sums its block, the result partial sums
                    // (a bias's gradient over a split batch).
                    out.push(one(&name, vec![s(a)], vec![Layout::Partial]));
                }
            }
        }
        Op::GatherElements { axis } | Op::ScatterElements { axis, .. } => {
            // Along another axis, every operand has the result's extent there (indices
            // address positions along the op's own axis only).
            let ins: Option<Vec<Vec<u64>>> = data.operands.iter().map(|&v| dims(g, v)).collect();
            let Some(ins) = ins else { return out };
            for c in candidate_axes(r).into_iter().filter(|c| c != axis) {
                if divides(k, res[c]) && ins.iter().all(|d| d.len() == r && d[c] == res[c]) {
                    out.push(one(&axis_name(c, r), vec![s(c); nops], vec![s(c)]));
                }
            }
        }
        Op::Pool(_) | Op::BatchNorm { .. } => {
            for a in [0usize, 1]
                .into_iter()
                .filter(|&a| a < r && divides(k, res[a]))
            {
                // Batch norm's per-channel parameters split with the channels.
                let ops = (0..nops)
                    .map(|i| match (i, a) {
                        (0, _) => s(a),
                        (_, 1) => s(0),
                        _ => Layout::Replicated,
                    })
                    .collect();
                let name = if a == 0 { "batch" } else { "channels" };
                out.push(one(name, ops, vec![s(a)]));
            }
        }
        _ => {}
    }
    out
}

/// The device groups of a target's problem devices (see the module doc): `kind_of` gives each
/// problem device's kind, `links` the problem's links (`routers` are the other nodes).
pub fn device_groups(
    names: &[String],
    kind_of: &[String],
    routers: &[String],
    links: &[Link],
) -> Vec<DeviceGroup> {
    // Hops between devices, by breadth-first search over the links.
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, n) in names.iter().chain(routers).enumerate() {
        index.insert(n.as_str(), i);
    }
    let nodes = names.len() + routers.len();
    let mut adj = vec![Vec::new(); nodes];
    for l in links {
        if let (Some(&a), Some(&b)) = (index.get(l.a.as_str()), index.get(l.b.as_str())) {
            adj[a].push(b);
            adj[b].push(a);
        }
    }
    let hops_from = |s: usize| {
        let mut h = vec![usize::MAX; nodes];
        h[s] = 0;
        let mut q = VecDeque::from([s]);
        while let Some(v) = q.pop_front() {
            for &w in &adj[v] {
                if h[w] == usize::MAX {
                    h[w] = h[v] + 1;
                    q.push_back(w);
                }
            }
        }
        h
    };
    let mut kinds: Vec<&str> = Vec::new();
    for k in kind_of {
        if !kinds.contains(&k.as_str()) {
            kinds.push(k);
        }
    }
    let mut groups = Vec::new();
    for kind in kinds {
        let members: Vec<usize> = (0..names.len()).filter(|&i| kind_of[i] == kind).collect();
        if members.len() < 2 {
            continue;
        }
        // The ring order: nearest unvisited next.
        let mut order = vec![members[0]];
        let mut left: Vec<usize> = members[1..].to_vec();
        while !left.is_empty() {
            let h = hops_from(*order.last().unwrap_or(&members[0]));
            let (at, _) = left
                .iter()
                .enumerate()
                .min_by_key(|&(i, &m)| (h[m], i))
                .unwrap_or((0, &left[0]));
            order.push(left.remove(at));
        }
        let count = order.len();
        let most = count.min(crate::problem::MAX_GROUP_DEVICES);
        let mut sizes: Vec<usize> = (1..usize::BITS)
            .map(|b| 1usize << b)
            .take_while(|&s| s <= most)
            .collect();
        sizes.reverse();
        sizes.truncate(3);
        if !most.is_power_of_two() {
            sizes.insert(0, most);
        }
        sizes.sort_unstable();
        for s in sizes {
            for (i, block) in order.chunks_exact(s).enumerate() {
                groups.push(DeviceGroup {
                    name: format!("{kind}*{s}#{i}"),
                    devices: block.iter().map(|&m| names[m].clone()).collect(),
                });
            }
        }
    }
    groups
}
