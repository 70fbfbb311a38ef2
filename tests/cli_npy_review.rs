//! Regression tests for `.npy` defects found by a code review: crafted headers that slipped
//! past the old textual pre-check into arithmetic that overflows, and output files that did
//! not get the permissions of a plain create.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use predicates::prelude::*;
use predicates::str::contains;
use tessera::npy;
use tessera_ir::{ElemType, Tensor};

/// A hand-made `.npy` file (format 1.0) with the given header dict and data.
fn npy_bytes(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut text = dict.to_string();
    while !(10 + text.len() + 1).is_multiple_of(64) {
        text.push(' ');
    }
    text.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(text.len()).expect("short").to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(data);
    out
}

fn err_of(bytes: &[u8]) -> String {
    format!("{:#}", npy::decode(bytes).expect_err("should fail"))
}

#[test]
fn empty_shapes_whose_strides_overflow() {
    // No elements, but the stride of axis 0 (2^64) overflows, in either order.
    for order in ["False", "True"] {
        let b = npy_bytes(
            &format!(
                "{{'descr': '<f4', 'fortran_order': {order}, 'shape': (0, 4294967296, 4294967296), }}"
            ),
            &[],
        );
        let e = err_of(&b);
        assert!(e.contains("too large"), "{e}");
    }
    // The extents fit u64 but not the address space.
    let b = npy_bytes(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 2147483648), }",
        &[],
    );
    assert!(err_of(&b).contains("too large"), "{}", err_of(&b));
}

#[test]
fn double_quoted_keys_are_checked_too() {
    let b = npy_bytes(
        r#"{"descr": "<f4", "fortran_order": False, "shape": (4294967296, 4294967296, 4294967296), }"#,
        &[],
    );
    assert!(err_of(&b).contains("too large"), "{}", err_of(&b));
    // A valid file with double quotes reads.
    let data: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    let b = npy_bytes(
        r#"{"descr": "<f4", "fortran_order": False, "shape": (2,)}"#,
        &data,
    );
    let t = npy::decode(&b).expect("decodes");
    assert_eq!((t.elem(), t.to_f64_vec()), (ElemType::F32, vec![1.5, 2.5]));
}

#[test]
fn duplicate_keys_are_an_error() {
    let b = npy_bytes(
        "{'shape': (1,), 'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
        &[],
    );
    let e = err_of(&b);
    assert!(e.contains("'shape' appears twice"), "{e}");
}

#[test]
fn header_literals_are_parsed_strictly() {
    let cases = [
        (
            "{'descr': '<f4', 'fortran_order': False}",
            "'shape' is missing",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
            "unexpected key 'extra'",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}",
            "invalid extent -1",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551616,)}",
            "invalid extent",
        ),
        (
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
            "True or False",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': 2}",
            "not a tuple",
        ),
        ("{'descr': '<f4' 'shape': (2,)}", "expected '}'"),
        ("[1, 2]", "not a Python dict"),
    ];
    for (dict, want) in cases {
        let e = err_of(&npy_bytes(dict, &[0; 8]));
        assert!(
            e.contains("corrupt .npy header") && e.contains(want),
            "{dict}: {e}"
        );
    }
    // Deep nesting is an error, not a stack overflow.
    let deep = format!("{{'descr': {}", "[".repeat(20_000));
    let mut b = b"\x93NUMPY\x02\x00".to_vec();
    b.extend_from_slice(&u32::try_from(deep.len()).expect("fits").to_le_bytes());
    b.extend_from_slice(deep.as_bytes());
    assert!(err_of(&b).contains("nested"), "{}", err_of(&b));
    // Python 2 long suffixes, as old numpy wrote them.
    let t = npy::decode(&npy_bytes(
        "{'descr': '<i2', 'fortran_order': False, 'shape': (2L, 1L), }",
        &[1, 0, 2, 0],
    ))
    .expect("decodes");
    assert_eq!(
        (t.shape(), t.to_f64_vec()),
        (&[2usize, 1][..], vec![1.0, 2.0])
    );
}

fn tessera() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
}

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models")
}

#[test]
fn run_rejects_a_crafted_input_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("x.npy");
    fs::write(
        &path,
        npy_bytes(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (0, 4294967296, 4294967296), }",
            &[],
        ),
    )
    .expect("write");
    tessera()
        .arg("run")
        .arg(models().join("mlp.tir"))
        .args(["--input", &format!("x={}", path.display())])
        .assert()
        .code(1)
        .stderr(contains("x.npy").and(contains("too large")));
}

#[cfg(unix)]
#[test]
fn outputs_get_the_permissions_of_a_plain_create() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    // What a plain create gives under this process' umask (the umask is inherited).
    let reference = dir.path().join("reference");
    fs::File::create(&reference).expect("create");
    let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    let want = mode(&reference);

    let out = dir.path().join("y.npy");
    npy::write(&out, &Tensor::zeros(ElemType::F32, &[2]).expect("small")).expect("write");
    assert_eq!(mode(&out), want);

    // A replaced file keeps its mode.
    fs::set_permissions(&out, fs::Permissions::from_mode(0o640)).expect("chmod");
    npy::write(&out, &Tensor::zeros(ElemType::F32, &[3]).expect("small")).expect("write");
    assert_eq!(mode(&out), 0o640);

    // The same through the command line.
    let outdir = dir.path().join("out");
    tessera()
        .arg("run")
        .arg(models().join("mlp.tir"))
        .args([
            "--input",
            &format!("x={}", models().join("mlp.input.npy").display()),
        ])
        .arg("--output-dir")
        .arg(&outdir)
        .assert()
        .success();
    assert_eq!(mode(&outdir.join("y.npy")), want);
}
