//! Topology-aware multilevel partitioning: places a DAG on the devices of a multi-chip
//! module without asking its stages to be contiguous.
//!
//! 1. **Coarsening** by heavy-edge matching: nodes (at first the colocation units) are visited
//!    in index order, and each unmatched node merges with the unmatched neighbour it exchanges
//!    the most bytes with, provided some device can run both, their time (at the fastest
//!    allowed device) stays under 1.5 times the average a node of the target size has, and
//!    their memory under a quarter of the largest device's. A node left unmatched joins the
//!    cluster of its heaviest neighbour under the same caps. Levels repeat until about
//!    `max(8 · devices, 64)` nodes remain or a level shrinks the graph by less than 10 %.
//! 2. **Initial placement** of the coarsest nodes, in order of their first op (a topological
//!    order), each to the allowed device that keeps the bottleneck lowest, ties by the sum of
//!    squares of device and channel loads. Channel loads count a transfer on every channel of
//!    its route, so a node lands near the nodes it talks to (neighbouring chiplets on a mesh)
//!    unless balance says otherwise. A node no device can hold is placed unit by unit.
//! 3. **Uncoarsening with refinement**: the assignment is projected level by level; at each
//!    level, two passes of gain moves (Fiduccia-Mattheyses style, one node at a time to the
//!    devices of its three heaviest neighbours or the least loaded device), each
//!    kept when it lowers (bottleneck, sum of squares), memory checked exactly (received
//!    tensors included) by [`crate::strategy::local`]'s incremental state. The finest level
//!    is refined by [`crate::strategy::local::improve`] for the objective asked for (for
//!    latency, the coarser levels balance load and traffic, a proxy).
//!
//! **Complexity.** Each level is linear in nodes plus edges (sorting adjacency lists adds a
//! log); refinement costs O((ops + edges) · candidates + nodes · candidates · (devices +
//! channels)) per pass. Deterministic: index order everywhere, no randomness.
//!
//! **Source.** Karypis and Kumar, "A fast and high quality multilevel scheme for partitioning
//! irregular graphs" (METIS, SIAM J. Sci. Comput. 1998) and their multilevel k-way
//! refinement; Fiduccia and Mattheyses, "A linear-time heuristic for improving network
//! partitions" (DAC 1982); the topology-aware mapping of parts to processors follows the
//! process-mapping literature (e.g. Scotch's dual recursive bipartitioning, Pellegrini).

use crate::eval::violation;
use crate::problem::{Instance, ProblemError};
use crate::strategy::local::{self, NONE, State, better};
use crate::strategy::{Solution, SolveOptions, units};

/// Refinement passes per level.
pub const REFINE_PASSES: usize = 2;

/// One level of the hierarchy.
struct Level {
    /// The ops of each node.
    ops: Vec<Vec<usize>>,
    /// `allowed[node * d + k]`.
    allowed: Vec<bool>,
    /// Time at the fastest allowed device of each op, summed.
    weight: Vec<f64>,
    /// Own memory.
    memory: Vec<u64>,
    /// Neighbours with the bytes exchanged, sorted by neighbour.
    adj: Vec<Vec<(usize, u64)>>,
}

fn adjacency(inst: &Instance, node_of: &[usize], count: usize) -> Vec<Vec<(usize, u64)>> {
    let mut adj: Vec<Vec<(usize, u64)>> = vec![Vec::new(); count];
    for e in &inst.problem.edges {
        let (a, b) = (node_of[e.from], node_of[e.to]);
        if a != b {
            adj[a].push((b, e.bytes));
            adj[b].push((a, e.bytes));
        }
    }
    for list in &mut adj {
        list.sort_unstable();
        let mut out: Vec<(usize, u64)> = Vec::with_capacity(list.len());
        for &(x, w) in list.iter() {
            match out.last_mut() {
                Some(last) if last.0 == x => last.1 = last.1.saturating_add(w),
                _ => out.push((x, w)),
            }
        }
        *list = out;
    }
    adj
}

fn first_level(inst: &Instance) -> (Level, Vec<usize>) {
    let d = inst.d;
    let us = units(inst);
    let mut node_of = vec![0; inst.n];
    let mut allowed = vec![false; us.len() * d];
    let mut weight = Vec::with_capacity(us.len());
    let mut memory = Vec::with_capacity(us.len());
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            node_of[o] = i;
        }
        for k in 0..d {
            allowed[i * d + k] = u.iter().all(|&o| inst.allowed(o, k));
        }
        weight.push(u.iter().map(|&o| inst.min_time(o)).sum());
        memory.push(
            u.iter()
                .fold(0u64, |m, &o| m.saturating_add(inst.memory[o])),
        );
    }
    let adj = adjacency(inst, &node_of, us.len());
    (
        Level {
            ops: us,
            allowed,
            weight,
            memory,
            adj,
        },
        node_of,
    )
}

/// One round of heavy-edge matching; `None` when it would shrink the graph by under 10 %.
fn coarsen(inst: &Instance, lv: &Level, node_of: &mut [usize], target: usize) -> Option<Level> {
    let d = inst.d;
    let count = lv.ops.len();
    let total: f64 = lv.weight.iter().sum();
    let wcap = 1.5 * total / target as f64;
    let mcap = inst.capacity.iter().copied().max().unwrap_or(0) / 4;
    let mut mate = vec![usize::MAX; count];
    let mut merged = 0;
    for v in 0..count {
        if mate[v] != usize::MAX {
            continue;
        }
        let mut best: Option<(u64, usize)> = None;
        for &(u, w) in &lv.adj[v] {
            if mate[u] != usize::MAX
                || lv.weight[v] + lv.weight[u] > wcap
                || lv.memory[v].saturating_add(lv.memory[u]) > mcap
                || !(0..d).any(|k| lv.allowed[v * d + k] && lv.allowed[u * d + k])
            {
                continue;
            }
            if best.is_none_or(|(bw, bu)| w > bw || (w == bw && u < bu)) {
                best = Some((w, u));
            }
        }
        match best {
            Some((_, u)) => {
                mate[v] = u;
                mate[u] = v;
                merged += 1;
            }
            None => mate[v] = v,
        }
    }
    // Nodes left unmatched (their neighbours were all taken) join the cluster of their
    // heaviest neighbour when the caps allow (clusters of more than two, as in METIS's
    // handling of unmatched vertices), so coarsening does not stall.
    let mut root: Vec<usize> = (0..count).map(|v| v.min(mate[v])).collect();
    let mut cw: Vec<f64> = (0..count)
        .map(|v| {
            if mate[v] == v {
                lv.weight[v]
            } else {
                lv.weight[v] + lv.weight[mate[v]]
            }
        })
        .collect();
    let mut cm: Vec<u64> = (0..count)
        .map(|v| {
            if mate[v] == v {
                lv.memory[v]
            } else {
                lv.memory[v].saturating_add(lv.memory[mate[v]])
            }
        })
        .collect();
    let mut callowed: Vec<bool> = (0..count * d)
        .map(|i| {
            let (v, k) = (i / d, i % d);
            lv.allowed[v * d + k] && lv.allowed[mate[v] * d + k]
        })
        .collect();
    for v in 0..count {
        if mate[v] != v {
            continue;
        }
        let mut best: Option<(u64, usize)> = None;
        for &(u, w) in &lv.adj[v] {
            let r = root[u];
            if r == v
                || root[r] != r
                || cw[r] + lv.weight[v] > wcap
                || cm[r].saturating_add(lv.memory[v]) > mcap
                || !(0..d).any(|k| callowed[r * d + k] && lv.allowed[v * d + k])
            {
                continue;
            }
            if best.is_none_or(|(bw, bu)| w > bw || (w == bw && r < bu)) {
                best = Some((w, r));
            }
        }
        if let Some((_, r)) = best {
            root[v] = r;
            cw[r] += lv.weight[v];
            cm[r] = cm[r].saturating_add(lv.memory[v]);
            for k in 0..d {
                callowed[r * d + k] &= lv.allowed[v * d + k];
            }
            merged += 1;
        }
    }
    if merged * 10 < count {
        return None;
    }
    // New node ids in order of the cluster's first node.
    let mut new_id = vec![usize::MAX; count];
    let mut next = 0;
    for v in 0..count {
        let r = root[v];
        if new_id[r] == usize::MAX {
            new_id[r] = next;
            next += 1;
        }
        new_id[v] = new_id[r];
    }
    let mut ops = vec![Vec::new(); next];
    let mut allowed = vec![true; next * d];
    let mut weight = vec![0.0; next];
    let mut memory = vec![0u64; next];
    for (v, &c) in new_id.iter().enumerate() {
        ops[c].extend_from_slice(&lv.ops[v]);
        for k in 0..d {
            allowed[c * d + k] &= lv.allowed[v * d + k];
        }
        weight[c] += lv.weight[v];
        memory[c] = memory[c].saturating_add(lv.memory[v]);
    }
    for x in node_of.iter_mut() {
        *x = new_id[*x];
    }
    for list in &mut ops {
        list.sort_unstable();
    }
    let adj = adjacency(inst, node_of, next);
    Some(Level {
        ops,
        allowed,
        weight,
        memory,
        adj,
    })
}

/// Places every node of the coarsest level (see the module doc).
fn initial(inst: &Instance, lv: &Level, st: &mut State) -> Result<(), ProblemError> {
    let d = inst.d;
    let mut order: Vec<usize> = (0..lv.ops.len()).collect();
    order.sort_by_key(|&v| lv.ops[v][0]);
    let place = |st: &mut State, ops: &[usize]| -> bool {
        let mut best: Option<(f64, f64, usize)> = None;
        for k in 0..d {
            if !ops.iter().all(|&o| inst.allowed(o, k)) {
                continue;
            }
            if let Some((m, s)) = st.try_move(ops, k)
                && best.is_none_or(|(bm, bs, _)| better(m, s, bm, bs))
            {
                best = Some((m, s, k));
            }
        }
        best.is_some_and(|(_, _, k)| st.apply(ops, k))
    };
    let us = units(inst);
    let mut unit_of = vec![0; inst.n];
    for (i, u) in us.iter().enumerate() {
        for &o in u {
            unit_of[o] = i;
        }
    }
    for v in order {
        if place(st, &lv.ops[v]) {
            continue;
        }
        for &o in &lv.ops[v] {
            if st.assign[o] != NONE {
                continue;
            }
            let unit = &us[unit_of[o]];
            if !place(st, unit) {
                let own: u64 = unit
                    .iter()
                    .fold(0u64, |m, &x| m.saturating_add(inst.memory[x]));
                let room = (0..d)
                    .filter(|&k| inst.allowed(o, k))
                    .map(|k| st.free_memory(k))
                    .max()
                    .unwrap_or(0);
                return Err(ProblemError::Infeasible(format!(
                    "multilevel: no device can take `{}`: it needs {own} bytes of its own plus \
                     the tensors it receives, the roomiest allowed device has {room} bytes free",
                    inst.op_name(o)
                )));
            }
        }
    }
    Ok(())
}

/// The devices node `v` tries in refinement: the devices of the (at most) three neighbours
/// it exchanges the most bytes with, and the least loaded device it may run on (all allowed
/// devices when there are few).
fn node_candidates(inst: &Instance, lv: &Level, st: &State, v: usize, out: &mut Vec<usize>) {
    let d = inst.d;
    out.clear();
    let cur = st.assign[lv.ops[v][0]];
    if d <= local::ALL_DEVICES {
        out.extend((0..d).filter(|&k| k != cur && lv.allowed[v * d + k]));
        return;
    }
    let mut top: [(u64, usize); 3] = [(0, NONE); 3];
    for &(u, w) in &lv.adj[v] {
        let k = st.assign[lv.ops[u][0]];
        if k == cur || k == NONE || top.iter().any(|t| t.1 == k) {
            continue;
        }
        if let Some(i) = (0..3).find(|&i| w > top[i].0 || top[i].1 == NONE) {
            top[i..].rotate_right(1);
            top[i] = (w, k);
        }
    }
    out.extend(top.iter().map(|t| t.1).filter(|&k| k != NONE));
    if let Some(k) = (0..d)
        .filter(|&k| lv.allowed[v * d + k])
        .min_by(|&a, &b| st.load[a].total_cmp(&st.load[b]))
    {
        out.push(k);
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&k| k != cur && lv.allowed[v * d + k]);
}

/// Gain moves of the nodes of one level (see the module doc).
fn refine(inst: &Instance, lv: &Level, st: &mut State) {
    let mut cand = Vec::new();
    for _ in 0..REFINE_PASSES {
        let mut moved = false;
        let (mut m0, mut s0) = st.score();
        for (v, ops) in lv.ops.iter().enumerate() {
            node_candidates(inst, lv, st, v, &mut cand);
            let mut best: Option<(f64, f64, usize)> = None;
            for &k in &cand {
                if let Some((m, s)) = st.try_move(ops, k)
                    && better(m, s, m0, s0)
                    && best.is_none_or(|(bm, bs, _)| better(m, s, bm, bs))
                {
                    best = Some((m, s, k));
                }
            }
            if let Some((m, s, k)) = best
                && st.apply(ops, k)
            {
                (m0, s0) = (m, s);
                moved = true;
            }
        }
        let now = st.assign.clone();
        st.rebuild(&now);
        if !moved {
            break;
        }
    }
}

/// The multilevel plan (see the module doc).
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if inst.n == 0 {
        return Ok(Solution::in_problem_order(inst, Vec::new()));
    }
    let target = (8 * inst.d).max(64);
    let (first, mut node_of) = first_level(inst);
    let mut levels = vec![first];
    while levels[levels.len() - 1].ops.len() > target {
        match coarsen(inst, &levels[levels.len() - 1], &mut node_of, target) {
            Some(next) => levels.push(next),
            None => break,
        }
    }
    let mut st = State::new(inst, &vec![NONE; inst.n]);
    initial(inst, &levels[levels.len() - 1], &mut st)?;
    // Coarser levels first; the finest (units) is left to local search.
    for lv in levels.iter().skip(1).rev() {
        refine(inst, lv, &mut st);
    }
    let assign = st.assign;
    if let Some(why) = violation(inst, &assign) {
        return Err(ProblemError::Infeasible(format!("multilevel: {why}")));
    }
    Ok(local::improve(
        inst,
        Solution::in_problem_order(inst, assign),
        opts,
    ))
}
