//! Calibration files: measured op times that override the roofline.
//!
//! ```toml
//! [[measurement]]
//! device = "gpu0"                               # a device name, or a device kind ("gpu")
//! op = "matmul"                                 # an IR op name
//! operands = ["f32[8, 512]", "f32[512, 512]"]   # optional: absent matches any shapes
//! seconds = 12.5e-6                            # 0 to 1e6 (crate::limits::MAX_SECONDS)
//! flops = 4194304                               # optional, with bytes: the op's work
//! bytes = 1081344                               # (crate::op_work), for refitting scales
//! ```
//!
//! For an op on a device the most specific measurement wins: the device's name with the op's
//! exact operand types, then its name with any shapes, then its kind with the exact operand
//! types, then its kind with any shapes. Two entries with the same key are an error, as is a
//! device that the target does not have ([`Calibration::check`]).
//!
//! An op that no measurement matches takes `overhead + factor × modelled + flop_seconds ×
//! FLOPs + byte_seconds × bytes` (the modelled time being the target's hook's or the
//! roofline's, the FLOPs and bytes the op's work, [`crate::op_work`]), where a scale
//! matches:
//!
//! ```toml
//! [[scale]]
//! device = "cpu0"        # a device name or kind
//! op = "matmul"          # optional: absent scales every op without a scale of its own
//! operands = ["f32[?, 512]", "f32[512, 512]"]   # optional (needs `op`): the op's operand
//!                        # types, `?` any extent; absent: any operands
//! factor = 14.2          # optional (0 where a work term is given, else required):
//!                        # measured / modelled seconds (crate::limits::MIN_SCALE to MAX_SCALE)
//! overhead = 2e-7        # optional (0): seconds every call takes besides
//! flop_seconds = 2e-11   # optional (0): seconds per FLOP
//! byte_seconds = 5e-11   # optional (0): seconds per byte read or written
//! ```
//!
//! The scale of an op is the first that matches: one of the op with operand patterns that
//! its operand types fit (the fewest `?` first), then the op's for any operands, then the
//! scale of any op; each for the device's name before its kind.
//!
//! The work terms are the device's own balance of compute and memory, where `factor` keeps
//! the target's: `tessera calibrate` writes them, one scale per op measured (fitted to its
//! measured shapes), one for any op, and one per operand pattern of an op measured at two
//! shapes of a model (its symbolic dimensions `?`), so that shapes it did not measure are
//! modelled at the speed the device showed.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::file::Ctx;
use crate::ir::{ElemType, Graph, OpId};
use crate::limits::{MAX_SCALE, MAX_WORK, MAX_WORK_SECONDS, MIN_SCALE};
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
    operands: Option<Vec<Spanned<String>>>,
    factor: Option<Spanned<toml::Value>>,
    overhead: Option<Spanned<toml::Value>>,
    flop_seconds: Option<Spanned<toml::Value>>,
    byte_seconds: Option<Spanned<toml::Value>>,
}

/// A calibration's scale: `overhead + factor × modelled + flop_seconds × FLOPs +
/// byte_seconds × bytes` seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Scale {
    /// Measured / modelled seconds.
    pub factor: f64,
    /// Seconds every call takes besides.
    pub overhead: f64,
    /// Seconds per FLOP.
    pub flop_seconds: f64,
    /// Seconds per byte read or written.
    pub byte_seconds: f64,
}

impl Scale {
    /// The scaled time of an op modelled at `seconds` that does `flops` and moves `bytes`.
    pub fn apply(self, seconds: f64, flops: f64, bytes: f64) -> f64 {
        self.overhead
            + self.factor * seconds
            + self.flop_seconds * flops
            + self.byte_seconds * bytes
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeasurement {
    device: Spanned<String>,
    op: Spanned<String>,
    operands: Option<Vec<Spanned<String>>>,
    seconds: Spanned<toml::Value>,
    flops: Option<Spanned<toml::Value>>,
    bytes: Option<Spanned<toml::Value>>,
}

/// One measurement of a calibration file.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement<'a> {
    /// The device name or kind.
    pub device: &'a str,
    /// The op name.
    pub op: &'a str,
    /// The operand types (normalized, `f32[8,512]`), or `None` for any shapes.
    pub operands: Option<&'a [String]>,
    /// The measured seconds.
    pub seconds: f64,
    /// The op's FLOPs and bytes, where the file gives them.
    pub work: Option<(f64, f64)>,
}

/// A measurement's seconds, line and work.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    seconds: f64,
    line: usize,
    work: Option<(f64, f64)>,
}

/// `(device name or kind, op name, operand types or None for any)`.
type Key = (String, String, Option<Vec<String>>);

/// `(device name or kind, op name or None for any, operand patterns or None for any)`.
type ScaleKey = (String, Option<String>, Option<Vec<String>>);

/// Measured op times, keyed by device (name or kind), op name and operand types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Calibration {
    file: String,
    /// Measurement and the line it came from.
    entries: BTreeMap<Key, Entry>,
    /// Scales by `(device name or kind, op name or None for any)`, with their lines.
    /// Scales by `(device name or kind, op name or None for any, operand patterns or None
    /// for any)`, with their lines.
    scales: BTreeMap<ScaleKey, (Scale, usize)>,
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
            let amount = |v: &Spanned<toml::Value>, field: &str| {
                let x = cx.number(v, field)?;
                if (0.0..=MAX_WORK).contains(&x) {
                    Ok(x)
                } else {
                    Err(cx.err(
                        &v.span(),
                        field,
                        format!("must be between 0 and {MAX_WORK:e}"),
                    ))
                }
            };
            let work = match (&m.flops, &m.bytes) {
                (Some(f), Some(b)) => Some((
                    amount(f, "measurement.flops")?,
                    amount(b, "measurement.bytes")?,
                )),
                (None, None) => None,
                (Some(v), None) | (None, Some(v)) => {
                    return Err(cx.err(
                        &v.span(),
                        "measurement",
                        "`flops` and `bytes` go together: give both or neither".to_string(),
                    ));
                }
            };
            let entry = Entry {
                seconds,
                line,
                work,
            };
            if let Some(Entry { line: first, .. }) = entries.insert((device, op, operands), entry) {
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
            let operands = match &sc.operands {
                None => None,
                Some(_) if op.is_none() => {
                    return Err(cx.err(
                        &sc.device.span(),
                        "scale.operands",
                        "operand patterns need the scale's `op`".to_string(),
                    ));
                }
                Some(list) => Some(
                    list.iter()
                        .map(|t| {
                            normalize(t.get_ref(), true).ok_or_else(|| {
                                cx.err(
                                    &t.span(),
                                    "scale.operands",
                                    format!(
                                        "`{}` is not a tensor type pattern like `f32[?, 512]` \
                                         (`?`: any extent)",
                                        t.get_ref()
                                    ),
                                )
                            })
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            let per = |v: &Option<Spanned<toml::Value>>, field: &str| match v {
                Some(v) => {
                    let x = cx.number(v, field)?;
                    if x.is_finite()
                        && (0.0..=MAX_WORK_SECONDS).contains(&x)
                        && (x == 0.0 || x.is_normal())
                    {
                        Ok(x)
                    } else {
                        Err(cx.err(
                            &v.span(),
                            field,
                            format!("must be 0 or a normal number up to {MAX_WORK_SECONDS:e}"),
                        ))
                    }
                }
                None => Ok(0.0),
            };
            let flop_seconds = per(&sc.flop_seconds, "scale.flop_seconds")?;
            let byte_seconds = per(&sc.byte_seconds, "scale.byte_seconds")?;
            let factor = match &sc.factor {
                Some(v) => {
                    let factor = cx.number(v, "scale.factor")?;
                    if !(MIN_SCALE..=MAX_SCALE).contains(&factor) {
                        return Err(cx.err(
                            &v.span(),
                            "scale.factor",
                            format!("must be between {MIN_SCALE:e} and {MAX_SCALE:e}"),
                        ));
                    }
                    factor
                }
                None if sc.flop_seconds.is_some() || sc.byte_seconds.is_some() => 0.0,
                None => {
                    return Err(cx.err(
                        &sc.device.span(),
                        "scale",
                        "needs a `factor`, a `flop_seconds` or a `byte_seconds`".to_string(),
                    ));
                }
            };
            let overhead = match &sc.overhead {
                Some(v) => cx.seconds(v, "scale.overhead")?,
                None => 0.0,
            };
            let line = cx.line(&sc.device.span());
            let scale = Scale {
                factor,
                overhead,
                flop_seconds,
                byte_seconds,
            };
            if let Some((_, first)) = scales.insert((device, op, operands), (scale, line)) {
                return Err(cx.err(
                    &sc.device.span(),
                    "scale",
                    format!("same device, op and operands as the scale on line {first}"),
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

    /// Every measurement, in order of device, op and operands.
    pub fn measurements(&self) -> impl Iterator<Item = Measurement<'_>> {
        self.entries
            .iter()
            .map(|((device, op, operands), e)| Measurement {
                device,
                op,
                operands: operands.as_deref(),
                seconds: e.seconds,
                work: e.work,
            })
    }

    /// The operand patterns of the scales: each one's device, op and patterns.
    pub fn operand_patterns(&self) -> impl Iterator<Item = (&str, &str, &[String])> {
        self.scales.keys().filter_map(|(device, op, patterns)| {
            Some((device.as_str(), op.as_deref()?, patterns.as_deref()?))
        })
    }

    /// The number of scales.
    pub fn scales(&self) -> usize {
        self.scales.len()
    }

    /// The scale of the modelled time of `op` on `device` when no measurement matches it:
    /// a scale of the op whose operand patterns match its operand types (the one with the
    /// fewest `?`, then the first in order), before the op's own scale for any operands,
    /// before the scale of any op; each the device's name before its kind.
    pub fn scale(&self, graph: &Graph, op: OpId, device: &Device) -> Option<Scale> {
        let name = graph.op(op).op.name().to_string();
        // The operand types as text only where the op has patterned scales (this runs for
        // every op the cost model times).
        let mut operands: Option<Vec<String>> = None;
        for who in [&device.name, &device.kind] {
            let from = (who.clone(), Some(name.clone()), Some(Vec::new()));
            let best = self
                .scales
                .range(from..)
                .take_while(|((w, o, _), _)| w == who && o.as_deref() == Some(name.as_str()))
                .filter_map(|((_, _, patterns), (f, _))| {
                    let patterns = patterns.as_ref()?;
                    let types = operands.get_or_insert_with(|| op_key(graph, op).1);
                    let fits = fits_all(patterns, types, matches);
                    let wild: usize = patterns.iter().map(|p| p.matches('?').count()).sum();
                    fits.then_some((wild, *f))
                })
                .min_by_key(|&(wild, _)| wild);
            if let Some((_, f)) = best {
                return Some(f);
            }
        }
        for op in [Some(name), None] {
            for who in [&device.name, &device.kind] {
                if let Some((f, _)) = self.scales.get(&(who.clone(), op.clone(), None)) {
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
            .map(|((d, _, _), e)| (d, &e.line, "measurement.device"))
            .chain(
                self.scales
                    .iter()
                    .map(|((d, _, _), (_, line))| (d, line, "scale.device")),
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
        let (name, operands) = op_key(graph, op);
        let mut key: Key = (device.name.clone(), name, Some(operands));
        for who in [device.name.clone(), device.kind.clone()] {
            key.0 = who;
            if let Some(e) = self.entries.get(&key) {
                return Some(e.seconds);
            }
            let exact = key.2.take();
            if let Some(e) = self.entries.get(&key) {
                return Some(e.seconds);
            }
            key.2 = exact;
        }
        None
    }
}

/// An op's name and its operand types, normalized as a calibration's keys are.
fn op_key(graph: &Graph, op: OpId) -> (String, Vec<String>) {
    let data = graph.op(op);
    let operands = data
        .operands
        .iter()
        .map(|&v| graph.ty(v).to_string().replace(' ', ""))
        .collect();
    (data.op.name().to_string(), operands)
}

/// `f32[8, 512]` as `f32[8,512]` (extents as the printer writes them, so `08` is `8`), or
/// `None` when it is not a static tensor type (with `?` extents too, where `wildcards`).
fn normalize(text: &str, wildcards: bool) -> Option<String> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let (elem, rest) = t.split_once('[')?;
    ElemType::from_name(elem)?;
    let dims = rest.strip_suffix(']')?;
    let dims: Vec<String> = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| match d {
                "?" if wildcards => Some(d.to_string()),
                _ => d.parse::<u64>().ok().map(|d| d.to_string()),
            })
            .collect::<Option<_>>()?
    };
    Some(format!("{elem}[{}]", dims.join(",")))
}

/// Whether the tensor type `ty` (`f32[8, 512]`) fits the operand pattern `pattern`
/// (`f32[?, 512]`: each `?` any extent), as a scale's `operands` match; false where either
/// is not one.
pub fn type_fits(pattern: &str, ty: &str) -> bool {
    match (normalize(pattern, true), normalize_type(ty)) {
        (Some(p), Some(t)) => matches(&p, &t),
        _ => false,
    }
}

/// Whether the operand types `types` fit the operand patterns `patterns`, one by one
/// ([`type_fits`]), as a scale's `operands` match.
pub fn operands_fit(patterns: &[String], types: &[String]) -> bool {
    fits_all(patterns, types, type_fits)
}

/// Whether `types` are as many as `patterns` and each fits its pattern by `fits`.
fn fits_all(patterns: &[String], types: &[String], fits: fn(&str, &str) -> bool) -> bool {
    patterns.len() == types.len() && patterns.iter().zip(types).all(|(p, t)| fits(p, t))
}

/// `f32[8, 512]` normalized ([`normalize`]), or `None` when it is not a static tensor type.
fn normalize_type(text: &str) -> Option<String> {
    normalize(text, false)
}

/// Whether the normalized type `ty` fits the normalized pattern `pattern` (each `?` any
/// extent).
fn matches(pattern: &str, ty: &str) -> bool {
    let dims = |t: &str| {
        let (elem, rest) = t.split_once('[')?;
        Some((elem.to_string(), rest.strip_suffix(']')?.to_string()))
    };
    let (Some((pe, pd)), Some((te, td))) = (dims(pattern), dims(ty)) else {
        return false;
    };
    // (`f32[]` has no extents, not one empty one.)
    let extents = |d: &str| -> Vec<String> {
        if d.is_empty() {
            Vec::new()
        } else {
            d.split(',').map(str::to_string).collect()
        }
    };
    let (pd, td) = (extents(&pd), extents(&td));
    pe == te && pd.len() == td.len() && pd.iter().zip(&td).all(|(p, t)| p == "?" || p == t)
}
