//! `resize`: nearest, linear and cubic interpolation with every coordinate transform.

use tessera_ir::{Op, TensorType};

use super::body::{Body, LResult, Val, err};

/// Lowers `resize`.
pub fn lower(
    _b: &mut Body,
    op: &Op,
    _args: &[Val],
    _results: &[TensorType],
) -> LResult<Vec<String>> {
    err(format!("no lowering for {} yet", op.name()))
}
