//! Tokens of the text format.

use super::ParseError;

/// A 1-based source position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: usize,
    pub col: usize,
}

impl Pos {
    pub fn error(self, message: impl Into<String>) -> ParseError {
        ParseError {
            line: self.line,
            col: self.col,
            message: message.into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    /// `[A-Za-z_][A-Za-z0-9_-]*`: keywords, op names, attribute keys, enum values, symbols.
    Ident(String),
    /// `%name` or `%"name"`.
    Value(String),
    /// `@name` or `@"name"`.
    Global(String),
    /// An integer literal, as written (sign included).
    Int(String),
    /// A float literal with `.` or an exponent, or `-inf`, as written.
    Float(String),
    /// `0x...`: the bit pattern of a float element.
    Hex(u64),
    /// A string literal, unescaped.
    Str(String),
    /// One of `( ) { } [ ] , : =`.
    Punct(char),
    Eof,
}

impl Tok {
    /// How the token is named in "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Value(s) => format!("value `%{s}`"),
            Tok::Global(s) => format!("`@{s}`"),
            Tok::Int(s) | Tok::Float(s) => format!("number `{s}`"),
            Tok::Hex(h) => format!("`{h:#x}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Eof => "end of file".to_string(),
        }
    }
}

/// Characters allowed in unquoted `%` and `@` names.
pub(crate) fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '$' | '-')
}

pub(crate) fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

pub(crate) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Splits the source into tokens, each with its position. The last token is [`Tok::Eof`].
pub(crate) fn lex(src: &str) -> Result<Vec<(Tok, Pos)>, ParseError> {
    let mut lx = Lexer {
        chars: src.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
    };
    let mut out = Vec::new();
    loop {
        lx.skip_trivia();
        let pos = lx.pos();
        let Some(c) = lx.peek(0) else {
            out.push((Tok::Eof, pos));
            return Ok(out);
        };
        let tok = match c {
            '(' | ')' | '{' | '}' | '[' | ']' | ',' | ':' | '=' => {
                lx.bump();
                Tok::Punct(c)
            }
            '%' | '@' => {
                lx.bump();
                let name = lx.name(pos, c)?;
                if c == '%' {
                    Tok::Value(name)
                } else {
                    Tok::Global(name)
                }
            }
            '"' => Tok::Str(lx.string()?),
            '-' if lx.peek(1).is_some_and(|c| c.is_ascii_digit()) => lx.number(pos)?,
            '-' if lx.starts_with("-inf") && !lx.peek(4).is_some_and(is_ident_char) => {
                for _ in 0..4 {
                    lx.bump();
                }
                Tok::Float("-inf".to_string())
            }
            c if c.is_ascii_digit() => lx.number(pos)?,
            c if is_ident_start(c) => {
                let mut s = String::new();
                while let Some(c) = lx.peek(0).filter(|&c| is_ident_char(c)) {
                    s.push(c);
                    lx.bump();
                }
                Tok::Ident(s)
            }
            c => return Err(pos.error(format!("unexpected character {c:?}"))),
        };
        out.push((tok, pos));
    }
}

struct Lexer {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
}

impl Lexer {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    fn peek(&self, k: usize) -> Option<char> {
        self.chars.get(self.i + k).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        s.chars().enumerate().all(|(k, c)| self.peek(k) == Some(c))
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek(0)?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn skip_trivia(&mut self) {
        loop {
            match self.peek(0) {
                Some(c) if c.is_whitespace() => {
                    self.bump();
                }
                Some('/') if self.peek(1) == Some('/') => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    /// A name after `%` or `@`: unquoted name characters or a quoted string.
    fn name(&mut self, start: Pos, sigil: char) -> Result<String, ParseError> {
        if self.peek(0) == Some('"') {
            return self.string();
        }
        let mut s = String::new();
        while let Some(c) = self.peek(0).filter(|&c| is_name_char(c)) {
            s.push(c);
            self.bump();
        }
        if s.is_empty() {
            return Err(start.error(format!(
                "expected a name after `{sigil}` (letters, digits, `_.$-`, or a quoted string)"
            )));
        }
        Ok(s)
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.pos();
        self.bump();
        let mut s = String::new();
        loop {
            let pos = self.pos();
            match self.bump() {
                None | Some('\n') => return Err(start.error("unterminated string")),
                Some('"') => return Ok(s),
                Some('\\') => match self.bump() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('r') => s.push('\r'),
                    Some('0') => s.push('\0'),
                    Some('\\') => s.push('\\'),
                    Some('"') => s.push('"'),
                    Some('u') if self.peek(0) == Some('{') => {
                        self.bump();
                        let mut hex = String::new();
                        while let Some(c) = self.peek(0).filter(|c| c.is_ascii_hexdigit()) {
                            hex.push(c);
                            self.bump();
                        }
                        let c = (self.bump() == Some('}'))
                            .then(|| u32::from_str_radix(&hex, 16).ok())
                            .flatten()
                            .and_then(char::from_u32)
                            .ok_or_else(|| pos.error("bad `\\u{...}` escape"))?;
                        s.push(c);
                    }
                    _ => {
                        return Err(pos.error(
                            "unknown escape (expected one of \\n \\t \\r \\0 \\\\ \\\" \\u{...})",
                        ));
                    }
                },
                Some(c) => s.push(c),
            }
        }
    }

    fn number(&mut self, pos: Pos) -> Result<Tok, ParseError> {
        let mut s = String::new();
        if self.peek(0) == Some('-') {
            s.push('-');
            self.bump();
        }
        if s.is_empty() && self.starts_with("0x") {
            self.bump();
            self.bump();
            let mut hex = String::new();
            while let Some(c) = self.peek(0).filter(|c| c.is_ascii_hexdigit()) {
                hex.push(c);
                self.bump();
            }
            return u64::from_str_radix(&hex, 16)
                .map(Tok::Hex)
                .map_err(|_| pos.error("bad hexadecimal literal"));
        }
        let mut float = false;
        self.digits(&mut s);
        if self.peek(0) == Some('.') && self.peek(1).is_some_and(|c| c.is_ascii_digit()) {
            float = true;
            s.push('.');
            self.bump();
            self.digits(&mut s);
        }
        if matches!(self.peek(0), Some('e' | 'E')) {
            let signed = matches!(self.peek(1), Some('+' | '-'));
            let digit_at = if signed { 2 } else { 1 };
            if self.peek(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                float = true;
                for _ in 0..digit_at {
                    s.push(self.bump().unwrap_or('e'));
                }
                self.digits(&mut s);
            }
        }
        if self.peek(0).is_some_and(|c| is_ident_char(c) || c == '.') {
            return Err(pos.error(format!("malformed number starting `{s}`")));
        }
        Ok(if float { Tok::Float(s) } else { Tok::Int(s) })
    }

    fn digits(&mut self, s: &mut String) {
        while let Some(c) = self.peek(0).filter(|c| c.is_ascii_digit()) {
            s.push(c);
            self.bump();
        }
    }
}

/// Writes `s` as a quoted string literal with escapes.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A `%`/`@` name as printed: bare when it is made of name characters, else quoted.
pub(crate) fn name_text(name: &str) -> String {
    if !name.is_empty() && name.chars().all(is_name_char) {
        name.to_string()
    } else {
        quote(name)
    }
}

/// Whether `s` prints bare as an identifier (symbolic dims), without clashing with literals.
pub(crate) fn is_plain_ident(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next().is_some_and(is_ident_start)
        && cs.all(is_ident_char)
        && !matches!(s, "nan" | "inf" | "true" | "false")
}
