//! Diagnostics go to stderr through `tracing`; `AGENTPRISM_LOG` (an env-filter directive,
//! default `warn`) chooses how much. Stdout stays reserved for results and protocol.

/// Installs the stderr subscriber once; later calls do nothing.
pub fn init_stderr() {
    let filter = tracing_subscriber::EnvFilter::try_from_env(crate::env::LOG)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
