//! The verifier.
//!
//! [`verify`] checks a [`Graph`] against the IR's invariants and returns every violation it
//! finds, each attached to the [`Entity`] it is about, so that
//! [`crate::text::print_annotated`] can show it inline in the IR. Passes may assume these
//! invariants on input and must keep them on output.
//!
//! Invariants checked:
//!
//! 1. **Inputs**: graph input `i` is a value defined as `Input(i)`; no value is an input twice.
//! 2. **Op structure**: every op in the body appears once; its results are values defined as
//!    `Result(op, i)` in order; their number is what the op kind produces
//!    ([`crate::Op::num_results`]).
//! 3. **Dominance, hence acyclicity**: every operand is a graph input or a result of an op
//!    earlier in the body. A cycle would need a use before its definition, so the body order
//!    is a topological order.
//! 4. **Types**: each op's declared result types equal the types [`crate::infer::infer`] computes
//!    from its operands and attributes (element type and every extent, symbols included).
//!    This covers arity, element-type rules, attribute ranges (axes, permutations, pads) and
//!    shape rules.
//! 5. **Sizes**: every type can exist on this machine: the product of its non-zero static
//!    extents, and that times the element size, fit in `isize`
//!    ([`crate::tensor::checked_byte_size`]; symbolic extents are not counted, as their
//!    values are only known at run time). A zero extent does not exempt a type: `f32[0, 2^32,
//!    2^32]` is too large, because no array library can represent it. No extent computation
//!    overflowed or went negative either (inference reports that).
//! 6. **Outputs**: the graph has at least one output; each is a live value (a graph input or a
//!    result of an op in the body).
//! 7. **Constants**: names are unique and non-empty; shapes are static; the data is exactly
//!    `size_bytes` long; `const` ops name an existing constant.
//! 8. **Names**: live values with names have unique names.
//! 9. **Annotations**: a sharding lists grid axes for exactly the value's rank, each grid axis
//!    at most once; a device name is non-empty.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::graph::{Entity, Graph, OpId, ValueDef, ValueId};
use crate::infer::infer;
use crate::tensor::checked_byte_size;
use crate::types::TensorType;

/// One violated invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyError {
    /// What the error is about.
    pub entity: Entity,
    /// What is wrong; names the op kind and value names where it helps.
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for VerifyError {}

/// Checks every invariant in the module doc; returns all violations found, in a
/// deterministic order (graph, constants, then ops in body order, then outputs).
pub fn verify(graph: &Graph) -> Result<(), Vec<VerifyError>> {
    let mut v = Verifier {
        graph,
        errors: Vec::new(),
    };
    v.run();
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

struct Verifier<'g> {
    graph: &'g Graph,
    errors: Vec<VerifyError>,
}

impl Verifier<'_> {
    fn error(&mut self, entity: Entity, message: String) {
        self.errors.push(VerifyError { entity, message });
    }

    fn value_desc(&self, v: ValueId) -> String {
        match self.graph.value(v).name.as_deref() {
            Some(n) => format!("%{n}"),
            None => format!("value {v}"),
        }
    }

    fn op_desc(&self, o: OpId) -> String {
        let data = self.graph.op(o);
        match data.results.first() {
            Some(&r) if self.graph.is_valid_value(r) => {
                format!("`{}` defining {}", data.op.name(), self.value_desc(r))
            }
            _ => format!("`{}` ({o})", data.op.name()),
        }
    }

    fn run(&mut self) {
        let g = self.graph;
        // Values defined so far, in body order.
        let mut defined: BTreeSet<ValueId> = BTreeSet::new();
        let mut names: BTreeMap<&str, ValueId> = BTreeMap::new();

        for (i, &v) in g.inputs().iter().enumerate() {
            if !g.is_valid_value(v) {
                self.error(Entity::Graph, format!("input {i} is the invalid value {v}"));
                continue;
            }
            if g.value(v).def != ValueDef::Input(i) {
                self.error(
                    Entity::Value(v),
                    format!(
                        "{} is graph input {i} but is not defined as one",
                        self.value_desc(v)
                    ),
                );
            }
            if !defined.insert(v) {
                self.error(
                    Entity::Value(v),
                    format!("{} is a graph input twice", self.value_desc(v)),
                );
            }
            self.check_value(v, &mut names);
        }

        self.check_consts();

        let mut seen_ops: BTreeSet<OpId> = BTreeSet::new();
        for &o in g.ops() {
            if o.index() >= g.num_op_handles() {
                self.error(Entity::Graph, format!("the body lists the invalid op {o}"));
                continue;
            }
            if !seen_ops.insert(o) {
                self.error(
                    Entity::Op(o),
                    format!("{} appears twice in the body", self.op_desc(o)),
                );
                continue;
            }
            self.check_op(o, &mut defined, &mut names);
        }

        if g.outputs().is_empty() {
            self.error(Entity::Graph, "the graph has no outputs".into());
        }
        for (i, &v) in g.outputs().iter().enumerate() {
            if !defined.contains(&v) {
                let what = if g.is_valid_value(v) {
                    self.value_desc(v)
                } else {
                    format!("{v}")
                };
                self.error(
                    Entity::Graph,
                    format!(
                        "output {i} ({what}) is not defined by a graph input or an op in the body"
                    ),
                );
            }
        }
    }

    fn check_consts(&mut self) {
        let g = self.graph;
        let mut names: BTreeSet<&str> = BTreeSet::new();
        for (id, c) in g.consts() {
            let e = Entity::Const(id);
            if c.name.is_empty() {
                self.error(e, format!("constant {id} has an empty name"));
            } else if !names.insert(&c.name) {
                self.error(e, format!("constant name @{} is used twice", c.name));
            }
            let size =
                c.ty.static_dims()
                    .map(|dims| checked_byte_size(c.ty.elem, dims));
            match size {
                None => self.error(
                    e,
                    format!("constant @{} has the non-static type {}", c.name, c.ty),
                ),
                Some(Err(why)) => self.error(
                    e,
                    format!(
                        "constant @{} of type {} is too large for this machine: {why}",
                        c.name, c.ty
                    ),
                ),
                Some(Ok(n)) if n != c.data.len() as u64 => self.error(
                    e,
                    format!(
                        "constant @{} of type {} needs {n} bytes of data, has {}",
                        c.name,
                        c.ty,
                        c.data.len()
                    ),
                ),
                Some(Ok(_)) => {}
            }
        }
    }

    fn check_op<'g>(
        &mut self,
        o: OpId,
        defined: &mut BTreeSet<ValueId>,
        names: &mut BTreeMap<&'g str, ValueId>,
    ) where
        Self: 'g,
    {
        let g: &'g Graph = self.graph;
        let data = g.op(o);
        let e = Entity::Op(o);

        // Operands dominate the op.
        let mut operand_types: Vec<&TensorType> = Vec::with_capacity(data.operands.len());
        let mut operands_ok = true;
        for (i, &v) in data.operands.iter().enumerate() {
            if !g.is_valid_value(v) {
                self.error(
                    e,
                    format!("{}: operand {i} is the invalid value {v}", self.op_desc(o)),
                );
                operands_ok = false;
            } else if !defined.contains(&v) {
                self.error(
                    e,
                    format!(
                        "{}: operand {i} ({}) is used before it is defined",
                        self.op_desc(o),
                        self.value_desc(v)
                    ),
                );
                operands_ok = false;
            } else {
                operand_types.push(g.ty(v));
            }
        }

        // Results belong to this op.
        let want = data.op.num_results();
        if data.results.len() != want {
            self.error(
                e,
                format!(
                    "{}: has {} results, the op produces {want}",
                    self.op_desc(o),
                    data.results.len()
                ),
            );
        }
        let mut results_ok = true;
        for (i, &r) in data.results.iter().enumerate() {
            if !g.is_valid_value(r) {
                self.error(
                    e,
                    format!("{}: result {i} is the invalid value {r}", self.op_desc(o)),
                );
                results_ok = false;
                continue;
            }
            if g.value(r).def != ValueDef::Result(o, i) {
                self.error(
                    e,
                    format!(
                        "{}: result {i} ({}) is not defined as this op's result",
                        self.op_desc(o),
                        self.value_desc(r)
                    ),
                );
            }
            if !defined.insert(r) {
                self.error(
                    Entity::Value(r),
                    format!("{} is defined twice", self.value_desc(r)),
                );
            }
            self.check_value(r, names);
        }

        if data.device.as_deref() == Some("") {
            self.error(e, format!("{}: empty device name", self.op_desc(o)));
        }

        // Declared types match inference.
        if operands_ok && results_ok && data.results.len() == want {
            match infer(g, &data.op, &operand_types) {
                Err(err) => self.error(e, format!("{}: {}", self.op_desc(o), err.message)),
                Ok(types) => {
                    for (i, (&r, t)) in data.results.iter().zip(&types).enumerate() {
                        if g.ty(r) != t {
                            self.error(
                                e,
                                format!(
                                    "{}: result {i} ({}) is declared {}, but the op gives {t}",
                                    self.op_desc(o),
                                    self.value_desc(r),
                                    g.ty(r)
                                ),
                            );
                        }
                    }
                }
            }
        }
    }

    fn check_value<'g>(&mut self, v: ValueId, names: &mut BTreeMap<&'g str, ValueId>)
    where
        Self: 'g,
    {
        let g: &'g Graph = self.graph;
        let data = g.value(v);
        let e = Entity::Value(v);
        if let Some(n) = data.name.as_deref()
            && let Some(&prev) = names.get(n)
            && prev != v
        {
            self.error(e, format!("the name %{n} is used by two values"));
        } else if let Some(n) = data.name.as_deref() {
            names.insert(n, v);
        }
        let static_extents = data.ty.shape.iter().filter_map(|d| d.as_static());
        if let Err(why) = checked_byte_size(data.ty.elem, static_extents) {
            self.error(
                e,
                format!(
                    "{} has type {}, which is too large for this machine: {why}",
                    self.value_desc(v),
                    data.ty
                ),
            );
        }
        if let Some(s) = &data.sharding {
            if s.axes.len() != data.ty.rank() {
                self.error(
                    e,
                    format!(
                        "{}: sharding lists {} axes for rank {}",
                        self.value_desc(v),
                        s.axes.len(),
                        data.ty.rank()
                    ),
                );
            }
            let mut grid_axes = BTreeSet::new();
            if s.axes.iter().flatten().any(|a| !grid_axes.insert(*a)) {
                self.error(
                    e,
                    format!("{}: sharding uses a grid axis twice", self.value_desc(v)),
                );
            }
        }
    }
}
