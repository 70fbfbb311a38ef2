//! The e-class analysis: every class's result types and, where small and known, its constant
//! value. Types come from the IR's own shape inference (`ir::infer`); the value from the
//! reference interpreter (`ir::interp::eval_op`). A class with a known value gets a constant
//! leaf, so constant subterms fold during saturation.

use egg::{DidMerge, EGraph, Id};

use crate::ir::{Constant, Graph, Op, Tensor, TensorType, infer, interp};
use crate::lang::{TNode, plain_op};

/// The e-graph of tessera's IR.
pub type TEGraph = EGraph<TNode, TypeAnalysis>;

/// Analysis state: the inputs' types, the constant table, and the folding limit.
#[derive(Debug)]
pub struct TypeAnalysis {
    /// Types of `input<i>`.
    pub inputs: Vec<TensorType>,
    /// Constants `const<c>`: the graph's, then those rules and folding create.
    pub consts: Vec<Constant>,
    /// Largest result (in elements) whose value is computed and kept.
    pub fold_limit: usize,
    /// How many constants came from the graph (`const<c>` below this are originals).
    pub original_consts: usize,
    /// For constants made by merging others: the original constants they hold, in order.
    pub parts: std::collections::BTreeMap<u32, Vec<u32>>,
    /// New constants by content (type and a hash of the bytes), so that a rule that fires
    /// again on the same match finds the constant it made before instead of growing the
    /// e-graph.
    by_content: std::collections::BTreeMap<(String, u64), Vec<u32>>,
    /// Names already used in `consts`, to name new constants uniquely.
    next_fresh: usize,
    /// An empty graph for `infer` (which reads the graph only for `const` ops).
    stub: Graph,
}

impl TypeAnalysis {
    /// Analysis over `inputs` and `consts`.
    pub fn new(inputs: Vec<TensorType>, consts: Vec<Constant>, fold_limit: usize) -> Self {
        TypeAnalysis {
            inputs,
            original_consts: consts.len(),
            consts,
            fold_limit,
            parts: std::collections::BTreeMap::new(),
            by_content: std::collections::BTreeMap::new(),
            next_fresh: 0,
            stub: Graph::new("stub"),
        }
    }

    /// Starts naming new constants at `fresh` (to keep names unique across regions).
    pub fn set_fresh(&mut self, fresh: usize) {
        self.next_fresh = fresh;
    }

    /// The next fresh constant number.
    pub fn fresh(&self) -> usize {
        self.next_fresh
    }

    /// Adds a constant and returns its index; its name is `base` made unique. A constant
    /// with the same type and bytes as one added before is that one.
    pub fn add_const(&mut self, base: &str, ty: TensorType, data: bytes::Bytes) -> u32 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data.hash(&mut h);
        let key = (ty.to_string(), h.finish());
        if let Some(same) = self.by_content.get(&key)
            && let Some(&c) = same.iter().find(|&&c| self.consts[c as usize].data == data)
        {
            return c;
        }
        let mut name;
        loop {
            name = format!("{base}.eq{}", self.next_fresh);
            self.next_fresh += 1;
            if !self.consts.iter().any(|c| c.name == name) {
                break;
            }
        }
        self.consts.push(Constant { name, ty, data });
        let c = (self.consts.len() - 1) as u32;
        self.by_content.entry(key).or_default().push(c);
        c
    }

    /// The original constants constant `c` is made of: itself for an original, the merged
    /// parts for a merge, `None` for other new constants.
    pub fn parts_of(&self, c: u32) -> Option<Vec<u32>> {
        if (c as usize) < self.original_consts {
            Some(vec![c])
        } else {
            self.parts.get(&c).cloned()
        }
    }

    /// Result types of `op` on operands of types `operands`, if it type-checks.
    pub fn infer(&self, op: &Op, operands: &[&TensorType]) -> Option<Vec<TensorType>> {
        infer::infer(&self.stub, op, operands).ok()
    }
}

/// What the analysis knows about one e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct Data {
    /// Result types (one per result; several for `split` and `top-k`). Empty for attribute
    /// leaves, and for a node that does not type-check (rules never union those).
    pub types: Vec<TensorType>,
    /// For attribute leaves: the op.
    pub attr: Option<Op>,
    /// The value, when known and small.
    pub value: Option<Tensor>,
}

impl Data {
    /// The single result type, when there is exactly one.
    pub fn ty(&self) -> Option<&TensorType> {
        match self.types.as_slice() {
            [t] => Some(t),
            _ => None,
        }
    }
}

/// The op a node applies, with its operand ids (attribute leaf removed); `None` for leaves
/// and `get` nodes, or when the attribute leaf is missing.
pub fn node_op(egraph: &TEGraph, node: &TNode) -> Option<(Op, Vec<Id>)> {
    let TNode::Op(kind, children) = node else {
        return None;
    };
    match plain_op(kind) {
        Some(op) => Some((op, children.clone())),
        None => {
            let (&attr, operands) = children.split_first()?;
            let op = egraph[attr].data.attr.clone()?;
            (op.name() == *kind).then(|| (op, operands.to_vec()))
        }
    }
}

/// The types `node` would have, from its children's classes; `None` if it does not
/// type-check. Used to check a rewrite before adding anything.
pub fn node_types(egraph: &TEGraph, node: &TNode) -> Option<Vec<TensorType>> {
    match node {
        TNode::Input(i) => Some(vec![egraph.analysis.inputs.get(*i as usize)?.clone()]),
        TNode::Const(c) => Some(vec![egraph.analysis.consts.get(*c as usize)?.ty.clone()]),
        TNode::Attr(_) => Some(Vec::new()),
        TNode::Get(i, [x]) => Some(vec![egraph[*x].data.types.get(*i as usize)?.clone()]),
        TNode::Op(..) => {
            let (op, operands) = node_op(egraph, node)?;
            let tys: Vec<&TensorType> = operands
                .iter()
                .map(|&o| egraph[o].data.ty())
                .collect::<Option<_>>()?;
            egraph.analysis.infer(&op, &tys)
        }
    }
}

fn small(ty: &TensorType, limit: usize) -> bool {
    ty.static_dims().is_some_and(|d| {
        d.iter()
            .try_fold(1u64, |a, &x| a.checked_mul(x))
            .is_some_and(|n| n as usize <= limit)
    })
}

impl egg::Analysis<TNode> for TypeAnalysis {
    type Data = Data;

    fn make(egraph: &mut TEGraph, enode: &TNode, _id: Id) -> Data {
        let types = node_types(egraph, enode).unwrap_or_default();
        let limit = egraph.analysis.fold_limit;
        let value = match enode {
            TNode::Const(c) => {
                let k = &egraph.analysis.consts[*c as usize];
                if small(&k.ty, limit) {
                    Tensor::from_typed_le_bytes(&k.ty, &k.data).ok()
                } else {
                    None
                }
            }
            TNode::Op(..) if types.len() == 1 && small(&types[0], limit) => node_op(egraph, enode)
                .and_then(|(op, operands)| {
                    let values: Vec<&Tensor> = operands
                        .iter()
                        .map(|&o| egraph[o].data.value.as_ref())
                        .collect::<Option<_>>()?;
                    let mut out = interp::eval_op(&op, &values).ok()?;
                    (out.len() == 1).then(|| out.remove(0))
                }),
            _ => None,
        };
        let attr = match enode {
            TNode::Attr(a) => Some(a.op.clone()),
            _ => None,
        };
        Data { types, attr, value }
    }

    fn merge(&mut self, a: &mut Data, b: Data) -> DidMerge {
        let mut changed_a = false;
        if a.types.is_empty() && !b.types.is_empty() {
            a.types = b.types.clone();
            changed_a = true;
        }
        if a.value.is_none() && b.value.is_some() {
            a.value = b.value.clone();
            changed_a = true;
        }
        if a.attr.is_none() && b.attr.is_some() {
            a.attr = b.attr.clone();
            changed_a = true;
        }
        let changed_b = b.value.is_none() && a.value.is_some();
        DidMerge(changed_a, changed_b)
    }

    fn modify(egraph: &mut TEGraph, id: Id) {
        // A class whose value is known holds a constant leaf, so that extraction can pick it.
        let Some(value) = egraph[id].data.value.clone() else {
            return;
        };
        if egraph[id]
            .nodes
            .iter()
            .any(|n| matches!(n, TNode::Const(_)))
        {
            return;
        }
        let Some(ty) = egraph[id].data.ty().cloned() else {
            return;
        };
        let data = bytes::Bytes::from(value.to_le_bytes());
        let c = egraph.analysis.add_const("folded", ty, data);
        let leaf = egraph.add(TNode::Const(c));
        egraph.union_trusted(id, leaf, "constant-fold");
    }
}
