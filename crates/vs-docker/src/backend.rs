//! The Docker backend behind vs-sandbox's container seam: [`DockerOptions`]
//! is the [`ContainerBackend`] a caller hands to `vs_sandbox::select` (in
//! `ConfineRequest::docker`), [`PlannedContainer`] its plan (lowered in
//! [`crate::plan`]), and
//! [`DockerSandbox`] the started container.

use std::ffi::OsString;

use vs_sandbox::egress::EgressDoor;
use vs_sandbox::explain::{ExplainError, PlanDescription};
use vs_sandbox::{
    ContainerBackend, ContainerPlan, ContainerSandbox, EnforcementReport, ResolvedPolicy,
    SandboxError,
};

use crate::plan::{DockerOptions, PlannedContainer};
use crate::sandbox::DockerSandbox;

impl ContainerBackend for DockerOptions {
    fn plan(
        self: Box<Self>,
        policy: &ResolvedPolicy,
        egress: Option<EgressDoor>,
    ) -> Result<Box<dyn ContainerPlan>, SandboxError> {
        let mut options = *self;
        if let Some(door) = egress {
            if options.command_server.is_none() {
                return Err(SandboxError::Unsupported {
                    backend: "docker",
                    reason: "an egress allow-list needs a static vibesys in the container as its forwarder (the command server): set VIBESYS_COMMAND_SERVER to one (scripts/build-static.sh builds it)".into(),
                });
            }
            options.egress = Some(door);
        }
        Ok(Box::new(PlannedContainer::new(policy, options)))
    }
}

impl ContainerPlan for PlannedContainer {
    fn report(&self) -> &EnforcementReport {
        &self.report
    }

    fn describe(&self) -> Result<PlanDescription, ExplainError> {
        PlannedContainer::describe(self)
    }

    fn start(
        self: Box<Self>,
        policy: &ResolvedPolicy,
    ) -> Result<Box<dyn ContainerSandbox>, SandboxError> {
        Ok(Box::new(DockerSandbox::start_planned(policy, *self)?))
    }
}

impl ContainerSandbox for DockerSandbox {
    fn run(&self, command: &[OsString]) -> Result<i32, SandboxError> {
        let workdir = self.plan().workdir.clone();
        self.attach(command, &workdir)
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `select`'s plan for Docker is this crate's, reachable for printing;
    /// an egress door without the command server (its forwarder) is
    /// refused, never lowered as an open network.
    #[test]
    fn the_plan_is_reachable_and_an_egress_door_needs_the_server() {
        let dir = tempfile::tempdir().unwrap();
        let ws = vs_sandbox::Workspace::open(dir.path()).unwrap();
        let policy = vs_sandbox::ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let pin = crate::plan::tests::pin();
        let mut options = DockerOptions::new(pin, "run-1", "/bin/true");
        options.network = true;
        let plan = Box::new(options.clone()).plan(&policy, None).unwrap();
        let planned = PlannedContainer::of(plan.as_ref()).unwrap();
        assert_eq!(planned.report.backend, "docker");
        assert_eq!(plan.report(), &planned.report);
        let door = EgressDoor::handover(
            vs_sandbox::egress::AllowList::parse(["pypi.org"]).unwrap(),
            "/run/x.sock",
        );
        let err = Box::new(options).plan(&policy, Some(door)).unwrap_err();
        assert!(err.to_string().contains("VIBESYS_COMMAND_SERVER"), "{err}");
    }
}
