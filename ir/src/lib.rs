//! tessera's graph IR.
//!
//! A [`Graph`] holds typed values, a topologically ordered body of ops ([`Op`]), graph inputs
//! and outputs, and shared constants (weights). Around it:
//!
//! - [`infer`]: shape and type inference for every op;
//! - [`verify`]: the verifier (its module doc lists the invariants);
//! - [`text`]: the text format, printer and parser, with a safetensors sidecar for large
//!   constants;
//! - [`interp`]: the reference interpreter, the correctness oracle of every pass;
//! - [`panels`]: the panel layout of packed weights, which a sidecar may hold in place of
//!   the original.
//!
//! The crate knows nothing of ONNX, egg or MLIR.

mod graph;
pub mod infer;
pub mod interp;
pub mod names;
mod op;
pub mod panels;
mod tensor;
pub mod text;
mod types;
pub mod verify;

pub use graph::{
    ConstId, Constant, Entity, Graph, Mesh, OpData, OpId, Sharding, StateInit, StateSlot,
    ValueData, ValueDef, ValueId,
};
pub use op::{
    ArgKind, BinaryOp, ConvAttrs, CoordTransform, DepthToSpaceMode, NearestMode, Op, PadMode,
    PoolAttrs, PoolKind, RANDOM_GAMMA, ReduceKind, ResizeMode, ScanAttrs, ScatterReduction,
    UnaryOp, random_key, random_mix, random_uniform_bits,
};
pub use tensor::{DataSizeError, Tensor, TensorError, TooLargeError, checked_byte_size};
pub use types::{Dim, ElemType, Scalar, Shape, TensorType, format_f32, format_f64};

/// Re-exported so users of [`Constant::data`] need not depend on `bytes` themselves.
pub use bytes::Bytes;
