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
    Some(Extraction {
        choice,
        cost: total,
    })
}
