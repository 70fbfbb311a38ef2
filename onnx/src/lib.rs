//! tessera's ONNX importer: the only code in tessera that knows ONNX.
//!
//! [`import_file`] memory-maps a model, decodes it with prost (messages compiled from
//! `proto/onnx.proto`, written from the ONNX IR specification) and builds a
//! [`tessera_ir::Graph`]. Weight data is never copied: `raw_data` and external data become
//! [`tessera_ir::Bytes`] slices of the mapped files.
//!
//! Import maps every ONNX node onto IR ops with ONNX's semantics (broadcasting, negative
//! axes, `auto_pad`, optional inputs, attribute defaults, opset differences); compositions
//! are expanded into several IR ops. Small computations whose inputs are all known (shape
//! arithmetic: `Shape`, `Gather`, `Concat`, ... feeding `Reshape` or `Expand`) are folded
//! into constants with the reference interpreter, so exported transformers come in with
//! static shapes once their symbolic input dimensions are bound
//! ([`ImportOptions::input_shapes`]).
//!
//! Before building anything the importer checks the whole model and rejects it with one
//! error that lists every unsupported (domain, op type, opset) with its node count and first
//! node ([`ImportError::Unsupported`]).

mod decode;
mod export;
mod import;
mod ops;

#[allow(missing_docs, clippy::all, clippy::pedantic, unreachable_pub)]
mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use decode::decode_tensor;
pub use export::{initializer_data_offsets, replace_initializers};
pub use import::{import_bytes, import_file, initializer_names, model_inputs};
pub use ops::supported_ops;

/// The default-domain opsets the importer accepts.
/// The ONNX IR versions the importer accepts (3, the first with typed attributes, to 14, the
/// version onnx 1.23 writes).
pub const IR_VERSION_RANGE: std::ops::RangeInclusive<i64> = 3..=14;

/// Opsets 26 to 28 changed the supported operators only by adding element types and attributes
/// that the importer handles (SpaceToDepth's `mode`, Range's `stash_type`).
pub const OPSET_RANGE: std::ops::RangeInclusive<i64> = 7..=28;

/// The default of [`ImportOptions::fold_limit_bytes`]: 1 GiB.
pub const DEFAULT_FOLD_LIMIT_BYTES: u64 = 1 << 30;

/// The highest tensor rank the importer accepts (numpy's `NPY_MAXDIMS`): a graph input, an
/// initializer or a node result of a higher rank is an error naming it.
pub const MAX_RANK: usize = 64;

/// Options of an import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Static shapes for graph inputs by name (`--input-shape x=1x3x224x224`); they replace
    /// the model's declared (possibly symbolic) shapes, and must have the same rank.
    pub input_shapes: BTreeMap<String, Vec<u64>>,
    /// Values for graph inputs, by name, used only where an operator needs an input's
    /// contents at import time (a reshape's shape, reduction axes, pads, `k` of top-k,
    /// resize scales), directly or through ops that compute it from them (evaluated for
    /// that operator only): the import is specialized for those values, as an ahead-of-time
    /// compiler specializes shapes. The inputs stay graph inputs (their shapes become the
    /// given values' shapes) and are never folded into other computations.
    pub input_values: BTreeMap<String, tessera_ir::Tensor>,
    /// The most bytes a tensor computed at import time may take (default
    /// [`DEFAULT_FOLD_LIMIT_BYTES`]). A table the importer would build as a constant (a
    /// `OneHot` depth's positions, `EyeLike`'s indices, an attention mask) that is larger is
    /// emitted as ops instead; a known value larger than this is not read at import time (it
    /// is not folded, and an operator that needs its contents at import time refuses it);
    /// folding an op evaluates it under this memory limit.
    pub fold_limit_bytes: u64,
    /// The floating-point initializers are parameters to train: no op that reads one is
    /// folded at import, so each stays one constant under its initializer's name (a tied
    /// embedding read by a `Gather` and, transposed, by the output `MatMul` stays one weight).
    /// The model is imported to train: every `Dropout` node with a ratio above 0 (whatever
    /// its `training_mode`, as `model.train()` enables every dropout in PyTorch) becomes a
    /// `dropout` op, which the `train` pass turns into its training form.
    pub keep_parameters: bool,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions {
            input_shapes: BTreeMap::new(),
            input_values: BTreeMap::new(),
            fold_limit_bytes: DEFAULT_FOLD_LIMIT_BYTES,
            keep_parameters: false,
        }
    }
}

/// One unsupported feature of a model: an operator (domain, op type, opset) or an element
/// type, with how often it occurs and where first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported {
    /// The operator domain (`ai.onnx` for the default domain).
    pub domain: String,
    /// The op type, or a description such as `element type uint16`.
    pub what: String,
    /// The opset of the domain the model imports.
    pub opset: i64,
    /// How many nodes (or tensors) use it.
    pub count: usize,
    /// The first node (or tensor) that uses it.
    pub first: String,
}

/// An import failure. Every variant names the model file.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a well-formed ONNX model (truncated, not protobuf, missing graph).
    #[error("{path}: not a valid ONNX model: {message}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The model uses operators, opsets or element types tessera does not support; all of
    /// them are listed.
    #[error("{path}: {}", UnsupportedList(.items))]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// Everything unsupported, sorted.
        items: Vec<Unsupported>,
    },
    /// A node cannot be imported (bad attributes, dangling inputs, shapes that do not fit).
    #[error("{path}: node `{node}` ({op_type}): {message}")]
    Node {
        /// The file.
        path: PathBuf,
        /// The node's name (or its first output when unnamed).
        node: String,
        /// The node's op type.
        op_type: String,
        /// What is wrong.
        message: String,
    },
    /// A problem with the graph as a whole (inputs, outputs, initializers, options).
    #[error("{path}: {message}")]
    Graph {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

struct UnsupportedList<'a>(&'a [Unsupported]);

impl fmt::Display for UnsupportedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the model uses {} unsupported feature(s):", self.0.len())?;
        for u in self.0 {
            let nodes = if u.count == 1 { "node" } else { "nodes" };
            write!(
                f,
                "\n  {} {} (opset {}): {} {nodes}, first `{}`",
                u.domain, u.what, u.opset, u.count, u.first
            )?;
        }
        Ok(())
    }
}

/// Whether a path names an ONNX model (by its extension).
pub fn is_onnx_path(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}
