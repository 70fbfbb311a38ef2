//! Reverse-mode automatic differentiation over the IR: the `grad` pass.
//!
//! [`differentiate`] appends to a graph the backward graph of a scalar loss with respect to
//! some of its values (graph inputs, usually the parameters of a training step). It walks the
//! forward ops that lie between those values and the loss in reverse body order and, for
//! each, applies the op's vector-Jacobian rule: given the cotangents of the op's results
//! (the gradients of the loss with respect to them), the rule builds ordinary IR ops that
//! compute the cotangents of its operands. Contributions to one value from several uses are
//! summed. The result is an ordinary graph: every pass, the cost model, placement and the
//! lowering apply to the backward ops as to any other.
//!
//! - [`table`] says, for every op of the IR, whether and how it is differentiable: a rule
//!   (in the files by op family: `elementwise`, `linalg`, `reduce`, `nn`, `shape`, `index`),
//!   a zero gradient (piecewise-constant functions such as `floor`, as PyTorch defines
//!   them), no gradient (results that are not floating point), or not yet supported (with the
//!   reason). Differentiating through an unsupported op is an error naming the op and its
//!   model node.
//! - Backward ops carry the forward op's `loc` (the model node they belong to) and a link to
//!   the forward op ([`tessera_ir::OpData::grad_of`], printed `grad-of(%v)`), which placement
//!   uses to colocate them and the report to attribute them.
//! - Only float values that depend on a differentiated value and that the loss depends on
//!   get cotangents; integer and bool values (indices, masks, shapes) never do.
//! - Conventions at non-differentiable points follow PyTorch: `relu` and `leaky-relu` at 0
//!   take the negative side, `max`/`min` ties split the gradient in half, a `reduce-max`
//!   tie splits it evenly among the maxima, `clip` passes the gradient on its closed range.

use std::collections::{BTreeMap, BTreeSet};

use tessera_ir::{
    BinaryOp, Dim, ElemType, Graph, Op, OpData, OpId, ReduceKind, Scalar, TensorType, UnaryOp,
    ValueDef, ValueId, infer,
};

use crate::pass::{OptionInfo, OptionKind, Options, Pass, PassError, PassInfo, Statistics};

mod elementwise;
mod index;
mod linalg;
mod nn;
mod reduce;
mod shape;
pub mod table;

pub use table::{Differentiability, TABLE, differentiability};

/// Why a graph cannot be differentiated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GradError {
    /// What went wrong, naming the op and its model node where there is one.
    pub message: String,
}

impl GradError {
    pub(crate) fn new(message: impl Into<String>) -> GradError {
        GradError {
            message: message.into(),
        }
    }
}

pub(crate) type R<T> = Result<T, GradError>;

/// A vector-Jacobian rule: from the forward op and its results' cotangents (`None`: zero),
/// the cotangents of the operands marked in `want` (`None` where not wanted or zero).
pub type Vjp = fn(&mut Bw<'_>, &OpData, &[Option<ValueId>], &[bool]) -> R<Vec<Option<ValueId>>>;

/// Appends to `graph` the gradients of the scalar `loss` with respect to each of `wrt`, and
/// returns them (one per entry of `wrt`, each of its type; zeros where the loss does not
/// depend on it). The forward graph is unchanged.
pub fn differentiate(graph: &mut Graph, loss: ValueId, wrt: &[ValueId]) -> R<Vec<ValueId>> {
    let loss_ty = graph.ty(loss).clone();
    if !loss_ty.elem.is_float() {
        return Err(GradError::new(format!(
            "the loss {} is {loss_ty}, not a floating-point value",
            describe_value(graph, loss)
        )));
    }
    if loss_ty.shape.iter().any(|d| d != &Dim::Static(1)) {
        return Err(GradError::new(format!(
            "the loss {} is {loss_ty}, not a scalar (one element)",
            describe_value(graph, loss)
        )));
    }
    for &w in wrt {
        if !graph.ty(w).elem.is_float() {
            return Err(GradError::new(format!(
                "cannot differentiate with respect to {}: it is {}, not floating point",
                describe_value(graph, w),
                graph.ty(w)
            )));
        }
    }
    let forward: Vec<OpId> = graph.ops().to_vec();

    // Values that depend on a differentiated value (float only).
    let mut active: BTreeSet<ValueId> = wrt.iter().copied().collect();
    for &op in &forward {
        let data = graph.op(op);
        if data.operands.iter().any(|v| active.contains(v)) {
            for &r in &data.results {
                if graph.ty(r).elem.is_float() {
                    active.insert(r);
                }
            }
        }
    }
    // Values the loss depends on.
    let mut needed: BTreeSet<ValueId> = BTreeSet::from([loss]);
    for &op in forward.iter().rev() {
        let data = graph.op(op);
        if data.results.iter().any(|r| needed.contains(r)) {
            needed.extend(data.operands.iter().copied());
        }
    }

    let mut cot: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    if active.contains(&loss) {
        let seed = graph.push_op(
            Op::Fill {
                shape: loss_ty.shape.clone(),
                elem: loss_ty.elem,
                value: Scalar::Float(1.0),
            },
            vec![],
            vec![loss_ty.clone()],
        );
        cot.insert(loss, graph.op(seed).results[0]);
    }
    for &op in forward.iter().rev() {
        let data = graph.op(op).clone();
        let cots: Vec<Option<ValueId>> = data.results.iter().map(|r| cot.get(r).copied()).collect();
        if cots.iter().all(Option::is_none) {
            continue;
        }
        let want: Vec<bool> = data
            .operands
            .iter()
            .map(|v| active.contains(v) && needed.contains(v))
            .collect();
        if !want.iter().any(|&w| w) {
            continue;
        }
        let rule = match differentiability(&data.op) {
            Differentiability::Rule(rule) => rule,
            Differentiability::Zero | Differentiability::NoGradient => continue,
            Differentiability::Unsupported(why) => {
                return Err(GradError::new(format!(
                    "{} has no gradient rule: {why}",
                    describe_op(graph, op)
                )));
            }
        };
        let mut bw = Bw {
            g: graph,
            fwd: Some(op),
            loc: None,
        };
        let grads = rule(&mut bw, &data, &cots, &want)?;
        for ((&v, gv), &w) in data.operands.iter().zip(grads).zip(&want) {
            let (Some(gv), true) = (gv, w) else { continue };
            if bw.g.ty(gv) != bw.g.ty(v) {
                return Err(GradError::new(format!(
                    "internal error: the gradient rule of {} gave {} for an operand of type {}",
                    describe_op(bw.g, op),
                    bw.g.ty(gv),
                    bw.g.ty(v)
                )));
            }
            let total = match cot.get(&v) {
                Some(&prev) => bw.bin(BinaryOp::Add, prev, gv)?,
                None => gv,
            };
            cot.insert(v, total);
        }
    }
    let mut out = Vec::with_capacity(wrt.len());
    for &w in wrt {
        match cot.get(&w) {
            Some(&g) => out.push(g),
            None => {
                let ty = graph.ty(w).clone();
                let op = graph.push_op(
                    Op::Fill {
                        shape: ty.shape.clone(),
                        elem: ty.elem,
                        value: Scalar::Float(0.0),
                    },
                    vec![],
                    vec![ty],
                );
                out.push(graph.op(op).results[0]);
            }
        }
    }
    Ok(out)
}

/// `op3 (matmul) at "fc1/MatMul"`: an op as errors name it.
pub(crate) fn describe_op(graph: &Graph, op: OpId) -> String {
    let data = graph.op(op);
    match &data.loc {
        Some(loc) => format!("`{}` (model node \"{loc}\")", data.op.name()),
        None => match data.results.first() {
            Some(&r) => format!("`{}` defining {}", data.op.name(), describe_value(graph, r)),
            None => format!("`{}`", data.op.name()),
        },
    }
}

fn describe_value(graph: &Graph, v: ValueId) -> String {
    match &graph.value(v).name {
        Some(n) => format!("%{n}"),
        None => format!("{v}"),
    }
}

/// The builder rules write the backward ops through: every op is typed by inference and
/// carries the forward op's model node and link.
pub struct Bw<'g> {
    pub(crate) g: &'g mut Graph,
    /// The forward op being differentiated; `None` for ops of no forward op (the loss and
    /// optimizer ops of a training step), which take `loc`.
    fwd: Option<OpId>,
    loc: Option<String>,
}

impl Bw<'_> {
    /// The type of a value.
    pub(crate) fn ty(&self, v: ValueId) -> TensorType {
        self.g.ty(v).clone()
    }

    /// The element type of a value.
    pub(crate) fn elem(&self, v: ValueId) -> ElemType {
        self.g.ty(v).elem
    }

    /// A builder of ops that belong to no forward op, with the model location `loc`.
    pub(crate) fn plain(g: &mut Graph, loc: impl Into<String>) -> Bw<'_> {
        Bw {
            g,
            fwd: None,
            loc: Some(loc.into()),
        }
    }

    /// Sets the location of the ops built from now on (plain builders only).
    pub(crate) fn at(&mut self, loc: impl Into<String>) {
        self.loc = Some(loc.into());
    }

    /// An error about the forward op.
    pub(crate) fn err(&self, why: impl std::fmt::Display) -> GradError {
        match self.fwd {
            Some(op) => GradError::new(format!("{}: {why}", describe_op(self.g, op))),
            None => GradError::new(format!(
                "{}: {why}",
                self.loc.as_deref().unwrap_or("training step")
            )),
        }
    }

    /// Adds an op; returns its results.
    pub(crate) fn ops(&mut self, op: Op, operands: &[ValueId]) -> R<Vec<ValueId>> {
        let tys: Vec<&TensorType> = operands.iter().map(|&v| self.g.ty(v)).collect();
        let types = infer::infer(self.g, &op, &tys).map_err(|e| {
            self.err(format!(
                "internal error: backward `{}` does not type: {}",
                op.name(),
                e.message
            ))
        })?;
        let id = self.g.push_op(op, operands.to_vec(), types);
        let (loc, link) = match self.fwd {
            Some(f) => (
                self.g.op(f).loc.clone(),
                self.g.op(f).results.first().copied(),
            ),
            None => (self.loc.clone(), None),
        };
        let data = self.g.op_mut(id);
        data.loc = loc;
        data.grad_of = link;
        Ok(data.results.clone())
    }

    /// Adds a one-result op.
    pub(crate) fn op(&mut self, op: Op, operands: &[ValueId]) -> R<ValueId> {
        Ok(self.ops(op, operands)?[0])
    }

    pub(crate) fn un(&mut self, u: UnaryOp, x: ValueId) -> R<ValueId> {
        self.op(Op::Unary(u), &[x])
    }

    pub(crate) fn bin(&mut self, b: BinaryOp, x: ValueId, y: ValueId) -> R<ValueId> {
        self.op(Op::Binary(b), &[x, y])
    }

    pub(crate) fn add(&mut self, x: ValueId, y: ValueId) -> R<ValueId> {
        self.bin(BinaryOp::Add, x, y)
    }

    pub(crate) fn sub(&mut self, x: ValueId, y: ValueId) -> R<ValueId> {
        self.bin(BinaryOp::Sub, x, y)
    }

    pub(crate) fn mul(&mut self, x: ValueId, y: ValueId) -> R<ValueId> {
        self.bin(BinaryOp::Mul, x, y)
    }

    pub(crate) fn div(&mut self, x: ValueId, y: ValueId) -> R<ValueId> {
        self.bin(BinaryOp::Div, x, y)
    }

    /// A scalar constant of element type `elem`.
    pub(crate) fn scalar(&mut self, value: f64, elem: ElemType) -> R<ValueId> {
        self.op(
            Op::Fill {
                shape: vec![],
                elem,
                value: Scalar::Float(value),
            },
            &[],
        )
    }

    /// `x * c` for a number `c`.
    pub(crate) fn scale(&mut self, x: ValueId, c: f64) -> R<ValueId> {
        let s = self.scalar(c, self.elem(x))?;
        self.mul(x, s)
    }

    /// `x + c` for a number `c`.
    pub(crate) fn offset(&mut self, x: ValueId, c: f64) -> R<ValueId> {
        let s = self.scalar(c, self.elem(x))?;
        self.add(x, s)
    }

    /// A tensor of `ty` filled with `value`.
    pub(crate) fn fill(&mut self, ty: &TensorType, value: f64) -> R<ValueId> {
        self.op(
            Op::Fill {
                shape: ty.shape.clone(),
                elem: ty.elem,
                value: Scalar::Float(value),
            },
            &[],
        )
    }

    /// `select(cond, x, y)`.
    pub(crate) fn select(&mut self, c: ValueId, x: ValueId, y: ValueId) -> R<ValueId> {
        self.op(Op::Select, &[c, x, y])
    }

    /// `g` where `cond`, else 0 (of `g`'s type, broadcast with `cond`).
    pub(crate) fn mask(&mut self, cond: ValueId, g: ValueId) -> R<ValueId> {
        let zero = self.scalar(0.0, self.elem(g))?;
        self.select(cond, g, zero)
    }

    /// `x CMP y` against a number.
    pub(crate) fn cmp_num(&mut self, b: BinaryOp, x: ValueId, c: f64) -> R<ValueId> {
        let s = self.scalar(c, self.elem(x))?;
        self.bin(b, x, s)
    }

    pub(crate) fn reshape(&mut self, x: ValueId, shape: &[Dim]) -> R<ValueId> {
        if self.g.ty(x).shape == shape {
            return Ok(x);
        }
        self.op(
            Op::Reshape {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }

    pub(crate) fn transpose(&mut self, x: ValueId, perm: Vec<usize>) -> R<ValueId> {
        if perm.iter().enumerate().all(|(i, &p)| i == p) {
            return Ok(x);
        }
        self.op(Op::Transpose { perm }, &[x])
    }

    /// A reduction over `axes` (non-empty; an empty list returns `x` unchanged).
    pub(crate) fn reduce(
        &mut self,
        kind: ReduceKind,
        x: ValueId,
        axes: Vec<usize>,
        keep_dims: bool,
    ) -> R<ValueId> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.op(
            Op::Reduce {
                kind,
                axes,
                keep_dims,
            },
            &[x],
        )
    }

    /// Broadcasts `x` to `shape`.
    pub(crate) fn expand(&mut self, x: ValueId, shape: &[Dim]) -> R<ValueId> {
        if self.g.ty(x).shape == shape {
            return Ok(x);
        }
        self.op(
            Op::Expand {
                shape: shape.to_vec(),
            },
            &[x],
        )
    }

    /// Sums `g` down to `shape`, undoing broadcasting: leading axes `g` has beyond `shape`'s
    /// rank and axes where `shape` has a static 1 are summed.
    pub(crate) fn sum_to(&mut self, g: ValueId, shape: &[Dim]) -> R<ValueId> {
        let gs = self.ty(g).shape;
        if gs == shape {
            return Ok(g);
        }
        if shape.len() > gs.len() {
            return Err(self.err(format!(
                "internal error: cannot sum a gradient of rank {} to rank {}",
                gs.len(),
                shape.len()
            )));
        }
        let lead = gs.len() - shape.len();
        let axes: Vec<usize> = (0..gs.len())
            .filter(|&i| i < lead || (shape[i - lead] == Dim::Static(1) && gs[i] != Dim::Static(1)))
            .collect();
        let r = self.reduce(ReduceKind::Sum, g, axes, false)?;
        self.reshape(r, shape)
    }

    /// A cast to `elem`.
    pub(crate) fn cast(&mut self, x: ValueId, to: ElemType) -> R<ValueId> {
        if self.elem(x) == to {
            return Ok(x);
        }
        self.op(Op::Cast { to }, &[x])
    }

    /// The element count of `x` as a scalar of `elem` (symbolic shapes included).
    pub(crate) fn count(&mut self, x: ValueId, elem: ElemType) -> R<ValueId> {
        if let Some(n) = self.g.ty(x).num_elements() {
            return self.scalar(n as f64, elem);
        }
        let n = self.op(Op::Size, &[x])?;
        self.cast(n, elem)
    }

    /// The static extents of `v`, or an error saying shapes must be bound first.
    pub(crate) fn static_dims(&self, v: ValueId) -> R<Vec<u64>> {
        self.g.ty(v).static_dims().ok_or_else(|| {
            self.err(format!(
                "its gradient needs static shapes, but an operand is {} (bind the symbols first, e.g. with --input-shape)",
                self.g.ty(v)
            ))
        })
    }
}

/// The cotangent of an op's first (or only) result: a rule is called only when one of its
/// results has one, so for a one-result op it is there.
pub(crate) fn g0(bw: &Bw<'_>, cots: &[Option<ValueId>]) -> R<ValueId> {
    cots[0].ok_or_else(|| bw.err("internal error: no cotangent"))
}

/// Static shape as dims.
pub(crate) fn dims(extents: &[u64]) -> Vec<Dim> {
    extents.iter().map(|&d| Dim::Static(d)).collect()
}

/// Finds a value by name: an output's name, then a value's name.
pub fn find_value(graph: &Graph, name: &str) -> Option<ValueId> {
    let names = tessera_ir::text::output_names(graph);
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(graph.outputs()[i]);
    }
    (0..graph.num_values())
        .map(ValueId::from_index)
        .filter(|&v| graph.is_valid_value(v))
        .find(|&v| {
            graph.value(v).name.as_deref() == Some(name)
                && match graph.value(v).def {
                    ValueDef::Input(_) => true,
                    ValueDef::Result(op, _) => graph.ops().contains(&op),
                }
        })
}

const OPTIONS: &[OptionInfo] = &[
    OptionInfo {
        name: "loss",
        kind: OptionKind::Str,
        default: "",
        doc: "the scalar to differentiate: an output's or a value's name (default: the first output)",
    },
    OptionInfo {
        name: "wrt",
        kind: OptionKind::Str,
        default: "",
        doc: "comma-separated names of the values to differentiate with respect to (default: every floating-point graph input)",
    },
];

/// The registry record of `grad`.
pub const INFO: PassInfo = PassInfo {
    name: "grad",
    summary: "Reverse-mode autodiff: appends the gradients of a scalar loss as outputs named `<value>.grad`",
    options: OPTIONS,
    create,
};

fn create(options: &Options) -> Result<Box<dyn Pass>, PassError> {
    Ok(Box::new(GradPass {
        loss: options.string("loss").to_string(),
        wrt: options
            .string("wrt")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
    }))
}

struct GradPass {
    loss: String,
    wrt: Vec<String>,
}

impl Pass for GradPass {
    fn run(&mut self, graph: &mut Graph, stats: &mut Statistics) -> Result<bool, PassError> {
        let loss = if self.loss.is_empty() {
            *graph
                .outputs()
                .first()
                .ok_or_else(|| PassError::new("the graph has no output to differentiate"))?
        } else {
            find_value(graph, &self.loss)
                .ok_or_else(|| PassError::new(format!("no value named `{}`", self.loss)))?
        };
        let wrt: Vec<ValueId> = if self.wrt.is_empty() {
            graph
                .inputs()
                .iter()
                .copied()
                .filter(|&v| graph.ty(v).elem.is_float())
                .collect()
        } else {
            self.wrt
                .iter()
                .map(|n| {
                    find_value(graph, n)
                        .ok_or_else(|| PassError::new(format!("no value named `{n}`")))
                })
                .collect::<Result<_, _>>()?
        };
        let before = graph.ops().len();
        let grads = differentiate(graph, loss, &wrt).map_err(|e| PassError::new(e.message))?;
        let names = tessera_ir::text::output_names(graph);
        let mut outputs: Vec<(ValueId, Option<String>)> = graph
            .outputs()
            .iter()
            .copied()
            .zip(names.into_iter().map(Some))
            .collect();
        for (&w, &g) in wrt.iter().zip(&grads) {
            let base = graph.value(w).name.clone().unwrap_or_else(|| w.to_string());
            outputs.push((g, Some(format!("{base}.grad"))));
        }
        graph.set_named_outputs(outputs);
        stats.add(
            "backward-ops",
            "ops added by the backward graph",
            (graph.ops().len() - before) as u64,
        );
        stats.add(
            "gradients",
            "gradients appended as outputs",
            grads.len() as u64,
        );
        Ok(true)
    }
}
