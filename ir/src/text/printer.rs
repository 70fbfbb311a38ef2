//! The printer.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

use half::{bf16, f16};

use super::INLINE_LIMIT;
use super::attrs::{dim, op_attrs};
use super::lexer::{name_text, quote};
use crate::graph::{Constant, Entity, Graph, OpId, Sharding, StateInit, ValueDef, ValueId};
use crate::op::Op;
use crate::types::{ElemType, TensorType, format_f32, format_f64};

/// The name the printer shows for every value (indexed by [`ValueId::index`]), without the
/// `%`.
///
/// Named values keep their name; unnamed ones are numbered `0, 1, ...` in definition order
/// (inputs, then op results in body order). Names are made unique by appending `_1`, `_2`,
/// ... to a name already taken by an earlier value. Values outside the body (dead ones) are
/// named last, so every handle gets a name.
pub fn value_names(graph: &Graph) -> Vec<String> {
    let mut order: Vec<ValueId> = graph.inputs().to_vec();
    for &o in graph.ops() {
        order.extend(&graph.op(o).results);
    }
    let mut seen = vec![false; graph.num_values()];
    let mut all = Vec::with_capacity(graph.num_values());
    for v in order
        .into_iter()
        .chain((0..graph.num_values()).map(ValueId::from_index))
    {
        if graph.is_valid_value(v) && !std::mem::replace(&mut seen[v.index()], true) {
            all.push(v);
        }
    }
    let mut names = vec![String::new(); graph.num_values()];
    let mut taken = Unique::default();
    let mut unnamed = 0usize;
    for v in all {
        let base = match &graph.value(v).name {
            Some(n) => n.clone(),
            None => {
                unnamed += 1;
                (unnamed - 1).to_string()
            }
        };
        names[v.index()] = taken.claim(base);
    }
    names
}

/// The name of every graph output, in order, as `run` and the compiled program write them:
/// the output's own name ([`Graph::output_names`]) where it has one, else its value's
/// printed name ([`value_names`]). An unnamed output that would repeat an earlier output's
/// name (the same value returned twice) gets `_1`, `_2`, ... appended, so the names are
/// distinct.
pub fn output_names(graph: &Graph) -> Vec<String> {
    output_names_with(graph, &value_names(graph))
}

/// [`output_names`] given the printed value names (the printer has them already).
fn output_names_with(graph: &Graph, printed: &[String]) -> Vec<String> {
    let outputs: Vec<(String, Option<String>)> = graph
        .outputs()
        .iter()
        .zip(graph.output_names().iter().chain(std::iter::repeat(&None)))
        .map(|(&v, name)| {
            let value = printed.get(v.index()).cloned();
            (value.unwrap_or_else(|| v.to_string()), name.clone())
        })
        .collect();
    resolve_output_names(outputs)
}

/// Each output's name from its value's name and its own name, if given (see
/// [`output_names`]); shared with the parser, which resolves `return` the same way.
pub(crate) fn resolve_output_names(outputs: Vec<(String, Option<String>)>) -> Vec<String> {
    let mut taken = Unique::default();
    for n in outputs.iter().filter_map(|(_, n)| n.as_ref()) {
        taken.taken.insert(n.clone());
    }
    outputs
        .into_iter()
        .map(|(value, name)| name.unwrap_or_else(|| taken.claim(value)))
        .collect()
}

/// The names the printer shows for the constants (indexed by [`ConstId::index`](crate::ConstId::index)), without
/// the `@`, made unique the same way as [`value_names`].
pub fn const_names(graph: &Graph) -> Vec<String> {
    let mut taken = Unique::default();
    graph
        .consts()
        .map(|(_, c)| taken.claim(c.name.clone()))
        .collect()
}

/// Names made unique by appending `_1`, `_2`, ...: the first free suffix for each base.
/// Each base remembers where its probe stopped, so claiming `n` equal names is linear, not
/// quadratic, and gives the same names as probing from `_1` every time (a suffix below the
/// remembered one is taken already).
#[derive(Default)]
struct Unique {
    taken: BTreeSet<String>,
    next: BTreeMap<String, usize>,
}

impl Unique {
    fn claim(&mut self, base: String) -> String {
        if self.taken.insert(base.clone()) {
            return base;
        }
        let k = self.next.entry(base.clone()).or_insert(0);
        loop {
            *k += 1;
            let name = format!("{base}_{k}");
            if self.taken.insert(name.clone()) {
                return name;
            }
        }
    }
}

/// Whether a constant is printed inline (else it is `external`, stored in the sidecar).
pub(crate) fn is_inline(c: &Constant) -> bool {
    c.ty.num_elements()
        .is_some_and(|n| n <= INLINE_LIMIT as u64)
        && c.ty.size_bytes() == Some(c.data.len() as u64)
}

/// Where an annotation goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Line {
    Const(usize),
    Header,
    Op(OpId),
}

pub(crate) fn print_impl(graph: &Graph, notes: &[(Entity, String)]) -> String {
    print_with(graph, notes, None)
}

/// [`print_impl`]; with `external`, a constant prints `= external` exactly when `external`
/// says so (or its data does not match its type), else its data inline, whatever its size.
pub(crate) fn print_with(
    graph: &Graph,
    notes: &[(Entity, String)],
    external: Option<&dyn Fn(&Constant) -> bool>,
) -> String {
    let live: BTreeSet<OpId> = graph.ops().iter().copied().collect();
    let mut by_line: BTreeMap<Line, Vec<&str>> = BTreeMap::new();
    for (entity, msg) in notes {
        let line = match *entity {
            Entity::Graph => Line::Header,
            Entity::Const(c) if c.index() < graph.num_consts() => Line::Const(c.index()),
            Entity::Op(o) if live.contains(&o) => Line::Op(o),
            Entity::Value(v) if graph.is_valid_value(v) => match graph.value(v).def {
                ValueDef::Result(o, _) if live.contains(&o) => Line::Op(o),
                _ => Line::Header,
            },
            _ => Line::Header,
        };
        by_line.entry(line).or_default().push(msg);
    }
    let note = |out: &mut String, line: Line, indent: &str| {
        for msg in by_line.get(&line).into_iter().flatten() {
            for (i, part) in msg.lines().enumerate() {
                let lead = if i == 0 { "// error: " } else { "//   " };
                let _ = writeln!(out, "{indent}{lead}{part}");
            }
        }
    };

    let consts = const_names(graph);
    let mut out = String::new();
    for (id, c) in graph.consts() {
        let _ = write!(
            out,
            "const @{} : {} = ",
            name_text(&consts[id.index()]),
            ty(&c.ty)
        );
        let inline = match external {
            None => is_inline(c),
            Some(f) => c.ty.size_bytes() == Some(c.data.len() as u64) && !f(c),
        };
        if inline {
            out.push_str(&inline_data(c));
        } else {
            out.push_str("external");
        }
        out.push('\n');
        note(&mut out, Line::Const(id.index()), "");
    }
    for m in &graph.meshes {
        let shape: Vec<String> = m.shape.iter().map(u32::to_string).collect();
        let devices: Vec<String> = m.devices.iter().map(|d| quote(d)).collect();
        let _ = writeln!(
            out,
            "mesh @{} = [{}] devices({})",
            name_text(&m.name),
            shape.join(", "),
            devices.join(", ")
        );
    }
    if graph.num_consts() > 0 || !graph.meshes.is_empty() {
        out.push('\n');
    }

    print_graph(&mut out, graph, "", &|out, line, indent| {
        note(out, line, indent)
    });
    out
}

/// Prints `graph @name(...) { ... }` at `indent`, ops one level deeper; regions of region
/// ops follow their op's line as nested graphs (see the module doc of `text`).
fn print_graph(
    out: &mut String,
    graph: &Graph,
    indent: &str,
    note: &dyn Fn(&mut String, Line, &str),
) {
    let p = Printer {
        graph,
        names: value_names(graph),
        consts: const_names(graph),
        position: if graph.ops().iter().any(|&o| graph.op(o).grad_of.is_some()) {
            graph
                .ops()
                .iter()
                .enumerate()
                .map(|(i, &o)| (o, i))
                .collect()
        } else {
            Default::default()
        },
    };
    let inputs: Vec<String> = graph
        .inputs()
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let mut s = format!("{}: {}", p.value(v), p.value_ty(v));
            if let Some(slot) = graph.state.iter().find(|s| s.input == i) {
                let init = match slot.init {
                    StateInit::Zeros => "zeros".to_string(),
                    StateInit::Const(c) => match p.consts.get(c.index()) {
                        Some(n) => format!("@{}", name_text(n)),
                        None => format!("@{}", quote(&format!("<invalid {c}>"))),
                    },
                };
                let _ = write!(s, " state(init = {init}, next = {}", quote(&slot.next));
                if let Some(m) = &slot.mesh {
                    let _ = write!(s, ", mesh = @{}", name_text(m));
                }
                s.push(')');
            }
            s
        })
        .collect();
    let _ = writeln!(
        out,
        "{indent}graph @{}({}) {{",
        name_text(&graph.name),
        inputs.join(", ")
    );
    note(out, Line::Header, indent);
    let inner = format!("{indent}  ");
    for &o in graph.ops() {
        out.push_str(&inner);
        p.op_line(out, o);
        let regions = graph.op(o).op.regions();
        if regions.is_empty() {
            out.push('\n');
            note(out, Line::Op(o), &inner);
            continue;
        }
        // A region op's notes follow its line, before its regions.
        out.push_str(" {\n");
        note(out, Line::Op(o), &inner);
        let nested = format!("{inner}  ");
        for r in regions {
            // Notes belong to the top-level graph; regions print without them.
            print_graph(out, r, &nested, &|_, _, _| {});
        }
        out.push_str(&inner);
        out.push_str("}\n");
    }
    out.push_str(&inner);
    out.push_str("return");
    let out_names = output_names_with(graph, &p.names);
    let outputs: Vec<String> = graph
        .outputs()
        .iter()
        .zip(&out_names)
        .map(|(&v, name)| {
            let value = p.value(v);
            if p.names.get(v.index()) == Some(name) {
                value
            } else {
                format!("{value} as {}", quote(name))
            }
        })
        .collect();
    if !outputs.is_empty() {
        out.push(' ');
        out.push_str(&outputs.join(", "));
    }
    out.push('\n');
    out.push_str(indent);
    out.push_str("}\n");
}

struct Printer<'g> {
    graph: &'g Graph,
    names: Vec<String>,
    consts: Vec<String>,
    /// Body position of each op, filled only when some op has a `grad-of` link.
    position: std::collections::HashMap<OpId, usize>,
}

impl Printer<'_> {
    fn value(&self, v: ValueId) -> String {
        match self.names.get(v.index()) {
            Some(n) => format!("%{}", name_text(n)),
            None => format!("%{}", quote(&format!("<invalid {v}>"))),
        }
    }

    fn value_ty(&self, v: ValueId) -> String {
        if !self.graph.is_valid_value(v) {
            return "<invalid>".to_string();
        }
        let data = self.graph.value(v);
        let mut s = ty(&data.ty);
        if let Some(sh) = &data.sharding {
            s.push_str(&sharding(sh));
        }
        s
    }

    fn op_line(&self, out: &mut String, o: OpId) {
        let data = self.graph.op(o);
        if !data.results.is_empty() {
            let results: Vec<String> = data.results.iter().map(|&v| self.value(v)).collect();
            out.push_str(&results.join(", "));
            out.push_str(" = ");
        }
        out.push_str(data.op.name());
        if let Op::Const(c) = data.op {
            let name = match self.consts.get(c.index()) {
                Some(n) => name_text(n),
                None => quote(&format!("<invalid {c}>")),
            };
            let _ = write!(out, " @{name}");
        }
        let operands: Vec<String> = data.operands.iter().map(|&v| self.value(v)).collect();
        if !operands.is_empty() {
            out.push(' ');
            out.push_str(&operands.join(", "));
        }
        let attrs = op_attrs(&data.op);
        if !attrs.is_empty() {
            let attrs: Vec<String> = attrs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
            let _ = write!(out, " {{{}}}", attrs.join(", "));
        }
        if !data.results.is_empty() {
            let types: Vec<String> = data.results.iter().map(|&v| self.value_ty(v)).collect();
            let _ = write!(out, " : {}", types.join(", "));
        }
        if let Some(d) = &data.device {
            let _ = write!(out, " device({})", quote(d));
        }
        if let Some(l) = &data.loc {
            let _ = write!(out, " loc({})", quote(l));
        }
        if let Some(f) = data.grad_of
            && self.defined_before(f, o)
        {
            let _ = write!(out, " grad-of({})", self.value(f));
        }
    }

    /// Whether `v` is a result of a body op that comes before `o` (a `grad-of` link prints
    /// only then, so the printed text always parses).
    fn defined_before(&self, v: ValueId, o: OpId) -> bool {
        if !self.graph.is_valid_value(v) {
            return false;
        }
        let ValueDef::Result(def, _) = self.graph.value(v).def else {
            return false;
        };
        match (self.position.get(&def), self.position.get(&o)) {
            (Some(a), Some(b)) => a < b,
            _ => false,
        }
    }
}

/// A type as printed: `f32[N, 3]`; symbols that are not plain identifiers are quoted.
pub(crate) fn ty(t: &TensorType) -> String {
    let dims: Vec<String> = t.shape.iter().map(dim).collect();
    format!("{}[{}]", t.elem.name(), dims.join(", "))
}

fn sharding(s: &Sharding) -> String {
    let axes: Vec<String> = s
        .axes
        .iter()
        .map(|a| {
            let items: Vec<String> = a.iter().map(u32::to_string).collect();
            format!("[{}]", items.join(", "))
        })
        .collect();
    format!(" sharded[{}]", axes.join(", "))
}

/// Inline constant data, `[1.0, 2.0]`. The data length must match the type.
fn inline_data(c: &Constant) -> String {
    let size = c.ty.elem.size_bytes();
    let items: Vec<String> = c
        .data
        .chunks_exact(size)
        .map(|b| elem_text(c.ty.elem, b))
        .collect();
    format!("[{}]", items.join(", "))
}

/// The canonical quiet-NaN bit patterns, printed as `nan`; other NaNs print their bits.
const F16_NAN: u16 = 0x7e00;
const BF16_NAN: u16 = 0x7fc0;
const F32_NAN: u32 = 0x7fc0_0000;
const F64_NAN: u64 = 0x7ff8_0000_0000_0000;

pub(crate) fn canonical_nan_bits(elem: ElemType) -> u64 {
    match elem {
        ElemType::F16 => F16_NAN.into(),
        ElemType::BF16 => BF16_NAN.into(),
        ElemType::F32 => F32_NAN.into(),
        _ => F64_NAN,
    }
}

fn elem_text(elem: ElemType, b: &[u8]) -> String {
    let two = || [b[0], b[1]];
    let four = || [b[0], b[1], b[2], b[3]];
    let eight = || [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
    let float = |x: f64, bits: u64, digits: usize, text: &dyn Fn() -> String| {
        if x.is_nan() && bits != canonical_nan_bits(elem) {
            format!("0x{bits:0digits$x}")
        } else {
            text()
        }
    };
    match elem {
        ElemType::F16 => {
            let x = f16::from_le_bytes(two());
            float(x.to_f64(), x.to_bits().into(), 4, &|| {
                format_f32(x.to_f32())
            })
        }
        ElemType::BF16 => {
            let x = bf16::from_le_bytes(two());
            float(x.to_f64(), x.to_bits().into(), 4, &|| {
                format_f32(x.to_f32())
            })
        }
        ElemType::F32 => {
            let x = f32::from_le_bytes(four());
            float(x.into(), x.to_bits().into(), 8, &|| format_f32(x))
        }
        ElemType::F64 => {
            let x = f64::from_le_bytes(eight());
            float(x, x.to_bits(), 16, &|| format_f64(x))
        }
        ElemType::I8 => i8::from_le_bytes([b[0]]).to_string(),
        ElemType::I16 => i16::from_le_bytes(two()).to_string(),
        ElemType::I32 => i32::from_le_bytes(four()).to_string(),
        ElemType::I64 => i64::from_le_bytes(eight()).to_string(),
        ElemType::U8 => b[0].to_string(),
        ElemType::Bool => match b[0] {
            0 => "false".to_string(),
            1 => "true".to_string(),
            n => n.to_string(),
        },
    }
}
