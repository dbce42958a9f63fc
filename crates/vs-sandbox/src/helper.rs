//! The hidden helper protocol: the subcommands of the `vibesys` executable
//! that a backend's `wrap` puts in front of a confined command, and the
//! command server a run's container starts.
//!
//! One type writes an argv ([`Helper::argv`]) and reads it back
//! ([`Helper::parse`]); vs-runtime's `helper_entry` runs them (the one
//! place that knows this crate's helpers, vs-docker's and the broker's),
//! before the binary parses its own command line. Nothing else encodes or decodes these argvs.
//!
//! ```text
//! internal-launch (--fd SLOT)... [LIMIT] -- bwrap ARGS -- CMD...
//! internal-landlock [LIMIT] (--read P)... (--write P)... [--no-network] [--egress SOCKET] -- CMD...
//! internal-docker-attach --container ID --user U --workdir DIR (--env NAME)... -- CMD...
//! internal-command-server
//! internal-egress-forward --socket PATH --port N -- CMD...
//! internal-host-job --project DIR --workspace DIR --cwd DIR --gpu-devices PATTERN [--bwrap PATH]
//!                   [--no-network | (--allow-host=HOST)...] (--env NAME=VALUE)... -- CMD...
//! ```
//! LIMIT is `--nproc N` or `--pids-cgroup VERSION:MAX PARENT`
//! ([`ProcessLimit::to_args`]); SLOT is written by [`FdSlot::to_args`].
//! Exit status: 122 usage error, 125 confinement failed (nothing ran), 126
//! command cannot be executed, 127 command not found; otherwise the
//! command's own. `internal-host-job` (an agent job on a Slurm compute
//! node) is read and written here like the others and run by vs-runtime
//! (its confinement is the broker's): see [`HostJob`].

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::fd_slot::FdSlot;
use crate::landlock_rules::LandlockPlan;
use crate::limits::ProcessLimit;

/// A helper's own arguments were malformed (exit 122).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("internal helper usage: {subcommand}: {reason}")]
pub struct HelperUsageError {
    /// The helper subcommand.
    pub subcommand: &'static str,
    /// What was wrong.
    pub reason: String,
}

/// One invocation of a hidden helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Helper {
    /// Creates the descriptors a bwrap plan reads at 3, 4, ..., closes
    /// every other one and runs `argv` (bwrap and its arguments) as its
    /// child under `limit`, staying its parent (a subreaper).
    Launch {
        /// The descriptors, in slot order.
        slots: Vec<FdSlot>,
        /// What bounds the tree.
        limit: ProcessLimit,
        /// bwrap, its arguments, `--` and the command.
        argv: Vec<OsString>,
    },
    /// Runs `argv` as its child under the Landlock plan and the launcher's
    /// hardening, staying its parent (a subreaper).
    Landlock {
        /// The rules.
        plan: LandlockPlan,
        /// What bounds the tree.
        limit: ProcessLimit,
        /// The command.
        argv: Vec<OsString>,
    },
    /// Runs `argv` in a run's container attached to this process's stdio;
    /// the values of `env` (names) come from this process's environment.
    DockerAttach {
        /// The container ID.
        container: String,
        /// `uid:gid` to run as.
        user: String,
        /// Working directory in the container.
        workdir: PathBuf,
        /// Names of the variables passed through.
        env: Vec<String>,
        /// The command.
        argv: Vec<OsString>,
    },
    /// The command server, a run container's main process (its stdout is
    /// the reply channel).
    CommandServer,
    /// Inside a sandbox with an allow-list: listens on the sandbox's
    /// loopback `port`, hands that listener to the egress proxy's `socket`
    /// and executes `argv` in its place ([`crate::egress::forward`]).
    EgressForward {
        /// The proxy's socket as the sandbox sees it.
        socket: PathBuf,
        /// The loopback port the proxy variables name.
        port: u16,
        /// The command.
        argv: Vec<OsString>,
    },
    /// An agent job on a Slurm compute node, started by `srun`: the
    /// broker's job confined there (run by the binary: [`HostJob`]).
    HostJob(Box<HostJob>),
}

/// What an agent job on a compute node is told by its broker: everything
/// its confinement needs, decided on the broker's host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostJob {
    /// The run's project: its `vibesys.toml` is the policy.
    pub project: PathBuf,
    /// The sandbox's workspace (the project or a candidate worktree).
    pub workspace: PathBuf,
    /// The working directory inside the workspace.
    pub cwd: PathBuf,
    /// bubblewrap (`None`: found in `PATH`).
    pub bwrap: Option<PathBuf>,
    /// GPU device node pattern (`{}` is the GRES index).
    pub gpu_devices: String,
    /// The job's network, the broker's.
    pub network: JobNetwork,
    /// Variables set inside the sandbox, `(name, value)`.
    pub env: Vec<(String, String)>,
    /// The command.
    pub argv: Vec<OsString>,
}

/// The network of an agent job: the operator's `[sandbox] network` and
/// `allow_hosts` and the broker's flags, decided once on the broker's
/// host; the compute node takes it from the job's arguments, never from a
/// file the agent could have changed since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobNetwork {
    /// The node's network (no allow-list).
    Open,
    /// No network.
    Off,
    /// Only these hosts, through the egress proxy the job starts on its
    /// node: each pattern validated, kept as written.
    AllowList(Vec<String>),
}

impl JobNetwork {
    /// The flag that takes a job's network away.
    pub const NO_NETWORK_FLAG: &'static str = "--no-network";
    /// The flag that names one allowed host (repeated).
    pub const ALLOW_HOST_FLAG: &'static str = "--allow-host";

    /// The network of a job that asked for `requested` (`Some(false)`: no
    /// network, an evaluation without `network = true`): a request never
    /// widens this one.
    pub fn for_job(&self, requested: Option<bool>) -> Self {
        match requested {
            Some(false) => Self::Off,
            _ => self.clone(),
        }
    }

    /// Its arguments of `internal-host-job`: `--no-network`, nothing, or
    /// `--allow-host=PATTERN` each (one argument, never read as a flag).
    pub fn to_args(&self) -> Vec<OsString> {
        match self {
            Self::Off => vec![Self::NO_NETWORK_FLAG.into()],
            Self::Open => Vec::new(),
            Self::AllowList(hosts) => hosts
                .iter()
                .map(|h| format!("{}={h}", Self::ALLOW_HOST_FLAG).into())
                .collect(),
        }
    }
}

impl Helper {
    /// The subcommand of [`Helper::Launch`].
    pub const LAUNCH: &'static str = "internal-launch";
    /// The subcommand of [`Helper::Landlock`].
    pub const LANDLOCK: &'static str = "internal-landlock";
    /// The subcommand of [`Helper::DockerAttach`].
    pub const DOCKER_ATTACH: &'static str = "internal-docker-attach";
    /// The subcommand of [`Helper::CommandServer`].
    pub const COMMAND_SERVER: &'static str = "internal-command-server";
    /// The subcommand of [`Helper::EgressForward`].
    pub const EGRESS_FORWARD: &'static str = "internal-egress-forward";
    /// The subcommand of [`Helper::HostJob`].
    pub const HOST_JOB: &'static str = "internal-host-job";
    /// Every helper subcommand.
    pub const ALL: [&'static str; 6] = [
        Self::LAUNCH,
        Self::LANDLOCK,
        Self::DOCKER_ATTACH,
        Self::COMMAND_SERVER,
        Self::EGRESS_FORWARD,
        Self::HOST_JOB,
    ];

    /// This helper's subcommand.
    pub fn subcommand(&self) -> &'static str {
        match self {
            Self::Launch { .. } => Self::LAUNCH,
            Self::Landlock { .. } => Self::LANDLOCK,
            Self::DockerAttach { .. } => Self::DOCKER_ATTACH,
            Self::CommandServer => Self::COMMAND_SERVER,
            Self::EgressForward { .. } => Self::EGRESS_FORWARD,
            Self::HostJob(_) => Self::HOST_JOB,
        }
    }

    /// The argv that runs this helper: `exe`, the subcommand, its
    /// arguments (read back by [`Helper::parse`]).
    pub fn argv(&self, exe: &Path) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![exe.as_os_str().to_owned(), self.subcommand().into()];
        match self {
            Self::Launch { slots, limit, argv } => {
                for slot in slots {
                    out.push("--fd".into());
                    out.extend(slot.to_args());
                }
                out.extend(limit.to_args());
                out.push("--".into());
                out.extend(argv.iter().cloned());
            }
            Self::Landlock { plan, limit, argv } => {
                out.extend(limit.to_args());
                for p in &plan.read {
                    out.push("--read".into());
                    out.push(p.clone().into_os_string());
                }
                for p in &plan.write {
                    out.push("--write".into());
                    out.push(p.clone().into_os_string());
                }
                if !plan.network {
                    out.push("--no-network".into());
                }
                if let Some(socket) = &plan.egress {
                    out.push("--egress".into());
                    out.push(socket.clone().into_os_string());
                }
                out.push("--".into());
                out.extend(argv.iter().cloned());
            }
            Self::DockerAttach {
                container,
                user,
                workdir,
                env,
                argv,
            } => {
                out.extend([
                    "--container".into(),
                    container.into(),
                    "--user".into(),
                    user.into(),
                    "--workdir".into(),
                    workdir.clone().into_os_string(),
                ]);
                for name in env {
                    out.push("--env".into());
                    out.push(name.into());
                }
                out.push("--".into());
                out.extend(argv.iter().cloned());
            }
            Self::CommandServer => {}
            Self::EgressForward { socket, port, argv } => {
                out.extend([
                    "--socket".into(),
                    socket.clone().into_os_string(),
                    "--port".into(),
                    port.to_string().into(),
                    "--".into(),
                ]);
                out.extend(argv.iter().cloned());
            }
            Self::HostJob(job) => {
                out.extend([
                    "--project".into(),
                    job.project.clone().into_os_string(),
                    "--workspace".into(),
                    job.workspace.clone().into_os_string(),
                    "--cwd".into(),
                    job.cwd.clone().into_os_string(),
                    "--gpu-devices".into(),
                    job.gpu_devices.clone().into(),
                ]);
                if let Some(b) = &job.bwrap {
                    out.push("--bwrap".into());
                    out.push(b.clone().into_os_string());
                }
                out.extend(job.network.to_args());
                for (k, v) in &job.env {
                    out.push("--env".into());
                    out.push(format!("{k}={v}").into());
                }
                out.push("--".into());
                out.extend(job.argv.iter().cloned());
            }
        }
        out
    }

    /// Reads a helper invocation: `subcommand` and what follows it.
    /// `Ok(None)` when `subcommand` names no helper.
    pub fn parse(
        subcommand: &OsStr,
        args: impl IntoIterator<Item = OsString>,
    ) -> Result<Option<Self>, HelperUsageError> {
        let Some(name) = Self::ALL.into_iter().find(|n| OsStr::new(n) == subcommand) else {
            return Ok(None);
        };
        let usage = |reason: String| HelperUsageError {
            subcommand: name,
            reason,
        };
        let mut it = args.into_iter();
        let helper = match name {
            Self::LAUNCH => parse_launch(&mut it).map_err(usage)?,
            Self::LANDLOCK => parse_landlock(&mut it).map_err(usage)?,
            Self::DOCKER_ATTACH => parse_attach(&mut it).map_err(usage)?,
            Self::EGRESS_FORWARD => parse_forward(&mut it).map_err(usage)?,
            Self::HOST_JOB => parse_host_job(&mut it).map_err(usage)?,
            _ => {
                if let Some(extra) = it.next() {
                    return Err(usage(format!("unexpected argument {extra:?}")));
                }
                Self::CommandServer
            }
        };
        Ok(Some(helper))
    }
}

/// The command after `--`; an empty one is a usage error.
fn command(it: &mut impl Iterator<Item = OsString>) -> Result<Vec<OsString>, String> {
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return Err("the command is empty".into());
    }
    Ok(argv)
}

fn unbounded() -> ProcessLimit {
    ProcessLimit::Unbounded {
        reason: "no limit was passed to the helper".into(),
    }
}

fn parse_forward(it: &mut impl Iterator<Item = OsString>) -> Result<Helper, String> {
    let mut socket = None;
    let mut port = None;
    loop {
        let Some(arg) = it.next() else {
            return Err("expected --socket PATH --port N -- CMD...".into());
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--socket") => socket = it.next().map(PathBuf::from),
            Some("--port") => {
                port = it
                    .next()
                    .and_then(|p| p.to_str().and_then(|p| p.parse::<u16>().ok()))
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    match (socket, port) {
        (Some(socket), Some(port)) => Ok(Helper::EgressForward {
            socket,
            port,
            argv: command(it)?,
        }),
        _ => Err("--socket PATH and --port N are required".into()),
    }
}

fn parse_host_job(it: &mut impl Iterator<Item = OsString>) -> Result<Helper, String> {
    let mut project = None;
    let mut workspace = None;
    let mut cwd = None;
    let mut bwrap = None;
    let mut gpu_devices = None;
    let mut no_network = false;
    let mut hosts = Vec::new();
    let mut env = Vec::new();
    let path = |flag: &str, v: Option<OsString>| -> Result<PathBuf, String> {
        v.map(PathBuf::from)
            .ok_or_else(|| format!("{flag} needs a value"))
    };
    let text = |flag: &str, v: Option<OsString>| -> Result<String, String> {
        v.and_then(|v| v.into_string().ok())
            .ok_or_else(|| format!("{flag} needs a UTF-8 value"))
    };
    loop {
        let Some(arg) = it.next() else {
            return Err("missing `-- CMD`".into());
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--project") => project = Some(path("--project", it.next())?),
            Some("--workspace") => workspace = Some(path("--workspace", it.next())?),
            Some("--cwd") => cwd = Some(path("--cwd", it.next())?),
            Some("--bwrap") => bwrap = Some(path("--bwrap", it.next())?),
            Some("--gpu-devices") => gpu_devices = Some(text("--gpu-devices", it.next())?),
            Some(JobNetwork::NO_NETWORK_FLAG) => no_network = true,
            Some(JobNetwork::ALLOW_HOST_FLAG) => {
                hosts.push(text(JobNetwork::ALLOW_HOST_FLAG, it.next())?);
            }
            Some("--env") => {
                let kv = text("--env", it.next())?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--env {kv:?} is not NAME=VALUE"))?;
                env.push((k.to_owned(), v.to_owned()));
            }
            Some(other) => match other.strip_prefix("--allow-host=") {
                Some(host) => hosts.push(host.to_owned()),
                None => return Err(format!("unknown argument {arg:?}")),
            },
            None => return Err(format!("unknown argument {arg:?}")),
        }
    }
    let network = match (no_network, hosts.is_empty()) {
        (false, true) => JobNetwork::Open,
        (true, true) => JobNetwork::Off,
        (false, false) => JobNetwork::AllowList(hosts),
        (true, false) => return Err("--allow-host cannot be used with --no-network".into()),
    };
    Ok(Helper::HostJob(Box::new(HostJob {
        project: project.ok_or("--project is required")?,
        workspace: workspace.ok_or("--workspace is required")?,
        cwd: cwd.ok_or("--cwd is required")?,
        bwrap,
        gpu_devices: gpu_devices.ok_or("--gpu-devices is required")?,
        network,
        env,
        argv: command(it)?,
    })))
}

fn parse_launch(it: &mut impl Iterator<Item = OsString>) -> Result<Helper, String> {
    let mut slots = Vec::new();
    let mut limit = unbounded();
    loop {
        let Some(arg) = it.next() else {
            return Err("expected (--fd SLOT)... [LIMIT] -- ARGV".into());
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--fd") => match FdSlot::parse_args(&mut *it) {
                Some(slot) => slots.push(slot),
                None => return Err("--fd needs a known descriptor slot".into()),
            },
            Some(flag) => match ProcessLimit::parse_arg(flag, &mut *it) {
                Some(l) => limit = l?,
                None => return Err(format!("unknown argument {arg:?}")),
            },
            None => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(Helper::Launch {
        slots,
        limit,
        argv: command(it)?,
    })
}

fn parse_landlock(it: &mut impl Iterator<Item = OsString>) -> Result<Helper, String> {
    let mut plan = LandlockPlan {
        read: Vec::new(),
        write: Vec::new(),
        network: true,
        egress: None,
    };
    let mut limit = unbounded();
    loop {
        let Some(arg) = it.next() else {
            return Err("missing -- before the command".into());
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--no-network") => plan.network = false,
            Some("--egress") => {
                let p = PathBuf::from(it.next().ok_or("--egress needs a socket path")?);
                if !p.is_absolute() {
                    return Err(format!("--egress path {p:?} is not absolute"));
                }
                plan.egress = Some(p);
            }
            Some(flag @ ("--read" | "--write")) => {
                let p = PathBuf::from(it.next().ok_or_else(|| format!("{flag} needs a path"))?);
                if !p.is_absolute() {
                    return Err(format!("{flag} path {p:?} is not absolute"));
                }
                if flag == "--read" {
                    plan.read.push(p);
                } else {
                    plan.write.push(p);
                }
            }
            Some(flag) => match ProcessLimit::parse_arg(flag, &mut *it) {
                Some(l) => limit = l?,
                None => return Err(format!("unknown argument {arg:?}")),
            },
            None => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(Helper::Landlock {
        plan,
        limit,
        argv: command(it)?,
    })
}

fn parse_attach(it: &mut impl Iterator<Item = OsString>) -> Result<Helper, String> {
    let mut container = None;
    let mut user = None;
    let mut workdir = None;
    let mut env = Vec::new();
    let text = |flag: &str, v: Option<OsString>| -> Result<String, String> {
        v.and_then(|v| v.into_string().ok())
            .ok_or_else(|| format!("{flag} needs a UTF-8 value"))
    };
    loop {
        let Some(flag) = it.next() else {
            return Err("missing `-- CMD`".into());
        };
        match flag.to_str() {
            Some("--container") => container = Some(text("--container", it.next())?),
            Some("--user") => user = Some(text("--user", it.next())?),
            Some("--workdir") => workdir = Some(PathBuf::from(text("--workdir", it.next())?)),
            Some("--env") => env.push(text("--env", it.next())?),
            Some("--") => break,
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    Ok(Helper::DockerAttach {
        container: container.ok_or("--container is required")?,
        user: user.ok_or("--user is required")?,
        workdir: workdir.ok_or("--workdir is required")?,
        env,
        argv: command(it)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PathKind;

    fn round_trip(h: Helper) {
        let argv = h.argv(Path::new("/usr/bin/vibesys"));
        assert_eq!(argv[0], "/usr/bin/vibesys");
        let back = Helper::parse(&argv[1], argv[2..].iter().cloned()).unwrap();
        assert_eq!(back, Some(h));
    }

    #[test]
    fn every_helper_reads_back_what_it_writes() {
        let cmd: Vec<OsString> = vec!["sh".into(), "-c".into(), "echo -- --fd".into()];
        round_trip(Helper::Launch {
            slots: vec![
                FdSlot::Seccomp,
                FdSlot::Empty,
                FdSlot::Bind {
                    root: "/w".into(),
                    rel: ".git".into(),
                    kind: PathKind::Directory,
                },
            ],
            limit: ProcessLimit::UserNamespaceRlimit { max: 24 },
            argv: [vec!["bwrap".into(), "--".into()], cmd.clone()].concat(),
        });
        round_trip(Helper::Landlock {
            plan: LandlockPlan {
                read: vec!["/usr".into()],
                write: vec!["/w".into(), "/tmp".into()],
                network: false,
                egress: Some("/run/user/0/vibesys-egress-1/egress.sock".into()),
            },
            limit: ProcessLimit::Cgroup {
                version: 2,
                parent: "/sys/fs/cgroup/x".into(),
                max: 4096,
            },
            argv: cmd.clone(),
        });
        round_trip(Helper::DockerAttach {
            container: "abc".into(),
            user: "0:0".into(),
            workdir: "/w".into(),
            env: vec!["TERM".into(), "ANTHROPIC_API_KEY".into()],
            argv: cmd,
        });
        round_trip(Helper::CommandServer);
        let job = HostJob {
            project: "/p".into(),
            workspace: "/p/.vibesys/state/local/candidates/r/1".into(),
            cwd: "/p/.vibesys/state/local/candidates/r/1/src".into(),
            bwrap: Some("/usr/bin/bwrap".into()),
            gpu_devices: "/dev/nvidia{}".into(),
            network: JobNetwork::AllowList(vec!["pypi.org".into(), "127.0.0.1:8080".into()]),
            env: vec![("TERM".into(), "xterm".into()), ("A".into(), "b=c".into())],
            argv: vec!["sh".into(), "-c".into(), "echo -- --env".into()],
        };
        for network in [JobNetwork::Open, JobNetwork::Off, job.network.clone()] {
            round_trip(Helper::HostJob(Box::new(HostJob {
                network,
                ..job.clone()
            })));
        }
        round_trip(Helper::HostJob(Box::new(HostJob {
            bwrap: None,
            env: Vec::new(),
            ..job.clone()
        })));
    }

    /// The argv the broker has always written (and `srun` runs), word for
    /// word: the protocol did not change when it became a `Helper`.
    #[test]
    fn a_host_job_writes_the_brokers_argv() {
        let job = Helper::HostJob(Box::new(HostJob {
            project: "/p".into(),
            workspace: "/p/w".into(),
            cwd: "/p/w/src".into(),
            bwrap: Some("/opt/bwrap".into()),
            gpu_devices: "/dev/nvidia{}".into(),
            network: JobNetwork::AllowList(vec!["pypi.org".into()]),
            env: vec![("TERM".into(), "xterm".into())],
            argv: vec!["true".into()],
        }));
        let argv: Vec<String> = job
            .argv(Path::new("/usr/bin/vibesys"))
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            argv,
            [
                "/usr/bin/vibesys",
                "internal-host-job",
                "--project",
                "/p",
                "--workspace",
                "/p/w",
                "--cwd",
                "/p/w/src",
                "--gpu-devices",
                "/dev/nvidia{}",
                "--bwrap",
                "/opt/bwrap",
                "--allow-host=pypi.org",
                "--env",
                "TERM=xterm",
                "--",
                "true"
            ]
        );
        // What clap accepted before, `--allow-host PATTERN`, still reads.
        let spaced = Helper::parse(
            OsStr::new(Helper::HOST_JOB),
            [
                "--project",
                "/p",
                "--workspace",
                "/p/w",
                "--cwd",
                "/p/w/src",
                "--gpu-devices",
                "/dev/nvidia{}",
                "--bwrap",
                "/opt/bwrap",
                "--allow-host",
                "pypi.org",
                "--env",
                "TERM=xterm",
                "--",
                "true",
            ]
            .map(OsString::from),
        )
        .unwrap();
        assert_eq!(spaced, Some(job));
    }

    #[test]
    fn a_job_request_only_narrows_the_brokers_network() {
        let list = JobNetwork::AllowList(vec!["pypi.org".into()]);
        assert_eq!(list.for_job(Some(false)), JobNetwork::Off);
        assert_eq!(list.for_job(Some(true)), list);
        assert_eq!(list.for_job(None), list);
        assert_eq!(JobNetwork::Off.for_job(Some(true)), JobNetwork::Off);
        assert_eq!(JobNetwork::Open.for_job(Some(false)), JobNetwork::Off);
    }

    #[test]
    fn malformed_invocations_are_usage_errors() {
        let parse = |sub: &str, args: &[&str]| {
            Helper::parse(OsStr::new(sub), args.iter().map(OsString::from))
        };
        assert_eq!(parse("exec", &[]).unwrap(), None);
        for (sub, args) in [
            (Helper::LAUNCH, &["--fd", "nonsense", "--", "x"][..]),
            (Helper::LAUNCH, &["--", ""][..1]),
            (Helper::LAUNCH, &["--nproc", "0", "--", "x"][..]),
            (Helper::LANDLOCK, &["--read", "rel", "--", "x"][..]),
            (Helper::LANDLOCK, &["--read", "/usr"][..]),
            (Helper::DOCKER_ATTACH, &["--user", "0:0", "--", "x"][..]),
            (Helper::COMMAND_SERVER, &["extra"][..]),
            (Helper::HOST_JOB, &["--project", "/p", "--", "x"][..]),
        ] {
            let err = parse(sub, args).unwrap_err();
            assert_eq!(err.subcommand, sub, "{err}");
        }
        // An agent job: both network flags, a variable without a value, no
        // command.
        let job = [
            "--project",
            "/p",
            "--workspace",
            "/p",
            "--cwd",
            "/p",
            "--gpu-devices",
            "x",
        ];
        for tail in [
            &["--no-network", "--allow-host=pypi.org", "--", "x"][..],
            &["--env", "NOVALUE", "--", "x"][..],
            &["--"][..],
        ] {
            let args: Vec<&str> = job.iter().chain(tail).copied().collect();
            let err = parse(Helper::HOST_JOB, &args).unwrap_err();
            assert_eq!(err.subcommand, Helper::HOST_JOB, "{err}");
        }
    }
}
