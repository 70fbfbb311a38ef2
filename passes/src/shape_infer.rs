//! `shape-infer`: binds symbolic dimensions to numbers and recomputes every type.
//!
//! Bindings come from `shapes` (graph input shapes, `x=1x3x224x224;mask=1x16`: each
//! symbol in the input's declared shape takes the given extent) and from `dims` (symbols
//! directly, `N=1;seq=16`). Every occurrence of a bound symbol is replaced, in value types
//! and in attributes (reshape, expand and fill shapes, range sizes); then every op's result
//! types are inferred again, so extents computed from symbols become static.

use std::collections::BTreeMap;

use tessera_ir::infer::infer;
use tessera_ir::{Dim, Graph, Op, TensorType, ValueId};

use crate::pass::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};

/// Registry record.
pub const INFO: PassInfo = PassInfo {
    name: "shape-infer",
    summary: "Bind symbolic dimensions to numbers and make types static",
    options: &[
        OptionInfo {
            name: "shapes",
            kind: OptionKind::Str,
            default: "",
            doc: "graph input shapes, `NAME=1x3x224x224` separated by `;`",
        },
        OptionInfo {
            name: "dims",
            kind: OptionKind::Str,
            default: "",
            doc: "symbol values, `SYMBOL=N` separated by `;`",
        },
    ],
    create: |o: &Options| {
        Ok(Box::new(ShapeInfer {
            shapes: parse_list(o.string("shapes"), "shapes", parse_extents)?,
            dims: parse_list(o.string("dims"), "dims", |s| {
                s.parse::<u64>()
                    .map_err(|_| format!("`{s}` is not a non-negative integer"))
            })?,
        }))
    },
};

struct ShapeInfer {
    shapes: Vec<(String, Vec<u64>)>,
    dims: Vec<(String, u64)>,
}

fn parse_extents(s: &str) -> Result<Vec<u64>, String> {
    if s.is_empty() {
        return Ok(Vec::new()); // a scalar
    }
    s.split('x')
        .map(|d| {
            d.parse::<u64>()
                .map_err(|_| format!("`{s}` is not a shape like 1x3x224x224"))
        })
        .collect()
}

fn parse_list<T>(
    text: &str,
    option: &str,
    value: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<(String, T)>, PassError> {
    let mut out = Vec::new();
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| PassError::new(format!("{option}: `{item}` is not NAME=VALUE")))?;
        let v = value(v.trim()).map_err(|m| PassError::new(format!("{option}: {m}")))?;
        out.push((k.trim().to_string(), v));
    }
    Ok(out)
}

impl Pass for ShapeInfer {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        bind_shapes(graph, &self.shapes, &self.dims, stats).map_err(|m| {
            PassError::new(if m.starts_with("symbol") {
                m
            } else {
                format!("shapes: {m}")
            })
        })
    }
}

/// Binds symbols from graph input shapes (`shapes`: input name and extents) and directly
/// (`dims`), substitutes them everywhere and infers every type again. Returns whether the
/// graph changed. Errors name the input (`x: gives 3 extents, ...`) or the symbol, without a
/// prefix, so that callers can say where the binding came from.
pub fn bind_shapes(
    graph: &mut Graph,
    shapes: &[(String, Vec<u64>)],
    dims: &[(String, u64)],
    stats: &mut Statistics,
) -> Result<bool, String> {
    let mut bind: BTreeMap<String, u64> = BTreeMap::new();
    let mut set = |sym: &str, n: u64, from: &str| -> Result<(), String> {
        match bind.insert(sym.to_string(), n) {
            Some(old) if old != n => Err(format!(
                "symbol {sym} is bound to {old} and to {n} ({from})"
            )),
            _ => Ok(()),
        }
    };
    for (sym, n) in dims {
        set(sym, *n, "dims")?;
    }
    for (name, extents) in shapes {
        let Some(&v) = graph
            .inputs()
            .iter()
            .find(|&&v| graph.value(v).name.as_deref() == Some(name))
        else {
            let names: Vec<String> = graph
                .inputs()
                .iter()
                .map(|&v| graph.value(v).name.clone().unwrap_or_else(|| v.to_string()))
                .collect();
            return Err(format!(
                "{name}: not a graph input (inputs: {})",
                names.join(", ")
            ));
        };
        let ty = graph.ty(v).clone();
        if ty.rank() != extents.len() {
            return Err(format!(
                "{name}: gives {} extents, the input has rank {} ({ty})",
                extents.len(),
                ty.rank()
            ));
        }
        for (d, &n) in ty.shape.iter().zip(extents) {
            match d {
                Dim::Static(s) if *s != n => {
                    return Err(format!(
                        "{name}: extent {n} conflicts with the declared {ty}"
                    ));
                }
                Dim::Static(_) => {}
                Dim::Sym(s) => set(s, n, &format!("input {name}"))?,
            }
        }
    }
    if bind.is_empty() {
        return Ok(false);
    }
    stats.add("symbols-bound", "symbols given a value", bind.len() as u64);

    let subst = |shape: &mut Vec<Dim>| {
        for d in shape.iter_mut() {
            if let Dim::Sym(s) = d
                && let Some(&n) = bind.get(s.as_str())
            {
                *d = Dim::Static(n);
            }
        }
    };
    let mut changed = false;
    for &v in graph.inputs().to_vec().iter() {
        let mut ty = graph.ty(v).clone();
        subst(&mut ty.shape);
        changed |= set_type(graph, v, ty, stats);
    }
    for o in graph.ops().to_vec() {
        let mut op = graph.op(o).op.clone();
        match &mut op {
            Op::Reshape { shape } | Op::Expand { shape } | Op::Fill { shape, .. } => subst(shape),
            Op::Range { size } => {
                let mut s = vec![size.clone()];
                subst(&mut s);
                *size = s.remove(0);
            }
            _ => {}
        }
        if op != graph.op(o).op {
            graph.op_mut(o).op = op;
            changed = true;
        }
        let data = graph.op(o);
        let operand_types: Vec<&TensorType> = data.operands.iter().map(|&v| graph.ty(v)).collect();
        let types = infer(graph, &data.op, &operand_types).map_err(|e| {
            let what = data
                .results
                .first()
                .and_then(|&r| graph.value(r).name.clone())
                .unwrap_or_else(|| o.to_string());
            format!("`{}` defining %{what}: {}", data.op.name(), e.message)
        })?;
        for (r, ty) in data.results.clone().into_iter().zip(types) {
            changed |= set_type(graph, r, ty, stats);
        }
    }
    Ok(changed)
}

fn set_type(graph: &mut Graph, v: ValueId, ty: TensorType, stats: &mut Statistics) -> bool {
    if *graph.ty(v) == ty {
        return false;
    }
    graph.value_mut(v).ty = ty;
    stats.add("types-changed", "value types made more static", 1);
    true
}
