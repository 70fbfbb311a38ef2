//! Parse errors: each snippet must fail with the given `line:col: message` (a prefix of the
//! error's display).

use tessera_ir::text;

/// (source, expected start of `line:col: message`).
const CASES: &[(&str, &str)] = &[
    // Output names.
    (
        "graph @g(%x: f32[2]) {\n  return %x as \"y\", %x as \"y\"\n}",
        "2:27: two outputs are named `y`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  return %x as \"\"\n}",
        "2:16: an output's name is empty",
    ),
    (
        "graph @g(%x: f32[2]) {\n  return %x as y\n}",
        "2:16: expected a string",
    ),
    // Ops and attributes.
    (
        "graph @g(%x: f32[2]) {\n  %y = relux %x : f32[2]\n  return %y\n}",
        "2:8: unknown op `relux`; did you mean `relu`?",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = reduce-summ %x {axes = [0], keep-dims = true} : f32[1]\n  return %y\n}",
        "2:8: unknown op `reduce-summ`; did you mean `reduce-sum`?",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = softmax %x {axis = 1, axes = 1} : f32[2, 3]\n  return %y\n}",
        "2:30: unknown attribute `axes` for `softmax`; did you mean `axis`?",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = reduce-sum %x {axes = [1], keep_dims = true} : f32[2, 1]\n  return %y\n}",
        "2:35: unknown attribute `keep_dims` for `reduce-sum`; did you mean `keep-dims`?",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = relu %x {alpha = 1.0} : f32[2]\n  return %y\n}",
        "2:17: unknown attribute `alpha` for `relu` (it takes no attributes)",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = softmax %x : f32[2, 3]\n  return %y\n}",
        "2:8: `softmax` needs attribute `axis`",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = reduce-sum %x {axes = [1]} : f32[2, 1]\n  return %y\n}",
        "2:8: `reduce-sum` needs attribute `keep-dims`",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = softmax %x {axis = 1, axis = 0} : f32[2, 3]\n  return %y\n}",
        "2:30: duplicate attribute `axis`",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = softmax %x {axis = \"one\"} : f32[2, 3]\n  return %y\n}",
        "2:27: attribute `axis` of `softmax` must be a non-negative integer, found a string",
    ),
    (
        "graph @g(%x: f32[2, 3]) {\n  %y = softmax %x {axis = -1} : f32[2, 3]\n  return %y\n}",
        "2:27: attribute `axis` of `softmax` must be a non-negative integer, found an integer `-1`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = gelu %x {tanh = 1} : f32[2]\n  return %y\n}",
        "2:24: attribute `tanh` of `gelu` must be `true` or `false`, found an integer `1`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = elu %x {alpha = true} : f32[2]\n  return %y\n}",
        "2:24: attribute `alpha` of `elu` must be a number, found a boolean",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %y = pad %x {mode = mirror, pads = [1, 1], value = 0} : f32[6]\n  return %y\n}",
        "2:23: attribute `mode` of `pad` must be one of constant, reflect, edge, wrap, found an identifier `mirror`",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %y = cast %x {to = f33} : f32[4]\n  return %y\n}",
        "2:22: attribute `to` of `cast` must be one of f16, bf16,",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %y = transpose %x {perm = [0, x]} : f32[4]\n  return %y\n}",
        "2:29: attribute `perm` of `transpose` must be a list of non-negative integers",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %y = top-k %x {axis = 0, k = 99999999999999999999999, largest = true} : f32[1], i64[1]\n  return %y\n}",
        "2:32: attribute `k` of `top-k` must be a non-negative integer",
    ),
    // Values.
    (
        "graph @g(%x: f32[2]) {\n  %y = relu %z : f32[2]\n  return %y\n}",
        "2:13: undefined value `%z`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = relu %x : f32[2]\n  return %w\n}",
        "3:10: undefined value `%w`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %x = relu %x : f32[2]\n  return %x\n}",
        "2:3: redefinition of `%x` (first defined at 1:10)",
    ),
    (
        "graph @g(%x: f32[2], %x: f32[2]) {\n  return %x\n}",
        "1:22: redefinition of `%x` (first defined at 1:10)",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = relu %y : f32[2]\n  return %y\n}",
        "2:13: undefined value `%y`",
    ),
    // Results.
    (
        "graph @g(%x: f32[4]) {\n  %v = top-k %x {axis = 0, k = 2, largest = true} : f32[2]\n  return %v\n}",
        "2:3: `top-k` produces 2 results, but 1 name is given",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %a, %b = relu %x : f32[4], f32[4]\n  return %a\n}",
        "2:3: `relu` produces 1 result, but 2 names are given",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %a, %b, %c = split %x {axis = 0, sizes = [1, 3]} : f32[1], f32[3], f32[0]\n  return %a\n}",
        "2:3: `split` produces 2 results, but 3 names are given",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %v, %i = top-k %x {axis = 0, k = 2, largest = true} : f32[2]\n  return %v\n}",
        "2:57: `top-k` produces 2 results, but 1 type is given",
    ),
    (
        "graph @g(%x: f32[4]) {\n  %y = relu %x\n  return %y\n}",
        "3:3: expected `:`, found `return`",
    ),
    // Constants.
    (
        "graph @g() {\n  %w = const @wieght : f32[2]\n  return %w\n}",
        "2:14: unknown constant `@wieght`",
    ),
    (
        "const @weight : f32[2] = [1.0, 2.0]\n\ngraph @g() {\n  %w = const @wieght : f32[2]\n  return %w\n}",
        "4:14: unknown constant `@wieght`; did you mean `@weight`?",
    ),
    (
        "const @w : f32[2] = [1.0, 2.0]\nconst @w : f32[2] = [1.0, 2.0]\ngraph @g() {\n  return\n}",
        "2:7: redefinition of constant `@w` (first defined at 1:1)",
    ),
    (
        "const @w : f32[4] = [1.0, 2.0, 3.0]\ngraph @g() {\n  return\n}",
        "1:21: constant `@w` of type f32[4] needs 4 values, found 3",
    ),
    (
        "const @w : i8[2] = [1, 300]\ngraph @g() {\n  return\n}",
        "1:24: value 300 is out of range for i8",
    ),
    (
        "const @w : u8[1] = [-1]\ngraph @g() {\n  return\n}",
        "1:21: value -1 is out of range for u8",
    ),
    (
        "const @w : i32[1] = [1.5]\ngraph @g() {\n  return\n}",
        "1:22: expected an integer for i32, found number `1.5`",
    ),
    (
        "const @w : f16[1] = [1e6]\ngraph @g() {\n  return\n}",
        "1:22: value 1e6 is out of range for f16",
    ),
    (
        "const @w : bool[1] = [yes]\ngraph @g() {\n  return\n}",
        "1:23: expected `true` or `false`, found `yes`",
    ),
    (
        "const @w : f16[1] = [0x7fc00000]\ngraph @g() {\n  return\n}",
        "1:22: bit pattern 0x7fc00000 is wider than f16",
    ),
    (
        "const @w : f32[N] = external\ngraph @g() {\n  return\n}",
        "1:12: constant `@w` must have a static shape, found f32[N]",
    ),
    (
        "const @w : f32[64] = external\ngraph @g() {\n  return\n}",
        "1:1: constant `@w` is external, but no sidecar was given",
    ),
    // Types.
    (
        "graph @g(%x: f33[2]) {\n  return %x\n}",
        "1:14: unknown element type `f33`; did you mean `f32`?",
    ),
    (
        "graph @g(%x: f32[2, -1]) {\n  return %x\n}",
        "1:21: bad dimension `-1` (expected a non-negative integer)",
    ),
    (
        "graph @g(%x: f32[2) {\n  return %x\n}",
        "1:19: expected `]`, found `)`",
    ),
    (
        "graph @g(%x: f32[2] sharded[[x]]) {\n  return %x\n}",
        "1:30: expected a mesh axis (non-negative integer), found `x`",
    ),
    // Syntax.
    (
        "graph @g() {\n  return\n",
        "3:1: expected `}`, found end of file",
    ),
    (
        "graph @g() {\n  return\n}\nextra",
        "4:1: expected end of file after the graph, found `extra`",
    ),
    (
        "func @g() {}",
        "1:1: expected `const`, `mesh` or `graph`, found `func`",
    ),
    // Meshes.
    (
        "mesh @m = [2] devices(\"a\", \"b\")\nconst @c : f32[] = [1.0]\ngraph @g() {\n  return\n}",
        "2:1: expected `mesh` or `graph`, found `const`",
    ),
    (
        "mesh @m = [2, x] devices(\"a\", \"b\")\ngraph @g() {\n  return\n}",
        "1:15: expected a mesh axis size (positive integer), found `x`",
    ),
    (
        "mesh @m = [2] (\"a\", \"b\")\ngraph @g() {\n  return\n}",
        "1:15: expected `devices(...)`, found `(`",
    ),
    (
        "mesh @m = [2] devices(a, b)\ngraph @g() {\n  return\n}",
        "1:23: expected a string, found `a`",
    ),
    (
        "graph @g(%x: f32[2]) {\n  %y = transfer %x {from = \"a\"} : f32[2]\n  return %y\n}",
        "2:8: `transfer` needs attribute `to`",
    ),
    (
        "graph @g() {\n  %y = fill {elem = f32, shape = [], value = 1.0} : f32[] loc(\"a\n",
        "2:63: unterminated string",
    ),
    (
        "graph @g() {\n  %y = fill {elem = f32, shape = [], value = 1.0} : f32[] loc(\"a\\q\")\n",
        "2:65: unknown escape",
    ),
    (
        "graph @g() {\n  %y = fill {elem = f32, shape = [], value = 1.0} : f32[] loc(\"a\") loc(\"b\")\n  return %y\n}",
        "2:68: duplicate `loc`",
    ),
    (
        "graph @g() {\n  % = relu\n}",
        "2:3: expected a name after `%`",
    ),
    (
        "graph @g() {\n  %y = relu ; \n}",
        "2:13: unexpected character ';'",
    ),
];

#[test]
fn parse_errors() {
    let mut failures = Vec::new();
    for (src, want) in CASES {
        match text::parse(src, None) {
            Ok(_) => failures.push(format!("no error for:\n{src}\nwanted: {want}")),
            Err(e) => {
                let got = e.to_string();
                if !got.starts_with(want) {
                    failures.push(format!("for:\n{src}\n  wanted: {want}\n  got:    {got}"));
                }
                assert_eq!(got, format!("{}:{}: {}", e.line, e.col, e.message));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n\n")
    );
}
