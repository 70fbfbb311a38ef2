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
//!    result of an op in the body). Outputs have one name slot each; the names given
//!    ([`Graph::output_names`]) are non-empty and unique.
//! 7. **Constants**: names are unique and non-empty; shapes are static; the data is exactly
//!    `size_bytes` long; `const` ops name an existing constant.
//! 8. **Names**: live values with names have unique names.
//! 9. **Annotations**: a sharding lists mesh axes for exactly the value's rank, each mesh axis
//!    at most once; a device name is non-empty.
//! 10. **Meshes**: each mesh has a non-empty name, distinct from the others', at least one
//!     axis, every axis size at least 1, and exactly as many devices as the product of the
//!     sizes; device names are non-empty, unique within the mesh and do not start with `@`.
//!     A value has a sharding only if it has a mesh ([`Graph::value_mesh`]: its producer's,
//!     or the graph's only one); its mesh axes exist in that mesh, and each static tensor
//!     extent is divisible by the product of the sizes of the mesh axes it is split over. A
//!     device name starting with `@` names a mesh: it is `@` followed by a mesh's name. An op
//!     on a mesh reads no value split on another mesh (values cross meshes whole).
//! 11. **Transfers and collectives**: a `transfer` goes between two different devices, and
//!     when it has a device, that device is its `to`. A collective (`all-reduce`,
//!     `all-gather`, `all-slice`, `reduce-scatter`, `all-to-all`) runs on a mesh (its device
//!     `@name`; without a device, the graph's only mesh) and names only that mesh's axes. An `all-gather`'s
//!     operand is split over each of its axes and its result over none of them; an
//!     `all-reduce`'s operand and result are split over none of its axes (the operand holds
//!     partial sums along them); an `all-slice`'s and a `reduce-scatter`'s operand is split
//!     over none of its axes and the result over each of them; an `all-to-all`'s operand and
//!     result are split over the same mesh axes, each of its axes along a different tensor
//!     axis before and after.
//! 12. **Regions**: the regions (nested graphs) of `if`, `loop` and `scan` satisfy every
//!     invariant above themselves, and besides have no constants, no meshes, no shardings and
//!     no devices (the region op is placed as one unit, and what a body needs from outside
//!     is a captured operand). Their inputs and outputs fit the op (invariant 4, through
//!     inference: `if` branches take the captured operands and return the same types, a
//!     loop body returns its carried values with their types). Regions nest at most
//!     [`MAX_REGION_DEPTH`] deep. An error inside a region is reported on the region op,
//!     with the region's name and the nested message.
//! 13. **State**: each [`crate::StateSlot`] names an existing input, at most one slot per
//!     input; its `next` names an output (at most one slot per output) of the input's type;
//!     a constant initial value exists and has the input's type. A state held on a mesh
//!     between runs names a declared mesh, and its next value is made on that mesh with the
//!     input's sharding. Regions have no state.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::graph::{Entity, Graph, OpId, ValueDef, ValueId};
use crate::infer::infer;
use crate::op::Op;
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

/// How deep regions may nest (a region op inside a region counts one more level); the
/// interpreter and the text parser share the limit.
pub const MAX_REGION_DEPTH: usize = 64;

/// Checks every invariant in the module doc; returns all violations found, in a
/// deterministic order (graph, constants, then ops in body order, then outputs).
pub fn verify(graph: &Graph) -> Result<(), Vec<VerifyError>> {
    verify_at(graph, 0)
}

fn verify_at(graph: &Graph, depth: usize) -> Result<(), Vec<VerifyError>> {
    let mut v = Verifier {
        graph,
        errors: Vec::new(),
        depth,
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
    /// How many regions enclose this graph (0: the top-level graph).
    depth: usize,
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
        self.check_meshes();
        self.check_state();

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
        if g.output_names().len() != g.outputs().len() {
            self.error(
                Entity::Graph,
                format!(
                    "the graph has {} outputs but {} output names",
                    g.outputs().len(),
                    g.output_names().len()
                ),
            );
        }
        let mut out_names = BTreeSet::new();
        for (i, name) in g.output_names().iter().enumerate() {
            match name {
                Some(n) if n.is_empty() => {
                    self.error(Entity::Graph, format!("output {i} has an empty name"))
                }
                Some(n) if !out_names.insert(n.as_str()) => self.error(
                    Entity::Graph,
                    format!("output {i} is named `{n}` like an earlier output"),
                ),
                _ => {}
            }
        }
    }

    fn check_state(&mut self) {
        let g = self.graph;
        let names = crate::text::output_names(g);
        let mut inputs: BTreeSet<usize> = BTreeSet::new();
        let mut nexts: BTreeSet<&str> = BTreeSet::new();
        for slot in &g.state {
            let Some(&v) = g.inputs().get(slot.input) else {
                self.error(
                    Entity::Graph,
                    format!(
                        "a state slot names input {}, which does not exist",
                        slot.input
                    ),
                );
                continue;
            };
            let e = Entity::Value(v);
            let desc = self.value_desc(v);
            if !inputs.insert(slot.input) {
                self.error(e, format!("{desc} has two state slots"));
            }
            if !nexts.insert(slot.next.as_str()) {
                self.error(
                    e,
                    format!("output \"{}\" is the next value of two states", slot.next),
                );
            }
            match names.iter().position(|n| *n == slot.next) {
                None => self.error(
                    e,
                    format!(
                        "{desc}'s next value names output \"{}\", which does not exist",
                        slot.next
                    ),
                ),
                Some(k) => {
                    let out = g.outputs()[k];
                    if let Some(m) = &slot.mesh
                        && g.is_valid_value(out)
                    {
                        self.check_split_state(v, out, m, &slot.next);
                    }
                    if g.is_valid_value(out) && g.ty(out) != g.ty(v) {
                        self.error(
                            e,
                            format!(
                                "{desc} is {} but its next value \"{}\" is {}",
                                g.ty(v),
                                slot.next,
                                g.ty(out)
                            ),
                        );
                    }
                }
            }
            if let crate::graph::StateInit::Const(c) = slot.init {
                if c.index() >= g.num_consts() {
                    self.error(
                        e,
                        format!("{desc}'s initial value is the missing constant {c}"),
                    );
                } else if g.constant(c).ty != *g.ty(v) {
                    self.error(
                        e,
                        format!(
                            "{desc} is {} but its initial value @{} is {}",
                            g.ty(v),
                            g.constant(c).name,
                            g.constant(c).ty
                        ),
                    );
                }
            }
        }
    }

    /// A state held split on mesh `m` between runs: the mesh exists, and the next value
    /// `out` is made there with the input `v`'s sharding.
    fn check_split_state(&mut self, v: ValueId, out: ValueId, m: &str, next: &str) {
        let g = self.graph;
        let desc = self.value_desc(v);
        if !g.meshes.iter().any(|x| x.name == m) {
            self.error(
                Entity::Value(v),
                format!("{desc} is held on mesh @{m}, which the graph does not declare"),
            );
            return;
        }
        let axes = |x: ValueId| -> Vec<Vec<u32>> {
            match &g.value(x).sharding {
                Some(s) => s.axes.clone(),
                None => vec![Vec::new(); g.ty(x).rank()],
            }
        };
        let made_on = g.value_mesh(out).map(|x| x.name.as_str());
        if made_on != Some(m) || axes(out) != axes(v) {
            self.error(
                Entity::Value(v),
                format!(
                    "{desc} is held split on mesh @{m}, but its next value \"{next}\" is not made there with its sharding"
                ),
            );
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

    fn check_meshes(&mut self) {
        let e = Entity::Graph;
        let mut names = BTreeSet::new();
        for m in &self.graph.meshes {
            if m.name.is_empty() {
                self.error(e, "a mesh has an empty name".into());
            } else if !names.insert(m.name.as_str()) {
                self.error(e, format!("mesh @{} is declared twice", m.name));
            }
            if m.shape.is_empty() {
                self.error(e, format!("mesh @{} has no axes", m.name));
            }
            if m.shape.contains(&0) {
                self.error(e, format!("mesh @{} has an axis of size 0", m.name));
            }
            let want: u64 = m.shape.iter().map(|&s| u64::from(s)).product();
            if want != m.devices.len() as u64 {
                self.error(
                    e,
                    format!(
                        "mesh @{} of shape {:?} needs {want} devices, has {}",
                        m.name,
                        m.shape,
                        m.devices.len()
                    ),
                );
            }
            let mut seen = BTreeSet::new();
            for d in &m.devices {
                if d.is_empty() || d.starts_with('@') {
                    self.error(e, format!("mesh @{}: bad device name {d:?}", m.name));
                } else if !seen.insert(d.as_str()) {
                    self.error(e, format!("mesh @{}: device {d:?} is listed twice", m.name));
                }
            }
        }
    }

    /// Invariants 10 (mesh devices) and 11 for one op.
    fn check_placement(&mut self, o: OpId) {
        let g = self.graph;
        let data = g.op(o);
        let e = Entity::Op(o);
        let desc = self.op_desc(o);
        if let Some(d) = data.device.as_deref()
            && d.starts_with('@')
            && g.mesh_of_device(d).is_none()
        {
            let msg = if g.meshes.is_empty() {
                format!("{desc}: device {d:?} names a mesh, but the graph has none")
            } else {
                format!("{desc}: device {d:?} names no mesh of the graph")
            };
            self.error(e, msg);
        }
        let mesh = match data.device.as_deref() {
            Some(d) if d.starts_with('@') => g.mesh_of_device(d),
            _ => match g.meshes.as_slice() {
                [m] => Some(m),
                _ => None,
            },
        };
        // Values cross meshes whole: an op on a mesh reads split values of its own mesh only.
        if let Some(m) = data.device.as_deref().and_then(|d| g.mesh_of_device(d)) {
            for &v in data.operands.iter().filter(|&&v| g.is_valid_value(v)) {
                let split = g
                    .value(v)
                    .sharding
                    .as_ref()
                    .is_some_and(|s| !s.is_replicated());
                if let Some(other) = g.value_mesh(v).filter(|o| split && o.name != m.name) {
                    self.error(
                        e,
                        format!(
                            "{desc}: on mesh @{} it reads {}, split on mesh @{}; values cross \
                             meshes whole",
                            m.name,
                            self.value_desc(v),
                            other.name
                        ),
                    );
                }
            }
        }
        match &data.op {
            Op::Transfer { from, to } => {
                if from == to {
                    self.error(e, format!("{desc}: transfers from {from:?} to itself"));
                }
                if let Some(d) = &data.device
                    && d != to
                {
                    self.error(
                        e,
                        format!("{desc}: is placed on {d:?}, but transfers to {to:?}"),
                    );
                }
            }
            Op::AllReduce { axes }
            | Op::AllGather { axes }
            | Op::AllSlice { axes }
            | Op::ReduceScatter { axes }
            | Op::AllToAll { axes } => {
                let Some(m) = mesh else {
                    let msg = if g.meshes.is_empty() {
                        format!("{desc}: a collective needs a mesh")
                    } else {
                        format!("{desc}: a collective needs its mesh as its device (`@name`)")
                    };
                    self.error(e, msg);
                    return;
                };
                if let Some(a) = axes.iter().find(|&&a| a as usize >= m.shape.len()) {
                    self.error(
                        e,
                        format!(
                            "{desc}: mesh axis {a} does not exist (mesh @{} has {} axes)",
                            m.name,
                            m.shape.len()
                        ),
                    );
                }
                if let Some(d) = &data.device
                    && *d != m.device_name()
                {
                    self.error(
                        e,
                        format!(
                            "{desc}: a collective runs on the mesh @{}, not on {d:?}",
                            m.name
                        ),
                    );
                }
                let split = |v: Option<&ValueId>| -> BTreeSet<u32> {
                    v.filter(|&&v| g.is_valid_value(v))
                        .and_then(|&v| g.value(v).sharding.as_ref())
                        .map(|s| s.mesh_axes().collect())
                        .unwrap_or_default()
                };
                let (operand, result) = (split(data.operands.first()), split(data.results.first()));
                let gather = matches!(data.op, Op::AllGather { .. });
                if let Op::AllToAll { .. } = data.op {
                    // The tensor axis that each mesh axis splits, before and after.
                    let axis_of = |v: Option<&ValueId>, a: u32| -> Option<usize> {
                        v.filter(|&&v| g.is_valid_value(v))
                            .and_then(|&v| g.value(v).sharding.as_ref())
                            .and_then(|s| s.axes.iter().position(|m| m.contains(&a)))
                    };
                    for &a in axes {
                        let (from, to) = (
                            axis_of(data.operands.first(), a),
                            axis_of(data.results.first(), a),
                        );
                        if from.is_none() || to.is_none() {
                            self.error(
                                e,
                                format!("{desc}: its operand and result must both be split over mesh axis {a}"),
                            );
                        } else if from == to {
                            self.error(
                                e,
                                format!("{desc}: its operand and result are split over mesh axis {a} along the same tensor axis"),
                            );
                        }
                    }
                    if operand != result {
                        self.error(
                            e,
                            format!("{desc}: its operand and result must be split over the same mesh axes"),
                        );
                    }
                    // A mesh axis it does not list keeps its tensor axis (no op pays for
                    // moving it).
                    for &a in operand.iter().filter(|a| !axes.contains(a)) {
                        if axis_of(data.operands.first(), a) != axis_of(data.results.first(), a) {
                            self.error(
                                e,
                                format!("{desc}: mesh axis {a} is not among its axes, but its split moves to another tensor axis"),
                            );
                        }
                    }
                    return;
                }
                if matches!(data.op, Op::AllSlice { .. } | Op::ReduceScatter { .. }) {
                    let verb = if matches!(data.op, Op::AllSlice { .. }) {
                        "slices"
                    } else {
                        "reduces"
                    };
                    for &a in axes {
                        if operand.contains(&a) {
                            self.error(
                                e,
                                format!("{desc}: {verb} over mesh axis {a}, but its operand is already split over it"),
                            );
                        }
                        if !result.contains(&a) {
                            self.error(
                                e,
                                format!("{desc}: its result is not split over mesh axis {a}"),
                            );
                        }
                    }
                    let want: BTreeSet<u32> = operand.iter().chain(axes).copied().collect();
                    if let Some(a) = result.difference(&want).next() {
                        self.error(
                            e,
                            format!(
                                "{desc}: its result is split over mesh axis {a}, which neither \
                                 its operand nor its axes split"
                            ),
                        );
                    }
                    return;
                }
                for &a in axes {
                    if gather && !operand.contains(&a) {
                        self.error(
                            e,
                            format!("{desc}: gathers over mesh axis {a}, but its operand is not split over it"),
                        );
                    }
                    if !gather && operand.contains(&a) {
                        self.error(
                            e,
                            format!("{desc}: reduces over mesh axis {a}, but its operand is split over it"),
                        );
                    }
                    if result.contains(&a) {
                        self.error(
                            e,
                            format!("{desc}: its result is still split over mesh axis {a}"),
                        );
                    }
                }
            }
            _ => {}
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
        self.check_placement(o);
        self.check_regions(o);

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

    /// Invariant 12: a region op's regions, each verified as a graph of its own.
    fn check_regions(&mut self, o: OpId) {
        let data = self.graph.op(o);
        let regions = data.op.regions();
        if regions.is_empty() {
            return;
        }
        let e = Entity::Op(o);
        if self.depth + 1 > MAX_REGION_DEPTH {
            self.error(
                e,
                format!(
                    "{}: regions nest more than {MAX_REGION_DEPTH} deep",
                    self.op_desc(o)
                ),
            );
            return;
        }
        for (region, name) in regions.iter().zip(data.op.region_names()) {
            let mut problems: Vec<String> = Vec::new();
            if region.num_consts() > 0 {
                problems.push(
                    "it has constants of its own (a region captures constants as operands)".into(),
                );
            }
            if !region.meshes.is_empty() {
                problems.push("it has a mesh".into());
            }
            if !region.state.is_empty() {
                problems.push("it has state inputs".into());
            }
            for &v in region.inputs() {
                if region.is_valid_value(v) && region.value(v).sharding.is_some() {
                    problems.push(format!("its input {v} has a sharding"));
                }
            }
            for &ro in region.ops() {
                if ro.index() >= region.num_op_handles() {
                    continue;
                }
                let rd = region.op(ro);
                if rd.device.is_some() {
                    problems.push(format!(
                        "its op {ro} (`{}`) has a device (the region op is placed as a whole)",
                        rd.op.name()
                    ));
                }
                for &r in &rd.results {
                    if region.is_valid_value(r) && region.value(r).sharding.is_some() {
                        problems.push(format!("its value {r} has a sharding"));
                    }
                }
            }
            if let Err(errors) = verify_at(region, self.depth + 1) {
                problems.extend(errors.into_iter().map(|err| match err.entity {
                    Entity::Graph => err.message,
                    other => format!("{other}: {}", err.message),
                }));
            }
            for p in problems {
                self.error(e, format!("{}: in the {name} region: {p}", self.op_desc(o)));
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
                    format!("{}: sharding uses a mesh axis twice", self.value_desc(v)),
                );
            }
            match g.value_mesh(v) {
                None if g.meshes.is_empty() => self.error(
                    e,
                    format!(
                        "{} is sharded, but the graph declares no mesh",
                        self.value_desc(v)
                    ),
                ),
                None => self.error(
                    e,
                    format!(
                        "{} is sharded, but is not made on a mesh (the graph has several)",
                        self.value_desc(v)
                    ),
                ),
                Some(m) => {
                    if let Some(a) = grid_axes.iter().find(|&&a| a as usize >= m.shape.len()) {
                        self.error(
                            e,
                            format!(
                                "{}: mesh axis {a} does not exist (mesh @{} has {} axes)",
                                self.value_desc(v),
                                m.name,
                                m.shape.len()
                            ),
                        );
                    }
                    for (i, (axes, d)) in s.axes.iter().zip(&data.ty.shape).enumerate() {
                        let parts = m.size_of(axes.iter().copied());
                        if let Some(n) = d.as_static()
                            && parts > 0
                            && n % parts != 0
                        {
                            self.error(
                                e,
                                format!(
                                    "{}: axis {i} of extent {n} cannot be split into {parts} \
                                     equal parts",
                                    self.value_desc(v)
                                ),
                            );
                        }
                    }
                }
            }
        }
    }
}
