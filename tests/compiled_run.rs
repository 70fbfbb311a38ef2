//! `tessera compile -o DIR` and `tessera run DIR`: the files a compile writes (one MLIR module
//! per device with work, the manifest, the weights outside the text), the further `--emit`
//! outputs (MLIR after the target pipeline, LLVM IR, object files, PTX), running what was
//! written (and `run MODEL --target`), byte-identical output for the same input, the MPI
//! executable under `mpirun -np 2` and `-np 4`, and bad input.

use std::fs;
use std::path::Path;

use tessera_ir::Tensor;

mod common;

use common::cli::{fails, max_diff, ok, repo, tessera};

const GPT2: &str = "testdata/models/onnx/gpt2_tiny";

fn model(dir: &str) -> String {
    format!("{dir}/model.onnx")
}

fn reference_logits() -> Tensor {
    tessera::npy::read(&repo().join(GPT2).join("output_0_logits.npy")).expect("reference")
}

/// `tessera compile` of gpt2_tiny (`input_ids` 1x16) for `target`, with `extra` arguments.
fn gpt2_compile(target: &str, extra: &[&str]) -> assert_cmd::Command {
    let mut cmd = tessera();
    cmd.args([
        "compile",
        &model(GPT2),
        "--input-shape",
        "input_ids=1x16",
        "--target",
        target,
    ])
    .args(extra);
    cmd
}

fn compile_gpt2(out: &Path, target: &str, extra: &[&str]) -> String {
    ok(gpt2_compile(target, extra).arg("-o").arg(out))
}

/// `dir/manifest.json`, parsed.
fn read_manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(dir.join("manifest.json")).expect("manifest"))
        .expect("json")
}

#[test]
fn compile_writes_a_module_per_device_a_manifest_and_the_weights_and_run_matches_onnxruntime() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("build");
    compile_gpt2(&dir, "mcm-2x2", &[]);
    let manifest = read_manifest(&dir);
    assert_eq!(manifest["format"], "tessera-manifest/2");
    assert_eq!(manifest["target"], "mcm-2x2");
    let devices = manifest["devices"].as_array().expect("devices");
    assert!(
        devices.len() >= 2,
        "gpt2_tiny uses the host and a chip: {devices:?}"
    );
    let weights = fs::metadata(dir.join("weights.safetensors"))
        .expect("weights")
        .len();
    let mut text_bytes = 0;
    for d in devices {
        let module =
            fs::read_to_string(dir.join(d["module"].as_str().expect("module"))).expect("module");
        assert!(
            module.starts_with(&format!(
                "module @{} attributes {{dlti.target_system_spec",
                d["name"].as_str().expect("name")
            )),
            "{}",
            &module[..200]
        );
        text_bytes += module.len() as u64;
    }
    // Every step's function is in its device's module, and every cut edge says what moves.
    let mut transfers = 0;
    for s in manifest["steps"].as_array().expect("steps") {
        let dev = s["device"].as_str().expect("device");
        let module = fs::read_to_string(dir.join(format!("{dev}.mlir"))).expect("module");
        assert!(module.contains(&format!(
            "func.func @{}(",
            s["function"].as_str().expect("fn")
        )));
        for a in s["args"].as_array().expect("args") {
            if let Some(t) = a.get("transfer") {
                assert_eq!(t["to"], *dev);
                assert!(t["bytes"].as_u64().expect("bytes") > 0);
                transfers += 1;
            }
        }
    }
    assert!(transfers > 0, "a multi-device program moves tensors");
    // The weights are not in the text.
    assert!(
        text_bytes < weights,
        "{text_bytes} bytes of MLIR for {weights} bytes of weights"
    );

    let out = tmp.path().join("out");
    let printed = ok(tessera()
        .arg("run")
        .arg(&dir)
        .args([
            "--input",
            &format!("input_ids={GPT2}/input_0_input_ids.npy"),
            "-o",
        ])
        .arg(&out));
    assert!(printed.contains("%logits: f32[1, 16, 1000]"), "{printed}");
    let got = tessera::npy::read(&out.join("logits.npy")).expect("output");
    let d = max_diff(&got, &reference_logits());
    assert!(d < 1e-4, "max |diff| {d} against onnxruntime");

    // `run MODEL --target` compiles and runs in one go, to the same numbers.
    let out2 = tmp.path().join("out2");
    ok(tessera()
        .args(["run", &model(GPT2), "--target", "mcm-2x2"])
        .args([
            "--input",
            &format!("input_ids={GPT2}/input_0_input_ids.npy"),
            "-o",
        ])
        .arg(&out2));
    let again = tessera::npy::read(&out2.join("logits.npy")).expect("output");
    assert_eq!(got, again);
}

#[test]
fn same_input_gives_byte_identical_outputs() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    compile_gpt2(&a, "mcm-4x4", &[]);
    compile_gpt2(&b, "mcm-4x4", &[]);
    let mut names: Vec<String> = fs::read_dir(&a)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.iter().any(|n| n.ends_with(".mlir")));
    // After the device pipelines too: bufferization names its constant globals in a
    // run-dependent order and GPU serialization records its time, unless made canonical.
    let (c, d) = (tmp.path().join("c"), tmp.path().join("d"));
    let emits = [
        "--strategy",
        "round-robin",
        "--emit",
        "lowered,llvm,ptx,object",
    ];
    compile_gpt2(&c, "hetero-cpu-gpu", &emits);
    compile_gpt2(&d, "hetero-cpu-gpu", &emits);
    for n in [
        "cpu0.lowered.mlir",
        "cpu0.ll",
        "cpu0.o",
        "gpu0.lowered.mlir",
        "gpu1.lowered.mlir",
        "gpu0.ptx",
        "gpu1.ptx",
    ] {
        assert_eq!(
            fs::read(c.join(n)).expect("c"),
            fs::read(d.join(n)).expect("d"),
            "{n} differs between two compiles"
        );
    }
    let lowered = fs::read_to_string(c.join("gpu0.lowered.mlir")).expect("lowered");
    assert!(lowered.contains("gpu.binary") && !lowered.contains("LLVMIRToISATimeInMs"));
    // The report holds wall times (the only measurements among the outputs): its data must
    // agree apart from them, and the page is drawn from the data alone.
    let timeless = |dir: &Path| {
        let text = fs::read_to_string(dir.join("report.json")).expect("report.json");
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        for list in ["passes", "stages"] {
            for e in v[list].as_array_mut().expect(list) {
                for key in ["seconds", "verify_seconds"] {
                    if let Some(t) = e.get_mut(key) {
                        *t = serde_json::Value::from(0.0);
                    }
                }
            }
        }
        v
    };
    assert_eq!(
        timeless(&a),
        timeless(&b),
        "report.json differs beyond wall times"
    );
    fs::copy(a.join("report.json"), b.join("report.json")).expect("copy");
    ok(tessera().arg("report").arg(&b));
    for n in &names {
        assert_eq!(
            fs::read(a.join(n)).expect("a"),
            fs::read(b.join(n)).expect("b"),
            "{n} differs between two compiles"
        );
    }
}

#[test]
fn emit_lowered_llvm_object_and_ptx() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("cpu");
    ok(tessera()
        .args([
            "compile",
            &model("testdata/models/onnx/mlp"),
            "--input-shape",
            "x=4x32",
            "-o",
        ])
        .arg(&dir)
        .args(["--emit", "lowered,llvm,object"]));
    let lowered = fs::read_to_string(dir.join("cpu0.lowered.mlir")).expect("lowered");
    assert!(
        lowered.contains("llvm.func @step0("),
        "CPU pipeline ends in the LLVM dialect"
    );
    let ll = fs::read_to_string(dir.join("cpu0.ll")).expect("llvm ir");
    assert!(
        ll.contains("define void @_mlir_ciface_step0("),
        "{}",
        &ll[..300.min(ll.len())]
    );
    let obj = fs::read(dir.join("cpu0.o")).expect("object");
    assert_eq!(&obj[..4], b"\x7fELF");
    // The MLIR pipeline runs in-process and takes the instrumentation flags.
    let out = tessera()
        .args([
            "compile",
            &model("testdata/models/onnx/mlp"),
            "--input-shape",
            "x=4x32",
            "-o",
        ])
        .arg(&dir)
        .args(["--emit", "lowered", "--timing", "--print-ir-after-all"])
        .output()
        .expect("runs");
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("OneShotBufferizePass"),
        "MLIR's pass timing: {err}"
    );
    assert!(
        err.contains("IR Dump After ConvertFuncToLLVMPass"),
        "MLIR's IR printing"
    );

    // NVIDIA GPUs get PTX; round-robin puts work on both of them.
    let gpu = tmp.path().join("gpu");
    compile_mlp_on_gpus(&gpu, &["--emit", "ptx"]);
    // Each GPU gets code for its own architecture: gpu0 is an A100, gpu1 a V100.
    for (d, arch) in [("gpu0", "sm_80"), ("gpu1", "sm_70")] {
        let ptx = fs::read_to_string(gpu.join(format!("{d}.ptx"))).expect("ptx");
        assert!(
            ptx.contains(&format!(".target {arch}\n")) && ptx.contains(".entry "),
            "{d}: {ptx}"
        );
    }
    assert!(!gpu.join("cpu0.ptx").exists());
}

/// `tessera compile -o out` of the ONNX MLP (`x` 4x32) for `hetero-cpu-gpu`, round-robin
/// (work on both GPUs), with `extra` arguments.
fn compile_mlp_on_gpus(out: &Path, extra: &[&str]) {
    ok(tessera()
        .args([
            "compile",
            &model("testdata/models/onnx/mlp"),
            "--input-shape",
            "x=4x32",
            "--target",
            "hetero-cpu-gpu",
            "--strategy",
            "round-robin",
            "-o",
        ])
        .arg(out)
        .args(extra));
}

/// `mpirun -np K PROGRAM INPUT OUTDIR`.
fn mpirun(k: usize, program: &Path, input: &Path, out: &Path) -> std::process::Output {
    std::process::Command::new("mpirun")
        .args(["-np", &k.to_string()])
        .arg(program)
        .arg(input)
        .arg(out)
        .output()
        .expect("mpirun (MPICH, `make deps`)")
}

/// Compiles gpt2_tiny spread over every device of a K-device target (round-robin: many cut
/// edges, bool and int64 tensors among them) as one MPI program and runs it.
fn mpi_run(k: usize) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mpi");
    let target = format!("testdata/targets/mpi-{k}.toml");
    let out = tessera()
        .args([
            "compile",
            &model(GPT2),
            "--input-shape",
            "input_ids=1x16",
            "--target",
            &target,
        ])
        .args(["--strategy", "round-robin", "--emit", "mpi", "-o"])
        .arg(&dir)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("mpi: {k} ranks")), "{err}");
    let results = tmp.path().join("results");
    fs::create_dir_all(&results).expect("mkdir");
    let input = repo().join(GPT2).join("input_0_input_ids.npy");
    let run = mpirun(k, &dir.join("program"), &input, &results);
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    // Each output is written under the model's name for it, as `run --output-dir` does.
    let got = tessera::npy::read(&results.join("logits.npy")).expect("output");
    let d = max_diff(&got, &reference_logits());
    assert!(d < 1e-4, "max |diff| {d} against onnxruntime on {k} ranks");
    let module = fs::read_to_string(dir.join("program.mlir")).expect("program.mlir");
    assert!(
        module.matches("mpi.send(").count() >= k - 1,
        "cut edges are sends"
    );

    // The wrong number of ranks is refused with the right one.
    let wrong = mpirun(k + 1, &dir.join("program"), &input, &results);
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains(&format!("run it with mpirun -np {k}")),
        "{}",
        String::from_utf8_lossy(&wrong.stderr)
    );
}

#[test]
fn mpi_program_on_2_ranks_matches_onnxruntime() {
    mpi_run(2);
}

#[test]
fn mpi_program_on_4_ranks_matches_onnxruntime() {
    mpi_run(4);
}

#[test]
fn bad_input_is_a_clear_error() {
    let tmp = tempfile::tempdir().expect("tmp");
    // --emit needs a directory.
    let e = fails(tessera().args([
        "compile",
        &model(GPT2),
        "--input-shape",
        "input_ids=1x16",
        "--emit",
        "llvm",
    ]));
    assert!(
        e.contains("--emit writes files into the output directory: give -o DIR"),
        "{e}"
    );
    // LLVM IR is for CPU devices.
    let e = fails(
        tessera()
            .args([
                "compile",
                &model("testdata/models/onnx/mlp"),
                "--input-shape",
                "x=4x32",
            ])
            .args(["--target", "hetero-cpu-gpu", "--strategy", "single", "-o"])
            .arg(tmp.path().join("x"))
            .args(["--emit", "ptx"]),
    );
    assert!(
        e.contains("--emit ptx: no NVIDIA GPU device of hetero-cpu-gpu has work"),
        "{e}"
    );
    // Not a compiled directory.
    let e = fails(
        tessera()
            .arg("run")
            .arg(tmp.path())
            .args(["--input", "x=a.npy"]),
    );
    assert!(e.contains("manifest.json"), "{e}");
    // A compiled directory with an input of the wrong shape.
    let dir = tmp.path().join("mlp");
    ok(tessera()
        .args([
            "compile",
            &model("testdata/models/onnx/mlp"),
            "--input-shape",
            "x=2x32",
            "-o",
        ])
        .arg(&dir));
    let e = fails(
        tessera()
            .arg("run")
            .arg(&dir)
            .args(["--input", "x=testdata/models/onnx/mlp/input_0_x.npy"]),
    );
    assert!(e.contains("input_0_x.npy") && e.contains("[4, 32]"), "{e}");
    // A compiled directory does not take a target.
    let e = fails(tessera().arg("run").arg(&dir).args(["--target", "cpu"]));
    assert!(e.contains("drop --target"), "{e}");
}

/// `compile -o` builds each CPU device's code as a shared library, which `run DIR` loads
/// instead of compiling; a module edited since, or a library built for another CPU, is
/// JIT-compiled, with a note; a library that does not load is an error naming it.
#[test]
fn run_loads_the_library_compile_built_and_compiles_an_edited_module() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("build");
    compile_gpt2(&dir, "cpu", &[]);
    let manifest = read_manifest(&dir);
    let module = fs::read_to_string(dir.join("cpu0.mlir")).expect("module");
    let lib = &manifest["devices"][0]["library"];
    assert_eq!(lib["file"], "cpu0.so", "{manifest}");
    assert_eq!(
        lib["source_sha256"].as_str(),
        Some(tessera_mlir::native::library_digest(&module).as_str())
    );
    let run = |out: &str| {
        let o = tessera()
            .arg("run")
            .arg(&dir)
            .args([
                "--input",
                &format!("input_ids={GPT2}/input_0_input_ids.npy"),
                "-o",
            ])
            .arg(tmp.path().join(out))
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (o.status.code(), err)
    };
    let (code, err) = run("lib");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("loaded 1 library in"), "{err}");
    assert!(!err.contains("note:"), "{err}");
    let got = tessera::npy::read(&tmp.path().join("lib/logits.npy")).expect("output");
    let d = max_diff(&got, &reference_logits());
    assert!(d < 1e-4, "max |diff| {d} against onnxruntime");
    // An edited module is not run through the old library.
    fs::write(dir.join("cpu0.mlir"), format!("// edited\n{module}")).expect("edit");
    let (code, err) = run("jit");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(
            "note: JIT-compiling instead of loading cpu0.so (not built from cpu0.mlir as it is now)"
        ) && err.contains("JIT compile"),
        "{err}"
    );
    let again = tessera::npy::read(&tmp.path().join("jit/logits.npy")).expect("output");
    assert!(max_diff(&got, &again) < 1e-5);
    // Nor is a library built for a CPU with other features.
    fs::write(dir.join("cpu0.mlir"), &module).expect("restore");
    let text = fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    let cpu = lib["host_cpu"].as_str().expect("host_cpu");
    assert_eq!(cpu, tessera_mlir::native::host_cpu());
    fs::write(dir.join("manifest.json"), text.replace(cpu, "another")).expect("edit");
    let (code, err) = run("cpu");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("(built for a CPU with other features)"),
        "{err}"
    );
    fs::write(dir.join("manifest.json"), text).expect("restore");
    // A library that does not load is an error that names it.
    fs::write(dir.join("cpu0.so"), b"not a library").expect("spoil");
    let (code, err) = run("bad");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cpu0.so"), "{err}");
}

/// The MLP tests' input `x` (f32[4, 16]), written to `dir/x.npy`.
fn mlp_input(dir: &Path) -> std::path::PathBuf {
    let data: Vec<f32> = (0..64).map(|i| i as f32 / 50.0 - 0.6).collect();
    write_f32(&dir.join("x.npy"), &[4, 16], &data)
}

/// `data` as an f32 tensor of `shape`, written to the `.npy` file `path` (returned).
fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> std::path::PathBuf {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = Tensor::from_le_bytes(tessera_ir::ElemType::F32, shape, &bytes).expect("tensor");
    tessera::npy::write(path, &t).expect("write .npy");
    path.to_path_buf()
}

/// The output `y` of `tessera run WHAT --input x=X -o OUT` (a model or a compiled folder).
fn run_y(what: &Path, x: &Path, out: &Path) -> Tensor {
    ok(tessera()
        .arg("run")
        .arg(what)
        .arg("--input")
        .arg(format!("x={}", x.display()))
        .arg("-o")
        .arg(out));
    tessera::npy::read(&out.join("y.npy")).expect("y")
}

/// The compiled folder `dir` gives `want` for `x` under the JIT and under `mpirun -np
/// ranks`.
fn jit_and_mpi_match(dir: &Path, ranks: usize, x: &Path, want: &Tensor) {
    let tmp = dir.with_extension("runs");
    let got = run_y(dir, x, &tmp.join("jit"));
    assert!(max_diff(&got, want) < 1e-5, "JIT: {}", max_diff(&got, want));
    let results = tmp.join("mpi");
    fs::create_dir_all(&results).expect("mkdir");
    let run = mpirun(ranks, &dir.join("program"), x, &results);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let got = tessera::npy::read(&results.join("y.npy")).expect("mpi output");
    assert!(max_diff(&got, want) < 1e-5, "MPI: {}", max_diff(&got, want));
}

/// The MLP sharded by `shard{strategy=STRATEGY}` over mcm-2x2's four chips, compiled with
/// `--emit mpi`, run under the JIT and under `mpirun -np 5` (the host and the chips): both
/// give the interpreter's numbers, and the program's collective is the MPI dialect's
/// all-reduce on the world's communicator.
fn sharded_mlp_runs(strategy: &str, collective: &str) {
    let tmp = tempfile::tempdir().expect("tmp");
    let x = mlp_input(tmp.path());
    let model = "testdata/mlir/tp_mlp.tir";
    // The interpreter's answer.
    let want = run_y(Path::new(model), &x, &tmp.path().join("ref"));
    let dir = tmp.path().join("sharded");
    let passes = format!("shard{{strategy={strategy}}},canonicalize");
    ok(tessera()
        .args(["compile", model, "--target", "mcm-2x2", "--passes", &passes])
        .args(["--emit", "mpi", "-o"])
        .arg(&dir));
    let manifest = fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    assert!(
        manifest.contains(&format!("\"collective\": \"{collective}\"")),
        "{manifest}"
    );
    let program = fs::read_to_string(dir.join("program.mlir")).expect("program.mlir");
    assert!(
        program.contains("mpi.allreduce(") && !program.contains("shard.all_reduce"),
        "the collective is the MPI dialect's"
    );
    // In-process: each chip's block, then the collective; under MPI: the host and four
    // chips.
    jit_and_mpi_match(&dir, 5, &x, &want);
}

/// The resharding collectives (`all-to-all` between two splits, `reduce-scatter` of partial
/// sums into blocks) compute the interpreter's values in-process and under `mpirun`.
#[test]
fn resharding_collectives_run_under_the_jit_and_mpirun() {
    let tmp = tempfile::tempdir().expect("tmp");
    let x = mlp_input(tmp.path());
    let model = "testdata/mlir/reshard_mlp.tir";
    // The interpreter's answer, which is the unsplit MLP's (collectives are the identity).
    let want = run_y(Path::new(model), &x, &tmp.path().join("ref"));
    assert_eq!(
        max_diff(
            &want,
            &run_y(
                Path::new("testdata/mlir/tp_mlp.tir"),
                &x,
                &tmp.path().join("whole")
            )
        ),
        0.0
    );
    let dir = tmp.path().join("placed");
    ok(tessera()
        .args(["compile", model, "--target", "mcm-2x2", "--passes", "cse"])
        .args(["--split", "off", "--emit", "mpi", "-o"])
        .arg(&dir));
    let manifest = fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    for kind in ["all-to-all", "reduce-scatter", "all-gather"] {
        assert!(
            manifest.contains(&format!("\"collective\": \"{kind}\"")),
            "{kind}: {manifest}"
        );
    }
    // Under MPI: the host and the two chips of the mesh.
    jit_and_mpi_match(&dir, 3, &x, &want);
    // IR that `compile` must refuse (`extra` after the common flags): the error and the
    // output folder asked for.
    let refused = |name: &str, ir: &str, extra: &[&str]| {
        let file = tmp.path().join(format!("{name}.tir"));
        fs::write(&file, ir).expect("write");
        let out = tmp.path().join(name);
        let e = fails(
            tessera()
                .arg("compile")
                .arg(&file)
                .args(["--target", "mcm-2x2", "--passes", "cse", "--split", "off"])
                .args(extra)
                .arg("-o")
                .arg(&out),
        );
        (e, out)
    };
    // A collective of a collective's result (valid IR; apply never writes it) is refused:
    // a collective step makes the whole tensor, which the next would take for one block.
    let (e, out) = refused(
        "chained",
        "mesh @grid = [2] devices(\"chip0\", \"chip1\")\n\n\
         graph @g(%x: f32[4, 4]) {\n\
         \x20 %p = relu %x : f32[4, 4] device(\"@grid\")\n\
         \x20 %r = reduce-scatter %p {axes = [0]} : f32[4, 4] sharded[[0], []] device(\"@grid\")\n\
         \x20 %a = all-to-all %r {axes = [0]} : f32[4, 4] sharded[[], [0]] device(\"@grid\")\n\
         \x20 %g = all-gather %a {axes = [0]} : f32[4, 4] device(\"@grid\")\n\
         \x20 return %g\n}\n",
        &[],
    );
    assert!(
        e.contains("(all-to-all) reads the result of op")
            && e.contains("(reduce-scatter): a collective of a collective's result does not lower"),
        "{e}"
    );
    assert!(!out.join("manifest.json").exists());
    // MLIR 22's MPI lowering has no datatype for f16 (nor bf16, bool): refused at compile
    // time, not a null datatype at run time.
    let (e, out) = refused(
        "half",
        "mesh @grid = [2] devices(\"chip0\", \"chip1\")\n\n\
         graph @g(%x: f16[4, 4]) {\n\
         \x20 %p = relu %x : f16[4, 4] device(\"@grid\")\n\
         \x20 %s = all-reduce %p {axes = [0]} : f16[4, 4] device(\"@grid\")\n\
         \x20 return %s\n}\n",
        &["--emit", "mpi"],
    );
    assert!(
        e.contains("all-reduce of f16 tensors does not lower to MPI"),
        "{e}"
    );
    assert!(!out.exists());
}

/// Two meshes, one per pipeline stage: data parallel on the first, tensor parallel on the
/// second, the activations crossing between them. In-process and under `mpirun -np 5` (the
/// host and four chips), the interpreter's numbers, which are the whole MLP's.
#[test]
fn two_meshes_run_under_the_jit_and_mpirun() {
    let tmp = tempfile::tempdir().expect("tmp");
    let x = mlp_input(tmp.path());
    let model = "testdata/mlir/two_stage_mlp.tir";
    let want = run_y(Path::new(model), &x, &tmp.path().join("ref"));
    let whole = run_y(
        Path::new("testdata/mlir/tp_mlp.tir"),
        &x,
        &tmp.path().join("whole"),
    );
    assert!(
        max_diff(&want, &whole) < 1e-6,
        "{}",
        max_diff(&want, &whole)
    );
    let dir = tmp.path().join("placed");
    ok(tessera()
        .args(["compile", model, "--target", "mcm-2x2", "--passes", "cse"])
        .args(["--split", "off", "--emit", "mpi", "-o"])
        .arg(&dir));
    let manifest = fs::read_to_string(dir.join("manifest.json")).expect("manifest");
    for mesh in ["\"device\": \"@stage0\"", "\"device\": \"@stage1\""] {
        assert!(manifest.contains(mesh), "{mesh}: {manifest}");
    }
    jit_and_mpi_match(&dir, 5, &x, &want);
}

#[test]
fn tensor_parallel_mlp_runs_with_an_mpi_all_reduce() {
    sharded_mlp_runs("tensor", "all-reduce");
}

#[test]
fn data_parallel_mlp_runs_with_an_all_gather() {
    sharded_mlp_runs("data", "all-gather");
}

#[test]
fn print_ir_after_names_mlir_passes_of_the_device_pipelines() {
    let tmp = tempfile::tempdir().expect("tmp");
    let compile = |after: &str| {
        tessera()
            .args([
                "compile",
                "testdata/models/mlp.tir",
                "--input-shape",
                "x=8x16",
            ])
            .args(["--emit", "lowered", "--print-ir-after", after, "-o"])
            .arg(tmp.path().join("o"))
            .output()
            .expect("runs")
    };
    // By argument and by the class name --print-ir-after-all's headers show, beside a
    // tessera pass: exactly those passes' dumps, one per function for a function pass (each
    // kernel, the step, the deallocation's helper).
    let out = compile("convert-linalg-to-loops,ReconcileUnrealizedCastsPass,cse");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let headers: Vec<&str> = err.lines().filter(|l| l.contains("IR Dump")).collect();
    assert_eq!(
        headers,
        [
            "// -----// IR Dump After cse //----- //",
            "// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops) ('func.func' operation: @k0_gemm_relu) //----- //",
            "// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops) ('func.func' operation: @k1_gemm) //----- //",
            "// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops) ('func.func' operation: @k2_softmax) //----- //",
            "// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops) ('func.func' operation: @step0) //----- //",
            "// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops) ('func.func' operation: @dealloc_helper) //----- //",
            "// -----// IR Dump After ReconcileUnrealizedCastsPass (reconcile-unrealized-casts) ('builtin.module' operation: @cpu0) //----- //",
        ],
        "{err}"
    );
    // After linalg to loops the matmul is an scf.for nest; after the last pass, LLVM.
    let loops = err.split("(convert-linalg-to-loops)").nth(1).expect("dump");
    assert!(loops.contains("scf.for") && !loops.contains("linalg.matmul"));
    // A name neither tessera nor MLIR knows is an error.
    let out = compile("convert-linalg-to-lops");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown pass `convert-linalg-to-lops`"));
}

/// `--dump-pass-pipeline` prints the tessera pipeline as `tessera opt --passes` takes it and
/// each device's MLIR pipeline as `mlir-opt --pass-pipeline` takes it: `mlir-opt` given the
/// module `-o` wrote and that string prints exactly the `--emit lowered` file.
#[test]
fn dump_pass_pipeline_prints_what_mlir_opt_runs() {
    let tmp = tempfile::tempdir().expect("tmp");
    // No tensor constants: MLIR's own global names are then already canonical.
    let model = tmp.path().join("mm.tir");
    fs::write(
        &model,
        "graph @g(%a: f32[8, 16], %b: f32[16, 4], %c: f32[512, 512]) {\n  \
         %0 = matmul %a, %b : f32[8, 4] loc(\"fc\")\n  %1 = relu %0 : f32[8, 4]\n  \
         %2 = relu %c : f32[512, 512]\n  return %1, %2\n}\n",
    )
    .expect("write");
    let out = tmp.path().join("o");
    let run = tessera()
        .arg("compile")
        .arg(&model)
        .args(["--emit", "lowered", "--dump-pass-pipeline", "-o"])
        .arg(&out)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let passes = err
        .lines()
        .find_map(|l| l.strip_prefix("// tessera passes: tessera opt --passes='"))
        .and_then(|l| l.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no tessera pipeline line in\n{err}"));
    assert!(passes.starts_with("canonicalize{"), "{passes}");
    // The printed tessera pipeline runs as it is.
    ok(tessera()
        .arg("opt")
        .arg(&model)
        .arg(format!("--passes={passes}")));
    let pipeline = err
        .lines()
        .find_map(|l| {
            l.strip_prefix("// cpu0 (lowering `cpu`): mlir-opt cpu0.mlir --pass-pipeline='")
        })
        .and_then(|l| l.strip_suffix('\''))
        .unwrap_or_else(|| panic!("no cpu0 pipeline line in\n{err}"));
    // Every option spelled out, as MLIR expands the pipeline.
    // The schedule first, from the file compile -o wrote beside the module.
    assert!(
        pipeline.starts_with(
            "builtin.module(transform-preload-library{transform-library-paths={cpu0.schedule.mlir}},\
             transform-interpreter{"
        ),
        "{pipeline}"
    );
    assert!(pipeline.contains(",convert-math-to-funcs{"), "{pipeline}");
    assert!(
        pipeline.contains("bufferize-function-boundaries=true"),
        "{pipeline}"
    );
    let llvm = std::env::var("LLVM_PREFIX").unwrap_or_else(|_| "/usr/lib/llvm-22".into());
    // Run where the printed line names its files: the module and its schedule.
    let opt = std::process::Command::new(format!("{llvm}/bin/mlir-opt"))
        .current_dir(&out)
        .arg("cpu0.mlir")
        .arg(format!("--pass-pipeline={pipeline}"))
        .output()
        .expect("mlir-opt runs");
    assert!(
        opt.status.success(),
        "{}",
        String::from_utf8_lossy(&opt.stderr)
    );
    let lowered = fs::read_to_string(out.join("cpu0.lowered.mlir")).expect("lowered");
    // The second relu (2^18 elements) runs its rows on threads: the schedule's threads
    // sequence, applied after the fusion of elementwise ops, is not empty.
    let schedule = fs::read_to_string(out.join("cpu0.schedule.mlir")).expect("schedule");
    let threads = schedule
        .split_once("transform.named_sequence @tessera_threads(")
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("no threads sequence in\n{schedule}"));
    assert!(threads.contains("tile_using_forall"), "{schedule}");
    // mlir-opt ends its output with one more newline.
    let printed = String::from_utf8_lossy(&opt.stdout);
    assert!(
        printed.trim_end() == lowered.trim_end(),
        "mlir-opt with the printed pipeline differs from cpu0.lowered.mlir:\n{printed}"
    );
}

#[test]
fn weights_are_written_once_and_ir_dumps_share_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (out, dumps) = (tmp.path().join("o"), tmp.path().join("dumps"));
    // `--split off`: a split plan may be of the unfused graph (`unfuse-split`), whose new
    // constants its dumps after placement write in a weights file of their own.
    compile_gpt2(
        &out,
        "mcm-2x2",
        &[
            "--split",
            "off",
            "--ir-dump-dir",
            dumps.to_str().expect("utf-8"),
        ],
    );
    // placed.tir's sidecar is a link to the weights file, which holds its large constants.
    let link = fs::read_link(out.join("placed.safetensors")).expect("a link");
    assert_eq!(link, Path::new("weights.safetensors"));
    let placed = tessera_ir::text::load(&out.join("placed.tir")).expect("placed.tir loads");
    assert!(
        placed
            .consts()
            .any(|(_, c)| tessera_ir::text::is_external(c))
    );
    // The dumps: every pass, then placement, scheduling and transfer insertion; one
    // weights file, the others links to it.
    let mut names: Vec<String> = fs::read_dir(&dumps)
        .expect("dumps")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let tirs: Vec<&String> = names.iter().filter(|n| n.ends_with(".tir")).collect();
    assert_eq!(
        tirs,
        [
            "00-input.tir",
            "01-after-canonicalize.tir",
            "02-after-cse.tir",
            "03-after-eqsat.tir",
            "04-after-dce.tir",
            "05-after-place.tir",
            "06-after-schedule.tir",
            "07-after-transfers.tir",
        ]
    );
    for n in names.iter().filter(|n| n.ends_with(".safetensors")) {
        let meta = fs::symlink_metadata(dumps.join(n)).expect("meta");
        assert_eq!(
            meta.file_type().is_symlink(),
            n != "00-input.safetensors",
            "{n}"
        );
    }
    let text = |n: &str| fs::read_to_string(dumps.join(n)).expect("dump");
    assert!(text("05-after-place.tir").contains("device(\"chip0\")"));
    assert!(!text("06-after-schedule.tir").contains(" = transfer "));
    assert!(text("07-after-transfers.tir").contains(" = transfer "));
    // The last dump is the placed graph.
    assert_eq!(
        text("07-after-transfers.tir"),
        fs::read_to_string(out.join("placed.tir")).expect("placed")
    );
    for n in tirs {
        tessera_ir::text::load(&dumps.join(n)).expect("each dump loads");
    }
}

/// A model of the corpus with one input binding per graph input and its reference outputs.
struct Corpus {
    dir: &'static str,
    /// `NAME=SHAPE` per input, and the input's file in the model's folder.
    inputs: &'static [(&'static str, &'static str, &'static str)],
    /// Output names and their reference files.
    outputs: &'static [(&'static str, &'static str)],
}

const GPT2_TINY: Corpus = Corpus {
    dir: GPT2,
    inputs: &[("input_ids", "1x16", "input_0_input_ids.npy")],
    outputs: &[("logits", "output_0_logits.npy")],
};

const CNN: Corpus = Corpus {
    dir: "testdata/models/onnx/cnn",
    inputs: &[("image", "2x3x32x32", "input_0_image.npy")],
    outputs: &[("logits", "output_0_logits.npy")],
};

const BERT_TINY: Corpus = Corpus {
    dir: "testdata/models/onnx/bert_tiny",
    inputs: &[
        ("input_ids", "2x16", "input_0_input_ids.npy"),
        ("attention_mask", "2x16", "input_1_attention_mask.npy"),
    ],
    outputs: &[
        ("last_hidden_state", "output_0_last_hidden_state.npy"),
        ("pooler_output", "output_1_pooler_output.npy"),
    ],
};

const EINSUM: Corpus = Corpus {
    dir: "testdata/models/onnx/resize_topk_einsum",
    inputs: &[
        ("img", "1x2x4x4", "input_0_img.npy"),
        ("a", "2x3x4", "input_1_a.npy"),
        ("b", "2x4x5", "input_2_b.npy"),
    ],
    outputs: &[
        ("up_linear", "output_0_up_linear.npy"),
        ("up_nearest", "output_1_up_nearest.npy"),
        ("prod", "output_2_prod.npy"),
        ("top_values", "output_3_top_values.npy"),
        ("top_indices", "output_4_top_indices.npy"),
    ],
};

/// Compiles `m` for `target` with `split` (`--split ...` arguments) into `dir`; returns how
/// many ops the plan splits along each axis.
fn compile_split(
    m: &Corpus,
    target: &str,
    split: &[&str],
    dir: &Path,
    extra: &[&str],
) -> Vec<String> {
    let mut cmd = tessera();
    cmd.args(["compile", &model(m.dir), "--target", target]);
    for (name, shape, _) in m.inputs {
        cmd.args(["--input-shape", &format!("{name}={shape}")]);
    }
    cmd.args(split).args(extra).arg("-o").arg(dir);
    ok(&mut cmd);
    let plan: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("plan.json")).expect("plan"))
            .expect("json");
    plan["assignment"]
        .as_array()
        .expect("assignment")
        .iter()
        .filter_map(|a| a["split"]["axis"].as_str().map(str::to_string))
        .collect()
}

/// Runs a compiled `dir` of `m` under the JIT and compares every output with onnxruntime's.
fn run_matches(m: &Corpus, dir: &Path, what: &str) {
    let out = dir.with_extension("out");
    let mut cmd = tessera();
    cmd.arg("run").arg(dir);
    for (name, _, file) in m.inputs {
        cmd.arg("--input").arg(format!(
            "{name}={}",
            repo().join(m.dir).join(file).display()
        ));
    }
    ok(cmd.arg("-o").arg(&out));
    outputs_match(m, &out, what);
}

/// Every output of `m` written in `out` (`<name>.npy`) is onnxruntime's within 1e-4.
fn outputs_match(m: &Corpus, out: &Path, what: &str) {
    for (name, file) in m.outputs {
        let got = tessera::npy::read(&out.join(format!("{name}.npy"))).expect("output");
        let want = tessera::npy::read(&repo().join(m.dir).join(file)).expect("reference");
        let d = max_diff(&got, &want);
        assert!(
            d < 1e-4,
            "{what}: {name}: max |diff| {d} against onnxruntime"
        );
    }
}

/// Every sharding rule the models use, forced (`--split force --split-axes AXIS`): the plan
/// splits ops along that axis on a device mesh, with the collectives the layouts need, and the
/// compiled program run under the JIT gives onnxruntime's outputs.
#[test]
fn graphs_split_along_every_rule_run_under_the_jit_and_match_onnxruntime() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cases: &[(&Corpus, &[&str])] = &[
        (
            &GPT2_TINY,
            &[
                "vocab", "hidden", "columns", "rows", "heads", "batch", "axis1", "axis2",
            ],
        ),
        (&CNN, &["channels", "batch"]),
        (&BERT_TINY, &["heads", "rows", "hidden"]),
        // `bij,bjk->bik`: by its batch letter, and by its summed one (partial sums).
        (&EINSUM, &["batch", "contracted"]),
    ];
    for (m, axes) in cases {
        for axis in *axes {
            let dir = tmp
                .path()
                .join(format!("{}-{axis}", m.dir.replace('/', "_")));
            // GPT-2's fused QKV splits by heads once `unfuse-split` has made it three
            // products. compile searches the unfused graph too, but may find a plan of the
            // fused one (attention by heads) faster; running the pass in the pipeline makes
            // the unfused graph the only one.
            let unfused: &[&str] = if m.dir == GPT2 && *axis == "heads" {
                &["--passes", "canonicalize,cse,eqsat,dce,unfuse-split"]
            } else {
                &[]
            };
            let split = compile_split(
                m,
                "gpu-8",
                &["--split", "force", "--split-axes", axis],
                &dir,
                unfused,
            );
            assert!(
                !split.is_empty() && split.iter().all(|a| a == axis),
                "{} along {axis}: the plan splits {split:?}",
                m.dir
            );
            let placed = fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
            assert!(placed.contains("mesh @split = ["), "{placed}");
            if m.dir == GPT2 && *axis == "hidden" {
                // The attention softmax over its split (last) axis is written out as
                // partial reductions: each block's maxima gathered, the sums all-reduced.
                let softmax: Vec<&str> = placed
                    .lines()
                    .filter(|l| l.contains("loc(\"node_softmax\")"))
                    .collect();
                for op in [
                    "= reduce-max ",
                    "= all-gather ",
                    "= reduce-sum ",
                    "= all-reduce ",
                ] {
                    assert!(softmax.iter().any(|l| l.contains(op)), "{op}: {softmax:#?}");
                }
                // So is the first layer norm: its sums and its squared deviations' sums,
                // each all-reduced.
                let norm: Vec<&str> = placed
                    .lines()
                    .filter(|l| l.contains("loc(\"node_layer_norm\")"))
                    .collect();
                assert_eq!(
                    norm.iter().filter(|l| l.contains("= all-reduce ")).count(),
                    2,
                    "{norm:#?}"
                );
                // The placed graph computes the same in the reference interpreter (the
                // global view: collectives are the identity).
                let (name, _, file) = m.inputs[0];
                let interp = dir.with_extension("interp");
                ok(tessera()
                    .arg("run")
                    .arg(dir.join("placed.tir"))
                    .arg("--input")
                    .arg(format!(
                        "{name}={}",
                        repo().join(m.dir).join(file).display()
                    ))
                    .arg("-o")
                    .arg(&interp));
                outputs_match(m, &interp, "the split softmax in the interpreter");
            }
            if m.dir == GPT2 && *axis == "heads" {
                // Hugging Face GPT-2's fused QKV splits by heads only unfused
                // (`unfuse-split`): three products, each with its columns of the weight.
                assert!(
                    placed.contains("= const @inner.transformer.h.0.attn.c_attn.weight.0 "),
                    "{placed}"
                );
            }
            run_matches(m, &dir, &format!("{} split along {axis}", m.dir));
        }
    }
    // Every rule at once, and the planner's own choice against the plans without splits.
    for m in [&GPT2_TINY, &CNN, &BERT_TINY] {
        for mode in ["force", "auto"] {
            let dir = tmp
                .path()
                .join(format!("{}-{mode}", m.dir.replace('/', "_")));
            let split = compile_split(m, "gpu-8", &["--split", mode], &dir, &[]);
            if mode == "force" {
                assert!(split.len() > 3, "{}: {split:?}", m.dir);
            }
            // The report shows the mesh and every split op with its axis and reason.
            let html = fs::read_to_string(dir.join("report.html")).expect("report.html");
            if !split.is_empty() {
                assert!(
                    html.contains("<h3 id=\"mesh\">Device mesh</h3>"),
                    "{}",
                    m.dir
                );
                let table = html
                    .split("<table id=\"splits\">")
                    .nth(1)
                    .and_then(|t| t.split("</table>").next())
                    .expect("the splits table");
                assert_eq!(table.matches("<tr><td>").count(), split.len(), "{table}");
                let axis = &split[0];
                assert!(table.contains(&format!("<td>{axis}</td>")), "{table}");
            }
            run_matches(m, &dir, &format!("{} --split {mode}", m.dir));
        }
    }
}

/// Split plans as one MPI program: the mesh devices are ranks, the collectives MPI's.
#[test]
fn split_graphs_run_under_mpirun_and_match_onnxruntime() {
    let tmp = tempfile::tempdir().expect("tmp");
    for (m, axes) in [
        (&GPT2_TINY, "columns,rows,vocab"),
        // Attention by heads: of the graph with its fused QKV unfused.
        (&GPT2_TINY, "heads"),
        // Softmax and layer norm over their split axis: partial reductions and their
        // collectives.
        (&GPT2_TINY, "hidden"),
        (&CNN, "channels"),
    ] {
        let dir = tmp
            .path()
            .join(format!("{}-{axes}", m.dir.replace('/', "_")));
        let split = compile_split(
            m,
            "testdata/targets/mpi-4.toml",
            &["--split", "force", "--split-axes", axes],
            &dir,
            &["--emit", "mpi"],
        );
        assert!(!split.is_empty(), "{}", m.dir);
        let program = fs::read_to_string(dir.join("program.mlir")).expect("program.mlir");
        let results = tmp
            .path()
            .join(format!("{}-{axes}-mpi", m.dir.replace('/', "_")));
        fs::create_dir_all(&results).expect("mkdir");
        let (_, _, file) = m.inputs[0];
        // The ranks are the devices the plan uses: the host and the mesh at least.
        let manifest: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("manifest.json")).expect("manifest"))
                .expect("json");
        let mesh = manifest["meshes"][0]["devices"]
            .as_array()
            .map_or(0, Vec::len);
        assert!(mesh >= 2, "{manifest}");
        let ranks = program.matches("func.func @rank").count();
        assert!(ranks > mesh, "{program}");
        let run = mpirun(
            ranks,
            &dir.join("program"),
            &repo().join(m.dir).join(file),
            &results,
        );
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        outputs_match(m, &results, &format!("{} under mpirun", m.dir));
        if split.iter().any(|a| a == "rows" || a == "vocab") {
            assert!(
                program.contains("mpi.allreduce("),
                "partial sums are all-reduced"
            );
        }
    }
}

#[test]
fn split_errors_say_what_the_graph_offers() {
    let e = fails(&mut gpt2_compile(
        "gpu-8",
        &["--split", "force", "--split-axes", "nosuch"],
    ));
    assert!(
        e.contains("no op of the graph splits along nosuch") && e.contains("columns, heads"),
        "{e}"
    );
    let e = fails(&mut gpt2_compile("cpu", &["--split", "force"]));
    assert!(e.contains("no group of two or more alike devices"), "{e}");
    // A usage error, like an unknown --objective (exit 2).
    let out = tessera()
        .args(["compile", &model(GPT2), "--split", "sometimes"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("unknown split mode `sometimes`"), "{e}");
}

/// The summary names the mesh and what splits along each axis; `--explain` says why each op
/// is split.
#[test]
fn the_summary_and_explain_show_the_mesh_and_why_ops_split() {
    let out = gpt2_compile(
        "gpu-8",
        &["--split", "force", "--split-axes", "columns", "--explain"],
    )
    .output()
    .expect("runs");
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("mesh         @split = [") && stdout.contains("ops split (columns "),
        "{stdout}"
    );
    assert!(
        stderr.contains("// placement explained (split ops):"),
        "{stderr}"
    );
    assert!(
        stderr.contains("//   node_linear: split ") && stderr.contains("/columns, "),
        "{stderr}"
    );
    assert!(stderr.contains("(forced)"), "{stderr}");
    // Alpa's intra-operator program as the strategy: every op on one group's mesh.
    let out = ok(&mut gpt2_compile("gpu-8", &["--strategy", "intra-op"]));
    assert!(
        out.contains("intra-op chose intra-op for throughput"),
        "{out}"
    );
    assert!(out.contains("mesh         @split = ["), "{out}");
}

/// A matmul large enough for the schedule to run its outer tiles on OpenMP's threads
/// (128×256 by 256×256, 16.8 MFLOP): `--threads 1` and `--threads 2` give the same numbers
/// (each element sums its products in the same order on any thread), under the library and
/// under the JIT, and they match the interpreter; `--threads 0` is a usage error.
#[test]
fn threads_share_a_large_matmul_and_agree_with_one_thread() {
    let tmp = tempfile::tempdir().expect("tmp");
    let model = tmp.path().join("mm.tir");
    fs::write(
        &model,
        "graph @mm(%x: f32[128, 256], %w: f32[256, 256]) {\n  %y = matmul %x, %w : f32[128, 256]\n  return %y\n}\n",
    )
    .expect("model");
    let input = |name: &str, n: usize, m: usize, seed: usize| {
        let data: Vec<f32> = (0..n * m)
            .map(|i| ((i * 7919 + seed) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let p = write_f32(&tmp.path().join(format!("{name}.npy")), &[n, m], &data);
        format!("{name}={}", p.display())
    };
    let (x, w) = (input("x", 128, 256, 1), input("w", 256, 256, 2));
    let dir = tmp.path().join("build");
    ok(tessera()
        .arg("compile")
        .arg(&model)
        .args(["--target", "cpu", "-o"])
        .arg(&dir));
    let schedule = fs::read_to_string(dir.join("cpu0.schedule.mlir")).expect("schedule");
    assert!(schedule.contains("tile_using_forall"), "{schedule}");
    let run = |what: &Path, extra: &[&str], out: &str| {
        ok(tessera()
            .arg("run")
            .arg(what)
            .args(["--input", &x, "--input", &w])
            .args(extra)
            .arg("-o")
            .arg(tmp.path().join(out)));
        tessera::npy::read(&tmp.path().join(out).join("y.npy")).expect("y")
    };
    let one = run(&dir, &["--threads", "1"], "one");
    let two = run(&dir, &["--threads", "2"], "two");
    assert_eq!(
        one.to_f64_vec(),
        two.to_f64_vec(),
        "one thread and two differ"
    );
    let jit = run(&model, &["--target", "cpu", "--threads", "2"], "jit");
    assert_eq!(
        one.to_f64_vec(),
        jit.to_f64_vec(),
        "the library and the JIT differ"
    );
    let reference = run(&model, &[], "interp");
    let d = max_diff(&one, &reference);
    assert!(d < 1e-4, "max |diff| {d} against the interpreter");
    let o = tessera()
        .arg("run")
        .arg(&dir)
        .args(["--threads", "0"])
        .output()
        .expect("runs");
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A weight the CPU lowering packs into panels is in the weights file once, packed, and
/// `placed.tir`'s sidecar (a link to that file) still gives it back whole: the placed IR
/// computes what the model computes, and the compiled directory agrees.
#[test]
fn a_packed_weight_is_stored_once_and_placed_ir_reads_it_back() {
    let (k, n) = (300usize, 250usize);
    let vals = |seed: usize, count: usize| -> String {
        (0..count)
            .map(|i| format!("{:?}", ((i * 7919 + seed) % 23) as f32 / 8.0 - 1.375))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let model = dir.path().join("packed.tir");
    fs::write(
        &model,
        format!(
            "const @w : f32[{k}, {n}] = [{}]\n\n\
             graph @packed(%x: f32[5, {k}]) {{\n  \
               %w = const @w : f32[{k}, {n}]\n  \
               %a = matmul %x, %w : f32[5, {n}]\n  \
               %y = relu %a : f32[5, {n}]\n  \
               return %y\n}}\n",
            vals(1, k * n)
        ),
    )
    .expect("model");
    let x: Vec<u8> = (0..5 * k)
        .flat_map(|i| (((i * 31) % 17) as f32 / 4.0 - 2.0).to_le_bytes())
        .collect();
    let x = Tensor::from_le_bytes(tessera_ir::ElemType::F32, &[5, k], &x).expect("x");
    let xpath = dir.path().join("x.npy");
    tessera::npy::write(&xpath, &x).expect("x.npy");
    let out = dir.path().join("build");
    ok(tessera().arg("compile").arg(&model).arg("-o").arg(&out));
    let weights = tessera_mlir::weights::read(&out.join("weights.safetensors")).expect("weights");
    let names: Vec<&String> = weights.keys().collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let (name, p) = tessera_ir::panels::parse(names[0]).expect("packed");
    assert_eq!(name, "w");
    assert_eq!(
        weights[names[0]].shape(),
        [n.div_ceil(p as usize), k, p as usize]
    );
    assert_eq!(
        fs::read_link(out.join("placed.safetensors")).expect("a link"),
        Path::new("weights.safetensors")
    );
    let run = |what: &Path, results: &str| {
        let to = dir.path().join(results);
        ok(tessera()
            .arg("run")
            .arg(what)
            .arg("--input")
            .arg(format!("x={}", xpath.display()))
            .arg("--output-dir")
            .arg(&to));
        tessera::npy::read(&to.join("y.npy")).expect("output")
    };
    // `fmt` keeps it external: the sidecar gives it.
    let text = ok(tessera().arg("fmt").arg(out.join("placed.tir")));
    assert!(
        text.contains(&format!("const @w : f32[{k}, {n}] = external")),
        "{text}"
    );
    let want = run(&model, "model");
    let placed = run(&out.join("placed.tir"), "placed");
    assert_eq!(placed.to_le_bytes(), want.to_le_bytes());
    let compiled = run(&out, "compiled");
    assert!(
        max_diff(&compiled, &want) < 1e-3,
        "{}",
        max_diff(&compiled, &want)
    );
}

/// The ops (`op6`) the comments of a compiled module's step functions name.
fn commented_ops(module: &str) -> std::collections::BTreeSet<String> {
    let mut in_step = false;
    let mut ops = std::collections::BTreeSet::new();
    for line in module.lines() {
        let t = line.trim_start();
        if t.starts_with("func.func") {
            in_step = t.contains("@step");
        } else if in_step && let Some(rest) = t.strip_prefix("// op") {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            ops.insert(format!("op{n}"));
        }
    }
    ops
}

/// `tessera run DIR --profile` runs the program with a mark after every kernel call: the
/// outputs are still right, every kernel call is measured and set beside the modelled
/// seconds of the ops it computes, the steps and the run beside the prediction, in a table
/// and in report.json's `measured`, which report.html draws.
#[test]
fn profile_measures_each_kernel_call_beside_the_prediction() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("build");
    compile_gpt2(&dir, "cpu", &[]);
    let before: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("report.json")).expect("report"))
            .expect("json");
    assert!(before.get("measured").is_none());
    let op_seconds = before["op_seconds"]
        .as_object()
        .expect("op_seconds")
        .clone();
    let o = tessera()
        .arg("run")
        .arg(&dir)
        .args([
            "--input",
            &format!("input_ids={GPT2}/input_0_input_ids.npy"),
            "--profile",
            "--repeat",
            "3",
            "--threads",
            "1",
            "-o",
        ])
        .arg(tmp.path().join("out"))
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("profile: 3 runs after a warm-up; steps")
            && err.contains("step  device")
            && err.contains("kernel (longest 15 of")
            && err.contains("profile: wrote"),
        "{err}"
    );
    let got = tessera::npy::read(&tmp.path().join("out/logits.npy")).expect("output");
    let d = max_diff(&got, &reference_logits());
    assert!(d < 1e-4, "max |diff| {d} against onnxruntime");
    let report: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("report.json")).expect("report"))
            .expect("json");
    let m = &report["measured"];
    assert_eq!(m["runs"], 3);
    assert_eq!(m["threads"], 1);
    let predicted = m["predicted"].as_f64().expect("predicted");
    let measured = m["measured"].as_f64().expect("measured");
    assert_eq!(
        predicted,
        report["simulation"]["latency"].as_f64().expect("latency")
    );
    assert!(measured > 0.0, "{m}");
    // The steps' time is within the run's.
    assert!(measured <= m["run"].as_f64().expect("run"), "{m}");
    let error = m["error"].as_f64().expect("error");
    assert!(
        (error - (predicted - measured) / measured).abs() < 1e-12,
        "{m}"
    );
    // Every op a step function computes is in exactly one list (a kernel call's, or a
    // return's: the views after a part's last call), whose prediction is the sum of its
    // ops' modelled seconds.
    let kernels = m["kernels"].as_array().expect("kernels");
    let mut seen = std::collections::BTreeSet::new();
    let mut total = 0.0;
    for k in kernels {
        let mut sum = 0.0;
        for op in k["ops"].as_array().expect("ops") {
            let id = op
                .as_str()
                .expect("op")
                .split(' ')
                .next()
                .expect("id")
                .to_string();
            sum += op_seconds[&id].as_f64().expect("seconds");
            assert!(seen.insert(id), "{k}");
        }
        let p = k["predicted"].as_f64().expect("predicted");
        assert!((p - sum).abs() <= 1e-12 * sum.max(1.0), "{k}");
        assert!(k["measured"].as_f64().expect("measured") >= 0.0);
        assert!(k["start"].as_f64() <= k["end"].as_f64(), "{k}");
        total += p;
    }
    let module = fs::read_to_string(dir.join("cpu0.mlir")).expect("module");
    let unlisted: Vec<String> = commented_ops(&module)
        .into_iter()
        .filter(|o| !seen.contains(o))
        .collect();
    assert!(unlisted.is_empty(), "ops in no call's list: {unlisted:?}");
    let steps = m["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{m}");
    assert_eq!(steps[0]["device"], "cpu0");
    let step_predicted = steps[0]["predicted"].as_f64().expect("step predicted");
    assert!(
        (step_predicted - total).abs() <= 1e-9 * total,
        "{step_predicted} {total}"
    );
    let html = fs::read_to_string(dir.join("report.html")).expect("html");
    assert!(html.contains("<h2>Predicted and measured</h2>"));
    let first = kernels[0]["kernel"].as_str().expect("kernel");
    assert!(html.contains(&format!("<code>{first}</code>")), "{first}");
}

/// `tessera calibrate --target cpu --device cpu0`.
fn calibrate_cpu() -> assert_cmd::Command {
    let mut cmd = tessera();
    cmd.args(["calibrate", "--target", "cpu", "--device", "cpu0"]);
    cmd
}

/// `tessera calibrate` measures a model's ops on the CPU, at its given shapes and with its
/// symbolic dimension doubled, and writes a calibration file that reads back; a compile
/// with it models each measured op at the measured time (and at other times without it),
/// and an op at a shape not measured by the scale of its operand pattern. `--one-shape`
/// measures the given shapes only; `--merge` merges files and fits the scales again.
#[test]
fn calibration_round_trip() {
    let tmp = tempfile::tempdir().expect("tmp");
    let calib = tmp.path().join("calib.toml");
    let mlp = [
        "--repeat",
        "3",
        "testdata/models/mlp.tir",
        "--input-shape",
        "x=4x16",
        "--input",
        "x=testdata/models/mlp.input.npy",
        "-o",
    ];
    let said = ok(calibrate_cpu().args(mlp).arg(&calib));
    assert!(
        said.contains(
            "(8 measurements and 6 scales of testdata/models/mlp.tir, testdata/models/mlp.tir \
             at x=8x16 on cpu0)"
        ),
        "{said}"
    );
    let text = fs::read_to_string(&calib).expect("calibration");
    let file = tessera_targets::Calibration::parse(&text, "calib.toml").expect("reads back");
    // The MLP's kernels (the passes make each product and its bias a gemm): the first
    // gemm with its relu, the second, the softmax; each at 4 and 8 rows.
    for op in ["op = \"gemm\"", "op = \"relu\"", "op = \"softmax\""] {
        assert!(text.contains(op), "{op}\n{text}");
    }
    for rows in [4, 8] {
        let operands = format!("operands = [\"f32[{rows}, 16]\", \"f32[16, 32]\", \"f32[32]\"]");
        assert!(text.contains(&operands), "{text}");
    }
    assert_eq!(file.len(), 8, "{text}");
    // Each measurement with its op's work: the first gemm's 2·4·16·32 FLOPs and its bias's
    // 4·32, its operands' and result's 4·(4·16 + 16·32 + 32 + 4·32) bytes.
    assert!(
        text.contains("seconds = ") && text.contains("flops = 4.224e3\nbytes = 2.944e3\n"),
        "{text}"
    );
    // A scale per op measured and one for any op, and one per gemm's operand pattern (the
    // relu and the softmax have one each, whose scale is their op's).
    assert_eq!(file.scales(), 6, "{text}");
    let parsed: toml::Value = toml::from_str(&text).expect("toml");
    let scales = parsed["scale"].as_array().expect("scales");
    let gemm16 = scales
        .iter()
        .find(|s| {
            s.get("operands")
                .is_some_and(|o| o.as_array().expect("operands")[0].as_str() == Some("f32[?, 16]"))
        })
        .unwrap_or_else(|| panic!("no [?, 16] gemm scale\n{text}"));
    let term = |k: &str| gemm16[k].as_float().expect(k);
    let measured: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("seconds = "))
        .map(|s| s.parse().expect("seconds"))
        .collect();
    assert_eq!(measured.len(), file.len());
    assert!(measured.iter().all(|&s| s > 0.0), "{text}");
    // The measurements at 4 rows.
    let at4: Vec<f64> = parsed["measurement"]
        .as_array()
        .expect("measurements")
        .iter()
        .filter(|m| {
            m["operands"].as_array().expect("operands")[0]
                .as_str()
                .is_some_and(|t| t.starts_with("f32[4,"))
        })
        .map(|m| m["seconds"].as_float().expect("seconds"))
        .collect();
    assert_eq!(at4.len(), 4, "{text}");
    let op_seconds = |rows: u32, extra: &[&std::ffi::OsStr], out: &str| {
        let dir = tmp.path().join(out);
        ok(tessera()
            .args(["compile", "testdata/models/mlp.tir", "--target", "cpu"])
            .arg("--input-shape")
            .arg(format!("x={rows}x16"))
            .args(extra)
            .arg("-o")
            .arg(&dir));
        let report: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join("report.json")).expect("report"))
                .expect("json");
        let mut v: Vec<f64> = report["op_seconds"]
            .as_object()
            .expect("op_seconds")
            .values()
            .map(|s| s.as_f64().expect("seconds"))
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let with = ["--calibration".as_ref(), calib.as_os_str()];
    let calibrated = op_seconds(4, &with, "calibrated");
    let modelled = op_seconds(4, &[], "modelled");
    // (A time in op_seconds is a span of the simulated timeline: its end less its start.)
    let among = |s: f64, v: &[f64]| v.iter().any(|&t| (t - s).abs() <= 1e-9 * s);
    for &s in &at4 {
        assert!(among(s, &calibrated), "{s} not among {calibrated:?}");
        assert!(
            !among(s, &modelled),
            "{s} among the roofline's {modelled:?}"
        );
    }
    // At 12 rows, not measured: the first gemm by its pattern's scale, its work 2·12·16·32
    // + 12·32 FLOPs and 4·(12·16 + 16·32 + 32 + 12·32) bytes.
    let at12 = op_seconds(12, &with, "at12");
    let expected =
        term("overhead") + term("flop_seconds") * 12672.0 + term("byte_seconds") * 4480.0;
    assert!(
        among(expected, &at12),
        "{expected} not among {at12:?}\n{text}"
    );
    // --one-shape: the given shapes only.
    let one = tmp.path().join("one.toml");
    let said = ok(calibrate_cpu().arg("--one-shape").args(mlp).arg(&one));
    assert!(
        said.contains("(4 measurements and 4 scales of testdata/models/mlp.tir on cpu0)"),
        "{said}"
    );
    // --merge: every measurement of both (those met twice at the median of the two: the
    // upper one), the scales fitted again, the operand patterns among them.
    let merged = tmp.path().join("merged.toml");
    let said = ok(calibrate_cpu()
        .arg("--merge")
        .arg(&calib)
        .arg("--merge")
        .arg(&one)
        .arg("-o")
        .arg(&merged));
    assert!(said.contains("(8 measurements and 6 scales of "), "{said}");
    let text = fs::read_to_string(&merged).expect("merged");
    assert!(
        text.contains("op = \"gemm\"\noperands = [\"f32[?,16]\", \"f32[16,32]\", \"f32[32]\"]"),
        "{text}"
    );
    let seconds = |path: &std::path::Path| -> Vec<f64> {
        let v: toml::Value =
            toml::from_str(&fs::read_to_string(path).expect("read")).expect("toml");
        v["measurement"]
            .as_array()
            .expect("measurements")
            .iter()
            .map(|m| m["seconds"].as_float().expect("seconds"))
            .collect()
    };
    let (a, b, m) = (seconds(&calib), seconds(&one), seconds(&merged));
    // The first measurement (the first gemm at 4 rows) is in both.
    assert_eq!(m[0], a[0].max(b[0]), "{a:?} {b:?} {m:?}");
    assert_eq!(m.len(), 8);
    let e = fails(
        calibrate_cpu()
            .arg("--merge")
            .arg(&one)
            .args(["testdata/models/mlp.tir", "-o"])
            .arg(tmp.path().join("x.toml")),
    );
    assert!(
        e.contains(
            "--merge reads calibration files and measures nothing: give no MODEL, --input, \
             --input-shape or --one-shape with it"
        ),
        "{e}"
    );
}

/// Profiling and calibration errors: `--profile` of a model, a device that is not the
/// target's, a device that cannot run here.
#[test]
fn profile_and_calibrate_errors() {
    let e = fails(tessera().args([
        "run",
        "testdata/models/mlp.tir",
        "--input",
        "x=testdata/models/mlp.input.npy",
        "--profile",
    ]));
    assert!(
        e.contains("--profile measures a compiled directory: compile it with `tessera compile testdata/models/mlp.tir -o DIR`"),
        "{e}"
    );
    let tmp = tempfile::tempdir().expect("tmp");
    let out = tmp.path().join("c.toml");
    let calibrate = |target: &str, device: &str| {
        let mut cmd = tessera();
        cmd.args(["calibrate", "--target", target, "--device", device, "-o"])
            .arg(&out);
        fails(&mut cmd)
    };
    let e = calibrate("cpu", "gpu0");
    assert!(
        e.contains("--device gpu0: target cpu has no such device (its devices: cpu0)"),
        "{e}"
    );
    let e = fails(
        calibrate_cpu()
            .args([
                "testdata/models/mlp.tir",
                "testdata/models/mlp.tir",
                "--input",
                "x=testdata/models/mlp.input.npy",
                "-o",
            ])
            .arg(&out),
    );
    assert!(
        e.contains("--input gives one model's inputs: give exactly one MODEL with it (got 2)"),
        "{e}"
    );
    let e = calibrate("mcm-2x2", "chip0");
    assert!(
        e.contains(
            "--device chip0: a `chiplet` device of lowering `chiplet`; only `cpu` devices (on \
             this CPU) and NVIDIA GPUs (`nvptx`, on this machine's GPU) can be measured"
        ),
        "{e}"
    );
    assert!(!out.exists());
    // An NVIDIA GPU is measured on this machine's GPU: where there is none, the error
    // names what is missing, before anything is compiled; where there is one, the file
    // is written.
    let run = tessera()
        .args([
            "calibrate",
            "--target",
            "hetero-cpu-gpu",
            "--device",
            "gpu1",
            "-o",
        ])
        .arg(&out)
        .args([
            "testdata/models/mlp.tir",
            "--input-shape",
            "x=4x16",
            "--repeat",
            "2",
        ])
        .output()
        .expect("runs");
    let e = String::from_utf8_lossy(&run.stderr);
    if run.status.success() {
        let text = fs::read_to_string(&out).expect("calibration");
        assert!(text.contains("device = \"gpu1\""), "{text}");
    } else {
        assert_eq!(run.status.code(), Some(1), "{e}");
        assert!(
            e.contains("--device gpu1: an NVIDIA GPU, measured on one") && no_gpu(&e),
            "{e}"
        );
        assert!(!out.exists());
    }
}

/// Whether an error says this machine has no NVIDIA GPU to run on (no driver library,
/// or a driver without a device).
fn no_gpu(e: &str) -> bool {
    e.contains("no NVIDIA GPU driver: the CUDA driver library (libcuda.so.1")
        || e.contains("no usable NVIDIA GPU")
        || e.contains("no NVIDIA GPU: the driver is installed but finds no device")
}

/// `tessera run DIR --gpu` runs the NVIDIA devices' parts on this machine's GPU and the
/// rest on this CPU, matching onnxruntime; with no GPU here it says what is missing (exit
/// 1, no output written); a program without an NVIDIA device is refused.
#[test]
fn gpu_parts_run_on_the_gpu_or_the_error_says_what_is_missing() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("mlp");
    compile_mlp_on_gpus(&dir, &[]);
    let manifest = read_manifest(&dir);
    let archs: Vec<(String, String)> = manifest["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| {
            Some((
                d["name"].as_str()?.to_string(),
                d["arch"].as_str()?.to_string(),
            ))
        })
        .collect();
    // Each GPU device's architecture is in the manifest; the CPU has none.
    assert_eq!(
        archs,
        [
            ("gpu0".to_string(), "sm_80".to_string()),
            ("gpu1".to_string(), "sm_70".to_string())
        ]
    );
    let out = tmp.path().join("out");
    let input = format!(
        "x={}",
        model("testdata/models/onnx/mlp").replace("model.onnx", "input_0_x.npy")
    );
    let run = tessera()
        .arg("run")
        .arg(&dir)
        .args(["--input", &input, "--gpu", "--output-dir"])
        .arg(&out)
        .output()
        .expect("runs");
    let e = String::from_utf8_lossy(&run.stderr);
    if run.status.success() {
        let got = tessera::npy::read(&out.join("probs.npy")).expect("output");
        let want = tessera::npy::read(&repo().join("testdata/models/onnx/mlp/output_0_probs.npy"))
            .expect("reference");
        let d = max_diff(&got, &want);
        assert!(d < 1e-4, "max |diff| {d} against onnxruntime");
    } else {
        assert_eq!(run.status.code(), Some(1), "{e}");
        assert!(
            e.contains("device gpu0 (sm_80) runs on an NVIDIA GPU here (--gpu): ") && no_gpu(&e),
            "{e}"
        );
        assert!(!out.join("probs.npy").exists());
    }
    // Without --gpu every device runs on this CPU, as before.
    ok(tessera()
        .arg("run")
        .arg(&dir)
        .args(["--input", &input, "--output-dir"])
        .arg(&out));
    assert!(out.join("probs.npy").is_file());
    // A program with no NVIDIA device.
    let cpu = tmp.path().join("cpu");
    ok(tessera()
        .args([
            "compile",
            "testdata/models/mlp.tir",
            "--input-shape",
            "x=4x16",
            "-o",
        ])
        .arg(&cpu));
    let e = fails(tessera().arg("run").arg(&cpu).args([
        "--input",
        "x=testdata/models/mlp.input.npy",
        "--gpu",
    ]));
    assert!(
        e.contains("--gpu: the program has no NVIDIA GPU device (its devices: cpu0 (cpu))"),
        "{e}"
    );
}
