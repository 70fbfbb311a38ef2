//! The work an op does, from its operand and result shapes alone: floating-point (or integer)
//! operations and bytes moved to and from memory. The roofline in [`crate::cost`] turns this
//! into time on a device.
