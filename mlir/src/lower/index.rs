//! Indexing: `gather`, `gather-elements`, `gather-nd`, the scatters, `range` and
//! `random-uniform` (an index generic hashing each element's row-major index).
//! Gathers are index generics: each output element computes its source coordinates and
//! reads them with `tensor.extract` (negative indices count from the end). Scatters are
//! `scf.for` nests over the updates in row-major order carrying the result tensor
//! (`tensor.extract` / `tensor.insert`), so duplicate indices combine in the interpreter's
//! order.

use tessera_ir::{BinaryOp, Op, ScatterReduction, TensorType};

use super::body::{Body, LResult, Val, dims, err, tensor_ty};
use super::elementwise;

/// Lowers an indexing op.
pub fn lower(b: &mut Body, op: &Op, args: &[Val], results: &[TensorType]) -> LResult<Vec<String>> {
    let out = &results[0];
    match op {
        Op::Gather { axis } => Ok(vec![gather(b, &args[0], &args[1], *axis, out)?]),
        Op::Range { .. } => {
            // out[i] = start + i * delta (operands: start, limit, delta; scalars).
            let e = out.elem;
            let (s, d) = (&args[0], &args[2]);
            let r = b.index_generic(out, |b, idx| {
                let sv = b.extract(s, &[])?;
                let dv = b.extract(d, &[])?;
                let i = b.assign(format!("arith.index_cast {} : index to i64", idx[0]));
                let fi = elementwise::cast(b, tessera_ir::ElemType::I64, e, &i);
                let m = elementwise::binary(b, &tessera_ir::BinaryOp::Mul, e, &fi, &dv)?;
                elementwise::binary(b, &tessera_ir::BinaryOp::Add, e, &sv, &m)
            })?;
            Ok(vec![r])
        }
        Op::RandomUniform { salt, .. } => {
            Ok(vec![random_uniform(b, &args[0], &args[1], *salt, out)?])
        }
        Op::GatherElements { axis } => {
            let (x, idx) = (&args[0], &args[1]);
            let (d, ie, axis) = (dims(&x.ty)?[*axis], idx.ty.elem, *axis);
            let r = b.index_generic(out, |b, o| {
                let raw = b.extract(idx, o)?;
                let mut src = o.to_vec();
                src[axis] = normalized_index(b, &raw, ie, d);
                b.extract(x, &src)
            })?;
            Ok(vec![r])
        }
        Op::GatherNd { batch_dims } => {
            Ok(vec![gather_nd(b, &args[0], &args[1], *batch_dims, out)?])
        }
        Op::ScatterElements { axis, reduction } => {
            let (x, idx, upd) = (&args[0], &args[1], &args[2]);
            let (d, ie, axis, red) = (dims(&x.ty)?[*axis], idx.ty.elem, *axis, *reduction);
            let ud = dims(&upd.ty)?;
            let r = loop_nest(b, &ud, std::slice::from_ref(x), &mut |b, ivs, acc| {
                let raw = b.extract(idx, ivs)?;
                let mut at = ivs.to_vec();
                at[axis] = normalized_index(b, &raw, ie, d);
                let u = b.extract(upd, ivs)?;
                Ok(vec![scatter_one(b, &acc[0], &at, &u, red)?])
            })?;
            Ok(r.into_iter().map(|v| v.name).collect())
        }
        Op::ScatterNd { reduction } => {
            let (x, idx, upd) = (&args[0], &args[1], &args[2]);
            let xd = dims(&x.ty)?;
            let id = dims(&idx.ty)?;
            let ud = dims(&upd.ty)?;
            let (ie, red) = (idx.ty.elem, *reduction);
            let Some((&m, tuple)) = id.split_last() else {
                return err("scatter-nd needs indices of rank >= 1");
            };
            let (m, q1) = (m as usize, tuple.len());
            let r = loop_nest(b, &ud, std::slice::from_ref(x), &mut |b, ivs, acc| {
                let mut at = Vec::with_capacity(xd.len());
                for (k, &dk) in xd.iter().enumerate().take(m) {
                    let mut ii = ivs[..q1].to_vec();
                    ii.push(b.index(k as i64));
                    let raw = b.extract(idx, &ii)?;
                    at.push(normalized_index(b, &raw, ie, dk));
                }
                at.extend(ivs[q1..].iter().cloned());
                let u = b.extract(upd, ivs)?;
                Ok(vec![scatter_one(b, &acc[0], &at, &u, red)?])
            })?;
            Ok(r.into_iter().map(|v| v.name).collect())
        }
        other => err(format!("no lowering for {} yet", other.name())),
    }
}

/// `gather-nd`: output coordinates `[tuple..., slice...]`; the tuple's first `batch_dims`
/// coordinates are the data's, then the index tuple, then the slice's.
fn gather_nd(
    b: &mut Body,
    x: &Val,
    idx: &Val,
    batch_dims: usize,
    out: &TensorType,
) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let id = dims(&idx.ty)?;
    let ie = idx.ty.elem;
    let Some((&m, tuple)) = id.split_last() else {
        return err("gather-nd needs indices of rank >= 1");
    };
    let (m, q1) = (m as usize, tuple.len());
    if batch_dims > q1 || batch_dims + m > xd.len() {
        return err("gather-nd: index tuples exceed the data's rank");
    }
    b.index_generic(out, |b, o| {
        let mut src: Vec<String> = o[..batch_dims].to_vec();
        for k in 0..m {
            let mut ii = o[..q1].to_vec();
            ii.push(b.index(k as i64));
            let raw = b.extract(idx, &ii)?;
            src.push(normalized_index(b, &raw, ie, xd[batch_dims + k]));
        }
        src.extend(o[q1..].iter().cloned());
        b.extract(x, &src)
    })
}

/// Writes update `u` into the tensor `acc` at `at` (combined with the element there by
/// `red`); returns the new tensor.
fn scatter_one(
    b: &mut Body,
    acc: &Val,
    at: &[String],
    u: &str,
    red: ScatterReduction,
) -> LResult<String> {
    let e = acc.ty.elem;
    let op = match red {
        ScatterReduction::None => None,
        ScatterReduction::Add => Some(BinaryOp::Add),
        ScatterReduction::Mul => Some(BinaryOp::Mul),
        ScatterReduction::Max => Some(BinaryOp::Max),
        ScatterReduction::Min => Some(BinaryOp::Min),
    };
    let v = match op {
        None => u.to_string(),
        Some(op) => {
            let old = b.extract(acc, at)?;
            elementwise::binary(b, &op, e, &old, u)?
        }
    };
    Ok(b.assign(format!(
        "tensor.insert {v} into {}[{}] : {}",
        acc.name,
        at.join(", "),
        tensor_ty(&acc.ty)?
    )))
}

/// `scf.for` from 0 to `n` carrying the tensors `init`: `f` gets the induction variable
/// (an `index`) and the carried values and returns their next values. Returns the results.
pub fn for_loop(
    b: &mut Body,
    n: u64,
    init: &[Val],
    f: impl FnOnce(&mut Body, &str, &[Val]) -> LResult<Vec<String>>,
) -> LResult<Vec<String>> {
    let lo = b.index(0);
    let hi = b.index(n as i64);
    let one = b.index(1);
    let res = b.fresh();
    let iv = b.fresh();
    let carried: Vec<Val> = init
        .iter()
        .map(|v| Val {
            name: b.fresh(),
            ty: v.ty.clone(),
        })
        .collect();
    let tys: Vec<String> = init
        .iter()
        .map(|v| tensor_ty(&v.ty))
        .collect::<LResult<_>>()?;
    let binds: Vec<String> = carried
        .iter()
        .zip(init)
        .map(|(c, v)| format!("{} = {}", c.name, v.name))
        .collect();
    let head = if init.len() > 1 {
        format!("{res}:{}", init.len())
    } else {
        res.clone()
    };
    b.line(format!(
        "{head} = scf.for {iv} = {lo} to {hi} step {one} iter_args({}) -> ({}) {{",
        binds.join(", "),
        tys.join(", ")
    ));
    let ys = f(b, &iv, &carried)?;
    b.line(format!(
        "  scf.yield {} : {}",
        ys.join(", "),
        tys.join(", ")
    ));
    b.line("}");
    Ok(if init.len() > 1 {
        (0..init.len()).map(|k| format!("{res}#{k}")).collect()
    } else {
        vec![res]
    })
}

/// The body of a [`loop_nest`]: induction variables and carried values to next values.
pub type NestBody<'a> = dyn FnMut(&mut Body, &[String], &[Val]) -> LResult<Vec<String>> + 'a;

/// A nest of [`for_loop`]s over `extents` (row-major order: the last loop innermost),
/// carrying `init`; `f` gets the induction variables and the carried values. With no
/// extents `f` runs once.
pub fn loop_nest(
    b: &mut Body,
    extents: &[u64],
    init: &[Val],
    f: &mut NestBody<'_>,
) -> LResult<Vec<Val>> {
    fn nest(
        b: &mut Body,
        extents: &[u64],
        ivs: &mut Vec<String>,
        init: &[Val],
        f: &mut NestBody<'_>,
    ) -> LResult<Vec<String>> {
        match extents.split_first() {
            None => f(b, ivs, init),
            Some((&n, rest)) => for_loop(b, n, init, |b, iv, carried| {
                ivs.push(iv.to_string());
                let r = nest(b, rest, ivs, carried, f);
                ivs.pop();
                r
            }),
        }
    }
    let names = nest(b, extents, &mut Vec::new(), init, f)?;
    Ok(names
        .into_iter()
        .zip(init)
        .map(|(name, v)| Val {
            name,
            ty: v.ty.clone(),
        })
        .collect())
}

/// An index read from an index tensor, made non-negative against extent `d`.
pub fn normalized_index(b: &mut Body, raw: &str, e: tessera_ir::ElemType, d: u64) -> String {
    let i = b.index_of(raw, e);
    let z = b.index(0);
    let neg = b.assign(format!("arith.cmpi slt, {i}, {z} : index"));
    let w = b.add_index(&i, d as i64);
    b.assign(format!("arith.select {neg}, {w}, {i} : index"))
}

/// `out[o..., j..., t...] = x[o..., idx[j...], t...]` along `axis`.
fn gather(b: &mut Body, x: &Val, idx: &Val, axis: usize, out: &TensorType) -> LResult<String> {
    let xd = dims(&x.ty)?;
    let ir = idx.ty.rank();
    let ie = idx.ty.elem;
    b.index_generic(out, |b, o| {
        let j: Vec<String> = o[axis..axis + ir].to_vec();
        let raw = b.extract(idx, &j)?;
        let k = normalized_index(b, &raw, ie, xd[axis]);
        let mut src: Vec<String> = o[..axis].to_vec();
        src.push(k);
        src.extend(o[axis + ir..].iter().cloned());
        b.extract(x, &src)
    })
}

/// Vocabulary-parallel `gather` along axis 0 on a mesh device: `x` is this device's block of
/// rows of a table of `whole` rows, starting at row `offset` (an `index` value). An index
/// (normalized against the whole table) inside the block reads its row; one outside reads
/// zeros, so the devices' results are partial sums whose all-reduce is the whole gather.
pub fn gather_rows_block(
    b: &mut Body,
    x: &Val,
    idx: &Val,
    whole: u64,
    offset: &str,
    out: &TensorType,
) -> LResult<String> {
    let rows = dims(&x.ty)?[0];
    let ir = idx.ty.rank();
    let ie = idx.ty.elem;
    b.index_generic(out, |b, o| {
        let raw = b.extract(idx, &o[..ir])?;
        let k = normalized_index(b, &raw, ie, whole);
        let local = b.assign(format!("arith.subi {k}, {offset} : index"));
        let n = b.index(rows as i64);
        // Below the block, `local` wraps to a large unsigned value.
        let inside = b.assign(format!("arith.cmpi ult, {local}, {n} : index"));
        let z = b.index(0);
        let row = b.assign(format!("arith.select {inside}, {local}, {z} : index"));
        let mut src = vec![row];
        src.extend(o[ir..].iter().cloned());
        let v = b.extract(x, &src)?;
        let zero = b.scalar(out.elem, 0.0);
        Ok(b.assign(format!(
            "arith.select {inside}, {v}, {zero} : {}",
            super::body::elem(out.elem)
        )))
    })
}

/// `random-uniform`: each element hashes its row-major index with the stream's key, in
/// wrapping i64 arithmetic (the bits of the IR's u64 definition, [`tessera_ir::random_key`]).
fn random_uniform(
    b: &mut Body,
    seed: &Val,
    counter: &Val,
    salt: u64,
    out: &TensorType,
) -> LResult<String> {
    let od = dims(out)?;
    let e = out.elem;
    b.index_generic(out, |b, idx| {
        let c = |b: &mut Body, x: u64| b.int("i64", x as i64);
        let mix = |b: &mut Body, z: String| -> String {
            let mut z = z;
            for (shift, mul) in [(30, 0xBF58_476D_1CE4_E5B9_u64), (27, 0x94D0_49BB_1331_11EB)] {
                let s = c(b, shift);
                let t = b.assign(format!("arith.shrui {z}, {s} : i64"));
                let x = b.assign(format!("arith.xori {z}, {t} : i64"));
                let m = c(b, mul);
                z = b.assign(format!("arith.muli {x}, {m} : i64"));
            }
            let s = c(b, 31);
            let t = b.assign(format!("arith.shrui {z}, {s} : i64"));
            b.assign(format!("arith.xori {z}, {t} : i64"))
        };
        // The key: mix(seed ^ mix(counter ^ mix(salt + G))), the innermost a constant.
        let sv = b.extract(seed, &[])?;
        let cv = b.extract(counter, &[])?;
        let salted = c(
            b,
            tessera_ir::random_mix(salt.wrapping_add(tessera_ir::RANDOM_GAMMA)),
        );
        let k0 = b.assign(format!("arith.xori {cv}, {salted} : i64"));
        let k1 = mix(b, k0);
        let k2 = b.assign(format!("arith.xori {sv}, {k1} : i64"));
        let key = mix(b, k2);
        // The row-major index, plus one, times G, plus the key.
        let mut lin = b.index(0);
        for (k, &d) in od.iter().enumerate() {
            let scaled = b.mul_index(&lin, d as i64);
            lin = b.assign(format!("arith.addi {scaled}, {} : index", idx[k]));
        }
        let lin = b.add_index(&lin, 1);
        let i = b.assign(format!("arith.index_cast {lin} : index to i64"));
        let g = c(b, tessera_ir::RANDOM_GAMMA);
        let ig = b.assign(format!("arith.muli {i}, {g} : i64"));
        let z = b.assign(format!("arith.addi {key}, {ig} : i64"));
        let z = mix(b, z);
        let s40 = c(b, 40);
        let bits = b.assign(format!("arith.shrui {z}, {s40} : i64"));
        let f = b.assign(format!("arith.sitofp {bits} : i64 to f32"));
        let scale = b.scalar(tessera_ir::ElemType::F32, 1.0 / f64::from(1u32 << 24));
        let u = b.assign(format!("arith.mulf {f}, {scale} : f32"));
        Ok(elementwise::cast(b, tessera_ir::ElemType::F32, e, &u))
    })
}
