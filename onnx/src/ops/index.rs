//! ONNX ops: index family.

use super::Registry;

pub(crate) fn register(_r: &mut Registry) {}
