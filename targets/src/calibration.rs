//! Calibration files: measured op times that override the roofline.
//!
//! ```toml
//! [[measurement]]
//! device = "gpu0"                               # a device name, or a device kind ("gpu")
//! op = "matmul"                                 # an IR op name
//! operands = ["f32[8, 512]", "f32[512, 512]"]   # optional: absent matches any shapes
//! seconds = 12.5e-6                            # 0 to 1e6 (crate::limits::MAX_SECONDS)
//! ```
//!
//! For an op on a device the most specific measurement wins: the device's name with the op's
//! exact operand types, then its name with any shapes, then its kind with the exact operand
//! types, then its kind with any shapes. Two entries with the same key are an error, as is a
//! device that the target does not have ([`Calibration::check`]).
//!
//! An op that no measurement matches takes `overhead + factor × modelled` (the modelled
//! time being the target's hook's or the roofline's), where a scale matches:
//!
//! ```toml
//! [[scale]]
//! device = "cpu0"     # a device name or kind
//! op = "matmul"       # optional: absent scales every op without a scale of its own
//! factor = 14.2       # measured / modelled seconds (crate::limits::MIN_SCALE to MAX_SCALE)
//! overhead = 2e-7     # optional (0): seconds every call takes besides
//! ```
//!
//! `tessera calibrate` writes one per op measured (fitted to its measured shapes) and one
//! for any op, so that shapes it did not measure are modelled at the speed the device
//! showed.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::file::Ctx;
use crate::ir::{ElemType, Graph, OpId};
use crate::limits::{MAX_SCALE, MIN_SCALE};
use crate::{Device, TargetError, TargetSpec};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    measurement: Vec<RawMeasurement>,
    #[serde(default)]
    scale: Vec<RawScale>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScale {
    device: Spanned<String>,
    op: Option<Spanned<String>>,
    factor: Spanned<toml::Value>,
    overhead: Option<Spanned<toml::Value>>,
}

/// A calibration's scale: `overhead + factor × modelled` seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scale {
    /// Measured / modelled seconds.
    pub factor: f64,
    /// Seconds every call takes besides.
    pub overhead: f64,
}

impl Scale {
    /// The scaled time of an op modelled at `seconds`.
    pub fn apply(self, seconds: f64) -> f64 {
        self.overhead + self.factor * seconds
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeasurement {
    device: Spanned<String>,
    op: Spanned<String>,
    operands: Option<Vec<Spanned<String>>>,
    seconds: Spanned<toml::Value>,
}

/// `(device name or kind, op name, operand types or None for any)`.
type Key = (String, String, Option<Vec<String>>);

/// Measured op times, keyed by device (name or kind), op name and operand types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    file: String,
    /// Measurement and the line it came from.
    entries: BTreeMap<Key, (f64, usize)>,
    /// Scales by `(device name or kind, op name or None for any)`, with their lines.
    scales: BTreeMap<(String, Option<String>), (Scale, usize)>,
}

impl Calibration {
    /// Parses a calibration file's text; `file` names it in errors.
    pub fn parse(source: &str, file: &str) -> Result<Calibration, TargetError> {
        let cx = Ctx { file, source };
        let raw: RawFile = toml::from_str(source).map_err(|e| TargetError::Invalid {
            file: file.to_string(),
            line: e.span().map_or(1, |s| cx.line(&s)),
            field: e.span().and_then(|s| cx.table_at(&s)),
            message: e.message().trim().to_string(),
        })?;
        let mut entries = BTreeMap::new();
        for m in &raw.measurement {
            let device = cx.name(&m.device, "measurement.device")?;
            let op = cx.op_name(&m.op, "measurement.op")?;
            let operands = match &m.operands {
                None => None,
                Some(list) => Some(
                    list.iter()
                        .map(|t| {
                            normalize_type(t.get_ref()).ok_or_else(|| {
                                cx.err(
                                    &t.span(),
                                    "measurement.operands",
                                    format!(
                                        "`{}` is not a static tensor type like `f32[8, 512]`",
                                        t.get_ref()
                                    ),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            let seconds = cx.seconds(&m.seconds, "measurement.seconds")?;
            let line = cx.line(&m.device.span());
            if let Some((_, first)) = entries.insert((device, op, operands), (seconds, line)) {
                return Err(cx.err(
                    &m.device.span(),
                    "measurement",
                    format!("same device, op and operands as the measurement on line {first}"),
                ));
            }
        }
        let mut scales = BTreeMap::new();
        for sc in &raw.scale {
            let device = cx.name(&sc.device, "scale.device")?;
            let op = match &sc.op {
                Some(op) => Some(cx.op_name(op, "scale.op")?),
                None => None,
            };
            let factor = cx.number(&sc.factor, "scale.factor")?;
            if !(MIN_SCALE..=MAX_SCALE).contains(&factor) {
                return Err(cx.err(
                    &sc.factor.span(),
                    "scale.factor",
                    format!("must be between {MIN_SCALE:e} and {MAX_SCALE:e}"),
                ));
            }
            let overhead = match &sc.overhead {
                Some(v) => cx.seconds(v, "scale.overhead")?,
                None => 0.0,
            };
            let line = cx.line(&sc.device.span());
            let scale = Scale { factor, overhead };
            if let Some((_, first)) = scales.insert((device, op), (scale, line)) {
                return Err(cx.err(
                    &sc.device.span(),
                    "scale",
                    format!("same device and op as the scale on line {first}"),
                ));
            }
        }
        Ok(Calibration {
            file: file.to_string(),
            entries,
            scales,
        })
    }

    /// Reads and parses a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, TargetError> {
        let source = std::fs::read_to_string(path).map_err(|source| TargetError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Calibration::parse(&source, &path.display().to_string())
    }

    /// The number of measurements.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no measurements and no scales.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.scales.is_empty()
    }

    /// The number of scales.
    pub fn scales(&self) -> usize {
        self.scales.len()
    }

    /// The scale of the modelled time of `op` on `device` when no measurement matches it:
    /// the op's own scale before the scale of any op, each the device's name before its
    /// kind.
    pub fn scale(&self, graph: &Graph, op: OpId, device: &Device) -> Option<Scale> {
        let name = graph.op(op).op.name().to_string();
        for op in [Some(name), None] {
            for who in [&device.name, &device.kind] {
                if let Some((f, _)) = self.scales.get(&(who.clone(), op.clone())) {
                    return Some(*f);
                }
            }
        }
        None
    }

    /// Checks that every measurement's device is a device name or kind of `spec`.
    pub fn check(&self, spec: &TargetSpec) -> Result<(), TargetError> {
        let known: std::collections::BTreeSet<&str> = spec
            .devices
            .iter()
            .flat_map(|d| [d.name.as_str(), d.kind.as_str()])
            .collect();
        let devices = self
            .entries
            .iter()
            .map(|((d, _, _), (_, line))| (d, line, "measurement.device"))
            .chain(
                self.scales
                    .iter()
                    .map(|((d, _), (_, line))| (d, line, "scale.device")),
            );
        for (device, line, field) in devices {
            if !known.contains(device.as_str()) {
                return Err(TargetError::Invalid {
                    file: self.file.clone(),
                    line: *line,
                    field: Some(field.to_string()),
                    message: format!(
                        "target `{}` has no device or device kind `{device}`",
                        spec.name
                    ),
                });
            }
        }
        Ok(())
    }

    /// The measured seconds of `op` on `device`, when a measurement matches.
    pub fn lookup(&self, graph: &Graph, op: OpId, device: &Device) -> Option<f64> {
        let data = graph.op(op);
        let name = data.op.name().to_string();
        let operands: Vec<String> = data
            .operands
            .iter()
            .map(|&v| graph.ty(v).to_string().replace(' ', ""))
            .collect();
        let mut key: Key = (device.name.clone(), name, Some(operands));
        for who in [device.name.clone(), device.kind.clone()] {
            key.0 = who;
            if let Some((s, _)) = self.entries.get(&key) {
                return Some(*s);
            }
            let exact = key.2.take();
            if let Some((s, _)) = self.entries.get(&key) {
                return Some(*s);
            }
            key.2 = exact;
        }
        None
    }
}

/// `f32[8, 512]` as `f32[8,512]` (extents as the printer writes them, so `08` is `8`), or
/// `None` when it is not a static tensor type.
fn normalize_type(text: &str) -> Option<String> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (elem, rest) = t.split_once('[')?;
    ElemType::from_name(elem)?;
    let dims = rest.strip_suffix(']')?;
    let dims: Vec<String> = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.parse::<u64>().ok().map(|d| d.to_string()))
            .collect::<Option<_>>()?
    };
    Some(format!("{elem}[{}]", dims.join(",")))
}
