//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong reading, resolving or querying a target.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A target file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A target file is malformed or inconsistent: `FILE:LINE: FIELD: MESSAGE`.
    #[error("{file}:{line}: {}{message}", field.as_deref().map(|f| format!("{f}: ")).unwrap_or_default())]
    Invalid {
        /// The file, as given (built-ins are `<builtin>/NAME.toml`).
        file: String,
        /// 1-based line of the offending value.
        line: usize,
        /// The field, dotted (`device.memory`, `interconnect.link.a`), when known.
        field: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// No built-in target and no file on the search path has this name.
    #[error("unknown target `{name}` (built-ins: {}; searched: {})", crate::BUILTIN_NAMES.join(", "), if searched.is_empty() { "no --target-path or TESSERA_TARGET_PATH directories".to_string() } else { searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") })]
    UnknownTarget {
        /// The name asked for.
        name: String,
        /// The directories searched.
        searched: Vec<PathBuf>,
    },
    /// A device name that the target does not have.
    #[error("target `{target}` has no device `{device}`")]
    UnknownDevice {
        /// The target.
        target: String,
        /// The device asked for.
        device: String,
    },
    /// No chain of links connects two devices.
    #[error("target `{target}`: no route from `{from}` to `{to}`")]
    Unreachable {
        /// The target.
        target: String,
        /// Source device.
        from: String,
        /// Destination device.
        to: String,
    },
    /// A target registered in code has the name of a built-in or an earlier registration.
    #[error("a target named `{name}` already exists")]
    DuplicateTarget {
        /// The clashing name.
        name: String,
    },
}
