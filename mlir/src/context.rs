//! The MLIR context tessera uses: every upstream dialect, pass and LLVM translation
//! registered; parsing and verification with MLIR's diagnostics collected as error text; pass
//! pipelines run in-process; translation to LLVM IR.

use std::cell::RefCell;
use std::rc::Rc;

use melior::Context;
use melior::dialect::DialectRegistry;
use melior::ir::Module;
use melior::ir::operation::{OperationLike, OperationPrintingFlags};
use melior::pass::PassManager;
use melior::utility::{
    parse_pass_pipeline, register_all_dialects, register_all_llvm_translations, register_all_passes,
};

use crate::Error;

/// Appends, after each `loc("-":L:C)` of a diagnostic, the source line it points at (cut
/// to 200 characters around the column).
fn with_source_lines(diag: &str, text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for d in diag.lines() {
        out.push_str(d);
        out.push('\n');
        if let Some(rest) = d.strip_prefix("loc(\"-\":") {
            let mut it = rest.split(|c: char| !c.is_ascii_digit());
            let l: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
            let c: usize = it.next().and_then(|x| x.parse().ok()).unwrap_or(1);
            if let Some(src) = l.checked_sub(1).and_then(|i| lines.get(i)) {
                let start = c.saturating_sub(100);
                let s: String = src.chars().skip(start).take(200).collect();
                out.push_str(&format!("  | {s}\n"));
            }
        }
    }
    out.trim_end().to_string()
}

/// How a pipeline run reports itself (`mlir-opt`'s printing and timing flags).
#[derive(Clone, Debug, Default)]
pub struct PipelineOptions {
    /// Print the module after every pass (`--mlir-print-ir-after-all`), to stderr.
    pub print_ir_after_all: bool,
    /// Print the module before every pass (`--mlir-print-ir-before-all`), to stderr.
    pub print_ir_before_all: bool,
    /// Report the time of every pass (`--mlir-timing`), to stderr.
    pub timing: bool,
    /// Print the module after the named passes only, to stderr: a name is a pass's argument
    /// (`convert-linalg-to-loops`) or its class name (`ConvertLinalgToLoopsPass`), as the
    /// headers of [`PipelineOptions::print_ir_after_all`] show them.
    pub print_ir_after: Vec<String>,
    /// Print the module before the named passes only (names as for `print_ir_after`).
    pub print_ir_before: Vec<String>,
}

impl PipelineOptions {
    /// Whether a pass whose dump header is `header` is one of `names`: the header is MLIR's
    /// `// -----// IR Dump After ConvertLinalgToLoopsPass (convert-linalg-to-loops)
    /// ('func.func' operation: @step0) //----- //`.
    fn header_names(header: &str, names: &[String]) -> bool {
        let rest = header
            .strip_prefix("// -----// IR Dump ")
            .and_then(|r| r.split_once(' '))
            .map_or("", |(_, r)| r);
        let class = rest.split(' ').next().unwrap_or_default();
        let argument = rest
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map_or("", |(a, _)| a);
        names.iter().any(|n| n == class || n == argument)
    }

    /// The sections of MLIR's IR printing (`text`, every pass's dump) that the named passes
    /// made; a section runs from its header to the next. What precedes the first header
    /// (anything else written meanwhile) is kept.
    fn selected_dumps(&self, text: &str) -> String {
        let mut out = String::new();
        let mut keep = true;
        for line in text.split_inclusive('\n') {
            if line.starts_with("// -----// IR Dump Before ") {
                keep = Self::header_names(line.trim_end(), &self.print_ir_before);
            } else if line.starts_with("// -----// IR Dump After ") {
                keep = Self::header_names(line.trim_end(), &self.print_ir_after);
            }
            if keep {
                out.push_str(line);
            }
        }
        out
    }
}

/// An MLIR context with everything registered and a diagnostic collector.
pub struct Mlir {
    context: Context,
    diagnostics: Rc<RefCell<Vec<String>>>,
}

impl Default for Mlir {
    fn default() -> Self {
        Self::new()
    }
}

impl Mlir {
    /// A context with all upstream dialects loaded and all passes and translations registered.
    pub fn new() -> Mlir {
        let registry = DialectRegistry::new();
        register_all_dialects(&registry);
        let context = Context::new_with_registry(&registry, false);
        context.load_all_available_dialects();
        register_all_llvm_translations(&context);
        register_all_passes();
        let diagnostics: Rc<RefCell<Vec<String>>> = Rc::default();
        let sink = diagnostics.clone();
        context.attach_diagnostic_handler(move |d| {
            sink.borrow_mut().push(format!("{}: {}", d.location(), d));
            true
        });
        Mlir {
            context,
            diagnostics,
        }
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.context
    }

    fn take_diagnostics(&self) -> String {
        let d = std::mem::take(&mut *self.diagnostics.borrow_mut());
        if d.is_empty() {
            "no diagnostic".to_string()
        } else {
            d.join("\n")
        }
    }

    /// Parses a module and runs MLIR's verifier on it; `what` names it in errors.
    pub fn parse(&self, text: &str, what: &str) -> Result<Module<'_>, Error> {
        self.diagnostics.borrow_mut().clear();
        let module = Module::parse(&self.context, text).ok_or_else(|| Error::Mlir {
            what: what.to_string(),
            stage: "parse".into(),
            message: with_source_lines(&self.take_diagnostics(), text),
        })?;
        self.verify(&module, what)?;
        Ok(module)
    }

    /// Runs MLIR's verifier.
    pub fn verify(&self, module: &Module<'_>, what: &str) -> Result<(), Error> {
        self.diagnostics.borrow_mut().clear();
        if module.as_operation().verify() {
            Ok(())
        } else {
            Err(Error::Mlir {
                what: what.to_string(),
                stage: "verify".into(),
                message: self.take_diagnostics(),
            })
        }
    }

    /// Runs a textual pass pipeline (`builtin.module(...)`, as `mlir-opt --pass-pipeline`
    /// takes it) on a module in-process. The result is the same in every run: where the
    /// pipeline named constants in a run-dependent order or recorded a time, the module is
    /// made canonical ([`crate::canonical`]). A pipeline with the CPU code generation
    /// schedule ([`crate::pipelines::scheduled`]) gets its contraction sequence applied
    /// first and, where the pipeline starts by fusing elementwise ops, its threads sequence
    /// after that fusion ([`crate::pipelines::fusion_first`]); the schedule, as a transform
    /// library, is returned (empty for other pipelines).
    pub fn run_pipeline<'c>(
        &'c self,
        module: &mut Module<'c>,
        pipeline: &str,
        options: &PipelineOptions,
        what: &str,
    ) -> Result<String, Error> {
        if let Some((loops, kernels)) = crate::pipelines::gpu_stages(pipeline) {
            crate::gpu::stage_constants(self, module, what)?;
            self.run_passes(module, &loops, options, what)?;
            crate::gpu::map_loops(self, module, what)?;
            self.run_passes(module, &kernels, options, what)?;
            return Ok(String::new());
        }
        if !crate::pipelines::scheduled(pipeline) {
            self.run_passes(module, pipeline, options, what)?;
            return Ok(String::new());
        }
        let parallel = crate::pipelines::threaded(pipeline);
        let contractions = crate::schedule::apply(self, module, parallel, what)?;
        let Some((fusion, rest)) = crate::pipelines::fusion_first(pipeline) else {
            self.run_passes(module, pipeline, options, what)?;
            return Ok(crate::schedule::library(&contractions, None));
        };
        self.run_passes(module, &fusion, options, what)?;
        let threads = crate::schedule::apply_threads(self, module, parallel, what)?;
        self.run_passes(module, &rest, options, what)?;
        Ok(crate::schedule::library(&contractions, Some(&threads)))
    }

    /// Runs a textual pass pipeline on a module in-process (see [`Mlir::run_pipeline`]),
    /// without a schedule.
    fn run_passes<'c>(
        &'c self,
        module: &mut Module<'c>,
        pipeline: &str,
        options: &PipelineOptions,
        what: &str,
    ) -> Result<(), Error> {
        self.diagnostics.borrow_mut().clear();
        let pm = PassManager::new(&self.context);
        pm.enable_verifier(true);
        // Printing after (or before) named passes: MLIR's C API prints after all or none, so
        // every dump goes to a temporary stderr and only the named passes' are passed on.
        let named = !options.print_ir_after.is_empty() || !options.print_ir_before.is_empty();
        let selective = named && !options.print_ir_after_all && !options.print_ir_before_all;
        if options.print_ir_after_all || options.print_ir_before_all || selective {
            pm.enable_ir_printing(&melior::pass::PassIrPrintingOptions {
                before_all: options.print_ir_before_all
                    || (selective && !options.print_ir_before.is_empty()),
                after_all: options.print_ir_after_all
                    || (selective && !options.print_ir_after.is_empty()),
                module_scope: true,
                on_change: false,
                on_failure: false,
                flags: OperationPrintingFlags::new(),
                tree_printing_path: std::path::PathBuf::new(),
            });
        }
        if options.timing {
            // SAFETY: the pass manager is alive for the call.
            #[allow(unsafe_code)]
            unsafe {
                mlir_sys::mlirPassManagerEnableTiming(pm.to_raw());
            }
        }
        parse_pipeline(&pm, pipeline, what)?;
        let ran = if selective {
            let capture = StderrCapture::start().map_err(|e| Error::Mlir {
                what: what.to_string(),
                stage: "pipeline".into(),
                message: format!("cannot capture MLIR's IR printing: {e}"),
            })?;
            let ran = pm.run(module);
            let printed = capture.finish();
            eprint!("{}", options.selected_dumps(&printed));
            ran
        } else {
            pm.run(module)
        };
        ran.map_err(|_| Error::Mlir {
            what: what.to_string(),
            stage: "pipeline".into(),
            message: self.take_diagnostics(),
        })?;
        if needs_canonical(module)
            && let Some(text) = crate::canonical::canonical_text(&Mlir::print(module))
        {
            *module = self.parse(&text, what)?;
        }
        Ok(())
    }

    /// Runs a textual pipeline anchored on `func.func` (`func.func(...)`) on one function
    /// of a module in-process.
    pub(crate) fn run_on_function(
        &self,
        function: &melior::ir::operation::OperationRef<'_, '_>,
        pipeline: &str,
        what: &str,
    ) -> Result<(), Error> {
        use melior::ir::operation::OperationLike;
        self.diagnostics.borrow_mut().clear();
        let fail = |message: String| Error::Mlir {
            what: what.to_string(),
            stage: "pipeline".into(),
            message,
        };
        // SAFETY: the pass manager is made, used and destroyed here; the function is a
        // live op of this context.
        let mut parse_error = String::new();
        #[allow(unsafe_code)]
        let ok = unsafe {
            let pm = mlir_sys::mlirPassManagerCreateOnOperation(
                self.context.to_raw(),
                melior::StringRef::new("func.func").to_raw(),
            );
            let opm = mlir_sys::mlirPassManagerGetAsOpPassManager(pm);
            let parsed = mlir_sys::mlirParsePassPipeline(
                opm,
                melior::StringRef::new(pipeline).to_raw(),
                Some(append_text),
                (&mut parse_error as *mut String).cast(),
            );
            let ok = parsed.value != 0
                && mlir_sys::mlirPassManagerRunOnOp(pm, function.to_raw()).value != 0;
            mlir_sys::mlirPassManagerDestroy(pm);
            ok
        };
        if ok {
            Ok(())
        } else {
            Err(fail(format!(
                "{pipeline}: {parse_error}{}",
                self.take_diagnostics()
            )))
        }
    }

    /// Applies the transform dialect's named sequence `entry` of `schedule` to `module`
    /// (the transform interpreter, as `transform-interpreter` runs it), then verifies it.
    pub fn apply_transform(
        &self,
        module: &mut Module<'_>,
        entry: &melior::ir::OperationRef<'_, '_>,
        schedule: &Module<'_>,
        what: &str,
    ) -> Result<(), Error> {
        use melior::ir::operation::OperationLike;
        self.diagnostics.borrow_mut().clear();
        // SAFETY: the three operations are alive for the call and belong to this context;
        // the options are created and destroyed here.
        #[allow(unsafe_code)]
        let ok = unsafe {
            let options = mlir_sys::mlirTransformOptionsCreate();
            let result = mlir_sys::mlirTransformApplyNamedSequence(
                module.as_operation().to_raw(),
                entry.to_raw(),
                schedule.as_operation().to_raw(),
                options,
            );
            mlir_sys::mlirTransformOptionsDestroy(options);
            result.value != 0
        };
        if !ok {
            return Err(Error::Mlir {
                what: what.to_string(),
                stage: "schedule".into(),
                message: self.take_diagnostics(),
            });
        }
        self.verify(module, what)
    }

    /// `pipeline` as MLIR parses it, every pass option spelled out: what `mlir-opt
    /// --dump-pass-pipeline` prints, and a string `mlir-opt --pass-pipeline=` accepts.
    pub fn expand_pipeline(&self, pipeline: &str, what: &str) -> Result<String, Error> {
        let pm = PassManager::new(&self.context);
        parse_pipeline(&pm, pipeline, what)?;
        Ok(pm.as_operation_pass_manager().to_string())
    }

    /// Prints a module as MLIR text (generic form off, debug info off).
    pub fn print(module: &Module<'_>) -> String {
        module.as_operation().to_string()
    }

    /// Gives each function `module` declares the body of the function of the same name in
    /// `definitions` (a module's text, `what` naming both in errors). A pipeline whose
    /// passes cannot take some ops runs while those ops sit in declared functions, and gets
    /// them after. A declaration no definition names stays one; a definition of a symbol
    /// `module` does not declare is an error.
    pub fn define_functions(
        &self,
        module: &mut Module<'_>,
        definitions: &str,
        what: &str,
    ) -> Result<(), Error> {
        use melior::ir::BlockLike;
        use melior::ir::RegionLike;
        let fail = |message: String| Error::Mlir {
            what: what.to_string(),
            stage: "define functions".into(),
            message,
        };
        // Blocks move between the two modules: both must live in this context.
        if module.context() != self.context {
            return Err(fail("the module belongs to another MLIR context".into()));
        }
        let defs = self.parse(definitions, &format!("{what} (function definitions)"))?;
        let mut declared = std::collections::BTreeMap::new();
        let body = module.body();
        let mut op = body.first_operation();
        while let Some(o) = op {
            if let Some(name) = func_name(&o)
                && o.region(0).is_ok_and(|r| r.first_block().is_none())
            {
                declared.insert(name, o);
            }
            op = o.next_in_block();
        }
        let dbody = defs.body();
        let mut op = dbody.first_operation();
        while let Some(o) = op {
            let name = func_name(&o).ok_or_else(|| {
                fail(format!(
                    "`{}` is not a func.func",
                    o.name().as_string_ref().as_str().unwrap_or("?")
                ))
            })?;
            let target = declared
                .get(&name)
                .ok_or_else(|| fail(format!("@{name} is defined but not declared")))?;
            let (to, from) = (target.region(0), o.region(0));
            let (Ok(to), Ok(from)) = (to, from) else {
                return Err(fail(format!("@{name} has no body region")));
            };
            // SAFETY: both regions belong to live operations of this context; the call moves
            // `from`'s blocks into `to`, which is empty, and leaves `from` empty.
            #[allow(unsafe_code)]
            unsafe {
                mlir_sys::mlirRegionTakeBody(to.to_raw(), from.to_raw());
            }
            op = o.next_in_block();
        }
        self.verify(module, what)
    }

    /// Translates a module in the LLVM dialect to LLVM IR text.
    pub fn to_llvm_ir(&self, module: &Module<'_>, what: &str) -> Result<String, Error> {
        self.diagnostics.borrow_mut().clear();
        let mut out = String::new();
        // SAFETY: the module is valid for the call; the callback only appends UTF-8 (lossy)
        // bytes to `out`, which outlives the call.
        #[allow(unsafe_code)]
        let ok = unsafe {
            let ctx = mlir_sys::LLVMContextCreate();
            let m = mlir_sys::mlirTranslateModuleToLLVMIR(module.as_operation().to_raw(), ctx);
            let ok = !m.is_null();
            if ok {
                let s = mlir_sys::LLVMPrintModuleToString(m);
                out = std::ffi::CStr::from_ptr(s).to_string_lossy().into_owned();
                mlir_sys::LLVMDisposeMessage(s);
                mlir_sys::LLVMDisposeModule(m);
            }
            mlir_sys::LLVMContextDispose(ctx);
            ok
        };
        if ok {
            Ok(out)
        } else {
            Err(Error::Mlir {
                what: what.to_string(),
                stage: "translate to LLVM IR".into(),
                message: self.take_diagnostics(),
            })
        }
    }
}

/// Whether a module's top level holds what [`crate::canonical`] rewrites: bufferization's
/// constant globals or serialized GPU binaries (looked up without printing the module).
fn needs_canonical(module: &Module<'_>) -> bool {
    use melior::ir::BlockLike;
    let body = module.body();
    let mut op = body.first_operation();
    while let Some(o) = op {
        let name = o.name();
        let name = name.as_string_ref();
        match name.as_str() {
            Ok("gpu.binary") => return true,
            Ok("memref.global" | "llvm.mlir.global") => {
                let constant = o
                    .attribute("sym_name")
                    .ok()
                    .and_then(|a| melior::ir::attribute::StringAttribute::try_from(a).ok())
                    .is_some_and(|s| s.value().starts_with(crate::canonical::CONSTANT_PREFIX));
                if constant {
                    return true;
                }
            }
            _ => {}
        }
        op = o.next_in_block();
    }
    false
}

/// Standard error redirected to a temporary file until [`StderrCapture::finish`], which
/// puts it back and returns what was written (MLIR's IR printing writes to file descriptor 2
/// directly).
struct StderrCapture {
    saved: rustix::fd::OwnedFd,
    file: std::fs::File,
}

impl StderrCapture {
    fn start() -> std::io::Result<StderrCapture> {
        use std::io::Write;
        std::io::stderr().flush()?;
        let file = tempfile::tempfile()?;
        let saved = rustix::io::dup(rustix::stdio::stderr())?;
        rustix::stdio::dup2_stderr(&file)?;
        Ok(StderrCapture { saved, file })
    }

    fn finish(mut self) -> String {
        use std::io::{Read, Seek};
        let _ = rustix::stdio::dup2_stderr(&self.saved);
        let mut text = String::new();
        if self.file.rewind().is_ok() {
            let mut bytes = Vec::new();
            let _ = self.file.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    }
}

/// Whether MLIR knows `name` as a pass (its argument, `convert-linalg-to-loops`, parses as a
/// pipeline on a module or a function) or it has the form of a pass's class name
/// (`ConvertLinalgToLoopsPass`, as the IR printing's headers show it).
pub fn is_mlir_pass(mlir: &Mlir, name: &str) -> bool {
    let class_like = name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric());
    if class_like {
        return true;
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return false;
    }
    ["builtin.module({})", "builtin.module(func.func({}))"]
        .iter()
        .any(|shape| {
            let pm = PassManager::new(&mlir.context);
            let text = shape.replace("{}", name);
            parse_pass_pipeline(pm.as_operation_pass_manager(), &text).is_ok()
        })
}

/// Parses `pipeline` (with or without its `builtin.module(...)` anchor) into `pm`.
fn parse_pipeline(pm: &PassManager<'_>, pipeline: &str, what: &str) -> Result<(), Error> {
    // The pipeline string is ours or a target's, so a bad one is a bug worth a clear error.
    let inner = pipeline
        .strip_prefix("builtin.module(")
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(pipeline);
    parse_pass_pipeline(
        pm.as_operation_pass_manager(),
        &format!("builtin.module({inner})"),
    )
    .map_err(|e| Error::Mlir {
        what: what.to_string(),
        stage: "pipeline".into(),
        message: format!("bad pipeline `{pipeline}`: {e}"),
    })
}

/// An MLIR string callback that appends to the `String` its user data points to.
#[allow(unsafe_code)]
unsafe extern "C" fn append_text(text: mlir_sys::MlirStringRef, data: *mut std::ffi::c_void) {
    // SAFETY: MLIR passes `length` bytes at `data`, and the user data is the `String` the
    // caller gave, alive for the call.
    unsafe {
        let bytes = std::slice::from_raw_parts(text.data as *const u8, text.length);
        (*(data as *mut String)).push_str(&String::from_utf8_lossy(bytes));
    }
}

/// The symbol name of a `func.func`, `None` for any other op.
pub(crate) fn func_name(op: &melior::ir::OperationRef<'_, '_>) -> Option<String> {
    let name = op.name();
    if name.as_string_ref().as_str() != Ok("func.func") {
        return None;
    }
    sym_name(op)
}

/// An op's `sym_name`, if it has one.
pub(crate) fn sym_name(op: &melior::ir::OperationRef<'_, '_>) -> Option<String> {
    let sym = op.attribute("sym_name").ok()?;
    melior::ir::attribute::StringAttribute::try_from(sym)
        .ok()
        .map(|s| s.value().to_string())
}
