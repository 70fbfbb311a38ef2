//! Runs the ONNX backend node test cases of the shape, index, reduce and control op families
//! against the reference interpreter. The cases come from a local cache (see
//! `scripts/`); the test is ignored by default and reads the cache directory from
//! `ONNX_NODE_CACHE` (default `/work/onnx-node-cache/node`). `ONNX_CASES` (comma-separated
//! prefixes) narrows the selection.

use std::path::{Path, PathBuf};

use tessera_ir::Tensor;
use tessera_onnx::{ImportOptions, decode_tensor, import_file};

const PREFIXES: &[&str] = &[
    "test_reshape",
    "test_flatten",
    "test_squeeze",
    "test_unsqueeze",
    "test_transpose",
    "test_concat",
    "test_split",
    "test_slice",
    "test_constant_pad",
    "test_edge_pad",
    "test_reflect_pad",
    "test_wrap_pad",
    "test_tile",
    "test_expand",
    "test_shape",
    "test_size",
    "test_constantofshape",
    "test_constant",
    "test_range",
    "test_depthtospace",
    "test_spacetodepth",
    "test_resize",
    "test_upsample",
    "test_gather",
    "test_scatter",
    "test_top_k",
    "test_tril",
    "test_triu",
    "test_cumsum",
    "test_argmax",
    "test_argmin",
    "test_reduce",
    "test_if",
];

fn read_pb(path: &Path) -> Result<Tensor, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    decode_tensor(data.into()).map_err(|e| format!("{}: {e}", path.display()))
}

fn close(want: &Tensor, got: &Tensor) -> Result<(), String> {
    if want.elem() != got.elem() || want.shape() != got.shape() {
        return Err(format!("type: want {} got {}", want.ty(), got.ty()));
    }
    let float = want.elem().is_float();
    for (i, (a, b)) in want.to_f64_vec().iter().zip(got.to_f64_vec()).enumerate() {
        let ok = if float {
            (a.is_nan() && b.is_nan()) || a == &b || (a - b).abs() <= 1e-5 + 1e-3 * a.abs()
        } else {
            *a == b
        };
        if !ok {
            return Err(format!("element {i}: want {a} got {b}"));
        }
    }
    Ok(())
}

fn run_case(dir: &Path) -> Result<(), String> {
    let g = import_file(&dir.join("model.onnx"), &ImportOptions::default())
        .map_err(|e| format!("import: {e}"))?;
    let data = dir.join("test_data_set_0");
    let mut ins = Vec::new();
    let mut outs = Vec::new();
    for i in 0.. {
        let p = data.join(format!("input_{i}.pb"));
        if !p.exists() {
            break;
        }
        ins.push(read_pb(&p)?);
    }
    for i in 0.. {
        let p = data.join(format!("output_{i}.pb"));
        if !p.exists() {
            break;
        }
        outs.push(read_pb(&p)?);
    }
    if ins.len() != g.inputs().len() {
        return Err(format!(
            "graph has {} inputs, case has {}",
            g.inputs().len(),
            ins.len()
        ));
    }
    let got = tessera_ir::interp::run(&g, &ins).map_err(|e| format!("run: {e}"))?;
    if got.len() != outs.len() {
        return Err(format!("{} outputs, want {}", got.len(), outs.len()));
    }
    for (i, (w, g)) in outs.iter().zip(&got).enumerate() {
        close(w, g).map_err(|m| format!("output {i}: {m}"))?;
    }
    Ok(())
}

#[test]
#[ignore = "needs the ONNX node test-case cache"]
fn node_cases() {
    let root = PathBuf::from(
        std::env::var("ONNX_NODE_CACHE").unwrap_or_else(|_| "/work/onnx-node-cache/node".into()),
    );
    let only: Option<Vec<String>> = std::env::var("ONNX_CASES")
        .ok()
        .map(|s| s.split(',').map(str::to_string).collect());
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .expect("cache directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| match &only {
            Some(p) => p.iter().any(|p| n.starts_with(p.as_str())),
            None => PREFIXES.iter().any(|p| n.starts_with(p)),
        })
        .collect();
    names.sort();
    let mut failed = 0;
    for n in &names {
        match run_case(&root.join(n)) {
            Ok(()) => println!("PASS {n}"),
            Err(e) => {
                failed += 1;
                println!("FAIL {n}: {}", e.lines().collect::<Vec<_>>().join(" | "));
            }
        }
    }
    println!("{} / {} passed", names.len() - failed, names.len());
}
