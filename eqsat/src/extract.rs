//! Extraction: the cheapest equivalent graph out of an e-graph, counting a shared subterm
//! once.
//!
//! Greedy over the DAG (the "greedy DAG" extractor of the extraction literature): each class
//! keeps its best node together with the set of classes that node's subgraph needs, each
//! with its own node's cost, and the class's cost is the sum over that set, so a subterm two
//! parents share is paid once. Classes improve until nothing changes (a worklist over
//! parents). The result is not always optimal: each class commits to one set, and two
//! parents may prefer different sets for a shared child.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use egg::Id;

use crate::analysis::TEGraph;
use crate::lang::TNode;

/// Cost of a node that cannot be used (it does not type-check, or no device can run it).
pub const UNUSABLE: f64 = f64::INFINITY;

#[derive(Clone)]
struct Best {
    total: f64,
    node: usize,
    needs: Rc<BTreeMap<Id, f64>>,
}

/// The chosen node of every class the roots need, and the total cost (each class once).
#[derive(Clone, Debug)]
pub struct Extraction {
    /// Chosen node per canonical class.
    pub choice: BTreeMap<Id, TNode>,
    /// Sum of the chosen nodes' costs over the classes the roots need.
    pub cost: f64,
    /// The greedy best node of every class that has one (not only those the roots need),
    /// for improving the choice afterwards.
    pub best: BTreeMap<Id, TNode>,
}

/// Extracts the cheapest graph for `roots` under `cost` (per node, children excluded).
pub fn greedy_dag(
    egraph: &TEGraph,
    roots: &[Id],
    mut cost: impl FnMut(&TEGraph, &TNode) -> f64,
) -> Option<Extraction> {
    let classes: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    let mut node_costs: BTreeMap<Id, Vec<f64>> = BTreeMap::new();
    let mut parents: BTreeMap<Id, BTreeSet<Id>> = BTreeMap::new();
    for &c in &classes {
        let costs = egraph[c].nodes.iter().map(|n| cost(egraph, n)).collect();
        node_costs.insert(c, costs);
        for n in &egraph[c].nodes {
            for &ch in egg::Language::children(n) {
                parents.entry(egraph.find(ch)).or_default().insert(c);
            }
        }
    }
    let mut best: BTreeMap<Id, Best> = BTreeMap::new();
    let mut queue: VecDeque<Id> = classes.iter().copied().collect();
    let mut queued: BTreeSet<Id> = classes.iter().copied().collect();
    while let Some(c) = queue.pop_front() {
        queued.remove(&c);
        let mut improved = false;
        for (i, n) in egraph[c].nodes.iter().enumerate() {
            let own = node_costs[&c][i];
            if !own.is_finite() {
                continue;
            }
            let kids: Vec<Id> = egg::Language::children(n)
                .iter()
                .map(|&k| egraph.find(k))
                .collect();
            let Some(kid_best) = kids.iter().map(|k| best.get(k)).collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            // Quick bound: the union costs at least the costliest child's set.
            let floor = kid_best.iter().map(|b| b.total).fold(0.0, f64::max) + own;
            if best.get(&c).is_some_and(|b| b.total <= floor) {
                continue;
            }
            let mut needs: BTreeMap<Id, f64> = match kid_best
                .iter()
                .max_by(|a, b| a.needs.len().cmp(&b.needs.len()))
            {
                Some(b) => (*b.needs).clone(),
                None => BTreeMap::new(),
            };
            for b in &kid_best {
                for (&k, &v) in b.needs.iter() {
                    needs.entry(k).or_insert(v);
                }
            }
            if needs.contains_key(&c) {
                continue; // a cycle through this class
            }
            needs.insert(c, own);
            let total: f64 = needs.values().sum();
            if best.get(&c).is_none_or(|b| total < b.total) {
                best.insert(
                    c,
                    Best {
                        total,
                        node: i,
                        needs: Rc::new(needs),
                    },
                );
                improved = true;
            }
        }
        if improved && let Some(ps) = parents.get(&c) {
            for &p in ps {
                if queued.insert(p) {
                    queue.push_back(p);
                }
            }
        }
    }
    // Read the choice top-down from the roots, and its cost with every class once.
    let mut choice: BTreeMap<Id, TNode> = BTreeMap::new();
    let mut total = 0.0;
    let mut stack: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    while let Some(c) = stack.pop() {
        if choice.contains_key(&c) {
            continue;
        }
        let b = best.get(&c)?;
        let node = egraph[c].nodes[b.node].clone();
        total += node_costs[&c][b.node];
        for &k in egg::Language::children(&node) {
            stack.push(egraph.find(k));
        }
        choice.insert(c, node);
    }
    let all_best = best
        .iter()
        .map(|(&c, b)| (c, egraph[c].nodes[b.node].clone()))
        .collect();
    let mut ex = Extraction {
        choice,
        cost: total,
        best: all_best,
    };
    improve_groups(egraph, roots, &mut ex, &mut cost);
    Some(ex)
}

/// The choice reached from `roots` when `pick` decides classes it holds and the greedy best
/// the rest, with its cost; `None` on a cycle or a class without a node.
fn resolve(
    egraph: &TEGraph,
    roots: &[Id],
    pick: &BTreeMap<Id, TNode>,
    best: &BTreeMap<Id, TNode>,
    cost: &mut impl FnMut(&TEGraph, &TNode) -> f64,
) -> Option<(BTreeMap<Id, TNode>, f64)> {
    let mut choice: BTreeMap<Id, TNode> = BTreeMap::new();
    let mut total = 0.0;
    // Depth-first with an explicit stack; `open` marks classes on the current path.
    let mut open: BTreeSet<Id> = BTreeSet::new();
    let mut stack: Vec<(Id, bool)> = roots
        .iter()
        .rev()
        .map(|&r| (egraph.find(r), false))
        .collect();
    while let Some((c, done)) = stack.pop() {
        if done {
            open.remove(&c);
            continue;
        }
        if choice.contains_key(&c) {
            continue;
        }
        if !open.insert(c) {
            return None; // a cycle
        }
        let node = pick.get(&c).or_else(|| best.get(&c))?.clone();
        total += cost(egraph, &node);
        stack.push((c, true));
        for &k in egg::Language::children(&node) {
            let k = egraph.find(k);
            if !choice.contains_key(&k) {
                stack.push((k, false));
            }
        }
        choice.insert(c, node);
    }
    Some((choice, total))
}

/// Group moves for what a per-class greedy cannot see: several classes that can all be read
/// from one multi-result op (the pieces of a `split` left by merging matmuls) are cheap only
/// together. For each such op, switch every chosen class that has a `get` of it at once, and
/// keep the switch when the whole extraction gets cheaper. Repeats until nothing improves.
fn improve_groups(
    egraph: &TEGraph,
    roots: &[Id],
    ex: &mut Extraction,
    cost: &mut impl FnMut(&TEGraph, &TNode) -> f64,
) {
    // The classes holding a `get` of each multi-result class.
    let mut groups: BTreeMap<Id, Vec<(Id, TNode)>> = BTreeMap::new();
    for class in egraph.classes() {
        for n in &class.nodes {
            if let TNode::Get(_, [t]) = n {
                groups
                    .entry(egraph.find(*t))
                    .or_default()
                    .push((class.id, n.clone()));
            }
        }
    }
    for _ in 0..8 {
        let mut improved = false;
        for members in groups.values() {
            let mut pick: BTreeMap<Id, TNode> = ex.choice.clone();
            let mut switched = 0;
            for (class, node) in members {
                if let Some(current) = pick.get(class)
                    && current != node
                {
                    pick.insert(*class, node.clone());
                    switched += 1;
                }
            }
            if switched < 2 {
                continue;
            }
            // Classes newly needed (the pieces' producer and below) follow the greedy best.
            if let Some((choice, total)) = resolve(egraph, roots, &pick, &ex.best, cost)
                && total < ex.cost * (1.0 - 1e-9)
            {
                ex.choice = choice;
                ex.cost = total;
                improved = true;
            }
        }
        if !improved {
            break;
        }
    }
}

/// The optimal extraction by integer programming (the pure-Rust microlp solver), for
/// e-graphs whose part reachable from the roots has at most `node_limit` usable nodes; not
/// found when it is larger, or the solver fails or has no solution within its `budget`.
///
/// Binary `x_n` picks node `n`, binary `a_c` marks class `c` as needed: every root is
/// needed, a needed class picks exactly one node, a picked node needs its children's
/// classes, and (only when the usable nodes make a cycle) a level `t_c` per class that grows
/// along picked edges rules out cycles. The objective is the sum of picked nodes' costs, so
/// shared classes count once.
///
/// When `greedy` (the greedy extraction's cost) is given, the LP relaxation is solved first:
/// its optimum bounds every extraction from below, so when the greedy one meets it the
/// search is skipped and the result is [`Exact::GreedyOptimal`]. The branch and bound gets
/// the nodes [`ExactBudget`] gives a problem of its size (the best solution found within
/// them when it runs out; the same on any machine).
pub fn exact_ilp(
    egraph: &TEGraph,
    roots: &[Id],
    mut cost: impl FnMut(&TEGraph, &TNode) -> f64,
    node_limit: usize,
    budget: ExactBudget,
    greedy: Option<f64>,
) -> Exact {
    // The classes reachable from the roots.
    let mut classes: Vec<Id> = Vec::new();
    let mut seen: BTreeSet<Id> = BTreeSet::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        classes.push(c);
        for n in &egraph[c].nodes {
            for &k in egg::Language::children(n) {
                stack.push(egraph.find(k));
            }
        }
    }
    let index: BTreeMap<Id, usize> = classes.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    let mut nodes: Vec<(usize, usize, f64)> = Vec::new(); // (class index, node index, cost)
    for (ci, &c) in classes.iter().enumerate() {
        for (ni, n) in egraph[c].nodes.iter().enumerate() {
            let k = cost(egraph, n);
            let self_loop = egg::Language::children(n)
                .iter()
                .any(|&ch| egraph.find(ch) == c);
            if k.is_finite() && !self_loop {
                nodes.push((ci, ni, k));
            }
        }
    }
    if nodes.len() > node_limit {
        return Exact::TooLarge;
    }
    let program = Program {
        egraph,
        roots,
        classes: &classes,
        index: &index,
        nodes: &nodes,
        cyclic: has_cycle(egraph, &classes, &index, &nodes),
    };
    if let Some(g) = greedy {
        match program.solve(true, None, budget.backstop()) {
            Some((bound, _)) if g <= bound * (1.0 + 1e-9) + 1e-18 => return Exact::GreedyOptimal,
            Some(_) => {}
            None => return Exact::GaveUp,
        }
    }
    let Some((_, picked)) = program.solve(false, budget.for_size(nodes.len()), budget.backstop())
    else {
        return Exact::GaveUp;
    };
    let mut choice: BTreeMap<Id, TNode> = BTreeMap::new();
    for (j, &(ci, ni, _)) in nodes.iter().enumerate() {
        if picked[j] > 0.5 {
            choice.insert(classes[ci], egraph[classes[ci]].nodes[ni].clone());
        }
    }
    // Keep only what the roots reach under the choice (the solver may pick spare nodes at
    // no cost).
    let mut reached: BTreeMap<Id, TNode> = BTreeMap::new();
    let mut stack: Vec<Id> = roots.iter().map(|&r| egraph.find(r)).collect();
    let mut cost_reached = 0.0;
    while let Some(c) = stack.pop() {
        if reached.contains_key(&c) {
            continue;
        }
        let Some(node) = choice.get(&c).cloned() else {
            return Exact::GaveUp;
        };
        cost_reached += cost(egraph, &node);
        for &k in egg::Language::children(&node) {
            stack.push(egraph.find(k));
        }
        reached.insert(c, node);
    }
    Exact::Found(Extraction {
        choice: reached,
        cost: cost_reached,
        best: BTreeMap::new(),
    })
}

/// What [`exact_ilp`] found.
#[derive(Debug)]
pub enum Exact {
    /// The optimal extraction.
    Found(Extraction),
    /// The greedy extraction's cost meets the LP bound: it is optimal already.
    GreedyOptimal,
    /// The region has more usable nodes than the limit.
    TooLarge,
    /// The solver failed, or found no solution within its budget.
    GaveUp,
}

/// The search [`exact_ilp`]'s branch and bound may make, in nodes of its tree: a count, not
/// a time, so that the result does not depend on the machine's speed or load.
#[derive(Clone, Copy, Debug)]
pub enum ExactBudget {
    /// No limit: the search runs until the optimum is proven.
    Unlimited,
    /// The pass's budget: [`exact_node_budget`] of the problem's size.
    BySize,
}

impl ExactBudget {
    /// The branch and bound's nodes for a problem of `nodes` usable e-nodes.
    fn for_size(self, nodes: usize) -> Option<u64> {
        match self {
            ExactBudget::Unlimited => None,
            ExactBudget::BySize => Some(exact_node_budget(nodes)),
        }
    }

    /// The wall-clock backstop of each solver call ([`EXACT_BACKSTOP`]), none when
    /// unlimited.
    fn backstop(self) -> Option<std::time::Duration> {
        match self {
            ExactBudget::Unlimited => None,
            ExactBudget::BySize => Some(EXACT_BACKSTOP),
        }
    }
}

/// A solver call that runs this long stops (the node budget ends the search long before on
/// every model measured: BERT tiny's, the largest, in 0.13 s), so that a degenerate
/// problem, or a large `exact-nodes`, cannot hang the compile. Only there would the result
/// depend on the machine's speed.
pub const EXACT_BACKSTOP: std::time::Duration = std::time::Duration::from_secs(20);

/// The branch and bound's nodes for a problem of `nodes` usable e-nodes: one per e-node, at
/// least 64. Small regions, where exact extraction pays, are solved in full (the test
/// models' MLP, CNN and resnet_small in 16, 4 and 26 nodes); large ones cannot eat the
/// pass's time for a result they rarely improve (GPT-2 tiny's and BERT tiny's 147 and 190
/// e-node regions find no solution in 40 nodes per e-node either).
pub fn exact_node_budget(nodes: usize) -> u64 {
    (nodes as u64).max(64)
}

/// The integer program of an extraction (see [`exact_ilp`]).
struct Program<'a> {
    egraph: &'a TEGraph,
    roots: &'a [Id],
    classes: &'a [Id],
    index: &'a BTreeMap<Id, usize>,
    nodes: &'a [(usize, usize, f64)],
    cyclic: bool,
}

impl Program<'_> {
    /// Solves the program (its LP relaxation when `relaxed`, else within `node_limit`
    /// branch-and-bound nodes, and `backstop` of wall-clock time): the objective's value in
    /// seconds and each node's `x`; `None` when the solver found no solution.
    fn solve(
        &self,
        relaxed: bool,
        node_limit: Option<u64>,
        backstop: Option<std::time::Duration>,
    ) -> Option<(f64, Vec<f64>)> {
        use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions};
        let (egraph, classes, index, nodes) = (self.egraph, self.classes, self.index, self.nodes);
        let nc = classes.len();
        let mut problem = Problem::new(OptimizationDirection::Minimize);
        let flag = |p: &mut Problem, cost: f64| {
            if relaxed {
                p.add_var(cost, (0.0, 1.0))
            } else {
                p.add_binary_var(cost)
            }
        };
        // Costs in nanoseconds keep the solver's numbers well scaled.
        let x: Vec<_> = nodes
            .iter()
            .map(|&(_, _, k)| flag(&mut problem, k * 1e9))
            .collect();
        let a: Vec<_> = (0..nc).map(|_| flag(&mut problem, 0.0)).collect();
        let t: Vec<_> = (0..if self.cyclic { nc } else { 0 })
            .map(|_| problem.add_var(0.0, (0.0, nc as f64)))
            .collect();
        for r in self.roots {
            let ri = index[&egraph.find(*r)];
            problem.add_constraint([(a[ri], 1.0)], ComparisonOp::Eq, 1.0);
        }
        let mut per_class: Vec<Vec<(microlp::Variable, f64)>> = vec![Vec::new(); nc];
        for (j, &(ci, ni, _)) in nodes.iter().enumerate() {
            per_class[ci].push((x[j], 1.0));
            let node = &egraph[classes[ci]].nodes[ni];
            for &ch in egg::Language::children(node) {
                let ki = index[&egraph.find(ch)];
                problem.add_constraint([(x[j], 1.0), (a[ki], -1.0)], ComparisonOp::Le, 0.0);
                if self.cyclic {
                    let big = nc as f64 + 1.0;
                    problem.add_constraint(
                        [(t[ci], 1.0), (t[ki], -1.0), (x[j], -big)],
                        ComparisonOp::Ge,
                        -(nc as f64),
                    );
                }
            }
        }
        for (ci, mut terms) in per_class.into_iter().enumerate() {
            terms.push((a[ci], -1.0));
            problem.add_constraint(terms, ComparisonOp::Eq, 0.0);
        }
        let mut options = SolveOptions::default();
        options.node_limit = node_limit;
        options.time_limit = backstop;
        // microlp is a third-party solver: an assertion inside it (it checks its numerics)
        // must not take the process down; it counts as no solution, as running out of
        // nodes without one does. The problem is dropped whatever happens.
        let solved =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| problem.solve_with(options)));
        let outcome = solved.ok()?.ok()?;
        let solution = outcome.into_solution().ok()?;
        let picked: Vec<f64> = x.iter().map(|&v| solution.var_value(v)).collect();
        let objective: f64 = nodes
            .iter()
            .zip(&picked)
            .map(|(&(_, _, k), &v)| k * v)
            .sum();
        Some((objective, picked))
    }
}

/// Whether the usable nodes (`(class index, node index, cost)`) make a cycle among the
/// classes: a class whose node needs, through children, the class itself. Iterative
/// three-colour depth-first search, so its depth does not grow with the e-graph.
fn has_cycle(
    egraph: &TEGraph,
    classes: &[Id],
    index: &BTreeMap<Id, usize>,
    nodes: &[(usize, usize, f64)],
) -> bool {
    let nc = classes.len();
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); nc];
    for &(ci, ni, _) in nodes {
        for &ch in egg::Language::children(&egraph[classes[ci]].nodes[ni]) {
            succ[ci].push(index[&egraph.find(ch)]);
        }
    }
    // 0: unseen, 1: on the stack, 2: done.
    let mut state = vec![0u8; nc];
    for start in 0..nc {
        if state[start] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        state[start] = 1;
        while let Some(&mut (c, ref mut next)) = stack.last_mut() {
            if let Some(&k) = succ[c].get(*next) {
                *next += 1;
                match state[k] {
                    1 => return true,
                    0 => {
                        state[k] = 1;
                        stack.push((k, 0));
                    }
                    _ => {}
                }
            } else {
                state[c] = 2;
                stack.pop();
            }
        }
    }
    false
}
