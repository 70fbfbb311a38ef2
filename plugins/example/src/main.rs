//! `tessera-example`: tessera with the example plugin's target and pass registered.

use std::process::ExitCode;

fn main() -> ExitCode {
    tessera::driver::Driver::new("tessera-example")
        .pass(tessera_plugin_example::PIN_MATMULS)
        .target(tessera_plugin_example::npu_target())
        .main()
}
