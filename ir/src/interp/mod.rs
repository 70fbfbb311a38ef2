//! The reference interpreter (being written: API fixed, bodies placeholder until the interpreter helper lands).
#![allow(missing_docs, unused_variables)]

use crate::graph::{Graph, OpId};
use crate::op::Op;
use crate::tensor::Tensor;

#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct InterpError {
    pub op: Option<OpId>,
    pub message: String,
}

pub fn run(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, InterpError> {
    Err(InterpError {
        op: None,
        message: "interpreter not yet written".into(),
    })
}

pub fn eval_op(op: &Op, operands: &[&Tensor]) -> Result<Vec<Tensor>, InterpError> {
    Err(InterpError {
        op: None,
        message: "interpreter not yet written".into(),
    })
}
