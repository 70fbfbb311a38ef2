//! Buffers freed right after their last use.
//!
//! MLIR's ownership-based buffer deallocation frees a block's buffers at the end of the
//! block (its deallocations sit before the terminator). A lowered step is one block of
//! hundreds of ops, so every intermediate of a step would live until the step returns,
//! several times what the simulator's liveness finds. [`free_after_last_use`] moves each
//! such `memref.dealloc` up to just after the last op of its block that uses the buffer or
//! a value that may alias it.
//!
//! The buffers that move are those the block makes: a `memref.alloc`'s, and the results of
//! a call of a function of the module, taken together as one buffer (after the deallocation
//! with its default `private-function-dynamic-ownership=false`, such a function returns new
//! buffers, never its arguments or a global, though its results may share one). A value may alias a buffer when an op of the block reads
//! the buffer, or a value that may alias it, and returns a memref (a view, a cast, a loop
//! carrying it): that covers every view op without listing them. Uses inside an op's
//! regions are uses by that op. Only unconditional deallocations of those buffers move;
//! the others stay where the deallocation put them. How many are unconditional depends on
//! `buffer-deallocation-simplification`, which the MPI program leaves out for its cost
//! ([`crate::pipelines::CPU_MPI_BUFFERS`]): with it, GPT-2 tiny's data-parallel ranks
//! peaked at 1.63 MB of buffers instead of 1.93 MB; without it, at 1.93 MB.

use std::collections::{BTreeMap, BTreeSet};

use melior::ir::operation::{OperationLike, OperationMutLike, WalkOrder, WalkResult};
use melior::ir::{BlockLike, Module, OperationRef, RegionLike, TypeLike, ValueLike};

/// A value's identity within one module.
fn key<'c>(v: &impl ValueLike<'c>) -> usize {
    v.to_raw().ptr as usize
}

/// The values an op uses, its regions' ops included.
fn uses(op: &OperationRef<'_, '_>) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    op.walk(WalkOrder::PreOrder, |o| {
        for v in o.operands() {
            out.insert(key(&v));
        }
        WalkResult::Advance
    });
    out
}

fn is_named(op: &OperationRef<'_, '_>, name: &str) -> bool {
    op.name().as_string_ref().as_str() == Ok(name)
}

/// The symbol a `func.call` calls.
fn callee(op: &OperationRef<'_, '_>) -> Option<String> {
    let a = op.attribute("callee").ok()?;
    let s = melior::ir::attribute::FlatSymbolRefAttribute::try_from(a).ok()?;
    Some(s.value().to_string())
}

/// The names of the module's functions that have a body.
fn defined_functions(module: &Module<'_>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let body = module.body();
    let mut f = body.first_operation();
    while let Some(func) = f {
        f = func.next_in_block();
        if func.region(0).is_ok_and(|r| r.first_block().is_some())
            && let Some(name) = crate::context::func_name(&func)
        {
            out.insert(name);
        }
    }
    out
}

/// Moves every movable `memref.dealloc` of the module's single-block functions to just after
/// the last use of its buffer (see the module doc); returns how many moved. Run it after
/// `buffer-deallocation-pipeline` (default options): a call of a function of the module
/// then returns no alias of its arguments (the deallocation clones any that would be one),
/// so its results are a new buffer; a call of a declared function may return aliases.
pub fn free_after_last_use(module: &Module<'_>) -> usize {
    let defined = defined_functions(module);
    let mut moved = 0;
    let body = module.body();
    let mut f = body.first_operation();
    while let Some(func) = f {
        f = func.next_in_block();
        if !is_named(&func, "func.func") {
            continue;
        }
        let Ok(region) = func.region(0) else { continue };
        let Some(block) = region.first_block() else {
            continue;
        };
        if block.next_in_region().is_some() {
            continue;
        }
        let mut ops = Vec::new();
        let mut ops_mut = Vec::new();
        let (mut o, mut m) = (block.first_operation(), block.first_operation_mut());
        while let (Some(op), Some(op_mut)) = (o, m) {
            ops.push(op);
            ops_mut.push(op_mut);
            o = op.next_in_block();
            m = op_mut.next_in_block_mut();
        }
        // The buffers the block makes (each value of one to the buffer it is: the results of
        // one call are one buffer, since they may alias each other), the buffers each value
        // may alias, and per buffer the last op that uses it or an alias.
        let mut made: BTreeMap<usize, usize> = BTreeMap::new();
        let mut roots: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        let mut last_use: BTreeMap<usize, usize> = BTreeMap::new();
        let mut deallocs: Vec<(usize, usize)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            if is_named(op, "memref.dealloc")
                && let Ok(v) = op.operand(0)
                && let Some(&buffer) = made.get(&key(&v))
            {
                deallocs.push((i, buffer));
                continue;
            }
            let mut reached = BTreeSet::new();
            for u in uses(op) {
                if let Some(r) = roots.get(&u) {
                    reached.extend(r.iter().copied());
                }
            }
            for &b in &reached {
                last_use.insert(b, i);
            }
            let fresh = is_named(op, "memref.alloc")
                || (is_named(op, "func.call") && callee(op).is_some_and(|c| defined.contains(&c)));
            let mut buffer = None;
            for r in op.results() {
                let t = r.r#type();
                if !t.is_mem_ref() && !t.is_unranked_mem_ref() {
                    continue;
                }
                if fresh {
                    let b = *buffer.get_or_insert(key(&r));
                    made.insert(key(&r), b);
                    roots.insert(key(&r), BTreeSet::from([b]));
                    last_use.insert(b, i);
                } else if !reached.is_empty() {
                    roots
                        .entry(key(&r))
                        .or_default()
                        .extend(reached.iter().copied());
                }
            }
        }
        for (d, buffer) in deallocs {
            let after = last_use[&buffer];
            if after + 1 < d {
                ops_mut[d].move_after(ops[after]);
                moved += 1;
            }
        }
    }
    moved
}
