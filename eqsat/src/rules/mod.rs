//! The rewrite rules, grouped by kind in one file each (see `README.md` in this folder for
//! the policy), and the machinery every rule shares.
//!
//! A rule is a searcher (an egg pattern, or a multi-pattern for rules that merge two ops)
//! and a builder in Rust that adds the replacement and returns its class. The builder adds
//! nodes only through [`add`], which refuses a node that does not type-check; the shared
//! applier then unions the replacement with the matched class only when their types are
//! equal. So no rule can change a shape or an element type, whatever it builds.

use std::sync::Arc;

use egg::{
    Applier, Id, Language, MultiPattern, Pattern, PatternAst, Rewrite, SearchMatches, Searcher,
    Subst, Symbol, Var,
};

use crate::analysis::{TEGraph, TypeAnalysis, node_op, node_types};
use crate::ir::{Dim, ElemType, Op, Tensor, TensorType};
use crate::lang::{Attr, TNode, is_plain, op_node};

pub mod algebra;
pub mod fusion;
pub mod layout;

/// What a rule is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RuleKind {
    /// Identities, cancellations, distribution and factoring, constant folding.
    Algebra,
    /// Transposes and reshapes moved, merged or folded into their users.
    Layout,
    /// Ops fused into one or merged into a wider one, and the reverse splits.
    Fusion,
}

impl RuleKind {
    /// `algebra`, `layout` or `fusion`.
    pub fn name(self) -> &'static str {
        match self {
            RuleKind::Algebra => "algebra",
            RuleKind::Layout => "layout",
            RuleKind::Fusion => "fusion",
        }
    }
}

/// Builds a rule's replacement for one match: returns the class that should join the
/// matched class, or `None` when the rule does not apply to this match.
pub type Build = Arc<dyn Fn(&mut TEGraph, Id, &Subst) -> Option<Id> + Send + Sync>;

/// Builds a multi-pattern rule's replacements: pairs of (matched class, its replacement).
pub type BuildMany = Arc<dyn Fn(&mut TEGraph, &Subst) -> Vec<(Id, Id)> + Send + Sync>;

/// A named rewrite rule.
pub struct Rule {
    /// Kebab-case, unique.
    pub name: &'static str,
    /// Its group.
    pub kind: RuleKind,
    /// One line: what it rewrites into what.
    pub doc: &'static str,
    /// The egg rewrite.
    pub rewrite: Rewrite<TNode, TypeAnalysis>,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("name", &self.name).finish()
    }
}

/// The applier every single-pattern rule uses: build, check types, union.
struct Guarded {
    build: Build,
}

impl Applier<TNode, TypeAnalysis> for Guarded {
    fn apply_one(
        &self,
        egraph: &mut TEGraph,
        eclass: Id,
        subst: &Subst,
        ast: Option<&PatternAst<TNode>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        let Some(new) = (self.build)(egraph, eclass, subst) else {
            return Vec::new();
        };
        // With explanations on, egg hands over the searcher's pattern: union from the exact
        // matched term (not just its class) so that proofs name this rule at that term.
        let from = match ast {
            Some(ast) => egraph.add_instantiation(ast, subst),
            None => eclass,
        };
        join(egraph, from, new, rule_name)
    }
}

/// The id of `node` as added (for explanations, which follow e-nodes rather than classes):
/// the node's own id when explanations are on, else its class.
pub fn term(egraph: &mut TEGraph, node: TNode) -> Id {
    if egraph.are_explanations_enabled() {
        egraph.add_uncanonical(node)
    } else {
        egraph.add(node)
    }
}

/// Unions `new` into `old` when both have the same, known types.
fn join(egraph: &mut TEGraph, old: Id, new: Id, rule_name: Symbol) -> Vec<Id> {
    let (a, b) = (&egraph[old].data.types, &egraph[new].data.types);
    if a.is_empty() || a != b {
        return Vec::new();
    }
    if egraph.union_trusted(old, new, rule_name) {
        vec![old]
    } else {
        Vec::new()
    }
}

/// The applier of multi-pattern rules.
struct GuardedMany {
    build: BuildMany,
}

impl Applier<TNode, TypeAnalysis> for GuardedMany {
    fn apply_matches(
        &self,
        egraph: &mut TEGraph,
        matches: &[SearchMatches<TNode>],
        rule_name: Symbol,
    ) -> Vec<Id> {
        let mut changed = Vec::new();
        for m in matches {
            for subst in &m.substs {
                let pairs = (self.build)(egraph, subst);
                // All or nothing: every replacement must type-check before any union.
                if pairs.is_empty()
                    || pairs.iter().any(|&(old, new)| {
                        egraph[old].data.types.is_empty()
                            || egraph[old].data.types != egraph[new].data.types
                    })
                {
                    continue;
                }
                for (old, new) in pairs {
                    changed.extend(join(egraph, old, new, rule_name));
                }
            }
        }
        changed
    }

    fn apply_one(
        &self,
        _egraph: &mut TEGraph,
        _eclass: Id,
        _subst: &Subst,
        _ast: Option<&PatternAst<TNode>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        Vec::new()
    }
}

fn pattern(text: &str) -> Pattern<TNode> {
    text.parse()
        .unwrap_or_else(|e| panic!("rule pattern `{text}` does not parse: {e}"))
}

/// A rule from its searcher and applier (names are checked unique by a test).
fn finish(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    searcher: impl egg::Searcher<TNode, TypeAnalysis> + Send + Sync + 'static,
    applier: impl Applier<TNode, TypeAnalysis> + Send + Sync + 'static,
) -> Rule {
    let rewrite =
        Rewrite::new(name, searcher, applier).unwrap_or_else(|e| panic!("rule {name}: {e}"));
    Rule {
        name,
        kind,
        doc,
        rewrite,
    }
}

/// A rule from a searcher pattern and a builder.
pub fn rule(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    lhs: &str,
    build: impl Fn(&mut TEGraph, Id, &Subst) -> Option<Id> + Send + Sync + 'static,
) -> Rule {
    finish(
        name,
        kind,
        doc,
        pattern(lhs),
        Guarded {
            build: Arc::new(build),
        },
    )
}

/// A rule whose replacement is a pattern over the left-hand side's variables.
pub fn pattern_rule(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    lhs: &str,
    rhs: &str,
) -> Rule {
    let rhs = pattern(rhs);
    rule(name, kind, doc, lhs, move |eg, _, subst| {
        instantiate(eg, &rhs.ast, subst)
    })
}

/// A rule over several patterns at once (`?a = (matmul ?x ?w1), ?b = (matmul ?x ?w2)`).
pub fn multi_rule(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    patterns: &str,
    build: impl Fn(&mut TEGraph, &Subst) -> Vec<(Id, Id)> + Send + Sync + 'static,
) -> Rule {
    let searcher: MultiPattern<TNode> = patterns
        .parse()
        .unwrap_or_else(|e| panic!("rule {name}: multi-pattern does not parse: {e}"));
    finish(
        name,
        kind,
        doc,
        searcher,
        GuardedMany {
            build: Arc::new(build),
        },
    )
}

/// Adds `node` if it type-checks; its class otherwise `None`.
pub fn add(egraph: &mut TEGraph, node: TNode) -> Option<Id> {
    let types = node_types(egraph, &node)?;
    if types.is_empty() && !matches!(node, TNode::Attr(_)) {
        return None;
    }
    Some(egraph.add(node))
}

/// Adds the application of `op` to `operands` (with its attribute leaf when needed).
pub fn add_op(egraph: &mut TEGraph, op: Op, operands: &[Id]) -> Option<Id> {
    let attr = if crate::lang::is_plain(&op) {
        None
    } else {
        Some(egraph.add(TNode::Attr(Box::new(Attr::new(op.clone())))))
    };
    add(egraph, op_node(&op, attr, operands))
}

/// Adds a new constant holding `value`, named after `base`.
pub fn add_const(egraph: &mut TEGraph, base: &str, value: &Tensor) -> Option<Id> {
    let ty = TensorType::fixed(
        value.elem(),
        &value.shape().iter().map(|&d| d as u64).collect::<Vec<_>>(),
    );
    let data = bytes::Bytes::from(value.to_le_bytes());
    let c = egraph.analysis.add_const(base, ty, data);
    add(egraph, TNode::Const(c))
}

/// Instantiates a pattern AST with `subst`, checking every node's types.
pub fn instantiate(egraph: &mut TEGraph, ast: &PatternAst<TNode>, subst: &Subst) -> Option<Id> {
    let mut ids: Vec<Id> = Vec::with_capacity(ast.as_ref().len());
    for node in ast.as_ref() {
        let id = match node {
            egg::ENodeOrVar::Var(v) => *subst.get(*v)?,
            egg::ENodeOrVar::ENode(n) => {
                let n = n.clone().map_children(|c| ids[usize::from(c)]);
                add(egraph, n)?
            }
        };
        ids.push(id);
    }
    ids.last().copied()
}

/// The class bound to `?name`.
pub fn var(subst: &Subst, name: &str) -> Option<Id> {
    let v: Var = name.parse().ok()?;
    subst.get(v).copied()
}

/// The op held by the attribute leaf bound to `?name`.
pub fn attr(egraph: &TEGraph, subst: &Subst, name: &str) -> Option<Op> {
    egraph[var(subst, name)?].data.attr.clone()
}

/// The single result type of the class bound to `?name`.
pub fn ty(egraph: &TEGraph, subst: &Subst, name: &str) -> Option<TensorType> {
    egraph[var(subst, name)?].data.ty().cloned()
}

/// The known value of the class bound to `?name`.
pub fn value<'a>(egraph: &'a TEGraph, subst: &Subst, name: &str) -> Option<&'a Tensor> {
    egraph[var(subst, name)?].data.value.as_ref()
}

/// The constant leaf in class `id`, if it holds one: its index in the constant table.
pub fn const_index(egraph: &TEGraph, id: Id) -> Option<u32> {
    egraph[id].nodes.iter().find_map(|n| match n {
        TNode::Const(c) => Some(*c),
        _ => None,
    })
}

/// The value of the constant in class `id`, decoded whatever its size (rules that compute
/// new constants, such as merged weights, need it once).
pub fn const_tensor(egraph: &TEGraph, id: Id) -> Option<Tensor> {
    let c = &egraph.analysis.consts[const_index(egraph, id)? as usize];
    Tensor::from_typed_le_bytes(&c.ty, &c.data).ok()
}

/// Whether the analysis knows the value of class `id` (it then holds a constant leaf).
///
/// Rules that build new intermediate classes refuse a matched class whose value is known:
/// the constant already is the cheapest form, and every new class with a known value gets
/// a constant leaf of its own from the analysis (equal values are not merged), so
/// rewriting constant terms around a cycle of classes could make new constants without
/// end.
pub fn is_known(egraph: &TEGraph, id: Id) -> bool {
    egraph[id].data.value.is_some()
}

/// The value of class `id`: the analysis's when known, else that of its constant leaf,
/// whatever its size.
pub fn known(egraph: &TEGraph, id: Id) -> Option<Tensor> {
    egraph[id]
        .data
        .value
        .clone()
        .or_else(|| const_tensor(egraph, id))
}

/// Whether every element of `t` equals `x`.
pub fn all_equal(t: &Tensor, x: f64) -> bool {
    !t.is_empty() && t.to_f64_vec().iter().all(|&v| v == x)
}

/// A searcher over alternatives: every match of every searcher in the list. One rule can
/// thus cover several op kinds, operand orders or arities; its builder reads which one
/// matched from the e-graph (see [`find_op`], [`lookup_op`]) or from the optional variables.
struct AnyOf(Vec<Box<dyn Searcher<TNode, TypeAnalysis> + Send + Sync>>);

impl Searcher<TNode, TypeAnalysis> for AnyOf {
    fn search_eclass_with_limit(
        &self,
        egraph: &TEGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, TNode>> {
        let mut substs = Vec::new();
        for s in &self.0 {
            if substs.len() >= limit {
                break;
            }
            if let Some(m) = s.search_eclass_with_limit(egraph, eclass, limit - substs.len()) {
                substs.extend(m.substs);
            }
        }
        (!substs.is_empty()).then_some(SearchMatches {
            eclass,
            substs,
            ast: None,
        })
    }

    fn search_with_limit(&self, egraph: &TEGraph, limit: usize) -> Vec<SearchMatches<'_, TNode>> {
        let mut out = Vec::new();
        let mut left = limit;
        for s in &self.0 {
            if left == 0 {
                break;
            }
            for m in s.search_with_limit(egraph, left) {
                left = left.saturating_sub(m.substs.len());
                out.push(SearchMatches {
                    eclass: m.eclass,
                    substs: m.substs,
                    ast: None,
                });
            }
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        let mut vars: Vec<Var> = self.0.iter().flat_map(|s| s.vars()).collect();
        vars.sort();
        vars.dedup();
        vars
    }
}

/// A rule whose searcher is any of several patterns (variables a pattern does not bind are
/// absent from its substitutions: [`var`] returns `None` for them).
pub fn any_rule(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    lhs: impl IntoIterator<Item = impl AsRef<str>>,
    build: impl Fn(&mut TEGraph, Id, &Subst) -> Option<Id> + Send + Sync + 'static,
) -> Rule {
    let searcher = AnyOf(
        lhs.into_iter()
            .map(|p| {
                Box::new(pattern(p.as_ref()))
                    as Box<dyn Searcher<TNode, TypeAnalysis> + Send + Sync>
            })
            .collect(),
    );
    finish(
        name,
        kind,
        doc,
        searcher,
        Guarded {
            build: Arc::new(build),
        },
    )
}

/// A multi-pattern rule whose searcher is any of several multi-patterns.
pub fn any_multi_rule(
    name: &'static str,
    kind: RuleKind,
    doc: &'static str,
    patterns: &[&str],
    build: impl Fn(&mut TEGraph, &Subst) -> Vec<(Id, Id)> + Send + Sync + 'static,
) -> Rule {
    let searcher = AnyOf(
        patterns
            .iter()
            .map(|p| {
                let m: MultiPattern<TNode> = p
                    .parse()
                    .unwrap_or_else(|e| panic!("rule {name}: multi-pattern does not parse: {e}"));
                Box::new(m) as Box<dyn Searcher<TNode, TypeAnalysis> + Send + Sync>
            })
            .collect(),
    );
    finish(
        name,
        kind,
        doc,
        searcher,
        GuardedMany {
            build: Arc::new(build),
        },
    )
}

/// The class of the existing node applying `op` to `operands`, without adding anything.
pub fn lookup_op(egraph: &TEGraph, op: &Op, operands: &[Id]) -> Option<Id> {
    let attr = if is_plain(op) {
        None
    } else {
        Some(egraph.lookup(TNode::Attr(Box::new(Attr::new(op.clone()))))?)
    };
    egraph.lookup(op_node(op, attr, operands))
}

/// The first op node of class `class` for which `pred` holds (given the op and its operand
/// classes, canonical), with its operands.
pub fn find_op(
    egraph: &TEGraph,
    class: Id,
    pred: impl Fn(&Op, &[Id]) -> bool,
) -> Option<(Op, Vec<Id>)> {
    egraph[class].nodes.iter().find_map(|n| {
        let (op, operands) = node_op(egraph, n)?;
        let operands: Vec<Id> = operands.iter().map(|&o| egraph.find(o)).collect();
        pred(&op, &operands).then_some((op, operands))
    })
}

/// Adds a constant holding `value` unless an equal one (same type and bytes) is already in
/// the table, in which case that one is reused. Rules that compute constants use this, so
/// that applying a rule again to the same match adds nothing (egg re-applies every match in
/// every iteration): with [`add_const`] each application would add a fresh leaf and the
/// e-graph would grow by one node per iteration and never saturate.
pub fn intern_const(egraph: &mut TEGraph, base: &str, value: &Tensor) -> Option<Id> {
    let ty = value.ty();
    let data = value.to_le_bytes();
    let found = egraph
        .analysis
        .consts
        .iter()
        .position(|c| c.ty == ty && c.data.as_ref() == data.as_slice());
    match found {
        Some(c) => add(egraph, TNode::Const(c as u32)),
        None => add_const(egraph, base, value),
    }
}

/// The most folds behind one constant that rules compute from other constants (see
/// [`fold_depth`]).
pub const MAX_FOLD_DEPTH: u32 = 3;

/// How many folds made a constant of class `id`, the least over its constant leaves: 0 for a
/// constant of the graph, `d` for one a rule added with [`intern_folded`] at depth `d`.
/// `None` when the class has neither (its value is unknown, or only the analysis folded it).
///
/// Rules that compute a constant from constants (reassociation, conv folding) give the new
/// one the depth of its deepest source plus one and refuse to go past [`MAX_FOLD_DEPTH`].
/// That bounds them: the e-graph can hold cycles of classes (`x * 0 = (x * 0) * k`, or
/// `x * c * (1/c)` where the product rounds to 1), and folding around a cycle again and
/// again would otherwise make a new constant (`k^2`, `k^3`, ...) in every iteration.
pub fn fold_depth(egraph: &TEGraph, id: Id) -> Option<u32> {
    let a = &egraph.analysis;
    egraph[id]
        .nodes
        .iter()
        .filter_map(|n| match n {
            TNode::Const(c) if (*c as usize) < a.original_consts => Some(0),
            TNode::Const(c) => {
                let name = &a.consts.get(*c as usize)?.name;
                let (rest, _) = name.rsplit_once(".eq")?;
                rest.rsplit_once(".fold")?.1.parse().ok()
            }
            _ => None,
        })
        .min()
}

/// [`intern_const`] for a constant folded at `depth` (see [`fold_depth`]), named
/// `{stem}.fold{depth}` made unique; `stem` loses any `.fold<d>.eq<n>` suffix first, so
/// that names do not grow with each fold.
pub fn intern_folded(egraph: &mut TEGraph, stem: &str, depth: u32, value: &Tensor) -> Option<Id> {
    let stem = match stem.rsplit_once(".fold") {
        Some((head, tail))
            if tail
                .split_once(".eq")
                .is_some_and(|(d, n)| d.parse::<u32>().is_ok() && n.parse::<u64>().is_ok()) =>
        {
            head
        }
        _ => stem,
    };
    intern_const(egraph, &format!("{stem}.fold{depth}"), value)
}

/// The name of the constant in class `id` (its first constant leaf).
pub fn const_name(egraph: &TEGraph, id: Id) -> Option<String> {
    let c = const_index(egraph, id)?;
    Some(egraph.analysis.consts.get(c as usize)?.name.clone())
}

/// The result of evaluating `op` on `operands` with the reference interpreter (its first
/// result), for rules that compute new constants.
pub fn eval(op: &Op, operands: &[&Tensor]) -> Option<Tensor> {
    crate::ir::interp::eval_op(op, operands)
        .ok()?
        .into_iter()
        .next()
}

/// A tensor of element type `elem` and shape `dims` from `values` (row-major), converted
/// with the IR's cast semantics.
pub fn f64_tensor(elem: ElemType, dims: &[usize], values: &[f64]) -> Option<Tensor> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = Tensor::from_le_bytes(ElemType::F64, dims, &bytes).ok()?;
    eval(&Op::Cast { to: elem }, &[&t])
}

/// The number of elements of `ty`, when every extent is static.
pub fn numel(ty: &TensorType) -> Option<u64> {
    ty.static_dims()?
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
}

/// Whether `ty` holds exactly one element (every extent is a static 1, or rank 0).
pub fn is_scalar(ty: &TensorType) -> bool {
    ty.shape.iter().all(|d| *d == Dim::Static(1))
}

/// Every rule, in a stable order (algebra, layout, fusion; each file's order).
pub fn all_rules() -> Vec<Rule> {
    let mut rules = algebra::rules();
    rules.extend(layout::rules());
    rules.extend(fusion::rules());
    rules
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_kebab_case_and_documented() {
        let rules = all_rules();
        let mut names: Vec<&str> = rules.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate rule names");
        for r in &rules {
            assert!(
                r.name.split('-').all(|p| !p.is_empty()
                    && p.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())),
                "{} is not kebab-case",
                r.name
            );
            assert!(!r.doc.is_empty(), "{} has no doc", r.name);
        }
    }
}

#[cfg(test)]
mod readme_tests {
    #[test]
    fn readme_lists_every_rule() {
        let readme = include_str!("README.md");
        for r in super::all_rules() {
            assert!(
                readme.contains(&format!("| `{}` |", r.name)),
                "rules/README.md does not list {} ({})",
                r.name,
                r.kind.name()
            );
        }
    }
}
