//! The model's own structure, recovered from names, for the report's op list.
//!
//! Exporters name things after the model's modules, but not always the ops: the TorchScript
//! exporter names a node `/transformer/h.0/attn/MatMul`, the dynamo exporter `node_matmul_3`,
//! while both name the weights `transformer.h.0.attn.c_attn.weight`. An op's *scope* (a path
//! of module names) is therefore, first found of:
//! 1. its model name (`loc`) without the last part, when that name is a `/` path;
//! 2. the module of the first weight it uses whose name is a dotted path (the name without its
//!    last part: `transformer.h.0.attn.c_attn`), with a number kept on the part before it
//!    (`h.0`, not `h` then `0`);
//! 3. the scope of the producer of its first operand whose producer has one (activation ops
//!    follow their layer);
//! 4. none (the top level).
//!
//! `transfer` ops are grouped under [`TRANSFERS`]. The tree keeps first-seen order, which is
//! the body's order, so layers read in model order.

use std::collections::BTreeMap;

use tessera_ir::{Graph, Op, OpId, ValueDef};

/// The deepest scope: a longer path keeps its first parts and joins the rest into its last
/// one (`a/b/.../p/q/r` as `... , "p/q/r"`), so the tree's depth (and the page's nesting)
/// does not grow with a name.
pub const MAX_DEPTH: usize = 16;

/// The group of the `transfer` ops placement inserted.
pub const TRANSFERS: &str = "(transfers between devices)";

/// A module of the model: the ops whose scope it is, and its submodules.
#[derive(Debug, Default, PartialEq)]
pub struct Scope {
    /// Its own name (one path part).
    pub name: String,
    /// Submodules, in first-seen order.
    pub children: Vec<Scope>,
    /// Ops directly in it, in body order.
    pub ops: Vec<OpId>,
    /// Each child's position in `children`, by name (a module of many submodules is built
    /// in linear time).
    index: BTreeMap<String, usize>,
}

impl Scope {
    /// A scope of no ops yet.
    pub fn new(name: impl Into<String>) -> Scope {
        Scope {
            name: name.into(),
            ..Scope::default()
        }
    }

    /// Ops in it and all its submodules: its own, then each submodule's, in order.
    pub fn all_ops(&self) -> Vec<OpId> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(s) = stack.pop() {
            out.extend_from_slice(&s.ops);
            stack.extend(s.children.iter().rev());
        }
        out
    }

    fn insert(&mut self, path: &[String], op: OpId) {
        let mut s = self;
        for part in path {
            let i = match s.index.get(part) {
                Some(&i) => i,
                None => {
                    s.children.push(Scope::new(part.clone()));
                    s.index.insert(part.clone(), s.children.len() - 1);
                    s.children.len() - 1
                }
            };
            s = &mut s.children[i];
        }
        s.ops.push(op);
    }
}

/// `parts` at most [`MAX_DEPTH`] long: the parts past it joined into the last with `/`.
fn capped(mut parts: Vec<String>) -> Vec<String> {
    if parts.len() > MAX_DEPTH {
        let rest = parts.split_off(MAX_DEPTH - 1).join("/");
        parts.push(rest);
    }
    parts
}

/// Splits a dotted module path, keeping numbers on the part before them: `h.0.attn` is
/// `["h.0", "attn"]`.
fn dotted(path: &str) -> Vec<String> {
    let mut parts: Vec<String> = Vec::new();
    for p in path.split('.').filter(|p| !p.is_empty()) {
        match parts.last_mut() {
            Some(last) if p.bytes().all(|b| b.is_ascii_digit()) => {
                last.push('.');
                last.push_str(p);
            }
            _ => parts.push(p.to_string()),
        }
    }
    parts
}

/// The scope an op's own name gives (rule 1).
fn from_loc(loc: &str) -> Option<Vec<String>> {
    if !loc.contains('/') {
        return None;
    }
    let parts: Vec<String> = loc
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    (parts.len() > 1).then(|| capped(parts[..parts.len() - 1].to_vec()))
}

/// The module of a dotted weight name (rule 2).
fn from_weight(name: &str) -> Option<Vec<String>> {
    let (module, _) = name.rsplit_once('.')?;
    let parts = capped(dotted(module));
    (!parts.is_empty()).then_some(parts)
}

/// The scope tree of `graph`'s ops (`const` ops excluded).
pub fn tree(graph: &Graph) -> Scope {
    let mut root = Scope::default();
    let mut scope_of: Vec<Option<Vec<String>>> = vec![None; graph.num_op_handles()];
    for &op in graph.ops() {
        let data = graph.op(op);
        if matches!(data.op, Op::Const(_)) {
            continue;
        }
        if matches!(data.op, Op::Transfer { .. }) {
            root.insert(&[TRANSFERS.to_string()], op);
            continue;
        }
        let producer = |v| match graph.value(v).def {
            ValueDef::Result(p, _) => Some(p),
            ValueDef::Input(_) => None,
        };
        let weight = || {
            data.operands.iter().find_map(|&v| {
                let p = producer(v)?;
                let Op::Const(c) = graph.op(p).op else {
                    return None;
                };
                from_weight(&graph.constant(c).name)
            })
        };
        let inherited = || {
            data.operands.iter().find_map(|&v| {
                let mut p = producer(v)?;
                // Through transfers, to the op that made the value.
                while let Op::Transfer { .. } = graph.op(p).op {
                    p = producer(*graph.op(p).operands.first()?)?;
                }
                scope_of[p.index()].clone()
            })
        };
        let scope = data
            .loc
            .as_deref()
            .and_then(from_loc)
            .or_else(weight)
            .or_else(inherited);
        root.insert(scope.as_deref().unwrap_or(&[]), op);
        scope_of[op.index()] = scope;
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotted_keeps_numbers_with_their_module() {
        assert_eq!(
            dotted("transformer.h.0.attn"),
            ["transformer", "h.0", "attn"]
        );
        assert_eq!(
            from_weight("layer1.0.conv1.weight").expect("module"),
            ["layer1.0", "conv1"]
        );
        assert_eq!(from_weight("weight"), None);
        assert_eq!(
            from_loc("/transformer/h.0/attn/MatMul").expect("path"),
            ["transformer", "h.0", "attn"]
        );
        assert_eq!(from_loc("node_matmul_3"), None);
    }

    #[test]
    fn deep_names_and_wide_modules_stay_bounded() {
        // A name of 100,000 parts is a path of MAX_DEPTH scopes; 100,000 submodules of one
        // module are found by name, not by a scan of the ones before.
        let deep = format!("{}Op", "m/".repeat(100_000));
        let path = from_loc(&deep).expect("path");
        assert_eq!(path.len(), MAX_DEPTH);
        assert_eq!(
            path[MAX_DEPTH - 1].matches('/').count(),
            100_000 - MAX_DEPTH
        );
        let mut root = Scope::default();
        for i in 0..100_000u32 {
            root.insert(
                &[format!("layer{i}"), "fc".into()],
                OpId::from_index(i as usize),
            );
        }
        root.insert(&["layer7".into()], OpId::from_index(100_000));
        assert_eq!(root.children.len(), 100_000);
        assert_eq!(root.children[7].ops, [OpId::from_index(100_000)]);
        let all = root.all_ops();
        assert_eq!(all.len(), 100_001);
        // Pre-order: layer7's own op before its fc's.
        assert_eq!(&all[7..9], [OpId::from_index(100_000), OpId::from_index(7)]);
    }

    #[test]
    fn ops_follow_names_then_weights_then_producers() {
        let g = tessera_ir::text::parse(
            r#"const @enc.layers.0.fc.weight : f32[2, 2] = [1.0, 2.0, 3.0, 4.0]
graph @g(%x: f32[2, 2]) {
  %w = const @enc.layers.0.fc.weight : f32[2, 2]
  %0 = matmul %x, %w : f32[2, 2] loc("node_matmul")
  %1 = relu %0 : f32[2, 2] loc("node_relu")
  %2 = neg %x : f32[2, 2] loc("/head/Neg")
  %3 = add %1, %2 : f32[2, 2]
  return %3
}"#,
            None,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let t = tree(&g);
        let names: Vec<&str> = t.children.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["enc", "head"]);
        let fc = &t.children[0].children[0].children[0];
        assert_eq!(fc.name, "fc");
        assert_eq!(t.children[0].children[0].name, "layers.0");
        // matmul by its weight, relu and add after their first operand's producer.
        assert_eq!(fc.ops.len(), 3);
        assert_eq!(t.children[1].ops.len(), 1);
        assert!(t.ops.is_empty());
    }
}
