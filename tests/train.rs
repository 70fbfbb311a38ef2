//! Training against PyTorch: `tessera train` and `tessera compile --train` on the models of
//! `testdata/training/` (an MLP, a CNN with batch normalization, GPT-2 tiny, an LSTM, an
//! MLP with dropout) (made by `make_training_refs.py`, which trained them in torch on the
//! same batches): the loss at every step and the final weights match torch to 1e-4
//! relative, through the interpreter, through the JIT, and placed on four chips; `--resume`
//! continues where a run stopped; the written `model.onnx` runs in onnxruntime with the
//! trained weights; bad input is an error with exit code 1.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tessera_ir::Tensor;

mod common;

use common::cli::{fails, ok, repo, tessera};

/// One optimizer configuration of `make_training_refs.py`, with its tessera flags.
struct Config {
    name: &'static str,
    flags: &'static [&'static str],
}

const SGD: Config = Config {
    name: "sgd",
    flags: &[
        "--optimizer",
        "sgd{lr=0.1 momentum=0.9 weight-decay=0.0001}",
    ],
};
const ADAMW: Config = Config {
    name: "adamw",
    flags: &["--optimizer", "adamw{lr=0.01 weight-decay=0.01}"],
};
/// SGD over two microbatches per batch (`make_training_refs.py` trains torch the same way:
/// each microbatch's forward and backward in turn, batch norm with its statistics).
const SGD_MB2: Config = Config {
    name: "sgd-mb2",
    flags: &[
        "--optimizer",
        "sgd{lr=0.1 momentum=0.9 weight-decay=0.0001}",
        "--microbatches",
        "2",
    ],
};
const ADAM_CLIP_COSINE: Config = Config {
    name: "adam-clip-cosine",
    flags: &[
        "--optimizer",
        "adam{lr=0.01 weight-decay=0.001}",
        "--schedule",
        "warmup-cosine{warmup=3 total=10 min-lr=0.001}",
        "--clip-norm",
        "0.5",
        "--label-smoothing",
        "0.1",
    ],
};

/// A model of `testdata/training/`.
struct Model {
    dir: &'static str,
    /// `--input-shape` of its batch inputs.
    shapes: &'static [&'static str],
    /// Its batch inputs, each `NAME` read from `NAME.npy`.
    inputs: &'static [&'static str],
}

const MLP: Model = Model {
    dir: "testdata/training/mlp",
    shapes: &["x=8x16"],
    inputs: &["x", "labels"],
};

const GPT2_TINY: Model = Model {
    dir: "testdata/training/gpt2_tiny",
    shapes: &["input_ids=2x16"],
    inputs: &["input_ids", "labels"],
};

const CNN: Model = Model {
    dir: "testdata/training/cnn",
    shapes: &["x=8x1x8x8"],
    inputs: &["x", "labels"],
};

const LSTM: Model = Model {
    dir: "testdata/training/lstm",
    shapes: &["x=5x4x8"],
    inputs: &["x", "labels"],
};

/// An MLP with two dropouts, exported in training mode; torch trained it with the masks
/// tessera's generator draws (`make_training_refs.py` reimplements it), seed 0.
const MLP_DROPOUT: Model = Model {
    dir: "testdata/training/mlp_dropout",
    shapes: &["x=8x16"],
    inputs: &["x", "labels"],
};

/// Every op that can split along the batch does (data parallelism).
const BATCH_SPLIT: [&str; 4] = ["--split", "force", "--split-axes", "batch"];

fn path(m: &Model, file: &str) -> PathBuf {
    repo().join(m.dir).join(file)
}

fn input_args(m: &Model) -> Vec<String> {
    let mut args = Vec::new();
    for i in m.inputs {
        args.push("--input".into());
        args.push(format!("{i}={}", path(m, &format!("{i}.npy")).display()));
    }
    args
}

fn train_flags(m: &Model, c: &Config) -> Vec<String> {
    let mut args: Vec<String> = vec!["--train".into(), "--labels".into(), "labels".into()];
    args.extend(c.flags.iter().map(|s| s.to_string()));
    for s in m.shapes {
        args.push("--input-shape".into());
        args.push(s.to_string());
    }
    args
}

fn npy(p: &Path) -> Tensor {
    tessera::npy::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The loss column of a `loss.csv`, checking its header and step numbers.
fn losses(out: &Path, first_step: usize) -> Vec<f64> {
    let text = std::fs::read_to_string(out.join("loss.csv")).expect("loss.csv");
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("step,loss"));
    lines
        .enumerate()
        .map(|(i, l)| {
            let (step, loss) = l.split_once(',').expect("step,loss");
            assert_eq!(step.parse::<usize>().expect("step"), first_step + i);
            loss.parse().expect("loss")
        })
        .collect()
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}[{i}]: tessera {g}, torch {w}"
        );
    }
}

/// The loss curve and the final weights in `out` against torch's for configuration `c`.
fn check_against_torch(m: &Model, c: &Config, out: &Path) {
    let want = npy(&path(m, &format!("{}/loss.npy", c.name))).to_f64_vec();
    close(
        &format!("{} {} loss", m.dir, c.name),
        &losses(out, 1),
        &want,
    );
    let weights = tessera_mlir::weights::read(&out.join("weights.safetensors")).expect("weights");
    let names: Vec<&String> = weights.keys().collect();
    let mut expected = Vec::new();
    for entry in std::fs::read_dir(path(m, c.name)).expect("refs") {
        let f = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("name");
        if let Some(n) = f.strip_suffix(".npy")
            && n != "loss"
        {
            expected.push(n.to_string());
        }
    }
    expected.sort();
    assert_eq!(
        names,
        expected.iter().collect::<Vec<_>>(),
        "trained parameters"
    );
    for n in expected {
        let want = npy(&path(m, &format!("{}/{n}.npy", c.name)));
        let got = &weights[&n];
        assert_eq!(got.shape(), want.shape(), "{n}");
        close(
            &format!("{} {} {n}", m.dir, c.name),
            &got.to_f64_vec(),
            &want.to_f64_vec(),
        );
    }
}

/// 10 steps of the step `tessera compile --train -o dir` wrote, on `m`'s batches.
fn train_compiled(m: &Model, dir: &Path) -> tempfile::TempDir {
    let out = tempfile::tempdir().expect("tempdir");
    ok(tessera()
        .arg("train")
        .arg(dir)
        .args(input_args(m))
        .args(["--steps", "10", "--output-dir"])
        .arg(out.path()));
    out
}

/// `tessera compile` of `m`'s training step for configuration `c` with `args`, into `dir`;
/// returns the summary.
fn compile_step(m: &Model, c: &Config, args: &[&str], dir: &Path) -> String {
    ok(tessera()
        .arg("compile")
        .arg(path(m, "model.onnx"))
        .args(train_flags(m, c))
        .args(args)
        .arg("-o")
        .arg(dir))
}

fn train_model(m: &Model, c: &Config, extra: &[&str]) -> tempfile::TempDir {
    train_file(m, "model.onnx", c, extra)
}

/// [`train_model`] on another export of the model, `file` in its directory.
fn train_file(m: &Model, file: &str, c: &Config, extra: &[&str]) -> tempfile::TempDir {
    let out = tempfile::tempdir().expect("tempdir");
    ok(tessera()
        .arg("train")
        .arg(path(m, file))
        .args(train_flags(m, c))
        .args(input_args(m))
        .args(["--steps", "10", "--output-dir"])
        .arg(out.path())
        .args(extra));
    out
}

/// One step of `tessera train` on `m` with `extra`, which must fail (exit 1): its error.
fn train_fails(m: &Model, c: &Config, extra: &[&str]) -> String {
    let out = tempfile::tempdir().expect("tempdir");
    fails(
        tessera()
            .arg("train")
            .arg(path(m, "model.onnx"))
            .args(train_flags(m, c))
            .args(input_args(m))
            .args(extra)
            .args(["--steps", "1", "--output-dir"])
            .arg(out.path()),
    )
}

#[test]
fn mlp_matches_pytorch_in_the_interpreter() {
    for c in [SGD, ADAMW, ADAM_CLIP_COSINE] {
        let out = train_model(&MLP, &c, &["--interpret"]);
        check_against_torch(&MLP, &c, out.path());
    }
}

#[test]
fn mlp_matches_pytorch_through_the_jit() {
    for c in [SGD, ADAMW] {
        let out = train_model(&MLP, &c, &[]);
        check_against_torch(&MLP, &c, out.path());
    }
    // LLVM's lowest optimization level: the same numbers.
    let out = train_model(&MLP, &SGD, &["--opt-level", "0"]);
    check_against_torch(&MLP, &SGD, out.path());
}

/// GPT-2's structure (embeddings, causal attention, layer norms, GELU, the output head
/// tied to the token embedding, whose gradient sums both uses).
#[test]
fn gpt2_tiny_matches_pytorch() {
    let out = train_model(&GPT2_TINY, &SGD, &["--interpret"]);
    check_against_torch(&GPT2_TINY, &SGD, out.path());
    let out = train_model(&GPT2_TINY, &ADAMW, &[]);
    check_against_torch(&GPT2_TINY, &ADAMW, out.path());
}

/// Microbatches (`--microbatches M`): each microbatch runs its own forward and backward on
/// its rows of the batch, and the gradients are summed before the one update, so the losses
/// and weights are the whole batch's, torch's: the MLP with 2 and 4 microbatches (with label
/// smoothing and a batch whose microbatches ignore different numbers of labels, which the
/// whole batch's count of labels weighs correctly), through the interpreter and the JIT, and
/// GPT-2 tiny, whose logits flatten batch and sequence into their rows.
#[test]
fn microbatches_train_to_the_whole_batch_numbers() {
    for (c, m) in [(SGD, "2"), (ADAM_CLIP_COSINE, "4"), (ADAMW, "8")] {
        let out = train_model(&MLP, &c, &["--interpret", "--microbatches", m]);
        check_against_torch(&MLP, &c, out.path());
    }
    let out = train_model(&MLP, &SGD, &["--microbatches", "2"]);
    check_against_torch(&MLP, &SGD, out.path());
    let out = train_model(&GPT2_TINY, &ADAMW, &["--interpret", "--microbatches", "2"]);
    check_against_torch(&GPT2_TINY, &ADAMW, out.path());
}

/// Pipeline schedules (`--pipeline gpipe|1f1b`) order a microbatched step's ops: on one
/// device (one stage), GPipe runs both microbatches' forwards (the second microbatch's loss
/// included) before any backward op, and 1F1B runs the first microbatch's backward before the
/// second microbatch's loss. The order changes no number: the compiled step trains to
/// torch's losses and weights under both.
#[test]
fn pipeline_schedules_order_the_step_and_train_to_the_same_numbers() {
    for (schedule, backward_first) in [("gpipe", false), ("1f1b", true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        ok(tessera()
            .arg("compile")
            .arg(path(&MLP, "model.onnx"))
            .args(train_flags(&MLP, &SGD))
            .args(["--microbatches", "2", "--pipeline", schedule, "-o"])
            .arg(dir.path()));
        let placed = std::fs::read_to_string(dir.path().join("placed.tir")).expect("placed.tir");
        let line = |pred: &dyn Fn(&str) -> bool| {
            placed
                .lines()
                .position(pred)
                .unwrap_or_else(|| panic!("{schedule}: no such line in\n{placed}"))
        };
        let first_backward = line(&|l| l.contains("grad-of("));
        let second_loss = line(&|l| l.contains("= log-softmax") && l.contains("loc(\"loss/mb1\")"));
        assert_eq!(
            first_backward < second_loss,
            backward_first,
            "{schedule}: first backward op at line {first_backward}, microbatch 1's loss at \
             {second_loss}"
        );
        let out = train_compiled(&MLP, dir.path());
        check_against_torch(&MLP, &SGD, out.path());
    }
}

/// A microbatched step's copies of one model node (one per microbatch, forward and backward)
/// share a device, a pipeline stage holding its layers' weights once: placed round-robin over
/// sixteen chips and the host (which, without the shared groups, deals the two microbatches'
/// copies of every node to different devices), every model node's ops are on one device
/// while the step spreads over several, and the placed step trains to torch's numbers.
#[test]
fn microbatch_copies_of_a_layer_share_its_stage() {
    let dir = tempfile::tempdir().expect("tempdir");
    ok(tessera()
        .arg("compile")
        .arg(path(&MLP, "model.onnx"))
        .args(train_flags(&MLP, &SGD))
        .args([
            "--microbatches",
            "2",
            "--target",
            "mcm-4x4",
            "--strategy",
            "round-robin",
        ])
        .args(["--split", "off", "-o"])
        .arg(dir.path()));
    let placed = std::fs::read_to_string(dir.path().join("placed.tir")).expect("placed.tir");
    let attr = |line: &str, key: &str| -> Option<String> {
        let at = line.find(key)? + key.len();
        let rest = &line[at..];
        Some(rest[..rest.find('"')?].to_string())
    };
    let mut devices: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for line in placed.lines().filter(|l| !l.contains("= transfer ")) {
        if let (Some(node), Some(device)) = (attr(line, "loc(\"/"), attr(line, "device(\"")) {
            devices.entry(node).or_default().insert(device);
        }
    }
    assert!(devices.len() >= 10, "{devices:?}");
    for (node, on) in &devices {
        assert_eq!(on.len(), 1, "model node /{node} on {on:?}");
    }
    let used: std::collections::BTreeSet<&String> = devices.values().flatten().collect();
    assert!(used.len() >= 2, "{used:?}");
    let out = train_compiled(&MLP, dir.path());
    check_against_torch(&MLP, &SGD, out.path());
}

/// `--pipeline auto` (the default) simulates GPipe, 1F1B and upward rank for the placed
/// step and keeps the shortest step (then the least peak memory); the summary lists each
/// with its step and peak, and the kept one has the shortest step.
#[test]
fn pipeline_auto_keeps_the_shortest_simulated_step() {
    let out = ok(tessera()
        .arg("compile")
        .arg(path(&MLP, "model.onnx"))
        .args(train_flags(&MLP, &SGD))
        .args([
            "--microbatches",
            "4",
            "--target",
            "mcm-4x4",
            "--strategy",
            "round-robin",
        ])
        .args(["--split", "off"]));
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("pipeline     "))
        .unwrap_or_else(|| panic!("no pipeline line in\n{out}"));
    let (chosen, rest) = line
        .split_once(" over 4 microbatches; simulated step and largest device peak: ")
        .unwrap_or_else(|| panic!("{line}"));
    let seconds = |t: &str| -> f64 {
        let (x, unit) = t.split_once(' ').expect("value and unit");
        let scale = match unit {
            "ns" => 1e-9,
            "us" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            u => panic!("unit {u}"),
        };
        x.parse::<f64>().expect("number") * scale
    };
    let tried: Vec<(&str, f64)> = rest
        .split("; ")
        .map(|t| {
            let (name_step, _peak) = t.split_once(", peak ").expect("peak");
            let at = name_step.rfind(' ').expect("unit");
            let at = name_step[..at].rfind(' ').expect("value");
            (&name_step[..at], seconds(&name_step[at + 1..]))
        })
        .collect();
    let names: Vec<&str> = tried.iter().map(|t| t.0).collect();
    assert_eq!(names, ["gpipe", "1f1b", "upward rank"], "{line}");
    let best = tried.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    let kept = tried
        .iter()
        .find(|t| t.0 == chosen)
        .expect("chosen was tried");
    assert!(kept.1 <= best * (1.0 + 1e-3), "{line}");
}

/// Batch normalization over microbatches: each microbatch normalizes with its own
/// statistics and updates the running ones in turn, as torch does when it runs the
/// microbatches one after another; losses, weights and running statistics match torch's,
/// through the interpreter and the JIT.
#[test]
fn cnn_with_batch_norm_over_microbatches_matches_pytorch() {
    let out = train_model(&CNN, &SGD_MB2, &["--interpret"]);
    check_against_torch(&CNN, &SGD_MB2, out.path());
    let out = train_model(&CNN, &SGD_MB2, &[]);
    check_against_torch(&CNN, &SGD_MB2, out.path());
}

/// Microbatches that do not divide the batch are an error naming the input.
#[test]
fn microbatches_that_cannot_split_are_errors() {
    let err = train_fails(&MLP, &SGD, &["--microbatches", "3"]);
    assert!(
        err.contains(
            "microbatches=3: batch input `x` has 8 rows, which 3 microbatches do not divide"
        ),
        "{err}"
    );
}

/// Convolutions with batch normalization in training mode (batch statistics; the running
/// statistics are state, updated as torch does and compared too), max and average pooling.
#[test]
fn cnn_with_batch_norm_matches_pytorch() {
    let out = train_model(&CNN, &SGD, &["--interpret"]);
    check_against_torch(&CNN, &SGD, out.path());
    let out = train_model(&CNN, &ADAMW, &[]);
    check_against_torch(&CNN, &ADAMW, out.path());
}

/// The same CNN exported in training mode (`TrainingMode.TRAINING`: batch norm with
/// `training_mode = 1` and running-statistics outputs nobody reads) trains to the same
/// numbers.
#[test]
fn cnn_exported_in_training_mode_matches_pytorch() {
    let out = train_file(&CNN, "model_training.onnx", &SGD, &["--interpret"]);
    check_against_torch(&CNN, &SGD, out.path());
    // Imported for inference, training-mode batch norm is refused.
    let err = fails(
        tessera()
            .arg("compile")
            .arg(path(&CNN, "model_training.onnx"))
            .args(["--input-shape", "x=8x1x8x8"]),
    );
    assert!(err.contains("training_mode = 1 is not supported"), "{err}");
}

/// An LSTM (unrolled over its sequence at import) classified from its last hidden state.
#[test]
fn lstm_matches_pytorch() {
    let out = train_model(&LSTM, &ADAMW, &["--interpret"]);
    check_against_torch(&LSTM, &ADAMW, out.path());
    let out = train_model(&LSTM, &SGD, &[]);
    check_against_torch(&LSTM, &SGD, out.path());
}

/// Dropout in training mode: the masks come from the documented counter-based generator
/// (seed and step), so torch, fed the same masks, gives the same losses and weights, in the
/// interpreter and through the JIT; the masks depend on the seed.
#[test]
fn dropout_matches_pytorch_with_the_same_masks() {
    let out = train_model(&MLP_DROPOUT, &SGD, &["--interpret"]);
    check_against_torch(&MLP_DROPOUT, &SGD, out.path());
    let out = train_model(&MLP_DROPOUT, &ADAMW, &[]);
    check_against_torch(&MLP_DROPOUT, &ADAMW, out.path());
    // Seed 0 explicitly: the same run; another seed: other masks, another loss curve.
    let zero = train_model(&MLP_DROPOUT, &ADAMW, &["--interpret", "--seed", "0"]);
    check_against_torch(&MLP_DROPOUT, &ADAMW, zero.path());
    let other = train_model(&MLP_DROPOUT, &ADAMW, &["--interpret", "--seed", "7"]);
    let (a, b) = (losses(zero.path(), 1), losses(other.path(), 1));
    assert_ne!(a, b);
}

/// The step graph of a model with dropout: a `seed` input, one `random-uniform` per
/// dropout (salts 0 and 1) keyed by the seed and the step count, no `dropout` left.
#[test]
fn dropout_step_graph() {
    let ir = ok(tessera()
        .arg("opt")
        .arg(path(&MLP_DROPOUT, "model.onnx"))
        .args(["--input-shape", "x=8x16", "--passes"])
        .arg(r#"train{optimizer="sgd{lr=0.1}"}"#));
    assert!(ir.contains("%seed: i64[])"), "{ir}");
    assert!(!ir.contains(" dropout "), "{ir}");
    for salt in 0..2 {
        let want =
            format!("random-uniform %seed, %step {{elem = f32, salt = {salt}, shape = [8, 32]}}");
        assert!(ir.contains(&want), "salt {salt}: {ir}");
    }
    assert_eq!(ir.matches("= random-uniform ").count(), 2, "{ir}");
}

/// The compiled step updates its state in place: every parameter, optimizer state and the
/// step count is donated to the one step (a buffer argument written at its end), the step
/// function returns only the loss, and the manifest's next-value outputs name their inputs.
/// Trained from the directory, the numbers are torch's.
#[test]
fn compiled_step_updates_its_state_in_place() {
    let build = tempfile::tempdir().expect("tempdir");
    let dir = build.path().join("step");
    ok(tessera()
        .arg("compile")
        .arg(path(&MLP, "model.onnx"))
        .args(train_flags(&MLP, &ADAMW))
        .arg("-o")
        .arg(&dir));
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json"),
    )
    .expect("json");
    let steps = manifest["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1);
    let donated: Vec<&str> = steps[0]["donated"]
        .as_array()
        .expect("donated")
        .iter()
        .map(|d| d["input"].as_str().expect("input"))
        .collect();
    // 4 parameters, Adam's two moments of each, the step count.
    assert_eq!(donated.len(), 13, "{donated:?}");
    for p in ["fc1.weight", "fc2.bias", "fc1.weight.exp_avg_sq", "step"] {
        assert!(donated.contains(&p), "{p} not donated: {donated:?}");
    }
    assert_eq!(steps[0]["results"].as_array().expect("results").len(), 1);
    for o in manifest["outputs"].as_array().expect("outputs") {
        let name = o["name"].as_str().expect("name");
        if name != "loss" {
            assert_eq!(o["source"]["input"].as_str(), Some(name), "{o}");
        }
    }
    let module = std::fs::read_to_string(dir.join("cpu0.mlir")).expect("cpu0.mlir");
    assert_eq!(
        module
            .matches("bufferization.materialize_in_destination")
            .count(),
        13
    );
    assert!(module.contains("-> (tensor<f32>) attributes"), "one result");
    let out = tempfile::tempdir().expect("tempdir");
    ok(tessera()
        .arg("train")
        .arg(&dir)
        .args(input_args(&MLP))
        .args(["--steps", "10", "--output-dir"])
        .arg(out.path()));
    check_against_torch(&MLP, &ADAMW, out.path());
}

/// `m` compiled with configuration `c` for four chiplets with the ops spread round-robin (so
/// the step's forward, backward and optimizer ops run on different chips with transfers
/// between them), then trained from the directory.
fn train_placed(m: &Model, c: &Config) -> tempfile::TempDir {
    let build = tempfile::tempdir().expect("tempdir");
    let dir = build.path().join("step");
    let summary = compile_step(
        m,
        c,
        &["--target", "mcm-2x2", "--strategy", "round-robin"],
        &dir,
    );
    assert!(summary.contains("chip3"), "{summary}");
    for f in ["placed.tir", "manifest.json", "source.onnx", "chip1.mlir"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let out = train_compiled(m, &dir);
    let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
    assert!(placed.contains("state(init = zeros, next = \"step\")"));
    out
}

/// The placed step gives the same numbers as the one-device step and torch.
#[test]
fn mlp_placed_on_four_chips_matches_pytorch() {
    let out = train_placed(&MLP, &ADAMW);
    check_against_torch(&MLP, &ADAMW, out.path());
}

/// Every other model placed the same way: convolutions and batch norm (its running
/// statistics updated on the chip that computes them), GPT-2 tiny's tied embedding and
/// attention, the LSTM's unrolled cells.
#[test]
fn models_placed_on_four_chips_match_pytorch() {
    for (m, c) in [(&CNN, &SGD), (&GPT2_TINY, &ADAMW), (&LSTM, &SGD)] {
        let out = train_placed(m, c);
        check_against_torch(m, c, out.path());
    }
}

/// Data parallelism: each model's step compiled for `mcm-ring4` with every op forced to run
/// split along its batch axis (`--split force --split-axes batch`): each chip runs its rows
/// of the forward and the backward, the weights' gradients (a bias's sum over rows, a
/// weight's `A^T B` over them) are partial sums that collectives add up before the
/// optimizer, and batch norm's statistics are the whole batch's. The numbers are torch's
/// whole-batch ones, with the gradients summed in DDP's buckets.
#[test]
fn data_parallel_steps_match_pytorch() {
    for (m, c) in [(&MLP, &ADAMW), (&CNN, &SGD), (&GPT2_TINY, &ADAMW)] {
        let build = tempfile::tempdir().expect("tempdir");
        let dir = build.path().join("step");
        let mut args = vec!["--target", "mcm-ring4"];
        args.extend(BATCH_SPLIT);
        let summary = compile_step(m, c, &args, &dir);
        let mesh = summary
            .lines()
            .find(|l| l.starts_with("mesh"))
            .unwrap_or_else(|| panic!("{}: no mesh line in\n{summary}", m.dir));
        assert!(mesh.contains("split (batch "), "{mesh}");
        let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
        // Gradients summed over the mesh: all-reduced, or reduce-scattered where the
        // optimizer runs split too.
        assert!(
            placed.contains(" = all-reduce ") || placed.contains(" = reduce-scatter "),
            "{}",
            m.dir
        );
        // In DDP's buckets (`--bucket-mb`, 25 by default): the gradients the optimizer reads
        // split fit one. (The CNN's plan sums only one gradient so.)
        if m.dir != CNN.dir {
            assert!(placed.contains("%bucket0 = concat "), "{}", m.dir);
            assert!(!placed.contains("%bucket1 = concat "), "{}", m.dir);
        }
        let out = train_compiled(m, &dir);
        check_against_torch(m, c, out.path());
    }
}

/// ZeRO stage 1 (`--zero-stage`, 1 by default): the MLP's data-parallel step runs AdamW split
/// by rows over the pair of chips (its gradients reduce-scattered). With stage 1 the moments
/// only the update reads stay split between steps (the state slot held on `@split`, no
/// all-slice before the update and no all-gather after it); with stage 0 every chip holds
/// them whole. Both train to torch's numbers, byte for byte the same, under `mpirun` (where
/// each chip's rank then keeps only its rows of those moments) as in `tessera train DIR`.
#[test]
fn zero_stage_one_keeps_the_optimizer_state_split() {
    let build = tempfile::tempdir().expect("tempdir");
    let mut runs = Vec::new();
    for stage in ["0", "1"] {
        let dir = build.path().join(format!("zero{stage}"));
        let mut args = vec!["--target", "mcm-ring4"];
        args.extend(BATCH_SPLIT);
        args.extend(["--zero-stage", stage, "--emit", "mpi"]);
        let summary = compile_step(&MLP, &ADAMW, &args, &dir);
        let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report"))
                .expect("json");
        let sim = &report["simulation"];
        let weights: Vec<u64> = sim["devices"]
            .as_array()
            .expect("devices")
            .iter()
            .map(|d| d["weights"].as_u64().expect("weights"))
            .collect();
        let out = train_compiled(&MLP, &dir);
        check_against_torch(&MLP, &ADAMW, out.path());
        // Under mpirun (the host and the two chips): the same bytes.
        let mpi_out = build.path().join(format!("mpi{stage}"));
        mpirun_steps(&dir, 3, &MLP, 10, &mpi_out);
        for f in ["loss.csv", "weights.safetensors", "state.safetensors"] {
            let a = std::fs::read(mpi_out.join(f)).expect(f);
            let b = std::fs::read(out.path().join(f)).expect(f);
            assert!(a == b, "{f}: mpirun differs from tessera train");
        }
        // The program holds those moments split: the manifest's inputs and outputs say how,
        // and the chips' steps read them as their blocks.
        let held = placed.matches(", mesh = @split)").count();
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
                .expect("json");
        let marked = |k: &str| {
            manifest[k]
                .as_array()
                .expect(k)
                .iter()
                .filter(|x| x["held"]["mesh"] == "@split")
                .count()
        };
        assert_eq!((marked("inputs"), marked("outputs")), (held, held));
        let blocks = manifest["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .flat_map(|st| st["args"].as_array().expect("args"))
            .filter(|a| a["input"].is_string() && a["per_device"] == true)
            .count();
        assert_eq!(blocks > 0, held > 0);
        runs.push((
            summary,
            held,
            weights,
            sim["period"].as_f64().expect("period"),
            out,
        ));
    }
    let (zero0, zero1) = (&runs[0], &runs[1]);
    assert_eq!(zero0.1, 0);
    assert!(!zero0.0.contains("zero-1"), "{}", zero0.0);
    // The six split: each bias's two moments, and each weight's second moment (its first
    // moment is updated by a gemm on one chip).
    assert_eq!(zero1.1, 6);
    assert!(
        zero1.0.contains("zero-1       optimizer state held split between steps, each device updating and keeping its rows: 6 of 13 state slots, 6 on @split (3.58 KiB whole, 1.79 KiB on each device)"),
        "{}",
        zero1.0
    );
    // Each of the two chips holds half of those six moments' 512 + 320 + 3 x 32 + 2 x 10
    // floats (3664 bytes) less; the host and the idle chips hold the same.
    let less: Vec<i64> = zero0
        .2
        .iter()
        .zip(&zero1.2)
        .map(|(a, b)| *a as i64 - *b as i64)
        .collect();
    assert_eq!(less, [0, 1832, 1832, 0, 0]);
    // No gathers of those moments: a shorter step.
    assert!(zero1.3 < zero0.3, "{} vs {}", zero1.3, zero0.3);
    for f in ["loss.csv", "weights.safetensors", "state.safetensors"] {
        let a = std::fs::read(zero0.4.path().join(f)).expect(f);
        let b = std::fs::read(zero1.4.path().join(f)).expect(f);
        assert!(a == b, "{f} differs between the stages");
    }
}

/// Compiles `m`'s step for `mcm-ring4` with `extra` as one MPI program, runs N = 10 steps of
/// it under `mpirun` (as many ranks as the program has), and returns the compiled directory
/// and the output directory.
fn train_under_mpi(m: &Model, c: &Config, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let mut args = vec!["--target", "mcm-ring4"];
    args.extend(extra);
    train_under_mpi_with(m, c, &args)
}

/// [`train_under_mpi`] with the target among `extra`.
fn train_under_mpi_with(m: &Model, c: &Config, extra: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let build = tempfile::tempdir().expect("tempdir");
    let dir = build.path().join("step");
    let mut args = vec!["--emit", "mpi"];
    args.extend(extra);
    let summary = compile_step(m, c, &args, &dir);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("json");
    let devices: Vec<&str> = manifest["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["name"].as_str().expect("name"))
        .collect();
    let host = manifest["host"].as_str().expect("host");
    let ranks = devices.len() + usize::from(!devices.contains(&host));
    assert!(ranks >= 3, "{summary}");
    let out = build.path().join("out");
    mpirun_steps(&dir, ranks, m, 10, &out);
    (build, out)
}

/// `mpirun -np RANKS DIR/program` on `m`'s batches for `steps` steps into `out` (made here);
/// it must succeed.
/// Each rank's report of its buffers (`rank R (DEVICE): buffers: peak P B, H B held at
/// exit, ...` on stderr): `(P, H)` by rank.
fn buffer_reports(stderr: &str) -> BTreeMap<usize, (u64, u64)> {
    let mut out = BTreeMap::new();
    for line in stderr.lines() {
        let Some((head, rest)) = line.split_once(": buffers: peak ") else {
            continue;
        };
        let rank: usize = head
            .strip_prefix("rank ")
            .and_then(|h| h.split_once(' '))
            .and_then(|(r, _)| r.parse().ok())
            .unwrap_or_else(|| panic!("report line {line:?}"));
        let (peak, rest) = rest.split_once(" B, ").expect("peak");
        let (held, _) = rest.split_once(" B held at exit").expect("held");
        out.insert(
            rank,
            (
                peak.parse().expect("peak bytes"),
                held.parse().expect("held bytes"),
            ),
        );
    }
    out
}

/// Runs `steps` steps of a training program under `mpirun -np ranks` into `out`; its stderr.
fn mpirun_steps(dir: &Path, ranks: usize, m: &Model, steps: usize, out: &Path) -> String {
    std::fs::create_dir(out).expect("out");
    let run = std::process::Command::new("mpirun")
        .args(["-np", &ranks.to_string()])
        .arg(dir.join("program"))
        .args(input_args(m))
        .args(["--steps", &steps.to_string(), "--output-dir"])
        .arg(out)
        .output()
        .expect("mpirun (MPICH, `make deps`)");
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    stderr
}

/// `compile --train --emit mpi` and `mpirun ... --steps N --output-dir OUT`: every rank runs
/// its device's part of each step, each rank keeps the state its steps read, and OUT
/// gets what `tessera train` writes. Layers dealt over the chips (round-robin: activations
/// and gradients cross ranks point to point) give torch's numbers, and the same bytes as
/// `tessera train` on the same directory (weights, state, the trained model); data
/// parallelism (every op split by the batch, gradients reduced by MPI collectives) gives
/// torch's numbers for the MLP and the CNN.
#[test]
fn training_under_mpirun_matches_pytorch_and_tessera_train() {
    let (build, out) = train_under_mpi(&MLP, &ADAMW, &["--strategy", "round-robin"]);
    check_against_torch(&MLP, &ADAMW, &out);
    // The chips keep the state their layers read: their rank functions take it and return
    // its next value, and they send it to the host only after the last step.
    let dir = build.path().join("step");
    let program = std::fs::read_to_string(dir.join("program.mlir")).expect("program.mlir");
    let driver = std::fs::read_to_string(dir.join("program.c")).expect("program.c");
    assert!(
        program.contains("func.func @rank1(%in0: "),
        "rank1 takes no state"
    );
    let (sent, received) = (
        driver.matches("    send_bytes(st").count(),
        driver.matches("    recv_bytes(st").count(),
    );
    assert!(
        sent > 0 && sent == received,
        "{sent} sent, {received} received"
    );
    let here = train_compiled(&MLP, &build.path().join("step"));
    for f in [
        "loss.csv",
        "weights.safetensors",
        "state.safetensors",
        "model.onnx",
    ] {
        let a = std::fs::read(out.join(f)).expect(f);
        let b = std::fs::read(here.path().join(f)).expect(f);
        assert!(a == b, "{f} differs from tessera train's");
    }
    for (m, c) in [(&MLP, &SGD), (&CNN, &SGD)] {
        let (_build, out) = train_under_mpi(m, c, &BATCH_SPLIT);
        check_against_torch(m, c, &out);
    }
}

/// `mcm-ring4`'s chips with `memory` bytes each: in placement's model too few for a training
/// step's weights, optimizer state and activations on one pair of chips, so a plan must use
/// both pairs.
fn stages_target(dir: &Path, memory: u64) -> PathBuf {
    let file = dir.join(format!("stages-{memory}.toml"));
    let text = format!(
        "name = \"stages-4\"\nhost = \"cpu0\"\n\n\
         [[device]]\nname = \"cpu0\"\nkind = \"cpu\"\nmemory = 64_000_000_000\n\
         memory_bandwidth = 100e9\ncompute = {{ f32 = 1.0e12, f64 = 0.5e12 }}\nlowering = \"cpu\"\n\n\
         [[device]]\nname = \"chip\"\ncount = 4\nkind = \"accelerator\"\nmemory = {memory}\n\
         memory_bandwidth = 800e9\ncompute = {{ f32 = 50e12 }}\nlowering = \"chiplet\"\n\n\
         [[interconnect.link]]\na = \"cpu0\"\nb = \"chip0\"\nbandwidth = 16e9\nlatency = 2e-6\n\n\
         [interconnect]\ntopology = \"ring\"\ndevices = \"chip\"\nbandwidth = 100e9\nlatency = 1e-6\n"
    );
    std::fs::write(&file, text).expect("target file");
    file
}

/// The two stages of a step compiled by the pipeline-stage tests in `dir`: meshes `@split0`
/// (chip0, chip1) and `@split1` (chip2, chip3), ops on both, and every device within its
/// capacity in the plan (placement's model) and in the simulation (its peak).
fn check_meshes(dir: &Path) {
    let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
    for mesh in [
        "mesh @split0 = [2] devices(\"chip0\", \"chip1\")",
        "mesh @split1 = [2] devices(\"chip2\", \"chip3\")",
    ] {
        assert!(placed.contains(mesh), "{mesh}");
    }
    for on in ["device(\"@split0\")", "device(\"@split1\")"] {
        assert!(placed.contains(on), "no op on {on}");
    }
    // Every device within its capacity: in the plan (placement's model) and in the
    // simulation of the placed step (its peak).
    let json = |f: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(f)).expect(f)).expect("json")
    };
    let (plan, report) = (json("plan.json"), json("report.json"));
    let rows = [
        (&plan["devices"], "memory"),
        (&report["simulation"]["devices"], "peak_memory"),
    ];
    for (devices, field) in rows {
        let devices = devices.as_array().expect("devices");
        assert_eq!(devices.len(), 5);
        for d in devices {
            let (used, cap) = (d[field].as_u64(), d["capacity"].as_u64());
            assert!(used.is_some() && used <= cap, "{field}: {d}");
        }
    }
}

/// Pipeline stages that are each data parallel (Alpa's submeshes): on chips whose memory
/// holds about half a step, `--split force --split-axes batch` plans two stages, each split
/// along the batch over its own pair of chips (two meshes, `@split0` and `@split1`), the
/// activations and their gradients crossing between the pairs. The MLP over two
/// microbatches under `mpirun` (GPipe and 1F1B: the same numbers, byte for byte) gives
/// torch's numbers and the single-device `tessera train`'s to [`SAME_SUMS`], and so does its
/// tensor-parallel variant (`--split-axes columns,rows,hidden`: each layer split by its
/// output features over its stage's pair); so do the CNN over two microbatches (GPipe and
/// 1F1B again byte for byte, and GPipe recomputing its stages' forward; torch trained the
/// microbatches in turn) and GPT-2 tiny (one
/// microbatch: its two rows split over each pair) under `mpirun`. Every device stays within
/// its capacity; on
/// chips too small for any plan the error names the device, its stage and the overflow.
#[test]
fn pipeline_stages_of_data_parallel_pairs_match_pytorch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mlp_target = stages_target(tmp.path(), 32_000);
    let mlp_target = mlp_target.to_str().expect("utf-8");
    let single = train_model(&MLP, &ADAMW, &[]);
    let mut runs = Vec::new();
    for schedule in ["gpipe", "1f1b"] {
        let (build, out) = train_under_mpi_with(
            &MLP,
            &ADAMW,
            &[
                "--target",
                mlp_target,
                "--split",
                "force",
                "--split-axes",
                "batch",
                "--microbatches",
                "2",
                "--pipeline",
                schedule,
            ],
        );
        check_meshes(&build.path().join("step"));
        check_against_torch(&MLP, &ADAMW, &out);
        close_to(&out, single.path(), SAME_SUMS);
        runs.push((build, out));
    }
    same_outputs(&runs, MLP.dir);
    // The tensor-parallel variant: each stage's layer split by its output features over its
    // pair (the weight gradients with them).
    let tp = [
        "--target",
        mlp_target,
        "--split",
        "force",
        "--split-axes",
        "columns,rows,hidden",
    ];
    let (build, out) = train_under_mpi_with(&MLP, &ADAMW, &tp);
    let dir = build.path().join("step");
    check_meshes(&dir);
    let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
    let split_gemms = placed
        .lines()
        .filter(|l| l.contains(" = gemm ") && l.contains("device(\"@split"))
        .count();
    assert!(split_gemms >= 3, "{placed}");
    check_against_torch(&MLP, &ADAMW, &out);
    close_to(&out, single.path(), SAME_SUMS);
    // Chips too small for any plan: the error names the device, its stage (the group of
    // chips its split ops run on) and the overflow.
    let tiny = stages_target(tmp.path(), 8_000);
    let e = fails(
        tessera()
            .arg("compile")
            .arg(path(&MLP, "model.onnx"))
            .args(train_flags(&MLP, &ADAMW))
            .args(["--target", tiny.to_str().expect("utf-8")])
            .args(["--split", "force", "--split-axes", "batch", "-o"])
            .arg(tmp.path().join("tiny")),
    );
    assert!(
        e.contains("(in group `accelerator*2#0` (chip0, chip1), where ")
            && e.contains("more than its capacity of 8000 bytes"),
        "{e}"
    );
    assert!(!tmp.path().join("tiny").exists());
    // The CNN over two microbatches (torch trained them in turn, batch norm with each one's
    // statistics), GPipe and 1F1B; GPT-2 tiny's batch of two rows in one. The CNN once more with GPipe recomputing every stage's forward at its backward: the
    // copies run on both meshes under `mpirun`, and the numbers stay the same, byte for byte.
    for (m, c, memory, schedules) in [
        (
            &CNN,
            &SGD_MB2,
            60_000,
            &[("gpipe", "off"), ("1f1b", "off"), ("gpipe", "on")][..],
        ),
        (&GPT2_TINY, &ADAMW, 1_000_000, &[("none", "off")][..]),
    ] {
        let target = stages_target(tmp.path(), memory);
        let single = train_model(m, c, &[]);
        let mut runs = Vec::new();
        for &(schedule, recompute) in schedules {
            let mut args = vec!["--target", target.to_str().expect("utf-8")];
            args.extend(BATCH_SPLIT);
            args.extend(["--pipeline", schedule, "--recompute", recompute]);
            let (build, out) = train_under_mpi_with(m, c, &args);
            check_meshes(&build.path().join("step"));
            let summary = std::fs::read_to_string(build.path().join("step/summary.txt"))
                .expect("summary.txt");
            assert_eq!(
                summary.contains(", recomputing "),
                recompute == "on",
                "{summary}"
            );
            check_against_torch(m, c, &out);
            close_to(&out, single.path(), SAME_SUMS);
            runs.push((build, out));
        }
        same_outputs(&runs, m.dir);
    }
}

/// The tensor-parallel variant of the pipeline-stage test for the CNN and GPT-2 tiny: two
/// stages on two pairs of chips, each stage's ops split along model axes only (no `batch`),
/// two microbatches pipelined by GPipe and by 1F1B under `mpirun`: the two schedules give
/// the same numbers byte for byte, torch's (GPT-2 tiny; the CNN's batch norm normalizes each
/// microbatch apart) and the single-device `tessera train --microbatches 2`'s to [`SAME_SUMS`]. On
/// chips of 40 000 bytes the CNN's classifier (its `gemm`, forward and backward) and the
/// elementwise ops around it split by features on the second pair (its convolutions, with 4
/// and 8 channels, run on the host); on chips of 1 MB GPT-2 tiny's products split by columns
/// and rows, attention by heads, on both pairs.
#[test]
fn pipeline_stages_of_tensor_parallel_pairs_match_pytorch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (m, c, memory, axes, products) in [
        (&CNN, &SGD, 40_000, "channels,columns,rows,hidden", 2),
        (
            &GPT2_TINY,
            &ADAMW,
            1_000_000,
            "columns,rows,hidden,heads",
            8,
        ),
    ] {
        let target = stages_target(tmp.path(), memory);
        let target = target.to_str().expect("utf-8");
        // GPT-2 tiny over two microbatches, pipelined GPipe's way and 1F1B's: the same
        // numbers, byte for byte. (With two microbatches the CNN's plan is one mesh of all
        // four chips, not two stages: it runs whole batches here, and two microbatches in
        // the data-parallel test.)
        let (micro, schedules): (&[&str], &[&str]) = if m.dir == GPT2_TINY.dir {
            (&["--microbatches", "2"], &["gpipe", "1f1b"])
        } else {
            (&[], &["none"])
        };
        let single = train_model(m, c, micro);
        let mut runs = Vec::new();
        for &schedule in schedules {
            let mut args = vec![
                "--target",
                target,
                "--split",
                "force",
                "--split-axes",
                axes,
                "--pipeline",
                schedule,
            ];
            args.extend(micro);
            let (build, out) = train_under_mpi_with(m, c, &args);
            let dir = build.path().join("step");
            check_meshes(&dir);
            let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
            let split = placed
                .lines()
                .filter(|l| {
                    [" = conv ", " = gemm ", " = matmul "]
                        .iter()
                        .any(|p| l.contains(p))
                        && l.contains("sharded")
                        && l.contains("device(\"@split")
                })
                .count();
            assert!(
                split >= products,
                "{}: {split} products split\n{placed}",
                m.dir
            );
            check_against_torch(m, c, &out);
            close_to(&out, single.path(), SAME_SUMS);
            runs.push((build, out));
        }
        same_outputs(&runs, m.dir);
    }
}

/// The outputs of runs (each its build and output directory) that must agree byte for
/// byte (the same step under GPipe and 1F1B).
fn same_outputs(runs: &[(tempfile::TempDir, PathBuf)], what: &str) {
    for pair in runs.windows(2) {
        for f in ["loss.csv", "weights.safetensors", "state.safetensors"] {
            let a = std::fs::read(pair[0].1.join(f)).expect(f);
            let b = std::fs::read(pair[1].1.join(f)).expect(f);
            assert!(a == b, "{what}: {f}: GPipe and 1F1B differ");
        }
    }
}

/// `--microbatches auto`: compile places and simulates the step with 1, 2, 4 and 8
/// microbatches and keeps the shortest step; the summary says what each count gave. The MLP's
/// two data-parallel stages: the count kept has the least step of those listed, and the
/// result is byte for byte what `--microbatches <that count>` compiles. GPT-2 tiny's batch of
/// 2 rows cannot be cut in 4 or 8: those counts are listed with the reason. `tessera train
/// MODEL`, which places nothing, refuses `auto`.
#[test]
fn microbatches_auto_keeps_the_fastest_step() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = stages_target(tmp.path(), 32_000);
    let mut args = vec!["--target", target.to_str().expect("utf-8")];
    args.extend(BATCH_SPLIT);
    let auto = tmp.path().join("auto");
    let mut with_auto = args.clone();
    with_auto.extend(["--microbatches", "auto"]);
    let summary = compile_step(&MLP, &ADAMW, &with_auto, &auto);
    let line = summary
        .lines()
        .find(|l| l.starts_with("microbatches auto chose "))
        .unwrap_or_else(|| panic!("{summary}"));
    // "microbatches auto chose M: simulated step T (tried 1: T1; 2: T2; ...)"
    let (head, tried) = line.split_once(" (tried ").expect("tried");
    let chosen: &str = head["microbatches auto chose ".len()..]
        .split(':')
        .next()
        .expect("count");
    let micros = |t: &str| -> f64 {
        let (v, unit) = t.trim().split_once(' ').expect("time");
        let scale = match unit {
            "ns" => 1e-3,
            "us" => 1.0,
            "ms" => 1e3,
            "s" => 1e6,
            u => panic!("unit {u}"),
        };
        v.parse::<f64>().expect("number") * scale
    };
    let times: Vec<(&str, f64)> = tried
        .trim_end_matches(')')
        .split("; ")
        .map(|t| {
            let (m, rest) = t.split_once(": ").expect("count: time");
            (m, micros(rest))
        })
        .collect();
    assert_eq!(
        times.iter().map(|t| t.0).collect::<Vec<_>>(),
        ["1", "2", "4", "8"]
    );
    let least = times.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
    let kept = times
        .iter()
        .find(|t| t.0 == chosen)
        .expect("chosen is tried")
        .1;
    assert_eq!(kept, least, "{line}");
    let explicit = tmp.path().join("explicit");
    let mut with_count = args.clone();
    with_count.extend(["--microbatches", chosen]);
    let plain = compile_step(&MLP, &ADAMW, &with_count, &explicit);
    assert_eq!(summary.replace(&format!("{line}\n"), ""), plain);
    for f in ["placed.tir", "plan.json", "manifest.json"] {
        let a = std::fs::read(auto.join(f)).expect(f);
        let b = std::fs::read(explicit.join(f)).expect(f);
        assert!(a == b, "{f} differs from --microbatches {chosen}");
    }
    let summary = compile_step(
        &GPT2_TINY,
        &ADAMW,
        &["--microbatches", "auto"],
        &tmp.path().join("gpt2"),
    );
    for count in [4, 8] {
        let why = format!(
            "{count}: microbatches={count}: batch input `input_ids` has 2 rows, which {count} \
             microbatches do not divide"
        );
        assert!(summary.contains(&why), "{summary}");
    }
    let e = train_fails(&MLP, &ADAMW, &["--microbatches", "auto"]);
    assert!(
        e.contains("--microbatches auto: the count is chosen by `tessera compile --train`"),
        "{e}"
    );
}

/// How close a split training run's numbers are to the single device's, relative to each
/// tensor's largest magnitude: the same sums in another order (microbatches, each device's
/// part, the CPU schedule's 16 partial sums of a dot product, fused multiply-adds). The MLP's
/// `fc1.weight` over two microbatches came 1.05e-5 off with the schedule (the bound was 1e-5).
const SAME_SUMS: f64 = 2e-5;

/// The losses and trained weights in `a` and `b` (two training output folders) agree to
/// `rel` relative to each tensor's largest magnitude.
fn close_to(a: &Path, b: &Path, rel: f64) {
    let (la, lb) = (losses(a, 1), losses(b, 1));
    assert_eq!(la.len(), lb.len());
    for (x, y) in la.iter().zip(&lb) {
        assert!((x - y).abs() <= rel * y.abs(), "loss {x} against {y}");
    }
    let wa = tessera_mlir::weights::read(&a.join("weights.safetensors")).expect("weights");
    let wb = tessera_mlir::weights::read(&b.join("weights.safetensors")).expect("weights");
    assert_eq!(wa.keys().collect::<Vec<_>>(), wb.keys().collect::<Vec<_>>());
    for (n, x) in &wa {
        let (x, y) = (x.to_f64_vec(), wb[n].to_f64_vec());
        let scale = y.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let diff = x
            .iter()
            .zip(&y)
            .fold(0.0f64, |m, (p, q)| m.max((p - q).abs()));
        assert!(
            diff <= rel * scale,
            "{n}: {diff} against a scale of {scale}"
        );
    }
}

/// A long run under `mpirun`: 3000 steps of the MLP data parallel over two CPUs (the host
/// one of them: a rank per core here), some 54 000 all-reduces, far past MPICH's 2048
/// communicators (the shard dialect's all-reduce, which the program used before, split a
/// new communicator per call and aborted after 113 steps), end with `tessera train`'s loss
/// curve and weights, byte for byte. And every buffer a step allocates is freed: each rank's
/// buffers peak as high over 3000 steps as over 3, and hold nothing at the end (the program
/// used to free no intermediate: 80 KB more per step).
#[test]
fn long_mpi_training_runs_match_tessera_train() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = repo().join("testdata/targets/cpu-pair.toml");
    let dir = tmp.path().join("step");
    let mut args = vec!["--target", target.to_str().expect("utf-8"), "--emit", "mpi"];
    args.extend(BATCH_SPLIT);
    compile_step(&MLP, &ADAMW, &args, &dir);
    let program = std::fs::read_to_string(dir.join("program.mlir")).expect("program.mlir");
    assert!(program.contains("mpi.allreduce(") && !program.contains("shard.all_reduce"));
    let (mpi_out, here) = (tmp.path().join("mpi"), tmp.path().join("here"));
    let long = buffer_reports(&mpirun_steps(&dir, 2, &MLP, 3000, &mpi_out));
    // Every buffer a step allocates is freed: each rank's buffers hold as much at most over
    // 3000 steps as over 3, and nothing at the end.
    let short = buffer_reports(&mpirun_steps(&dir, 2, &MLP, 3, &tmp.path().join("short")));
    assert_eq!(long.len(), 2, "a report per rank");
    assert_eq!(long, short, "3000 steps' buffers against 3 steps'");
    for (rank, (peak, held)) in &long {
        assert!(*peak > 0, "rank {rank} allocates no buffer");
        assert_eq!(*held, 0, "rank {rank} leaks");
    }
    ok(tessera()
        .arg("train")
        .arg(&dir)
        .args(input_args(&MLP))
        .args(["--steps", "3000", "--output-dir"])
        .arg(&here));
    assert_eq!(losses(&mpi_out, 1).len(), 3000);
    for f in ["loss.csv", "weights.safetensors", "state.safetensors"] {
        let a = std::fs::read(mpi_out.join(f)).expect(f);
        let b = std::fs::read(here.join(f)).expect(f);
        assert!(a == b, "{f} differs from tessera train's");
    }
}

/// The MPI training program's usage errors: no `--steps`, an input the step does not have, an
/// input given twice are usage errors (exit 2); a batch input not given is an error naming
/// it (exit 1), and so is an output directory that cannot be made. And `--bucket-mb` outside 0..=1048576 is
/// a usage error of `compile`.
#[test]
fn mpi_training_program_errors() {
    for bad in ["-1", "nan", "2000000", "x"] {
        let o = tessera()
            .arg("compile")
            .arg(path(&MLP, "model.onnx"))
            .args(train_flags(&MLP, &SGD))
            .args(["--target", "cpu", &format!("--bucket-mb={bad}")])
            .output()
            .expect("runs");
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--bucket-mb"),
            "{bad}"
        );
    }
    let build = tempfile::tempdir().expect("tempdir");
    let dir = build.path().join("step");
    let single = [
        "--target",
        "mcm-ring4",
        "--strategy",
        "single",
        "--emit",
        "mpi",
    ];
    compile_step(&MLP, &SGD, &single, &dir);
    let run = |args: &[&str]| {
        std::process::Command::new("mpirun")
            .args(["-np", "1"])
            .arg(dir.join("program"))
            .args(args)
            .output()
            .expect("mpirun")
    };
    let out = build.path().join("out");
    let o = run(&["--output-dir", out.to_str().expect("utf-8")]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--steps N --output-dir OUT"));
    let x = format!("x={}", path(&MLP, "x.npy").display());
    let o = run(&[
        "--input",
        &x,
        "--steps",
        "2",
        "--output-dir",
        out.to_str().expect("utf-8"),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("input labels is not given"), "{err}");
    // An input the step does not have, and one given twice, are usage errors.
    let o = run(&["--input", "y=y.npy", "--steps", "2", "--output-dir", "o"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--input y: the step has no batch input"),
        "{err}"
    );
    let o = run(&[
        "--input",
        &x,
        "--input",
        &x,
        "--steps",
        "2",
        "--output-dir",
        "o",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("given twice"));
    // OUT and its missing parents are made, as `tessera train` makes them; an OUT under a
    // file is an error naming both.
    let train_into = |out: &Path| {
        let mut args = input_args(&MLP);
        args.extend(["--steps", "2", "--output-dir"].map(String::from));
        args.push(out.to_str().expect("utf-8").to_string());
        run(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let nested = build.path().join("new/out");
    let o = train_into(&nested);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(losses(&nested, 1).len(), 2);
    std::fs::write(build.path().join("file"), b"").expect("file");
    let o = train_into(&build.path().join("file/out"));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cannot create the output directory") && err.contains("file: File exists"),
        "{err}"
    );
}

/// Five steps, then five more from the state they wrote: torch's ten steps (Adam's moments
/// and the step count carry over; the loss curve continues).
#[test]
fn resume_continues_where_a_run_stopped() {
    let first = tempfile::tempdir().expect("tempdir");
    let run = |steps: &str, out: &Path, resume: Option<&Path>| {
        let mut cmd = tessera();
        cmd.arg("train")
            .arg(path(&MLP, "model.onnx"))
            .args(train_flags(&MLP, &ADAMW))
            .args(input_args(&MLP))
            .args(["--interpret", "--steps", steps, "--output-dir"])
            .arg(out);
        if let Some(r) = resume {
            cmd.arg("--resume").arg(r);
        }
        ok(&mut cmd);
    };
    run("5", first.path(), None);
    assert_eq!(losses(first.path(), 1).len(), 5);
    let second = tempfile::tempdir().expect("tempdir");
    run("5", second.path(), Some(first.path()));
    check_against_torch(&MLP, &ADAMW, second.path());
}

/// The trained `model.onnx` passes onnx.checker and runs in onnxruntime, which gives what
/// `tessera run` gives on it, with the trained weights in it.
#[test]
fn the_trained_model_runs_in_onnxruntime() {
    let out = train_model(&MLP, &SGD, &["--interpret"]);
    let model = out.path().join("model.onnx");
    let x = out.path().join("x0.npy");
    let ort = out.path().join("ort.npy");
    let script = format!(
        "import numpy as np, onnx, onnxruntime as ort\n\
         m = onnx.load({model:?}); onnx.checker.check_model(m)\n\
         w = {{t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}}\n\
         assert np.abs(w['fc2.weight'] - np.load({want:?})).max() < 1e-5\n\
         x = np.load({xs:?})[0]; np.save({x:?}, x)\n\
         np.save({ort:?}, ort.InferenceSession({model:?}).run(None, {{'x': x}})[0])\n",
        model = model.display().to_string(),
        want = path(&MLP, "sgd/fc2.weight.npy").display().to_string(),
        xs = path(&MLP, "x.npy").display().to_string(),
        x = x.display().to_string(),
        ort = ort.display().to_string(),
    );
    let status = std::process::Command::new("python3")
        .args(["-c", &script])
        .status()
        .expect("python3 runs (make deps installs numpy, onnx, onnxruntime)");
    assert!(status.success(), "onnxruntime on the trained model");
    let run = out.path().join("run");
    ok(tessera()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", x.display()))
        .arg("--output-dir")
        .arg(&run));
    let got = npy(&run.join("logits.npy"));
    let want = npy(&ort);
    close("logits", &got.to_f64_vec(), &want.to_f64_vec());
}

#[test]
fn bad_training_input_is_an_error() {
    let m = path(&MLP, "model.onnx");
    let out = tempfile::tempdir().expect("tempdir");
    let base = |extra: &[&str]| {
        let mut cmd = tessera();
        cmd.arg("train")
            .arg(&m)
            .args(["--steps", "2", "--output-dir"])
            .arg(out.path())
            .args(extra);
        cmd
    };
    let x = format!("x={}", path(&MLP, "x.npy").display());
    let labels = format!("labels={}", path(&MLP, "labels.npy").display());
    let err = fails(&mut base(&["-i", &x]));
    assert!(
        err.contains("give a compiled directory (tessera compile --train -o DIR), or --train"),
        "{err}"
    );
    let err = fails(&mut base(&[
        "--train",
        "--optimizer",
        "adamw{lr=0.1 momentum=0.9}",
        "--input-shape",
        "x=8x16",
        "-i",
        &x,
    ]));
    assert!(
        err.contains(
            "unknown option `momentum` (expected one of: lr, beta1, beta2, eps, weight-decay)"
        ),
        "{err}"
    );
    let err = fails(&mut base(&[
        "--train",
        "--input-shape",
        "x=8x16",
        "-i",
        &x,
        "--interpret",
    ]));
    assert!(
        err.contains("give every batch input with --input: missing `labels`"),
        "{err}"
    );
    let err = fails(&mut base(&[
        "--train",
        "--input-shape",
        "x=8x16",
        "-i",
        &x,
        "-i",
        &format!("labels={}", path(&MLP, "x.npy").display()),
        "--interpret",
    ]));
    assert!(
        err.contains(
            "input `labels` has shape [4, 8, 16], but a batch is i64[8] (or a stack of them)"
        ),
        "{err}"
    );
    let err = fails(&mut base(&[
        "--train",
        "--input-shape",
        "x=8x16",
        "-i",
        &x,
        "-i",
        &labels,
        "-i",
        &format!("fc1.weight={}", path(&MLP, "x.npy").display()),
        "--interpret",
    ]));
    assert!(
        err.contains("--input fc1.weight: that is a state input"),
        "{err}"
    );
    let err = fails(&mut base(&[
        "--train",
        "--loss",
        "hinge",
        "--input-shape",
        "x=8x16",
        "-i",
        &x,
    ]));
    assert!(
        err.contains("unknown loss `hinge` (expected cross-entropy, mse or output)"),
        "{err}"
    );
}

/// The same run twice writes the same bytes.
#[test]
fn training_is_deterministic() {
    let a = train_model(&MLP, &ADAMW, &["--interpret"]);
    let b = train_model(&MLP, &ADAMW, &["--interpret"]);
    for f in [
        "loss.csv",
        "weights.safetensors",
        "state.safetensors",
        "model.onnx",
    ] {
        assert_eq!(
            std::fs::read(a.path().join(f)).expect("a"),
            std::fs::read(b.path().join(f)).expect("b"),
            "{f}"
        );
    }
}

/// `--recompute on`: every stage of a microbatched step runs each microbatch's forward again
/// before its backward (the placed step gains the copies, counted in the summary),
/// and the step trains to the same numbers, byte for byte, as without: the MLP over two
/// microbatches on the default target, and the CNN (batch norm, whose statistics are
/// recomputed too) as two data-parallel stages of chips. `auto` keeps the step as it is when
/// every device holds it. Each step's recurrence bound stays below its simulated period.
#[test]
fn recomputation_trains_to_the_same_numbers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let target = stages_target(tmp.path(), 60_000);
    let target = target.to_str().expect("utf-8");
    let mut cnn_args = vec!["--target", target, "--pipeline", "gpipe"];
    cnn_args.extend(BATCH_SPLIT);
    let mlp_args = ["--microbatches", "2", "--pipeline", "gpipe"];
    for (m, c, args) in [(&MLP, &SGD, &mlp_args[..]), (&CNN, &SGD_MB2, &cnn_args[..])] {
        let mut runs = Vec::new();
        let mut ops = Vec::new();
        for mode in ["off", "on", "auto"] {
            let dir = tmp
                .path()
                .join(format!("{}-{mode}", m.dir.replace('/', "-")));
            let mut with = args.to_vec();
            with.extend(["--recompute", mode]);
            let summary = compile_step(m, c, &with, &dir);
            let placed = std::fs::read_to_string(dir.join("placed.tir")).expect("placed.tir");
            ops.push(placed.lines().filter(|l| l.contains(" device(")).count());
            let line = summary
                .lines()
                .find(|l| l.starts_with("pipeline "))
                .expect("a pipeline line");
            if mode == "on" {
                // The copies are the ops the step gains.
                let copies = ops[1] - ops[0];
                assert!(copies > 0, "{}: nothing recomputed", m.dir);
                assert!(
                    line.contains(&format!("over 2 microbatches, recomputing {copies} ops;")),
                    "{line}"
                );
            } else {
                assert_eq!(ops.last(), ops.first(), "{}: {mode}", m.dir);
                assert!(!line.contains("recomputing"), "{line}");
            }
            // The step's recurrence bound is below the simulated step (its soundness on a
            // real step; the summary reports it with its gap).
            let json = |f: &str| -> serde_json::Value {
                serde_json::from_slice(&std::fs::read(dir.join(f)).expect(f)).expect("json")
            };
            let recurrence = json("plan.json")["lower_bound"]["recurrence"]
                .as_f64()
                .expect("a recurrence");
            let period = json("report.json")["simulation"]["period"]
                .as_f64()
                .expect("a period");
            assert!(
                recurrence > 0.0 && recurrence <= period,
                "{recurrence} {period}"
            );
            assert!(summary.contains("\nstep bound   "), "{summary}");
            let out = train_compiled(m, &dir);
            check_against_torch(m, c, out.path());
            runs.push(out);
        }
        for f in ["loss.csv", "weights.safetensors"] {
            let read = |d: &tempfile::TempDir| std::fs::read(d.path().join(f)).expect(f);
            assert!(read(&runs[0]) == read(&runs[1]), "{}: {f} differs", m.dir);
            assert!(read(&runs[0]) == read(&runs[2]), "{}: {f} differs", m.dir);
        }
    }
}

/// `--recompute auto` in `realize`: a microbatched step (four microbatches of `f = relu x`,
/// `h = relu f`, `k = relu h`, whose backward reads `f` and `h`) placed whole on one device.
/// GPipe keeps every microbatch's `f` and `h` until the backward; recomputed, one
/// microbatch's at a time. On a device whose memory lies between the two peaks, `off` leaves
/// the step over capacity, and `auto` simulates it, finds the device over, recomputes there
/// and keeps that step, which fits.
#[test]
fn recompute_auto_recomputes_where_the_step_overflows() {
    use tessera::commands::compile::{PipelineMode, Recompute, StepSettings, realize};
    use tessera_place::pipeline::Schedule;
    use tessera_targets::{CostModel, parse_target};
    // place/tests/pipeline.rs's step, its devices dropped: placed here on one device.
    let src = std::fs::read_to_string(repo().join("testdata/placement/deep-step.tir"))
        .expect("deep-step.tir");
    let mut graph = tessera_ir::text::parse(&src, None).expect("parses");
    for op in graph.ops().to_vec() {
        graph.op_mut(op).device = None;
    }
    let target = |memory: u64| {
        parse_target(
            &format!(
                "name = \"one\"\nhost = \"a\"\n[[device]]\nname = \"a\"\nkind = \"cpu\"\n\
                 memory = {memory}\nmemory_bandwidth = 1e15\ncompute = {{ f32 = 1e6 }}\n\
                 lowering = \"cpu\"\n"
            ),
            "one.toml",
        )
        .expect("target")
    };
    let run = |memory: u64, recompute: Recompute| {
        let spec = target(memory);
        let cost = CostModel::new(&spec, None);
        let built = tessera_place::build::build(&graph, &cost).expect("problem");
        let inst = tessera_place::Instance::new(built.problem.clone()).expect("instance");
        let assign = vec![0; inst.n];
        let step = StepSettings {
            pipeline: PipelineMode::Fixed(Some(Schedule::GPipe)),
            recompute,
            ..StepSettings::default()
        };
        let (_, report, _, choice) =
            realize(&graph, &built, &inst, &assign, &cost, Some(1), step).expect("realized");
        (report.devices[0].peak_memory, choice.expect("microbatched"))
    };
    let (plain, off) = run(1_000_000, Recompute::Off);
    let (recomputed, on) = run(1_000_000, Recompute::On);
    assert_eq!(off.recomputed, 0);
    assert!(
        on.recomputed > 0 && recomputed < plain,
        "{recomputed} {plain}"
    );
    // Plenty of memory: `auto` keeps the step as placed, and simulates only that.
    let (_, roomy) = run(1_000_000, Recompute::Auto);
    assert_eq!((roomy.recomputed, roomy.tried.len()), (0, 1));
    // Memory between the two peaks.
    let cap = (plain + recomputed) / 2;
    let (peak, auto) = run(cap, Recompute::Auto);
    assert_eq!(auto.recomputed, on.recomputed);
    assert_eq!(peak, recomputed);
    assert!(peak <= cap);
    assert_eq!(auto.tried.len(), 2);
    assert_eq!(auto.tried[0].recomputed.0, 0);
    assert!(auto.tried[0].peak > cap);
    assert_eq!(
        auto.tried[1].recomputed,
        (on.recomputed, vec!["a".to_string()])
    );
    // `off` keeps it over capacity.
    let (peak, _) = run(cap, Recompute::Off);
    assert!(peak > cap);
}
