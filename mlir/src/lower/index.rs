//! Indexing: `gather` and `range` here; `gather-elements`, `gather-nd` and the scatters.
//! Gathers are index generics: each output element computes its source coordinates and
//! reads them with `tensor.extract` (negative indices count from the end).

use tessera_ir::{Op, TensorType};

use super::body::{Body, LResult, Val, dims, err};
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
        other => err(format!("no lowering for {} yet", other.name())),
    }
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
