//! `Mlir::define_functions`: declared functions get the bodies of a second module's
//! functions of the same names, after passes that could not take those bodies have run.

use tessera_mlir::{Error, Mlir, PipelineOptions};

const DECLARED: &str = "module {
  func.func private @double(memref<4xf32>, memref<4xf32>)
  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %b = bufferization.to_buffer %a read_only : tensor<4xf32> to memref<4xf32>
    %t = memref.alloc() : memref<4xf32>
    func.call @double(%b, %t) : (memref<4xf32>, memref<4xf32>) -> ()
    %o = memref.alloc() : memref<4xf32>
    func.call @double(%t, %o) : (memref<4xf32>, memref<4xf32>) -> ()
    %r = bufferization.to_tensor %o restrict : memref<4xf32> to tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
";

const DOUBLE: &str = "module {
  func.func private @double(%x: memref<4xf32>, %y: memref<4xf32>) {
    linalg.add ins(%x, %x : memref<4xf32>, memref<4xf32>) outs(%y : memref<4xf32>)
    return
  }
}
";

fn message(e: Error) -> String {
    match e {
        Error::Mlir { stage, message, .. } => format!("{stage}: {message}"),
        e => panic!("not an MLIR error: {e:?}"),
    }
}

#[test]
fn declared_functions_get_their_bodies() {
    let mlir = Mlir::new();
    let mut m = mlir.parse(DECLARED, "declared").expect("parses");
    mlir.run_pipeline(
        &mut m,
        "builtin.module(one-shot-bufferize{bufferize-function-boundaries=1 function-boundary-type-conversion=identity-layout-map},buffer-deallocation-pipeline)",
        &PipelineOptions::default(),
        "declared",
    )
    .expect("bufferizes and deallocates");
    let before = Mlir::print(&m);
    assert!(before.contains("func.func private @double(memref<4xf32>, memref<4xf32>)\n"));
    mlir.define_functions(&mut m, DOUBLE, "declared")
        .expect("defines");
    let after = Mlir::print(&m);
    assert!(after.contains("linalg.add ins("), "{after}");
    assert!(!after.contains("func.func private @double(memref<4xf32>, memref<4xf32>)\n"));
    // The caller frees the temporary, as the deallocation left it.
    assert!(
        after.contains("memref.dealloc %alloc : memref<4xf32>"),
        "{after}"
    );

    // A definition nothing declares, a body of the wrong signature, and an op that is no
    // function are errors naming them.
    let mut m = mlir.parse(DECLARED, "declared").expect("parses");
    let e = mlir
        .define_functions(&mut m, &DOUBLE.replace("@double", "@triple"), "declared")
        .expect_err("undeclared");
    assert!(message(e).contains("@triple is defined but not declared"));
    let wrong = DOUBLE.replace("memref<4xf32>", "memref<8xf32>");
    let e = mlir
        .define_functions(&mut m, &wrong, "declared")
        .expect_err("wrong signature");
    assert!(message(e).starts_with("verify:"));
    let e = mlir
        .define_functions(
            &mut mlir.parse(DECLARED, "declared").expect("parses"),
            "module {\n  memref.global \"private\" @g : memref<4xf32>\n}\n",
            "declared",
        )
        .expect_err("not a function");
    assert!(message(e).contains("`memref.global` is not a func.func"));
}
