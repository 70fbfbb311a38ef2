//! The command line: argument definitions (clap), dispatch, and errors turned into messages
//! and exit codes: 0 on success, 1 on any error (printed as `error: ...` with its causes), 2
//! for usage errors (from clap).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  tessera import testdata/models/onnx/mlp/model.onnx -o mlp.tir
  tessera import model.onnx --input-shape input_ids=1x16
  tessera fmt testdata/models/mlp.tir
  tessera run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy
  tessera run testdata/models/onnx/mlp/model.onnx --input x=testdata/models/onnx/mlp/input_0_x.npy
  tessera run testdata/models/mlp.tir --input x=in.npy --output-dir out/";

/// tessera: an ahead-of-time ML compiler.
///
/// tessera reads models into its own graph IR, rewrites them (equality saturation), shards
/// and places them across the devices of a machine with a lower bound and an explanation for
/// every plan, simulates the result, and lowers each device's part to MLIR (run in-process by
/// the JIT, or built into object files, PTX and MPI programs). It also loads, verifies,
/// prints and interprets graphs. Wherever a model is expected, a file ending in
/// .onnx is imported from ONNX and any other file is read as text IR (.tir).
#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    propagate_version = true,
    arg_required_else_help = true,
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Import an ONNX model into tessera's IR.
    ///
    /// The model is imported (external data files are read from the model's folder, memory
    /// mapped), checked by the IR verifier and printed to standard output in the text format,
    /// or, with `-o`, written to OUT.tir with its large constants in the safetensors sidecar
    /// next to it (both files are written atomically).
    ///
    /// Symbolic input dimensions stay symbolic unless bound with `--input-shape`; binding them
    /// lets the importer fold shape computations (Shape, Gather, Concat, ... feeding Reshape)
    /// into constants. The file is read as ONNX whatever its extension.
    #[command(after_help = "Examples:\n  \
        tessera import testdata/models/onnx/mlp/model.onnx\n  \
        tessera import model.onnx -o model.tir --input-shape input_ids=1x16")]
    Import(ImportArgs),
    /// Load, verify and print a model in canonical text form.
    ///
    /// A .tir file is parsed, checked by the IR verifier and printed to standard output in the
    /// canonical text format (printing the output again gives the same text); a .onnx model is
    /// imported first. Constants with more than 16 elements stay in the safetensors sidecar
    /// next to the file.
    ///
    /// When the verifier finds errors, the IR is printed to standard error with each error
    /// shown at the entity it is about, followed by a one-line summary, and the exit code is 1.
    #[command(after_help = "Example:\n  tessera fmt testdata/models/mlp.tir")]
    Fmt(FmtArgs),
    /// Run a model on .npy inputs: with the reference interpreter, or compiled.
    ///
    /// A directory written by `tessera compile -o DIR` is run compiled: each CPU device's
    /// shared library is loaded (any other module, or one edited since, is JIT-compiled for
    /// this CPU) and the steps run in the manifest's order. With
    /// `--target T`, a model is compiled for T (as `tessera compile` does) and run the same
    /// way. Otherwise the model runs in the reference interpreter.
    ///
    /// The model (.tir, or .onnx which is imported) is loaded and verified; every graph input
    /// must be given exactly once with `--input NAME=FILE.npy`. Each file's dtype must match
    /// the input's element type, its rank the input's rank, and every static dimension its
    /// extent; symbolic dimensions (such as `N`) take the extent of the file, consistently
    /// across inputs. An ONNX model is imported with every input bound to its file's shape,
    /// so its shape computations fold; where an operator needs an input's contents at import
    /// time (a reshape's target shape given as an input, top-k's k), the import specializes on
    /// the file's values.
    ///
    /// Without `--output-dir` a short summary of each output is printed (type, min, max,
    /// mean, first values). With it, each output is written to `DIR/<name>.npy`, where the
    /// output's value name is made file-safe: characters outside [A-Za-z0-9_.-] become `_`,
    /// and clashing names get a `_1`, `_2`, ... suffix. Files are written atomically.
    ///
    /// bf16 values have no numpy dtype: they are read and written as 2-byte raw data (`V2`),
    /// as `np.save` stores `ml_dtypes.bfloat16` arrays.
    #[command(after_help = "Examples:\n  \
        tessera run testdata/models/mlp.tir --input x=testdata/models/mlp.input.npy\n  \
        tessera run model.onnx -i input_ids=ids.npy --output-dir out/\n  \
        tessera run build/ -i x=x.npy --repeat 20\n  \
        tessera run model.onnx --target mcm-2x2 -i input_ids=ids.npy")]
    Run(RunArgs),
    /// Measure op times on a device and write a calibration file (`compile --calibration`).
    ///
    /// Each MODEL (.tir, or .onnx which is imported; symbolic dimensions bound with
    /// `--input-shape`) is compiled for the target with every op on DEVICE, JIT-compiled on
    /// this CPU (an NVIDIA GPU device: on this machine's GPU) with a mark after every kernel
    /// call, and run to warm up (once, then for 50 ms) and then `--repeat` times on the
    /// inputs given with `--input` (one MODEL), else made-up ones (floats in [-1, 1),
    /// integers and booleans one); a model with symbolic dimensions again with each of them
    /// doubled, and all of them. Each kernel call's median time is shared among the ops it
    /// computes in proportion to their modelled times; an op met several times with the same
    /// operand types gets the mean of its shares. Each op kind, operand pattern (an op's
    /// types with the doubled extents `?`) and any op gets a scale in FLOPs and bytes for
    /// the shapes not measured. Without MODEL, a standard set of op shapes is measured
    /// (products, convolutions, softmax, layer norm, elementwise ops, a transpose).
    #[command(after_help = "Examples:\n  \
        tessera calibrate --target cpu --device cpu0 -o calib.toml\n  \
        tessera calibrate --target cpu --device cpu0 -o calib.toml model.onnx --input-shape x=1x3x224x224\n  \
        tessera compile model.onnx --target cpu --calibration calib.toml --input-shape x=1x3x224x224 -o build/")]
    Calibrate(CalibrateArgs),
    /// Train: run N steps of a compiled training step, keeping its state between steps.
    ///
    /// DIR is the output of `tessera compile MODEL --train ... -o DIR`; or give the model and
    /// the training options here to compile and train in one go. Each `--input` file is one
    /// batch, or a stack of batches along a new leading axis that the steps cycle through.
    /// The loss of every step is printed (a progress bar on a terminal) and OUT gets
    /// loss.csv (`step,loss`), weights.safetensors (the trained parameters under their
    /// model names), state.safetensors (every state value, optimizer and step included, for
    /// `--resume`) and, for an ONNX model, model.onnx with the trained initializers.
    #[command(after_help = "Examples:\n  \
        tessera compile mlp.onnx --train --loss cross-entropy --labels labels --optimizer 'adamw{lr=1e-3}' --input-shape x=32x784 -o build/\n  \
        tessera train build/ --input x=batches.npy --input labels=labels.npy --steps 100 --output-dir out/\n  \
        tessera train mlp.onnx --train --labels labels --optimizer 'sgd{lr=0.1 momentum=0.9}' --input-shape x=8x16 --target cpu -i x=x.npy -i labels=y.npy --steps 10 --output-dir out/ --interpret")]
    Train(TrainCmdArgs),
    /// Compile a model for a target: passes, placement, simulation.
    ///
    /// The model is loaded (or imported) and verified, the pass pipeline runs (with the same
    /// instrumentation flags as `tessera opt`), every op is placed on a device of the target,
    /// and the placed graph is simulated with the target's cost model. The summary gives the
    /// simulated latency of one sample, the steady-state throughput of a pipelined stream,
    /// busy time and peak memory per device, and the busy link directions.
    ///
    /// Ops that carry a `device("...")` annotation are pinned there; the others are placed by
    /// `--strategy` (default `auto`) for `--objective` (throughput or latency), never beyond a
    /// device's memory. With `auto`, the placement model's four best plans are simulated and
    /// the simulator's best is kept. Each device's ops are then ordered by upward rank, and a
    /// `transfer` op is inserted on every cut edge. Every shape must be static: bind symbolic
    /// input dimensions with `--input-shape`.
    ///
    /// With `-o DIR`, the placed graph is lowered to MLIR: DIR/<device>.mlir for every device
    /// with work (checked by MLIR's verifier), DIR/manifest.json (the dataflow between the
    /// device programs) and DIR/weights.safetensors; each CPU device's code for this machine
    /// to DIR/<device>.so (clang-22), which `tessera run DIR` loads without compiling; the
    /// placed IR goes to DIR/placed.tir (with its sidecar), the summary to DIR/summary.txt and
    /// the plan (with a lower bound, the gap and per-op explanations) to DIR/plan.json.
    /// `--emit` adds MLIR after each device's pipeline, LLVM IR, object files, PTX, or an MPI
    /// executable; `tessera run DIR` runs the result. `--emit-placement-problem FILE` writes the placement problem, which `tessera
    /// place` solves standalone.
    #[command(after_help = "Examples:\n  \
        tessera compile testdata/models/mlp.tir --target mcm-2x2 --input-shape x=8x16\n  \
        tessera compile model.onnx --target boards/my-board.toml -o build/\n  \
        tessera compile model.tir --target gpu-8 --calibration measured.toml --samples 16\n  \
        tessera compile model.onnx --target mcm-4x4 --objective latency --emit-placement-problem p.json\n  \
        tessera compile model.onnx --input-shape x=1x3x224x224 -o build/ --emit lowered,object")]
    Compile(CompileArgs),
    /// Run a pass pipeline on a model, like mlir-opt.
    ///
    /// The model is loaded (or imported) and verified, the pipeline runs with the verifier
    /// after every pass (unless --no-verify-each), and the result is printed or written with
    /// -o. The instrumentation flags print the IR around passes, dump it after every pass,
    /// and report timing and statistics. When a pass fails or panics, the IR it started from
    /// and the failing pass are written to a reproducer file that --run-reproducer replays.
    #[command(after_help = "Examples:\n  \
        tessera opt model.tir --passes canonicalize,cse -o out.tir\n  \
        tessera opt model.onnx --passes 'canonicalize{max-iterations=4},cse' --timing\n  \
        tessera opt model.tir --passes canonicalize --print-ir-after-change --ir-dump-dir dumps/\n  \
        tessera opt --run-reproducer tessera-reproducer.tir")]
    Opt(OptArgs),
    /// Solve a placement problem (JSON) and print the plan (JSON).
    ///
    /// The problem is what `tessera compile --emit-placement-problem` writes, or one written by
    /// hand (the README documents the schema). The plan gives each op's device, the schedule,
    /// the objective's value, a lower bound on the optimum and the gap to it, per-device load
    /// and memory, per-link load, what `auto` tried, and why each op is where it is. Memory is
    /// never exceeded: a problem with no plan that fits is an error naming the device and by
    /// how much it overflows. The solve time is printed on standard error (the plan itself is
    /// deterministic).
    ///
    /// Strategies: auto (runs what fits the problem's size and keeps the best), exhaustive,
    /// ilp, dp (contiguous pipeline stages), multilevel, heft, local, greedy, single,
    /// round-robin.
    #[command(after_help = "Examples:\n  \
        tessera compile model.onnx --target mcm-4x4 --emit-placement-problem p.json\n  \
        tessera place p.json --objective latency --strategy heft -o plan.json\n  \
        tessera explain plan.json --op fc1/MatMul")]
    Place(PlaceArgs),
    /// Explain where a plan put an op, and why.
    ///
    /// Prints the op's device, its modelled time on every device, and the constraint that
    /// decided it: pin, support, fastest, colocation, memory, link, load, time (a split:
    /// the other option computes longer), forced (`--split force`), or search.
    #[command(after_help = "Example:\n  tessera explain build/plan.json --op fc1/MatMul")]
    Explain(ExplainArgs),
    /// Draw the compile report (report.html) again from a compile's output directory.
    ///
    /// `tessera compile -o DIR` writes DIR/report.html: one self-contained page (no network)
    /// with the target's topology coloured by load and memory, a timeline of the simulated
    /// pipeline with its transfers, memory per device against capacity, the placement's lower
    /// bound and gap, the ops grouped by the model's modules with a search box, and the pass
    /// pipeline's timing and statistics. This command draws it again from DIR's report.json,
    /// plan.json and placed.tir, and prints the page's path.
    #[command(
        after_help = "Examples:\n  tessera compile model.onnx --target mcm-2x2 -o out\n  \
        tessera report out -o out/placement.html\n  \
        tessera compile model.onnx --target mcm-4x4 -o out4\n  \
        tessera report --compare out out4 -o compare.html"
    )]
    Report(ReportArgs),
    /// List every pass with its summary and options.
    Passes,
    /// List the known targets, or show one resolved (`targets show NAME`).
    ///
    /// A target describes a machine: its devices (memory, bandwidth, peak compute per element
    /// type, lowering), the links between them, and the host device. The built-in targets
    /// ship with tessera; more are read from `<dir>/<name>.toml` in the `--target-path`
    /// directories and then in `TESSERA_TARGET_PATH` (colon-separated). A NAME ending in
    /// `.toml` is read as a file.
    #[command(after_help = "Examples:\n  \
        tessera targets\n  \
        tessera targets show mcm-2x2\n  \
        tessera targets show my-board --target-path boards/\n  \
        tessera targets show boards/my-board.toml")]
    Targets(TargetsArgs),
    /// Write a plugin crate: your own `tessera` binary with extra targets and passes.
    ///
    /// `plugin new NAME` writes a crate in ./NAME (or --path DIR, which must be new or
    /// empty) that builds outside this repository: Cargo.toml with path dependencies on the
    /// tessera crates of the checkout this binary was built from (and its Cargo.lock),
    /// .cargo/config.toml with the MLIR environment melior needs, a target file, src/lib.rs
    /// (a target whose accelerator has its own MLIR pipeline and artifact, and a pass),
    /// src/main.rs (the driver) and a README. NAME is a crate name: lowercase letters and
    /// digits in words joined by `-` or `_`.
    #[command(after_help = "Examples:\n  \
        tessera plugin new acme-npu\n  \
        tessera plugin new acme-npu --path ~/src/acme-npu && cd ~/src/acme-npu && cargo build")]
    Plugin(PluginArgs),
}

/// Arguments of `tessera plugin`.
#[derive(Debug, Args)]
struct PluginArgs {
    #[command(subcommand)]
    action: PluginAction,
}

/// `tessera plugin` subcommands.
#[derive(Debug, Subcommand)]
enum PluginAction {
    /// Write a new plugin crate (see `tessera plugin --help`).
    New {
        /// The crate's name (also its binary's, its target's and its lowering's).
        #[arg(value_name = "NAME")]
        name: String,
        /// The folder to write it in (default: ./NAME); it must be new or empty.
        #[arg(long, value_name = "DIR")]
        path: Option<PathBuf>,
    },
}

/// Arguments of `tessera targets`.
#[derive(Debug, Args)]
struct TargetsArgs {
    /// A directory holding `<name>.toml` target files; repeatable, searched in order before
    /// `TESSERA_TARGET_PATH`.
    #[arg(long = "target-path", value_name = "DIR", global = true)]
    target_path: Vec<PathBuf>,
    #[command(subcommand)]
    action: Option<TargetsAction>,
}

/// `tessera targets` subcommands.
#[derive(Debug, Subcommand)]
enum TargetsAction {
    /// Print a target's devices, links and host.
    Show {
        /// A built-in target, a name on the search path, or a FILE.toml.
        #[arg(value_name = "NAME")]
        name: String,
    },
}

/// Arguments of `tessera opt`.
#[derive(Debug, Args)]
struct OptArgs {
    /// The model to transform (.tir, or .onnx).
    #[arg(value_name = "MODEL", required_unless_present = "run_reproducer")]
    file: Option<PathBuf>,
    /// The pass pipeline, e.g. `canonicalize,cse,shape-infer{dims="N=1"}` (`tessera passes`
    /// lists the passes and their options).
    #[arg(
        short,
        long,
        value_name = "PIPELINE",
        required_unless_present = "run_reproducer"
    )]
    passes: Option<String>,
    /// Write the result to OUT.tir (with its sidecar) instead of printing it.
    #[arg(short, long, value_name = "OUT.tir")]
    output: Option<PathBuf>,
    /// Replay a crash reproducer written by a failed pipeline.
    #[arg(long, value_name = "FILE.tir", conflicts_with_all = ["file", "passes"])]
    run_reproducer: Option<PathBuf>,
    /// Also write the result as Graphviz DOT to FILE (devices, if placed, as clusters).
    #[arg(long, value_name = "FILE.dot")]
    dot: Option<PathBuf>,
    #[command(flatten)]
    shapes: ShapeArgs,
    #[command(flatten)]
    flags: crate::instrument::PassFlags,
}

/// Arguments of `tessera compile`.
#[derive(Debug, Args)]
struct CompileArgs {
    /// The model to compile (.tir, or .onnx).
    #[arg(value_name = "MODEL")]
    file: PathBuf,
    /// The target: a built-in or registered name, a name on the target path, or a FILE.toml
    /// (`tessera targets` lists them).
    #[arg(short, long, value_name = "TARGET", default_value = "cpu")]
    target: String,
    /// A directory holding `<name>.toml` target files; repeatable, searched in order before
    /// `TESSERA_TARGET_PATH`.
    #[arg(long = "target-path", value_name = "DIR")]
    target_path: Vec<PathBuf>,
    /// The pass pipeline to run before placement.
    #[arg(short, long, value_name = "PIPELINE", default_value = crate::commands::compile::DEFAULT_PIPELINE)]
    passes: String,
    /// A calibration file of measured op times that override the roofline (see the README).
    #[arg(long, value_name = "FILE.toml")]
    calibration: Option<PathBuf>,
    /// Samples in the simulated stream that measures throughput: a number from 1 to 4096,
    /// or `auto`, as many as the steady state needs (16 per sample in flight, 8 to 512).
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_samples)]
    samples: Samples,
    /// Write the per-device MLIR, each CPU device's shared library, manifest.json,
    /// weights.safetensors, placed.tir, summary.txt and plan.json to DIR (created if needed).
    #[arg(short, long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// The placement strategy (`tessera place --help` lists them).
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = parse_strategy)]
    strategy: String,
    /// What placement minimizes: `throughput` (the period of a pipelined stream) or `latency`
    /// (one sample).
    #[arg(long, value_name = "OBJECTIVE", default_value = "throughput")]
    objective: tessera_place::Objective,
    /// Write the placement problem (JSON, see the README) to FILE before solving it.
    #[arg(long, value_name = "FILE.json")]
    emit_placement_problem: Option<PathBuf>,
    /// With --emit-placement-problem: the written problem also offers every op's split
    /// alternatives over the target's device groups, for `tessera place` to choose among.
    #[arg(long, requires = "emit_placement_problem")]
    split_alternatives: bool,
    /// Splitting ops over a group of devices (tensor and data parallelism, decided with
    /// placement): `off` (every op whole on one device), `auto` (the planner chooses, op by op,
    /// against the plans without splits) or `force` (every op that can split does). The split
    /// ops run on a device mesh of one group, with the collectives their layouts need.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    split: tessera_place::apply::SplitMode,
    /// With --split: offer only splits along these axes, comma-separated (`batch`, `columns`,
    /// `rows`, `heads`, `hidden`, `vocab`, `channels`, `contracted`, `axis<N>`); for example
    /// `--split force --split-axes batch` is data parallelism, `columns,rows` Megatron-style
    /// tensor parallelism.
    #[arg(long, value_name = "AXES", value_delimiter = ',')]
    split_axes: Vec<String>,
    /// Further outputs in DIR (needs -o): `lowered` (each module after its device's MLIR
    /// pipeline), `llvm` (LLVM IR, CPU devices), `object` (object files, CPU devices), `ptx`
    /// (NVIDIA GPU devices), `mpi` (one executable for `mpirun`); comma-separated.
    #[arg(long, value_name = "KIND,...", value_delimiter = ',')]
    emit: Vec<crate::commands::emit::Emit>,
    /// Write the placed graph as Graphviz DOT to FILE, one cluster per device (`dot -Tsvg`
    /// renders it).
    #[arg(long, value_name = "FILE.dot")]
    dot: Option<PathBuf>,
    #[command(flatten)]
    shapes: ShapeArgs,
    #[command(flatten)]
    train: TrainArgs,
    #[command(flatten)]
    flags: crate::instrument::PassFlags,
}

/// `--microbatches`: a count, or `auto` (the planner's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Microbatches {
    /// The counts `compile` tries ([`AUTO_MICROBATCHES`]), the fastest step kept.
    Auto,
    /// This many.
    Count(u64),
}

/// The microbatch counts `--microbatches auto` tries.
pub const AUTO_MICROBATCHES: [u64; 4] = [1, 2, 4, 8];

fn parse_microbatches(s: &str) -> Result<Microbatches, String> {
    if s == "auto" {
        return Ok(Microbatches::Auto);
    }
    match s.parse::<u64>() {
        Ok(m) if (1..=65_536).contains(&m) => Ok(Microbatches::Count(m)),
        _ => Err(format!("`{s}`: expected `auto` or a count from 1 to 65536")),
    }
}

/// The training options of `tessera compile --train` and `tessera train MODEL`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Compile the model's training step (loss, backward graph, optimizer update) instead
    /// of its inference.
    #[arg(long)]
    pub train: bool,
    /// The loss: `cross-entropy` (class indices), `mse`, or `output` (with --loss-output).
    #[arg(
        long,
        value_name = "LOSS",
        default_value = "cross-entropy",
        requires = "train"
    )]
    pub loss: String,
    /// The model output that is the loss (the model computes it).
    #[arg(long, value_name = "NAME", requires = "train")]
    pub loss_output: Option<String>,
    /// The name of the labels input the step takes.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "labels",
        requires = "train"
    )]
    pub labels: String,
    /// The model output the loss reads (default: the first output).
    #[arg(long, value_name = "NAME", requires = "train")]
    pub prediction: Option<String>,
    /// The optimizer: `sgd{lr=0.1 momentum=0.9 dampening=0 nesterov=false weight-decay=0}`,
    /// `adam{lr beta1 beta2 eps weight-decay}` or `adamw{...}` (torch.optim's defaults).
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "sgd{lr=0.01}",
        requires = "train"
    )]
    pub optimizer: String,
    /// The learning-rate schedule: `constant` or `warmup-cosine{warmup=N total=N min-lr=X}`.
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "constant",
        requires = "train"
    )]
    pub schedule: String,
    /// Clip the gradients to this global L2 norm.
    #[arg(long, value_name = "NORM", requires = "train")]
    pub clip_norm: Option<f64>,
    /// Cross-entropy: label smoothing in [0, 1].
    #[arg(long, value_name = "S", default_value_t = 0.0, requires = "train")]
    pub label_smoothing: f64,
    /// Cross-entropy: labels equal to this are ignored.
    #[arg(long, value_name = "INDEX", default_value_t = -100, allow_hyphen_values = true, requires = "train")]
    pub ignore_index: i64,
    /// Initializers whose name matches this regular expression do not train.
    #[arg(long, value_name = "REGEX", requires = "train")]
    pub freeze: Option<String>,
    /// Batch norm: the weight of a batch's statistics in the running ones (PyTorch's
    /// momentum).
    #[arg(long, value_name = "M", default_value_t = 0.1, requires = "train")]
    pub bn_momentum: f64,
    /// Run each batch as this many microbatches (equal slices of its rows), their gradients
    /// summed before the one optimizer update; or, for `compile`, `auto`: the planner
    /// simulates the step with 1, 2, 4 and 8 microbatches (those the batch divides into) and
    /// keeps the shortest step within every device's capacity (ties: fewer microbatches).
    #[arg(long, value_name = "M|auto", default_value = "1", requires = "train",
          value_parser = parse_microbatches)]
    pub microbatches: Microbatches,
    /// With microbatches, the pipeline schedule each device runs them in: `gpipe` (all
    /// forwards, then all backwards), `1f1b` (PipeDream-Flush: after a warm-up, one forward
    /// then one backward), `none` (each device's ops by upward rank), or `auto`, the
    /// simulator's best of the three (shortest step, then least peak memory).
    #[arg(long, value_name = "SCHEDULE", default_value = "auto", requires = "train",
          value_parser = ["auto", "none", "gpipe", "1f1b"])]
    pub pipeline: String,
    /// Data parallelism: the most MiB of gradients summed by one all-reduce (PyTorch DDP's
    /// `bucket_cap_mb`); the parameters' gradients fill buckets in reverse parameter order,
    /// each bucket's all-reduce starting when its last gradient is made. 0: one all-reduce
    /// per gradient.
    #[arg(long, value_name = "MB", default_value_t = 25.0, requires = "train",
          value_parser = bucket_mb)]
    pub bucket_mb: f64,
    /// Activation recomputation in a microbatched step's pipeline stages: each stage runs a
    /// microbatch's forward again just before its backward, keeping only what enters the
    /// stage (GPipe's re-materialization). `auto`: only on the stages whose devices the
    /// simulated step puts over their capacity, kept when that brings the step within it;
    /// `on`: on every stage; `off`: never.
    #[arg(long, value_name = "auto|on|off", default_value = "auto", requires = "train",
          value_parser = ["auto", "on", "off"])]
    pub recompute: String,
    /// ZeRO's stage for a data-parallel step whose optimizer runs split over a mesh (the
    /// gradients reduce-scattered, each device updating its rows): `1` keeps the optimizer
    /// state that only the update reads (Adam's moments, SGD's momentum) split between
    /// steps, each device holding its rows (ZeRO-1); `0` gathers it whole after every
    /// update, so that every device holds all of it. Parameters are gathered in both.
    #[arg(long, value_name = "0|1", default_value = "1", requires = "train",
          value_parser = ["0", "1"])]
    pub zero_stage: String,
}

/// `--bucket-mb`: a finite number of MiB from 0 to 1048576 (1 TiB).
fn bucket_mb(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is not a number of MiB"))?;
    if x.is_finite() && (0.0..=1_048_576.0).contains(&x) {
        Ok(x)
    } else {
        Err(format!("`{s}` is not between 0 and 1048576 MiB"))
    }
}

/// Arguments of `tessera train`.
#[derive(Debug, Args)]
struct TrainCmdArgs {
    /// A compiled training step (`tessera compile --train -o DIR`), or a model with
    /// `--train` and its options.
    #[arg(value_name = "DIR|MODEL")]
    path: PathBuf,
    /// A batch input and its .npy file (one batch, or a stack of batches); repeatable.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    inputs: Vec<crate::commands::run::Binding>,
    /// The number of steps.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    steps: u64,
    /// Where to write loss.csv, weights.safetensors, state.safetensors and model.onnx.
    #[arg(long, value_name = "OUT")]
    output_dir: PathBuf,
    /// Continue from the state a previous run wrote to this directory.
    #[arg(long, value_name = "OUT")]
    resume: Option<PathBuf>,
    /// Run the step in the reference interpreter instead of the JIT.
    #[arg(long)]
    interpret: bool,
    /// The seed of dropout's masks (the step's `seed` input, when it has dropout): a step's
    /// masks are a function of the seed and the step count only.
    #[arg(long, value_name = "N", default_value_t = 0)]
    seed: i64,
    /// LLVM's optimization level for the JIT-compiled step (0 to 3): lower levels compile a
    /// large model's step much faster, into slower code.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=3))]
    opt_level: u8,
    /// Threads for the compiled code's parallel loops (OpenMP): from 1 to 1024. Default:
    /// `OMP_NUM_THREADS`, else one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// With a model: the target to compile for.
    #[arg(short, long, value_name = "TARGET", default_value = "cpu")]
    target: String,
    /// A directory holding `<name>.toml` target files; repeatable.
    #[arg(long = "target-path", value_name = "DIR")]
    target_path: Vec<PathBuf>,
    /// With a model: the pass pipeline run after the training step is built.
    #[arg(short, long, value_name = "PIPELINE", default_value = crate::commands::compile::DEFAULT_PIPELINE)]
    passes: String,
    #[command(flatten)]
    shapes: ShapeArgs,
    #[command(flatten)]
    train: TrainArgs,
}

/// Arguments of `tessera place`.
#[derive(Debug, Args)]
struct PlaceArgs {
    /// The placement problem (JSON).
    #[arg(value_name = "PROBLEM.json")]
    problem: PathBuf,
    /// What to minimize: `throughput` or `latency`.
    #[arg(long, value_name = "OBJECTIVE", default_value = "throughput")]
    objective: tessera_place::Objective,
    /// The strategy.
    #[arg(long, value_name = "NAME", default_value = "auto", value_parser = parse_strategy)]
    strategy: String,
    /// Write the plan to FILE (atomically) instead of standard output.
    #[arg(short, long, value_name = "PLAN.json")]
    output: Option<PathBuf>,
    /// Leave the per-op explanations out of the plan.
    #[arg(long)]
    no_explain: bool,
}

/// Arguments of `tessera explain`.
#[derive(Debug, Args)]
struct ExplainArgs {
    /// A plan (from `tessera place`, or `plan.json` of `tessera compile -o`).
    #[arg(value_name = "PLAN.json")]
    plan: PathBuf,
    /// The op to explain (its name in the plan); repeatable. Without it, every op.
    #[arg(long, value_name = "NAME")]
    op: Vec<String>,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// The output directory of `tessera compile -o`.
    #[arg(value_name = "DIR", required_unless_present = "compare")]
    dir: Option<PathBuf>,
    /// Compare two compiles (output directories of `tessera compile -o`) side by side:
    /// period, latency, the placement's numbers, each device's load, the ops whose device
    /// changed. Writes DIR_B/compare.html unless -o says where.
    #[arg(
        long,
        num_args = 2,
        value_names = ["DIR_A", "DIR_B"],
        conflicts_with = "dir"
    )]
    compare: Option<Vec<PathBuf>>,
    /// Write the page here instead of DIR/report.html (or DIR_B/compare.html).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `--input-shape`, shared by every command that takes a model.
#[derive(Debug, Args)]
struct ShapeArgs {
    /// Give a graph input a static shape, extents separated by `x` (`x=1x3x224x224`; `x=`
    /// for a scalar); repeat once per input. It must keep the input's rank and static
    /// extents; its symbolic dimensions take these extents.
    #[arg(long = "input-shape", value_name = "NAME=DIMS", value_parser = parse_input_shape)]
    input_shapes: Vec<crate::commands::InputShape>,
}

/// Arguments of `tessera import`.
#[derive(Debug, Args)]
struct ImportArgs {
    /// The ONNX model to import.
    #[arg(value_name = "MODEL.onnx")]
    model: PathBuf,
    /// Write the IR to OUT.tir (and its sidecar OUT.safetensors) instead of printing it.
    #[arg(short, long, value_name = "OUT.tir")]
    output: Option<PathBuf>,
    #[command(flatten)]
    shapes: ShapeArgs,
}

/// Arguments of `tessera fmt`.
#[derive(Debug, Args)]
struct FmtArgs {
    /// The model to format (.tir, or .onnx).
    #[arg(value_name = "MODEL")]
    file: PathBuf,
    #[command(flatten)]
    shapes: ShapeArgs,
}

/// Arguments of `tessera run`.
#[derive(Debug, Args)]
struct RunArgs {
    /// The model to run (.tir, or .onnx).
    #[arg(value_name = "MODEL")]
    file: PathBuf,
    /// Bind a graph input to a .npy file; repeat once per input. An input without a name
    /// is addressed by its position, `#0`, `#1`, ...
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    inputs: Vec<crate::commands::run::Binding>,
    /// Write each output to DIR/<output name>.npy (DIR is created if needed) instead of
    /// printing a summary.
    #[arg(short, long, value_name = "DIR")]
    output_dir: Option<PathBuf>,
    /// Compile for this target and run the compiled program (per-device MLIR, JIT-compiled on
    /// this CPU) instead of interpreting the graph.
    #[arg(short, long, value_name = "TARGET")]
    target: Option<String>,
    /// A directory holding `<name>.toml` target files; repeatable.
    #[arg(long = "target-path", value_name = "DIR")]
    target_path: Vec<PathBuf>,
    /// Run the compiled program N times (after warm-up runs when N > 1: a first one, then 50 ms of them) and print the median
    /// time on standard error.
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
    /// Measure a compiled directory kernel by kernel: its modules are JIT-compiled with a
    /// mark after every kernel call, run `--repeat` times (default 20 here) after warm-up
    /// runs (a first one, then 50 ms of them), and each kernel's and step's median time is set beside the compile's prediction
    /// (its ops' modelled seconds): a table on standard error, and DIR/report.json's
    /// `measured` (DIR/report.html draws it).
    #[arg(long)]
    profile: bool,
    /// Threads for the compiled code's parallel loops (OpenMP): from 1 to 1024. Default:
    /// `OMP_NUM_THREADS`, else one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    /// Run the program's NVIDIA GPU devices on this machine's GPUs (the CUDA driver, loaded
    /// at run time; the n-th GPU device on GPU n). Without it, every device's module runs on
    /// this CPU.
    #[arg(long)]
    gpu: bool,
    #[command(flatten)]
    shapes: ShapeArgs,
}

/// Arguments of `tessera calibrate`.
#[derive(Debug, Args)]
struct CalibrateArgs {
    /// The models whose ops are measured (.tir, or .onnx); none: the standard set.
    #[arg(value_name = "MODEL")]
    models: Vec<PathBuf>,
    /// The target (a built-in name or a target file).
    #[arg(short, long, value_name = "TARGET")]
    target: String,
    /// A directory holding `<name>.toml` target files; repeatable.
    #[arg(long = "target-path", value_name = "DIR")]
    target_path: Vec<PathBuf>,
    /// The device measured: one of the target's devices, of kind `cpu`.
    #[arg(long, value_name = "DEVICE")]
    device: String,
    /// The calibration file written.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// Bind an input of the (one) model to a .npy file, as `run` does; repeat once per
    /// input. Without it the inputs are made up.
    #[arg(short, long = "input", value_name = "NAME=FILE.npy", value_parser = parse_binding)]
    inputs: Vec<crate::commands::run::Binding>,
    /// Timed runs of each model, after warm-up runs (a first one, then 50 ms of them).
    #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    repeat: u64,
    /// Measure each model at its given shapes only. By default a model with symbolic
    /// dimensions is measured again with each of them doubled (the inputs of `--input`
    /// tiled along them, each block twice), so that the scales see how its ops' times grow
    /// with them; a model that does not compile at those shapes is measured at the given
    /// ones only, with a warning.
    #[arg(long = "one-shape")]
    one_shape: bool,
    /// Measure nothing: merge the measurements of DEVICE in these calibration files (one
    /// met in several takes the median of their seconds) and fit the scales again to all
    /// of them (those that give their op's work, as `calibrate` writes them), the files'
    /// operand patterns among them; repeatable.
    #[arg(long, value_name = "FILE")]
    merge: Vec<PathBuf>,
    /// Threads for the compiled code's parallel loops (OpenMP): from 1 to 1024. Default:
    /// `OMP_NUM_THREADS`, else one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
    #[command(flatten)]
    shapes: ShapeArgs,
}

/// `--samples`: a stream length, or 0 for `auto`.
#[derive(Clone, Copy, Debug)]
struct Samples(u16);

impl Samples {
    /// The stream length, `None` for `auto`.
    fn get(self) -> Option<usize> {
        (self.0 > 0).then_some(usize::from(self.0))
    }
}

fn parse_samples(s: &str) -> Result<Samples, String> {
    if s == "auto" {
        return Ok(Samples(0));
    }
    match s.parse::<u16>() {
        Ok(n) if (1..=4096).contains(&n) => Ok(Samples(n)),
        _ => Err(format!(
            "`{s}` is not a stream length (expected a number from 1 to 4096, or `auto`)"
        )),
    }
}

/// A placement strategy's name, checked at parse time like `--objective` (exit 2).
fn parse_strategy(s: &str) -> Result<String, String> {
    let names: Vec<&str> = tessera_place::STRATEGIES.iter().map(|(n, _)| *n).collect();
    if names.contains(&s) {
        return Ok(s.to_string());
    }
    let hint = tessera_passes::closest(s, &names)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default();
    Err(format!(
        "unknown strategy `{s}` (expected one of: {}){hint}",
        names.join(", ")
    ))
}

/// `--threads N` of `run` and `train`, set before anything compiled runs.
fn set_threads(threads: Option<u16>) -> anyhow::Result<()> {
    if let Some(n) = threads {
        tessera_mlir::jit::set_threads(usize::from(n))?;
    }
    Ok(())
}

fn parse_binding(s: &str) -> Result<crate::commands::run::Binding, String> {
    match s.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok(crate::commands::run::Binding {
                name: name.to_string(),
                file: PathBuf::from(file),
            })
        }
        _ => Err(format!("expected NAME=FILE.npy, got `{s}`")),
    }
}

/// Parses `NAME=D0xD1x...` (`NAME=` is a scalar). The name is everything before the last
/// `=`, so names holding `=` work.
fn parse_input_shape(s: &str) -> Result<crate::commands::InputShape, String> {
    let bad = || format!("expected NAME=DIMS such as x=1x3x224x224, got `{s}`");
    let (name, dims) = s.rsplit_once('=').ok_or_else(bad)?;
    if name.is_empty() {
        return Err(bad());
    }
    let dims = if dims.trim().is_empty() {
        Vec::new()
    } else {
        dims.split(['x', 'X', ','])
            .map(|d| d.trim().parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| format!("`{s}`: extents must be non-negative integers separated by `x`"))?
    };
    Ok(crate::commands::InputShape {
        name: name.to_string(),
        dims,
    })
}

/// Parses the command line, runs the subcommand and turns the result into an exit code.
pub fn main() -> ExitCode {
    main_named("tessera")
}

/// [`main`] for a binary called `name` (a plugin's own `tessera`, see [`crate::driver`]).
pub fn main_named(name: &str) -> ExitCode {
    crate::instrument::process_start();
    if let Err(e) = tessera_eqsat::register()
        .and_then(|()| tessera_place::pass::register())
        .and_then(|()| tessera_shard::register())
    {
        let _ = writeln!(std::io::stderr(), "error: {e}");
        return ExitCode::FAILURE;
    }
    let name = name.to_string();
    let matches = Cli::command()
        .name(name.clone())
        .bin_name(name)
        .get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let result = match cli.command {
        Command::Compile(a) => {
            crate::commands::compile::run(&crate::commands::compile::CompileRequest {
                model: &a.file,
                target: &a.target,
                target_path: &a.target_path,
                passes: &a.passes,
                calibration: a.calibration.as_deref(),
                samples: a.samples.get(),
                output: a.output.as_deref(),
                shapes: &a.shapes.input_shapes,
                flags: &a.flags,
                strategy: &a.strategy,
                objective: a.objective,
                emit_problem: a.emit_placement_problem.as_deref(),
                split_alternatives: a.split_alternatives,
                split: a.split,
                split_axes: &a.split_axes,
                emits: &a.emit,
                dot: a.dot.as_deref(),
                train: &a.train,
            })
        }
        Command::Train(a) => set_threads(a.threads).and_then(|()| {
            crate::commands::train::run(&crate::commands::train::TrainRequest {
                path: &a.path,
                bindings: &a.inputs,
                steps: a.steps,
                output_dir: &a.output_dir,
                resume: a.resume.as_deref(),
                interpret: a.interpret,
                seed: a.seed,
                opt_level: usize::from(a.opt_level),
                target: &a.target,
                target_path: &a.target_path,
                passes: &a.passes,
                shapes: &a.shapes.input_shapes,
                train: &a.train,
            })
        }),
        Command::Place(a) => crate::commands::place::run(
            &a.problem,
            a.objective,
            &a.strategy,
            a.output.as_deref(),
            !a.no_explain,
        ),
        Command::Explain(a) => crate::commands::place::explain(&a.plan, &a.op),
        Command::Report(a) => match (&a.compare, &a.dir) {
            (Some(dirs), _) => {
                crate::commands::report::compare(&dirs[0], &dirs[1], a.output.as_deref())
            }
            (None, Some(dir)) => crate::commands::report::run(dir, a.output.as_deref()),
            (None, None) => Err(anyhow::anyhow!("give DIR, or --compare DIR_A DIR_B")),
        },
        Command::Import(a) => {
            crate::commands::import::run(&a.model, a.output.as_deref(), &a.shapes.input_shapes)
        }
        Command::Fmt(a) => crate::commands::fmt::run(&a.file, &a.shapes.input_shapes),
        Command::Run(a) => set_threads(a.threads).and_then(|()| {
            crate::commands::run::run(
                &a.file,
                &a.inputs,
                a.output_dir.as_deref(),
                &a.shapes.input_shapes,
                &crate::commands::run::Execution {
                    target: a.target.as_deref(),
                    target_path: &a.target_path,
                    repeat: a.repeat.unwrap_or(if a.profile { 20 } else { 1 }),
                    profile: a.profile,
                    threads: a.threads,
                    gpus: if a.gpu {
                        tessera_mlir::GpuDevices::OnGpu
                    } else {
                        tessera_mlir::GpuDevices::OnCpu
                    },
                },
            )
        }),
        Command::Calibrate(a) => set_threads(a.threads).and_then(|()| {
            crate::commands::calibrate::run(&crate::commands::calibrate::CalibrateRequest {
                models: &a.models,
                target: &a.target,
                target_path: &a.target_path,
                device: &a.device,
                output: &a.output,
                repeat: usize::try_from(a.repeat).unwrap_or(usize::MAX),
                shapes: &a.shapes.input_shapes,
                bindings: &a.inputs,
                one_shape: a.one_shape,
                merge: &a.merge,
            })
        }),
        Command::Opt(a) => crate::commands::opt::run(&crate::commands::opt::OptRequest {
            input: a.file.as_deref(),
            passes: a.passes.as_deref(),
            output: a.output.as_deref(),
            reproducer: a.run_reproducer.as_deref(),
            shapes: &a.shapes.input_shapes,
            flags: &a.flags,
            dot: a.dot.as_deref(),
        }),
        Command::Passes => crate::commands::passes::run(),
        Command::Targets(a) => match &a.action {
            None => crate::commands::targets::list(&a.target_path),
            Some(TargetsAction::Show { name }) => {
                crate::commands::targets::show(name, &a.target_path)
            }
        },
        Command::Plugin(a) => match &a.action {
            PluginAction::New { name, path } => crate::commands::plugin::new(name, path.as_deref()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {}", error_message(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, `context: cause: root cause`. A cause whose text
/// the message already holds (errors that print their source themselves) is not repeated.
pub fn error_message(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if msg.is_empty() {
            msg = text;
        } else if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn error_chain_without_repeats() {
        #[derive(Debug)]
        struct Wrapped(std::io::Error);
        impl std::fmt::Display for Wrapped {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "m.safetensors: {}", self.0)
            }
        }
        impl std::error::Error for Wrapped {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Wrapped(io)).context("loading m.tir");
        assert_eq!(error_message(&e), "loading m.tir: m.safetensors: gone");
        let e = anyhow::anyhow!("root").context("middle").context("top");
        assert_eq!(error_message(&e), "top: middle: root");
    }

    #[test]
    fn parses_bindings() {
        let b = parse_binding("x=a=b.npy").expect("valid");
        assert_eq!((b.name.as_str(), b.file.to_str()), ("x", Some("a=b.npy")));
        assert!(parse_binding("x").is_err());
        assert!(parse_binding("=a.npy").is_err());
        assert!(parse_binding("x=").is_err());
    }

    #[test]
    fn parses_input_shapes() {
        let s = parse_input_shape("input_ids=1x16").expect("valid");
        assert_eq!(
            (s.name.as_str(), s.dims.as_slice()),
            ("input_ids", &[1, 16][..])
        );
        let s = parse_input_shape("a=b=2,3").expect("valid");
        assert_eq!((s.name.as_str(), s.dims.as_slice()), ("a=b", &[2, 3][..]));
        let s = parse_input_shape("scalar=").expect("valid");
        assert!(s.dims.is_empty());
        assert!(parse_input_shape("x").is_err());
        assert!(parse_input_shape("=1x2").is_err());
        let e = parse_input_shape("x=1x-2").expect_err("negative");
        assert!(e.contains("non-negative integers"), "{e}");
        assert!(parse_input_shape("x=1xx2").is_err());
    }
}
