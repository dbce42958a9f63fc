//! The process limit of the host backends: which mechanism bounds the
//! number of processes a confined tree may start, decided by one function
//! ([`ProcessLimit::choose`]) and written to / read from the launcher's
//! command line by the same type.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;

/// Default `[sandbox] max_processes` (the Docker backend's pids limit).
pub const DEFAULT_MAX_PROCESSES: u64 = 4096;

/// Largest accepted `max_processes` (the kernel's `pid_max` ceiling).
pub const MAX_MAX_PROCESSES: u64 = 4_194_304;

/// What bounds the processes of one confined run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mechanism", rename_all = "kebab-case")]
pub enum ProcessLimit {
    /// A pids cgroup created below `parent` for the run (`pids.max`),
    /// emptied with SIGKILL and removed when the command exits.
    Cgroup {
        /// 1 (a writable v1 `pids` hierarchy) or 2 (a delegated v2 subtree).
        version: u8,
        /// The cgroup the run's cgroup is created in.
        parent: PathBuf,
        /// `pids.max`.
        max: u64,
    },
    /// `RLIMIT_NPROC` inside a user namespace of the run's own: the kernel
    /// counts it per user namespace, so it bounds exactly the run's tree.
    UserNamespaceRlimit {
        /// The limit.
        max: u64,
    },
    /// Nothing bounds processes here.
    Unbounded {
        /// Why not.
        reason: String,
    },
}

impl ProcessLimit {
    /// The mechanism that bounds `max` processes on this host: a pids
    /// cgroup where one can be created, else `RLIMIT_NPROC` under a user
    /// namespace when not root (for root, `RLIMIT_NPROC` is never
    /// enforced), else none. (On Linux: `crate::process::pids`.)
    #[cfg(not(target_os = "linux"))]
    pub fn choose(max: u64) -> Self {
        let _ = max;
        Self::Unbounded {
            reason: "process limits are implemented on Linux only".into(),
        }
    }

    /// The limit, when something enforces one.
    pub fn max(&self) -> Option<u64> {
        match self {
            Self::Cgroup { max, .. } | Self::UserNamespaceRlimit { max } => Some(*max),
            Self::Unbounded { .. } => None,
        }
    }

    /// One line for `doctor`, `policy show` and the reports.
    pub fn describe(&self) -> String {
        match self {
            Self::Cgroup {
                version,
                parent,
                max,
            } => format!(
                "processes: at most {max} (a pids cgroup v{version} per run below {}; leftovers killed through it)",
                parent.display()
            ),
            Self::UserNamespaceRlimit { max } => format!(
                "processes: at most {max} (RLIMIT_NPROC in a user namespace of the run's own)"
            ),
            Self::Unbounded { reason } => format!("processes: NOT BOUNDED ({reason})"),
        }
    }

    /// The launcher arguments that carry this limit.
    pub fn to_args(&self) -> Vec<OsString> {
        match self {
            Self::Cgroup {
                version,
                parent,
                max,
            } => vec![
                "--pids-cgroup".into(),
                format!("{version}:{max}").into(),
                parent.clone().into_os_string(),
            ],
            Self::UserNamespaceRlimit { max } => {
                vec!["--nproc".into(), max.to_string().into()]
            }
            Self::Unbounded { .. } => Vec::new(),
        }
    }

    /// Parses one flag written by [`ProcessLimit::to_args`] (`flag` is
    /// already consumed; `next` yields its values). `None` when `flag` is
    /// not ours; `Some(Err)` when its values are malformed.
    pub fn parse_arg(
        flag: &str,
        next: &mut dyn Iterator<Item = OsString>,
    ) -> Option<Result<Self, String>> {
        let number = |s: &str| -> Result<u64, String> {
            s.parse::<u64>()
                .ok()
                .filter(|n| (1..=MAX_MAX_PROCESSES).contains(n))
                .ok_or_else(|| format!("bad process limit {s:?}"))
        };
        match flag {
            "--nproc" => Some((|| {
                let v = next.next().ok_or("--nproc needs a number")?;
                let max = number(v.to_str().unwrap_or(""))?;
                Ok(Self::UserNamespaceRlimit { max })
            })()),
            "--pids-cgroup" => Some((|| {
                let spec = next.next().ok_or("--pids-cgroup needs VERSION:MAX PATH")?;
                let parent = PathBuf::from(next.next().ok_or("--pids-cgroup needs a path")?);
                let (version, max) = spec
                    .to_str()
                    .and_then(|s| s.split_once(':'))
                    .ok_or("--pids-cgroup needs VERSION:MAX")?;
                let version = match version {
                    "1" => 1,
                    "2" => 2,
                    v => return Err(format!("bad cgroup version {v:?}")),
                };
                if !parent.is_absolute() {
                    return Err(format!("cgroup path {parent:?} is not absolute"));
                }
                Ok(Self::Cgroup {
                    version,
                    parent,
                    max: number(max)?,
                })
            })()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        for limit in [
            ProcessLimit::Cgroup {
                version: 1,
                parent: "/sys/fs/cgroup/pids".into(),
                max: 64,
            },
            ProcessLimit::UserNamespaceRlimit { max: 4096 },
        ] {
            let args = limit.to_args();
            let mut it = args.into_iter();
            let flag = it.next().unwrap();
            let parsed = ProcessLimit::parse_arg(flag.to_str().unwrap(), &mut it)
                .unwrap()
                .unwrap();
            assert_eq!(parsed, limit);
        }
        let mut it = vec![OsString::from("0")].into_iter();
        assert!(
            ProcessLimit::parse_arg("--nproc", &mut it)
                .unwrap()
                .is_err()
        );
        let mut it = std::iter::empty();
        assert!(ProcessLimit::parse_arg("--other", &mut it).is_none());
    }
}
