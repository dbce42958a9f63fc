//! The hidden helper protocol: the subcommands of the `vibesys` executable
//! that a backend's `wrap` puts in front of a confined command, and the
//! command server a run's container starts.
//!
//! One type writes an argv ([`Helper::argv`]) and reads it back
//! ([`Helper::parse`]); the binary's `helper_main` runs them (the one place
//! that knows both this crate's helpers and vs-docker's), before it parses
//! its own command line. Nothing else encodes or decodes these argvs.
//!
//! ```text
//! internal-launch (--fd SLOT)... [LIMIT] -- bwrap ARGS -- CMD...
//! internal-landlock [LIMIT] (--read P)... (--write P)... [--no-network] [--egress SOCKET] -- CMD...
//! internal-docker-attach --container ID --user U --workdir DIR (--env NAME)... -- CMD...
//! internal-command-server
//! internal-egress-forward --socket PATH --port N -- CMD...
//! ```
//! LIMIT is `--nproc N` or `--pids-cgroup VERSION:MAX PARENT`
//! ([`ProcessLimit::to_args`]); SLOT is written by [`FdSlot::to_args`].
//! Exit status: 122 usage error, 125 confinement failed (nothing ran), 126
//! command cannot be executed, 127 command not found; otherwise the
//! command's own.

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
    /// Every helper subcommand.
    pub const ALL: [&'static str; 5] = [
        Self::LAUNCH,
        Self::LANDLOCK,
        Self::DOCKER_ATTACH,
        Self::COMMAND_SERVER,
        Self::EGRESS_FORWARD,
    ];

    /// This helper's subcommand.
    pub fn subcommand(&self) -> &'static str {
        match self {
            Self::Launch { .. } => Self::LAUNCH,
            Self::Landlock { .. } => Self::LANDLOCK,
            Self::DockerAttach { .. } => Self::DOCKER_ATTACH,
            Self::CommandServer => Self::COMMAND_SERVER,
            Self::EgressForward { .. } => Self::EGRESS_FORWARD,
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
    #![allow(clippy::unwrap_used)]
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
        ] {
            let err = parse(sub, args).unwrap_err();
            assert_eq!(err.subcommand, sub, "{err}");
        }
    }
}
