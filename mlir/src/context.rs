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
    /// takes it) on a module in-process.
    pub fn run_pipeline(
        &self,
        module: &mut Module<'_>,
        pipeline: &str,
        options: &PipelineOptions,
        what: &str,
    ) -> Result<(), Error> {
        self.diagnostics.borrow_mut().clear();
        let pm = PassManager::new(&self.context);
        pm.enable_verifier(true);
        if options.print_ir_after_all || options.print_ir_before_all {
            pm.enable_ir_printing(&melior::pass::PassIrPrintingOptions {
                before_all: options.print_ir_before_all,
                after_all: options.print_ir_after_all,
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
        // The pipeline string is ours (targets), so a bad one is a bug worth a clear error.
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
        })?;
        pm.run(module).map_err(|_| Error::Mlir {
            what: what.to_string(),
            stage: "pipeline".into(),
            message: self.take_diagnostics(),
        })
    }

    /// Prints a module as MLIR text (generic form off, debug info off).
    pub fn print(module: &Module<'_>) -> String {
        module.as_operation().to_string()
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
