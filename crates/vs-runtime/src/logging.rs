//! vibesys's log: to stderr, at `warn` unless `VIBESYS_LOG` says
//! otherwise; set up once per process by the binary and the helpers.

/// Log to stderr; `VIBESYS_LOG` (an `EnvFilter` directive) sets the level.
/// Without it, a plain `warn` level: no directive parsing on the launch
/// path of every confined command.
pub fn init_stderr() {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time();
    let _ = match std::env::var_os("VIBESYS_LOG") {
        Some(_) => builder
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("VIBESYS_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .try_init()
            .map_err(|e| e.to_string()),
        // The TLS verifier logs its refusal as an error of its own; the
        // registry error that follows names it (registry push and pull).
        None => {
            use tracing_subscriber::layer::SubscriberExt;
            let quiet = tracing_subscriber::filter::Targets::new()
                .with_default(tracing::Level::WARN)
                .with_target(
                    "rustls_platform_verifier",
                    tracing_subscriber::filter::LevelFilter::OFF,
                );
            tracing_subscriber::util::SubscriberInitExt::try_init(
                builder
                    .with_max_level(tracing::Level::WARN)
                    .finish()
                    .with(quiet),
            )
            .map_err(|e| e.to_string())
        }
    };
}
