//! `manifest.json`: the dataflow between the device programs of a compiled model.
//!
//! Steps run in `id` order. Each step is one function of one device's module; its
//! arguments come from the graph's inputs, from earlier steps' results (with the `transfer`
//! when the producer is another device), or from the weights file. The graph's outputs are
//! steps' results (moved to the host when computed elsewhere), inputs, or weights.
//!
//! A training step's state is *donated*: the step that computes a parameter's (or optimizer
//! state's) next value writes it into that input's buffer (`donated`), so the state is one
//! buffer updated in place, and the graph output holding the next value names the input.

use serde::{Deserialize, Serialize};

/// The format tag of this manifest version.
pub const FORMAT: &str = "tessera-manifest/2";
/// The weights file next to the manifest (safetensors).
pub const WEIGHTS_FILE: &str = "weights.safetensors";

/// The manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// The model it was compiled from.
    pub model: String,
    /// The graph's name.
    pub graph: String,
    /// The target's name.
    pub target: String,
    /// The device that holds the program's inputs and outputs.
    pub host: String,
    /// The weights file (relative to the manifest), if any step takes weights.
    pub weights: Option<String>,
    /// The graph's inputs in order.
    pub inputs: Vec<Input>,
    /// The graph's outputs in order, with where each comes from.
    pub outputs: Vec<Output>,
    /// The devices with work, in target order.
    pub devices: Vec<ManifestDevice>,
    /// The steps in execution order.
    pub steps: Vec<ManifestStep>,
    /// The device meshes SPMD steps run on (a step's device `@<name>` names one).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub meshes: Vec<ManifestMesh>,
}

impl Manifest {
    /// The mesh a step's device (`@<name>`) names.
    pub fn mesh_of(&self, device: &str) -> Option<&ManifestMesh> {
        let name = device.strip_prefix('@')?;
        self.meshes.iter().find(|m| m.name == name)
    }

    /// The mesh and the sharding a state is held split by; `None` when the manifest lacks
    /// its mesh.
    pub fn held_layout(&self, h: &Held) -> Option<(tessera_ir::Mesh, tessera_ir::Sharding)> {
        let mesh = self.mesh_of(&h.mesh)?.to_ir();
        let sharding = tessera_ir::Sharding {
            axes: h.sharding.clone(),
        };
        Some((mesh, sharding))
    }
}

impl ManifestMesh {
    /// The IR's mesh.
    pub fn to_ir(&self) -> tessera_ir::Mesh {
        tessera_ir::Mesh {
            name: self.name.clone(),
            shape: self.shape.clone(),
            devices: self.devices.clone(),
        }
    }
}

/// A device mesh.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestMesh {
    /// Its name (steps on it have device `@<name>`).
    pub name: String,
    /// Extent per mesh axis.
    pub shape: Vec<u32>,
    /// Its devices, row-major.
    pub devices: Vec<String>,
}

/// A graph input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// Its name.
    pub name: String,
    /// Its type in tessera's text form (`f32[1, 16]`).
    #[serde(rename = "type")]
    pub ty: String,
    /// For a training step's state held split between runs (ZeRO-1): how.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub held: Option<Held>,
}

/// A training step's state held split on a mesh between runs
/// ([`tessera_ir::StateSlot::mesh`]): each mesh device keeps its block. On its input, the
/// steps on the mesh read each device's block ([`Arg::Input`] `per_device`); on the output
/// that is its next value, the source is each device's block of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Held {
    /// The mesh (`@<name>`).
    pub mesh: String,
    /// Mesh axes per tensor axis.
    pub sharding: Vec<Vec<u32>>,
}

/// A graph output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// Its position.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// Where its value comes from.
    pub source: Arg,
    /// The next value of a state held split (see [`Held`]): the source's blocks.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub held: Option<Held>,
}

impl ManifestStep {
    /// The devices that run the step: the mesh's for a step on a mesh, else its device.
    pub fn runners(&self) -> Vec<&str> {
        match &self.mesh {
            Some(devs) => devs.iter().map(String::as_str).collect(),
            None => vec![self.device.as_str()],
        }
    }
}

/// A device that runs steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestDevice {
    /// Its name in the target.
    pub name: String,
    /// Its kind.
    pub kind: String,
    /// Its lowering (`cpu`, `nvptx`, ...), which picks the MLIR pipeline.
    pub lowering: String,
    /// Its GPU architecture (`sm_80`), for an NVIDIA GPU: what its kernels are compiled for.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub arch: Option<String>,
    /// Its module file (relative to the manifest).
    pub module: String,
    /// Its index in the target, the MPI rank that runs it.
    pub rank: usize,
    /// Its code for this machine's CPU, when `compile -o` built it: `tessera run` loads it
    /// instead of compiling the module.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub library: Option<Library>,
}

/// A shared library of a device's steps ([`crate::native::shared_library`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Library {
    /// The file (relative to the manifest).
    pub file: String,
    /// What it was built from ([`crate::native::library_digest`]: the module's text, the CPU
    /// pipeline, the library convention); a module that differs is compiled again.
    pub source_sha256: String,
    /// The CPU it was built for ([`crate::native::host_cpu`]); on another, the module is
    /// compiled again.
    pub host_cpu: String,
}

/// One step: a function call on one device.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ManifestStep {
    /// Its position in the execution order.
    pub id: usize,
    /// The device that runs it.
    pub device: String,
    /// The function in the device's module (empty for a collective).
    pub function: String,
    /// For a step on a mesh (device `@<mesh>`): the devices that each run it on their block.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mesh: Option<Vec<String>>,
    /// For a collective step: which. `all-reduce`: the sum over the mesh of its one argument,
    /// each device's partial sum, given to every device. `all-gather`: the whole tensor
    /// assembled from each device's block, given to every device.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub collective: Option<String>,
    /// For an `all-gather`: how its argument is split (mesh axes per tensor axis).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sharding: Option<Vec<Vec<u32>>>,
    /// Its arguments in order.
    pub args: Vec<Arg>,
    /// Its results in order.
    pub results: Vec<StepResult>,
    /// State it updates in place: each of these inputs (among `args`) is passed as a
    /// writable buffer, which holds the named next value once the step has run (a graph
    /// output that is that next value names the input as its source).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub donated: Vec<Donated>,
}

/// A state input a step writes its next value into.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Donated {
    /// The input's name.
    pub input: String,
    /// The IR value written into it.
    pub value: String,
}

/// A step's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepResult {
    /// Its type.
    #[serde(rename = "type")]
    pub ty: String,
    /// The IR value it is.
    pub value: String,
}

/// Where an argument (or a graph output) comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Arg {
    /// A graph input.
    Input {
        /// The input's name.
        input: String,
        /// Its type (with `per_device`: a block's).
        #[serde(rename = "type")]
        ty: String,
        /// Each mesh device reads its own block (a state held split, see [`Held`]).
        #[serde(skip_serializing_if = "std::ops::Not::not", default)]
        per_device: bool,
    },
    /// A tensor of the weights file.
    Weight {
        /// The tensor's name in the weights file (with `per_device`: `<weight>@<device>`).
        weight: String,
        /// Its type.
        #[serde(rename = "type")]
        ty: String,
        /// Each mesh device reads its own block.
        #[serde(skip_serializing_if = "std::ops::Not::not", default)]
        per_device: bool,
    },
    /// The index of the running device in the mesh (a `tensor<i64>`), first argument of
    /// every step on a mesh.
    MeshIndex {
        /// The mesh (`@<name>`).
        mesh_index: String,
    },
    /// A result of an earlier step.
    Step {
        /// The step.
        step: usize,
        /// Which of its results.
        result: usize,
        /// Its type.
        #[serde(rename = "type")]
        ty: String,
        /// The move between devices, when the step ran elsewhere.
        #[serde(skip_serializing_if = "Option::is_none", default)]
        transfer: Option<Transfer>,
    },
}

impl Arg {
    /// The type of the tensor it names, in tessera's text form (`i64[]` for the mesh index).
    pub fn ty(&self) -> &str {
        match self {
            Arg::Input { ty, .. } | Arg::Weight { ty, .. } | Arg::Step { ty, .. } => ty,
            Arg::MeshIndex { .. } => "i64[]",
        }
    }
}

/// A tensor moving between devices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transfer {
    /// The sending device.
    pub from: String,
    /// The receiving device.
    pub to: String,
    /// The bytes moved.
    pub bytes: u64,
}
