//! `tessera targets`: list the known targets, or show one resolved.

use std::fmt::Write;
use std::path::PathBuf;

use anyhow::Result;
use tessera_targets::{TargetSource, TargetSpec};

/// The search path: `--target-path` directories first, then `TESSERA_TARGET_PATH`.
pub fn search_path(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut path = dirs.to_vec();
    path.extend(tessera_targets::env_search_path());
    path
}

/// Resolves `--target NAME` (a file, a plugin's target, a built-in or a file on the search
/// path); an unknown name gets "did you mean" with the closest known target.
pub fn resolve(
    name: &str,
    dirs: &[PathBuf],
) -> Result<std::sync::Arc<dyn tessera_targets::Target>> {
    let path = search_path(dirs);
    tessera_targets::resolve(name, &path).map_err(|e| {
        if let tessera_targets::TargetError::UnknownTarget { .. } = e {
            let known: Vec<String> = tessera_targets::list_targets(&path)
                .into_iter()
                .map(|t| t.name)
                .collect();
            let names: Vec<&str> = known.iter().map(String::as_str).collect();
            if let Some(c) = tessera_passes::closest(name, &names) {
                return anyhow::anyhow!("{e}; did you mean `{c}`?");
            }
        }
        e.into()
    })
}

/// Lists the built-in targets and those on the search path, with their descriptions.
pub fn list(dirs: &[PathBuf]) -> Result<()> {
    let entries = tessera_targets::list_targets(&search_path(dirs));
    let width = entries.iter().map(|e| e.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for e in &entries {
        let source = match &e.source {
            TargetSource::Builtin => "built-in".to_string(),
            TargetSource::Plugin => "plugin".to_string(),
            TargetSource::File(p) => p.display().to_string(),
        };
        let _ = match &e.description {
            Ok(d) => writeln!(out, "{:width$}  {d} ({source})", e.name),
            Err(err) => writeln!(out, "{:width$}  invalid target file: {err}", e.name),
        };
    }
    super::print_stdout(&out)
}

/// Prints one target resolved: its devices, links and host.
pub fn show(name: &str, dirs: &[PathBuf]) -> Result<()> {
    let target = resolve(name, dirs)?;
    super::print_stdout(&render(target.spec()))
}

/// The text of `tessera targets show`.
pub fn render(t: &TargetSpec) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "target {}: {}", t.name, t.description);
    let _ = writeln!(s, "host: {}", t.host);
    let _ = writeln!(s, "devices ({}):", t.devices.len());
    let w = t.devices.iter().map(|d| d.name.len()).max().unwrap_or(0);
    let kw = t.devices.iter().map(|d| d.kind.len()).max().unwrap_or(0);
    for d in &t.devices {
        let compute = d
            .compute
            .iter()
            .map(|(ty, v)| format!("{ty} {}", si(*v, "FLOP/s")))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            s,
            "  {:w$}  {:kw$}  memory {:>9}  bandwidth {:>11}  lowering {}",
            d.name,
            d.kind,
            bytes(d.memory_bytes),
            si(d.memory_bandwidth, "B/s"),
            d.lowering,
        );
        if !compute.is_empty() {
            let _ = writeln!(s, "  {:w$}  compute: {compute}", "");
        }
        if let Some(ops) = &d.supported_ops {
            let ops = ops.iter().cloned().collect::<Vec<_>>().join(", ");
            let _ = writeln!(s, "  {:w$}  supported ops: [{ops}]", "");
        }
        if !d.efficiency.is_empty() {
            let eff = d
                .efficiency
                .iter()
                .map(|(op, e)| format!("{op} {e}"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(s, "  {:w$}  efficiency: {eff}", "");
        }
        if d.op_overhead > 0.0 {
            let _ = writeln!(s, "  {:w$}  op overhead: {}", "", seconds(d.op_overhead));
        }
        if !d.overlap {
            let _ = writeln!(
                s,
                "  {:w$}  no overlap: its transfers occupy it (overlap = false)",
                ""
            );
        }
    }
    let _ = writeln!(s, "links ({}):", t.links.len());
    let lw = t
        .links
        .iter()
        .map(|l| l.a.len() + l.b.len() + 5)
        .max()
        .unwrap_or(0);
    for l in &t.links {
        let ends = format!("{} <-> {}", l.a, l.b);
        let _ = writeln!(
            s,
            "  {ends:lw$}  bandwidth {:>11}  latency {}",
            si(l.bandwidth, "B/s"),
            seconds(l.latency),
        );
    }
    s
}

/// `v` with a decimal SI prefix: `64 GB`, `1.555 TB/s`, `19.5 TFLOP/s`.
fn si(v: f64, unit: &str) -> String {
    const PREFIXES: [(f64, &str); 5] =
        [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, p) in PREFIXES {
        if v >= scale {
            return format!("{} {p}{unit}", trim(v / scale));
        }
    }
    format!("{} {unit}", trim(v))
}

/// A byte count: binary units when it is a whole number of them (`32 MiB`), else decimal.
fn bytes(v: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{} {unit}", v >> shift);
        }
    }
    si(v as f64, "B")
}

/// A duration in s, ms, us or ns.
fn seconds(v: f64) -> String {
    if v == 0.0 {
        return "0 s".to_string();
    }
    for (scale, unit) in [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")] {
        if v >= scale {
            return format!("{} {unit}", trim(v / scale));
        }
    }
    format!("{} ns", trim(v / 1e-9))
}

/// At most four significant decimals, without trailing zeros.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(si(64e9, "B"), "64 GB");
        assert_eq!(si(1555e9, "B/s"), "1.555 TB/s");
        assert_eq!(bytes(33554432), "32 MiB");
        assert_eq!(bytes(64_000_000_000), "64 GB");
        assert_eq!(si(0.0, "B"), "0 B");
        assert_eq!(seconds(200e-9), "200 ns");
        assert_eq!(seconds(2e-6), "2 us");
    }
}
