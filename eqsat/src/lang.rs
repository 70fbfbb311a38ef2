//! The e-graph language: tessera's IR ops as egg e-nodes.
//!
//! - Leaves: `input<i>` (graph or region input `i`), `const<c>` (constant `c` of the
//!   analysis's table), and attribute leaves, which hold an op with its attributes.
//! - Ops: `(kind children...)` where `kind` is the op's text name. An op whose kind alone
//!   determines it (*plain*: `add`, `matmul`, `relu`, ... see [`plain_op`]) has only its
//!   operands as children; any other op has an attribute leaf first, then its operands:
//!   `(transpose ?perm ?x)`, `(gemm ?attrs ?a ?b ?c)`. Patterns thus match attributes as
//!   variables, and rule conditions read them from the analysis.
//! - `(get<i> ?x)`: result `i` of a multi-result op (`split`, `top-k`).

use std::fmt;
use std::hash::{Hash, Hasher};

use egg::{FromOp, Id, Language};

use crate::ir::{BinaryOp, Op, UnaryOp};

/// An op with its attributes, compared by its canonical text (`Debug`), so that it can sit in
/// a hash-consed e-node.
#[derive(Clone, Debug)]
pub struct Attr {
    /// The op.
    pub op: Op,
    key: String,
}

impl Attr {
    /// The attribute leaf of `op`.
    pub fn new(op: Op) -> Attr {
        let key = format!("{op:?}");
        Attr { op, key }
    }
}

impl PartialEq for Attr {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}
impl Eq for Attr {}
impl Hash for Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}
impl PartialOrd for Attr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Attr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

/// An e-node.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TNode {
    /// Input `i` of the graph (or of the region being saturated).
    Input(u32),
    /// Constant `c` of the analysis's constant table.
    Const(u32),
    /// An op with its attributes, as a leaf.
    Attr(Box<Attr>),
    /// An op application: `kind` is the op's text name; children are the attribute leaf
    /// (unless the op is plain) and the operands.
    Op(&'static str, Vec<Id>),
    /// Result `i` of a multi-result op.
    Get(u32, [Id; 1]),
}

/// The discriminant egg indexes nodes by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Disc {
    /// An input.
    Input(u32),
    /// A constant.
    Const(u32),
    /// An attribute leaf.
    Attr,
    /// An op of this kind.
    Op(&'static str),
    /// A result selector.
    Get(u32),
}

impl Language for TNode {
    type Discriminant = Disc;

    fn discriminant(&self) -> Disc {
        match self {
            TNode::Input(i) => Disc::Input(*i),
            TNode::Const(c) => Disc::Const(*c),
            TNode::Attr(_) => Disc::Attr,
            TNode::Op(k, _) => Disc::Op(k),
            TNode::Get(i, _) => Disc::Get(*i),
        }
    }

    fn matches(&self, other: &Self) -> bool {
        match (self, other) {
            (TNode::Input(a), TNode::Input(b)) => a == b,
            (TNode::Const(a), TNode::Const(b)) => a == b,
            (TNode::Attr(a), TNode::Attr(b)) => a == b,
            (TNode::Op(a, x), TNode::Op(b, y)) => a == b && x.len() == y.len(),
            (TNode::Get(a, _), TNode::Get(b, _)) => a == b,
            _ => false,
        }
    }

    fn children(&self) -> &[Id] {
        match self {
            TNode::Op(_, c) => c,
            TNode::Get(_, c) => c,
            _ => &[],
        }
    }

    fn children_mut(&mut self) -> &mut [Id] {
        match self {
            TNode::Op(_, c) => c,
            TNode::Get(_, c) => c,
            _ => &mut [],
        }
    }
}

impl fmt::Display for TNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TNode::Input(i) => write!(f, "input{i}"),
            TNode::Const(c) => write!(f, "const{c}"),
            TNode::Attr(a) => write!(f, "{}", a.key.replace(' ', "")),
            TNode::Op(k, _) => f.write_str(k),
            TNode::Get(i, _) => write!(f, "get{i}"),
        }
    }
}

/// Why a pattern's op name is not a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an op of tessera's IR")]
pub struct UnknownOp(pub String);

impl FromOp for TNode {
    type Error = UnknownOp;

    fn from_op(op: &str, children: Vec<Id>) -> Result<Self, Self::Error> {
        if let Some(i) = op.strip_prefix("get").and_then(|i| i.parse().ok())
            && children.len() == 1
        {
            return Ok(TNode::Get(i, [children[0]]));
        }
        if children.is_empty() {
            if let Some(i) = op.strip_prefix("input").and_then(|i| i.parse().ok()) {
                return Ok(TNode::Input(i));
            }
            if let Some(c) = op.strip_prefix("const").and_then(|c| c.parse().ok()) {
                return Ok(TNode::Const(c));
            }
        }
        match crate::ir::text::OP_NAMES.iter().find(|n| **n == op) {
            Some(name) if *name != "const" => Ok(TNode::Op(name, children)),
            _ => Err(UnknownOp(op.to_string())),
        }
    }
}

/// The op a plain kind names: kinds whose name determines the op completely (elementwise
/// functions without parameters, every binary op, `select`, `matmul`, `size`). Other kinds
/// carry an attribute leaf.
pub fn plain_op(kind: &str) -> Option<Op> {
    if let Some(b) = BinaryOp::ALL.iter().find(|b| b.name() == kind) {
        return Some(Op::Binary(*b));
    }
    let unary = match kind {
        "abs" => UnaryOp::Abs,
        "neg" => UnaryOp::Neg,
        "sign" => UnaryOp::Sign,
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "sqrt" => UnaryOp::Sqrt,
        "reciprocal" => UnaryOp::Reciprocal,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "tan" => UnaryOp::Tan,
        "asin" => UnaryOp::Asin,
        "acos" => UnaryOp::Acos,
        "atan" => UnaryOp::Atan,
        "tanh" => UnaryOp::Tanh,
        "sigmoid" => UnaryOp::Sigmoid,
        "erf" => UnaryOp::Erf,
        "relu" => UnaryOp::Relu,
        "ceil" => UnaryOp::Ceil,
        "floor" => UnaryOp::Floor,
        "round" => UnaryOp::Round,
        "softplus" => UnaryOp::Softplus,
        "softsign" => UnaryOp::Softsign,
        "mish" => UnaryOp::Mish,
        "hard-swish" => UnaryOp::HardSwish,
        "not" => UnaryOp::Not,
        "is-nan" => UnaryOp::IsNan,
        "select" => return Some(Op::Select),
        "matmul" => return Some(Op::MatMul),
        "size" => return Some(Op::Size),
        _ => return None,
    };
    Some(Op::Unary(unary))
}

/// Whether `op` is plain (see [`plain_op`]).
pub fn is_plain(op: &Op) -> bool {
    plain_op(op.name()).is_some_and(|p| &p == op)
}

/// The node applying `op` (with `attr` the id of its attribute leaf when it is not plain) to
/// `operands`.
pub fn op_node(op: &Op, attr: Option<Id>, operands: &[Id]) -> TNode {
    let mut children = Vec::with_capacity(operands.len() + 1);
    if !is_plain(op) {
        children.extend(attr);
    }
    children.extend_from_slice(operands);
    TNode::Op(op.name(), children)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ops_round_trip_by_name() {
        for name in crate::ir::text::OP_NAMES {
            if let Some(op) = plain_op(name) {
                assert_eq!(op.name(), *name);
                assert!(is_plain(&op));
            }
        }
        assert!(plain_op("transpose").is_none());
        assert!(!is_plain(&Op::Unary(UnaryOp::Gelu { tanh: false })));
    }

    #[test]
    fn patterns_parse() {
        let p: egg::Pattern<TNode> = "(add (matmul ?x ?w) ?b)".parse().expect("pattern");
        assert_eq!(p.to_string(), "(add (matmul ?x ?w) ?b)");
        let p: egg::Pattern<TNode> = "(transpose ?p (transpose ?q ?x))".parse().expect("pattern");
        assert_eq!(p.vars().len(), 3);
        assert!("(frobnicate ?x)".parse::<egg::Pattern<TNode>>().is_err());
    }
}
