//! The ranges every number in a target file, a calibration file and a placement problem must
//! lie in, checked when they are read.
//!
//! The ranges are wide enough for any real machine and narrow enough that no arithmetic the
//! cost model, the simulator or the placement solvers do on them can reach infinity or lose
//! every digit to round-off:
//!
//! | quantity | range | unit |
//! |---|---|---|
//! | times (latencies, `op_overhead`, measured and per-op seconds) | 0, or a normal number up to 1e6 ([`MAX_SECONDS`], 11.6 days) | s |
//! | rates (memory and link bandwidths, peak compute) | `1 ..= 1e18` ([`MIN_RATE`], [`MAX_RATE`]) | per second |
//! | efficiencies | `1e-6 ..= 1` ([`MIN_EFFICIENCY`]) | fraction of peak |
//! | a calibration's scales | `1e-6 ..= 1e6` ([`MIN_SCALE`], [`MAX_SCALE`]) | measured / modelled |
//! | a measurement's work (FLOPs, bytes) | `0 ..= 1e24` ([`MAX_WORK`]) | FLOPs, bytes |
//! | a calibration's work terms (per FLOP, per byte) | 0, or a normal number up to 1 ([`MAX_WORK_SECONDS`]: the reciprocal of [`MIN_RATE`]) | s |
//! | bytes (memory capacities, an op's memory, a tensor) | `..= 2^60` ([`MAX_BYTES`], 1 EiB) | bytes |
//!
//! Why nothing overflows: a transfer takes at most `1e6 + 2^60 / 1` s, about 1.2e18 s, and a
//! roofline op time is at most `1e6 + work / (1 * 1e-6)`; a sum of 10^9 such terms (far more
//! ops or edges than a graph that fits in memory has) stays below 1e30, hundreds of orders of
//! magnitude below `f64::MAX` (1.8e308). Byte counts are summed in `u64` with saturation or in
//! `u128`; 2^60 leaves 16 ops' worth of headroom before a `u64` sum saturates.

/// The longest time, in seconds, a target, calibration or placement problem may state.
pub const MAX_SECONDS: f64 = 1e6;

/// The smallest rate (bytes or operations per second) a target or problem may state.
pub const MIN_RATE: f64 = 1.0;

/// The largest rate (bytes or operations per second) a target or problem may state.
pub const MAX_RATE: f64 = 1e18;

/// The smallest factor a calibration file may scale a modelled time by.
pub const MIN_SCALE: f64 = 1e-6;

/// The largest factor a calibration file may scale a modelled time by (a scaled roofline
/// time stays below 1e25 s, far from overflow).
pub const MAX_SCALE: f64 = 1e6;

/// The most seconds per FLOP or per byte a calibration's scale may state: the time of one
/// unit of work at [`MIN_RATE`].
pub const MAX_WORK_SECONDS: f64 = 1.0 / MIN_RATE;

/// The most FLOPs or bytes a calibration's measurement may state as its op's work.
pub const MAX_WORK: f64 = 1e24;

/// The smallest achievable fraction of peak (`efficiency`) a target may state.
pub const MIN_EFFICIENCY: f64 = 1e-6;

/// The largest byte count (a memory capacity, an op's memory, a tensor) a target or problem
/// may state: 2^60 bytes.
pub const MAX_BYTES: u64 = 1 << 60;

/// Whether `x` is a time in `0 ..= MAX_SECONDS` that is 0 or a normal number (a subnormal
/// time's reciprocal, a rate, would be infinite).
pub fn is_seconds(x: f64) -> bool {
    x.is_finite() && (0.0..=MAX_SECONDS).contains(&x) && (x == 0.0 || x.is_normal())
}

/// Whether `x` is a rate in `MIN_RATE ..= MAX_RATE`.
pub fn is_rate(x: f64) -> bool {
    x.is_finite() && (MIN_RATE..=MAX_RATE).contains(&x)
}
