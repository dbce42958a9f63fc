//! Whether this build can run something in a run environment (the
//! environments' descriptions and the Slurm probe report it).

use serde::Serialize;

/// Whether this build can run something in an environment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Availability {
    /// Everything described works.
    Available,
    /// Nothing runs in it in this build.
    NotAvailable {
        /// What is missing.
        reason: String,
    },
}
