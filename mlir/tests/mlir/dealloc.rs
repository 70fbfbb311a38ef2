//! `dealloc::free_after_last_use`: each buffer a block makes is freed right after the last
//! op that uses it or a value that may alias it.

use tessera_mlir::Mlir;
use tessera_mlir::dealloc::free_after_last_use;

use crate::filecheck::{Check, check};

/// Buffers as the deallocation leaves them: every `memref.dealloc` before the return.
const BLOCK: &str = "module {
  func.func private @ext(memref<4xf32>) -> memref<4xf32>
  func.func @fresh(%x: memref<4xf32>) -> memref<4xf32> {
    %n = memref.alloc() : memref<4xf32>
    memref.copy %x, %n : memref<4xf32> to memref<4xf32>
    return %n : memref<4xf32>
  }
  func.func @two(%x: memref<4xf32>) -> (memref<4xf32>, memref<2x2xf32>) {
    %n = memref.alloc() : memref<4xf32>
    memref.copy %x, %n : memref<4xf32> to memref<4xf32>
    %v = memref.expand_shape %n [[0, 1]] output_shape [2, 2] : memref<4xf32> into memref<2x2xf32>
    return %n, %v : memref<4xf32>, memref<2x2xf32>
  }
  func.func @g(%x: memref<4xf32>) -> f32 {
    %c0 = arith.constant 0 : index
    %d = memref.alloc() : memref<4xf32>
    memref.copy %x, %d : memref<4xf32> to memref<4xf32>
    %v = memref.subview %d[1] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1], offset: 1>>
    %p:2 = func.call @two(%x) : (memref<4xf32>) -> (memref<4xf32>, memref<2x2xf32>)
    %q = memref.load %p#0[%c0] : memref<4xf32>
    %t = memref.load %v[%c0] : memref<2xf32, strided<[1], offset: 1>>
    %u = memref.load %p#1[%c0, %c0] : memref<2x2xf32>
    %r0 = arith.addf %q, %t : f32
    %r = arith.addf %r0, %u : f32
    memref.dealloc %d : memref<4xf32>
    memref.dealloc %p#0 : memref<4xf32>
    return %r : f32
  }
  func.func @f(%x: memref<4xf32>) -> f32 {
    %c0 = arith.constant 0 : index
    %a = memref.alloc() : memref<4xf32>
    memref.copy %x, %a : memref<4xf32> to memref<4xf32>
    %b = memref.alloc() : memref<4xf32>
    memref.copy %a, %b : memref<4xf32> to memref<4xf32>
    %v = memref.subview %b[1] [2] [1] : memref<4xf32> to memref<2xf32, strided<[1], offset: 1>>
    %e = func.call @ext(%b) : (memref<4xf32>) -> memref<4xf32>
    %c = memref.alloc() : memref<4xf32>
    memref.copy %x, %c : memref<4xf32> to memref<4xf32>
    %g = func.call @fresh(%c) : (memref<4xf32>) -> memref<4xf32>
    %t = memref.load %v[%c0] : memref<2xf32, strided<[1], offset: 1>>
    %w = memref.load %g[%c0] : memref<4xf32>
    %s = memref.load %e[%c0] : memref<4xf32>
    %r0 = arith.addf %t, %w : f32
    %r = arith.addf %r0, %s : f32
    memref.dealloc %a : memref<4xf32>
    memref.dealloc %b : memref<4xf32>
    memref.dealloc %c : memref<4xf32>
    memref.dealloc %g : memref<4xf32>
    return %r : f32
  }
}
";

#[test]
fn buffers_are_freed_after_their_last_use() {
    let mlir = Mlir::new();
    let m = mlir.parse(BLOCK, "block").expect("parses");
    let moved = free_after_last_use(&m);
    assert_eq!(moved, 6, "{}", Mlir::print(&m));
    mlir.verify(&m, "block").expect("verifies");
    let text = Mlir::print(&m);
    let here = |s: &str| Check::Here(s.to_string());
    let next = |s: &str| Check::Next(s.to_string());
    let not = |s: &str| Check::Not(s.to_string());
    check(
        &text,
        &[
            here("func.func @f("),
            // `%a`: freed once copied into `%b`.
            here("memref.copy %alloc, %alloc_0"),
            next("memref.dealloc %alloc : memref<4xf32>"),
            // `%c`: once `@fresh`, a function of the module, has copied it (its result is a
            // new buffer, not `%c`).
            here("call @fresh(%alloc_1)"),
            next("memref.dealloc %alloc_1 : memref<4xf32>"),
            // `%g`: after its load.
            here("memref.load %1["),
            next("memref.dealloc %1 : memref<4xf32>"),
            // `%b`: its view is read before, but `@ext` is only declared and may return
            // `%b` itself, so `%b` lives until that result's load.
            not("memref.dealloc %alloc_0"),
            here("memref.load %0["),
            next("memref.dealloc %alloc_0 : memref<4xf32>"),
            next("arith.addf"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
    check(
        &text,
        &[
            here("func.func @g("),
            // `%d` is read last through its view.
            not("memref.dealloc %alloc"),
            here("memref.load %subview["),
            next("memref.dealloc %alloc : memref<4xf32>"),
            // The two results of `@two` may be one buffer (its second is a view of its
            // first): the first is freed after the second's last load.
            not("memref.dealloc %0#0"),
            here("memref.load %0#1["),
            next("memref.dealloc %0#0 : memref<4xf32>"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}\n{text}"));
}
