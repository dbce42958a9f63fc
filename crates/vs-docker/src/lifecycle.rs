//! A run container's life: removing what a dead run left (containers and
//! mask directories), creating the masks, creating, attaching and starting
//! the container, and saying why one exited at start.

use std::collections::HashMap;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use vs_sandbox::error::SandboxError;

use crate::DockerError;
use crate::channel::{Output, Writer};
use crate::engine::{engine_err, is_not_found};
use crate::plan::{DockerPlan, MountRole, RUN_ID_LABEL, valid_run_id};

/// The attached stdin of the container's main process. While vibesys
/// holds it, the container runs; when vibesys exits or dies, the Engine
/// closes the container's stdin, the main process ends and the Engine
/// removes the container (`AutoRemove`).
pub(super) struct Lifeline {
    pub(super) input: Writer,
    pub(super) output: Output,
}

/// Every container (running or not) carrying `label` (`key` or `key=value`).
async fn labelled_containers(
    docker: &bollard::Docker,
    label: String,
) -> Result<Vec<bollard::models::ContainerSummary>, bollard::errors::Error> {
    let filters: HashMap<String, Vec<String>> = HashMap::from([("label".into(), vec![label])]);
    docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
}

pub(super) async fn remove_run_containers(
    docker: &bollard::Docker,
    run_id: &str,
) -> Result<(), SandboxError> {
    let list = labelled_containers(docker, format!("{RUN_ID_LABEL}={run_id}"))
        .await
        .map_err(|e| engine_err("list containers", e))?;
    for c in list {
        let Some(id) = c.id else { continue };
        tracing::warn!(container = %id, run_id, "removing a container left by a dead run with the same id");
        match docker
            .remove_container(
                &id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            // Already being removed (AutoRemove in progress).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => return Err(engine_err("remove container", e)),
        }
    }
    // The name may still be taken for a moment while AutoRemove finishes.
    Ok(())
}

/// Removes mask directories of runs that have no container any more (a
/// run killed with `SIGKILL` cannot remove its own). Only directories
/// older than a minute are considered, so a run that is starting right
/// now keeps its masks.
pub(super) async fn remove_orphan_masks(docker: &bollard::Docker, own: &Path) {
    let Some(base) = own.parent() else { return };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let Ok(list) = labelled_containers(docker, RUN_ID_LABEL.to_owned()).await else {
        return;
    };
    let live: Vec<String> = list
        .into_iter()
        .filter_map(|c| c.labels.and_then(|mut l| l.remove(RUN_ID_LABEL)))
        .collect();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let old = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if path != own && old && valid_run_id(&name) && !live.contains(&name) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Creates the mask directories and files: the base directory (mode
/// 0700, must be ours), the run's directory inside it, and one empty
/// entry per hidden path (0555 directories, 0444 files).
pub(super) fn prepare_masks(root: &Path, plan: &DockerPlan) -> Result<(), SandboxError> {
    let mask_err = |path: &Path, source: io::Error| -> SandboxError {
        DockerError::Mask {
            path: path.to_path_buf(),
            source,
        }
        .into()
    };
    let base = root.parent().unwrap_or(root);
    match std::fs::create_dir(base) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            std::fs::create_dir_all(base).map_err(|_| mask_err(base, e))?;
        }
    }
    let meta = std::fs::symlink_metadata(base).map_err(|e| mask_err(base, e))?;
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if !meta.is_dir() || meta.uid() != me {
        return Err(mask_err(
            base,
            io::Error::other("not a directory owned by the current user"),
        ));
    }
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| mask_err(base, e))?;
    if root.exists() {
        make_removable(root);
        std::fs::remove_dir_all(root).map_err(|e| mask_err(root, e))?;
    }
    std::fs::create_dir(root).map_err(|e| mask_err(root, e))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| mask_err(root, e))?;
    for m in &plan.mounts {
        match m.role {
            MountRole::MaskDir => {
                std::fs::create_dir(&m.source).map_err(|e| mask_err(&m.source, e))?;
                std::fs::set_permissions(&m.source, std::fs::Permissions::from_mode(0o555))
                    .map_err(|e| mask_err(&m.source, e))?;
            }
            MountRole::MaskFile => {
                std::fs::File::create(&m.source).map_err(|e| mask_err(&m.source, e))?;
                std::fs::set_permissions(&m.source, std::fs::Permissions::from_mode(0o444))
                    .map_err(|e| mask_err(&m.source, e))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn make_removable(root: &Path) {
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700));
}

/// The plan's device nodes as the Engine's `HostConfig.Devices`.
fn device_mappings(plan: &DockerPlan) -> Vec<bollard::models::DeviceMapping> {
    plan.devices
        .iter()
        .map(|d| bollard::models::DeviceMapping {
            path_on_host: Some(d.path_on_host.to_string_lossy().into_owned()),
            path_in_container: Some(d.path_in_container.to_string_lossy().into_owned()),
            cgroup_permissions: Some(d.cgroup_permissions.clone()),
        })
        .collect()
}

/// The plan's GPU requests as the Engine's `HostConfig.DeviceRequests`.
fn device_requests(plan: &DockerPlan) -> Vec<bollard::models::DeviceRequest> {
    plan.device_requests
        .iter()
        .map(|r| bollard::models::DeviceRequest {
            driver: Some(r.driver.clone()),
            count: Some(r.count),
            device_ids: (!r.device_ids.is_empty()).then(|| r.device_ids.clone()),
            capabilities: Some(r.capabilities.clone()),
            options: None,
        })
        .collect()
}

pub(super) async fn start_container(
    docker: &bollard::Docker,
    plan: &DockerPlan,
) -> Result<(String, Lifeline, ExitWatch), SandboxError> {
    let mounts = plan
        .mounts
        .iter()
        .map(|m| Mount {
            target: Some(m.target.to_string_lossy().into_owned()),
            source: Some(m.source.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect();
    let serving = plan.execute_via == super::plan::ExecuteVia::CommandServer;
    let host = HostConfig {
        // The server's replies go only to vibesys, never to a log file.
        log_config: serving.then(|| bollard::models::HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        mounts: Some(mounts),
        cap_drop: Some(plan.cap_drop.clone()),
        security_opt: Some(plan.security_opt.clone()),
        network_mode: Some(plan.network_mode.clone()),
        devices: Some(device_mappings(plan)),
        device_requests: Some(device_requests(plan)),
        pids_limit: Some(plan.pids_limit),
        memory: Some(plan.memory_bytes),
        memory_swap: Some(plan.memory_bytes),
        init: Some(plan.init),
        auto_remove: Some(true),
        privileged: Some(false),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(plan.image.clone()),
        user: Some(plan.user.clone()),
        cmd: Some(plan.lifeline.clone()),
        entrypoint: Some(Vec::new()),
        working_dir: Some(plan.workdir.to_string_lossy().into_owned()),
        labels: Some(plan.labels.clone().into_iter().collect()),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(serving),
        attach_stderr: Some(serving),
        tty: Some(false),
        env: Some(plan.container_env.clone()),
        host_config: Some(host),
        ..Default::default()
    };
    // A container of a dead run may still be going away under AutoRemove.
    let mut tries = 0;
    let created = loop {
        match docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::new()
                        .name(&plan.name)
                        .build(),
                ),
                body.clone(),
            )
            .await
        {
            Ok(c) => break c,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(engine_err("create container", e)),
        }
    };
    let id = created.id;
    let attached = docker
        .attach_container(
            &id,
            Some(
                AttachContainerOptionsBuilder::new()
                    .stream(true)
                    .stdin(true)
                    // Also without the command server: what the main
                    // process prints before it exits at start is read
                    // back for the error (see `container_ended`).
                    .stdout(true)
                    .stderr(true)
                    .build(),
            ),
        )
        .await;
    let attached = match attached {
        Ok(a) => a,
        Err(e) => {
            let _ = docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptionsBuilder::new().force(true).build()),
                )
                .await;
            return Err(engine_err("attach container", e));
        }
    };
    // The exit code of a main process that ends at once is gone with the
    // container (AutoRemove): wait for it from before the start.
    let exit = {
        let docker = docker.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let mut wait = docker.wait_container(
                &id,
                Some(
                    WaitContainerOptionsBuilder::new()
                        .condition("removed")
                        .build(),
                ),
            );
            match wait.next().await {
                Some(Ok(r)) => Some(r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    Some(code)
                }
                _ => None,
            }
        })
    };
    tokio::task::yield_now().await;
    if let Err(e) = docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
    {
        exit.abort();
        let _ = docker
            .remove_container(
                &id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            )
            .await;
        return Err(engine_err("start container", e));
    }
    Ok((
        id,
        Lifeline {
            input: attached.input,
            output: attached.output,
        },
        exit,
    ))
}

/// The exit code of a run container's main process, once it has exited
/// and the Engine removed it (`None` when the Engine did not say).
pub(super) type ExitWatch = tokio::task::JoinHandle<Option<i64>>;

/// How long the diagnosis of a container that exited at start waits for
/// its exit code and output.
const EXIT_DIAGNOSIS_WAIT: Duration = Duration::from_secs(5);

/// Most bytes of a dead container's output quoted in the error.
const EXIT_OUTPUT_KEEP: usize = 4096;

/// `text` safe to print on the operator's terminal: what a container's
/// processes write to its main process's output is hostile, so every
/// control character but newline and tab is escaped (no terminal escape
/// sequence survives).
fn printable(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The error for a container whose main process ended (at start: a broken
/// image, a missing shell): its exit code and the end of what it printed.
pub(super) async fn container_ended(
    container: &str,
    phase: crate::EndPhase,
    exit: ExitWatch,
    output: Option<Output>,
) -> DockerError {
    let printed = async {
        let mut text = Vec::new();
        if let Some(mut output) = output {
            while let Some(Ok(chunk)) = output.next().await {
                text.extend_from_slice(&chunk.into_bytes());
                if text.len() > 64 * EXIT_OUTPUT_KEEP {
                    break;
                }
            }
        }
        text
    };
    let (code, printed) = tokio::join!(
        tokio::time::timeout(EXIT_DIAGNOSIS_WAIT, exit),
        tokio::time::timeout(EXIT_DIAGNOSIS_WAIT, printed)
    );
    let exit_code = match code {
        Ok(Ok(code)) => code,
        _ => None,
    };
    let printed = printed.unwrap_or_default();
    let tail = &printed[printed.len().saturating_sub(EXIT_OUTPUT_KEEP)..];
    DockerError::ContainerEnded {
        container: container.to_owned(),
        phase,
        exit_code,
        output: printable(&String::from_utf8_lossy(tail)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceAccess, DockerOptions, GpuSelection};
    use vs_sandbox::{ProjectPathPolicy, Workspace};

    #[test]
    fn a_dead_containers_output_is_printable() {
        assert_eq!(
            printable(" no shell\n\x1b[2J\x07ok\r\t!"),
            "no shell\n\\u{1b}[2J\\u{7}ok\\r\t!"
        );
    }

    /// The exact Engine fields a plan's devices become.
    #[test]
    fn devices_lower_to_the_engine_host_config() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let pin = crate::plan::tests::pin();
        let mut opts = DockerOptions::new(pin, "r1", "/usr/bin/vibesys");
        let plan = DockerPlan::new(&policy, &opts);
        assert!(device_mappings(&plan).is_empty() && device_requests(&plan).is_empty());
        opts.devices = DeviceAccess {
            nvidia: Some(GpuSelection::Ids(vec!["0".into(), "2".into()])),
            nodes: vec!["/dev/kfd".into()],
        };
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(
            device_mappings(&plan),
            [bollard::models::DeviceMapping {
                path_on_host: Some("/dev/kfd".into()),
                path_in_container: Some("/dev/kfd".into()),
                cgroup_permissions: Some("rw".into()),
            }]
        );
        assert_eq!(
            device_requests(&plan),
            [bollard::models::DeviceRequest {
                driver: Some("nvidia".into()),
                count: Some(0),
                device_ids: Some(vec!["0".into(), "2".into()]),
                capabilities: Some(vec![vec!["gpu".into()]]),
                options: None,
            }]
        );
        opts.devices.nvidia = Some(GpuSelection::All);
        let all = device_requests(&DockerPlan::new(&policy, &opts));
        assert_eq!(all[0].count, Some(-1));
        assert_eq!(all[0].device_ids, None);
    }
}
