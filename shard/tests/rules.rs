//! The sharding rules as a table: a graph, its first input split along an axis (`p` pieces),
//! and the split axis every value ends with (data mode, so a rule that stops gathers the
//! value instead). Tensor-mode regions: which ops close them and why others fail.

use std::collections::BTreeMap;

use tessera_ir::{Graph, text};
use tessera_shard::propagate::{Mode, grow};

fn parse(src: &str) -> Graph {
    text::parse(src, None).unwrap_or_else(|e| panic!("{e}\n{src}"))
}

/// `name:axis` for every split value and `name` for every gathered one, by value name.
fn data_splits(src: &str, axis: usize, p: u64) -> (BTreeMap<String, usize>, Vec<String>) {
    let g = parse(src);
    let x = g.inputs()[0];
    let r = grow(&g, Mode::Data, &[], &[(x, axis)], p).expect("data mode never fails");
    let name = |v| g.value(v).name.clone().unwrap_or_default();
    let splits = r.split.iter().map(|(&v, &a)| (name(v), a)).collect();
    let gathers = r.gathers.iter().map(|&v| name(v)).collect();
    (splits, gathers)
}

#[track_caller]
fn check(body: &str, input: &str, axis: usize, p: u64, want: &[(&str, usize)], gathered: &[&str]) {
    let src = format!("graph @g(%x: {input}) {{\n{body}\n}}\n");
    let (splits, gathers) = data_splits(&src, axis, p);
    let want: BTreeMap<String, usize> = want.iter().map(|&(n, a)| (n.to_string(), a)).collect();
    assert_eq!(splits, want, "{src}");
    assert_eq!(gathers, gathered, "{src}");
}

#[test]
fn data_mode_rules() {
    // Elementwise: broadcasting aligns at the last axis.
    check(
        "  %b = fill {elem = f32, shape = [1, 3], value = 1.0} : f32[1, 3]\n  %y = add %x, %b : f32[4, 3]\n  return %y",
        "f32[4, 3]",
        0,
        2,
        &[("x", 0), ("y", 0)],
        &["y"],
    );
    // A non-constant operand of full extent along the split axis stops it (and an input
    // whose every use stops is not split at all).
    check(
        "  %b = fill {elem = f32, shape = [4, 3], value = 1.0} : f32[4, 3]\n  %y = add %x, %b : f32[4, 3]\n  return %y",
        "f32[4, 3]",
        0,
        2,
        &[],
        &[],
    );
    // Reshape: merging the split axis with the next keeps it major; an axis with no
    // counterpart (its leading extents never multiply to the same number) stops.
    check(
        "  %y = reshape %x {shape = [8, 6]} : f32[8, 6]\n  %z = reshape %y {shape = [48]} : f32[48]\n  return %z",
        "f32[8, 2, 3]",
        0,
        4,
        &[("x", 0), ("y", 0), ("z", 0)],
        &["z"],
    );
    check(
        "  %y = reshape %x {shape = [24]} : f32[24]\n  return %y",
        "f32[4, 6]",
        1,
        2,
        &[],
        &[],
    );
    // Splitting an axis: the major factor takes the split if p divides it.
    check(
        "  %y = reshape %x {shape = [2, 4, 3]} : f32[2, 4, 3]\n  return %y",
        "f32[8, 3]",
        0,
        2,
        &[("x", 0), ("y", 0)],
        &["y"],
    );
    check(
        "  %y = reshape %x {shape = [2, 4, 3]} : f32[2, 4, 3]\n  return %y",
        "f32[8, 3]",
        0,
        4,
        &[],
        &[],
    );
    // Transpose moves the split; softmax keeps it unless it normalizes along it.
    check(
        "  %t = transpose %x {perm = [1, 0]} : f32[3, 4]\n  %s = softmax %t {axis = 1} : f32[3, 4]\n  return %s",
        "f32[4, 3]",
        0,
        2,
        &[("t", 1), ("x", 0)],
        &["t"],
    );
    // Reductions renumber the split axis, or stop when they reduce it.
    check(
        "  %r = reduce-sum %x {axes = [0], keep-dims = false} : f32[3, 4]\n  %m = reduce-max %r {axes = [1], keep-dims = false} : f32[3]\n  return %m",
        "f32[2, 3, 4]",
        2,
        2,
        &[("r", 1), ("x", 2)],
        &["r"],
    );
    // Matmul: a split batch axis stays; the other operand broadcast along it is fine; the
    // contracting axis stops.
    check(
        "  %w = fill {elem = f32, shape = [1, 3, 5], value = 1.0} : f32[1, 3, 5]\n  %y = matmul %x, %w : f32[4, 2, 5]\n  return %y",
        "f32[4, 2, 3]",
        0,
        2,
        &[("x", 0), ("y", 0)],
        &["y"],
    );
    check(
        "  %w = fill {elem = f32, shape = [3, 5], value = 1.0} : f32[3, 5]\n  %y = matmul %x, %w : f32[4, 2, 5]\n  return %y",
        "f32[4, 2, 3]",
        2,
        3,
        &[],
        &[],
    );
    // The split operand on the right: its column axis gives the result's.
    check(
        "  %a = fill {elem = f32, shape = [2, 4], value = 1.0} : f32[2, 4]\n  %y = matmul %a, %x : f32[2, 6]\n  return %y",
        "f32[4, 6]",
        1,
        2,
        &[("x", 1), ("y", 1)],
        &["y"],
    );
    // An op without a rule stops the split.
    check(
        "  %y = cumsum %x {axis = 0, exclusive = false, reverse = false} : f32[4, 2]\n  %k, %i = top-k %y {axis = 0, k = 1, largest = true} : f32[1, 2], i64[1, 2]\n  return %k",
        "f32[4, 2]",
        1,
        2,
        &[("x", 1), ("y", 1)],
        &["y"],
    );
}

#[test]
fn tensor_mode_regions() {
    let src = |tail: &str| {
        format!(
            "const @w1 : f32[2, 4] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]\n\
             const @w2 : f32[4, 2] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]\n\n\
             graph @g(%x: f32[3, 2]) {{\n  %w1 = const @w1 : f32[2, 4]\n  \
             %h = matmul %x, %w1 : f32[3, 4]\n{tail}\n}}\n"
        )
    };
    let seed_of = |g: &Graph| {
        g.ops()
            .iter()
            .copied()
            .find(|&o| g.op(o).op.name() == "matmul")
            .expect("matmul")
    };
    // Closed by a row-parallel matmul: one closer, the weight split along K.
    let g = parse(&src(
        "  %r = relu %h : f32[3, 4]\n  %w2 = const @w2 : f32[4, 2]\n  %y = matmul %r, %w2 : f32[3, 2]\n  return %y",
    ));
    let r = grow(&g, Mode::Tensor, &[seed_of(&g)], &[], 2).expect("closes");
    assert_eq!(r.ops.len(), 3);
    assert_eq!(r.closers.len(), 1);
    assert_eq!(r.const_splits.len(), 2);
    // A split value that is a graph output, or used by an op without a rule, fails it.
    let g = parse(&src("  return %h"));
    let e = grow(&g, Mode::Tensor, &[seed_of(&g)], &[], 2).expect_err("output");
    assert_eq!(e, "a split value is a graph output");
    let g = parse(&src(
        "  %s = softmax %h {axis = 1} : f32[3, 4]\n  return %s",
    ));
    let e = grow(&g, Mode::Tensor, &[seed_of(&g)], &[], 2).expect_err("softmax");
    assert!(e.contains("it works along the split axis 1"), "{e}");
}
