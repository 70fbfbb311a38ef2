//! The TOML target file format: serde structures with spans, expansion of `count`, the
//! topology generators, and validation with `FILE:LINE: FIELD: MESSAGE` errors: numbers in
//! the ranges of [`crate::limits`], lowerings that are built in ([`BUILTIN_LOWERINGS`]) or
//! registered ([`crate::register_lowering`]), an `arch` from [`NVPTX_ARCHS`] on `nvptx`
//! devices only, at most [`MAX_LINKS`] links, and a route from every device to the host.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::limits::{MAX_BYTES, MAX_RATE, MAX_SECONDS, MIN_EFFICIENCY, MIN_RATE};
use crate::{Device, Layout, LayoutKind, Link, TargetError, TargetSpec};

/// The most devices one `[[device]]` entry may expand to.
const MAX_COUNT: u64 = 1 << 16;

/// The most links a target may have (explicit and generated together): a `fully-connected`
/// topology over 1,449 devices already has more.
pub const MAX_LINKS: usize = 1 << 20;

/// The lowerings tessera itself knows: `cpu` (LLVM for this host), `nvptx` (PTX for NVIDIA
/// GPUs) and `chiplet` (linalg to affine loops on memrefs, the form a vendor backend takes).
/// A plugin adds its own with [`crate::register_lowering`].
pub const BUILTIN_LOWERINGS: [&str; 3] = ["cpu", "nvptx", "chiplet"];

/// The NVIDIA GPU architectures a device's `arch` may name (those LLVM 22's NVPTX backend
/// knows, without the `a`/`f` feature-set suffixes).
pub const NVPTX_ARCHS: [&str; 27] = [
    "sm_20", "sm_21", "sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53", "sm_60",
    "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89",
    "sm_90", "sm_100", "sm_101", "sm_103", "sm_110", "sm_120", "sm_121",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    name: Option<Spanned<String>>,
    #[serde(default)]
    description: String,
    host: Spanned<String>,
    #[serde(default)]
    device: Vec<RawDevice>,
    interconnect: Option<RawInterconnect>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: Spanned<String>,
    kind: Spanned<String>,
    count: Option<Spanned<toml::Value>>,
    memory: Spanned<toml::Value>,
    memory_bandwidth: Spanned<toml::Value>,
    #[serde(default)]
    compute: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    supported_ops: Option<Vec<Spanned<String>>>,
    lowering: Spanned<String>,
    arch: Option<Spanned<String>>,
    #[serde(default)]
    efficiency: BTreeMap<Spanned<String>, Spanned<toml::Value>>,
    op_overhead: Option<Spanned<toml::Value>>,
    overlap: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInterconnect {
    topology: Option<Spanned<String>>,
    devices: Option<Spanned<String>>,
    rows: Option<Spanned<toml::Value>>,
    cols: Option<Spanned<toml::Value>>,
    switch: Option<Spanned<String>>,
    bandwidth: Option<Spanned<toml::Value>>,
    latency: Option<Spanned<toml::Value>>,
    #[serde(default)]
    link: Vec<RawLink>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    a: Spanned<String>,
    b: Spanned<String>,
    bandwidth: Spanned<toml::Value>,
    latency: Spanned<toml::Value>,
}

/// Builds errors pointing into one file.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
    pub(crate) source: &'a str,
}

impl Ctx<'_> {
    pub(crate) fn line(&self, span: &Range<usize>) -> usize {
        let end = span.start.min(self.source.len());
        self.source.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// The dotted name of the `[table]` or `[[array]]` header at or above `span`, for errors
    /// from serde that only know a field's own name.
    pub(crate) fn table_at(&self, span: &Range<usize>) -> Option<String> {
        let line = self.line(span);
        self.source
            .lines()
            .take(line)
            .filter_map(|l| {
                let l = l.trim();
                let inner = l.strip_prefix("[[").and_then(|l| l.split("]]").next());
                inner.or_else(|| l.strip_prefix('[').and_then(|l| l.split(']').next()))
            })
            .last()
            .map(|t| t.trim().to_string())
    }

    pub(crate) fn err(
        &self,
        span: &Range<usize>,
        field: &str,
        message: impl Into<String>,
    ) -> TargetError {
        TargetError::Invalid {
            file: self.file.to_string(),
            line: self.line(span),
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// A finite number (integer or float).
    pub(crate) fn number(&self, v: &Spanned<toml::Value>, field: &str) -> Result<f64, TargetError> {
        let x = match v.get_ref() {
            toml::Value::Integer(i) => *i as f64,
            toml::Value::Float(f) => *f,
            other => {
                return Err(self.err(
                    &v.span(),
                    field,
                    format!("expected a number, found {}", other.type_str()),
                ));
            }
        };
        if !x.is_finite() {
            return Err(self.err(&v.span(), field, "must be finite"));
        }
        Ok(x)
    }

    /// Seconds: a number in `0 ..= MAX_SECONDS` (see [`crate::limits`]).
    pub(crate) fn seconds(
        &self,
        v: &Spanned<toml::Value>,
        field: &str,
    ) -> Result<f64, TargetError> {
        let x = self.number(v, field)?;
        if x < 0.0 {
            return Err(self.err(&v.span(), field, "must not be negative"));
        }
        if x > MAX_SECONDS {
            return Err(self.err(
                &v.span(),
                field,
                format!("must be at most {MAX_SECONDS:e} seconds"),
            ));
        }
        if x != 0.0 && !x.is_normal() {
            return Err(self.err(
                &v.span(),
                field,
                format!("must be 0 or at least {:e} seconds", f64::MIN_POSITIVE),
            ));
        }
        Ok(x)
    }

    /// A rate (bytes or operations per second): a number in `MIN_RATE ..= MAX_RATE`.
    fn per_second(&self, v: &Spanned<toml::Value>, field: &str) -> Result<f64, TargetError> {
        let x = self.number(v, field)?;
        if x <= 0.0 {
            return Err(self.err(&v.span(), field, "must be positive"));
        }
        if !(MIN_RATE..=MAX_RATE).contains(&x) {
            return Err(self.err(
                &v.span(),
                field,
                format!("must be between {MIN_RATE} and {MAX_RATE:e} per second"),
            ));
        }
        Ok(x)
    }

    /// A positive whole number (counts, mesh sizes; `64e6` is accepted).
    pub(crate) fn whole(&self, v: &Spanned<toml::Value>, field: &str) -> Result<u64, TargetError> {
        let x = self.number(v, field)?;
        if x <= 0.0 {
            return Err(self.err(&v.span(), field, "must be positive"));
        }
        if x.fract() != 0.0 || x > u64::MAX as f64 {
            return Err(self.err(&v.span(), field, "must be a whole number"));
        }
        Ok(x as u64)
    }

    /// A byte size: a positive whole number of at most `MAX_BYTES`.
    fn bytes(&self, v: &Spanned<toml::Value>, field: &str) -> Result<u64, TargetError> {
        if self.number(v, field)? > MAX_BYTES as f64 {
            return Err(self.err(
                &v.span(),
                field,
                format!("must be at most 2^60 = {MAX_BYTES} bytes"),
            ));
        }
        let x = self.whole(v, field)?;
        if x > MAX_BYTES {
            return Err(self.err(
                &v.span(),
                field,
                format!("must be at most 2^60 = {MAX_BYTES} bytes"),
            ));
        }
        Ok(x)
    }

    /// An IR op name (`matmul`, `reduce-sum`, ...), as `supported_ops` and `efficiency` use.
    pub(crate) fn op_name(&self, v: &Spanned<String>, field: &str) -> Result<String, TargetError> {
        let s = self.name(v, field)?;
        if crate::ir::text::OP_NAMES.contains(&s.as_str()) {
            return Ok(s);
        }
        let hint = crate::ir::text::OP_NAMES
            .iter()
            .map(|n| (strsim::osa_distance(&s, n), *n))
            .filter(|(d, _)| *d <= (s.len() / 3).max(1))
            .min()
            .map_or(String::new(), |(_, n)| format!("; did you mean `{n}`?"));
        Err(self.err(&v.span(), field, format!("unknown op `{s}`{hint}")))
    }

    pub(crate) fn name(&self, v: &Spanned<String>, field: &str) -> Result<String, TargetError> {
        let s = v.get_ref().trim();
        if s.is_empty() {
            return Err(self.err(&v.span(), field, "must not be empty"));
        }
        Ok(s.to_string())
    }
}

/// Parses and resolves a target file's text; `file` names it in errors, and its stem is the
/// target's name when the file has no `name`.
pub fn parse_target(source: &str, file: &str) -> Result<TargetSpec, TargetError> {
    let cx = Ctx { file, source };
    let raw: RawFile = toml::from_str(source).map_err(|e| TargetError::Invalid {
        file: file.to_string(),
        line: e.span().map_or(1, |s| cx.line(&s)),
        field: e.span().and_then(|s| cx.table_at(&s)),
        message: e.message().trim().to_string(),
    })?;
    let name = match &raw.name {
        Some(n) => cx.name(n, "name")?,
        None => Path::new(file)
            .file_stem()
            .map_or_else(|| file.to_string(), |s| s.to_string_lossy().into_owned()),
    };

    // Devices, with `count` expanded; `groups` maps an entry's name to its device indices.
    let mut devices: Vec<Device> = Vec::new();
    let mut spans: Vec<Range<usize>> = Vec::new();
    let mut groups: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for d in &raw.device {
        let base = cx.name(&d.name, "device.name")?;
        let kind = cx.name(&d.kind, "device.kind")?;
        let lowering = cx.lowering(&d.lowering)?;
        let arch = match &d.arch {
            None => None,
            Some(a) => Some(cx.arch(a, &lowering)?),
        };
        let memory_bytes = cx.bytes(&d.memory, "device.memory")?;
        let memory_bandwidth = cx.per_second(&d.memory_bandwidth, "device.memory_bandwidth")?;
        let mut compute = BTreeMap::new();
        for (ty, v) in &d.compute {
            let field = format!("device.compute.{}", ty.get_ref());
            if crate::ir::ElemType::from_name(ty.get_ref()).is_none() {
                return Err(cx.err(&ty.span(), &field, "not an element type"));
            }
            compute.insert(ty.get_ref().clone(), cx.per_second(v, &field)?);
        }
        let mut efficiency = BTreeMap::new();
        for (op, v) in &d.efficiency {
            let field = format!("device.efficiency.{}", op.get_ref());
            cx.op_name(op, &field)?;
            let e = cx.number(v, &field)?;
            if e <= 0.0 {
                return Err(cx.err(&v.span(), &field, "must be positive"));
            }
            if e > 1.0 {
                return Err(cx.err(&v.span(), &field, "must be at most 1"));
            }
            if e < MIN_EFFICIENCY {
                return Err(cx.err(
                    &v.span(),
                    &field,
                    format!("must be at least {MIN_EFFICIENCY:e}"),
                ));
            }
            efficiency.insert(op.get_ref().clone(), e);
        }
        let supported_ops = match &d.supported_ops {
            None => None,
            Some(ops) => {
                let mut set = BTreeSet::new();
                for op in ops {
                    set.insert(cx.op_name(op, "device.supported_ops")?);
                }
                Some(set)
            }
        };
        let overlap = match &d.overlap {
            None => true,
            Some(v) => v.get_ref().as_bool().ok_or_else(|| {
                cx.err(
                    &v.span(),
                    "device.overlap",
                    format!("expected true or false, found {}", v.get_ref().type_str()),
                )
            })?,
        };
        let op_overhead = match &d.op_overhead {
            Some(v) => cx.seconds(v, "device.op_overhead")?,
            None => 0.0,
        };
        let names: Vec<String> = match &d.count {
            None => vec![base.clone()],
            Some(c) => (0..match cx.whole(c, "device.count")? {
                n if n > MAX_COUNT => {
                    return Err(cx.err(
                        &c.span(),
                        "device.count",
                        format!("must be at most {MAX_COUNT}"),
                    ));
                }
                n => n,
            })
                .map(|i| format!("{base}{i}"))
                .collect(),
        };
        if groups.contains_key(&base) {
            return Err(cx.err(
                &d.name.span(),
                "device.name",
                format!("duplicate device entry `{base}`"),
            ));
        }
        let mut members = Vec::new();
        for n in names {
            if !taken.insert(n.clone()) {
                return Err(cx.err(
                    &d.name.span(),
                    "device.name",
                    format!("duplicate device name `{n}`"),
                ));
            }
            members.push(devices.len());
            spans.push(d.name.span());
            devices.push(Device {
                name: n,
                kind: kind.clone(),
                memory_bytes,
                memory_bandwidth,
                compute: compute.clone(),
                supported_ops: supported_ops.clone(),
                lowering: lowering.clone(),
                arch: arch.clone(),
                efficiency: efficiency.clone(),
                op_overhead,
                overlap,
            });
        }
        groups.insert(base, members);
    }
    if devices.is_empty() {
        return Err(cx.err(&(0..0), "device", "a target needs at least one device"));
    }

    let mut links = Vec::new();
    let mut layouts = Vec::new();
    if let Some(ic) = &raw.interconnect {
        // Generate first so explicit links may name a generated switch; they still come first.
        let mut generated = Vec::new();
        let layout = generate(&cx, ic, &groups, &mut taken, &mut devices, &mut generated)?;
        layouts.extend(layout);
        if let Some(t) = &ic.topology {
            // The generated switch, if any, is reported at the topology.
            spans.resize(devices.len(), t.span());
        }
        if ic.link.len() + generated.len() > MAX_LINKS {
            let span = ic
                .topology
                .as_ref()
                .map_or_else(|| ic.link[0].a.span(), |t| t.span());
            return Err(cx.err(
                &span,
                "interconnect",
                format!(
                    "{} links, more than the {MAX_LINKS} a target may have",
                    ic.link.len() + generated.len()
                ),
            ));
        }
        for l in &ic.link {
            let a = cx.name(&l.a, "interconnect.link.a")?;
            let b = cx.name(&l.b, "interconnect.link.b")?;
            for (end, v, field) in [
                (&a, &l.a, "interconnect.link.a"),
                (&b, &l.b, "interconnect.link.b"),
            ] {
                if !taken.contains(end.as_str()) {
                    return Err(cx.err(&v.span(), field, format!("unknown device `{end}`")));
                }
            }
            if a == b {
                return Err(cx.err(
                    &l.b.span(),
                    "interconnect.link.b",
                    "a link needs two different devices",
                ));
            }
            links.push(Link {
                a,
                b,
                bandwidth: cx.per_second(&l.bandwidth, "interconnect.link.bandwidth")?,
                latency: cx.seconds(&l.latency, "interconnect.link.latency")?,
            });
        }
        links.extend(generated);
    }

    let host = cx.name(&raw.host, "host")?;
    if !taken.contains(host.as_str()) {
        return Err(cx.err(&raw.host.span(), "host", format!("unknown device `{host}`")));
    }
    let spec = TargetSpec {
        name,
        description: raw.description.trim().to_string(),
        devices,
        links,
        host,
        layouts,
    };
    // Every device must reach the host: it receives the graph's inputs from there and sends
    // its results back (a generated switch reports at the topology).
    let host_index = spec.device_index(&spec.host).unwrap_or(0);
    let reached = spec.reachable_from(host_index);
    if let Some(i) = reached.iter().position(|r| !r) {
        let d = &spec.devices[i];
        return Err(cx.err(
            spans.get(i).unwrap_or(&raw.host.span()),
            "device.name",
            format!(
                "device `{}` has no route to the host `{}`: no chain of links connects them \
                 (add an [[interconnect.link]] or put it in the topology's group)",
                d.name, spec.host
            ),
        ));
    }
    Ok(spec)
}

impl Ctx<'_> {
    /// A device's `lowering`: a built-in one or one a plugin registered.
    fn lowering(&self, v: &Spanned<String>) -> Result<String, TargetError> {
        let s = self.name(v, "device.lowering")?;
        let known = crate::known_lowerings();
        if known.contains(&s) {
            return Ok(s);
        }
        let hint = known
            .iter()
            .map(|n| (strsim::osa_distance(&s, n), n.as_str()))
            .filter(|(d, _)| *d <= (s.len() / 3).max(1))
            .min()
            .map_or(String::new(), |(_, n)| format!("; did you mean `{n}`?"));
        Err(self.err(
            &v.span(),
            "device.lowering",
            format!(
                "unknown lowering `{s}` (expected one of {}; a plugin registers its own with \
                 register_lowering){hint}",
                known.join(", ")
            ),
        ))
    }

    /// A device's `arch`: an NVIDIA GPU architecture (`sm_70`), only for `nvptx` devices.
    fn arch(&self, v: &Spanned<String>, lowering: &str) -> Result<String, TargetError> {
        let s = v.get_ref().trim();
        if lowering != "nvptx" {
            return Err(self.err(
                &v.span(),
                "device.arch",
                format!("only for devices with lowering = \"nvptx\", not `{lowering}`"),
            ));
        }
        let digits = s.strip_prefix("sm_").unwrap_or("");
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.err(
                &v.span(),
                "device.arch",
                format!("`{s}` is not a GPU architecture of the form sm_<digits> (sm_70, sm_80)"),
            ));
        }
        if !NVPTX_ARCHS.contains(&s) {
            return Err(self.err(
                &v.span(),
                "device.arch",
                format!(
                    "unknown NVIDIA GPU architecture `{s}` (known: {})",
                    NVPTX_ARCHS.join(", ")
                ),
            ));
        }
        Ok(s.to_string())
    }
}

/// Appends the links (and a switch device) of the `topology` generator, if there is one, and
/// returns the geometry it gave its devices.
fn generate(
    cx: &Ctx<'_>,
    ic: &RawInterconnect,
    groups: &BTreeMap<String, Vec<usize>>,
    taken: &mut BTreeSet<String>,
    devices: &mut Vec<Device>,
    links: &mut Vec<Link>,
) -> Result<Option<Layout>, TargetError> {
    let Some(topology) = &ic.topology else {
        let stray = [
            ("devices", ic.devices.as_ref().map(|v| v.span())),
            ("rows", ic.rows.as_ref().map(|v| v.span())),
            ("cols", ic.cols.as_ref().map(|v| v.span())),
            ("switch", ic.switch.as_ref().map(|v| v.span())),
            ("bandwidth", ic.bandwidth.as_ref().map(|v| v.span())),
            ("latency", ic.latency.as_ref().map(|v| v.span())),
        ]
        .into_iter()
        .find_map(|(f, s)| s.map(|s| (f, s)));
        if let Some((field, span)) = stray {
            return Err(cx.err(
                &span,
                &format!("interconnect.{field}"),
                "needs a `topology`",
            ));
        }
        return Ok(None);
    };
    let t = topology.get_ref().as_str();
    if !matches!(
        t,
        "ring" | "mesh2d" | "torus2d" | "switch" | "fully-connected"
    ) {
        return Err(cx.err(
            &topology.span(),
            "interconnect.topology",
            format!(
                "unknown topology `{t}` (expected ring, mesh2d, torus2d, switch or fully-connected)"
            ),
        ));
    }
    let group = ic.devices.as_ref().ok_or_else(|| {
        cx.err(
            &topology.span(),
            "interconnect.devices",
            "missing: the device group the topology connects",
        )
    })?;
    let members = groups.get(group.get_ref()).ok_or_else(|| {
        cx.err(
            &group.span(),
            "interconnect.devices",
            format!("unknown device group `{}`", group.get_ref()),
        )
    })?;
    let bandwidth = match &ic.bandwidth {
        Some(v) => cx.per_second(v, "interconnect.bandwidth")?,
        None => return Err(cx.err(&topology.span(), "interconnect.bandwidth", "missing")),
    };
    let latency = match &ic.latency {
        Some(v) => cx.seconds(v, "interconnect.latency")?,
        None => return Err(cx.err(&topology.span(), "interconnect.latency", "missing")),
    };
    let member_names: Vec<String> = members.iter().map(|&m| devices[m].name.clone()).collect();
    let name = |i: usize| member_names[i].clone();
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let n = members.len();
    let is_mesh = matches!(t, "mesh2d" | "torus2d");
    if !is_mesh {
        for (v, f) in [(&ic.rows, "rows"), (&ic.cols, "cols")] {
            if let Some(v) = v {
                return Err(cx.err(
                    &v.span(),
                    &format!("interconnect.{f}"),
                    format!("only for mesh2d and torus2d, not {t}"),
                ));
            }
        }
    }
    if t != "switch"
        && let Some(s) = &ic.switch
    {
        return Err(cx.err(
            &s.span(),
            "interconnect.switch",
            format!("only for the switch topology, not {t}"),
        ));
    }
    let layout = |kind: LayoutKind| Layout {
        kind,
        members: member_names.clone(),
    };
    let shape = match t {
        "ring" => {
            for i in 0..n {
                let j = (i + 1) % n;
                if i != j && !(n == 2 && i == 1) {
                    pairs.push((i, j));
                }
            }
            LayoutKind::Ring
        }
        "fully-connected" => {
            if n.saturating_mul(n.saturating_sub(1)) / 2 > MAX_LINKS {
                return Err(cx.err(
                    &topology.span(),
                    "interconnect.topology",
                    format!(
                        "fully-connected over the {n} devices of `{}` makes {} links, more than \
                         the {MAX_LINKS} a target may have",
                        group.get_ref(),
                        n.saturating_mul(n.saturating_sub(1)) / 2
                    ),
                ));
            }
            for i in 0..n {
                for j in i + 1..n {
                    pairs.push((i, j));
                }
            }
            LayoutKind::FullyConnected
        }
        "switch" => {
            let sw = match &ic.switch {
                Some(s) => cx.name(s, "interconnect.switch")?,
                None => "switch".to_string(),
            };
            if !taken.insert(sw.clone()) {
                let span = ic.switch.as_ref().map_or(topology.span(), |s| s.span());
                return Err(cx.err(
                    &span,
                    "interconnect.switch",
                    format!("duplicate device name `{sw}`"),
                ));
            }
            devices.push(Device {
                name: sw.clone(),
                kind: "switch".to_string(),
                memory_bytes: 0,
                memory_bandwidth: 0.0,
                compute: BTreeMap::new(),
                supported_ops: Some(BTreeSet::new()),
                lowering: "none".to_string(),
                arch: None,
                efficiency: BTreeMap::new(),
                op_overhead: 0.0,
                overlap: true,
            });
            for i in 0..n {
                links.push(Link {
                    a: name(i),
                    b: sw.clone(),
                    bandwidth,
                    latency,
                });
            }
            return Ok(Some(layout(LayoutKind::Switch { hub: sw })));
        }
        _ => {
            let rows = ic
                .rows
                .as_ref()
                .ok_or_else(|| cx.err(&topology.span(), "interconnect.rows", "missing"))?;
            let cols = ic
                .cols
                .as_ref()
                .ok_or_else(|| cx.err(&topology.span(), "interconnect.cols", "missing"))?;
            let (r, c) = (
                cx.whole(rows, "interconnect.rows")?,
                cx.whole(cols, "interconnect.cols")?,
            );
            if r.checked_mul(c) != Some(n as u64) {
                return Err(cx.err(
                    &rows.span(),
                    "interconnect.rows",
                    format!(
                        "a {r}x{c} mesh needs {} devices, group `{}` has {n}",
                        r.saturating_mul(c),
                        group.get_ref()
                    ),
                ));
            }
            let (r, c) = (r as usize, c as usize);
            let torus = t == "torus2d";
            for y in 0..r {
                for x in 0..c {
                    let i = y * c + x;
                    if x + 1 < c {
                        pairs.push((i, i + 1));
                    } else if torus && c > 2 {
                        pairs.push((y * c, i));
                    }
                    if y + 1 < r {
                        pairs.push((i, i + c));
                    } else if torus && r > 2 {
                        pairs.push((x, i));
                    }
                }
            }
            LayoutKind::Mesh {
                rows: r,
                cols: c,
                torus,
            }
        }
    };
    for (i, j) in pairs {
        links.push(Link {
            a: name(i),
            b: name(j),
            bandwidth,
            latency,
        });
    }
    Ok(Some(layout(shape)))
}

/// Reads and resolves a target file; errors name the file as given.
pub fn load_file(path: &Path) -> Result<TargetSpec, TargetError> {
    let source = std::fs::read_to_string(path).map_err(|source| TargetError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_target(&source, &path.display().to_string())
}
