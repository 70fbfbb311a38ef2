//! The text format of the IR (`.tir` files): printer, parser, and file I/O with a
//! safetensors sidecar for large constants.
//!
//! The printer's output is the parser's input, and printing is canonical: for any graph `g`,
//! `print(&parse(&print(&g), ..)?) == print(&g)`, byte for byte.
//!
//! # Example
//!
//! ```text
//! // comments run to end of line
//! const @fc1.weight : f32[16, 8] = external
//! const @fc1.bias : f32[4] = [0.5, 1.0, 2.0, 3.0]
//! const @k : i64[] = [3]
//! mesh @grid = [2, 2] devices("chip0", "chip1", "chip2", "chip3")
//!
//! graph @mlp(%x: f32[N, 8] sharded[[0], []], %mask: bool[N]) {
//!   %w = const @fc1.weight : f32[16, 8]
//!   %0 = matmul %x, %w : f32[N, 16]
//!   %y = relu %0 : f32[N, 16] device("gpu0") loc("fc1/Relu")
//!   %vals, %idx = top-k %y {axis = 1, k = 5, largest = true} : f32[N, 5], i64[N, 5]
//!   %"weird/name:0" = reduce-sum %vals {axes = [1], keep-dims = false} : f32[N]
//!   return %y as "probs", %idx
//! }
//! ```
//!
//! Printing is the inverse of parsing:
//!
//! ```
//! use tessera_ir::text;
//!
//! let src = "graph @g(%x: f32[N, 4]) {\n  %y = softmax %x {axis = 1} : f32[N, 4]\n  return %y\n}\n";
//! let graph = text::parse(src, None)?;
//! assert_eq!(text::print(&graph), src);
//! # Ok::<(), text::ParseError>(())
//! ```
//!
//! # Grammar
//!
//! ```text
//! file      := const* mesh* graph
//! const     := "const" @name ":" type "=" ( "external" | "[" elements "]" )
//! mesh      := "mesh" @name "=" "[" [ integer { "," integer } ] "]"
//!                  "devices(" [ string { "," string } ] ")"
//! graph     := "graph" @name "(" [ input { "," input } ] ")" "{"
//!                  op* "return" [ output { "," output } ] "}"
//! input     := %name ":" vtype [ "state(" "init" "=" ( @name | "zeros" ) "," "next" "=" string
//!                  [ "," "mesh" "=" @name ] ")" ]
//! output    := %name [ "as" string ]
//! op        := [ %name { "," %name } "=" ] op-name [ "const" @name ]
//!                  [ %name { "," %name } ] [ "{" attr { "," attr } "}" ]
//!                  [ ":" vtype { "," vtype } ] [ "device(" string ")" ] [ "loc(" string ")" ]
//!                  [ "grad-of(" %name ")" ] [ "{" region+ "}" ]
//! region    := graph                                     (no constants, no meshes)
//! attr      := key "=" value
//! value     := integer | float | "true" | "false" | string | identifier | "[" values "]"
//! type      := elem "[" [ dim { "," dim } ] "]"          e.g. f32[N, 3, 224], i64[]
//! vtype     := type [ "sharded" "[" [ "[" axes "]" { "," "[" axes "]" } ] "]" ]
//! ```
//!
//! - **Layout.** Constants come first, in [`ConstId`](crate::ConstId) order, then a mesh
//!   line per [`Mesh`](crate::Mesh) in declaration order, then (when either came) a blank line,
//!   then the graph. Ops are indented by two spaces, one per line, in body order. The
//!   text ends with a newline. Whitespace and `//` comments are otherwise free (the printer
//!   writes none).
//! - **Names.** `%name` (values) and `@name` (constants, the graph) are bare when made of
//!   `[A-Za-z0-9_.$-]` (a leading digit is fine), else quoted with escapes:
//!   `%"weird/name:0"`. Strings escape `\" \\ \n \t \r \0` and `\u{..}`. Unnamed values print
//!   as `%0, %1, ...`, counted over the unnamed values in definition order. The printer
//!   makes names unique: a name already used by an earlier value gets `_1`, `_2`, ...
//!   appended (see [`value_names`]). The parser keeps every name exactly as written (also
//!   `%0`, which becomes the name `"0"`), so print, parse, print is a fixpoint. Values are
//!   defined before they are used; names are never redefined.
//! - **Types.** An element type (`f16 bf16 f32 f64 i8 i16 i32 i64 u8 bool`) and a list of
//!   dims, each an integer or a symbol (an identifier, quoted when it is not one). A value
//!   with a sharding (graph inputs and op results) has ` sharded[[0], [], [1, 2]]` after its
//!   type: the mesh axes of each tensor axis ([`Sharding::axes`](crate::Sharding)).
//! - **Mesh.** `mesh @grid = [2, 2] devices("chip0", "chip1", "chip2", "chip3")`: the
//!   mesh's name, the size of each mesh axis, and the device names in row-major order
//!   ([`Mesh`](crate::Mesh)); a graph may declare several (one per pipeline stage, say).
//!   An op that runs on the whole mesh prints `device("@grid")`, and its results' shardings
//!   name that mesh's axes.
//!   Collectives name mesh axes: `all-reduce %p {axes = [0, 1]}`; a transfer names its
//!   devices: `transfer %x {from = "chip0", to = "chip1"}`.
//! - **State.** A graph input that is state carried between runs
//!   ([`StateSlot`](crate::StateSlot)) says so after its type: its initial value (a
//!   constant, or zeros), the output that holds its next value and, for a state held split
//!   between runs, the mesh that holds it (its blocks by the input's sharding):
//!   `%m: f32[4] sharded[[0]] state(init = zeros, next = "m", mesh = @dp)`.
//! - **Outputs.** `return` lists the outputs in order. Each output has a name of its own, the
//!   model's interface (`run` writes its file under it), kept by every pass whatever value
//!   computes it. It is printed as `as "name"` after the value when it differs from the
//!   value's printed name; without `as`, the output is named after its value, and a value
//!   returned twice gets `_1`, `_2`, ... for its later outputs ([`output_names`]). Output
//!   names are unique.
//! - **Ops.** The results, `=`, the op's name ([`Op::name`](crate::Op::name)), the operands,
//!   the attributes, `:` and one type per result, then ` device("...")`, ` loc("...")`
//!   and ` grad-of(%v)` (a backward op's forward op, by its first result; printed only when
//!   that op comes earlier in the body) when set. An op with no results (a `split` with no pieces) omits `... =` and `: ...`.
//!   The constant of a `const` op follows its name: `%w = const @fc1.weight : f32[16, 8]`.
//!   Reductions print as `reduce-sum`, ..., pooling as `max-pool`/`avg-pool`, unary and
//!   binary elementwise ops as their function (`add`, `gelu {tanh = false}`).
//! - **Regions.** A region op (`if`, `loop`, `scan`) ends its line with ` {`, then prints
//!   each region as a nested `graph @name(...) { ... }` (names `then`/`else` for `if`,
//!   `body` for loops, as the importer gives them), indented two spaces deeper than the op,
//!   its ops two more, and closes with `}` at the op's indentation. A region has its own
//!   value names (it is isolated from above: what it reads from outside is a captured
//!   operand and arrives as its input). Its result count comes from its regions, so the
//!   parser checks the result names once the regions are read. `const` is refused inside a
//!   region; regions nest at most [`MAX_REGION_DEPTH`](crate::verify::MAX_REGION_DEPTH)
//!   deep (deeper is a parse error, which bounds the parser's recursion). Annotations of
//!   [`print_annotated`] on a region op follow its line, before its regions.
//!
//!   ```text
//!   %r = if %c, %x : f32[3] {
//!     graph @then(%a: f32[3]) {
//!       %0 = neg %a : f32[3]
//!       return %0
//!     }
//!     graph @else(%a: f32[3]) {
//!       return %a
//!     }
//!   }
//!   ```
//! - **Attributes.** Kebab-case keys (`keep-dims`, `output-padding`), printed sorted by key,
//!   every one of them; `clip`'s absent `min`/`max` are left out. The parser accepts any
//!   order and rejects unknown, duplicate and missing keys. Floats print with
//!   [`format_f64`](crate::format_f64) (bit-exact, always with `.`, an exponent, `nan`,
//!   `inf` or `-inf`); an integer literal is accepted where a float is expected. Scalars
//!   (`fill`/`pad` `value`) print an integer for [`Scalar::Int`](crate::Scalar) and a float
//!   for [`Scalar::Float`](crate::Scalar). Enums are identifiers: `mode = reflect`,
//!   `coord = half-pixel`, `reduction = none`, `to = f16`. Dim lists: `shape = [N, 4]`.
//! - **Constants.** Data is inline when the constant has at most [`INLINE_LIMIT`] elements:
//!   flat, row-major, `[1, 2, 3]`; a scalar is `[3]`; bool is `true`/`false`. Floats print
//!   with [`format_f32`](crate::format_f32)/[`format_f64`](crate::format_f64) (`f16`/`bf16`
//!   via their exact `f32` value), so they read back bit-exactly; the canonical quiet NaN
//!   prints `nan`, any other NaN prints its raw bits (`0x7fc00001`). The parser checks the
//!   element count and ranges (`300` is not an `i8`). Larger constants print `= external`:
//!   their data lives in the sidecar.
//!
//! # Files and the sidecar
//!
//! [`save`] writes `model.tir` and, when some constant is external, `model.safetensors`
//! ([`sidecar_path`]): one tensor per external constant, named like it (dtypes F16 BF16 F32
//! F64 I8 I16 I32 I64 U8 BOOL). Each file is written to a temporary file in the same
//! directory and renamed into place, and the bytes depend only on the graph. [`load`]
//! memory-maps the sidecar and the constants share the map (no copy); each external
//! constant's dtype and shape are checked against its declared type. [`parse`] takes the
//! sidecar explicitly ([`Sidecar::open`], [`Sidecar::from_bytes`]).
//!
//! # Diagnostics
//!
//! [`ParseError`] carries a 1-based line and column. [`print_annotated`] prints a graph with
//! `// error: ...` lines after the line of each entity a message is about (the verifier's
//! inline error display).

mod attrs;
mod dot;
mod lexer;
mod parser;
mod printer;
mod sidecar;

use std::path::Path;

use crate::graph::{Entity, Graph};

pub use attrs::OP_NAMES;
pub use dot::to_dot;
pub use printer::{const_names, output_names, value_names};
pub use sidecar::{
    LoadError, SaveError, Sidecar, dtype_of, save_sharing, sidecar_path, write_atomically,
    write_safetensors,
};

/// Constants with at most this many elements print their data inline; larger ones are
/// `external`.
pub const INLINE_LIMIT: usize = 16;

/// A syntax or reference error in the text, at a 1-based line and column (in characters).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub col: usize,
    /// What is wrong.
    pub message: String,
}

/// Prints a graph in the text format.
pub fn print(graph: &Graph) -> String {
    printer::print_impl(graph, &[])
}

/// Whether [`save`] stores a constant in the sidecar (it is printed `= external`).
pub fn is_external(c: &crate::Constant) -> bool {
    !printer::is_inline(c)
}

/// Prints a graph with the data of every constant inline, whatever its size, except those
/// `external` names (printed `= external`, their data in a sidecar the reader has): text that
/// parses again with that sidecar, or alone when `external` names none (`tessera fmt`).
pub fn print_with_externals(graph: &Graph, external: &dyn Fn(&crate::Constant) -> bool) -> String {
    printer::print_with(graph, &[], Some(external))
}

/// Prints a graph with `// error: <msg>` lines after the line of each noted entity: an op's
/// line, a constant's line, the line that defines a value (its op, or the `graph` header for
/// inputs), the `graph` header for [`Entity::Graph`] and for entities that have no line of
/// their own (dead ops and values). Several notes on one line keep their given order.
pub fn print_annotated(graph: &Graph, notes: &[(Entity, String)]) -> String {
    printer::print_impl(graph, notes)
}

/// Parses a graph. `externals` provides the data of `external` constants; without it, a
/// file that has some is an error.
pub fn parse(src: &str, externals: Option<&Sidecar>) -> Result<Graph, ParseError> {
    let (graph, consts) = parser::parse_file(src)?;
    sidecar::resolve(graph, consts, externals)
}

/// Reads a `.tir` file and, when it has external constants, memory-maps its sidecar
/// ([`sidecar_path`]).
pub fn load(path: &Path) -> Result<Graph, LoadError> {
    sidecar::load(path)
}

/// Writes a graph to `path` and, when it has external constants, its sidecar; atomically
/// and deterministically (see the module doc).
pub fn save(graph: &Graph, path: &Path) -> Result<(), SaveError> {
    sidecar::save(graph, path)
}
