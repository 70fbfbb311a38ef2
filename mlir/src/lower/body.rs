//! The text builder every op lowering writes through: SSA names, MLIR types, scalar
//! constants and the `linalg.generic` shapes tessera uses (elementwise with numpy
//! broadcasting, reductions, and "index" generics whose body computes each output element
//! from its coordinates, reading operands with `tensor.extract`).
//!
//! Names are `%v<N>` from one counter per function, so a nested region never shadows a
//! name of its parent. Float constants print as their bit pattern in hex (`0x3F800000 : f32`),
//! which MLIR reads back exactly.

use std::fmt::Write as _;

use tessera_ir::{ElemType, TensorType};

/// A lowering error: what is unsupported or inconsistent, about the op being lowered.
#[derive(Debug)]
pub struct LowerError(pub String);

/// Shorthand for lowering results.
pub type LResult<T> = Result<T, LowerError>;

/// Builds an error.
pub fn err<T>(msg: impl Into<String>) -> LResult<T> {
    Err(LowerError(msg.into()))
}

/// An SSA tensor value and its type.
#[derive(Clone, Debug)]
pub struct Val {
    /// The SSA name (`%v3`, `%arg0`).
    pub name: String,
    /// Its tensor type (static shape).
    pub ty: TensorType,
}

/// The MLIR element type of an IR element type (`bool` is `i1`; `u8` is the signless `i8`,
/// its unsignedness lives in the ops chosen for it).
pub fn elem(e: ElemType) -> &'static str {
    match e {
        ElemType::F16 => "f16",
        ElemType::BF16 => "bf16",
        ElemType::F32 => "f32",
        ElemType::F64 => "f64",
        ElemType::I8 | ElemType::U8 => "i8",
        ElemType::I16 => "i16",
        ElemType::I32 => "i32",
        ElemType::I64 => "i64",
        ElemType::Bool => "i1",
    }
}

/// The static extents of a type; an error names a symbolic one.
pub fn dims(t: &TensorType) -> LResult<Vec<u64>> {
    t.static_dims().ok_or_else(|| {
        LowerError(format!(
            "type {t} has a symbolic extent; lowering needs static shapes (give --input-shape)"
        ))
    })
}

/// `tensor<2x3xf32>` (rank 0: `tensor<f32>`).
pub fn tensor_ty(t: &TensorType) -> LResult<String> {
    Ok(shaped("tensor", &dims(t)?, t.elem))
}

/// `<kind><2x3xf32>` for tensor or memref.
pub fn shaped(kind: &str, d: &[u64], e: ElemType) -> String {
    let mut s = format!("{kind}<");
    for x in d {
        let _ = write!(s, "{x}x");
    }
    s.push_str(elem(e));
    s.push('>');
    s
}

/// `affine_map<(d0, d1) -> (exprs)>` over `rank` dimensions.
pub fn affine_map(rank: usize, exprs: &[String]) -> String {
    let ds: Vec<String> = (0..rank).map(|i| format!("d{i}")).collect();
    format!("affine_map<({}) -> ({})>", ds.join(", "), exprs.join(", "))
}

/// The identity map of a rank.
pub fn identity_map(rank: usize) -> String {
    let e: Vec<String> = (0..rank).map(|i| format!("d{i}")).collect();
    affine_map(rank, &e)
}

/// The map reading an operand of shape `from` broadcast (numpy rules) to a result of shape
/// `to`: trailing axes align; an operand extent of 1 against a larger one reads index 0.
pub fn broadcast_map(from: &[u64], to: &[u64]) -> String {
    let off = to.len() - from.len();
    let e: Vec<String> = from
        .iter()
        .enumerate()
        .map(|(k, &d)| {
            if d == 1 && to[off + k] != 1 {
                "0".to_string()
            } else {
                format!("d{}", off + k)
            }
        })
        .collect();
    affine_map(to.len(), &e)
}

/// One operand of a `linalg.generic`: value, indexing map.
pub struct In<'a> {
    /// The tensor.
    pub val: &'a Val,
    /// Its indexing map.
    pub map: String,
}

/// A value written as `tensor.expand_shape` of `source` by `groups` (the reassociation: the
/// source's dimension `i` is the result's dimensions `groups[i]`).
#[derive(Clone, Debug)]
pub struct Expansion {
    /// The collapsed value.
    pub source: Val,
    /// The reassociation.
    pub groups: Vec<Vec<usize>>,
}

/// A reassociation as MLIR prints it: `[[0], [1], [2, 3]]`.
fn reassociation(groups: &[Vec<usize>]) -> String {
    let g: Vec<String> = groups
        .iter()
        .map(|g| {
            let d: Vec<String> = g.iter().map(usize::to_string).collect();
            format!("[{}]", d.join(", "))
        })
        .collect();
    format!("[{}]", g.join(", "))
}

/// Whether each of `ins` (numpy-broadcast to `od`) is, within each group of `groups`,
/// either all there or all broadcast (ignoring dimensions of extent 1), so that the
/// elementwise op can run on the collapsed shapes.
fn collapses(ins: &[&Val], od: &[u64], groups: &[Vec<usize>]) -> bool {
    ins.iter().all(|v| {
        let Some(d) = v.ty.static_dims() else {
            return false;
        };
        let Some(offset) = od.len().checked_sub(d.len()) else {
            return false;
        };
        groups.iter().all(|g| {
            let mut class = None;
            g.iter().filter(|&&j| od[j] > 1).all(|&j| {
                let full = j >= offset && d[j - offset] == od[j];
                let c = *class.get_or_insert(full);
                c == full && (full || j < offset || d[j - offset] == 1)
            })
        })
    })
}

/// The function body being written.
///
/// While an op of the model is lowered ([`Body::with_loc`]), every MLIR op written at its
/// own nesting level ends with `loc("<model node>")`: one-line ops, and ops with regions on
/// their closing line (`} -> tensor<...>`). Ops inside their regions keep the position MLIR
/// gives them, unless they lower a model op of their own (an `If` body's ops).
#[derive(Default)]
pub struct Body {
    lines: Vec<String>,
    /// The values written as `tensor.expand_shape` of another ([`Body::expand_shape`]), by
    /// name: elementwise ops on them are written on the collapsed value
    /// ([`Body::elementwise`]).
    expansions: std::collections::BTreeMap<String, Expansion>,
    next: usize,
    indent: usize,
    /// How many regions (`{` ... `}`) are open at the end of the written lines.
    depth: usize,
    /// The locations of the model ops being lowered, innermost last, with the region depth
    /// their own ops are written at.
    locs: Vec<(String, usize)>,
}

impl Body {
    /// A fresh SSA name.
    pub fn fresh(&mut self) -> String {
        let n = self.next;
        self.next += 1;
        format!("%v{n}")
    }

    /// Appends a line at the current nesting (an op, an op's first line ending in `{`, a
    /// region's closing line starting with `}`, a block label or a `//` comment).
    pub fn line(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        let pad = "  ".repeat(self.indent + 1);
        let (opens, closes) = if s.starts_with("//") {
            (false, false)
        } else {
            (s.ends_with('{'), s.starts_with('}'))
        };
        if closes {
            self.depth = self.depth.saturating_sub(1);
        }
        // An op ends on this line at the lowered model op's own level: it gets the location.
        let loc = match self.locs.last() {
            Some((loc, at)) if *at == self.depth && !opens && !s.starts_with("//") => {
                format!(" {loc}")
            }
            _ => String::new(),
        };
        if opens {
            self.depth += 1;
        }
        self.lines.push(format!("{pad}{s}{loc}"));
    }

    /// Runs `f` (the lowering of one model op) with `loc` (the model node's name) as the
    /// location of the ops it writes; `None` leaves them as they are.
    pub fn with_loc<T>(&mut self, loc: Option<&str>, f: impl FnOnce(&mut Body) -> T) -> T {
        let Some(loc) = loc else { return f(self) };
        self.locs.push((format!("loc({})", quote(loc)), self.depth));
        let out = f(self);
        self.locs.pop();
        out
    }

    /// [`Body::with_loc`] for code that several model ops lowered to together (a fused
    /// kernel's call): `loc(fused["a", "b"])`, or one node's `loc("a")`, or none.
    pub fn with_fused_loc<T>(&mut self, locs: &[&str], f: impl FnOnce(&mut Body) -> T) -> T {
        match locs {
            [] => f(self),
            [one] => self.with_loc(Some(one), f),
            _ => {
                let names: Vec<String> = locs.iter().map(|l| quote(l)).collect();
                self.locs
                    .push((format!("loc(fused[{}])", names.join(", ")), self.depth));
                let out = f(self);
                self.locs.pop();
                out
            }
        }
    }

    /// Writes `// <op> <op kind> "<model node>"`, the comment that heads an op's code.
    pub fn op_comment(&mut self, op: impl std::fmt::Display, kind: &str, loc: Option<&str>) {
        let at = loc.map(|l| format!(" {}", quote(l))).unwrap_or_default();
        self.line(format!("// {op} {kind}{at}"));
    }

    /// Appends `%vN = rhs` and returns `%vN`.
    pub fn assign(&mut self, rhs: impl AsRef<str>) -> String {
        let v = self.fresh();
        self.line(format!("{v} = {}", rhs.as_ref()));
        v
    }

    /// Writes the following lines one level deeper (inside an scf region).
    pub fn open(&mut self) {
        self.indent += 1;
    }

    /// Ends a level opened with [`Body::open`].
    pub fn close(&mut self) {
        self.indent = self.indent.saturating_sub(1);
    }

    /// The written lines.
    pub fn into_lines(self) -> Vec<String> {
        self.lines
    }

    /// A scalar constant of element type `e` with value `x` (floats exactly, by bit
    /// pattern; integers wrap to the type; bool is `x != 0`).
    pub fn scalar(&mut self, e: ElemType, x: f64) -> String {
        let lit = scalar_literal(e, x);
        self.assign(format!("arith.constant {lit} : {}", elem(e)))
    }

    /// An `index` constant.
    pub fn index(&mut self, x: i64) -> String {
        self.assign(format!("arith.constant {x} : index"))
    }

    /// An integer constant of a given MLIR integer type (`i64`, `i32`, ...).
    pub fn int(&mut self, ty: &str, x: i64) -> String {
        self.assign(format!("arith.constant {x} : {ty}"))
    }

    /// `tensor.empty() : T`.
    pub fn empty(&mut self, t: &TensorType) -> LResult<String> {
        let ty = tensor_ty(t)?;
        Ok(self.assign(format!("tensor.empty() : {ty}")))
    }

    /// A tensor of type `t` filled with `x`.
    pub fn filled(&mut self, t: &TensorType, x: f64) -> LResult<String> {
        let e = self.empty(t)?;
        let c = self.scalar(t.elem, x);
        let ty = tensor_ty(t)?;
        Ok(self.assign(format!(
            "linalg.fill ins({c} : {}) outs({e} : {ty}) -> {ty}",
            elem(t.elem)
        )))
    }

    /// `tensor.expand_shape` of `src` by `groups` into `to`, remembered as an [`Expansion`].
    pub fn expand_shape(
        &mut self,
        src: &Val,
        groups: &[Vec<usize>],
        to: &TensorType,
    ) -> LResult<String> {
        let shape: Vec<String> = dims(to)?.iter().map(u64::to_string).collect();
        let r = self.assign(format!(
            "tensor.expand_shape {} {} output_shape [{}] : {} into {}",
            src.name,
            reassociation(groups),
            shape.join(", "),
            tensor_ty(&src.ty)?,
            tensor_ty(to)?
        ));
        self.expansions.insert(
            r.clone(),
            Expansion {
                source: src.clone(),
                groups: groups.to_vec(),
            },
        );
        Ok(r)
    }

    /// The expansion `v` was written as, if it was one ([`Body::expand_shape`]).
    pub fn expansion(&self, v: &Val) -> Option<&Expansion> {
        self.expansions.get(&v.name)
    }

    /// `tensor.collapse_shape` of `v` by `groups` (`v`'s dimensions), or `v` where every
    /// group is one dimension.
    pub fn collapse_shape(&mut self, v: &Val, groups: &[Vec<usize>]) -> LResult<Val> {
        if groups.iter().all(|g| g.len() == 1) {
            return Ok(v.clone());
        }
        let d = dims(&v.ty)?;
        let to: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|&i| d[i]).product())
            .collect();
        let ty = TensorType::fixed(v.ty.elem, &to);
        let name = self.assign(format!(
            "tensor.collapse_shape {} {} : {} into {}",
            v.name,
            reassociation(groups),
            tensor_ty(&v.ty)?,
            tensor_ty(&ty)?
        ));
        Ok(Val { name, ty })
    }

    /// A `linalg.generic`: `ins` with their maps, results of types `outs` with maps
    /// `out_maps` and initial values `inits` (`None`: `tensor.empty`), `iterators` (`parallel`
    /// or `reduction` per loop). `body` gets the block arguments (one scalar per input, then
    /// one per output) and returns the scalars to yield. Returns the result names.
    pub fn generic(
        &mut self,
        ins: &[In<'_>],
        outs: &[(TensorType, String, Option<String>)],
        iterators: &[&str],
        body: impl FnOnce(&mut Body, &[String]) -> LResult<Vec<String>>,
    ) -> LResult<Vec<String>> {
        let mut maps: Vec<String> = ins.iter().map(|i| i.map.clone()).collect();
        let mut inits = Vec::new();
        for (t, map, init) in outs {
            maps.push(map.clone());
            inits.push(match init {
                Some(v) => v.clone(),
                None => self.empty(t)?,
            });
        }
        let res = self.fresh();
        let its: Vec<String> = iterators.iter().map(|i| format!("\"{i}\"")).collect();
        let in_names: Vec<&str> = ins.iter().map(|i| i.val.name.as_str()).collect();
        let in_tys: Vec<String> = ins
            .iter()
            .map(|i| tensor_ty(&i.val.ty))
            .collect::<LResult<_>>()?;
        let out_tys: Vec<String> = outs
            .iter()
            .map(|(t, _, _)| tensor_ty(t))
            .collect::<LResult<_>>()?;
        let mut head = String::new();
        if outs.len() > 1 {
            let _ = write!(head, "{res}:{} = ", outs.len());
        } else {
            let _ = write!(head, "{res} = ");
        }
        let _ = write!(
            head,
            "linalg.generic {{indexing_maps = [{}], iterator_types = [{}]}}",
            maps.join(", "),
            its.join(", ")
        );
        if !ins.is_empty() {
            let _ = write!(
                head,
                " ins({} : {})",
                in_names.join(", "),
                in_tys.join(", ")
            );
        }
        let _ = write!(
            head,
            " outs({} : {}) {{",
            inits.join(", "),
            out_tys.join(", ")
        );
        self.line(head);
        let mut args = Vec::new();
        let mut decl = Vec::new();
        for i in ins {
            let a = self.fresh();
            decl.push(format!("{a}: {}", elem(i.val.ty.elem)));
            args.push(a);
        }
        for (t, _, _) in outs {
            let a = self.fresh();
            decl.push(format!("{a}: {}", elem(t.elem)));
            args.push(a);
        }
        self.line(format!("^bb0({}):", decl.join(", ")));
        self.indent += 1;
        let ys = body(self, &args)?;
        let ytys: Vec<&str> = outs.iter().map(|(t, _, _)| elem(t.elem)).collect();
        self.line(format!(
            "linalg.yield {} : {}",
            ys.join(", "),
            ytys.join(", ")
        ));
        self.indent -= 1;
        if outs.len() > 1 {
            self.line(format!("}} -> ({})", out_tys.join(", ")));
            Ok((0..outs.len()).map(|k| format!("{res}#{k}")).collect())
        } else {
            self.line(format!("}} -> {}", out_tys[0]));
            Ok(vec![res])
        }
    }

    /// `f` of each element of `x`, a `linalg.map`: the CPU pipeline's fusion of elementwise
    /// generics leaves it alone, so a value per row of a reduction (a mean, a reciprocal
    /// standard deviation) is computed once per row, not again for every element of the row
    /// that reads it.
    pub fn map(
        &mut self,
        x: &Val,
        f: impl FnOnce(&mut Body, &str) -> LResult<String>,
    ) -> LResult<Val> {
        let init = self.empty(&x.ty)?;
        let res = self.fresh();
        let ty = tensor_ty(&x.ty)?;
        let e = elem(x.ty.elem);
        self.line(format!(
            "{res} = linalg.map ins({} : {ty}) outs({init} : {ty})",
            x.name
        ));
        let (a, out) = (self.fresh(), self.fresh());
        self.line(format!("({a}: {e}, {out}: {e}) {{"));
        self.indent += 1;
        let y = f(self, &a)?;
        self.line(format!("linalg.yield {y} : {e}"));
        self.indent -= 1;
        self.line("}");
        Ok(Val {
            name: res,
            ty: x.ty.clone(),
        })
    }

    /// An elementwise generic over `ins` broadcast to the result type `out`; `f` maps the
    /// operands' scalars to the result scalar.
    ///
    /// Where an input of the result's shape was written as an expansion
    /// ([`Body::expand_shape`]: a convolution's product, `[N, M, pixels]` as `[N, M, H, W]`)
    /// and every input collapses the same way, the op runs on the collapsed shapes, reading
    /// that value's source itself, and its result is expanded back: a chain of elementwise
    /// ops after a product is then written on the product's own shape, where the schedule
    /// fuses it into the product's tiles (and a row of 14 pixels is not a loop of its own).
    pub fn elementwise(
        &mut self,
        ins: &[&Val],
        out: &TensorType,
        f: impl FnOnce(&mut Body, &[String]) -> LResult<String>,
    ) -> LResult<String> {
        let od = dims(out)?;
        let groups = ins.iter().find_map(|v| {
            let e = self.expansion(v)?;
            (v.ty.static_dims()? == od && collapses(ins, &od, &e.groups)).then(|| e.groups.clone())
        });
        if let Some(groups) = groups {
            return self.collapsed_elementwise(ins, out, &od, &groups, f);
        }
        self.plain_elementwise(ins, out, f)
    }

    /// [`Body::elementwise`] on the shapes as they are.
    fn plain_elementwise(
        &mut self,
        ins: &[&Val],
        out: &TensorType,
        f: impl FnOnce(&mut Body, &[String]) -> LResult<String>,
    ) -> LResult<String> {
        let od = dims(out)?;
        let mut specs = Vec::new();
        for v in ins {
            let d = dims(&v.ty)?;
            specs.push(In {
                val: v,
                map: broadcast_map(&d, &od),
            });
        }
        let its = vec!["parallel"; od.len()];
        let r = self.generic(
            &specs,
            &[(out.clone(), identity_map(od.len()), None)],
            &its,
            |b, args| Ok(vec![f(b, &args[..ins.len()])?]),
        )?;
        Ok(r.into_iter().next().unwrap_or_default())
    }

    /// [`Body::elementwise`] on the shapes collapsed by `groups` (of `od`, the result's
    /// dimensions), its result expanded back to `out`.
    fn collapsed_elementwise(
        &mut self,
        ins: &[&Val],
        out: &TensorType,
        od: &[u64],
        groups: &[Vec<usize>],
        f: impl FnOnce(&mut Body, &[String]) -> LResult<String>,
    ) -> LResult<String> {
        let mut flat = Vec::new();
        for v in ins {
            if let Some(e) = self.expansion(v).filter(|e| e.groups == groups) {
                flat.push(e.source.clone());
                continue;
            }
            // The input's own dimensions of each group (numpy broadcasting aligns them at
            // the end).
            let offset = od.len() - v.ty.rank();
            let own: Vec<Vec<usize>> = groups
                .iter()
                .map(|g| {
                    g.iter()
                        .filter(|&&j| j >= offset)
                        .map(|&j| j - offset)
                        .collect()
                })
                .filter(|g: &Vec<usize>| !g.is_empty())
                .collect();
            flat.push(self.collapse_shape(v, &own)?);
        }
        let to: Vec<u64> = groups
            .iter()
            .map(|g| g.iter().map(|&j| od[j]).product())
            .collect();
        let ty = TensorType::fixed(out.elem, &to);
        let refs: Vec<&Val> = flat.iter().collect();
        let r = self.plain_elementwise(&refs, &ty, f)?;
        self.expand_shape(&Val { name: r, ty }, groups, out)
    }

    /// An "index" generic: a result of type `out` whose element at coordinates `idx`
    /// (`index` values, from `linalg.index`) is `f(idx)`; `f` may read any tensor with
    /// [`Body::extract`].
    pub fn index_generic(
        &mut self,
        out: &TensorType,
        f: impl FnOnce(&mut Body, &[String]) -> LResult<String>,
    ) -> LResult<String> {
        let od = dims(out)?;
        let its = vec!["parallel"; od.len()];
        let r = self.generic(
            &[],
            &[(out.clone(), identity_map(od.len()), None)],
            &its,
            |b, _| {
                let idx: Vec<String> = (0..od.len())
                    .map(|k| b.assign(format!("linalg.index {k} : index")))
                    .collect();
                Ok(vec![f(b, &idx)?])
            },
        )?;
        Ok(r.into_iter().next().unwrap_or_default())
    }

    /// `tensor.extract %t[idx...]`.
    pub fn extract(&mut self, t: &Val, idx: &[String]) -> LResult<String> {
        let ty = tensor_ty(&t.ty)?;
        Ok(self.assign(format!(
            "tensor.extract {}[{}] : {ty}",
            t.name,
            idx.join(", ")
        )))
    }

    /// `tensor.insert_slice piece into dest[offsets]` at unit strides, the piece's sizes.
    pub fn insert_slice(&mut self, piece: &Val, dest: &Val, offsets: &[u64]) -> LResult<Val> {
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        let sizes = dims(&piece.ty)?;
        let name = self.assign(format!(
            "tensor.insert_slice {} into {}[{}] [{}] [{}] : {} into {}",
            piece.name,
            dest.name,
            list(offsets),
            list(&sizes),
            list(&vec![1; sizes.len()]),
            tensor_ty(&piece.ty)?,
            tensor_ty(&dest.ty)?
        ));
        Ok(Val {
            name,
            ty: dest.ty.clone(),
        })
    }

    /// `tensor.extract_slice x[offsets] [sizes] [strides]` of type `to` (of lower rank than
    /// `x` for a rank-reducing slice): a view.
    pub fn extract_slice(
        &mut self,
        x: &Val,
        offsets: &[u64],
        sizes: &[u64],
        strides: &[u64],
        to: &TensorType,
    ) -> LResult<Val> {
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        let name = self.assign(format!(
            "tensor.extract_slice {}[{}] [{}] [{}] : {} to {}",
            x.name,
            list(offsets),
            list(sizes),
            list(strides),
            tensor_ty(&x.ty)?,
            tensor_ty(to)?
        ));
        Ok(Val {
            name,
            ty: to.clone(),
        })
    }

    /// An `index` from an integer scalar of element type `e` (sign- or zero-extended).
    pub fn index_of(&mut self, v: &str, e: ElemType) -> String {
        let op = if matches!(e, ElemType::U8 | ElemType::Bool) {
            "arith.index_castui"
        } else {
            "arith.index_cast"
        };
        self.assign(format!("{op} {v} : {} to index", elem(e)))
    }

    /// `a + b` on indices (`b` a constant).
    pub fn add_index(&mut self, a: &str, b: i64) -> String {
        if b == 0 {
            return a.to_string();
        }
        let c = self.index(b);
        self.assign(format!("arith.addi {a}, {c} : index"))
    }

    /// `a * b` on indices (`b` a constant).
    pub fn mul_index(&mut self, a: &str, b: i64) -> String {
        if b == 1 {
            return a.to_string();
        }
        let c = self.index(b);
        self.assign(format!("arith.muli {a}, {c} : index"))
    }
}

/// An MLIR string literal: `"..."`, with `"`, `\\` and every byte outside printable ASCII
/// escaped as `\\XX`, as MLIR reads them back.
pub fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => q.push_str("\\22"),
            '\\' => q.push_str("\\5C"),
            c if c.is_ascii_graphic() || c == ' ' => q.push(c),
            c => {
                let mut buf = [0u8; 4];
                for byte in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(q, "\\{byte:02X}");
                }
            }
        }
    }
    q.push('"');
    q
}

/// The literal of a scalar constant of element type `e` (without the type).
pub fn scalar_literal(e: ElemType, x: f64) -> String {
    match e {
        ElemType::F32 => format!("0x{:08X}", (x as f32).to_bits()),
        ElemType::F64 => format!("0x{:016X}", x.to_bits()),
        ElemType::F16 => format!("0x{:04X}", half::f16::from_f64(x).to_bits()),
        ElemType::BF16 => format!("0x{:04X}", half::bf16::from_f64(x).to_bits()),
        ElemType::Bool => (if x != 0.0 { "true" } else { "false" }).to_string(),
        ElemType::U8 => format!("{}", (x as i64 as u8) as i8),
        ElemType::I8 => format!("{}", x as i64 as i8),
        ElemType::I16 => format!("{}", x as i64 as i16),
        ElemType::I32 => format!("{}", x as i64 as i32),
        ElemType::I64 => {
            if x >= i64::MAX as f64 {
                format!("{}", i64::MAX)
            } else {
                format!("{}", x as i64)
            }
        }
    }
}
