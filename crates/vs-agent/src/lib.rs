//! vs-agent: launching an agent session confined — the provider's state
//! binds, the launcher that rewrites every provider argv through the
//! confinement's `wrap` (on the host or in a container alike, the backend
//! chosen by `vs_sandbox::select`), and the environment allow-list.

pub mod env;
pub mod error;
pub mod named_commands;
pub mod private_copy;
pub mod private_state;
pub mod session;
pub mod signals;

pub use env::{SessionEnv, session_env_allowlist};
pub use error::AgentError;
pub use private_copy::SessionDir;
pub use private_state::PrivateStateDir;
pub use session::{StateBinds, prepare_state_paths, provider_launch, session_command};
