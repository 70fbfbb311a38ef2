//! The parser: tokens to a [`Graph`].

use std::collections::HashMap;

use bytes::Bytes;
use half::{bf16, f16};

use super::ParseError;
use super::attrs::{Attrs, Entry, OP_NAMES, Val, build_op, closest, edit_distance, elem_from_name};
use super::lexer::{Pos, Tok, lex};
use super::printer::canonical_nan_bits;
use crate::graph::{ConstId, Graph, Sharding, StateInit, StateSlot, ValueId};
use crate::op::Op;
use crate::types::{Dim, ElemType, TensorType};

/// A constant declaration; `data` is `None` for `external` ones until the sidecar fills it.
pub(crate) struct PendingConst {
    pub name: String,
    pub ty: TensorType,
    pub data: Option<Bytes>,
    pub pos: Pos,
}

/// Parses a whole file. Constants are returned apart (not yet added to the graph) so that
/// external ones can be resolved first; their `ConstId`s are their declaration indices.
pub(crate) fn parse_file(src: &str) -> Result<(Graph, Vec<PendingConst>), ParseError> {
    let mut p = Parser {
        toks: lex(src)?,
        i: 0,
        graph: Graph::new(""),
        values: HashMap::new(),
        consts: Vec::new(),
        const_index: HashMap::new(),
        depth: 0,
    };
    p.file()?;
    Ok((p.graph, p.consts))
}

struct Parser {
    toks: Vec<(Tok, Pos)>,
    i: usize,
    graph: Graph,
    /// Defined values by name, with where they were defined.
    values: HashMap<String, (ValueId, Pos)>,
    consts: Vec<PendingConst>,
    const_index: HashMap<String, usize>,
    /// How many regions enclose the graph being parsed.
    depth: usize,
}

type PResult<T> = Result<T, ParseError>;

/// How deeply attribute lists may nest (`[[...]]`); deeper is a parse error, which keeps the
/// recursive parser's stack use bounded.
const MAX_ATTR_DEPTH: usize = 64;

impl Parser {
    /// The current token; past the end, the final [`Tok::Eof`].
    fn tok(&self) -> &(Tok, Pos) {
        let last = self.toks.len() - 1; // `lex` always ends with `Tok::Eof`
        &self.toks[self.i.min(last)]
    }

    fn peek(&self) -> &Tok {
        &self.tok().0
    }

    fn pos(&self) -> Pos {
        self.tok().1
    }

    /// Returns the current token and moves past it. The index always advances, also past
    /// the end (where every token is `Eof`), so that stepping back with `self.i -= 1` returns
    /// to the token just taken, never to the one before it.
    fn next(&mut self) -> (Tok, Pos) {
        let t = self.tok().clone();
        self.i += 1;
        t
    }

    fn unexpected<T>(&self, what: &str) -> PResult<T> {
        Err(self
            .pos()
            .error(format!("expected {what}, found {}", self.peek().describe())))
    }

    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let yes = self.is_punct(c);
        if yes {
            self.next();
        }
        yes
    }

    fn expect_punct(&mut self, c: char) -> PResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.unexpected(&format!("`{c}`"))
        }
    }

    fn is_keyword(&self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == kw)
    }

    fn global(&mut self) -> PResult<(String, Pos)> {
        match self.next() {
            (Tok::Global(s), pos) => Ok((s, pos)),
            _ => {
                self.i -= 1;
                self.unexpected("an `@name`")
            }
        }
    }

    fn value_name(&mut self) -> PResult<(String, Pos)> {
        match self.peek().clone() {
            Tok::Value(s) => Ok((s, self.next().1)),
            _ => self.unexpected("a `%name`"),
        }
    }

    fn string(&mut self) -> PResult<String> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.next();
                Ok(s)
            }
            _ => self.unexpected("a string"),
        }
    }

    /// A use of a value.
    fn operand(&mut self) -> PResult<ValueId> {
        Ok(self.named_operand()?.0)
    }

    /// A use of a value, with its name as written.
    fn named_operand(&mut self) -> PResult<(ValueId, String)> {
        let (name, pos) = self.value_name()?;
        match self.values.get(&name) {
            Some(&(v, _)) => Ok((v, name)),
            None => Err(pos.error(format!("undefined value `%{name}`"))),
        }
    }

    fn define(&mut self, name: String, pos: Pos, v: ValueId) -> PResult<()> {
        if let Some((_, first)) = self.values.get(&name) {
            return Err(pos.error(format!(
                "redefinition of `%{name}` (first defined at {}:{})",
                first.line, first.col
            )));
        }
        self.graph.set_name(v, name.clone());
        self.values.insert(name, (v, pos));
        Ok(())
    }

    // ---- file structure ----

    fn file(&mut self) -> PResult<()> {
        while self.is_keyword("const") {
            self.const_decl()?;
        }
        while self.is_keyword("mesh") {
            self.mesh_decl()?;
        }
        if !self.is_keyword("graph") {
            return self.unexpected(if self.graph.meshes.is_empty() {
                "`const`, `mesh` or `graph`"
            } else {
                "`mesh` or `graph`"
            });
        }
        self.graph_def()?;
        if *self.peek() != Tok::Eof {
            return self.unexpected("end of file after the graph");
        }
        Ok(())
    }

    /// `(init = @c | zeros, next = "output"[, mesh = @m])` after `state`.
    fn state_slot(&mut self, input: usize) -> PResult<StateSlot> {
        self.expect_punct('(')?;
        self.state_key("init")?;
        let init = if self.is_keyword("zeros") {
            self.next();
            StateInit::Zeros
        } else {
            let (name, pos) = self.global()?;
            match self.const_index.get(&name) {
                Some(&i) => StateInit::Const(ConstId::from_index(i)),
                None => return Err(pos.error(format!("undefined constant `@{name}`"))),
            }
        };
        self.expect_punct(',')?;
        self.state_key("next")?;
        let next = self.string()?;
        let mesh = if self.eat_punct(',') {
            self.state_key("mesh")?;
            Some(self.global()?.0)
        } else {
            None
        };
        self.expect_punct(')')?;
        Ok(StateSlot {
            input,
            init,
            next,
            mesh,
        })
    }

    fn state_key(&mut self, key: &str) -> PResult<()> {
        if !self.is_keyword(key) {
            return self.unexpected(&format!("`{key}`"));
        }
        self.next();
        self.expect_punct('=')
    }

    /// `graph @name(inputs) { ops return ... }` into `self.graph` (whose values are in
    /// `self.values`).
    fn graph_def(&mut self) -> PResult<()> {
        self.next();
        let (name, _) = self.global()?;
        self.graph.name = name;
        self.expect_punct('(')?;
        if !self.is_punct(')') {
            loop {
                let (name, pos) = self.value_name()?;
                self.expect_punct(':')?;
                let (ty, sharding) = self.type_with_sharding()?;
                let v = self.graph.add_input(None, ty);
                self.graph.value_mut(v).sharding = sharding;
                self.define(name, pos, v)?;
                if self.is_keyword("state") {
                    self.next();
                    let slot = self.state_slot(self.graph.inputs().len() - 1)?;
                    self.graph.state.push(slot);
                }
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct(')')?;
        self.expect_punct('{')?;
        loop {
            match self.peek() {
                Tok::Ident(s) if s == "return" => break,
                Tok::Value(_) | Tok::Ident(_) => self.statement()?,
                _ => return self.unexpected("an op or `return`"),
            }
        }
        self.next();
        let mut outputs = Vec::new();
        let mut names: Vec<(String, Option<String>)> = Vec::new();
        if matches!(self.peek(), Tok::Value(_)) {
            loop {
                let (v, written) = self.named_operand()?;
                outputs.push(v);
                let given = match self.peek() {
                    Tok::Ident(s) if s == "as" => {
                        self.next();
                        let pos = self.pos();
                        let name = self.string()?;
                        if name.is_empty() {
                            return Err(pos.error("an output's name is empty"));
                        }
                        if names.iter().any(|(_, n)| n.as_ref() == Some(&name)) {
                            return Err(pos.error(format!("two outputs are named `{name}`")));
                        }
                        Some(name)
                    }
                    _ => None,
                };
                names.push((written, given));
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        let names = super::printer::resolve_output_names(names);
        self.graph.set_named_outputs(
            outputs
                .into_iter()
                .zip(names.into_iter().map(Some))
                .collect(),
        );
        self.expect_punct('}')?;
        Ok(())
    }

    /// Whether a `{` here opens a region block (`{ graph ...`), not an attribute list.
    fn at_regions(&self) -> bool {
        self.is_punct('{')
            && matches!(self.toks.get(self.i + 1), Some((Tok::Ident(s), _)) if s == "graph")
    }

    /// The region block of a region op: `{`, one `graph` per region, `}`. Each region is a
    /// graph of its own, with its own names.
    fn regions(&mut self, op: &mut Op, name: &str, pos: Pos) -> PResult<()> {
        let want = op.regions().len();
        if !self.at_regions() {
            return self.unexpected(&format!(
                "the {want} region{} of `{name}` (`{{ graph ...`)",
                plural(want)
            ));
        }
        if self.depth + 1 > crate::verify::MAX_REGION_DEPTH {
            return Err(pos.error(format!(
                "regions nest more than {} deep",
                crate::verify::MAX_REGION_DEPTH
            )));
        }
        self.next();
        let mut parsed = Vec::with_capacity(want);
        while self.is_keyword("graph") {
            let outer_graph = std::mem::replace(&mut self.graph, Graph::new(""));
            let outer_values = std::mem::take(&mut self.values);
            self.depth += 1;
            let r = self.graph_def();
            self.depth -= 1;
            let region = std::mem::replace(&mut self.graph, outer_graph);
            self.values = outer_values;
            r?;
            parsed.push(region);
        }
        if parsed.len() != want {
            return Err(pos.error(format!(
                "`{name}` has {want} region{}, {} given",
                plural(want),
                parsed.len()
            )));
        }
        self.expect_punct('}')?;
        for (slot, region) in op.regions_mut().into_iter().zip(parsed) {
            *slot = region;
        }
        Ok(())
    }

    /// `mesh @name = [2, 2] devices("a", "b", "c", "d")`. The device count is the
    /// verifier's to check, so that a wrong one is shown inline.
    fn mesh_decl(&mut self) -> PResult<()> {
        self.next();
        let (name, _) = self.global()?;
        self.expect_punct('=')?;
        self.expect_punct('[')?;
        let mut shape = Vec::new();
        if !self.is_punct(']') {
            loop {
                let (tok, pos) = self.next();
                let Tok::Int(s) = tok else {
                    self.i -= 1;
                    return self.unexpected("a mesh axis size (positive integer)");
                };
                shape.push(s.parse::<u32>().map_err(|_| {
                    pos.error(format!("bad mesh axis size `{s}` (expected a u32)"))
                })?);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct(']')?;
        if !self.is_keyword("devices") {
            return self.unexpected("`devices(...)`");
        }
        self.next();
        self.expect_punct('(')?;
        let mut devices = Vec::new();
        if !self.is_punct(')') {
            loop {
                devices.push(self.string()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct(')')?;
        self.graph.meshes.push(crate::graph::Mesh {
            name,
            shape,
            devices,
        });
        Ok(())
    }

    fn const_decl(&mut self) -> PResult<()> {
        let decl_pos = self.next().1;
        let (name, pos) = self.global()?;
        if let Some(&k) = self.const_index.get(&name) {
            let first = self.consts[k].pos;
            return Err(pos.error(format!(
                "redefinition of constant `@{name}` (first defined at {}:{})",
                first.line, first.col
            )));
        }
        self.expect_punct(':')?;
        let ty_pos = self.pos();
        let ty = self.ty()?;
        let Some(dims) = ty.static_dims() else {
            return Err(ty_pos.error(format!(
                "constant `@{name}` must have a static shape, found {}",
                super::printer::ty(&ty)
            )));
        };
        if let Err(why) = crate::tensor::checked_byte_size(ty.elem, dims.iter().copied()) {
            return Err(ty_pos.error(format!(
                "constant `@{name}` of type {} is too large for this machine: {why}",
                super::printer::ty(&ty)
            )));
        }
        // Fits: the byte size fits isize.
        let count: u64 = dims.iter().product();
        self.expect_punct('=')?;
        let data = if self.is_keyword("external") {
            self.next();
            None
        } else {
            let open = self.pos();
            self.expect_punct('[')?;
            let mut bytes = Vec::new();
            let mut n = 0u64;
            if !self.is_punct(']') {
                loop {
                    let (tok, pos) = self.next();
                    encode_elem(ty.elem, &tok, &mut bytes).map_err(|m| pos.error(m))?;
                    n += 1;
                    if !self.eat_punct(',') {
                        break;
                    }
                }
            }
            self.expect_punct(']')?;
            if n != count {
                return Err(open.error(format!(
                    "constant `@{name}` of type {} needs {count} values, found {n}",
                    super::printer::ty(&ty)
                )));
            }
            Some(Bytes::from(bytes))
        };
        self.const_index.insert(name.clone(), self.consts.len());
        self.consts.push(PendingConst {
            name,
            ty,
            data,
            pos: decl_pos,
        });
        Ok(())
    }

    // ---- types ----

    fn ty(&mut self) -> PResult<TensorType> {
        let (tok, pos) = self.next();
        let Tok::Ident(name) = tok else {
            self.i -= 1;
            return self.unexpected("a type such as `f32[N, 4]`");
        };
        let Some(elem) = elem_from_name(&name) else {
            let names: Vec<&str> = ElemType::ALL.iter().map(|t| t.name()).collect();
            let hint = closest(&name, &names).map(|n| format!("; did you mean `{n}`?"));
            return Err(pos.error(format!(
                "unknown element type `{name}`{}",
                hint.unwrap_or_else(|| format!(" (expected one of {})", names.join(", ")))
            )));
        };
        self.expect_punct('[')?;
        let mut shape = Vec::new();
        if !self.is_punct(']') {
            loop {
                let (tok, pos) = self.next();
                shape.push(match tok {
                    Tok::Int(s) => Dim::Static(s.parse().map_err(|_| {
                        pos.error(format!(
                            "bad dimension `{s}` (expected a non-negative integer)"
                        ))
                    })?),
                    Tok::Ident(s) | Tok::Str(s) => Dim::Sym(s),
                    _ => {
                        self.i -= 1;
                        return self.unexpected("a dimension (integer or symbol)");
                    }
                });
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct(']')?;
        Ok(TensorType::new(elem, shape))
    }

    fn type_with_sharding(&mut self) -> PResult<(TensorType, Option<Sharding>)> {
        let ty = self.ty()?;
        if !self.is_keyword("sharded") {
            return Ok((ty, None));
        }
        self.next();
        self.expect_punct('[')?;
        let mut axes = Vec::new();
        if !self.is_punct(']') {
            loop {
                self.expect_punct('[')?;
                let mut grid = Vec::new();
                if !self.is_punct(']') {
                    loop {
                        let (tok, pos) = self.next();
                        let Tok::Int(s) = tok else {
                            self.i -= 1;
                            return self.unexpected("a mesh axis (non-negative integer)");
                        };
                        grid.push(s.parse::<u32>().map_err(|_| {
                            pos.error(format!("bad mesh axis `{s}` (expected a u32)"))
                        })?);
                        if !self.eat_punct(',') {
                            break;
                        }
                    }
                }
                self.expect_punct(']')?;
                axes.push(grid);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct(']')?;
        Ok((ty, Some(Sharding { axes })))
    }

    // ---- ops ----

    fn statement(&mut self) -> PResult<()> {
        let mut results = Vec::new();
        if matches!(self.peek(), Tok::Value(_)) {
            loop {
                results.push(self.value_name()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
            self.expect_punct('=')?;
        }
        let (tok, name_pos) = self.next();
        let Tok::Ident(name) = tok else {
            self.i -= 1;
            return self.unexpected("an op name");
        };
        let op = if name == "const" {
            if self.depth > 0 {
                return Err(name_pos.error(
                    "a region has no constants: capture the constant as an operand of the region op",
                ));
            }
            let (cname, pos) = self.global()?;
            match self.const_index.get(&cname) {
                Some(&k) => Op::Const(ConstId::from_index(k)),
                None => {
                    let names: Vec<&str> = self.consts.iter().map(|c| c.name.as_str()).collect();
                    let hint = closest(&cname, &names)
                        .map(|n| format!("; did you mean `@{n}`?"))
                        .unwrap_or_default();
                    return Err(pos.error(format!("unknown constant `@{cname}`{hint}")));
                }
            }
        } else {
            Op::Size // placeholder until the attributes are read
        };
        let mut operands = Vec::new();
        if matches!(self.peek(), Tok::Value(_)) {
            loop {
                operands.push(self.operand()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        let entries = if self.is_punct('{') && !self.at_regions() {
            self.attr_dict()?
        } else {
            Vec::new()
        };
        let op = if name == "const" {
            if let Some(e) = entries.first() {
                return Err(e.key_pos.error("`const` takes no attributes"));
            }
            op
        } else {
            let mut attrs = Attrs::new(&name, name_pos, entries);
            let Some(op) = build_op(&name, &mut attrs) else {
                let best = OP_NAMES.iter().min_by_key(|n| edit_distance(&name, n));
                let hint = best
                    .map(|b| format!("; did you mean `{b}`?"))
                    .unwrap_or_default();
                return Err(name_pos.error(format!("unknown op `{name}`{hint}")));
            };
            attrs.finish()?;
            op
        };
        // A region op's result count comes from its regions, checked once they are read.
        let has_regions = op.has_regions();
        let expected = if has_regions {
            results.len()
        } else {
            op.num_results()
        };
        if results.len() != expected {
            let pos = results.first().map_or(name_pos, |r| r.1);
            return Err(pos.error(format!(
                "`{name}` produces {expected} result{}, but {} name{} given",
                plural(expected),
                results.len(),
                if results.len() == 1 { " is" } else { "s are" }
            )));
        }
        let mut types = Vec::new();
        if !results.is_empty() || self.is_punct(':') {
            self.expect_punct(':')?;
            let types_pos = self.pos();
            loop {
                types.push(self.type_with_sharding()?);
                if !self.eat_punct(',') {
                    break;
                }
            }
            if types.len() != expected {
                return Err(types_pos.error(format!(
                    "`{name}` produces {expected} result{}, but {} type{} given",
                    plural(expected),
                    types.len(),
                    if types.len() == 1 { " is" } else { "s are" }
                )));
            }
        }
        let mut device = None;
        let mut loc = None;
        loop {
            let slot = if self.is_keyword("device") {
                &mut device
            } else if self.is_keyword("loc") {
                &mut loc
            } else {
                break;
            };
            let (tok, pos) = self.next();
            if slot.is_some() {
                return Err(pos.error(format!("duplicate {}", tok.describe())));
            }
            self.expect_punct('(')?;
            *slot = Some(self.string()?);
            self.expect_punct(')')?;
        }
        let mut grad_of = None;
        if self.is_keyword("grad-of") {
            self.next();
            self.expect_punct('(')?;
            grad_of = Some(self.operand()?);
            self.expect_punct(')')?;
        }
        let mut op = op;
        if has_regions {
            self.regions(&mut op, &name, name_pos)?;
            let n = op.num_results();
            if results.len() != n {
                let pos = results.first().map_or(name_pos, |r| r.1);
                return Err(pos.error(format!(
                    "`{name}` produces {n} result{} (its regions return them), but {} name{} given",
                    plural(n),
                    results.len(),
                    if results.len() == 1 { " is" } else { "s are" }
                )));
            }
        }
        let (tys, shardings): (Vec<_>, Vec<_>) = types.into_iter().unzip();
        let id = self.graph.push_op(op, operands, tys);
        let data = self.graph.op_mut(id);
        data.device = device;
        data.loc = loc;
        data.grad_of = grad_of;
        let result_ids = data.results.clone();
        for (((name, pos), v), sharding) in results.into_iter().zip(result_ids).zip(shardings) {
            self.graph.value_mut(v).sharding = sharding;
            self.define(name, pos, v)?;
        }
        Ok(())
    }

    fn attr_dict(&mut self) -> PResult<Vec<Entry>> {
        self.expect_punct('{')?;
        let mut entries: Vec<Entry> = Vec::new();
        if !self.is_punct('}') {
            loop {
                let (tok, key_pos) = self.next();
                let Tok::Ident(key) = tok else {
                    self.i -= 1;
                    return self.unexpected("an attribute name");
                };
                if entries.iter().any(|e| e.key == key) {
                    return Err(key_pos.error(format!("duplicate attribute `{key}`")));
                }
                self.expect_punct('=')?;
                let pos = self.pos();
                let val = self.attr_value()?;
                entries.push(Entry {
                    key,
                    key_pos,
                    val,
                    pos,
                    used: false,
                });
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        self.expect_punct('}')?;
        Ok(entries)
    }

    fn attr_value(&mut self) -> PResult<Val> {
        self.attr_value_at(0)
    }

    /// An attribute value nested in `depth` lists.
    fn attr_value_at(&mut self, depth: usize) -> PResult<Val> {
        let (tok, pos) = self.next();
        Ok(match tok {
            Tok::Int(s) => Val::Int(
                s.parse()
                    .map_err(|_| pos.error(format!("integer `{s}` is out of range")))?,
            ),
            Tok::Float(s) => Val::Float(parse_f64(&s)),
            Tok::Ident(s) if s == "true" => Val::Bool(true),
            Tok::Ident(s) if s == "false" => Val::Bool(false),
            Tok::Ident(s) => Val::Ident(s),
            Tok::Str(s) => Val::Str(s),
            Tok::Punct('[') => {
                if depth >= MAX_ATTR_DEPTH {
                    return Err(pos.error(format!(
                        "attribute value nested more than {MAX_ATTR_DEPTH} lists deep"
                    )));
                }
                let mut items = Vec::new();
                if !self.is_punct(']') {
                    loop {
                        let pos = self.pos();
                        items.push((self.attr_value_at(depth + 1)?, pos));
                        if !self.eat_punct(',') {
                            break;
                        }
                    }
                }
                self.expect_punct(']')?;
                Val::List(items)
            }
            _ => {
                self.i -= 1;
                return self.unexpected("an attribute value");
            }
        })
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn parse_f64(s: &str) -> f64 {
    if s == "-inf" {
        f64::NEG_INFINITY
    } else {
        s.parse().unwrap_or(f64::NAN)
    }
}

/// Appends the little-endian bytes of one inline constant element.
fn encode_elem(elem: ElemType, tok: &Tok, out: &mut Vec<u8>) -> Result<(), String> {
    fn int<T: TryFrom<i128>>(tok: &Tok, elem: ElemType) -> Result<T, String> {
        let Tok::Int(s) = tok else {
            return Err(format!(
                "expected an integer for {elem}, found {}",
                tok.describe()
            ));
        };
        s.parse::<i128>()
            .ok()
            .and_then(|i| T::try_from(i).ok())
            .ok_or_else(|| format!("value {s} is out of range for {elem}"))
    }
    match elem {
        ElemType::I8 => out.extend(int::<i8>(tok, elem)?.to_le_bytes()),
        ElemType::I16 => out.extend(int::<i16>(tok, elem)?.to_le_bytes()),
        ElemType::I32 => out.extend(int::<i32>(tok, elem)?.to_le_bytes()),
        ElemType::I64 => out.extend(int::<i64>(tok, elem)?.to_le_bytes()),
        ElemType::U8 => out.push(int::<u8>(tok, elem)?),
        ElemType::Bool => match tok {
            Tok::Ident(s) if s == "true" => out.push(1),
            Tok::Ident(s) if s == "false" => out.push(0),
            Tok::Int(_) => out.push(int::<u8>(tok, elem)?),
            _ => {
                return Err(format!(
                    "expected `true` or `false`, found {}",
                    tok.describe()
                ));
            }
        },
        ElemType::F16 | ElemType::BF16 | ElemType::F32 | ElemType::F64 => {
            let bits = float_bits(elem, tok)?;
            let size = elem.size_bytes();
            out.extend(&bits.to_le_bytes()[..size]);
        }
    }
    Ok(())
}

/// The bit pattern of a float element: a number, `nan`, `inf`, `-inf`, or raw bits `0x...`.
fn float_bits(elem: ElemType, tok: &Tok) -> Result<u64, String> {
    let text = match tok {
        Tok::Hex(bits) => {
            let width = elem.size_bytes() * 8;
            return if width == 64 || *bits >> width == 0 {
                Ok(*bits)
            } else {
                Err(format!("bit pattern {bits:#x} is wider than {elem}"))
            };
        }
        Tok::Ident(s) if s == "nan" => return Ok(canonical_nan_bits(elem)),
        Tok::Ident(s) if s == "inf" => "inf",
        Tok::Int(s) | Tok::Float(s) => s.as_str(),
        _ => {
            return Err(format!(
                "expected a number for {elem}, found {}",
                tok.describe()
            ));
        }
    };
    let finite_literal = text != "inf" && text != "-inf";
    let (bits, infinite) = match elem {
        ElemType::F32 => {
            let x: f32 = text.parse().map_err(|_| format!("bad number `{text}`"))?;
            (u64::from(x.to_bits()), x.is_infinite())
        }
        _ => {
            let x: f64 = text.parse().map_err(|_| format!("bad number `{text}`"))?;
            match elem {
                ElemType::F16 => {
                    let h = f16::from_f64(x);
                    (u64::from(h.to_bits()), h.is_infinite())
                }
                ElemType::BF16 => {
                    let h = bf16::from_f64(x);
                    (u64::from(h.to_bits()), h.is_infinite())
                }
                _ => (x.to_bits(), x.is_infinite()),
            }
        }
    };
    if finite_literal && infinite {
        return Err(format!("value {text} is out of range for {elem}"));
    }
    Ok(bits)
}
