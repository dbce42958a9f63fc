//! `HostJobConfinement`: how an agent job is confined on a compute node.
//!
//! It is the `HostSandbox` plan of the run's `ProjectPathPolicy` (the same
//! lowering, nothing re-implemented) plus what a batch job needs: the
//! plan's private tmpfs `/tmp` named by `TMPDIR`, `TMP` and `TEMP`, a
//! fresh empty `HOME` in it ([`JOB_HOME`], outside every workspace), the
//! device nodes of the GPUs Slurm allocated to the job, and a minimal
//! environment: nothing of the job step's (Slurm's variables, the
//! operator's `HOME`) but `PATH`, a fixed locale and the request's
//! (filtered) variables, set inside the sandbox only.

use std::path::PathBuf;

use vs_sandbox::{BwrapPlan, HostSandbox};

use super::BrokerError;

/// The variables that point scratch tools at the private `/tmp`.
pub const TMP_VARS: [&str; 3] = ["TMPDIR", "TMP", "TEMP"];

/// What the job step's environment passes into the sandbox besides
/// `PATH`: the accelerators Slurm allocated.
pub const STEP_VARS: [&str; 5] = [
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK",
];

/// Every job's `HOME`: a fresh, empty directory in its private `/tmp`.
pub const JOB_HOME: &str = "/tmp/home";

/// The bwrap plan of one agent job.
#[derive(Debug, Clone)]
pub struct HostJobConfinement {
    plan: BwrapPlan,
}

impl HostJobConfinement {
    /// Extends the sandbox's plan; refuses a plan without a private `/tmp`.
    pub fn new(
        sandbox: &HostSandbox,
        devices: &[PathBuf],
        env: &[(String, String)],
    ) -> Result<Self, BrokerError> {
        let mut plan = sandbox.plan().clone();
        let private_tmp = plan
            .args
            .windows(2)
            .any(|w| w[0] == "--tmpfs" && w[1] == "/tmp");
        if !private_tmp {
            return Err(BrokerError::Confinement {
                reason: "the bubblewrap plan has no private tmpfs /tmp".into(),
            });
        }
        for dev in devices {
            let d = dev.display().to_string();
            plan.args.extend(["--dev-bind".to_owned(), d.clone(), d]);
        }
        // Nothing of the job step's environment but PATH and the
        // accelerators Slurm allocated.
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        plan.args.push("--clearenv".to_owned());
        for (k, v) in [("PATH", path.as_str()), ("LANG", "C.UTF-8")] {
            plan.args
                .extend(["--setenv".to_owned(), k.to_owned(), v.to_owned()]);
        }
        for k in STEP_VARS {
            if let Ok(v) = std::env::var(k) {
                plan.args.extend(["--setenv".to_owned(), k.to_owned(), v]);
            }
        }
        for (k, v) in env {
            if !super::env_allowed(k) {
                continue;
            }
            plan.args
                .extend(["--setenv".to_owned(), k.clone(), v.clone()]);
        }
        for var in TMP_VARS {
            plan.args
                .extend(["--setenv".to_owned(), var.to_owned(), "/tmp".to_owned()]);
        }
        plan.args.extend([
            "--perms".to_owned(),
            "0700".to_owned(),
            "--dir".to_owned(),
            JOB_HOME.to_owned(),
            "--setenv".to_owned(),
            "HOME".to_owned(),
            JOB_HOME.to_owned(),
        ]);
        Ok(Self { plan })
    }

    /// The exact plan run on the compute node.
    pub fn plan(&self) -> &BwrapPlan {
        &self.plan
    }
}

/// The device nodes of the GPUs Slurm allocated: the indices in
/// `SLURM_STEP_GPUS` (or `SLURM_JOB_GPUS`) put into `pattern`.
pub fn allocated_gpu_devices(
    pattern: &str,
    step_gpus: Option<&str>,
) -> Result<Vec<PathBuf>, BrokerError> {
    let Some(list) = step_gpus.filter(|s| !s.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in list.split(',') {
        let index: u32 = item.trim().parse().map_err(|_| BrokerError::Confinement {
            reason: format!("cannot read the GPU index {item:?} Slurm allocated"),
        })?;
        out.push(PathBuf::from(pattern.replacen("{}", &index.to_string(), 1)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_the_host_sandbox_plan_plus_devices_a_minimal_env_and_a_fresh_home() {
        let dir = tempfile::tempdir().unwrap();
        let ws = vs_sandbox::Workspace::open(dir.path()).unwrap();
        let policy = vs_sandbox::ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let options = vs_sandbox::BwrapOptions {
            program: "/bin/sh".into(),
            network: true,
            egress: None,
            chdir: None,
            helper: "/bin/sh".into(),
            writable: Vec::new(),
            private_files: Vec::new(),
            max_processes: 4096,
            proc_read_only: vec!["/proc/sys".into()],
            devices: Vec::new(),
        };
        let sandbox =
            HostSandbox::new(&policy, &vs_sandbox::HostResources::system(), &options).unwrap();
        let job = HostJobConfinement::new(
            &sandbox,
            &[PathBuf::from("/dev/nvidia1")],
            &[
                ("GREETING".into(), "hi".into()),
                ("SLURM_JOB_ID".into(), "1".into()),
                ("TMPDIR".into(), "/elsewhere".into()),
            ],
        )
        .unwrap();
        let base = &sandbox.plan().args;
        let args = &job.plan().args;
        assert_eq!(
            &args[..base.len()],
            &base[..],
            "the HostSandbox plan, unchanged"
        );
        let tail = args[base.len()..].join(" ");
        assert!(
            tail.starts_with("--dev-bind /dev/nvidia1 /dev/nvidia1 --clearenv --setenv PATH "),
            "{tail}"
        );
        assert!(
            tail.contains(" --setenv LANG C.UTF-8 ") && tail.contains(" --setenv GREETING hi "),
            "{tail}"
        );
        assert!(!tail.contains("SLURM_JOB_ID") && !tail.contains("/elsewhere"));
        assert!(
            tail.ends_with(
                "--setenv TMPDIR /tmp --setenv TMP /tmp --setenv TEMP /tmp \
                 --perms 0700 --dir /tmp/home --setenv HOME /tmp/home"
            ),
            "{tail}"
        );
        assert_eq!(job.plan().fds, sandbox.plan().fds);
    }

    #[test]
    fn devices_follow_the_allocation() {
        assert_eq!(
            allocated_gpu_devices("/dev/nvidia{}", Some("1,3")).unwrap(),
            [PathBuf::from("/dev/nvidia1"), PathBuf::from("/dev/nvidia3")]
        );
        assert!(
            allocated_gpu_devices("/dev/nvidia{}", None)
                .unwrap()
                .is_empty()
        );
        assert!(allocated_gpu_devices("/dev/nvidia{}", Some("x")).is_err());
    }
}
