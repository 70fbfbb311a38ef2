//! Contractions: `matmul` (numpy semantics: 1-D promotion, broadcast batch axes) and
//! `gemm` as `linalg.generic` reductions; convolutions and `einsum`.
//!
//! A convolution is one `linalg.generic` with parallel loops over the result
//! `[N, M, O...]` and reduction loops over the input channels of the group and the kernel
//! taps, reading the input through `o * stride + k * dilation` (the group's channel through
//! `(m floordiv M/groups) * C/groups + c`), except two forms the CPU schedule makes fast:
//! an ungrouped `f32` one is an im2col product ([`im2col`]) and a depthwise one sums its
//! taps' windows without reduction loops ([`depthwise`]; a 2-D one with short rows as one
//! row per channel, [`FlatGrid`]), in the same order. Padding is
//! materialized first ([`spread`]: a zero-filled copy just large enough for every window).
//! A transposed convolution is the
//! convolution (stride 1) of the input spread out by its strides and padded by
//! `dilation * (K - 1) - pad_begin`, with the kernel flipped and its channel axes swapped per
//! group. 16-bit floats accumulate in f32, as the interpreter computes them.

use tessera_ir::{BinaryOp, ConvAttrs, ElemType, Op, TensorType};

use super::body::{Body, In, LResult, Val, affine_map, dims, err, identity_map, tensor_ty};
use super::elementwise;

/// Lowers a contraction op; `panels`: its `B` (a matmul's or an untransposed gemm's second
/// operand, `[K, N]`) is a weight packed into panels ([`tessera_ir::panels`]).
pub fn lower(
    b: &mut Body,
    op: &Op,
    args: &[Val],
    results: &[TensorType],
    panels: bool,
) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::MatMul => Ok(vec![matmul(b, &args[0], &args[1], out, panels)?]),
        Op::Gemm {
            alpha,
            beta,
            trans_a,
            trans_b,
        } => gemm(b, args, out, *alpha, *beta, *trans_a, *trans_b, panels).map(|r| vec![r]),
        Op::Conv(attrs) => Ok(vec![conv(b, args, attrs, out)?]),
        Op::ConvTranspose {
            conv,
            output_padding: _,
        } => Ok(vec![conv_transpose(b, args, conv, out)?]),
        Op::Einsum { equation } => Ok(vec![einsum(b, args, equation, out)?]),
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// The accumulator type of a contraction on `e` (f32 for 16-bit floats).
pub fn acc_type(e: ElemType) -> ElemType {
    match e {
        ElemType::F16 | ElemType::BF16 => ElemType::F32,
        e => e,
    }
}

/// The type of a `[K, N]` `f32` weight packed into panels of `p` columns
/// ([`tessera_ir::panels`]): `[ceil(N / p), K, p]`.
pub fn panels_type(k: u64, n: u64, p: u64) -> TensorType {
    TensorType::fixed(ElemType::F32, &tessera_ir::panels::dims(k, n, p))
}

/// `a @ b` with numpy semantics, result type `out`; `panels`: `b` is packed
/// ([`tessera_ir::panels`]).
pub fn matmul(b: &mut Body, x: &Val, y: &Val, out: &TensorType, panels: bool) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let od = dims(out)?;
    if panels {
        let r = od.len();
        let m_axis = r - 2;
        let x_exprs = batch_exprs(&xd, &od, m_axis, [format!("d{m_axis}"), format!("d{r}")]);
        return contract_panels(b, x, y, out, x_exprs);
    }
    let yd = dims(&y.ty)?;
    // Loops: the result's axes, then k. A 1-D operand has no row (x) or column (y) axis in
    // the result.
    let r = od.len();
    let k = format!("d{r}");
    // Result axes: [batch..., m, n] (m absent if x is 1-D, n absent if y is 1-D).
    let x_exprs: Vec<String> = if xd.len() == 1 {
        vec![k.clone()]
    } else {
        let m_axis = if yd.len() == 1 { r - 1 } else { r - 2 };
        batch_exprs(&xd, &od, m_axis, [format!("d{m_axis}"), k.clone()])
    };
    let y_exprs: Vec<String> = if yd.len() == 1 {
        vec![k.clone()]
    } else {
        let ob = if xd.len() == 1 { r - 1 } else { r - 2 };
        batch_exprs(&yd, &od, ob, [k.clone(), format!("d{}", r - 1)])
    };
    contract(b, x, y, out, x_exprs, y_exprs, r)
}

/// A matmul operand's index expressions: its batch axes (all but its last two) read the
/// result's batch axes, which end before axis `ob` (an extent of 1 broadcast against a larger
/// one reads index 0), then `tail` for its two matrix axes.
fn batch_exprs(d: &[u64], od: &[u64], ob: usize, tail: [String; 2]) -> Vec<String> {
    let batch = d.len() - 2;
    let mut e: Vec<String> = (0..batch)
        .map(|i| {
            let ra = ob - batch + i;
            if d[i] == 1 && od[ra] != 1 {
                "0".to_string()
            } else {
                format!("d{ra}")
            }
        })
        .collect();
    e.extend(tail);
    e
}

/// `out[d0..d(r-1)] = sum_k x[x_exprs] * y[y_exprs]` over one reduction loop `d<r>`.
fn contract(
    b: &mut Body,
    x: &Val,
    y: &Val,
    out: &TensorType,
    x_exprs: Vec<String>,
    y_exprs: Vec<String>,
    r: usize,
) -> LResult<String> {
    let e = out.elem;
    let acc = acc_type(e);
    let acc_ty = out.with_elem(acc);
    let init = b.filled(&acc_ty, 0.0)?;
    // Loop order: the result's axes with the reduction just before the last one (`i, k, j`
    // for a matmul), so the innermost loop walks the result's and `y`'s rows contiguously and
    // LLVM vectorizes it; the maps are written with `k` as `d<r>` and renamed here.
    // Only when `y`'s innermost index is that last axis (not for a transposed `y`, whose rows
    // run along `k`: there `i, j, k` reads both operands contiguously).
    let reorder = r > 0 && y_exprs.last() == Some(&format!("d{}", r - 1));
    let swap = |e: &String| -> String {
        if !reorder {
            return e.clone();
        }
        let (last, k) = (format!("d{}", r - 1), format!("d{r}"));
        if *e == last {
            k
        } else if *e == k {
            last
        } else {
            e.clone()
        }
    };
    let x_exprs: Vec<String> = x_exprs.iter().map(swap).collect();
    let y_exprs: Vec<String> = y_exprs.iter().map(swap).collect();
    let out_exprs: Vec<String> = (0..r).map(|i| swap(&format!("d{i}"))).collect();
    let reduction = if reorder { r - 1 } else { r };
    let res = multiply_accumulate(
        b,
        x,
        y,
        init,
        &acc_ty,
        [&x_exprs, &y_exprs, &out_exprs],
        reduction,
    )?;
    if acc == e {
        Ok(res.name)
    } else {
        b.elementwise(&[&res], out, |b, s| Ok(elementwise::cast(b, acc, e, &s[0])))
    }
}

/// The generic `acc[exprs[2]] += x[exprs[0]] * y[exprs[1]]` (each operand cast to `acc`'s
/// element type) from `init`, over one loop per expression of `exprs[2]` and one more, of
/// which loop `reduction` sums.
fn multiply_accumulate(
    b: &mut Body,
    x: &Val,
    y: &Val,
    init: String,
    acc: &TensorType,
    exprs: [&[String]; 3],
    reduction: usize,
) -> LResult<Val> {
    let loops = exprs[2].len() + 1;
    let mut its = vec!["parallel"; loops];
    its[reduction] = "reduction";
    let ins = [
        In {
            val: x,
            map: affine_map(loops, exprs[0]),
        },
        In {
            val: y,
            map: affine_map(loops, exprs[1]),
        },
    ];
    let e = acc.elem;
    let res = b.generic(
        &ins,
        &[(acc.clone(), affine_map(loops, exprs[2]), Some(init))],
        &its,
        |b, a| {
            let p = elementwise::cast(b, x.ty.elem, e, &a[0]);
            let q = elementwise::cast(b, y.ty.elem, e, &a[1]);
            let m = elementwise::binary(b, &BinaryOp::Mul, e, &p, &q)?;
            Ok(vec![elementwise::binary(b, &BinaryOp::Add, e, &a[2], &m)?])
        },
    )?;
    Ok(Val {
        name: res[0].clone(),
        ty: acc.clone(),
    })
}

/// `out = sum_k x[x_exprs] * y_panels[n / p, k, n % p]`, the product with a weight packed
/// into panels of `p` columns ([`tessera_ir::panels`]), `f32`. `x_exprs` index `x` by the result's
/// axes but the last (`d0 ..`) and `k` as `d<r>` (`r` the result's rank).
///
/// The product is a generic over the result's axes but `n`, then the panel `j`, the column
/// `c` in it and `k` (`d<r-1>`, `d<r>`, `d<r+1>`), into `[panels, .., p]` (the panel first,
/// then the result's axes but `n`, then `c`), which the schedule tiles as a contraction
/// whose `n` is `c` and whose batch loop is the panel: each step of `k` reads one run of `p`
/// floats of the panel. A copy then reads column `n` of the result at `[n floordiv p, ..,
/// n mod p]`. Each element sums the same products in the same order of `k` as the unpacked
/// product.
fn contract_panels(
    b: &mut Body,
    x: &Val,
    y: &Val,
    out: &TensorType,
    x_exprs: Vec<String>,
) -> LResult<String> {
    let od = dims(out)?;
    let yd = dims(&y.ty)?;
    let r = od.len();
    if out.elem != ElemType::F32 || x.ty.elem != ElemType::F32 || yd.len() != 3 || r < 2 {
        return err("a weight packed into panels needs an f32 product of rank 2 or more");
    }
    let (panels, p) = (yd[0], yd[2]);
    let (k_old, k) = (format!("d{r}"), format!("d{}", r + 1));
    let x_exprs: Vec<String> = x_exprs
        .into_iter()
        .map(|e| if e == k_old { k.clone() } else { e })
        .collect();
    let y_exprs = [format!("d{}", r - 1), k.clone(), format!("d{r}")];
    let mut c_exprs = vec![format!("d{}", r - 1)];
    c_exprs.extend((0..r - 1).map(|i| format!("d{i}")));
    c_exprs.push(format!("d{r}"));
    let mut c_dims = vec![panels];
    c_dims.extend(&od[..r - 1]);
    c_dims.push(p);
    let c_ty = TensorType::fixed(ElemType::F32, &c_dims);
    let init = b.filled(&c_ty, 0.0)?;
    let c = multiply_accumulate(b, x, y, init, &c_ty, [&x_exprs, &y_exprs, &c_exprs], r + 1)?;
    let n = format!("d{}", r - 1);
    let mut read = vec![format!("{n} floordiv {p}")];
    read.extend((0..r - 1).map(|i| format!("d{i}")));
    read.push(format!("{n} mod {p}"));
    let res = b.generic(
        &[In {
            val: &c,
            map: affine_map(r, &read),
        }],
        &[(out.clone(), identity_map(r), None)],
        &vec!["parallel"; r],
        |_, a| Ok(vec![a[0].clone()]),
    )?;
    Ok(res[0].clone())
}

#[allow(clippy::too_many_arguments)]
fn gemm(
    b: &mut Body,
    args: &[Val],
    out: &TensorType,
    alpha: f64,
    beta: f64,
    ta: bool,
    tb: bool,
    panels: bool,
) -> LResult<String> {
    let xe = if ta { ["d2", "d0"] } else { ["d0", "d2"] };
    let ye = if tb { ["d1", "d2"] } else { ["d2", "d1"] };
    let prod = if panels && !tb {
        contract_panels(
            b,
            &args[0],
            &args[1],
            out,
            xe.iter().map(|s| s.to_string()).collect(),
        )?
    } else {
        contract(
            b,
            &args[0],
            &args[1],
            out,
            xe.iter().map(|s| s.to_string()).collect(),
            ye.iter().map(|s| s.to_string()).collect(),
            2,
        )?
    };
    let e = out.elem;
    let p = Val {
        name: prod,
        ty: out.clone(),
    };
    let mut ins = vec![&p];
    if let Some(c) = args.get(2) {
        ins.push(c);
    }
    let has_c = ins.len() == 2;
    if alpha == 1.0 && !has_c {
        return Ok(p.name);
    }
    b.elementwise(&ins, out, |b, s| {
        let mut v = s[0].clone();
        if alpha != 1.0 {
            let a = b.scalar(e, alpha);
            v = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, e, &v, &a)?;
        }
        if has_c {
            let mut c = s[1].clone();
            if beta != 1.0 {
                let bt = b.scalar(e, beta);
                c = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, e, &c, &bt)?;
            }
            v = elementwise::binary(b, &tessera_ir::BinaryOp::Add, e, &v, &c)?;
        }
        Ok(v)
    })
}

/// `x * c` as an affine expression term (`dX` alone when `c` is 1).
fn term(d: usize, c: u64) -> String {
    if c == 1 {
        format!("d{d}")
    } else {
        format!("d{d} * {c}")
    }
}

/// An attribute list with its default for an empty list (`n` entries).
fn or_default(v: &[u64], n: usize, default: u64) -> LResult<Vec<u64>> {
    if v.is_empty() {
        Ok(vec![default; n])
    } else if v.len() == n {
        Ok(v.to_vec())
    } else {
        err(format!("attribute has {} entries, expected {n}", v.len()))
    }
}

/// Narrows an f64 or f32 scalar to `to`, through f32 for 16-bit floats (the interpreter
/// computes those in f32 and rounds once more at the end).
pub(super) fn narrow(b: &mut Body, from: ElemType, to: ElemType, v: &str) -> String {
    if from == ElemType::F64 && matches!(to, ElemType::F16 | ElemType::BF16) {
        let w = elementwise::cast(b, from, ElemType::F32, v);
        elementwise::cast(b, ElemType::F32, to, &w)
    } else {
        elementwise::cast(b, from, to, v)
    }
}

/// One axis of [`spread`]: result position `p` reads input index `(p - off) / stride` when
/// that is an integer in the input's extent, else the fill value.
pub(super) struct SpreadAxis {
    /// The axis.
    pub axis: usize,
    /// The result position of input index 0.
    pub off: i64,
    /// The distance between consecutive input elements in the result.
    pub stride: u64,
}

/// A copy of `x` of type `out` (extents may differ only on the `axes` listed) with the input
/// placed per [`SpreadAxis`] and `fill` everywhere else: padding, and the zero-insertion of
/// a transposed convolution.
pub(super) fn spread(
    b: &mut Body,
    x: &Val,
    out: &TensorType,
    axes: &[SpreadAxis],
    fill: f64,
) -> LResult<Val> {
    let xd = dims(&x.ty)?;
    let e = x.ty.elem;
    if axes.iter().any(|a| xd[a.axis] == 0) {
        let name = b.filled(out, fill)?;
        return Ok(Val {
            name,
            ty: out.clone(),
        });
    }
    let od = dims(out)?;
    if axes
        .iter()
        .all(|a| a.stride == 1 && a.off >= 0 && a.off as u64 <= od[a.axis])
    {
        return pad(b, x, out, axes, fill);
    }
    let name = b.index_generic(out, |b, idx| {
        let mut src: Vec<String> = idx.to_vec();
        let mut ok: Option<String> = None;
        let zero = b.index(0);
        let mut and = |b: &mut Body, c: String| {
            ok = Some(match ok.take() {
                None => c,
                Some(p) => b.assign(format!("arith.andi {p}, {c} : i1")),
            });
        };
        for a in axes {
            let u = b.add_index(&idx[a.axis], -a.off);
            let ge = b.assign(format!("arith.cmpi sge, {u}, {zero} : index"));
            and(b, ge);
            let q = if a.stride > 1 {
                let s = b.index(a.stride as i64);
                let r = b.assign(format!("arith.remsi {u}, {s} : index"));
                let m = b.assign(format!("arith.cmpi eq, {r}, {zero} : index"));
                and(b, m);
                b.assign(format!("arith.divsi {u}, {s} : index"))
            } else {
                u
            };
            let d = b.index(xd[a.axis] as i64);
            let lt = b.assign(format!("arith.cmpi slt, {q}, {d} : index"));
            and(b, lt);
            let hi = b.index(xd[a.axis] as i64 - 1);
            let q = b.assign(format!("arith.maxsi {q}, {zero} : index"));
            src[a.axis] = b.assign(format!("arith.minsi {q}, {hi} : index"));
        }
        let v = b.extract(x, &src)?;
        match ok {
            None => Ok(v),
            Some(c) => {
                let f = b.scalar(e, fill);
                Ok(elementwise::pick(b, &c, &v, &f, e))
            }
        }
    })?;
    Ok(Val {
        name,
        ty: out.clone(),
    })
}

/// [`spread`] where every axis has stride 1 and a start in the result: the result's border
/// filled with `fill`, slab by slab, then the part of `x` that lands in it copied into its
/// place (a `linalg.copy` into a slice of the result, which bufferization keeps in place;
/// an identity generic would be folded into the `insert_slice`, a `memref.copy` through
/// the slow strided `memrefCopy`), row by row in loops LLVM vectorizes.
fn pad(b: &mut Body, x: &Val, out: &TensorType, axes: &[SpreadAxis], fill: f64) -> LResult<Val> {
    let xd = dims(&x.ty)?;
    let od = dims(out)?;
    // What of `x` lands in the result: an axis not listed keeps its start, and ends where
    // the result does (trailing input no window reaches is not read).
    let mut keep: Vec<u64> = xd.iter().zip(&od).map(|(&x, &o)| x.min(o)).collect();
    let mut offs = vec![0u64; xd.len()];
    for a in axes {
        offs[a.axis] = a.off as u64;
        keep[a.axis] = xd[a.axis].min(od[a.axis] - offs[a.axis]);
    }
    if keep.contains(&0) {
        return Ok(Val {
            name: b.filled(out, fill)?,
            ty: out.clone(),
        });
    }
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let ones = vec![1u64; xd.len()];
    let part_ty = TensorType::fixed(x.ty.elem, &keep);
    let (pt, ot) = (tensor_ty(&part_ty)?, tensor_ty(out)?);
    let src = if keep == xd {
        x.clone()
    } else {
        b.extract_slice(x, &vec![0; xd.len()], &keep, &ones, &part_ty)?
    };
    // The copy goes through views with a trailing unit axis: a window of the result with the
    // same place as the copy (a stride-1 convolution's centre tap) would otherwise fold to
    // the copy itself, which bufferization may then give a buffer of its own.
    let unit = |d: &[u64]| {
        let mut d = d.to_vec();
        d.push(1);
        d
    };
    let r = xd.len();
    let (out1, part1) = (
        TensorType::fixed(out.elem, &unit(&od)),
        TensorType::fixed(x.ty.elem, &unit(&keep)),
    );
    let (ot1, pt1) = (tensor_ty(&out1)?, tensor_ty(&part1)?);
    let groups = |d: &[u64]| -> (String, String) {
        let mut g: Vec<String> = (0..r - 1).map(|i| format!("[{i}]")).collect();
        g.push(format!("[{}, {}]", r - 1, r));
        (format!("[{}]", g.join(", ")), list(&unit(d)))
    };
    // Only the border is filled, slab by slab (along axis j: below and above the input's
    // place, within it on the axes before j, whole on the axes after): filling all of the
    // result first wrote each element twice (MobileNetV2's padded inputs are up to 5 MB).
    let mut filled1 = b.empty(&out1)?;
    for j in 0..r {
        let ranges = [(0, offs[j]), (offs[j] + keep[j], od[j])];
        for (lo, hi) in ranges {
            if lo >= hi {
                continue;
            }
            let (mut at, mut size) = (Vec::with_capacity(r + 1), Vec::with_capacity(r + 1));
            for i in 0..r {
                let (o, n) = match i.cmp(&j) {
                    std::cmp::Ordering::Less => (offs[i], keep[i]),
                    std::cmp::Ordering::Equal => (lo, hi - lo),
                    std::cmp::Ordering::Greater => (0, od[i]),
                };
                at.push(o);
                size.push(n);
            }
            at.push(0);
            size.push(1);
            let slab_ty = TensorType::fixed(out.elem, &size);
            let st = tensor_ty(&slab_ty)?;
            let place = format!(
                "[{}] [{}] [{}]",
                list(&at),
                list(&size),
                list(&vec![1; r + 1])
            );
            let slab = b.assign(format!(
                "tensor.extract_slice {filled1}{place} : {ot1} to {st}"
            ));
            let c = b.scalar(out.elem, fill);
            let slab = b.assign(format!(
                "linalg.fill ins({c} : {}) outs({slab} : {st}) -> {st}",
                super::body::elem(out.elem)
            ));
            filled1 = b.assign(format!(
                "tensor.insert_slice {slab} into {filled1}{place} : {st} into {ot1}"
            ));
        }
    }
    let (g, shape) = groups(&keep);
    let src1 = b.assign(format!(
        "tensor.expand_shape {} {g} output_shape [{shape}] : {pt} into {pt1}",
        src.name
    ));
    let place = format!(
        "[{}, 0] [{}, 1] [{}, 1]",
        list(&offs),
        list(&keep),
        list(&ones)
    );
    let dst = b.assign(format!(
        "tensor.extract_slice {filled1}{place} : {ot1} to {pt1}"
    ));
    let copied = b.assign(format!(
        "linalg.copy ins({src1} : {pt1}) outs({dst} : {pt1}) -> {pt1}"
    ));
    let placed = b.assign(format!(
        "tensor.insert_slice {copied} into {filled1}{place} : {pt1} into {ot1}"
    ));
    let name = b.assign(format!(
        "tensor.collapse_shape {placed} {g} : {ot1} into {ot}"
    ));
    Ok(Val {
        name,
        ty: out.clone(),
    })
}

/// The window geometry of a convolution or pooling over `s` spatial axes (empty attribute
/// lists take their defaults).
pub(super) struct Geom {
    /// Stride per spatial axis.
    pub strides: Vec<u64>,
    /// Dilation per spatial axis.
    pub dils: Vec<u64>,
    /// Begin pads, then end pads.
    pub pads: Vec<u64>,
}

impl Geom {
    /// The geometry from attribute lists.
    pub fn new(strides: &[u64], pads: &[u64], dils: &[u64], s: usize) -> LResult<Geom> {
        Ok(Geom {
            strides: or_default(strides, s, 1)?,
            dils: or_default(dils, s, 1)?,
            pads: or_default(pads, 2 * s, 0)?,
        })
    }

    /// The input coordinate of spatial axis `j` read by output loop `o` and tap loop `k`:
    /// `o * stride + k * dilation` (on an input padded by the begin pads).
    pub fn tap_expr(&self, j: usize, o: usize, k: usize) -> String {
        format!("{} + {}", term(o, self.strides[j]), term(k, self.dils[j]))
    }
}

/// `x` padded with `fill` on its spatial axes (from 2) so that windows of `k` taps per
/// [`Geom`] produce `o` outputs: the result extent is exactly what the last window reaches.
/// `x` itself when no padding is needed.
pub(super) fn pad_for_windows(
    b: &mut Body,
    x: &Val,
    k: &[u64],
    o: &[u64],
    g: &Geom,
    fill: f64,
) -> LResult<Val> {
    let (strides, dils, pb) = (&g.strides, &g.dils, &g.pads);
    let xd = dims(&x.ty)?;
    let mut pd = xd.clone();
    let mut axes = Vec::new();
    for j in 0..k.len() {
        let need = if o[j] == 0 || k[j] == 0 {
            0
        } else {
            (o[j] - 1) * strides[j] + (k[j] - 1) * dils[j] + 1
        };
        pd[2 + j] = need;
        if pb[j] != 0 || need > xd[2 + j] {
            axes.push(SpreadAxis {
                axis: 2 + j,
                off: pb[j] as i64,
                stride: 1,
            });
        }
    }
    if axes.is_empty() {
        // No padding; trailing input no window reaches is just not read.
        return Ok(x.clone());
    }
    let t = TensorType::fixed(x.ty.elem, &pd);
    spread(b, x, &t, &axes, fill)
}

/// The core of a convolution: `out[n, m, o...] = sum_{c, k...} x[n, g(m) * cg + c,
/// o * stride + k * dil] * w[m, c, k...] (+ bias[m])` on an input already padded (or, for
/// a depthwise one of the flat form, `flat`, padded as its flat rows).
#[allow(clippy::too_many_arguments)]
fn conv_core(
    b: &mut Body,
    x: &Val,
    w: &Val,
    bias: Option<&Val>,
    g: &Geom,
    groups: u64,
    out: &TensorType,
    flat: Option<&FlatGrid>,
) -> LResult<String> {
    let wd = dims(&w.ty)?;
    let od = dims(out)?;
    let (m, cg) = (wd[0], wd[1]);
    if groups == 0 || m % groups != 0 {
        return err(format!(
            "{m} output channels do not split into {groups} groups"
        ));
    }
    let mg = m / groups;
    let e = out.elem;
    let acc = acc_type(e);
    let acc_ty = out.with_elem(acc);
    let f32s = [&x.ty, &w.ty, out].iter().all(|t| t.elem == ElemType::F32);
    let r = if is_depthwise(&wd, &od, groups) {
        depthwise(b, x, w, g, &wd[2..], &acc_ty, flat)?
    } else if groups == 1 && f32s && !od.contains(&0) && !wd.contains(&0) {
        im2col(b, x, w, g, &acc_ty)?
    } else {
        grouped(b, x, w, g, cg, mg, groups, &acc_ty)?
    };
    let res = Val {
        name: r,
        ty: acc_ty,
    };
    if bias.is_none() && acc == e {
        return Ok(res.name);
    }
    // On the product's own shape where it has one (`[N, M, pixels]`, see
    // `Body::elementwise`), the bias read by channel (`(d1)`: vectorized in a tile of the
    // product, a vector of channels broadcast along the pixels; a `[1, M, 1]` operand read
    // with a broadcast map instead was lowered lane by lane through the stack, the CNN
    // 0.056 -> 0.065 ms).
    let flat = b
        .expansion(&res)
        .filter(|e| e.groups.get(1).is_some_and(|g| g == &[1]))
        .cloned();
    let (res, res_out) = match &flat {
        Some(x) => (x.source.clone(), x.source.ty.with_elem(e)),
        None => (res, out.clone()),
    };
    let rank = res.ty.rank();
    let mut ins = vec![In {
        val: &res,
        map: identity_map(rank),
    }];
    if let Some(bv) = bias {
        ins.push(In {
            val: bv,
            map: affine_map(rank, &["d1".to_string()]),
        });
    }
    let be = bias.map(|v| v.ty.elem);
    let r = b.generic(
        &ins,
        &[(res_out.clone(), identity_map(rank), None)],
        &vec!["parallel"; rank],
        |b, a| {
            let mut v = a[0].clone();
            if let Some(be) = be {
                let bb = elementwise::cast(b, be, acc, &a[1]);
                v = elementwise::binary(b, &BinaryOp::Add, acc, &v, &bb)?;
            }
            Ok(vec![elementwise::cast(b, acc, e, &v)])
        },
    )?;
    match flat {
        Some(x) => {
            let r = Val {
                name: r[0].clone(),
                ty: res_out,
            };
            b.expand_shape(&r, &x.groups, out)
        }
        None => Ok(r[0].clone()),
    }
}

/// Whether a convolution of weight `wd` and result `od` in `groups` groups is lowered as
/// [`depthwise`]: one input channel per output channel, at most [`DEPTHWISE_TAPS`] taps.
/// (A result with no elements keeps the reduction form: a window's slice would start past
/// the end of an empty input.)
fn is_depthwise(wd: &[u64], od: &[u64], groups: u64) -> bool {
    let taps: u64 = wd[2..].iter().product();
    wd[1] == 1
        && groups != 0
        && wd[0] / groups == 1
        && wd[0].is_multiple_of(groups)
        && (1..=DEPTHWISE_TAPS).contains(&taps)
        && !od.contains(&0)
}

/// Convolutions of more taps than this are not unrolled by [`depthwise`].
pub(super) const DEPTHWISE_TAPS: u64 = 64;

/// The accumulation of a grouped convolution into `acc_ty` (see [`conv_core`]): parallel
/// loops over the result, reduction loops over the group's input channels and the taps.
#[allow(clippy::too_many_arguments)]
fn grouped(
    b: &mut Body,
    x: &Val,
    w: &Val,
    g: &Geom,
    cg: u64,
    mg: u64,
    groups: u64,
    acc_ty: &TensorType,
) -> LResult<String> {
    let s = acc_ty.rank() - 2;
    // Loops: n, m, o_0..o_{s-1}, c, k_0..k_{s-1}.
    let nl = 2 + s + 1 + s;
    let c_loop = 2 + s;
    let chan = if groups == 1 {
        format!("d{c_loop}")
    } else {
        format!("(d1 floordiv {mg}) * {cg} + d{c_loop}")
    };
    let mut x_exprs = vec!["d0".to_string(), chan];
    for j in 0..s {
        x_exprs.push(g.tap_expr(j, 2 + j, c_loop + 1 + j));
    }
    let mut w_exprs = vec!["d1".to_string(), format!("d{c_loop}")];
    w_exprs.extend((0..s).map(|j| format!("d{}", c_loop + 1 + j)));
    let o_exprs: Vec<String> = (0..2 + s).map(|i| format!("d{i}")).collect();
    let mut its = vec!["parallel"; 2 + s];
    its.extend(vec!["reduction"; 1 + s]);
    let acc = acc_ty.elem;
    let init = b.filled(acc_ty, 0.0)?;
    let (xe, we) = (x.ty.elem, w.ty.elem);
    let r = b.generic(
        &[
            In {
                val: x,
                map: affine_map(nl, &x_exprs),
            },
            In {
                val: w,
                map: affine_map(nl, &w_exprs),
            },
        ],
        &[(acc_ty.clone(), affine_map(nl, &o_exprs), Some(init))],
        &its,
        |b, a| {
            let p = elementwise::cast(b, xe, acc, &a[0]);
            let q = elementwise::cast(b, we, acc, &a[1]);
            let m = elementwise::binary(b, &BinaryOp::Mul, acc, &p, &q)?;
            Ok(vec![elementwise::binary(
                b,
                &BinaryOp::Add,
                acc,
                &a[2],
                &m,
            )?])
        },
    )?;
    Ok(r[0].clone())
}

/// The accumulation of an ungrouped `f32` convolution into `acc_ty` as a product: the
/// input's patches copied into columns (`cols[n, c, k..., o...] = x[n, c, o * stride + k *
/// dil]`, one generic of affine reads whose innermost loop runs along a row of the input),
/// viewed as `[N, C·K, O]`, times the filter viewed as `[M, C·K]`: `out[n, m, o] = sum_r
/// w[m, r] * cols[n, r, o]`, a contraction the schedule tiles with `o` (all output pixels)
/// as its vector loop. A convolution whose every window is one pixel of the input in place
/// (1×1, stride 1, no padding) reads the input itself as its columns. Each element sums its
/// products in the order of [`grouped`]'s reduction loops (`c`, then the taps).
fn im2col(b: &mut Body, x: &Val, w: &Val, g: &Geom, acc_ty: &TensorType) -> LResult<String> {
    let (xd, wd, od) = (dims(&x.ty)?, dims(&w.ty)?, dims(acc_ty)?);
    let s = od.len() - 2;
    let (n, c, m) = (od[0], xd[1], od[1]);
    let taps: u64 = wd[2..].iter().product();
    let pixels: u64 = od[2..].iter().product();
    let in_place = taps == 1 && g.strides.iter().all(|&t| t == 1) && xd[2..] == od[2..];
    let cols = if in_place {
        x.clone()
    } else {
        // Loops n, c, k_0..k_{s-1}, o_0..o_{s-1}.
        let nl = 2 + 2 * s;
        let mut x_exprs = vec!["d0".to_string(), "d1".to_string()];
        x_exprs.extend((0..s).map(|j| g.tap_expr(j, 2 + s + j, 2 + j)));
        let mut cd = vec![n, c];
        cd.extend(&wd[2..]);
        cd.extend(&od[2..]);
        let ty = TensorType::fixed(x.ty.elem, &cd);
        let r = b.generic(
            &[In {
                val: x,
                map: affine_map(nl, &x_exprs),
            }],
            &[(ty.clone(), identity_map(nl), None)],
            &vec!["parallel"; nl],
            |_, a| Ok(vec![a[0].clone()]),
        )?;
        Val {
            name: r[0].clone(),
            ty,
        }
    };
    // The columns as [N, C·K, O]: the taps follow c, the output pixels follow them.
    let rank = cols.ty.rank();
    let cols = b.collapse_shape(
        &cols,
        &[vec![0], (1..rank - s).collect(), (rank - s..rank).collect()],
    )?;
    let filter = b.collapse_shape(w, &[vec![0], (1..2 + s).collect()])?;
    let flat = TensorType::fixed(acc_ty.elem, &[n, m, pixels]);
    let prod = contract(
        b,
        &filter,
        &cols,
        &flat,
        vec!["d1".into(), "d3".into()],
        vec!["d0".into(), "d3".into(), "d2".into()],
        3,
    )?;
    let prod = Val {
        name: prod,
        ty: flat,
    };
    b.expand_shape(&prod, &[vec![0], vec![1], (2..2 + s).collect()], acc_ty)
}

/// The taps of a kernel of extents `k`, each as its index along every spatial axis, the
/// last axis fastest.
pub(super) fn taps(k: &[u64]) -> Vec<Vec<u64>> {
    let mut taps: Vec<Vec<u64>> = vec![Vec::new()];
    for &kj in k {
        taps = taps
            .into_iter()
            .flat_map(|t| {
                (0..kj).map(move |i| {
                    let mut t = t.clone();
                    t.push(i);
                    t
                })
            })
            .collect();
    }
    taps
}

/// The input of a windowed op (a max pooling's taps, a depthwise convolution), padded:
/// as it is ([`pad_for_windows`]), or with its last axis deinterleaved in phases
/// ([`phases`]; max poolings only: see `schedule`'s module doc).
pub(super) enum Source {
    /// `[N, C, D...]`, padded.
    Padded(Val),
    /// `[N, C, D..., s, ceil(W / s)]`: the padded input's last axis in `s` phases.
    Phases(Val, u64),
}

/// `x` padded for windows of extents `k` over a result of spatial extents `o`, as
/// [`Source::Phases`] where the last axis has a stride of 2 or more (`f32` elements, every
/// extent nonzero) and as [`Source::Padded`] otherwise.
pub(super) fn window_source(
    b: &mut Body,
    x: &Val,
    k: &[u64],
    o: &[u64],
    g: &Geom,
    fill: f64,
) -> LResult<Source> {
    let last = g.strides.len().saturating_sub(1);
    let stride = g.strides.get(last).copied().unwrap_or(1);
    let xd = dims(&x.ty)?;
    if stride > 1
        && x.ty.elem == ElemType::F32
        && xd.len() == last + 3
        && !o.contains(&0)
        && !k.contains(&0)
        && !xd.contains(&0)
    {
        return Ok(Source::Phases(phases(b, x, k, o, g, fill)?, stride));
    }
    Ok(Source::Padded(pad_for_windows(b, x, k, o, g, fill)?))
}

/// Each tap's window of the input: the strided slice of it that the tap reads for every
/// position of a result of shape `od`, a view. From [`Source::Phases`], a tap at column `c`
/// of each window reads phase `c % s` from column `c / s` at stride 1: its rows are
/// contiguous, and the schedule vectorizes the taps like those of stride 1.
pub(super) fn windows(
    b: &mut Body,
    x: &Source,
    g: &Geom,
    taps: &[Vec<u64>],
    od: &[u64],
) -> LResult<Vec<Val>> {
    let mut steps = vec![1u64; 2];
    steps.extend(&g.strides);
    let (x, stride) = match x {
        Source::Padded(x) => (x, None),
        Source::Phases(p, s) => (p, Some(*s)),
    };
    let slice_ty = TensorType::fixed(x.ty.elem, od);
    let Some(stride) = stride else {
        return taps
            .iter()
            .map(|t| {
                let mut offs = vec![0u64; 2];
                offs.extend(t.iter().enumerate().map(|(j, &kj)| kj * g.dils[j]));
                b.extract_slice(x, &offs, od, &steps, &slice_ty)
            })
            .collect();
    };
    // The phase axis goes in before the last, a unit one in each window.
    let last = g.strides.len() - 1;
    let (before, row) = od.split_at(od.len() - 1);
    let mut sizes = before.to_vec();
    sizes.push(1);
    sizes.extend(row);
    steps.truncate(steps.len() - 1);
    steps.extend([1, 1]);
    // Not rank-reducing: the phase axis is folded into the row by a reshape (MLIR's
    // `expand-strided-metadata` crashed on a rank-reducing slice whose other axes are
    // units too, which would not say which axis goes).
    let unit_ty = TensorType::fixed(x.ty.elem, &sizes);
    let mut groups: Vec<Vec<usize>> = (0..sizes.len() - 2).map(|i| vec![i]).collect();
    groups.push(vec![sizes.len() - 2, sizes.len() - 1]);
    taps.iter()
        .map(|t| {
            let mut offs = vec![0u64; 2];
            offs.extend(t[..last].iter().enumerate().map(|(j, &kj)| kj * g.dils[j]));
            let c = t[last] * g.dils[last];
            offs.extend([c % stride, c / stride]);
            let win = b.extract_slice(x, &offs, &sizes, &steps, &unit_ty)?;
            let v = b.collapse_shape(&win, &groups)?;
            debug_assert_eq!(v.ty, slice_ty);
            Ok(v)
        })
        .collect()
}

/// `x` (`[N, C, D...]`) padded for windows of extents `k` over a result of spatial extents
/// `o` (as [`pad_for_windows`], with `fill`) and deinterleaved along its last axis in `s`
/// phases, `s` its stride: `[N, C, D'..., s, ceil(W' / s)]`, phase `p` at column `c`
/// holding the padded input's column `s * c + p` (a phase's last column past the padded
/// width is not written). One pass over the input, not a padded copy and then its phases:
/// - the border, slab by slab along the leading spatial axes (as [`pad`]) and column by
///   column along the last, filled;
/// - the input's columns before the first that lands on phase 0, and after the last whole
///   group of `s` from there, copied one by one;
/// - the whole groups, last (a slice of a tensor that is no longer empty, which
///   bufferization writes in place), one generic that reads them as `[.., groups, s]` and
///   swaps the last two axes: the schedule vectorizes it, whole vectors read and their
///   lanes shuffled (`schedule::deinterleave`).
fn phases(b: &mut Body, x: &Val, k: &[u64], o: &[u64], g: &Geom, fill: f64) -> LResult<Val> {
    let xd = dims(&x.ty)?;
    let e = x.ty.elem;
    let r = xd.len();
    let sp = r - 2;
    let last = sp - 1;
    let s = g.strides[last];
    // Per spatial axis: the padded extent, where the input starts in it, how much of the
    // input lands in it.
    let need: Vec<u64> = (0..sp)
        .map(|j| (o[j] - 1) * g.strides[j] + (k[j] - 1) * g.dils[j] + 1)
        .collect();
    let lo: Vec<u64> = (0..sp).map(|j| g.pads[j].min(need[j])).collect();
    let keep: Vec<u64> = (0..sp).map(|j| xd[2 + j].min(need[j] - lo[j])).collect();
    let (wp, l, w) = (need[last], lo[last], keep[last]);
    let mut pd = vec![xd[0], xd[1]];
    pd.extend(&need[..last]);
    pd.extend([s, wp.div_ceil(s)]);
    let pt = TensorType::fixed(e, &pd);
    let ones = |n: usize| vec![1u64; n];
    let mut p = Val {
        name: b.empty(&pt)?,
        ty: pt.clone(),
    };
    let fill_block =
        |b: &mut Body, p: &Val, at: &[u64], size: &[u64]| fill_slab(b, p, at, size, fill);
    // Where the input's rows land: every leading axis at its offset, the kept extents.
    let mut inner_at = vec![0u64, 0];
    inner_at.extend(&lo[..last]);
    let mut inner_size = vec![xd[0], xd[1]];
    inner_size.extend(&keep[..last]);
    // The border of the leading spatial axes: below and above the input's place, within
    // it on the axes before, whole on the axes after (the phases and columns too).
    for j in 0..last {
        for (from, to) in [(0, lo[j]), (lo[j] + keep[j], need[j])] {
            if from >= to {
                continue;
            }
            let (mut at, mut size) = (inner_at.clone(), inner_size.clone());
            at[2 + j] = from;
            size[2 + j] = to - from;
            for i in j + 1..last {
                at[2 + i] = 0;
                size[2 + i] = need[i];
            }
            at.extend([0, 0]);
            size.extend([s, pd[r]]);
            p = fill_block(b, &p, &at, &size)?;
        }
    }
    // A column of the padded input, `c`, in the input's rows: where it goes in `p`.
    let column = |c: u64| {
        let (mut at, mut size) = (inner_at.clone(), inner_size.clone());
        at.extend([c % s, c / s]);
        size.extend([1, 1]);
        (at, size)
    };
    for c in (0..l).chain(l + w..wp) {
        let (at, size) = column(c);
        p = fill_block(b, &p, &at, &size)?;
    }
    // The input's columns from which whole groups start on phase 0.
    let first = ((s - l % s) % s).min(w);
    let groups = (w - first) / s;
    let mut xs_at = vec![0u64; r];
    let mut xs_size = inner_size.clone();
    let mut grouping: Vec<Vec<usize>> = (0..r - 1).map(|i| vec![i]).collect();
    grouping.push(vec![r - 1, r]);
    for c in (0..first).chain(first + groups * s..w) {
        xs_at[r - 1] = c;
        xs_size.truncate(r - 1);
        xs_size.push(1);
        let col_ty = TensorType::fixed(e, &xs_size);
        let col = b.extract_slice(x, &xs_at, &xs_size, &ones(r), &col_ty)?;
        let (at, size) = column(c + l);
        let unit_ty = TensorType::fixed(e, &size);
        let col = Val {
            name: b.expand_shape(&col, &grouping, &unit_ty)?,
            ty: unit_ty.clone(),
        };
        let dest = b.extract_slice(&p, &at, &size, &ones(r + 1), &unit_ty)?;
        let ut = tensor_ty(&unit_ty)?;
        let copied = Val {
            name: b.assign(format!(
                "linalg.copy ins({} : {ut}) outs({} : {ut}) -> {ut}",
                col.name, dest.name
            )),
            ty: unit_ty,
        };
        p = b.insert_slice(&copied, &p, &at)?;
    }
    if groups > 0 {
        xs_at[r - 1] = first;
        xs_size.truncate(r - 1);
        xs_size.push(groups * s);
        let main_ty = TensorType::fixed(e, &xs_size);
        let main = b.extract_slice(x, &xs_at, &xs_size, &ones(r), &main_ty)?;
        let mut pairs_d = xs_size[..r - 1].to_vec();
        pairs_d.extend([groups, s]);
        let pairs_ty = TensorType::fixed(e, &pairs_d);
        let pairs = Val {
            name: b.expand_shape(&main, &grouping, &pairs_ty)?,
            ty: pairs_ty,
        };
        let mut at = inner_at.clone();
        at.extend([0, (first + l) / s]);
        let mut size = inner_size.clone();
        size.extend([s, groups]);
        let block_ty = TensorType::fixed(e, &size);
        let block = b.extract_slice(&p, &at, &size, &ones(r + 1), &block_ty)?;
        let mut swapped: Vec<String> = (0..r - 1).map(|i| format!("d{i}")).collect();
        swapped.extend([format!("d{r}"), format!("d{}", r - 1)]);
        let t = b.generic(
            &[In {
                val: &pairs,
                map: affine_map(r + 1, &swapped),
            }],
            &[(block_ty.clone(), identity_map(r + 1), Some(block.name))],
            &vec!["parallel"; r + 1],
            |_, a| Ok(vec![a[0].clone()]),
        )?;
        let t = Val {
            name: t[0].clone(),
            ty: block_ty,
        };
        p = b.insert_slice(&t, &p, &at)?;
    }
    Ok(p)
}

/// The accumulation of a depthwise convolution (one input channel per output channel) into
/// `acc_ty`: parallel loops over the result only, every tap of the kernel (`k`, at most
/// [`DEPTHWISE_TAPS`]) an operand of its own, the tap's window of the input (a strided
/// slice, a view) and the tap's column of the filter (`[M]`, a view), summed from the first
/// product in the order of the reduction loops [`grouped`] runs.
/// The innermost loop then runs along a row of the output and the input (contiguous at
/// stride 1), which the schedule vectorizes (`schedule::depthwise`); the reduction form's
/// innermost loop ran over the kernel's 3 columns. In the flat form (`flat`: `x` is then
/// `[N, C, len]`, see [`FlatGrid`]) the loops are `[N, C, H·W]` and the result is their
/// expansion to `[N, C, H, W]` (so what follows is written on the flat shape too).
fn depthwise(
    b: &mut Body,
    x: &Val,
    w: &Val,
    g: &Geom,
    k: &[u64],
    acc_ty: &TensorType,
    flat: Option<&FlatGrid>,
) -> LResult<String> {
    let s = k.len();
    let taps = taps(k);
    // Each tap's window of the input, a strided slice the shape of the result (a row of
    // each channel in the flat form), and its weights, one per channel: a column of the
    // filter, `[M]`.
    let od = dims(acc_ty)?;
    let (windows, grid_ty) = match flat {
        Some(f) => {
            let gd = [od[0], od[1], f.pixels];
            let ty = TensorType::fixed(x.ty.elem, &gd);
            let wins = taps
                .iter()
                .map(|t| b.extract_slice(x, &[0, 0, f.start(t, g)], &gd, &[1; 3], &ty))
                .collect::<LResult<Vec<_>>>()?;
            (wins, TensorType::fixed(acc_ty.elem, &gd))
        }
        None => (
            windows(b, &Source::Padded(x.clone()), g, &taps, &od)?,
            acc_ty.clone(),
        ),
    };
    let nl = grid_ty.rank();
    // In the flat form, the column masks: per column shift that moves some column out of
    // the row, which of the row's elements the tap reads from its own row (1) or wrapped
    // from a neighbour's (0, read as zero).
    // `tap_mask`: each tap's mask among `masks`, if it has one.
    let mut shifts: Vec<i64> = Vec::new();
    let mut masks = Vec::new();
    let mut tap_mask: Vec<Option<usize>> = vec![None; taps.len()];
    if let Some(f) = flat {
        for (t, m) in taps.iter().zip(&mut tap_mask) {
            let c = f.shift(t, g);
            if c == 0 {
                continue;
            }
            *m = Some(match shifts.iter().position(|&s| s == c) {
                Some(i) => i,
                None => {
                    shifts.push(c);
                    masks.push(f.mask(b, c)?);
                    masks.len() - 1
                }
            });
        }
    }
    let wd = dims(&w.ty)?;
    let col_ty = TensorType::fixed(w.ty.elem, &[wd[0]]);
    let mut col_sizes = vec![wd[0]];
    col_sizes.extend(vec![1; 1 + s]);
    let mut columns = Vec::with_capacity(taps.len());
    for t in &taps {
        let mut offs = vec![0u64; 2];
        offs.extend(t);
        columns.push(b.extract_slice(w, &offs, &col_sizes, &vec![1; 2 + s], &col_ty)?);
    }
    let mut ins = Vec::with_capacity(2 * taps.len() + masks.len());
    for (win, col) in windows.iter().zip(&columns) {
        ins.push(In {
            val: win,
            map: identity_map(nl),
        });
        ins.push(In {
            val: col,
            map: affine_map(nl, &["d1".to_string()]),
        });
    }
    for m in &masks {
        ins.push(In {
            val: m,
            map: affine_map(nl, &["d2".to_string()]),
        });
    }
    let acc = acc_ty.elem;
    let (xe, we) = (x.ty.elem, w.ty.elem);
    let n = taps.len();
    let r = b.generic(
        &ins,
        &[(grid_ty.clone(), identity_map(nl), None)],
        &vec!["parallel"; nl],
        |b, a| {
            // Each mask's lanes to read as zero.
            let zero = (!masks.is_empty()).then(|| b.scalar(xe, 0.0));
            let wrapped: Vec<String> = (0..masks.len())
                .map(|i| {
                    let z = zero.as_deref().unwrap_or_default();
                    b.assign(format!("arith.cmpf oeq, {}, {z} : f32", a[2 * n + i]))
                })
                .collect();
            let mut sum: Option<String> = None;
            for t in 0..n {
                let v = match tap_mask[t] {
                    Some(i) => {
                        let z = zero.as_deref().unwrap_or_default();
                        let x = &a[2 * t];
                        b.assign(format!("arith.select {}, {z}, {x} : f32", wrapped[i]))
                    }
                    None => a[2 * t].clone(),
                };
                let p = elementwise::cast(b, xe, acc, &v);
                let q = elementwise::cast(b, we, acc, &a[2 * t + 1]);
                let m = elementwise::binary(b, &BinaryOp::Mul, acc, &p, &q)?;
                sum = Some(match sum {
                    None => m,
                    Some(s) => elementwise::binary(b, &BinaryOp::Add, acc, &s, &m)?,
                });
            }
            Ok(vec![sum.expect("a depthwise convolution has taps")])
        },
    )?;
    if flat.is_none() {
        return Ok(r[0].clone());
    }
    let rows = Val {
        name: r[0].clone(),
        ty: grid_ty,
    };
    b.expand_shape(&rows, &[vec![0], vec![1], vec![2, 3]], acc_ty)
}

/// `p` with its block at `at` of `size` filled with `fill` in place (a `linalg.fill` of
/// that slice of it, inserted back).
fn fill_slab(b: &mut Body, p: &Val, at: &[u64], size: &[u64], fill: f64) -> LResult<Val> {
    let e = p.ty.elem;
    let bt = TensorType::fixed(e, size);
    let slab = b.extract_slice(p, at, size, &vec![1; size.len()], &bt)?;
    let c = b.scalar(e, fill);
    let ty = tensor_ty(&bt)?;
    let filled = Val {
        name: b.assign(format!(
            "linalg.fill ins({c} : {}) outs({} : {ty}) -> {ty}",
            super::body::elem(e),
            slab.name
        )),
        ty: bt,
    };
    b.insert_slice(&filled, p, at)
}

/// The input `x` (`[N, C, 2H, 2W]`) of a depthwise convolution of stride 2 in the flat form
/// ([`FlatGrid`]): its four phases, each one row of `H · W` elements with `f.before`
/// zeros before it and the rest of `f.len` after, `[N, C, 4 · len]`. The zeros are filled
/// first, then one generic reads the input as `[N, C, H, 2, W, 2]` and writes the phases as
/// `[N, C, 2, 2, H, W]` into their place (the schedule vectorizes it, `deinterleave`:
/// whole vectors of the input read and their lanes shuffled).
fn flat_phases(b: &mut Body, x: &Val, f: &FlatGrid) -> LResult<Val> {
    let xd = dims(&x.ty)?;
    let e = x.ty.elem;
    let (n, c, h, w) = (xd[0], xd[1], xd[2] / 2, xd[3] / 2);
    let rows_ty = TensorType::fixed(e, &[n, c, 4, f.len]);
    let mut p = Val {
        name: b.empty(&rows_ty)?,
        ty: rows_ty.clone(),
    };
    let ones = [1u64; 4];
    for (from, to) in [(0, f.before), (f.before + f.pixels, f.len)] {
        if from >= to {
            continue;
        }
        p = fill_slab(b, &p, &[0, 0, 0, from], &[n, c, 4, to - from], 0.0)?;
    }
    let place_size = [n, c, 4, f.pixels];
    let place_at = [0, 0, 0, f.before];
    let place_ty = TensorType::fixed(e, &place_size);
    let place = b.extract_slice(&p, &place_at, &place_size, &ones, &place_ty)?;
    let phases_ty = TensorType::fixed(e, &[n, c, 2, 2, h, w]);
    let split = [vec![0], vec![1], vec![2, 3], vec![4, 5]];
    let init = b.expand_shape(&place, &split, &phases_ty)?;
    let pairs_ty = TensorType::fixed(e, &[n, c, h, 2, w, 2]);
    let pairs = Val {
        name: b.expand_shape(x, &split, &pairs_ty)?,
        ty: pairs_ty,
    };
    let d = |i: &[usize]| i.iter().map(|i| format!("d{i}")).collect::<Vec<_>>();
    let r = b.generic(
        &[In {
            val: &pairs,
            map: affine_map(6, &d(&[0, 1, 4, 2, 5, 3])),
        }],
        &[(phases_ty.clone(), identity_map(6), Some(init))],
        &["parallel"; 6],
        |_, a| Ok(vec![a[0].clone()]),
    )?;
    let phases = Val {
        name: r[0].clone(),
        ty: phases_ty,
    };
    let placed = b.collapse_shape(&phases, &[vec![0], vec![1], vec![2, 3], vec![4, 5]])?;
    let p = b.insert_slice(&placed, &p, &place_at)?;
    b.collapse_shape(&p, &[vec![0], vec![1], vec![2, 3]])
}

/// Rows of a depthwise convolution's result shorter than this take the flat form.
const FLAT_ROW: u64 = 64;

/// The flat form of a 2-D depthwise convolution of stride 1 whose result has its input's
/// extents (`H × W`): each channel of the input one row of `H · W` elements, with zeros
/// before and after it (`before`, and what the last tap reaches past it), and each tap's
/// window that row read from the tap's offset (`(a · dil - pad_top) · W + c · dil -
/// pad_left` for the tap at row `a`, column `c`). A window that starts a row up or down
/// reads the zeros above or below the image; one shifted along the row reads the
/// neighbouring row's first or last elements for the pixels it moves out of their row,
/// which a mask per shift selects as zeros. The result is the convolution's, in its own
/// layout: its rows are whole vectors, where the result's short rows (7, 14, 28 elements)
/// were a vector each with its lanes masked, and nothing is cut off afterwards.
///
/// Of stride 2, where the input's extents are twice the result's (`2H × 2W`): the input
/// in four phases (`[N, C, 2, 2, H, W]`, phase `(r, c)` holding the input's pixels at rows
/// `2i + r` and columns `2j + c`, [`flat_phases`]), each phase one such row; a tap at input
/// offset `(y, z)` from `2 × ` its pixel reads phase `(y mod 2, z mod 2)` from offset
/// `(y div 2, z div 2)` of the pixel, a stride-1 window of that phase's row.
struct FlatGrid {
    /// The stride, 1 or 2 (on both axes).
    stride: u64,
    /// The result's row length, `W`.
    width: u64,
    /// Elements per channel of the result, `H · W`.
    pixels: u64,
    /// Zeros before each row.
    before: u64,
    /// Each padded row's length.
    len: u64,
}

impl FlatGrid {
    /// The flat form of a convolution of kernel `k` and geometry `g` from an input of
    /// spatial extents `x` to a result of spatial extents `o`, when it has one.
    fn new(x: &[u64], k: &[u64], o: &[u64], g: &Geom) -> Option<FlatGrid> {
        let stride = *g.strides.first()?;
        if k.len() != 2
            || k.contains(&0)
            || o.contains(&0)
            || !(1..=2).contains(&stride)
            || g.strides.iter().any(|&t| t != stride)
            || x.iter()
                .zip(o)
                .any(|(&x, &o)| o.checked_mul(stride) != Some(x))
            || o[1] >= FLAT_ROW
        {
            return None;
        }
        let (h, w) = (o[0], o[1]);
        let pixels = h.checked_mul(w)?;
        let mut grid = FlatGrid {
            stride,
            width: w,
            pixels,
            before: 0,
            len: 0,
        };
        // The taps' offsets from the pixel they are for, the least and the most.
        let (mut least, mut most) = (0i64, 0i64);
        for t in taps(k) {
            let (_, row, col) = grid.tap(&t, g)?;
            let off = row.checked_mul(i64::try_from(w).ok()?)?.checked_add(col)?;
            least = least.min(off);
            most = most.max(off);
        }
        grid.before = least.unsigned_abs();
        grid.len = grid
            .before
            .checked_add(pixels)?
            .checked_add(most.unsigned_abs())?;
        // Every phase's row, as one index.
        i64::try_from(grid.len.checked_mul(stride * stride)?).ok()?;
        Some(grid)
    }

    /// Tap `t`'s phase and its offset in rows and columns of the phase (or the input, of
    /// stride 1) from the pixel it is for.
    fn tap(&self, t: &[u64], g: &Geom) -> Option<(u64, i64, i64)> {
        let s = self.stride as i64;
        let at = |j: usize| -> Option<i64> {
            i64::try_from(t[j].checked_mul(g.dils[j])?)
                .ok()?
                .checked_sub(i64::try_from(g.pads[j]).ok()?)
        };
        let (y, z) = (at(0)?, at(1)?);
        let phase = y.rem_euclid(s) * s + z.rem_euclid(s);
        Some((phase as u64, y.div_euclid(s), z.div_euclid(s)))
    }

    /// Where tap `t`'s window starts in the padded rows, one after another.
    fn start(&self, t: &[u64], g: &Geom) -> u64 {
        let (phase, row, col) = self.tap(t, g).expect("checked by new");
        let off = row * self.width as i64 + col;
        phase * self.len + (self.before as i64 + off) as u64
    }

    /// How far tap `t` reads along a row from the pixel it is for.
    fn shift(&self, t: &[u64], g: &Geom) -> i64 {
        self.tap(t, g).expect("checked by new").2
    }

    /// The mask of column shift `c`: `[H · W]`, 1 where a pixel's column moved by `c` is
    /// in the row, 0 where not (exact `f32` bits).
    fn mask(&self, b: &mut Body, c: i64) -> LResult<Val> {
        let w = self.width as i64;
        let mut hex = String::with_capacity(8 * self.pixels as usize);
        for q in 0..self.pixels as i64 {
            let j = q % w + c;
            hex.push_str(if (0..w).contains(&j) {
                "0000803F"
            } else {
                "00000000"
            });
        }
        let ty = TensorType::fixed(ElemType::F32, &[self.pixels]);
        let name = b.assign(format!(
            "arith.constant dense<\"0x{hex}\"> : {}",
            tensor_ty(&ty)?
        ));
        Ok(Val { name, ty })
    }
}

/// Convolution (cross-correlation), see the module doc.
fn conv(b: &mut Body, args: &[Val], attrs: &ConvAttrs, out: &TensorType) -> LResult<String> {
    let (x, w) = (&args[0], &args[1]);
    let od = dims(out)?;
    let wd = dims(&w.ty)?;
    let s = od.len().saturating_sub(2);
    if s == 0 || wd.len() != od.len() {
        return err("conv needs [N, C, D...] operands with a weight of the same rank");
    }
    let g = Geom::new(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let xd = dims(&x.ty)?;
    let f32s = [&x.ty, &w.ty, out].iter().all(|t| t.elem == ElemType::F32);
    let depthwise = is_depthwise(&wd, &od, attrs.groups);
    if let Some(f) = FlatGrid::new(&xd[2..], &wd[2..], &od[2..], &g).filter(|_| depthwise && f32s) {
        // The flat form: each channel one row (a row per phase), the padding only before
        // and after it.
        let xp = if f.stride == 1 {
            let xf = b.collapse_shape(x, &[vec![0], vec![1], vec![2, 3]])?;
            let t = TensorType::fixed(x.ty.elem, &[xd[0], xd[1], f.len]);
            let axis = SpreadAxis {
                axis: 2,
                off: f.before as i64,
                stride: 1,
            };
            spread(b, &xf, &t, &[axis], 0.0)?
        } else {
            flat_phases(b, x, &f)?
        };
        return conv_core(b, &xp, w, args.get(2), &g, attrs.groups, out, Some(&f));
    }
    let xp = pad_for_windows(b, x, &wd[2..], &od[2..], &g, 0.0)?;
    conv_core(b, &xp, w, args.get(2), &g, attrs.groups, out, None)
}

/// Transposed convolution, see the module doc.
fn conv_transpose(
    b: &mut Body,
    args: &[Val],
    attrs: &ConvAttrs,
    out: &TensorType,
) -> LResult<String> {
    let (x, w) = (&args[0], &args[1]);
    let xd = dims(&x.ty)?;
    let od = dims(out)?;
    let wd = dims(&w.ty)?;
    let s = od.len().saturating_sub(2);
    if s == 0 || wd.len() != od.len() || xd.len() != od.len() {
        return err("conv-transpose needs [N, C, D...] operands with a weight of the same rank");
    }
    let Geom {
        strides,
        dils,
        pads,
    } = Geom::new(&attrs.strides, &attrs.pads, &attrs.dilations, s)?;
    let groups = attrs.groups;
    let (c, mg) = (wd[0], wd[1]);
    if groups == 0 || c % groups != 0 || xd[1] != c {
        return err(format!(
            "channels do not match groups: input {xd:?}, weight {wd:?}, groups = {groups}"
        ));
    }
    let cg = c / groups;
    let m = mg * groups;
    // The input spread out by the strides, with dil*(K-1) - pad_begin before it.
    let mut ud = xd.clone();
    let mut axes = Vec::new();
    for j in 0..s {
        ud[2 + j] = od[2 + j] + dils[j] * (wd[2 + j] - 1);
        axes.push(SpreadAxis {
            axis: 2 + j,
            off: (dils[j] * (wd[2 + j] - 1)) as i64 - pads[j] as i64,
            stride: strides[j],
        });
    }
    let xu = spread(b, x, &TensorType::fixed(x.ty.elem, &ud), &axes, 0.0)?;
    // The kernel as a convolution's: wf[m, c, k] = w[g * cg + c, m - g * mg, K - 1 - k].
    let mut fd = vec![m, cg];
    fd.extend(&wd[2..]);
    let ft = TensorType::fixed(w.ty.elem, &fd);
    let wf = b.index_generic(&ft, |b, i| {
        let mgc = b.index(mg as i64);
        let g = b.assign(format!("arith.divui {}, {mgc} : index", i[0]));
        let mi = b.assign(format!("arith.remui {}, {mgc} : index", i[0]));
        let gc = b.mul_index(&g, cg as i64);
        let ci = b.assign(format!("arith.addi {gc}, {} : index", i[1]));
        let mut src = vec![ci, mi];
        for j in 0..s {
            let last = b.index(wd[2 + j] as i64 - 1);
            src.push(b.assign(format!("arith.subi {last}, {} : index", i[2 + j])));
        }
        b.extract(w, &src)
    })?;
    let wf = Val { name: wf, ty: ft };
    let g = Geom {
        strides: vec![1; s],
        dils,
        pads: vec![0; 2 * s],
    };
    conv_core(b, &xu, &wf, args.get(2), &g, groups, out, None)
}

/// `einsum`: one generic with a loop per letter (the output's, then the summed ones in
/// order of appearance); a repeated letter in a term reads a diagonal.
fn einsum(b: &mut Body, args: &[Val], equation: &str, out: &TensorType) -> LResult<String> {
    let (ins, outl) = tessera_ir::infer::parse_einsum(equation)
        .map_err(|e| super::body::LowerError(e.to_string()))?;
    if ins.len() != args.len() {
        return err(format!(
            "equation `{equation}` has {} terms for {} operands",
            ins.len(),
            args.len()
        ));
    }
    let mut letters = outl.clone();
    for t in &ins {
        for &c in t {
            if !letters.contains(&c) {
                letters.push(c);
            }
        }
    }
    let nl = letters.len();
    let no = outl.len();
    let pos = |c: char| letters.iter().position(|&l| l == c).unwrap_or(0);
    let mut specs = Vec::new();
    for (t, a) in ins.iter().zip(args) {
        if t.len() != a.ty.rank() {
            return err(format!(
                "term {t:?} does not match operand rank {}",
                a.ty.rank()
            ));
        }
        let ex: Vec<String> = t.iter().map(|&c| format!("d{}", pos(c))).collect();
        specs.push(In {
            val: a,
            map: affine_map(nl, &ex),
        });
    }
    let e = out.elem;
    let acc = acc_type(e);
    let acc_ty = out.with_elem(acc);
    let init = b.filled(&acc_ty, 0.0)?;
    let o_exprs: Vec<String> = (0..no).map(|i| format!("d{i}")).collect();
    let mut its = vec!["parallel"; no];
    its.extend(vec!["reduction"; nl - no]);
    let elems: Vec<ElemType> = args.iter().map(|a| a.ty.elem).collect();
    let r = b.generic(
        &specs,
        &[(acc_ty.clone(), affine_map(nl, &o_exprs), Some(init))],
        &its,
        |b, a| {
            let n = elems.len();
            let mut p = elementwise::cast(b, elems[0], acc, &a[0]);
            for k in 1..n {
                let q = elementwise::cast(b, elems[k], acc, &a[k]);
                p = elementwise::binary(b, &BinaryOp::Mul, acc, &p, &q)?;
            }
            Ok(vec![elementwise::binary(
                b,
                &BinaryOp::Add,
                acc,
                &a[n],
                &p,
            )?])
        },
    )?;
    if acc == e {
        return Ok(r[0].clone());
    }
    let res = Val {
        name: r[0].clone(),
        ty: acc_ty,
    };
    b.elementwise(&[&res], out, |b, s| Ok(elementwise::cast(b, acc, e, &s[0])))
}
