//! The seam for the container backend: vs-docker (above this crate, with
//! the Engine client) implements these traits; the caller hands its
//! options in through [`crate::ConfineRequest::docker`], and [`crate::select`]
//! stays the one place that turns a mode into a backend.
//!
//! Flow: [`ContainerBackend::plan`] lowers the policy into a
//! [`ContainerPlan`] (pure: `policy show` prints it), whose
//! [`ContainerPlan::start`] starts the [`ContainerSandbox`].

use std::any::Any;
use std::ffi::OsString;
use std::fmt;

use crate::confinement::{Confinement, EnforcementReport};
use crate::egress::EgressDoor;
use crate::error::SandboxError;
use crate::policy::ResolvedPolicy;

/// A container backend's options (vs-docker's `DockerOptions`: the pinned
/// image, the run id, mounts), handed to [`crate::select`] by the caller.
pub trait ContainerBackend: fmt::Debug + Send + Sync {
    /// Lowers `policy` into the container's plan, starting nothing.
    /// `egress` is the allow-list's door when the network is kept through
    /// it (the backend refuses it if it cannot reach it).
    fn plan(
        self: Box<Self>,
        policy: &ResolvedPolicy,
        egress: Option<EgressDoor>,
    ) -> Result<Box<dyn ContainerPlan>, SandboxError>;
}

/// A container's plan: what it would apply and enforce. The concrete plan
/// (vs-docker's `PlannedContainer`) is reached through [`Any`].
pub trait ContainerPlan: fmt::Debug + Any + Send + Sync {
    /// What the container enforces.
    fn report(&self) -> &EnforcementReport;

    /// The plan as `vibesys policy show` prints it (text and JSON).
    fn describe(
        &self,
    ) -> Result<crate::plan_description::PlanDescription, crate::plan_description::ExplainError>;

    /// Starts the container this plan describes for `policy` (the one it
    /// was lowered from).
    fn start(
        self: Box<Self>,
        policy: &ResolvedPolicy,
    ) -> Result<Box<dyn ContainerSandbox>, SandboxError>;
}

/// A started container: a [`Confinement`] whose `wrap` attaches agent
/// turns to it; dropping it removes the container.
pub trait ContainerSandbox: Confinement + fmt::Debug + Send + Sync {
    /// Runs `command` in the container, attached, in its working
    /// directory, and waits; returns its exit code.
    fn run(&self, command: &[OsString]) -> Result<i32, SandboxError>;

    /// The sandbox itself, for a caller that knows its concrete type
    /// (vs-docker's `DockerSandbox`, whose `execute` runs framework
    /// commands through the command server).
    fn into_any(self: Box<Self>) -> Box<dyn Any + Send>;
}
