//! Built-in targets (embedded TOML files) and finding targets by name on a search path.

use std::path::{Path, PathBuf};

use crate::{TargetError, TargetSpec, load_file, parse_target};

const BUILTINS: [(&str, &str); 6] = [
    ("cpu", include_str!("../builtin/cpu.toml")),
    ("mcm-2x2", include_str!("../builtin/mcm-2x2.toml")),
    ("mcm-4x4", include_str!("../builtin/mcm-4x4.toml")),
    ("mcm-ring4", include_str!("../builtin/mcm-ring4.toml")),
    (
        "hetero-cpu-gpu",
        include_str!("../builtin/hetero-cpu-gpu.toml"),
    ),
    ("gpu-8", include_str!("../builtin/gpu-8.toml")),
];

/// The names of the built-in targets, in listing order.
pub const BUILTIN_NAMES: [&str; 6] = [
    "cpu",
    "mcm-2x2",
    "mcm-4x4",
    "mcm-ring4",
    "hetero-cpu-gpu",
    "gpu-8",
];

/// The built-in target `name`, if there is one.
pub fn builtin_target(name: &str) -> Option<Result<TargetSpec, TargetError>> {
    BUILTINS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(n, src)| parse_target(src, &format!("<builtin>/{n}.toml")))
}

/// Every built-in target, resolved. The files ship with the crate and are tested to parse,
/// so a failure here is a bug in tessera.
pub fn builtin_targets() -> Vec<TargetSpec> {
    BUILTINS
        .iter()
        .map(|(n, src)| {
            parse_target(src, &format!("<builtin>/{n}.toml"))
                .unwrap_or_else(|e| panic!("built-in target {n} is invalid: {e}"))
        })
        .collect()
}

/// The directories of `TESSERA_TARGET_PATH` (colon-separated; empty entries skipped).
pub fn env_search_path() -> Vec<PathBuf> {
    std::env::var_os("TESSERA_TARGET_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Finds a target: a name ending in `.toml` is a file; otherwise a built-in, else the first
/// `<dir>/<name>.toml` in `search_path` order.
pub fn lookup(name: &str, search_path: &[PathBuf]) -> Result<TargetSpec, TargetError> {
    if name.ends_with(".toml") {
        return load_file(Path::new(name));
    }
    if let Some(t) = builtin_target(name) {
        return t;
    }
    for dir in search_path {
        let path = dir.join(format!("{name}.toml"));
        if path.is_file() {
            return load_file(&path);
        }
    }
    Err(TargetError::UnknownTarget {
        name: name.to_string(),
        searched: search_path.to_vec(),
    })
}

/// Where a listed target comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSource {
    /// Shipped with tessera.
    Builtin,
    /// Registered in code by a plugin ([`crate::register_target`]).
    Plugin,
    /// A file found on the search path.
    File(PathBuf),
}

/// One line of `tessera targets`.
#[derive(Debug)]
pub struct TargetEntry {
    /// The name `lookup` finds it by.
    pub name: String,
    /// Where it comes from.
    pub source: TargetSource,
    /// Its description, or why the file does not load.
    pub description: Result<String, TargetError>,
}

/// The targets registered in code, the built-in targets, then every `*.toml` on the search
/// path (by directory, then name), skipping names that an earlier entry already has
/// ([`crate::resolve`] would not find them).
pub fn list_targets(search_path: &[PathBuf]) -> Vec<TargetEntry> {
    let mut entries: Vec<TargetEntry> = crate::registered_targets()
        .iter()
        .map(|t| TargetEntry {
            name: t.spec().name.clone(),
            source: TargetSource::Plugin,
            description: Ok(t.spec().description.clone()),
        })
        .collect();
    entries.extend(BUILTINS.iter().map(|(n, src)| TargetEntry {
        name: n.to_string(),
        source: TargetSource::Builtin,
        description: parse_target(src, &format!("<builtin>/{n}.toml")).map(|t| t.description),
    }));
    for dir in search_path {
        let Ok(read) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = read
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        for path in files {
            let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                continue;
            };
            if entries.iter().any(|e| e.name == name) {
                continue;
            }
            entries.push(TargetEntry {
                name,
                description: load_file(&path).map(|t| t.description),
                source: TargetSource::File(path),
            });
        }
    }
    entries
}
