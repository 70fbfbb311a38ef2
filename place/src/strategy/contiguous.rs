//! Contiguous splits of the DAG by dynamic programming over its ideals: the part of the `dp`
//! strategy that is exact on any graph, colocation groups included.
//!
//! **Units.** An op outside every colocation group is a unit; a colocation group is one
//! unit (its members share a device, so they share a stage). Units are ordered by their
//! first member in the problem's (topological) order. An edge between two units that goes
//! forward in that order is a *dependency*; an edge into an earlier unit is a *backward flow*:
//! it does not constrain the split and its tensor travels back along the chain, as a
//! pipeline's gradients do (a training step's backward op colocated with its forward op
//! makes exactly these).
//!
//! **Contiguous splits.** An *ideal* is a set of units closed under dependencies (with a
//! unit, every unit it depends on). A split is a chain of ideals `∅ = I0 ⊂ I1 ⊂ … ⊂ Im = all`;
//! stage `s` is `Is \ Is-1` and goes on the `s`-th of `m` devices taken in order from a chain
//! of devices (the chains of [`super::dp::chains`]). These are the contiguous subgraphs of
//! Tarnawski et al.: a stage is the difference of two downward-closed sets, so no dependency
//! path leaves a stage and comes back.
//!
//! **Model** (what the DP minimizes exactly, over every contiguous split on a chain):
//! - a stage may go on a device when every op in it may run there; its memory is the
//!   device's base memory plus its ops' memory plus every tensor it receives (one copy per
//!   tensor, produced outside the stage and read inside, forward or backward: what
//!   [`crate::eval::memory_use`] charges), within the device's capacity;
//! - its time is the device's base load plus its ops' times there;
//! - at the cut after ideal `I`, between consecutive used devices `a` then `b`, the tensors
//!   made in `I` and read outside it are forwarded from `a` to `b` (`transfer(a, b, F(I))`)
//!   and those made outside `I` and read inside it go back (`transfer(b, a, B(I))`); the two
//!   directions are separate channels, so the cut costs the larger for throughput and the
//!   sum for latency (no bytes, no cost);
//! - throughput: the largest stage or cut cost; latency: their sum.
//!
//! Devices that do not overlap transfers are not charged for them in this model; the plan is
//! evaluated by [`crate::eval::evaluate`] afterwards like any other.
//!
//! **Recurrence.** Ideals are processed by size. `G[j][I']`: best value with the units of
//! `I'` placed and the last stage on chain device `j`; `H[j][I]`: best value of starting a
//! stage on chain device `j` after ideal `I` (0 for `∅`, else the best `G[j'][I]`, `j' < j`,
//! combined with the cut from `j'` to `j`); `G[j][I'] = min over ideals I ⊂ I' of
//! comb(H[j][I], stage(I' \ I) on j)`, where the stage fits. Both combinations are monotone
//! (max, sum), so the optimum of a prefix is part of an optimum of the whole.
//!
//! **Size.** The ideals of a graph can be exponentially many. They are enumerated (an
//! explicit stack, one level per unit) up to [`MAX_IDEALS`]; the nested pairs, what reading
//! their stages costs, and the DP on every chain must fit [`MAX_WORK`]. When they do not,
//! consecutive units (in their order) are merged into blocks balanced by time, cutting the
//! number of blocks by a quarter until they fit, and the DP is exact over the splits whose stages are
//! unions of blocks: it then misses the splits that cut inside a block (the stated loss of
//! exactness; [`Family::exact`] says which case held).
//!
//! **Source.** Tarnawski, Phanishayee, Devanur, Mahajan, Nina Paravecino, "Efficient
//! Algorithms for Device Placement of DNN Graph Operators", NeurIPS 2020 (contiguous splits as
//! differences of ideals, the DP over ideals, coarsening when the ideals are too many).

use crate::eval::Objective;
use crate::problem::Instance;

/// The most ideals the DP runs over.
pub const MAX_IDEALS: usize = 2000;
/// The bound on the DP's work: nested pairs of ideals with the ops and edges their stages
/// read, the cut sizes, and the recurrence on every chain.
pub const MAX_WORK: u64 = 200_000_000;

/// The blocks and ideals the DP runs over.
#[derive(Clone, Debug)]
pub struct Family {
    /// The block of each op.
    pub block_of: Vec<usize>,
    /// The ops of each block, in op order.
    pub block_ops: Vec<Vec<usize>>,
    /// The ideals, as bitsets over blocks (`words` words each), by size: `∅` first and all
    /// blocks last.
    pub ideals: Vec<Vec<u64>>,
    /// Whether the blocks are the units themselves (every contiguous split is considered).
    pub exact: bool,
}

impl Family {
    fn new(block_of: Vec<usize>, blocks: usize, ideals: Vec<Vec<u64>>, exact: bool) -> Family {
        let mut block_ops = vec![Vec::new(); blocks];
        for (o, &b) in block_of.iter().enumerate() {
            block_ops[b].push(o);
        }
        Family {
            block_of,
            block_ops,
            ideals,
            exact,
        }
    }
}

/// The units of the module doc: the unit of each op, in the order of first members.
pub fn units(inst: &Instance) -> (Vec<usize>, usize) {
    let mut unit_of = vec![usize::MAX; inst.n];
    let mut group_unit = vec![usize::MAX; inst.groups.len()];
    let mut next = 0;
    for (slot, group) in unit_of.iter_mut().zip(&inst.group_of) {
        let u = match *group {
            Some(g) => {
                if group_unit[g] == usize::MAX {
                    group_unit[g] = next;
                    next += 1;
                }
                group_unit[g]
            }
            None => {
                next += 1;
                next - 1
            }
        };
        *slot = u;
    }
    (unit_of, next)
}

/// The dependencies of each block (forward edges between blocks, deduplicated), for a
/// block of each op.
fn block_preds(inst: &Instance, block_of: &[usize], blocks: usize) -> Vec<Vec<usize>> {
    let mut pairs: Vec<(usize, usize)> = inst
        .problem
        .edges
        .iter()
        .map(|e| (block_of[e.to], block_of[e.from]))
        .filter(|&(b, a)| a < b)
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); blocks];
    for (b, a) in pairs {
        preds[b].push(a);
    }
    preds
}

/// The blocks in `set`, in order.
fn members(set: &[u64]) -> impl Iterator<Item = usize> + '_ {
    set.iter().enumerate().flat_map(|(w, &word)| {
        let mut bits = word;
        std::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let t = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(w * 64 + t)
        })
    })
}

#[inline]
fn has(set: &[u64], b: usize) -> bool {
    set[b / 64] >> (b % 64) & 1 == 1
}

/// Every ideal of the block DAG, or `None` when there are more than `cap`.
fn enumerate(preds: &[Vec<usize>], cap: usize) -> Option<Vec<Vec<u64>>> {
    let b = preds.len();
    let words = b.div_ceil(64).max(1);
    let mut cur = vec![0u64; words];
    let mut out = Vec::new();
    // state[i]: 0 = include unit i next, 1 = exclude it next, 2 = both tried.
    let mut state = vec![0u8; b + 1];
    let mut i = 0usize;
    loop {
        if i == b {
            out.push(cur.clone());
            if out.len() > cap {
                return None;
            }
            if b == 0 {
                break;
            }
            i -= 1;
            continue;
        }
        match state[i] {
            0 => {
                state[i] = 1;
                if preds[i].iter().all(|&p| has(&cur, p)) {
                    cur[i / 64] |= 1 << (i % 64);
                    i += 1;
                    state[i] = 0;
                }
            }
            1 => {
                state[i] = 2;
                cur[i / 64] &= !(1 << (i % 64));
                i += 1;
                state[i] = 0;
            }
            _ => {
                cur[i / 64] &= !(1 << (i % 64));
                if i == 0 {
                    break;
                }
                i -= 1;
            }
        }
    }
    out.sort_by_key(|s| s.iter().map(|w| w.count_ones()).sum::<u32>());
    Some(out)
}

/// Units merged into at most `target` blocks of consecutive units, balanced half by time and
/// half by count; the block of each op.
fn coarsen(inst: &Instance, unit_of: &[usize], units: usize, target: usize) -> Vec<usize> {
    let mut unit_time = vec![0.0f64; units];
    for o in 0..inst.n {
        let t = inst.min_time(o);
        if t.is_finite() {
            unit_time[unit_of[o]] += t;
        }
    }
    let total: f64 = unit_time.iter().sum();
    let w = |u: usize| {
        let t = if total > 0.0 {
            unit_time[u] / total
        } else {
            0.0
        };
        t + 1.0 / units as f64
    };
    let step = 2.0 / target.max(1) as f64;
    let mut block = vec![0usize; units];
    let mut acc = 0.0;
    let mut b = 0;
    for (u, slot) in block.iter_mut().enumerate() {
        *slot = b;
        acc += w(u);
        if acc >= step && u + 1 < units {
            b += 1;
            acc = 0.0;
        }
    }
    unit_of.iter().map(|&u| block[u]).collect()
}

/// The ideals the DP runs over for `inst` with `chains` chains of `chain_len` devices (see
/// the module doc's Size).
pub fn family(inst: &Instance, chains: usize, chain_len: usize) -> Family {
    let (unit_of, units) = units(inst);
    let mut target = units.min(MAX_IDEALS);
    loop {
        let block_of = if target >= units {
            unit_of.clone()
        } else {
            coarsen(inst, &unit_of, units, target)
        };
        let blocks = block_of.iter().copied().max().map_or(0, |m| m + 1);
        let preds = block_preds(inst, &block_of, blocks);
        if let Some(ideals) = enumerate(&preds, MAX_IDEALS)
            && work(inst, &block_of, &ideals, chains, chain_len) <= MAX_WORK
        {
            return Family::new(block_of, blocks, ideals, blocks == units);
        }
        if blocks <= 1 {
            // One block has two ideals: the whole graph on one device of the chain.
            let ideals = vec![vec![0u64], vec![u64::from(blocks == 1)]];
            return Family::new(block_of, blocks, ideals, units <= 1);
        }
        // Strictly fewer each time (the balancing may give one block more than asked).
        target = (blocks * 3 / 4).min(target.saturating_sub(1)).max(1);
    }
}

/// Per ideal: ops, and edges into its ops.
fn sizes(inst: &Instance, fam_block_of: &[usize], ideals: &[Vec<u64>]) -> (Vec<u64>, Vec<u64>) {
    let blocks = fam_block_of.iter().copied().max().map_or(0, |m| m + 1);
    let mut ops = vec![0u64; blocks];
    let mut ins = vec![0u64; blocks];
    for (o, &b) in fam_block_of.iter().enumerate() {
        ops[b] += 1;
        ins[b] += inst.in_edges[o].len() as u64;
    }
    let mut io = Vec::with_capacity(ideals.len());
    let mut ii = Vec::with_capacity(ideals.len());
    for set in ideals {
        io.push(members(set).map(|b| ops[b]).sum());
        ii.push(members(set).map(|b| ins[b]).sum());
    }
    (io, ii)
}

fn subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(x, y)| x & !y == 0)
}

/// The DP's work on these ideals (see [`MAX_WORK`]); saturates early once over it.
fn work(
    inst: &Instance,
    block_of: &[usize],
    ideals: &[Vec<u64>],
    chains: usize,
    chain_len: usize,
) -> u64 {
    let n = ideals.len() as u64;
    let words = ideals.first().map_or(1, Vec::len) as u64;
    let l = chain_len as u64;
    let c = chains as u64;
    let mut w = n
        .saturating_mul(n)
        .saturating_mul(words)
        .saturating_add(n.saturating_mul(
            (inst.problem.edges.len() as u64).saturating_add((inst.n * inst.d) as u64),
        ))
        .saturating_add(n.saturating_mul(l).saturating_mul(l).saturating_mul(c));
    if w > MAX_WORK {
        return w;
    }
    let (ops, ins) = sizes(inst, block_of, ideals);
    for b in 0..ideals.len() {
        for a in 0..b {
            if ops[a] < ops[b] && subset(&ideals[a], &ideals[b]) {
                w = w
                    .saturating_add(ops[b] - ops[a] + ins[b] - ins[a])
                    .saturating_add(l * c);
            }
        }
        if w > MAX_WORK {
            return w;
        }
    }
    w
}

/// The best contiguous split on one chain of devices under the module's model.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    /// The model's value.
    pub value: f64,
    /// The device of each op.
    pub assign: Vec<usize>,
}

/// The tables every chain shares.
struct Tables {
    /// Pairs `(smaller, memory of the stage between them)` into each ideal.
    into: Vec<Vec<(usize, u64)>>,
    /// `time[i * d + k]`: the ops of ideal `i` on device `k` (allowed ones only).
    time: Vec<f64>,
    /// `bad[i * d + k]`: ops of ideal `i` that cannot run on device `k`.
    bad: Vec<u32>,
    /// Bytes made inside each ideal and read outside it, and the reverse.
    fwd: Vec<u64>,
    back: Vec<u64>,
}

fn tables(inst: &Instance, fam: &Family) -> Tables {
    let d = inst.d;
    let ni = fam.ideals.len();
    // The consumers of each tensor.
    let key_of_edge = &inst.tensor_of_edge;
    let key_bytes = &inst.tensor_bytes;
    let key_from = &inst.tensor_from;
    let mut key_to: Vec<Vec<usize>> = vec![Vec::new(); key_from.len()];
    for (e, edge) in inst.problem.edges.iter().enumerate() {
        key_to[key_of_edge[e]].push(edge.to);
    }
    let bo = &fam.block_of;
    let mut time = vec![0.0f64; ni * d];
    let mut bad = vec![0u32; ni * d];
    let mut fwd = vec![0u64; ni];
    let mut back = vec![0u64; ni];
    for (i, set) in fam.ideals.iter().enumerate() {
        for b in members(set) {
            for &o in &fam.block_ops[b] {
                for k in 0..d {
                    if inst.allowed(o, k) {
                        time[i * d + k] += inst.t(o, k);
                    } else {
                        bad[i * d + k] += 1;
                    }
                }
            }
        }
        for (key, &from) in key_from.iter().enumerate() {
            let inside = has(set, bo[from]);
            if key_to[key].iter().any(|&c| has(set, bo[c]) != inside) {
                if inside {
                    fwd[i] = fwd[i].saturating_add(key_bytes[key]);
                } else {
                    back[i] = back[i].saturating_add(key_bytes[key]);
                }
            }
        }
    }
    // Nested pairs, with their stage's memory: its ops' and what it receives.
    let mut into: Vec<Vec<(usize, u64)>> = vec![Vec::new(); ni];
    let mut stamp = vec![usize::MAX; key_bytes.len()];
    let mut pair_id = 0usize;
    let words = fam.ideals.first().map_or(1, Vec::len);
    let mut stage = vec![0u64; words];
    for (b, big) in fam.ideals.iter().enumerate() {
        for (a, small) in fam.ideals[..b].iter().enumerate() {
            if small == big || !subset(small, big) {
                continue;
            }
            for w in 0..words {
                stage[w] = big[w] & !small[w];
            }
            let mut mem = 0u64;
            for blk in members(&stage) {
                for &o in &fam.block_ops[blk] {
                    mem = mem.saturating_add(inst.memory[o]);
                    for &e in &inst.in_edges[o] {
                        let key = key_of_edge[e];
                        if !has(&stage, bo[inst.problem.edges[e].from]) && stamp[key] != pair_id {
                            stamp[key] = pair_id;
                            mem = mem.saturating_add(key_bytes[key]);
                        }
                    }
                }
            }
            pair_id += 1;
            into[b].push((a, mem));
        }
    }
    Tables {
        into,
        time,
        bad,
        fwd,
        back,
    }
}

/// The best contiguous split of `inst` on `chain` (device indices, each at most once) over
/// the splits `fam` allows, or `None` when none fits.
pub fn best_on_chain(
    inst: &Instance,
    fam: &Family,
    chain: &[usize],
    objective: Objective,
) -> Option<Split> {
    best_with(inst, fam, &tables(inst, fam), chain, objective)
}

fn best_with(
    inst: &Instance,
    fam: &Family,
    tab: &Tables,
    chain: &[usize],
    objective: Objective,
) -> Option<Split> {
    let d = inst.d;
    let ni = fam.ideals.len();
    let l = chain.len();
    if ni < 2 || l == 0 {
        return None;
    }
    let comb = |x: f64, y: f64| match objective {
        Objective::Throughput => x.max(y),
        Objective::Latency => x + y,
    };
    let cut = |from: usize, to: usize, i: usize| {
        let f = if tab.fwd[i] > 0 {
            inst.transfer(from, to, tab.fwd[i])
        } else {
            0.0
        };
        let b = if tab.back[i] > 0 {
            inst.transfer(to, from, tab.back[i])
        } else {
            0.0
        };
        comb(f, b)
    };
    let mut g = vec![f64::INFINITY; l * ni];
    let mut g_arg = vec![0usize; l * ni];
    let mut h = vec![f64::INFINITY; l * ni];
    let mut h_arg = vec![0usize; l * ni];
    for j in 0..l {
        h[j * ni] = 0.0;
    }
    for b in 1..ni {
        for &(a, mem) in &tab.into[b] {
            for (j, &k) in chain.iter().enumerate() {
                let enter = h[j * ni + a];
                if !enter.is_finite()
                    || tab.bad[b * d + k] != tab.bad[a * d + k]
                    || mem.saturating_add(inst.base_memory[k]) > inst.capacity[k]
                {
                    continue;
                }
                let t = inst.base_load[k] + (tab.time[b * d + k] - tab.time[a * d + k]);
                let v = comb(enter, t);
                if v < g[j * ni + b] {
                    g[j * ni + b] = v;
                    g_arg[j * ni + b] = a;
                }
            }
        }
        if b == ni - 1 {
            break;
        }
        for j in 1..l {
            for jp in 0..j {
                let prev = g[jp * ni + b];
                if !prev.is_finite() {
                    continue;
                }
                let v = comb(prev, cut(chain[jp], chain[j], b));
                if v < h[j * ni + b] {
                    h[j * ni + b] = v;
                    h_arg[j * ni + b] = jp;
                }
            }
        }
    }
    let last = ni - 1;
    let jend = (0..l)
        .filter(|&j| g[j * ni + last].is_finite())
        .min_by(|&x, &y| g[x * ni + last].total_cmp(&g[y * ni + last]))?;
    let mut assign = vec![0usize; inst.n];
    let (mut j, mut b) = (jend, last);
    while b > 0 {
        let a = g_arg[j * ni + b];
        for blk in members(&fam.ideals[b]) {
            if !has(&fam.ideals[a], blk) {
                for &o in &fam.block_ops[blk] {
                    assign[o] = chain[j];
                }
            }
        }
        if a > 0 {
            j = h_arg[j * ni + a];
        }
        b = a;
    }
    Some(Split {
        value: g[jend * ni + last],
        assign,
    })
}

/// The best split on every chain (one family and one set of tables for all of them).
pub fn splits(
    inst: &Instance,
    chains: &[Vec<usize>],
    objective: Objective,
) -> (Family, Vec<Split>) {
    let len = chains.iter().map(Vec::len).max().unwrap_or(0);
    let fam = family(inst, chains.len(), len);
    let tab = tables(inst, &fam);
    let out = chains
        .iter()
        .filter_map(|c| best_with(inst, &fam, &tab, c, objective))
        .collect();
    (fam, out)
}
