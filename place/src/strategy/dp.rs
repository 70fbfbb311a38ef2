//! Pipeline stages by dynamic programming, two searches whose plans are both evaluated by
//! [`crate::eval::evaluate`], the better kept:
//!
//! - [`super::contiguous`]: the contiguous splits of the DAG (stages as differences of
//!   ideals, colocation groups as units, backward flows allowed), exact over all of them up
//!   to its size limits, over unions of blocks above them;
//! - [`linear`], below: the ops in the problem's topological order cut into consecutive
//!   stages, each stage on one device, the stages following a chain of devices (a stage may
//!   be empty, so any subsequence of the chain is used). It is exact over single ops up to
//!   3,000 of them (blocks of the order above), but never cuts inside a colocation group's
//!   span.
//!
//! **Model of the order's cuts** (exact for it): a stage's time on its device is the sum of its ops' times there;
//! a stage may go on a device only when every op in it may run there; its memory is its ops'
//! memory plus every tensor it receives from earlier stages (one copy per tensor, as in
//! [`crate::eval`], so the plan's real memory is what the DP checked); a colocation group is
//! never cut (a cut inside a group's span is not allowed). Between consecutive used devices,
//! every tensor made before the cut and used after it is forwarded once, costing
//! `transfer(previous device, next device, bytes)`. Throughput: the largest stage time or
//! forwarding time; latency: the sum of stage times and forwarding times. The plan found is
//! then evaluated by [`crate::eval::evaluate`] (direct routes, not forwarding), and the best
//! real plan over the chains tried is returned.
//!
//! Devices that do not overlap transfers (`overlap = false`) are not charged for the
//! forwarding in the DP's model (a stage's time would depend on the next stage's device);
//! the evaluation of its plan charges them, so for such targets the DP is a heuristic.
//!
//! **Chains.** With at most 4 devices, every permutation; otherwise the topology path (start
//! at device 0, repeatedly step to the nearest unvisited device by hops, lowest index on
//! ties: a snake on a mesh) and its reverse.
//!
//! **Recurrence.** `G[j][i]`: best value with ops `[0, i)` placed and the last stage ending at
//! `i` on chain device `j`; `H[j][a]`: best value of entering chain device `j` at cut `a`
//! (the best `G[j'][a]`, `j' < j`, combined with the forwarding from `j'` to `j`). Then
//! `G[j][i] = min over a of comb(H[j][a], stage(a, i) on j)` with memory and support checked.
//! Work O(L·B² + L²·B + B·E) per chain for B blocks, L devices, E edges.
//!
//! **Size.** Exact over single ops for up to [`MAX_BLOCKS`] ops; above that, consecutive ops
//! are first merged into at most that many blocks (balanced by time, fewer when B·E would
//! pass [`MAX_WORK`]), and the DP is exact over blocks.
//!
//! **Source.** The classic chain-partitioning DP for pipeline stages (Bokhari, "Partitioning
//! problems in parallel, pipelined and distributed computing", IEEE TC 1988; as used for
//! pipeline-parallel DNN training by PipeDream, Narayanan et al., SOSP 2019).

use crate::eval::{Objective, evaluate, problem_order, violation};
use crate::problem::{Instance, ProblemError};
use crate::strategy::{Solution, SolveOptions, better, contiguous, score};

/// The most blocks the DP runs over (one op per block up to this many ops).
pub const MAX_BLOCKS: usize = 3000;
/// The bound on blocks × edges (the memory sweeps' work).
pub const MAX_WORK: usize = 400_000_000;

/// The device chains tried (see the module doc).
pub fn chains(inst: &Instance) -> Vec<Vec<usize>> {
    let d = inst.d;
    if d <= 4 {
        let mut out = Vec::new();
        let mut p: Vec<usize> = (0..d).collect();
        loop {
            out.push(p.clone());
            // Next permutation in lexicographic order.
            let Some(i) = (0..d.saturating_sub(1)).rev().find(|&i| p[i] < p[i + 1]) else {
                break;
            };
            let j = (i + 1..d).rev().find(|&j| p[j] > p[i]).unwrap_or(i + 1);
            p.swap(i, j);
            p[i + 1..].reverse();
        }
        return out;
    }
    let mut path = vec![0];
    let mut seen = vec![false; d];
    seen[0] = true;
    while path.len() < d {
        let at = path[path.len() - 1];
        let next = (0..d)
            .filter(|&k| !seen[k])
            .min_by_key(|&k| (inst.hops[at * d + k], k))
            .unwrap_or(0);
        seen[next] = true;
        path.push(next);
    }
    let rev: Vec<usize> = path.iter().rev().copied().collect();
    vec![path, rev]
}

/// Consecutive op ranges `[start, end)`, cut only where no colocation group spans the cut.
fn blocks(inst: &Instance) -> Vec<(usize, usize)> {
    let n = inst.n;
    // cut_ok[i]: a cut before op i separates no group.
    let mut span = vec![0i64; n + 1];
    for g in &inst.groups {
        let (lo, hi) = (g[0], g[g.len() - 1]);
        span[lo + 1] += 1;
        span[hi + 1] -= 1;
    }
    let mut inside = 0;
    let mut cut_ok = vec![true; n + 1];
    for (i, ok) in cut_ok.iter_mut().enumerate().take(n + 1) {
        inside += span[i];
        *ok = inside == 0;
    }
    let cap = MAX_BLOCKS.min((MAX_WORK / (inst.problem.edges.len() + n + 1)).max(64));
    let total: f64 = (0..n).map(|o| inst.min_time(o)).sum();
    // Weights sum to 2: half by time, half by count.
    let w = |o: usize| {
        let t = if total > 0.0 {
            inst.min_time(o) / total
        } else {
            0.0
        };
        t + 1.0 / n as f64
    };
    let target = if n <= cap { 0.0 } else { 2.0 / cap as f64 };
    let mut out = Vec::new();
    let mut start = 0;
    let mut acc = 0.0;
    for o in 0..n {
        acc += w(o);
        if o + 1 < n && cut_ok[o + 1] && acc >= target {
            out.push((start, o + 1));
            start = o + 1;
            acc = 0.0;
        }
    }
    if start < n {
        out.push((start, n));
    }
    out
}

/// The best plan of the two searches (see the module doc): the contiguous splits of the DAG
/// and the cuts of the one op order, each plan evaluated; the order's error when neither
/// finds a plan.
pub fn solve(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    if inst.n == 0 {
        return Ok(Solution::in_problem_order(inst, Vec::new()));
    }
    let order = problem_order(inst);
    let (_, splits) = contiguous::splits(inst, &chains(inst), opts.objective);
    let mut best: Option<((f64, f64), Vec<usize>)> = None;
    let lin = linear(inst, opts);
    let candidates = splits
        .into_iter()
        .map(|s| s.assign)
        .chain(lin.as_ref().ok().map(|s| s.assign.clone()));
    for assign in candidates {
        if violation(inst, &assign).is_some() {
            continue;
        }
        let sc = score(&evaluate(inst, &assign, &order), opts.objective);
        if best.as_ref().is_none_or(|(b, _)| better(sc, *b)) {
            best = Some((sc, assign));
        }
    }
    match best {
        Some((_, assign)) => Ok(Solution::in_problem_order(inst, assign)),
        None => lin,
    }
}

/// The best cut of the problem's op order into stages (see the module doc).
pub fn linear(inst: &Instance, opts: &SolveOptions) -> Result<Solution, ProblemError> {
    let n = inst.n;
    if n == 0 {
        return Ok(Solution::in_problem_order(inst, Vec::new()));
    }
    let d = inst.d;
    let bl = blocks(inst);
    let nb = bl.len();
    let mut block_of = vec![0; n];
    for (b, &(s, e)) in bl.iter().enumerate() {
        block_of[s..e].iter_mut().for_each(|x| *x = b);
    }
    // Per device: prefix sums of block times, and the first block of the allowed run ending
    // at each cut.
    let mut pre = vec![0.0f64; d * (nb + 1)];
    let mut lo = vec![0usize; d * (nb + 1)];
    for k in 0..d {
        for (b, &(s, e)) in bl.iter().enumerate() {
            let ok = (s..e).all(|o| inst.allowed(o, k));
            let t: f64 = if ok {
                (s..e).map(|o| inst.t(o, k)).sum()
            } else {
                0.0
            };
            pre[k * (nb + 1) + b + 1] = pre[k * (nb + 1) + b] + t;
            lo[k * (nb + 1) + b + 1] = if ok { lo[k * (nb + 1) + b] } else { b + 1 };
        }
    }
    let mut opmem = vec![0u64; nb];
    for o in 0..n {
        opmem[block_of[o]] = opmem[block_of[o]].saturating_add(inst.memory[o]);
    }
    // Tensors: bytes, producer block; per block the distinct tensors it uses from earlier
    // blocks; the bytes alive across each cut.
    let mut key_bytes: Vec<u64> = Vec::new();
    let mut key_pb: Vec<usize> = Vec::new();
    let mut uses: Vec<Vec<usize>> = vec![Vec::new(); nb];
    let mut cut_delta = vec![0i128; nb + 2];
    let mut tensors: Vec<(u32, usize, usize)> = Vec::new();
    for u in 0..n {
        tensors.clear();
        let pb = block_of[u];
        for &e in &inst.out_edges[u] {
            let edge = &inst.problem.edges[e];
            let cb = block_of[edge.to];
            if cb == pb {
                continue;
            }
            let pos = match tensors.iter().position(|t| t.0 == edge.tensor) {
                Some(p) => p,
                None => {
                    key_bytes.push(edge.bytes);
                    key_pb.push(pb);
                    tensors.push((edge.tensor, key_bytes.len() - 1, pb));
                    tensors.len() - 1
                }
            };
            let key = tensors[pos].1;
            tensors[pos].2 = tensors[pos].2.max(cb);
            if !uses[cb].contains(&key) {
                uses[cb].push(key);
            }
        }
        for &(_, key, last) in &tensors {
            cut_delta[pb + 1] += i128::from(key_bytes[key]);
            cut_delta[last + 1] -= i128::from(key_bytes[key]);
        }
    }
    let mut cut = vec![0u64; nb + 1];
    let mut acc = 0i128;
    for (i, c) in cut.iter_mut().enumerate() {
        acc += cut_delta[i];
        *c = acc.max(0) as u64;
    }
    let maxcap = inst.capacity.iter().copied().max().unwrap_or(0);
    let comb = |x: f64, y: f64| match opts.objective {
        Objective::Throughput => x.max(y),
        Objective::Latency => x + y,
    };
    let order = problem_order(inst);
    let mut best: Option<(f64, Vec<usize>)> = None;
    let mut furthest = 0usize;
    let mut stamp = vec![usize::MAX; key_bytes.len()];
    for chain in chains(inst) {
        let l = chain.len();
        let w = nb + 1;
        let mut g = vec![f64::INFINITY; l * w];
        let mut g_arg = vec![0usize; l * w];
        let mut h = vec![f64::INFINITY; l * w];
        let mut h_arg = vec![usize::MAX; l * w];
        for a in 0..nb {
            // Entering each chain device at cut a.
            for j in 0..l {
                if a == 0 {
                    h[j * w] = 0.0;
                    continue;
                }
                for jp in 0..j {
                    let prev = g[jp * w + a];
                    if !prev.is_finite() {
                        continue;
                    }
                    let t = if cut[a] > 0 {
                        inst.transfer(chain[jp], chain[j], cut[a])
                    } else {
                        0.0
                    };
                    let v = comb(prev, t);
                    if v < h[j * w + a] {
                        h[j * w + a] = v;
                        h_arg[j * w + a] = jp;
                    }
                }
            }
            if (0..l).all(|j| !h[j * w + a].is_finite()) {
                continue;
            }
            // Stages [a, i) for growing i, memory swept incrementally.
            let mut mem = 0u64;
            for i in a + 1..=nb {
                let b = i - 1;
                mem = mem.saturating_add(opmem[b]);
                for &key in &uses[b] {
                    if key_pb[key] < a && stamp[key] != a {
                        stamp[key] = a;
                        mem = mem.saturating_add(key_bytes[key]);
                    }
                }
                if mem > maxcap {
                    break;
                }
                let mut any = false;
                for j in 0..l {
                    let k = chain[j];
                    if a < lo[k * w + i] {
                        continue;
                    }
                    any = true;
                    let enter = h[j * w + a];
                    if !enter.is_finite() || mem > inst.capacity[k] {
                        continue;
                    }
                    let v = comb(enter, pre[k * w + i] - pre[k * w + a]);
                    if v < g[j * w + i] {
                        g[j * w + i] = v;
                        g_arg[j * w + i] = a;
                        furthest = furthest.max(i);
                    }
                }
                if !any {
                    break;
                }
            }
        }
        stamp.iter_mut().for_each(|s| *s = usize::MAX);
        let Some(jend) = (0..l)
            .filter(|&j| g[j * w + nb].is_finite())
            .min_by(|&x, &y| g[x * w + nb].total_cmp(&g[y * w + nb]))
        else {
            continue;
        };
        // Walk the stages back.
        let mut assign = vec![0usize; n];
        let (mut j, mut i) = (jend, nb);
        while i > 0 {
            let a = g_arg[j * w + i];
            let (s, e) = (bl[a].0, bl[i - 1].1);
            assign[s..e].iter_mut().for_each(|x| *x = chain[j]);
            if a > 0 {
                j = h_arg[j * w + a];
            }
            i = a;
        }
        if violation(inst, &assign).is_some() {
            continue;
        }
        let v = evaluate(inst, &assign, &order).value(opts.objective);
        if best.as_ref().is_none_or(|(bv, _)| v < *bv) {
            best = Some((v, assign));
        }
    }
    match best {
        Some((_, assign)) => Ok(Solution::in_problem_order(inst, assign)),
        None => {
            let o = bl[furthest.min(nb - 1)].0;
            Err(ProblemError::Infeasible(format!(
                "dp: no split into contiguous stages fits; no stage can take op `{}` after \
                 the ops before it (support, memory: its block needs {} bytes of its own, the \
                 largest device holds {maxcap})",
                inst.op_name(o),
                opmem[furthest.min(nb - 1)]
            )))
        }
    }
}
