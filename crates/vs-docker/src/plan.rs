//! The policy lowered to a Docker container configuration: pure data that
//! `vibesys policy show --backend docker` prints and [`crate::DockerSandbox`]
//! hands to the Engine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vs_pin::{Digest, LockedImage, Pin};

use vs_sandbox::confinement::EnforcementReport;
use vs_sandbox::policy::{Access, PathKind, ResolvedPolicy, metadata_paths};

use crate::env::EnvAllowList;
use crate::wire::{SERVER_PATH, SERVER_SUBCOMMAND};

/// The label every vibesys container carries; its value is the run id.
pub const RUN_ID_LABEL: &str = "dev.vibesys.run-id";

/// The label naming the pinned image a container was started from.
pub const IMAGE_LABEL: &str = "dev.vibesys.image";

/// An image as pinned in `images/images.lock`: the Engine must hold an
/// image whose ID is one of these digests and whose layers are these
/// ([`vs_pin::Pin::check`] decides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImagePin {
    /// The image name in the lock (`vibesys-editor`).
    pub name: String,
    /// The tag in the lock, used only to name what the Engine holds when
    /// the pinned ID is missing.
    pub tag: String,
    /// The config digest (the image ID with Docker's classic store).
    pub config_digest: Digest,
    /// The manifest digest (the image ID with the containerd store).
    pub manifest_digest: Option<Digest>,
    /// The layer diff_ids, bottom first (`RootFS.Layers`).
    pub diff_ids: Vec<Digest>,
}

impl ImagePin {
    /// The pin of the lock entry `image` names.
    pub fn from_locked(image: &str, locked: &LockedImage) -> Self {
        Self {
            name: image.to_owned(),
            tag: locked.tag.clone(),
            config_digest: locked.config_digest.clone(),
            manifest_digest: locked.manifest_digest.clone(),
            diff_ids: locked.diff_ids.clone(),
        }
    }

    /// The digests a found image is checked against.
    pub fn pin(&self) -> Pin<'_> {
        Pin {
            image: &self.name,
            config_digest: &self.config_digest,
            manifest_digest: self.manifest_digest.as_ref(),
            diff_ids: &self.diff_ids,
        }
    }
}

/// Options of the Docker backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DockerOptions {
    /// The pinned image.
    pub image: ImagePin,
    /// The run id: containers are labelled with it, and a container left
    /// by a dead run with the same id is removed on start.
    pub run_id: String,
    /// Keep a network (the Engine's default bridge); otherwise `none`.
    pub network: bool,
    /// `uid:gid` the container's processes run as (the host user's).
    pub user: String,
    /// Maximum number of processes in the container.
    pub pids_limit: i64,
    /// Memory limit in bytes (swap included).
    pub memory_bytes: i64,
    /// Environment variables passed into the container, by name only.
    pub env: EnvAllowList,
    /// Where the empty masks of hidden paths are created (a private,
    /// operator-owned directory; see [`default_mask_root`]).
    pub mask_root: PathBuf,
    /// The executable `wrap` launches on the host (`vibesys`), which
    /// attaches to the container through the Engine API.
    pub helper: PathBuf,
    /// The directory commands start in (inside the workspace), or the
    /// workspace root when `None`.
    pub chdir: Option<PathBuf>,
    /// A static vibesys executable to run as the container's main process,
    /// the command server that `execute` talks to over the attach
    /// connection (mounted read-only at [`crate::wire::SERVER_PATH`]).
    /// `None`: `execute` goes through the Engine's exec API (slower: one
    /// exec create, start and inspect per command).
    pub command_server: Option<PathBuf>,
    /// Operator-owned host paths mounted beside the policy's (the Slurm
    /// broker's agent socket, a private copy of a provider's file): never a
    /// path of the workspace, each verified in the started container.
    pub extra_mounts: Vec<ExtraMount>,
    /// Egress by allow-list (with `network`): network `none`, the proxy's
    /// socket mounted in and the static vibesys (the command server's)
    /// as a forwarder in front of the server on the container's loopback.
    pub egress: Option<vs_sandbox::egress::EgressDoor>,
    /// Host devices handed to the container (an accelerator's; none by
    /// default).
    pub devices: DeviceAccess,
}

/// Host devices a container receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceAccess {
    /// NVIDIA GPUs, through the Engine's device requests (driver
    /// `nvidia`, capability `gpu`); `None`: no GPU.
    pub nvidia: Option<GpuSelection>,
    /// Device nodes passed in at the same path, read and write (no
    /// `mknod`), each checked by [`vs_sandbox::config::check_device_node`] when
    /// the container starts.
    pub nodes: Vec<PathBuf>,
}

/// Which NVIDIA GPUs a device request asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSelection {
    /// Every GPU of the host (`--gpus all`).
    All,
    /// These GPUs, by index or UUID (`CUDA_VISIBLE_DEVICES`).
    Ids(Vec<String>),
}

/// A device node of the container (`HostConfig.Devices`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedDevice {
    /// The node on the host.
    pub path_on_host: PathBuf,
    /// The node in the container (the same path).
    pub path_in_container: PathBuf,
    /// The device cgroup permissions (`rw`: no `mknod`).
    pub cgroup_permissions: String,
}

/// A device request of the container (`HostConfig.DeviceRequests`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedDeviceRequest {
    /// The driver (`nvidia`).
    pub driver: String,
    /// `-1` for every device, `0` when `device_ids` lists them.
    pub count: i64,
    /// The devices asked for by id.
    pub device_ids: Vec<String>,
    /// The capabilities asked for (`[["gpu"]]`).
    pub capabilities: Vec<Vec<String>>,
}

impl DeviceAccess {
    /// The device nodes of the container.
    pub fn planned_devices(&self) -> Vec<PlannedDevice> {
        self.nodes
            .iter()
            .map(|n| PlannedDevice {
                path_on_host: n.clone(),
                path_in_container: n.clone(),
                cgroup_permissions: "rw".to_owned(),
            })
            .collect()
    }

    /// The device requests of the container.
    pub fn planned_requests(&self) -> Vec<PlannedDeviceRequest> {
        let Some(gpus) = &self.nvidia else {
            return Vec::new();
        };
        let (count, device_ids) = match gpus {
            GpuSelection::All => (-1, Vec::new()),
            GpuSelection::Ids(ids) => (0, ids.clone()),
        };
        vec![PlannedDeviceRequest {
            driver: "nvidia".to_owned(),
            count,
            device_ids,
            capabilities: vec![vec!["gpu".to_owned()]],
        }]
    }

    /// True when no device is handed in.
    pub fn is_empty(&self) -> bool {
        self.nvidia.is_none() && self.nodes.is_empty()
    }
}

/// An operator-owned host path mounted into the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtraMount {
    /// The host path (absolute, operator-owned).
    pub source: PathBuf,
    /// The path in the container (absolute).
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

impl DockerOptions {
    /// Options with the defaults: no network, the current user's uid:gid,
    /// 4096 processes, 8 GiB of memory, the default environment allow-list
    /// and masks below [`default_mask_root`].
    pub fn new(image: ImagePin, run_id: impl Into<String>, helper: impl Into<PathBuf>) -> Self {
        let run_id = run_id.into();
        Self {
            image,
            network: false,
            user: current_user(),
            pids_limit: 4096,
            memory_bytes: 8 << 30,
            env: EnvAllowList::default(),
            mask_root: default_mask_root(&run_id),
            run_id,
            helper: helper.into(),
            chdir: None,
            command_server: None,
            extra_mounts: Vec::new(),
            egress: None,
            devices: DeviceAccess::default(),
        }
    }
}

/// The current process's `uid:gid`.
pub fn current_user() -> String {
    use std::os::unix::fs::MetadataExt;
    // `/proc/self` is owned by the process's effective uid and gid.
    match std::fs::metadata("/proc/self") {
        Ok(m) => format!("{}:{}", m.uid(), m.gid()),
        Err(_) => "65534:65534".to_owned(),
    }
}

/// `$XDG_RUNTIME_DIR/vibesys-docker/<run id>` when `XDG_RUNTIME_DIR` is
/// set, else `$TMPDIR/vibesys-docker-<uid>/<run id>`. The parent is created
/// with mode 0700 and must be owned by the current user.
pub fn default_mask_root(run_id: &str) -> PathBuf {
    let base = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("vibesys-docker"),
        _ => {
            let uid = current_user();
            let uid = uid.split(':').next().unwrap_or("0").to_owned();
            std::env::temp_dir().join(format!("vibesys-docker-{uid}"))
        }
    };
    base.join(run_id)
}

/// What a mount is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MountRole {
    /// The workspace, read-write, at its host path.
    Workspace,
    /// A version-control metadata directory bound onto itself, so it
    /// cannot be renamed away.
    Metadata,
    /// A directory above a protected path bound onto itself, so renaming
    /// it cannot move the protected path away.
    Ancestor,
    /// A read-only policy path re-mounted read-only.
    ReadOnly,
    /// An empty read-only directory over a hidden directory.
    MaskDir,
    /// An empty read-only file over a hidden file.
    MaskFile,
    /// The static vibesys that serves `execute`, read-only.
    CommandServer,
    /// An operator-owned path of [`DockerOptions::extra_mounts`].
    Extra,
}

/// One bind mount of the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedMount {
    /// Why it is there.
    pub role: MountRole,
    /// The host path.
    pub source: PathBuf,
    /// The path in the container.
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// The container configuration for a policy. Pure data: nothing here
/// talks to the Engine or touches the file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DockerPlan {
    /// The image, referred to by ID (the pinned config digest).
    pub image: String,
    /// The container name (`vibesys-<run id>`).
    pub name: String,
    /// Labels of the container.
    pub labels: BTreeMap<String, String>,
    /// `uid:gid` of every process in the container.
    pub user: String,
    /// Bind mounts, parents first.
    pub mounts: Vec<PlannedMount>,
    /// Capabilities dropped.
    pub cap_drop: Vec<String>,
    /// `--security-opt` values.
    pub security_opt: Vec<String>,
    /// `none` or `bridge`.
    pub network_mode: String,
    /// Host device nodes passed in (`HostConfig.Devices`).
    pub devices: Vec<PlannedDevice>,
    /// Device requests (`HostConfig.DeviceRequests`: NVIDIA GPUs).
    pub device_requests: Vec<PlannedDeviceRequest>,
    /// Maximum number of processes.
    pub pids_limit: i64,
    /// Memory limit in bytes (swap included).
    pub memory_bytes: i64,
    /// `docker-init` is the container's pid 1 (reaps orphans).
    pub init: bool,
    /// The container's main process: it waits on stdin, which vibesys
    /// holds open; when vibesys goes away the container stops and the
    /// Engine removes it (`AutoRemove`). With a command server it is the
    /// server, which also reads its requests from that stdin.
    pub lifeline: Vec<String>,
    /// How `execute` reaches the container.
    pub execute_via: ExecuteVia,
    /// Names of the variables passed to each command (values are read at
    /// the time of the command and never stored in the plan).
    pub env_names: Vec<String>,
    /// Where commands start.
    pub workdir: PathBuf,
    /// `NAME=VALUE` of the container itself, inherited by every command
    /// (the proxy variables of an allow-list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_env: Vec<String>,
}

/// How `DockerSandbox::execute` reaches a container (`command-server` or
/// `engine-exec` in a plan's JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecuteVia {
    /// The static vibesys serving commands as the container's main
    /// process, over its stdin and stdout.
    CommandServer,
    /// An Engine exec per command (no static vibesys was given).
    EngineExec,
}

impl ExecuteVia {
    /// The name (`command-server`, `engine-exec`).
    pub fn name(self) -> &'static str {
        match self {
            Self::CommandServer => "command-server",
            Self::EngineExec => "engine-exec",
        }
    }
}

impl std::fmt::Display for ExecuteVia {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The container's main process. It needs only a POSIX shell in the image.
pub const LIFELINE: [&str; 3] = ["/bin/sh", "-c", "read -r _; exit 0"];

impl DockerPlan {
    /// Lowers a resolved policy into a container configuration.
    pub fn new(policy: &ResolvedPolicy, options: &DockerOptions) -> Self {
        let ws = policy.workspace().root().to_path_buf();
        let mut mounts = vec![PlannedMount {
            role: MountRole::Workspace,
            source: ws.clone(),
            target: ws.clone(),
            read_only: false,
        }];
        for meta in metadata_paths(policy.workspace()) {
            // A policy entry (`.git` read-only by default) is a mount
            // point of its own.
            if policy.entries().iter().any(|e| e.host == meta) {
                continue;
            }
            mounts.push(PlannedMount {
                role: MountRole::Metadata,
                source: meta.clone(),
                target: meta,
                read_only: false,
            });
        }
        let metadata: Vec<PathBuf> = mounts.iter().map(|m| m.target.clone()).collect();
        for dir in policy.ancestors() {
            if metadata.contains(&dir) {
                continue;
            }
            mounts.push(PlannedMount {
                role: MountRole::Ancestor,
                source: dir.clone(),
                target: dir,
                read_only: false,
            });
        }
        for (i, entry) in policy.entries().iter().enumerate() {
            let (role, source) = match (entry.access, entry.kind) {
                (Access::ReadOnly, _) => (MountRole::ReadOnly, entry.host.clone()),
                (Access::Hidden, PathKind::Directory) => (
                    MountRole::MaskDir,
                    options.mask_root.join(format!("mask-{i}.d")),
                ),
                (Access::Hidden, PathKind::File) => (
                    MountRole::MaskFile,
                    options.mask_root.join(format!("mask-{i}.f")),
                ),
            };
            mounts.push(PlannedMount {
                role,
                source,
                target: entry.host.clone(),
                read_only: true,
            });
        }
        if let Some(server) = &options.command_server {
            mounts.push(PlannedMount {
                role: MountRole::CommandServer,
                source: server.clone(),
                target: PathBuf::from(SERVER_PATH),
                read_only: true,
            });
        }
        let egress = options
            .egress
            .as_ref()
            .filter(|_| options.network && options.command_server.is_some());
        if let Some(socket) = egress.and_then(|d| d.socket()) {
            mounts.push(PlannedMount {
                role: MountRole::Extra,
                source: socket.to_path_buf(),
                target: PathBuf::from(vs_sandbox::egress::INSIDE_SOCKET),
                read_only: false,
            });
        }
        for extra in &options.extra_mounts {
            if !extra.source.is_absolute() || !extra.target.is_absolute() {
                continue;
            }
            mounts.push(PlannedMount {
                role: MountRole::Extra,
                source: extra.source.clone(),
                target: extra.target.clone(),
                read_only: extra.read_only,
            });
        }
        let workdir = options
            .chdir
            .as_deref()
            .filter(|c| c.starts_with(&ws))
            .unwrap_or(&ws)
            .to_path_buf();
        Self {
            image: options.image.config_digest.to_string(),
            name: container_name(&options.run_id),
            labels: BTreeMap::from([
                (RUN_ID_LABEL.to_owned(), options.run_id.clone()),
                (IMAGE_LABEL.to_owned(), options.image.name.clone()),
            ]),
            user: options.user.clone(),
            mounts,
            cap_drop: vec!["ALL".to_owned()],
            security_opt: vec![
                "no-new-privileges".to_owned(),
                format!(
                    "seccomp={}",
                    vs_sandbox::syscall_rules::docker_seccomp_profile()
                ),
            ],
            // An allow-list is never the open network: without the command
            // server to forward it, the container gets no network at all.
            network_mode: if options.network && options.egress.is_none() {
                "bridge"
            } else {
                "none"
            }
            .to_owned(),
            devices: options.devices.planned_devices(),
            device_requests: options.devices.planned_requests(),
            pids_limit: options.pids_limit,
            memory_bytes: options.memory_bytes,
            init: true,
            lifeline: match (&options.command_server, egress) {
                (Some(_), Some(_)) => vs_sandbox::egress::forwarder_argv(
                    SERVER_PATH,
                    vs_sandbox::egress::INSIDE_SOCKET,
                    &[SERVER_PATH.into(), SERVER_SUBCOMMAND.into()],
                )
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
                (Some(_), None) => vec![SERVER_PATH.to_owned(), SERVER_SUBCOMMAND.to_owned()],
                (None, _) => LIFELINE.iter().map(|s| (*s).to_owned()).collect(),
            },
            execute_via: match options.command_server {
                Some(_) => ExecuteVia::CommandServer,
                None => ExecuteVia::EngineExec,
            },
            env_names: match egress {
                // The caller's proxy variables never override the door.
                Some(_) => options
                    .env
                    .names()
                    .iter()
                    .filter(|n| !vs_sandbox::egress::is_proxy_var(n))
                    .cloned()
                    .collect(),
                None => options.env.names().to_vec(),
            },
            workdir,
            container_env: match egress {
                Some(_) => vs_sandbox::egress::proxy_env()
                    .into_iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
                None => Vec::new(),
            },
        }
    }
}

/// The container name of a run.
pub fn container_name(run_id: &str) -> String {
    format!("vibesys-{run_id}")
}

/// Checks a run id: 1 to 64 characters of `[A-Za-z0-9_.-]`, starting with
/// a letter or digit (it becomes part of a container name and a path).
pub fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 64
        && run_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && run_id
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
}

/// The container's plan, lowered once: its options, the mounts, masks and
/// security options, and what it enforces.
#[derive(Debug)]
pub struct PlannedContainer {
    /// The container's options (with the egress door, when it has one).
    pub options: DockerOptions,
    /// The mounts, masks and security options.
    pub plan: DockerPlan,
    /// What it enforces.
    pub report: EnforcementReport,
}

impl PlannedContainer {
    /// Lowers `policy` with `options`.
    pub fn new(policy: &ResolvedPolicy, options: DockerOptions) -> Self {
        Self {
            plan: DockerPlan::new(policy, &options),
            report: docker_report(policy, &options),
            options,
        }
    }

    /// The Docker plan behind `plan` (`policy show` prints it).
    pub fn of(plan: &dyn vs_sandbox::ContainerPlan) -> Option<&Self> {
        (plan as &dyn std::any::Any).downcast_ref()
    }
}

/// What the Docker backend enforces.
pub fn docker_report(policy: &ResolvedPolicy, options: &DockerOptions) -> EnforcementReport {
    let mut report = EnforcementReport::for_policy("docker", policy, |access| match access {
        Access::ReadOnly => (true, "bind-mounted read-only over itself".into()),
        Access::Hidden => (
            true,
            "an empty read-only operator-owned directory or file mounted over it".into(),
        ),
    });
    report.outside = format!(
        "only what image {} ({}) holds, plus the workspace",
        options.image.name, options.image.config_digest
    );
    report.hardening = vec![
        "all capabilities dropped".into(),
        "no-new-privileges".into(),
        "seccomp: vibesys's own profile (no set-uid/set-gid modes, no ptrace, io_uring, keyctl, bpf, userfaultfd, namespaces or mounts, no TIOCSTI)".into(),
        "every bind is checked inside the started container before anything runs: no symlink on the way, a mount root, the very file that was checked".into(),
        "the directories above each protected path are mount points: they cannot be renamed away".into(),
        if options.devices.is_empty() {
            "no host devices".to_owned()
        } else {
            format!(
                "host devices: {}{}",
                match &options.devices.nvidia {
                    None => String::new(),
                    Some(GpuSelection::All) => "every NVIDIA GPU (device request); ".to_owned(),
                    Some(GpuSelection::Ids(ids)) =>
                        format!("NVIDIA GPUs {} (device request); ", ids.join(",")),
                },
                options
                    .devices
                    .nodes
                    .iter()
                    .map(|n| format!("{} (rw, no mknod)", n.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        match (&options.egress, options.network) {
            (Some(_), true) if options.command_server.is_none() => {
                "network: none (an allow-list needs the command server as its forwarder, and none was given)".to_owned()
            }
            (Some(door), true) => format!(
                "network: none; the one door out is vibesys's proxy (its socket mounted in; the container's loopback listener at 127.0.0.1:{}, named by HTTPS_PROXY, HTTP_PROXY and ALL_PROXY, is handed to it by the static vibesys and accepted from outside), admitting only {}",
                vs_sandbox::egress::INSIDE_PORT,
                door.allow
            ),
            (None, true) => "network: bridge".to_owned(),
            (_, false) => "network: none".to_owned(),
        },
        format!("runs as {} (the host user)", options.user),
        format!("pids limit {}", options.pids_limit),
        format!("memory limit {} bytes", options.memory_bytes),
        "container removed when vibesys stops or dies (stdin lifeline + AutoRemove)".into(),
        match options.command_server {
            Some(_) => "framework commands: a non-dumpable command server in the container, reached only through the Engine's attach connection".into(),
            None => "framework commands: the Engine's exec API".into(),
        },
    ];
    report.gaps = vec![
        "the image's root file system is writable by the container user for the container's lifetime (it is discarded with the container)".into(),
    ];
    report
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use vs_sandbox::{ProjectPathPolicy, Workspace};

    /// A pin of the editor image with a made-up digest, for plans that
    /// start nothing.
    pub(crate) fn pin() -> ImagePin {
        ImagePin {
            name: "vibesys-editor".into(),
            tag: "latest".into(),
            config_digest: format!("sha256:{}", "a".repeat(64)).parse().unwrap(),
            manifest_digest: None,
            diff_ids: vec![],
        }
    }

    #[test]
    fn plan_mounts_follow_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ro/secret")).unwrap();
        std::fs::write(dir.path().join("key.txt"), "k").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::new(["ro"], ["ro/secret", "key.txt"])
            .unwrap()
            .resolve(&ws)
            .unwrap();
        let mut opts = DockerOptions::new(pin(), "r1", "/usr/bin/vibesys");
        opts.mask_root = PathBuf::from("/masks");
        let plan = DockerPlan::new(&policy, &opts);
        let root = ws.root();
        let roles: Vec<_> = plan
            .mounts
            .iter()
            .map(|m| (m.role, m.target.strip_prefix(root).unwrap().to_path_buf()))
            .collect();
        assert_eq!(roles[0].0, MountRole::Workspace);
        assert!(roles.contains(&(MountRole::ReadOnly, PathBuf::from("ro"))));
        assert!(roles.contains(&(MountRole::MaskDir, PathBuf::from("ro/secret"))));
        assert!(roles.contains(&(MountRole::MaskFile, PathBuf::from("key.txt"))));
        // read-only before the hidden path below it
        let ro = roles.iter().position(|r| r.1 == Path::new("ro")).unwrap();
        let hid = roles
            .iter()
            .position(|r| r.1 == Path::new("ro/secret"))
            .unwrap();
        assert!(ro < hid);
        assert!(
            plan.mounts[1..]
                .iter()
                .all(|m| m.read_only || m.role == MountRole::Ancestor)
        );
        assert_eq!(plan.network_mode, "none");
        assert_eq!(plan.cap_drop, ["ALL"]);
        assert_eq!(plan.image, pin().config_digest.to_string());
        assert_eq!(plan.labels[RUN_ID_LABEL], "r1");
    }

    /// What `policy show --backend docker --json` prints as the plan.
    #[test]
    fn plan_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("evaluator")).unwrap();
        std::fs::create_dir_all(dir.path().join("secrets")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join(".netrc"), "x").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::new(["evaluator"], ["secrets", ".netrc"])
            .unwrap()
            .resolve(&ws)
            .unwrap();
        let mut opts = DockerOptions::new(pin(), "run-1", "/usr/bin/vibesys");
        opts.mask_root = PathBuf::from("/run/user/1000/vibesys-docker/run-1");
        opts.user = "1000:1000".into();
        let plan = DockerPlan::new(&policy, &opts);
        let json = serde_json::to_string_pretty(&plan).unwrap();
        let root = ws.root().display().to_string();
        insta::assert_snapshot!(json.replace(&root, "[WORKSPACE]"));
    }

    #[test]
    fn a_command_server_is_mounted_read_only_and_is_the_main_process() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let mut opts = DockerOptions::new(pin(), "r1", "/usr/bin/vibesys");
        opts.command_server = Some(PathBuf::from("/opt/vibesys-static"));
        let plan = DockerPlan::new(&policy, &opts);
        let server = plan
            .mounts
            .iter()
            .find(|m| m.role == MountRole::CommandServer)
            .unwrap();
        assert_eq!(server.source, Path::new("/opt/vibesys-static"));
        assert_eq!(server.target, Path::new(SERVER_PATH));
        assert!(server.read_only);
        assert_eq!(plan.lifeline, [SERVER_PATH, SERVER_SUBCOMMAND]);
        assert_eq!(plan.execute_via, ExecuteVia::CommandServer);
        let report = docker_report(&policy, &opts);
        assert!(report.hardening.iter().any(|h| h.contains("non-dumpable")));
    }

    /// An allow-list the plan cannot give its door (no command server to
    /// forward it) closes the network rather than opening it.
    #[test]
    fn an_allow_list_without_a_forwarder_closes_the_network() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let mut opts = DockerOptions::new(pin(), "r1", "/usr/bin/vibesys");
        opts.network = true;
        opts.egress = Some(vs_sandbox::egress::EgressDoor::handover(
            vs_sandbox::egress::AllowList::parse(["pypi.org"]).unwrap(),
            "/run/user/0/vibesys-egress-1/egress.sock",
        ));
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(plan.network_mode, "none");
        assert!(
            !plan
                .mounts
                .iter()
                .any(|m| m.target == Path::new(vs_sandbox::egress::INSIDE_SOCKET))
        );
        let report = docker_report(&policy, &opts);
        assert!(
            report
                .hardening
                .iter()
                .any(|h| h.starts_with("network: none (an allow-list needs")),
            "{:?}",
            report.hardening
        );
        // With the server: the door, still no bridge.
        opts.command_server = Some(PathBuf::from("/opt/vibesys-static"));
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(plan.network_mode, "none");
        assert_eq!(plan.lifeline[1], vs_sandbox::helper::Helper::EGRESS_FORWARD);
    }

    #[test]
    fn devices_lower_to_device_nodes_and_gpu_requests() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let mut opts = DockerOptions::new(pin(), "r1", "/usr/bin/vibesys");
        let plan = DockerPlan::new(&policy, &opts);
        assert!(plan.devices.is_empty() && plan.device_requests.is_empty());
        assert!(
            docker_report(&policy, &opts)
                .hardening
                .contains(&"no host devices".to_owned())
        );
        opts.devices = DeviceAccess {
            nvidia: Some(GpuSelection::All),
            nodes: vec!["/dev/kfd".into(), "/dev/dri/renderD128".into()],
        };
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(
            plan.devices,
            [
                PlannedDevice {
                    path_on_host: "/dev/kfd".into(),
                    path_in_container: "/dev/kfd".into(),
                    cgroup_permissions: "rw".into(),
                },
                PlannedDevice {
                    path_on_host: "/dev/dri/renderD128".into(),
                    path_in_container: "/dev/dri/renderD128".into(),
                    cgroup_permissions: "rw".into(),
                }
            ]
        );
        assert_eq!(
            plan.device_requests,
            [PlannedDeviceRequest {
                driver: "nvidia".into(),
                count: -1,
                device_ids: vec![],
                capabilities: vec![vec!["gpu".into()]],
            }]
        );
        opts.devices.nvidia = Some(GpuSelection::Ids(vec!["1".into(), "GPU-abc".into()]));
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(plan.device_requests[0].count, 0);
        assert_eq!(plan.device_requests[0].device_ids, ["1", "GPU-abc"]);
        let report = docker_report(&policy, &opts);
        assert!(
            report
                .hardening
                .iter()
                .any(|h| h.contains("NVIDIA GPUs 1,GPU-abc") && h.contains("/dev/kfd")),
            "{:?}",
            report.hardening
        );
    }

    #[test]
    fn run_ids() {
        assert!(valid_run_id("run-1.a_b"));
        assert!(!valid_run_id(""));
        assert!(!valid_run_id("-x"));
        assert!(!valid_run_id("a/b"));
        assert!(!valid_run_id(&"a".repeat(65)));
    }
}
