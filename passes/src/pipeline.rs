//! Textual pass pipelines: `canonicalize,cse,eqsat{node-limit=50000 time-limit=2.5}`.
//!
//! Grammar: passes separated by `,`; each is a registered pass name, optionally followed by
//! `{name=value name=value}` (options separated by spaces, as in MLIR). Values are bare words
//! or `"quoted strings"` with `\"` and `\\` escapes. [`Pipeline`]'s `Display` prints every
//! option with its value, so printing a parsed pipeline and parsing it again gives the same
//! pipeline, and the printed form is canonical.

use std::fmt;

use crate::pass::{OptionValue, Options, PassInfo};
use crate::registry::{closest, lookup, registry};

/// One configured pass of a pipeline.
#[derive(Clone, Debug)]
pub struct PassSpec {
    /// The pass's registry record.
    pub info: &'static PassInfo,
    /// Its options (all of them; defaults filled in).
    pub options: Options,
}

impl PartialEq for PassSpec {
    fn eq(&self, other: &Self) -> bool {
        self.info.name == other.info.name && self.options == other.options
    }
}

impl PassSpec {
    /// The pass with its default options.
    pub fn new(name: &str) -> Result<PassSpec, PipelineParseError> {
        let info = lookup(name).ok_or_else(|| unknown_pass(name, 1))?;
        Ok(PassSpec {
            info,
            options: Options::defaults(info),
        })
    }
}

impl fmt::Display for PassSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.info.name)?;
        if !self.info.options.is_empty() {
            f.write_str("{")?;
            for (i, o) in self.info.options.iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                let v = self
                    .options
                    .get(o.name)
                    .cloned()
                    .unwrap_or(OptionValue::Str(String::new()));
                write!(f, "{}={v}", o.name)?;
            }
            f.write_str("}")?;
        }
        Ok(())
    }
}

/// A parsed pipeline: passes in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pipeline {
    /// The passes.
    pub passes: Vec<PassSpec>,
}

impl fmt::Display for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.passes.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// A pipeline string is malformed or names unknown passes or options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pipeline column {col}: {message}")]
pub struct PipelineParseError {
    /// 1-based column in the pipeline text.
    pub col: usize,
    /// What is wrong (with the closest valid name when one is near).
    pub message: String,
}

fn unknown_pass(name: &str, col: usize) -> PipelineParseError {
    let names: Vec<&str> = registry().iter().map(|p| p.name).collect();
    let hint = match closest(name, &names) {
        Some(c) => format!("; did you mean `{c}`?"),
        None => format!("; passes: {}", names.join(", ")),
    };
    PipelineParseError {
        col,
        message: format!("unknown pass `{name}`{hint}"),
    }
}

impl Pipeline {
    /// Parses a pipeline. An empty string is the empty pipeline.
    pub fn parse(text: &str) -> Result<Pipeline, PipelineParseError> {
        Parser {
            s: text.as_bytes(),
            text,
            pos: 0,
        }
        .pipeline()
    }
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, PipelineParseError> {
        Err(PipelineParseError {
            col: self.col(self.pos),
            message: message.into(),
        })
    }

    /// The 1-based column, in characters, of byte offset `pos`.
    fn col(&self, pos: usize) -> usize {
        self.text[..pos].chars().count() + 1
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn word(&mut self) -> &str {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || b"-_.".contains(&self.s[self.pos]))
        {
            self.pos += 1;
        }
        &self.text[start..self.pos]
    }

    fn pipeline(&mut self) -> Result<Pipeline, PipelineParseError> {
        let mut passes = Vec::new();
        self.skip_ws();
        if self.peek().is_none() {
            return Ok(Pipeline { passes });
        }
        loop {
            self.skip_ws();
            passes.push(self.pass()?);
            self.skip_ws();
            match self.peek() {
                None => return Ok(Pipeline { passes }),
                Some(b',') => self.pos += 1,
                Some(_) => {
                    let c = self.text[self.pos..].chars().next().unwrap_or(' ');
                    return self.err(format!(
                        "expected `,` or the end of the pipeline, found `{c}`"
                    ));
                }
            }
        }
    }

    fn pass(&mut self) -> Result<PassSpec, PipelineParseError> {
        let start = self.pos;
        let name = self.word().to_string();
        if name.is_empty() {
            return self.err("expected a pass name");
        }
        let info = lookup(&name).ok_or_else(|| unknown_pass(&name, self.col(start)))?;
        let mut options = Options::defaults(info);
        self.skip_ws();
        if self.peek() == Some(b'{') {
            self.pos += 1;
            let mut seen: Vec<&str> = Vec::new();
            loop {
                self.skip_ws();
                match self.peek() {
                    Some(b'}') => {
                        self.pos += 1;
                        break;
                    }
                    None => return self.err(format!("unclosed `{{` in the options of `{name}`")),
                    _ => {}
                }
                let kstart = self.pos;
                let key = self.word().to_string();
                if key.is_empty() {
                    return self.err("expected an option name");
                }
                let Some(opt) = info.options.iter().find(|o| o.name == key) else {
                    let names: Vec<&str> = info.options.iter().map(|o| o.name).collect();
                    let hint = match closest(&key, &names) {
                        Some(c) => format!("; did you mean `{c}`?"),
                        None if names.is_empty() => format!("; `{name}` has no options"),
                        None => format!("; options: {}", names.join(", ")),
                    };
                    return Err(PipelineParseError {
                        col: self.col(kstart),
                        message: format!("unknown option `{key}` of pass `{name}`{hint}"),
                    });
                };
                if seen.contains(&opt.name) {
                    return Err(PipelineParseError {
                        col: self.col(kstart),
                        message: format!("option `{key}` given twice"),
                    });
                }
                seen.push(opt.name);
                self.skip_ws();
                if self.peek() != Some(b'=') {
                    return self.err(format!("expected `=` after option `{key}`"));
                }
                self.pos += 1;
                self.skip_ws();
                let vstart = self.pos;
                let raw = self.value()?;
                let vcol = self.col(vstart);
                let v = OptionValue::parse(opt.kind, &raw).map_err(|m| PipelineParseError {
                    col: vcol,
                    message: format!("option `{key}` of `{name}` takes a {}: {m}", opt.kind),
                })?;
                options.set(opt.name, v);
            }
        }
        Ok(PassSpec { info, options })
    }

    fn value(&mut self) -> Result<String, PipelineParseError> {
        if self.peek() == Some(b'"') {
            self.pos += 1;
            let mut out = String::new();
            loop {
                let Some(c) = self.text[self.pos..].chars().next() else {
                    return self.err("unterminated string");
                };
                self.pos += c.len_utf8();
                match c {
                    '"' => return Ok(out),
                    '\\' => {
                        let Some(e) = self.text[self.pos..].chars().next() else {
                            return self.err("unterminated string");
                        };
                        self.pos += e.len_utf8();
                        out.push(match e {
                            'n' => '\n',
                            'r' => '\r',
                            't' => '\t',
                            e => e,
                        });
                    }
                    c => out.push(c),
                }
            }
        }
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c.is_ascii_whitespace() || b",{}\"".contains(&c) {
                break;
            }
            self.pos += 1;
        }
        if self.pos == start {
            return self.err("expected a value");
        }
        Ok(self.text[start..self.pos].to_string())
    }
}
