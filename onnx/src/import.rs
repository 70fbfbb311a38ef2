//! The import driver: model checks, graph inputs and initializers, the node walk, folding of
//! known values, and graph outputs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tessera_ir::infer::infer;
use tessera_ir::{Constant, Dim, Graph, Op, Tensor, TensorType, ValueId};

use crate::decode::{self, ExternalFiles};
use crate::ops::{self, Node};
use crate::proto::{GraphProto, ModelProto, TensorProto, tensor_shape_proto, type_proto};
use crate::{IR_VERSION_RANGE, ImportError, ImportOptions, MAX_RANK, OPSET_RANGE, Unsupported};

/// Results with at most this many elements are folded when every operand is known.
pub(crate) const FOLD_LIMIT: u64 = 1 << 16;

/// The most ops [`Ctx::evaluate_specialized`] evaluates for one value.
const MAX_SPECIALIZED_OPS: usize = 256;

/// Imports an ONNX model file; external data files are resolved next to it.
pub fn import_file(path: &Path, options: &ImportOptions) -> Result<Graph, ImportError> {
    let data = decode::map_file(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().map(|p| {
        if p.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            p.to_path_buf()
        }
    });
    import_with(data, base, path, options)
}

/// Imports a model held in memory; `origin` names it in errors. External data is resolved
/// relative to `base_dir` when given.
pub fn import_bytes(
    data: Bytes,
    base_dir: Option<&Path>,
    origin: &Path,
    options: &ImportOptions,
) -> Result<Graph, ImportError> {
    import_with(data, base_dir.map(Path::to_path_buf), origin, options)
}

/// The names of the main graph's initializers, in file order.
pub fn initializer_names(path: &Path) -> Result<Vec<String>, ImportError> {
    let data = decode::map_file(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let model = decode::decode_model(data).map_err(|message| ImportError::Malformed {
        path: path.to_path_buf(),
        message,
    })?;
    Ok(model
        .graph
        .as_ref()
        .map(|g| g.initializer.iter().map(|t| t.name().to_string()).collect())
        .unwrap_or_default())
}

/// The declared inputs of a model's main graph, in order, with their types (initializers
/// listed as inputs excluded), and the name its imported graph gets; without importing it.
///
/// A caller binds its input data to these before choosing [`ImportOptions::input_shapes`]
/// (as `tessera run` does). Unknown extents are symbols, as in the imported graph.
pub fn model_inputs(path: &Path) -> Result<(String, Vec<(String, TensorType)>), ImportError> {
    let data = decode::map_file(path).map_err(|source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let malformed = |message: String| ImportError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let model = decode::decode_model(data).map_err(malformed)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| malformed("the model has no graph".into()))?;
    let inits: BTreeSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let mut symbols = declared_symbols(graph);
    let mut inputs = Vec::new();
    for vi in &graph.input {
        if inits.contains(vi.name()) {
            continue;
        }
        let ty = value_info_type(vi, &mut symbols).map_err(|m| ImportError::Graph {
            path: path.to_path_buf(),
            message: format!("input `{}`: {m}", vi.name()),
        })?;
        inputs.push((vi.name().to_string(), ty));
    }
    let name = if graph.name().is_empty() {
        "main".to_string()
    } else {
        graph.name().to_string()
    };
    Ok((name, inputs))
}

fn import_with(
    data: Bytes,
    base: Option<PathBuf>,
    path: &Path,
    options: &ImportOptions,
) -> Result<Graph, ImportError> {
    let malformed = |message: String| ImportError::Malformed {
        path: path.to_path_buf(),
        message,
    };
    let model = decode::decode_model(data).map_err(malformed)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| malformed("the model has no graph".into()))?;
    let opset = default_opset(&model).map_err(malformed)?;
    check_supported(&model, graph, opset).map_err(|items| ImportError::Unsupported {
        path: path.to_path_buf(),
        items,
    })?;

    let mut cx = Ctx::new(
        graph.name().to_string(),
        opset,
        ExternalFiles::new(base),
        path,
    );
    cx.fold_limit_bytes = options.fold_limit_bytes;
    cx.training = options.keep_parameters;
    if options.keep_parameters {
        cx.used = used_names(graph);
        cx.params = graph
            .initializer
            .iter()
            .filter(|t| matches!(t.data_type(), 1 | 10 | 11 | 16))
            .map(|t| t.name().to_string())
            .collect();
    }
    cx.import_main(graph, options)?;
    // Initializers read only at import time (shapes, axes) and values folded away leave
    // dead `const` ops behind.
    tessera_passes::dce(&mut cx.g, &mut tessera_passes::Statistics::default());
    Ok(cx.g)
}

/// The default domain's opset version (ONNX's rule: missing means version 1, which is below
/// what we accept).
fn default_opset(model: &ModelProto) -> Result<i64, String> {
    let found = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain(), "" | "ai.onnx"))
        .map(|o| o.version());
    match found {
        Some(v) => Ok(v),
        None if model.opset_import.is_empty() => Err("the model imports no opset".into()),
        None => Ok(OPSET_RANGE.end().to_owned()),
    }
}

/// Every value name some node reads or some graph returns, in the graph and its subgraphs.
fn used_names(graph: &GraphProto) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut stack = vec![graph];
    while let Some(g) = stack.pop() {
        used.extend(g.output.iter().map(|o| o.name().to_string()));
        for n in &g.node {
            used.extend(n.input.iter().filter(|i| !i.is_empty()).cloned());
            for a in &n.attribute {
                stack.extend(a.g.iter());
                stack.extend(a.graphs.iter());
            }
        }
    }
    used
}

/// Collects every unsupported operator, opset and element type, for one error message.
fn check_supported(
    model: &ModelProto,
    graph: &GraphProto,
    opset: i64,
) -> Result<(), Vec<Unsupported>> {
    let mut found: BTreeMap<(String, String), (i64, usize, String)> = BTreeMap::new();
    let mut note = |domain: &str, what: String, opset: i64, first: &str| {
        let e = found
            .entry((domain.to_string(), what))
            .or_insert((opset, 0, first.to_string()));
        e.1 += 1;
    };
    if !IR_VERSION_RANGE.contains(&model.ir_version()) {
        let (lo, hi) = (IR_VERSION_RANGE.start(), IR_VERSION_RANGE.end());
        note(
            "ai.onnx",
            format!(
                "IR version {} (supported: {lo} to {hi})",
                model.ir_version()
            ),
            opset,
            "model",
        );
    }
    if !OPSET_RANGE.contains(&opset) {
        note(
            "ai.onnx",
            format!(
                "opset {opset} (supported: {} to {})",
                OPSET_RANGE.start(),
                OPSET_RANGE.end()
            ),
            opset,
            "model",
        );
    }
    let domain_opset = |d: &str| {
        model
            .opset_import
            .iter()
            .find(|o| o.domain() == d)
            .map_or(0, |o| o.version())
    };
    fn walk(g: &GraphProto, visit: &mut dyn FnMut(&crate::proto::NodeProto)) {
        for n in &g.node {
            visit(n);
            for a in &n.attribute {
                if let Some(sub) = &a.g {
                    walk(sub, visit);
                }
                for sub in &a.graphs {
                    walk(sub, visit);
                }
            }
        }
    }
    walk(graph, &mut |n| {
        let domain = if n.domain().is_empty() {
            "ai.onnx"
        } else {
            n.domain()
        };
        let name = ops::node_display_name(n);
        if domain != "ai.onnx" && !ops::is_supported_in(domain, n.op_type()) {
            note(
                domain,
                n.op_type().to_string(),
                domain_opset(n.domain()),
                &name,
            );
        } else if domain == "ai.onnx" && !ops::is_supported(n.op_type(), opset) {
            note(domain, n.op_type().to_string(), opset, &name);
        }
    });
    let mut check_elem = |code: i32, first: &str| {
        if decode::elem_type(code).is_err() {
            note(
                "ai.onnx",
                format!("element type {}", decode::elem_type_name(code)),
                opset,
                first,
            );
        }
    };
    for t in &graph.initializer {
        check_elem(t.data_type(), t.name());
    }
    for v in graph.input.iter().chain(&graph.output) {
        if let Some(type_proto::Value::TensorType(t)) =
            v.r#type.as_ref().and_then(|t| t.value.as_ref())
        {
            check_elem(t.elem_type(), v.name());
        }
    }
    if found.is_empty() {
        return Ok(());
    }
    Err(found
        .into_iter()
        .map(|((domain, what), (opset, count, first))| Unsupported {
            domain,
            what,
            opset,
            count,
            first,
        })
        .collect())
}

/// What an ONNX value name stands for.
#[derive(Clone)]
enum Slot {
    /// An IR value.
    Value(ValueId),
    /// An initializer not used yet; becomes a `const` op at its first use.
    Init(TensorType, Bytes),
}

/// Import state: the graph under construction and the mapping from ONNX names.
pub(crate) struct Ctx<'p> {
    /// The graph being built.
    pub g: Graph,
    /// The default-domain opset.
    pub opset: i64,
    /// ONNX value names in scope.
    names: BTreeMap<String, Slot>,
    /// Values whose contents are known at import time (constants), for folding.
    known: BTreeMap<ValueId, Tensor>,
    /// Graph inputs with values given for specialization ([`ImportOptions::input_values`]).
    input_values: BTreeMap<ValueId, Tensor>,
    /// Constant names in use.
    const_names: Names,
    /// IR value names in use.
    value_names: Names,
    ext: ExternalFiles,
    path: &'p Path,
    /// The name of the node being imported, when it has one (new ops get it as location).
    loc: Option<String>,
    /// The first output name of the node being imported (a base for new constants' names).
    hint: String,
    /// [`ImportOptions::fold_limit_bytes`].
    pub fold_limit_bytes: u64,
    /// The floating-point initializers, with [`ImportOptions::keep_parameters`]: ops that
    /// read them are not folded.
    params: BTreeSet<String>,
    /// Importing a model to train ([`ImportOptions::keep_parameters`]): `Dropout` nodes
    /// become `dropout` ops.
    pub(crate) training: bool,
    /// With `training`: every value name a node reads or a graph returns (so an op can tell
    /// that an output it cannot compute is unused).
    pub(crate) used: BTreeSet<String>,
    /// The graphs around the one being built, outermost first, while a region body is
    /// imported (the current graph is `g`; `stack[0]` is then the main graph).
    stack: Vec<Frame>,
    /// The values of the enclosing graph the current region body captures, in the order of
    /// the body inputs that receive them (after the body's own inputs).
    captures: Vec<ValueId>,
    /// For each captured enclosing value, the body input that receives it.
    captured: BTreeMap<ValueId, ValueId>,
    /// Region levels the IR has between the graphs on `stack` that the stack does not show
    /// (an opset-8 `Scan` puts its body two levels down: the scan over the batch, then the
    /// one over the sequence), counted by [`Ctx::import_region`]'s depth limit.
    pub(crate) extra_depth: usize,
}

/// The state of an enclosing graph while a region body is imported.
struct Frame {
    g: Graph,
    names: BTreeMap<String, Slot>,
    known: BTreeMap<ValueId, Tensor>,
    input_values: BTreeMap<ValueId, Tensor>,
    value_names: Names,
    captures: Vec<ValueId>,
    captured: BTreeMap<ValueId, ValueId>,
}

/// A region body imported from an ONNX subgraph: the body graph (its own inputs first, then
/// one input per captured value) and the enclosing graph's values it captures, in order.
pub(crate) struct ImportedRegion {
    pub body: Graph,
    pub captures: Vec<ValueId>,
}

impl<'p> Ctx<'p> {
    fn new(name: String, opset: i64, ext: ExternalFiles, path: &'p Path) -> Self {
        let mut g = Graph::new(if name.is_empty() {
            "main".to_string()
        } else {
            name
        });
        g.set_outputs(Vec::new());
        Ctx {
            g,
            opset,
            names: BTreeMap::new(),
            known: BTreeMap::new(),
            input_values: BTreeMap::new(),
            const_names: Names::default(),
            value_names: Names::default(),
            ext,
            path,
            loc: None,
            hint: String::new(),
            fold_limit_bytes: crate::DEFAULT_FOLD_LIMIT_BYTES,
            params: BTreeSet::new(),
            training: false,
            used: BTreeSet::new(),
            stack: Vec::new(),
            captures: Vec::new(),
            captured: BTreeMap::new(),
            extra_depth: 0,
        }
    }

    fn graph_error(&self, message: String) -> ImportError {
        ImportError::Graph {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn import_main(
        &mut self,
        graph: &GraphProto,
        options: &ImportOptions,
    ) -> Result<(), ImportError> {
        // Initializers first: in IR version < 4 they are also listed as inputs, and then they
        // are constants, not inputs.
        self.add_initializers(graph)?;
        let mut bound: BTreeSet<&str> = BTreeSet::new();
        let mut declared: BTreeSet<&str> = BTreeSet::new();
        let mut symbols = declared_symbols(graph);
        for vi in &graph.input {
            let name = vi.name();
            if !declared.insert(name) {
                return Err(self.graph_error(format!(
                    "graph input `{name}` is declared twice (input names must be unique)"
                )));
            }
            if let Some(Slot::Init(ty, _)) = self.names.get(name) {
                // An initializer listed as an input (IR version < 4, or an input with a
                // default): the declared type must be the initializer's.
                if let Some(why) = shadow_conflict(vi, ty) {
                    return Err(self.graph_error(format!(
                        "graph input `{name}` has the same name as an initializer of type {ty} \
                         but {why}"
                    )));
                }
                continue;
            }
            let mut ty = value_info_type(vi, &mut symbols)
                .map_err(|m| self.graph_error(format!("input `{name}`: {m}")))?;
            if let Some(dims) = options.input_shapes.get(name) {
                if dims.len() != ty.rank() {
                    return Err(self.graph_error(format!(
                        "--input-shape {name}: gives {} extents, the input has rank {} ({ty})",
                        dims.len(),
                        ty.rank()
                    )));
                }
                for (d, &n) in ty.shape.iter().zip(dims) {
                    if let Dim::Static(s) = d
                        && *s != n
                    {
                        return Err(self.graph_error(format!(
                            "--input-shape {name}: extent {n} conflicts with the declared {ty}"
                        )));
                    }
                }
                ty = TensorType::fixed(ty.elem, dims);
                bound.insert(name);
            }
            if let Some(t) = options.input_values.get(name) {
                let dims: Vec<u64> = t.shape().iter().map(|&d| d as u64).collect();
                let fits = t.elem() == ty.elem
                    && dims.len() == ty.rank()
                    && ty
                        .shape
                        .iter()
                        .zip(&dims)
                        .all(|(d, &n)| d.as_static().is_none_or(|s| s == n));
                if !fits {
                    return Err(self.graph_error(format!(
                        "the value given for input `{name}` ({}) does not fit its declared type {ty}",
                        t.ty()
                    )));
                }
                ty = TensorType::fixed(ty.elem, &dims);
            }
            check_type_limits(&ty).map_err(|m| self.graph_error(format!("input `{name}`: {m}")))?;
            let vname = self.unique_value_name(name);
            let v = self.g.add_input(Some(vname), ty);
            if let Some(t) = options.input_values.get(name) {
                self.input_values.insert(v, t.clone());
            }
            self.names.insert(name.to_string(), Slot::Value(v));
        }
        if let Some(missing) = options
            .input_shapes
            .keys()
            .find(|k| !bound.contains(k.as_str()))
        {
            let inputs: Vec<&str> = graph
                .input
                .iter()
                .map(|v| v.name())
                .filter(|n| !matches!(self.names.get(*n), Some(Slot::Init(..))))
                .collect();
            return Err(self.graph_error(format!(
                "--input-shape {missing}: not a graph input (inputs: {})",
                inputs.join(", ")
            )));
        }

        self.import_nodes(graph)?;

        let mut outputs: Vec<(ValueId, Option<String>)> = Vec::new();
        let mut output_names = BTreeSet::new();
        let mut output_values = BTreeSet::new();
        for vi in &graph.output {
            let v = self
                .lookup(vi.name())
                .map_err(|m| self.graph_error(format!("output `{}`: {m}", vi.name())))?;
            // Outputs are the model's interface: the value takes the output's name (an
            // Identity or an inlined branch may have given it another), unless it is an input
            // or already another output.
            let is_input = matches!(self.g.value(v).def, tessera_ir::ValueDef::Input(_));
            if !is_input
                && !output_values.contains(&v)
                && self.g.value(v).name.as_deref() != Some(vi.name())
                && !self.value_names.contains(vi.name())
            {
                let name = unique_name(&mut self.value_names, vi.name());
                self.g.set_name(v, name);
            }
            // The output keeps the model's name whatever value computes it; a name given
            // twice names the first output, the later ones are named after their values.
            let given = (!vi.name().is_empty() && !output_names.contains(vi.name()))
                .then(|| vi.name().to_string());
            if let Some(n) = &given {
                output_names.insert(n.clone());
            }
            output_values.insert(v);
            outputs.push((v, given));
        }
        if outputs.is_empty() {
            return Err(self.graph_error("the graph has no outputs".into()));
        }
        self.g.set_named_outputs(outputs);
        Ok(())
    }

    fn add_initializers(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for t in &graph.initializer {
            if !seen.insert(t.name()) {
                return Err(self.graph_error(format!(
                    "initializer `{}` is defined twice (initializer names must be unique)",
                    t.name()
                )));
            }
            self.add_initializer(t)
                .map_err(|m| self.graph_error(format!("initializer `{}`: {m}", t.name())))?;
        }
        if let Some(s) = graph.sparse_initializer.first() {
            let name = s.values.as_ref().map_or("", |v| v.name());
            return Err(self.graph_error(format!("sparse initializer `{name}` is not supported")));
        }
        Ok(())
    }

    fn add_initializer(&mut self, t: &TensorProto) -> Result<(), String> {
        let (ty, data) = decode::tensor_data(t, &mut self.ext)?;
        self.names
            .insert(t.name().to_string(), Slot::Init(ty, data));
        Ok(())
    }

    /// Imports the nodes of a graph or an inlined subgraph, in order.
    pub(crate) fn import_nodes(&mut self, graph: &GraphProto) -> Result<(), ImportError> {
        for n in &graph.node {
            let node = Node::new(n);
            self.loc = (!n.name().is_empty()).then(|| n.name().to_string());
            self.hint = n.output.first().cloned().unwrap_or_default();
            let outs = ops::build(self, &node).map_err(|message| ImportError::Node {
                path: self.path.to_path_buf(),
                node: node.display_name(),
                op_type: n.op_type().to_string(),
                message,
            })?;
            for (i, name) in n.output.iter().enumerate() {
                if name.is_empty() {
                    continue;
                }
                let Some(&v) = outs.get(i) else {
                    return Err(ImportError::Node {
                        path: self.path.to_path_buf(),
                        node: node.display_name(),
                        op_type: n.op_type().to_string(),
                        message: format!("output {i} (`{name}`) is not produced by this importer"),
                    });
                };
                self.bind(name, v);
            }
        }
        self.loc = None;
        Ok(())
    }

    /// Registers a subgraph's initializers, imports its nodes into the current graph and
    /// scope, and returns the values of its outputs (for inlining and for region bodies).
    fn import_subgraph_body(&mut self, graph: &GraphProto) -> Result<Vec<ValueId>, String> {
        self.add_initializers(graph).map_err(|e| e.to_string())?;
        self.import_nodes(graph).map_err(|e| e.to_string())?;
        graph
            .output
            .iter()
            .map(|o| {
                self.lookup(o.name())
                    .map_err(|m| format!("subgraph output `{}`: {m}", o.name()))
            })
            .collect()
    }

    /// Inlines a subgraph (an `If` branch): registers its initializers, imports its nodes in
    /// the current scope and returns the values of its outputs. Errors are flattened to text.
    pub(crate) fn inline_subgraph(&mut self, graph: &GraphProto) -> Result<Vec<ValueId>, String> {
        // The branch has a scope of its own: its names are not visible after it.
        let (loc, hint, names) = (self.loc.clone(), self.hint.clone(), self.names.clone());
        let result = self.import_subgraph_body(graph);
        self.loc = loc;
        self.hint = hint;
        self.names = names;
        result
    }

    /// The type and data of a tensor attribute (external data resolves like initializers).
    pub(crate) fn tensor_proto(&mut self, t: &TensorProto) -> Result<(TensorType, Bytes), String> {
        decode::tensor_data(t, &mut self.ext)
    }

    /// Binds an ONNX name to a value, naming the value after it when it has no name yet.
    pub(crate) fn bind(&mut self, name: &str, v: ValueId) {
        if self.g.value(v).name.is_none() {
            let unique = self.unique_value_name(name);
            self.g.set_name(v, unique);
        }
        self.names.insert(name.to_string(), Slot::Value(v));
    }

    fn unique_value_name(&mut self, name: &str) -> String {
        unique_name(
            &mut self.value_names,
            if name.is_empty() { "v" } else { name },
        )
    }

    fn unique_const_name(&mut self, name: &str) -> String {
        unique_name(
            &mut self.const_names,
            if name.is_empty() { "const" } else { name },
        )
    }

    /// The IR value of an ONNX name; an initializer becomes a `const` op here.
    pub(crate) fn lookup(&mut self, name: &str) -> Result<ValueId, String> {
        match self.names.get(name).cloned() {
            Some(Slot::Value(v)) => Ok(v),
            Some(Slot::Init(ty, data)) => {
                let v = self.add_constant(name, ty, data);
                self.names.insert(name.to_string(), Slot::Value(v));
                Ok(v)
            }
            None => match self.capture_name(name) {
                Some(v) => Ok(v),
                None => Err(format!(
                    "`{name}` is not defined (not a graph input, initializer or earlier node output)"
                )),
            },
        }
    }

    /// While a region body is imported: the value of an enclosing graph's name, captured into
    /// the body (through every region in between), and bound in the body's scope.
    fn capture_name(&mut self, name: &str) -> Option<ValueId> {
        let level = (0..self.stack.len())
            .rev()
            .find(|&l| self.stack[l].names.contains_key(name))?;
        let v = match self.stack[level].names.get(name).cloned()? {
            Slot::Value(v) => v,
            Slot::Init(ty, data) => {
                // An enclosing body's initializer: a constant of the main graph, captured
                // down to that body and bound there.
                let root = self.root_constant(name, ty, data);
                let v = self.thread(root, 0, level);
                self.stack[level]
                    .names
                    .insert(name.to_string(), Slot::Value(v));
                v
            }
        };
        let inner = self.thread(v, level, self.stack.len());
        self.names.insert(name.to_string(), Slot::Value(inner));
        Some(inner)
    }

    /// Inside a region body, captures `name` from an enclosing scope when the body does not
    /// define it, so that its known contents can be read here.
    fn in_scope(&mut self, name: &str) {
        if !self.stack.is_empty() && !self.names.contains_key(name) {
            self.capture_name(name);
        }
    }

    /// A `const` op of the main graph (`self.g` when no region is being imported).
    fn root_constant(&mut self, name: &str, ty: TensorType, data: Bytes) -> ValueId {
        let cname = self.unique_const_name(name);
        let g = match self.stack.first_mut() {
            Some(f) => &mut f.g,
            None => &mut self.g,
        };
        let c = g.add_const(Constant {
            name: cname,
            ty: ty.clone(),
            data,
        });
        let op = g.push_op(Op::Const(c), vec![], vec![ty]);
        let v = g.op(op).results[0];
        let names = match self.stack.first_mut() {
            Some(f) => &mut f.value_names,
            None => &mut self.value_names,
        };
        let vname = unique_name(names, name);
        let g = match self.stack.first_mut() {
            Some(f) => &mut f.g,
            None => &mut self.g,
        };
        g.set_name(v, vname);
        v
    }

    /// Passes value `v` of the graph at `from` (an index into the stack; `stack.len()` is the
    /// current graph) down into the graph at `to` (deeper), adding a body input at each level
    /// that does not capture it yet. Known contents go along.
    fn thread(&mut self, mut v: ValueId, from: usize, to: usize) -> ValueId {
        for level in from + 1..=to {
            // The enclosing graph is always on the stack (`level <= stack.len()`).
            let outer = &self.stack[level - 1];
            let outer_known = outer.known.get(&v).cloned().or_else(|| {
                // A constant of the main graph not read at import time yet.
                let tessera_ir::ValueDef::Result(op, 0) = outer.g.value(v).def else {
                    return None;
                };
                let Op::Const(c) = outer.g.op(op).op else {
                    return None;
                };
                let c = outer.g.constant(c);
                let small = c.ty.num_elements().is_some_and(|n| n <= FOLD_LIMIT);
                (small && self.fits_fold_limit(&c.ty))
                    .then(|| Tensor::from_typed_le_bytes(&c.ty, &c.data).ok())
                    .flatten()
            });
            // A graph input's specialization value stays one inside the body.
            let outer_value = outer.input_values.get(&v).cloned();
            let (outer_ty, outer_name) = (outer.g.ty(v).clone(), outer.g.value(v).name.clone());
            let (g, captures, captured, known, names, values) = if level == self.stack.len() {
                (
                    &mut self.g,
                    &mut self.captures,
                    &mut self.captured,
                    &mut self.known,
                    &mut self.value_names,
                    &mut self.input_values,
                )
            } else {
                let f = &mut self.stack[level];
                (
                    &mut f.g,
                    &mut f.captures,
                    &mut f.captured,
                    &mut f.known,
                    &mut f.value_names,
                    &mut f.input_values,
                )
            };
            if let Some(&inner) = captured.get(&v) {
                v = inner;
                continue;
            }
            let vname = unique_name(names, outer_name.as_deref().unwrap_or("capture"));
            let inner = g.add_input(Some(vname), outer_ty);
            captures.push(v);
            captured.insert(v, inner);
            if let Some(t) = outer_known {
                known.insert(inner, t);
            }
            if let Some(t) = outer_value {
                values.insert(inner, t);
            }
            v = inner;
        }
        v
    }

    /// Imports an ONNX subgraph as a region body. The body's own inputs are `formals` (name,
    /// type), bound to the subgraph's declared inputs in order; `preset` lists values of the
    /// current graph to capture first (so that the branches of an `if` capture in one
    /// order). Names of the current scope (and those around it) are visible in the body;
    /// each one used becomes a captured value. Errors are flattened to text.
    pub(crate) fn import_region(
        &mut self,
        graph: &GraphProto,
        region: &str,
        formals: &[TensorType],
        preset: &[ValueId],
    ) -> Result<ImportedRegion, String> {
        if self.stack.len() + self.extra_depth + 1 > tessera_ir::verify::MAX_REGION_DEPTH {
            return Err(format!(
                "subgraphs nest more than {} deep",
                tessera_ir::verify::MAX_REGION_DEPTH
            ));
        }
        if graph.input.len() != formals.len() {
            return Err(format!(
                "{region}: the subgraph declares {} inputs, the operator gives it {}",
                graph.input.len(),
                formals.len()
            ));
        }
        let frame = Frame {
            g: std::mem::replace(&mut self.g, Graph::new(region)),
            names: std::mem::take(&mut self.names),
            known: std::mem::take(&mut self.known),
            input_values: std::mem::take(&mut self.input_values),
            value_names: std::mem::take(&mut self.value_names),
            captures: std::mem::take(&mut self.captures),
            captured: std::mem::take(&mut self.captured),
        };
        let (loc, hint) = (self.loc.clone(), self.hint.clone());
        self.stack.push(frame);
        self.g.set_outputs(Vec::new());
        for (vi, ty) in graph.input.iter().zip(formals) {
            let vname = self.unique_value_name(vi.name());
            let v = self.g.add_input(Some(vname), ty.clone());
            if !vi.name().is_empty() {
                self.names.insert(vi.name().to_string(), Slot::Value(v));
            }
        }
        let depth = self.stack.len();
        for &p in preset {
            self.thread(p, depth - 1, depth);
        }
        let result = self.import_subgraph_body(graph);
        let frame = self.stack.pop().expect("pushed above");
        let mut body = std::mem::replace(&mut self.g, frame.g);
        self.names = frame.names;
        self.known = frame.known;
        self.input_values = frame.input_values;
        self.value_names = frame.value_names;
        let captures = std::mem::replace(&mut self.captures, frame.captures);
        self.captured = frame.captured;
        self.loc = loc;
        self.hint = hint;
        let outputs = result.map_err(|m| format!("{region}: {m}"))?;
        body.set_outputs(outputs);
        tessera_passes::dce(&mut body, &mut tessera_passes::Statistics::default());
        Ok(ImportedRegion { body, captures })
    }

    /// Adds a graph constant and the `const` op that yields it. Inside a region body the
    /// constant belongs to the main graph and is captured into the body.
    pub(crate) fn add_constant(&mut self, name: &str, ty: TensorType, data: Bytes) -> ValueId {
        if !self.stack.is_empty() {
            let root = self.root_constant(name, ty, data);
            return self.thread(root, 0, self.stack.len());
        }
        let cname = self.unique_const_name(name);
        let c = self.g.add_const(Constant {
            name: cname,
            ty: ty.clone(),
            data,
        });
        let op = self.g.push_op(Op::Const(c), vec![], vec![ty]);
        let v = self.g.op(op).results[0];
        let vname = self.unique_value_name(name);
        self.g.set_name(v, vname);
        v
    }

    /// A constant value from a computed tensor (named after `hint`).
    pub(crate) fn constant_tensor(&mut self, hint: &str, t: Tensor) -> ValueId {
        let ty = t.ty();
        let data = Bytes::from(t.to_le_bytes());
        let small = ty.num_elements().is_some_and(|n| n <= FOLD_LIMIT);
        let v = self.add_constant(hint, ty, data);
        if small {
            self.known.insert(v, t);
        }
        v
    }

    /// The contents of a value when they are known at import time (a constant).
    pub(crate) fn known(&mut self, v: ValueId) -> Option<Tensor> {
        if let Some(t) = self.known.get(&v) {
            return Some(t.clone());
        }
        let tessera_ir::ValueDef::Result(op, 0) = self.g.value(v).def else {
            return None;
        };
        let Op::Const(c) = self.g.op(op).op else {
            return None;
        };
        let c = self.g.constant(c);
        if !self.fits_fold_limit(&c.ty) {
            return None;
        }
        let t = Tensor::from_typed_le_bytes(&c.ty, &c.data).ok()?;
        if c.ty.num_elements().is_some_and(|n| n <= FOLD_LIMIT) {
            self.known.insert(v, t.clone());
        }
        Some(t)
    }

    /// Whether `v` is a parameter's constant ([`ImportOptions::keep_parameters`]).
    fn is_param(&self, v: ValueId) -> bool {
        if self.params.is_empty() {
            return false;
        }
        let tessera_ir::ValueDef::Result(op, 0) = self.g.value(v).def else {
            return false;
        };
        matches!(self.g.op(op).op, Op::Const(c) if self.params.contains(&self.g.constant(c).name))
    }

    /// Whether [`Ctx::known`] can give the contents of a value, without computing them.
    fn is_known(&self, v: ValueId) -> bool {
        if self.known.contains_key(&v) {
            return true;
        }
        let tessera_ir::ValueDef::Result(op, 0) = self.g.value(v).def else {
            return false;
        };
        matches!(self.g.op(op).op, Op::Const(_))
            && self.g.ty(v).static_dims().is_some()
            && self.fits_fold_limit(self.g.ty(v))
    }

    /// Whether a tensor of type `ty` may be computed or read at import time: its byte size is
    /// static and at most [`ImportOptions::fold_limit_bytes`].
    pub(crate) fn fits_fold_limit(&self, ty: &TensorType) -> bool {
        ty.size_bytes().is_some_and(|b| b <= self.fold_limit_bytes)
    }

    /// Whether an array of `count` elements of `elem` fits
    /// [`ImportOptions::fold_limit_bytes`] (overflow-checked), for tables built at import.
    pub(crate) fn fits_fold_limit_count(&self, count: u64, elem: tessera_ir::ElemType) -> bool {
        count
            .checked_mul(elem.size_bytes() as u64)
            .is_some_and(|b| b <= self.fold_limit_bytes)
    }

    /// A base name for values the current node creates (its first output's name).
    pub(crate) fn hint(&self) -> &str {
        &self.hint
    }

    /// The contents of the ONNX value `name` when known at import time, without creating
    /// a `const` op for an initializer that is only read at import time.
    pub(crate) fn known_name(&mut self, name: &str) -> Option<Tensor> {
        self.in_scope(name);
        match self.names.get(name)? {
            Slot::Init(ty, _) if !self.fits_fold_limit(ty) => None,
            Slot::Init(ty, data) => Tensor::from_typed_le_bytes(ty, data).ok(),
            Slot::Value(v) => {
                let v = *v;
                self.known(v)
                    .or_else(|| self.input_values.get(&v).cloned())
                    .or_else(|| self.evaluate_specialized(v))
            }
        }
    }

    /// The contents of `v` computed from graph inputs' specialization values
    /// ([`ImportOptions::input_values`]) and constants, for an operator that needs them at
    /// import time (pads computed as `max(shape(x), shape_input) - shape(x)`): the ops that
    /// make `v` are evaluated with the interpreter, the graph is left as it is (the inputs are
    /// never folded into other computations). `None` when `v` depends on an input without a
    /// value, on a region op, on a tensor over [`FOLD_LIMIT`] elements, or on more than
    /// [`MAX_SPECIALIZED_OPS`] ops. An explicit stack: no recursion.
    fn evaluate_specialized(&mut self, v: ValueId) -> Option<Tensor> {
        if self.input_values.is_empty() {
            return None;
        }
        let mut done: BTreeMap<ValueId, Tensor> = BTreeMap::new();
        let mut stack = vec![v];
        let mut visits = 0usize;
        while let Some(&top) = stack.last() {
            if done.contains_key(&top) {
                stack.pop();
                continue;
            }
            if let Some(t) = self
                .known(top)
                .or_else(|| self.input_values.get(&top).cloned())
            {
                done.insert(top, t);
                stack.pop();
                continue;
            }
            let tessera_ir::ValueDef::Result(op, _) = self.g.value(top).def else {
                return None;
            };
            let data = self.g.op(op);
            if !data.op.regions().is_empty()
                || data
                    .results
                    .iter()
                    .any(|&r| self.g.ty(r).num_elements().is_none_or(|n| n > FOLD_LIMIT))
            {
                return None;
            }
            let missing: Vec<ValueId> = data
                .operands
                .iter()
                .copied()
                .filter(|w| !done.contains_key(w))
                .collect();
            if missing.is_empty() {
                let inputs: Vec<&Tensor> = data.operands.iter().map(|w| &done[w]).collect();
                let limit = tessera_ir::interp::RunOptions {
                    memory_limit: self.fold_limit_bytes,
                };
                let outs = tessera_ir::interp::eval_op_limited(
                    &data.op,
                    &inputs,
                    &tessera_ir::interp::Bindings::new(),
                    &limit,
                )
                .ok()?;
                let results = data.results.clone();
                done.extend(results.into_iter().zip(outs));
                stack.pop();
            } else {
                visits += 1;
                if visits > MAX_SPECIALIZED_OPS {
                    return None;
                }
                stack.extend(missing);
            }
        }
        done.remove(&v)
    }

    /// Like [`Ctx::known_name`], but never a graph input's specialization value
    /// ([`ImportOptions::input_values`]): only contents that are constants of the model.
    pub(crate) fn constant_name(&mut self, name: &str) -> Option<Tensor> {
        self.in_scope(name);
        match self.names.get(name)? {
            Slot::Init(ty, _) if !self.fits_fold_limit(ty) => None,
            Slot::Init(ty, data) => Tensor::from_typed_le_bytes(ty, data).ok(),
            Slot::Value(v) => {
                let v = *v;
                self.known(v)
            }
        }
    }

    /// The byte size of the ONNX value `name` when it is a constant too large to be read at
    /// import time ([`ImportOptions::fold_limit_bytes`]).
    pub(crate) fn over_fold_limit(&self, name: &str) -> Option<u64> {
        let ty = match self.names.get(name)? {
            Slot::Init(ty, _) => ty,
            Slot::Value(v) => {
                let tessera_ir::ValueDef::Result(op, 0) = self.g.value(*v).def else {
                    return None;
                };
                if !matches!(self.g.op(op).op, Op::Const(_)) {
                    return None;
                }
                self.g.ty(*v)
            }
        };
        let bytes = ty.size_bytes().unwrap_or(u64::MAX);
        (bytes > self.fold_limit_bytes).then_some(bytes)
    }

    /// The location (model node) ops made now are given.
    pub(crate) fn loc(&self) -> &Option<String> {
        &self.loc
    }

    /// The type of a value.
    pub(crate) fn ty(&self, v: ValueId) -> &TensorType {
        self.g.ty(v)
    }

    /// Appends an op (typed by inference) and returns its results; folds it into constants
    /// when every operand is known and the results are small.
    pub(crate) fn emit(&mut self, op: Op, operands: &[ValueId]) -> Result<Vec<ValueId>, String> {
        let types = {
            let tys: Vec<&TensorType> = operands.iter().map(|&v| self.g.ty(v)).collect();
            infer(&self.g, &op, &tys).map_err(|e| format!("{}: {}", op.name(), e.message))?
        };
        for (i, t) in types.iter().enumerate() {
            check_type_limits(t).map_err(|m| format!("{}: result {i}: {m}", op.name()))?;
        }
        let small = types
            .iter()
            .all(|t| t.num_elements().is_some_and(|n| n <= FOLD_LIMIT));
        // Check that every operand is known before materializing any: an op with a small
        // result may read a large weight (an embedding gather by token ids), which must not be
        // copied out of the memory-mapped file when another operand is not known.
        if small
            && !matches!(op, Op::Const(_))
            && operands.iter().all(|&v| self.is_known(v))
            && !operands.iter().any(|&v| self.is_param(v))
        {
            let mut inputs = Vec::with_capacity(operands.len());
            for &v in operands {
                match self.known(v) {
                    Some(t) => inputs.push(t),
                    None => break,
                }
            }
            if inputs.len() == operands.len() {
                let refs: Vec<&Tensor> = inputs.iter().collect();
                // Under the fold limit: an op's tables may be larger than its result.
                let limit = tessera_ir::interp::RunOptions {
                    memory_limit: self.fold_limit_bytes,
                };
                let folded = tessera_ir::interp::eval_op_limited(
                    &op,
                    &refs,
                    &tessera_ir::interp::Bindings::new(),
                    &limit,
                );
                if let Ok(outs) = folded {
                    let hint = self.hint.clone();
                    return Ok(outs
                        .into_iter()
                        .map(|t| self.constant_tensor(&hint, t))
                        .collect());
                }
            }
        }
        let id = self.g.push_op(op, operands.to_vec(), types);
        self.g.op_mut(id).loc = self.loc.clone();
        Ok(self.g.op(id).results.clone())
    }

    /// Like [`Ctx::emit`] for single-result ops.
    pub(crate) fn emit1(&mut self, op: Op, operands: &[ValueId]) -> Result<ValueId, String> {
        Ok(self.emit(op, operands)?[0])
    }
}

/// A set of names in use, with a counter per base name so that [`unique_name`] does not
/// probe `base_1`, `base_2`, ... from 1 every time (10,000 uses of one name would take
/// 50 million probes). Names are never removed.
#[derive(Default)]
pub(crate) struct Names {
    taken: BTreeSet<String>,
    /// For each base [`unique_name`] has suffixed: the suffix its next probe starts at. Every
    /// `base_j` with `1 <= j < next[base]` is taken, so starting there finds the same name as
    /// probing from 1.
    next: BTreeMap<String, u64>,
}

impl Names {
    /// Whether `name` is in use.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.taken.contains(name)
    }

    /// Marks `name` as in use; false if it already was.
    pub(crate) fn insert(&mut self, name: String) -> bool {
        self.taken.insert(name)
    }
}

/// `base`, or `base_1`, `base_2`, ... : the first not in `taken`, which it joins.
fn unique_name(taken: &mut Names, base: &str) -> String {
    if !taken.taken.contains(base) {
        taken.taken.insert(base.to_string());
        return base.to_string();
    }
    let next = taken.next.entry(base.to_string()).or_insert(1);
    loop {
        let candidate = format!("{base}_{next}");
        *next += 1;
        if !taken.taken.contains(&candidate) {
            taken.taken.insert(candidate.clone());
            return candidate;
        }
    }
}

/// The symbols graph inputs declare (`dim_param`), which generated symbols must avoid.
fn declared_symbols(graph: &GraphProto) -> Names {
    let mut out = Names::default();
    for vi in &graph.input {
        if let Some(type_proto::Value::TensorType(t)) =
            vi.r#type.as_ref().and_then(|t| t.value.as_ref())
            && let Some(shape) = &t.shape
        {
            for d in &shape.dim {
                if let Some(tensor_shape_proto::dimension::Value::DimParam(p)) = &d.value {
                    out.insert(p.clone());
                }
            }
        }
    }
    out
}

/// The IR type of a graph input's declared type. Unknown extents become fresh symbols
/// (`<input>_<axis>`, made unique against `taken`, which holds every symbol in use).
fn value_info_type(
    vi: &crate::proto::ValueInfoProto,
    taken: &mut Names,
) -> Result<TensorType, String> {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err("only tensor inputs are supported (not sequences, maps or optionals)".into());
    };
    let elem = decode::elem_type(t.elem_type())?;
    let Some(shape) = &t.shape else {
        return Err("the input has no declared shape (rank unknown)".into());
    };
    if shape.dim.len() > MAX_RANK {
        return Err(format!(
            "the declared shape has rank {}, more than the limit of {MAX_RANK}",
            shape.dim.len()
        ));
    }
    let mut dims = Vec::with_capacity(shape.dim.len());
    for (i, d) in shape.dim.iter().enumerate() {
        dims.push(match &d.value {
            // Some exporters write -1 for an unknown extent: a symbol, like an empty dim.
            Some(tensor_shape_proto::dimension::Value::DimValue(-1)) => {
                Dim::Sym(unique_name(taken, &format!("{}_{i}", vi.name())))
            }
            Some(tensor_shape_proto::dimension::Value::DimValue(n)) => Dim::Static(
                u64::try_from(*n).map_err(|_| format!("negative extent {n} on axis {i}"))?,
            ),
            Some(tensor_shape_proto::dimension::Value::DimParam(p)) if !p.is_empty() => {
                Dim::Sym(p.clone())
            }
            _ => Dim::Sym(unique_name(taken, &format!("{}_{i}", vi.name()))),
        });
    }
    Ok(TensorType::new(elem, dims))
}

/// Why a graph input's declared type does not fit the initializer of the same name (type
/// `init`), if it does not. A missing shape or a symbolic extent fits anything; `-1` is a
/// symbolic extent.
fn shadow_conflict(vi: &crate::proto::ValueInfoProto, init: &TensorType) -> Option<String> {
    let value = vi.r#type.as_ref().and_then(|t| t.value.as_ref())?;
    let type_proto::Value::TensorType(t) = value else {
        return Some("it is declared as a non-tensor".into());
    };
    match decode::elem_type(t.elem_type()) {
        Ok(e) if e == init.elem => {}
        // 0 is UNDEFINED: no element type declared.
        _ if t.elem_type() == 0 => {}
        _ => {
            return Some(format!(
                "it is declared with element type {}",
                decode::elem_type_name(t.elem_type())
            ));
        }
    }
    let shape = t.shape.as_ref()?;
    let declared: Vec<String> = shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(tensor_shape_proto::dimension::Value::DimValue(n)) if *n != -1 => n.to_string(),
            Some(tensor_shape_proto::dimension::Value::DimParam(p)) if !p.is_empty() => p.clone(),
            _ => "?".to_string(),
        })
        .collect();
    let fits = shape.dim.len() == init.rank()
        && shape
            .dim
            .iter()
            .zip(&init.shape)
            .all(|(d, e)| match &d.value {
                Some(tensor_shape_proto::dimension::Value::DimValue(n)) if *n != -1 => {
                    u64::try_from(*n).ok() == e.as_static()
                }
                _ => true,
            });
    (!fits).then(|| format!("it is declared with shape [{}]", declared.join(", ")))
}

/// Checks a type against the importer's limits: rank at most [`MAX_RANK`], and a byte size
/// the IR can hold (the verifier's rule, [`tessera_ir::checked_byte_size`]).
pub(crate) fn check_type_limits(ty: &TensorType) -> Result<(), String> {
    if ty.rank() > MAX_RANK {
        return Err(format!(
            "rank {} is more than the limit of {MAX_RANK}",
            ty.rank()
        ));
    }
    let extents = ty.shape.iter().filter_map(Dim::as_static);
    tessera_ir::checked_byte_size(ty.elem, extents)
        .map_err(|why| format!("type {ty} is too large: {why}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{Names, unique_name};

    /// The probe from 1 that the counter replaces, as the reference.
    fn reference(taken: &mut BTreeSet<String>, base: &str) -> String {
        let mut candidate = base.to_string();
        let mut i = 1;
        while taken.contains(&candidate) {
            candidate = format!("{base}_{i}");
            i += 1;
        }
        taken.insert(candidate.clone());
        candidate
    }

    #[test]
    fn unique_names_are_those_of_the_probe_from_one() {
        // Bases that collide with each other's suffixed forms, names taken directly in
        // between, and repeats.
        let mut names = Names::default();
        let mut set = BTreeSet::new();
        let bases = [
            "y", "y", "y_1", "y", "y_2", "y_1", "y", "a", "y_1_1", "y_1", "", "", "_1", "a_3", "a",
            "a", "a", "a", "y_5", "y", "y", "y", "y",
        ];
        for (round, base) in bases.iter().cycle().take(400).enumerate() {
            if round % 7 == 3 {
                // A name taken by other means (as the symbols of declared inputs are).
                let direct = format!("{base}_{}", round % 11);
                assert_eq!(names.insert(direct.clone()), set.insert(direct));
            }
            assert_eq!(unique_name(&mut names, base), reference(&mut set, base));
        }
        assert_eq!(names.taken, set);
    }
}
