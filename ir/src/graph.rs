//! The graph: values, ops, constants and the op order.
//!
//! Entities are typed `u32` handles ([`ValueId`], [`OpId`], [`ConstId`]) into arenas owned by
//! the [`Graph`]. Handles are stable: removing an op takes it out of the op order but never
//! renumbers anything, so a handle held by a pass stays valid (it may point at a dead op).
//! The body is the ordered list [`Graph::ops`]; a well-formed graph defines every value
//! before its uses in that order (the verifier checks it).

use std::fmt;

use bytes::Bytes;

use crate::op::Op;
use crate::types::TensorType;

macro_rules! entity {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(u32);

        impl $name {
            /// The handle's index in its arena.
            pub fn index(self) -> usize {
                self.0 as usize
            }

            /// The handle for an arena index.
            pub fn from_index(index: usize) -> Self {
                $name(u32::try_from(index).expect("entity index exceeds u32"))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

entity!(
    /// A value: a graph input or an op result.
    ValueId,
    "v"
);
entity!(
    /// An operation.
    OpId,
    "op"
);
entity!(
    /// A constant (weight) of the graph.
    ConstId,
    "c"
);

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// The `n`-th graph input.
    Input(usize),
    /// Result `n` of an op.
    Result(OpId, usize),
}

/// How a value is split over a [`Mesh`] (its producer's, see [`Graph::value_mesh`]): for every
/// tensor axis, the mesh axes it
/// is split over (empty: replicated along that axis), major to minor. A tensor axis split
/// over mesh axes of sizes `a` and `b` is cut into `a * b` equal blocks. Used by the
/// sharding passes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sharding {
    /// Grid axes per tensor axis.
    pub axes: Vec<Vec<u32>>,
}

impl Sharding {
    /// A sharding that replicates a value of rank `rank`.
    pub fn replicated(rank: usize) -> Sharding {
        Sharding {
            axes: vec![Vec::new(); rank],
        }
    }

    /// Whether no tensor axis is split.
    pub fn is_replicated(&self) -> bool {
        self.axes.iter().all(Vec::is_empty)
    }

    /// Every mesh axis used, in tensor-axis order.
    pub fn mesh_axes(&self) -> impl Iterator<Item = u32> + '_ {
        self.axes.iter().flatten().copied()
    }
}

/// A device mesh of SPMD sharding: named devices laid out in an n-dimensional grid.
/// A graph declares any number, with distinct names (Alpa's submeshes: one per pipeline
/// stage, say); an op placed on `device("@name")` runs on all of that mesh's devices at once,
/// and the shardings of its results refer to that mesh's axes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mesh {
    /// The mesh's name, printed `@name`; ops on the whole mesh have `device("@name")`.
    pub name: String,
    /// Extent of each mesh axis.
    pub shape: Vec<u32>,
    /// Device names in row-major order (the last axis varies fastest); as many as the
    /// product of `shape`.
    pub devices: Vec<String>,
}

impl Mesh {
    /// The `device(...)` string of an op placed on the whole mesh: `@name`.
    pub fn device_name(&self) -> String {
        format!("@{}", self.name)
    }

    /// The size of mesh axis `axis` (1 for an axis the mesh does not have).
    pub fn axis_size(&self, axis: u32) -> u64 {
        self.shape.get(axis as usize).map_or(1, |&s| u64::from(s))
    }

    /// The product of the sizes of `axes`.
    pub fn size_of(&self, axes: impl IntoIterator<Item = u32>) -> u64 {
        axes.into_iter().map(|a| self.axis_size(a)).product()
    }

    /// How many pieces a value with sharding `s` is cut into (1 for replicated).
    pub fn shard_count(&self, s: &Sharding) -> u64 {
        self.size_of(s.mesh_axes())
    }

    /// The groups of devices (indices into [`Mesh::devices`]) that communicate in a
    /// collective over `axes`: one group per position on the other axes, in row-major order,
    /// each listing its devices in row-major order. Axes outside the mesh are ignored.
    pub fn groups(&self, axes: &[u32]) -> Vec<Vec<usize>> {
        let mut groups: std::collections::BTreeMap<Vec<u32>, Vec<usize>> =
            std::collections::BTreeMap::new();
        let n: usize = self.shape.iter().map(|&s| s as usize).product();
        for i in 0..n {
            let mut rest = i;
            let mut coords = vec![0u32; self.shape.len()];
            for (k, &s) in self.shape.iter().enumerate().rev() {
                coords[k] = (rest % s.max(1) as usize) as u32;
                rest /= s.max(1) as usize;
            }
            let key: Vec<u32> = coords
                .iter()
                .enumerate()
                .map(|(k, &c)| if axes.contains(&(k as u32)) { 0 } else { c })
                .collect();
            groups.entry(key).or_default().push(i);
        }
        groups.into_values().collect()
    }
}

/// A value's data.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueData {
    /// The readable name (from the model, or given by a pass); `None` prints a number.
    pub name: Option<String>,
    /// The type.
    pub ty: TensorType,
    /// The definition.
    pub def: ValueDef,
    /// The sharding, once a sharding pass set it.
    pub sharding: Option<Sharding>,
}

/// An op's data.
#[derive(Clone, Debug, PartialEq)]
pub struct OpData {
    /// Kind and attributes.
    pub op: Op,
    /// Operands in order.
    pub operands: Vec<ValueId>,
    /// Results in order.
    pub results: Vec<ValueId>,
    /// The device this op is placed on, once placement ran.
    pub device: Option<String>,
    /// The source location or model node name, when known (printed as `loc("...")`).
    pub loc: Option<String>,
    /// For an op of a backward graph (made by the `grad` pass), the first result of the
    /// forward op it differentiates (printed as `grad-of(%v)`): placement colocates the two
    /// and the report attributes the backward op to the forward one. A link only, not a
    /// use: it does not order anything, and it is dropped when printing once the forward op
    /// no longer comes before this one.
    pub grad_of: Option<ValueId>,
}

/// The bytes of a constant: little-endian, row-major, `ty.size_bytes()` long (bool is one
/// byte per element).
///
/// Cloning shares the buffer (reference counted); a constant may point into a memory map.
/// Passes never copy weight data: they clone the [`Bytes`] handle.
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    /// The unique name, printed as `@name`.
    pub name: String,
    /// The type; its shape is fully static.
    pub ty: TensorType,
    /// The raw data.
    pub data: Bytes,
}

/// A graph input that is *state*: a value carried from one run of the graph to the next,
/// such as a training step's parameters, optimizer moments and step count. It has an
/// initial value and an output that computes its next value; the two share one buffer (the
/// input is donated to that output), so memory counts them once and a runtime updates it in
/// place. Printed after the input's type: `state(init = @fc1.weight, next = "fc1.weight")`.
///
/// A state may stay split between runs (ZeRO's sharded optimizer state): with `mesh`, the
/// state is held on that mesh's devices, each keeping its block of the input's sharding, and
/// its next value has the same sharding there. Printed `state(init = zeros, next = "m",
/// mesh = @dp)`.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSlot {
    /// The index of the input in [`Graph::inputs`].
    pub input: usize,
    /// The value before the first run.
    pub init: StateInit,
    /// The name of the output (see [`Graph::output_names`]) that holds the next value.
    pub next: String,
    /// The mesh (its name) that holds the state split by the input's sharding between runs.
    pub mesh: Option<String>,
}

/// The initial value of a [`StateSlot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateInit {
    /// A constant of the graph (of the input's type); no op needs to read it.
    Const(ConstId),
    /// Zeros (`init = zeros`).
    Zeros,
}

/// A computation graph: inputs, a topologically ordered body of ops, outputs, constants.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// The graph's name, printed as `graph @name`.
    pub name: String,
    /// The device meshes, in declaration order (each printed as a `mesh` line before the
    /// graph); names are distinct. Empty when the graph is not sharded.
    pub meshes: Vec<Mesh>,
    /// The inputs that are state, in input order (see [`StateSlot`]).
    pub state: Vec<StateSlot>,
    values: Vec<ValueData>,
    ops: Vec<OpData>,
    order: Vec<OpId>,
    consts: Vec<Constant>,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    /// The model's name of each output (parallel to `outputs`); `None` for an output that
    /// takes its value's printed name.
    output_names: Vec<Option<String>>,
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// The mesh named `name` (without its `@`).
    pub fn mesh_named(&self, name: &str) -> Option<&Mesh> {
        self.meshes.iter().find(|m| m.name == name)
    }

    /// The mesh a device string names (`@name`), if it names one the graph declares.
    pub fn mesh_of_device(&self, device: &str) -> Option<&Mesh> {
        self.mesh_named(device.strip_prefix('@')?)
    }

    /// The mesh op `o` runs on (its device is `@name`).
    pub fn op_mesh(&self, o: OpId) -> Option<&Mesh> {
        self.mesh_of_device(self.op(o).device.as_deref()?)
    }

    /// The mesh value `v`'s sharding refers to: its producer's mesh, or a state input's
    /// ([`StateSlot::mesh`]); for any other value (a graph input, a constant, the result of
    /// an op on one device or not yet placed), the graph's mesh when it has exactly one.
    pub fn value_mesh(&self, v: ValueId) -> Option<&Mesh> {
        let own = match self.value(v).def {
            ValueDef::Result(o, _) => self.op_mesh(o),
            ValueDef::Input(i) => self
                .state
                .iter()
                .find(|s| s.input == i)
                .and_then(|s| s.mesh.as_deref())
                .and_then(|m| self.meshes.iter().find(|x| x.name == m)),
        };
        own.or(match self.meshes.as_slice() {
            [m] => Some(m),
            _ => None,
        })
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: Option<String>, ty: TensorType) -> ValueId {
        let id = ValueId::from_index(self.values.len());
        self.values.push(ValueData {
            name,
            ty,
            def: ValueDef::Input(self.inputs.len()),
            sharding: None,
        });
        self.inputs.push(id);
        id
    }

    /// Adds a constant; its name must be unique (the verifier checks it).
    pub fn add_const(&mut self, c: Constant) -> ConstId {
        let id = ConstId::from_index(self.consts.len());
        self.consts.push(c);
        id
    }

    /// Appends an op at the end of the body, with one result per given type.
    /// Results get no names; see [`Graph::set_name`].
    pub fn push_op(
        &mut self,
        op: Op,
        operands: Vec<ValueId>,
        result_types: Vec<TensorType>,
    ) -> OpId {
        let id = self.create_op(op, operands, result_types);
        self.order.push(id);
        id
    }

    /// Inserts an op into the body before position `pos` of [`Graph::ops`].
    pub fn insert_op(
        &mut self,
        pos: usize,
        op: Op,
        operands: Vec<ValueId>,
        result_types: Vec<TensorType>,
    ) -> OpId {
        let id = self.create_op(op, operands, result_types);
        self.order.insert(pos, id);
        id
    }

    fn create_op(&mut self, op: Op, operands: Vec<ValueId>, result_types: Vec<TensorType>) -> OpId {
        let id = OpId::from_index(self.ops.len());
        let mut results = Vec::with_capacity(result_types.len());
        for (i, ty) in result_types.into_iter().enumerate() {
            let v = ValueId::from_index(self.values.len());
            self.values.push(ValueData {
                name: None,
                ty,
                def: ValueDef::Result(id, i),
                sharding: None,
            });
            results.push(v);
        }
        self.ops.push(OpData {
            op,
            operands,
            results,
            device: None,
            loc: None,
            grad_of: None,
        });
        id
    }

    /// Removes an op from the body. Its handle and its results' handles stay valid but dead.
    pub fn remove_op(&mut self, op: OpId) {
        self.order.retain(|&o| o != op);
    }

    /// Replaces the body with `order` (live op handles, in order). Ops left out become dead;
    /// the verifier checks that the new order defines every value before its uses.
    pub fn set_ops(&mut self, order: Vec<OpId>) {
        self.order = order;
    }

    /// Creates an op without putting it in the body (place it with [`Graph::set_ops`]).
    pub fn create_detached_op(
        &mut self,
        op: Op,
        operands: Vec<ValueId>,
        result_types: Vec<TensorType>,
    ) -> OpId {
        self.create_op(op, operands, result_types)
    }

    /// Removes the constants for which `keep` is false. This is the one operation that
    /// renumbers handles: the remaining constants are compacted and every `const` op (live or
    /// dead) is updated. Returns how many were removed.
    /// Constants that are the initial value of a [`StateSlot`] are always kept.
    pub fn retain_consts(&mut self, mut keep: impl FnMut(ConstId, &Constant) -> bool) -> usize {
        let inits: Vec<ConstId> = self
            .state
            .iter()
            .filter_map(|s| match s.init {
                StateInit::Const(c) => Some(c),
                StateInit::Zeros => None,
            })
            .collect();
        let mut remap: Vec<Option<ConstId>> = Vec::with_capacity(self.consts.len());
        let mut kept = Vec::with_capacity(self.consts.len());
        for (i, c) in std::mem::take(&mut self.consts).into_iter().enumerate() {
            let id = ConstId::from_index(i);
            if inits.contains(&id) || keep(id, &c) {
                remap.push(Some(ConstId::from_index(kept.len())));
                kept.push(c);
            } else {
                remap.push(None);
            }
        }
        let removed = remap.len() - kept.len();
        self.consts = kept;
        for slot in &mut self.state {
            if let StateInit::Const(c) = &mut slot.init {
                *c = remap
                    .get(c.index())
                    .copied()
                    .flatten()
                    .unwrap_or(ConstId(u32::MAX));
            }
        }
        for data in &mut self.ops {
            if let Op::Const(c) = &mut data.op {
                // A dead op may point at a removed constant; point it at nothing valid.
                *c = remap
                    .get(c.index())
                    .copied()
                    .flatten()
                    .unwrap_or(ConstId(u32::MAX));
            }
        }
        removed
    }

    /// The values of the state inputs and of their next values (the outputs the slots name);
    /// a slot whose input or output is missing is skipped.
    pub fn state_values(
        &self,
    ) -> (
        std::collections::BTreeSet<ValueId>,
        std::collections::BTreeSet<ValueId>,
    ) {
        let names = crate::text::output_names(self);
        let inputs = self
            .state
            .iter()
            .filter_map(|s| self.inputs.get(s.input).copied())
            .collect();
        let nexts = self
            .state
            .iter()
            .filter_map(|s| names.iter().position(|n| *n == s.next))
            .map(|k| self.outputs[k])
            .collect();
        (inputs, nexts)
    }

    /// Sets the graph outputs, unnamed: each takes its value's printed name (see
    /// [`output_names`](crate::text::output_names)).
    pub fn set_outputs(&mut self, outputs: Vec<ValueId>) {
        self.output_names = vec![None; outputs.len()];
        self.outputs = outputs;
    }

    /// Sets the graph outputs with their names. An output's name is the graph's interface
    /// (`run` names its files after it); it is independent of the name of the value that
    /// computes it, so passes that replace an output's value keep its name.
    pub fn set_named_outputs(&mut self, outputs: Vec<(ValueId, Option<String>)>) {
        (self.outputs, self.output_names) = outputs.into_iter().unzip();
    }

    /// Replaces the values of the outputs, keeping their names: `values` must have one value
    /// per output.
    ///
    /// # Panics
    /// If `values` has another length than [`Graph::outputs`] (a pass's bug, not input's).
    pub fn replace_output_values(&mut self, values: Vec<ValueId>) {
        assert_eq!(
            values.len(),
            self.outputs.len(),
            "replace_output_values: one value per output"
        );
        self.outputs = values;
    }

    /// The outputs' own names, parallel to [`Graph::outputs`]: `None` where the output is
    /// named by its value.
    pub fn output_names(&self) -> &[Option<String>] {
        &self.output_names
    }

    /// Gives a value a name.
    pub fn set_name(&mut self, v: ValueId, name: impl Into<String>) {
        self.values[v.index()].name = Some(name.into());
    }

    /// The body: live ops in order.
    pub fn ops(&self) -> &[OpId] {
        &self.order
    }

    /// The graph inputs.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }

    /// The graph outputs.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// An op's data.
    pub fn op(&self, id: OpId) -> &OpData {
        &self.ops[id.index()]
    }

    /// An op's data, mutably.
    pub fn op_mut(&mut self, id: OpId) -> &mut OpData {
        &mut self.ops[id.index()]
    }

    /// A value's data.
    pub fn value(&self, id: ValueId) -> &ValueData {
        &self.values[id.index()]
    }

    /// A value's data, mutably.
    pub fn value_mut(&mut self, id: ValueId) -> &mut ValueData {
        &mut self.values[id.index()]
    }

    /// A value's type.
    pub fn ty(&self, id: ValueId) -> &TensorType {
        &self.values[id.index()].ty
    }

    /// A constant.
    pub fn constant(&self, id: ConstId) -> &Constant {
        &self.consts[id.index()]
    }

    /// All constants, with their handles, in creation order.
    pub fn consts(&self) -> impl Iterator<Item = (ConstId, &Constant)> {
        self.consts
            .iter()
            .enumerate()
            .map(|(i, c)| (ConstId::from_index(i), c))
    }

    /// The number of constants.
    pub fn num_consts(&self) -> usize {
        self.consts.len()
    }

    /// The number of value handles ever created (live or dead).
    pub fn num_values(&self) -> usize {
        self.values.len()
    }

    /// The number of op handles ever created (live or dead).
    pub fn num_op_handles(&self) -> usize {
        self.ops.len()
    }

    /// Whether a handle is in range (it may still be dead).
    pub fn is_valid_value(&self, v: ValueId) -> bool {
        v.index() < self.values.len()
    }

    /// Replaces every use of `from` (op operands and graph outputs) with `to`.
    pub fn replace_all_uses(&mut self, from: ValueId, to: ValueId) {
        for &o in &self.order {
            for operand in &mut self.ops[o.index()].operands {
                if *operand == from {
                    *operand = to;
                }
            }
        }
        for out in &mut self.outputs {
            if *out == from {
                *out = to;
            }
        }
    }
}

/// Any entity of a graph, for diagnostics that point at one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Entity {
    /// The graph as a whole (its signature or outputs).
    Graph,
    /// A value.
    Value(ValueId),
    /// An op.
    Op(OpId),
    /// A constant.
    Const(ConstId),
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::Graph => f.write_str("graph"),
            Entity::Value(v) => write!(f, "{v}"),
            Entity::Op(o) => write!(f, "{o}"),
            Entity::Const(c) => write!(f, "{c}"),
        }
    }
}
