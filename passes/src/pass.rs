//! The pass abstraction: a pass is a record (name, summary, typed options) plus a function
//! from options to a runnable [`Pass`].

use std::collections::BTreeMap;
use std::fmt;

use tessera_ir::Graph;

/// A runnable pass, configured with its options.
pub trait Pass {
    /// Runs the pass on `graph`, recording counters in `stats`. Returns whether the IR
    /// changed. A pass does no file I/O and prints nothing.
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError>;
}

/// A pass failed: the graph it ran on cannot be transformed (bad options, unsupported
/// input). The pass manager attaches the pass name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PassError {
    /// What went wrong.
    pub message: String,
}

impl PassError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        PassError {
            message: message.into(),
        }
    }
}

/// Counters a pass reports (`--pass-statistics`), in the order first recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Statistics {
    entries: Vec<(&'static str, &'static str, u64)>,
    notes: Vec<String>,
}

impl Statistics {
    /// Adds `n` to the counter `name` (with a one-line description).
    pub fn add(&mut self, name: &'static str, description: &'static str, n: u64) {
        match self.entries.iter_mut().find(|e| e.0 == name) {
            Some(e) => e.2 += n,
            None => self.entries.push((name, description, n)),
        }
    }

    /// The counters: (name, description, value).
    pub fn entries(&self) -> &[(&'static str, &'static str, u64)] {
        &self.entries
    }

    /// The value of a counter (0 when never recorded).
    pub fn get(&self, name: &str) -> u64 {
        self.entries.iter().find(|e| e.0 == name).map_or(0, |e| e.2)
    }

    /// Records a line of explanation (what a pass did and why, such as the rules behind a
    /// rewrite), which the command line prints when asked (`--explain`).
    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// The recorded explanation lines, in order.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

/// The kind of an option's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    /// A non-negative integer.
    UInt,
    /// A floating-point number.
    Float,
    /// `true` or `false`.
    Bool,
    /// Any text (quoted with `"` when it contains spaces, commas or braces).
    Str,
}

impl fmt::Display for OptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OptionKind::UInt => "uint",
            OptionKind::Float => "float",
            OptionKind::Bool => "bool",
            OptionKind::Str => "string",
        })
    }
}

/// The description of one pass option.
#[derive(Clone, Copy, Debug)]
pub struct OptionInfo {
    /// Kebab-case name (`node-limit`).
    pub name: &'static str,
    /// Value kind.
    pub kind: OptionKind,
    /// Default value, in text form.
    pub default: &'static str,
    /// One-line documentation.
    pub doc: &'static str,
}

/// The registry record of a pass.
#[derive(Clone, Copy)]
pub struct PassInfo {
    /// Kebab-case name: registry key, pipeline token, timing label, dump file name, test
    /// folder name.
    pub name: &'static str,
    /// One-line summary.
    pub summary: &'static str,
    /// Options, in the order they print.
    pub options: &'static [OptionInfo],
    /// Builds the pass from validated options.
    pub create: fn(&Options) -> Result<Box<dyn Pass>, PassError>,
}

impl fmt::Debug for PassInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassInfo")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Validated option values of one pass instance (every option present, defaults filled in).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Options {
    values: BTreeMap<&'static str, OptionValue>,
}

/// A typed option value.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    /// See [`OptionKind::UInt`].
    UInt(u64),
    /// See [`OptionKind::Float`].
    Float(f64),
    /// See [`OptionKind::Bool`].
    Bool(bool),
    /// See [`OptionKind::Str`].
    Str(String),
}

impl OptionValue {
    /// Parses a value of `kind` from text.
    pub fn parse(kind: OptionKind, text: &str) -> Result<OptionValue, String> {
        match kind {
            OptionKind::UInt => text
                .parse()
                .map(OptionValue::UInt)
                .map_err(|_| format!("`{text}` is not a non-negative integer")),
            OptionKind::Float => text
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map(OptionValue::Float)
                .ok_or_else(|| format!("`{text}` is not a finite number")),
            OptionKind::Bool => match text {
                "true" => Ok(OptionValue::Bool(true)),
                "false" => Ok(OptionValue::Bool(false)),
                _ => Err(format!("`{text}` is not `true` or `false`")),
            },
            OptionKind::Str => Ok(OptionValue::Str(text.to_string())),
        }
    }
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::UInt(n) => write!(f, "{n}"),
            OptionValue::Float(x) => f.write_str(&tessera_ir::format_f64(*x)),
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Str(s) => {
                if !s.is_empty()
                    && !s.contains(|c: char| c.is_whitespace() || ",{}=\"\\".contains(c))
                {
                    f.write_str(s)
                } else {
                    f.write_str("\"")?;
                    // Escapes keep a pipeline on one line (reproducer headers rely on it).
                    for c in s.chars() {
                        match c {
                            '"' | '\\' => write!(f, "\\{c}")?,
                            '\n' => f.write_str("\\n")?,
                            '\r' => f.write_str("\\r")?,
                            '\t' => f.write_str("\\t")?,
                            c => write!(f, "{c}")?,
                        }
                    }
                    f.write_str("\"")
                }
            }
        }
    }
}

impl Options {
    /// Options with every default of `info` filled in.
    pub fn defaults(info: &PassInfo) -> Options {
        let mut o = Options::default();
        for opt in info.options {
            let v = OptionValue::parse(opt.kind, opt.default).expect("registry defaults parse");
            o.values.insert(opt.name, v);
        }
        o
    }

    pub(crate) fn set(&mut self, name: &'static str, v: OptionValue) {
        self.values.insert(name, v);
    }

    /// Replaces the value of an option the pass declares (the command line uses this to fill
    /// in what only it knows, such as the compile target); `false` if there is no such option.
    pub fn replace(&mut self, name: &str, v: OptionValue) -> bool {
        match self.values.get_mut(name) {
            Some(slot) => {
                *slot = v;
                true
            }
            None => false,
        }
    }

    /// The value of an option.
    pub fn get(&self, name: &str) -> Option<&OptionValue> {
        self.values.get(name)
    }

    /// An unsigned option (0 when missing or of another kind).
    pub fn uint(&self, name: &str) -> u64 {
        match self.values.get(name) {
            Some(OptionValue::UInt(n)) => *n,
            _ => 0,
        }
    }

    /// A float option (0 when missing or of another kind).
    pub fn float(&self, name: &str) -> f64 {
        match self.values.get(name) {
            Some(OptionValue::Float(x)) => *x,
            _ => 0.0,
        }
    }

    /// A bool option (false when missing or of another kind).
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.values.get(name), Some(OptionValue::Bool(true)))
    }

    /// A string option (empty when missing or of another kind).
    pub fn string(&self, name: &str) -> &str {
        match self.values.get(name) {
            Some(OptionValue::Str(s)) => s,
            _ => "",
        }
    }
}
