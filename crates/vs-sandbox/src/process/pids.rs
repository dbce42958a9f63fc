//! Pids cgroups: finding one this process may create, and the per-run
//! cgroup that bounds and then kills a confined tree.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};

use crate::error::SandboxError;
use crate::limits::ProcessLimit;

/// Mount points of the cgroup hierarchies: (v2 mount point, v1 `pids`
/// mount point). Where the host mounts them where systemd and Docker do,
/// a `statfs` or three tell; otherwise the mount table (which the kernel
/// writes out whole for every read: dozens of lines on a desktop).
fn mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    match conventional_mounts() {
        Some(found @ (Some(_), _) | found @ (_, Some(_))) => found,
        _ => mount_table(),
    }
}

/// The hierarchies at `/sys/fs/cgroup` (v2), or below it as
/// `unified` (v2) and `pids` (v1), checked by file-system type.
fn conventional_mounts() -> Option<(Option<PathBuf>, Option<PathBuf>)> {
    const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
    const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    let kind = |p: &str| {
        rustix::fs::statfs(p)
            .ok()
            .map(|s| s.f_type as u64 & 0xffff_ffff)
    };
    let base = "/sys/fs/cgroup";
    match kind(base)? {
        CGROUP2_SUPER_MAGIC => Some((Some(PathBuf::from(base)), None)),
        TMPFS_MAGIC => {
            let v2 = (kind("/sys/fs/cgroup/unified") == Some(CGROUP2_SUPER_MAGIC))
                .then(|| PathBuf::from("/sys/fs/cgroup/unified"));
            let v1 = (kind("/sys/fs/cgroup/pids") == Some(CGROUP_SUPER_MAGIC))
                .then(|| PathBuf::from("/sys/fs/cgroup/pids"));
            Some((v2, v1))
        }
        _ => None,
    }
}

/// Mount points of the cgroup hierarchies, from /proc/self/mountinfo.
fn mount_table() -> (Option<PathBuf>, Option<PathBuf>) {
    let Ok(text) = read_small("/proc/self/mountinfo") else {
        return (None, None);
    };
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT OPTS [TAGS...] - FSTYPE SOURCE SUPER
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount = left.split(' ').nth(4);
        let mut r = right.split(' ');
        let (fstype, _, sup) = (r.next(), r.next(), r.next().unwrap_or(""));
        match (fstype, mount) {
            (Some("cgroup2"), Some(m)) if v2.is_none() => v2 = Some(PathBuf::from(m)),
            (Some("cgroup"), Some(m)) if v1.is_none() && sup.split(',').any(|o| o == "pids") => {
                v1 = Some(PathBuf::from(m))
            }
            _ => {}
        }
    }
    (v2, v1)
}

/// This process's cgroup paths: (v2 path, v1 `pids` path).
fn own_cgroups() -> (Option<String>, Option<String>) {
    let Ok(text) = read_small("/proc/self/cgroup") else {
        return (None, None);
    };
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next(), f.next());
        match (controllers, path) {
            (Some(""), Some(p)) => v2 = Some(p.to_owned()),
            (Some(c), Some(p)) if c.split(',').any(|x| x == "pids") => v1 = Some(p.to_owned()),
            _ => {}
        }
    }
    (v2, v1)
}

fn read_small(path: impl AsRef<Path>) -> std::io::Result<String> {
    use std::io::Read;
    // Room for the whole of a typical file up front: without it std
    // starts with a 32-byte probe and grows, one read per doubling.
    let mut bytes = Vec::with_capacity(4096);
    std::fs::File::open(path)?
        .take(1024 * 1024)
        .read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn writable_dir(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

fn join(mount: &Path, cgroup: &str) -> PathBuf {
    mount.join(cgroup.trim_start_matches('/'))
}

/// True when this process's effective uid is 0.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl ProcessLimit {
    /// The mechanism that bounds `max` processes on this host: a pids
    /// cgroup where one can be created, else `RLIMIT_NPROC` under a user
    /// namespace when not root (for root, `RLIMIT_NPROC` is never
    /// enforced), else none.
    pub fn choose(max: u64) -> Self {
        choose(max)
    }
}

fn choose(max: u64) -> ProcessLimit {
    let (mount_v2, mount_v1) = mounts();
    let (own_v2, own_v1) = own_cgroups();
    if let (Some(m), Some(c)) = (&mount_v2, &own_v2) {
        let dir = join(m, c);
        let controllers = read_small(dir.join("cgroup.controllers")).unwrap_or_default();
        let subtree = read_small(dir.join("cgroup.subtree_control")).unwrap_or_default();
        let has = |s: &str| s.split_whitespace().any(|w| w == "pids");
        // A non-root cgroup that holds processes cannot enable controllers
        // for children ("no internal processes"): use it only when pids is
        // already enabled below it, or it is the root.
        if has(&controllers) && (has(&subtree) || c == "/") && writable_dir(&dir) {
            return ProcessLimit::Cgroup {
                version: 2,
                parent: dir,
                max,
            };
        }
    }
    // Root on a systemd host sits in a scope that cannot take children;
    // the v2 root usually enables pids for its children.
    if let Some(m) = mount_v2.as_ref().filter(|_| is_root()) {
        let subtree = read_small(m.join("cgroup.subtree_control")).unwrap_or_default();
        if subtree.split_whitespace().any(|w| w == "pids") && writable_dir(m) {
            return ProcessLimit::Cgroup {
                version: 2,
                parent: m.clone(),
                max,
            };
        }
    }
    if let (Some(m), Some(c)) = (&mount_v1, &own_v1) {
        let dir = join(m, c);
        if writable_dir(&dir) {
            return ProcessLimit::Cgroup {
                version: 1,
                parent: dir,
                max,
            };
        }
    }
    if is_root() {
        return ProcessLimit::Unbounded {
            reason: "no writable pids cgroup, and RLIMIT_NPROC does not bind root".into(),
        };
    }
    let userns = read_small("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0)
        > 0
        && read_small("/proc/sys/kernel/unprivileged_userns_clone")
            .map(|s| s.trim() != "0")
            .unwrap_or(true);
    if userns {
        ProcessLimit::UserNamespaceRlimit { max }
    } else {
        ProcessLimit::Unbounded {
            reason: "no writable pids cgroup and no unprivileged user namespaces (RLIMIT_NPROC would count every process of this user)".into(),
        }
    }
}

/// Removes run cgroups left by vibesys processes that no longer exist
/// (a supervisor killed outright cannot remove its own). Only empty ones
/// go: `rmdir` refuses a cgroup that still holds processes.
fn sweep_stale(parent: &Path) {
    let Ok(names) = crate::fsread::dir_names(parent) else {
        return;
    };
    for name in names {
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vibesys-"))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir(parent.join(&name));
        }
    }
}

/// The pids cgroup of one run: created before the launch, joined by the
/// launched child, emptied and removed by [`PidsCgroup::kill_and_remove`].
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    version: u8,
}

fn os(what: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Os { what, source }
}

impl PidsCgroup {
    /// Creates `parent/vibesys-PID-N` with `pids.max = max`.
    pub fn create(parent: &Path, version: u8, max: u64) -> Result<Self, SandboxError> {
        if version == 2 {
            let subtree = parent.join("cgroup.subtree_control");
            if !read_small(&subtree)
                .unwrap_or_default()
                .split_whitespace()
                .any(|w| w == "pids")
            {
                std::fs::write(&subtree, "+pids").map_err(os(format!(
                    "enabling the pids controller in {}",
                    subtree.display()
                )))?;
            }
        }
        sweep_stale(parent);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = parent.join(format!("vibesys-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&dir).map_err(os(format!("creating the cgroup {}", dir.display())))?;
        let cg = Self { dir, version };
        std::fs::write(cg.dir.join("pids.max"), max.to_string())
            .map_err(os(format!("setting pids.max in {}", cg.dir.display())))?;
        Ok(cg)
    }

    /// The cgroup hierarchy's version (1 or 2).
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The run's cgroup directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file the launched child writes `0` into to join: in v1 the
    /// `tasks` file (the child is single-threaded, and moving one thread
    /// skips the global threadgroup lock, whose RCU synchronisation costs
    /// ~10 ms per launch), in v2 `cgroup.procs`.
    pub fn join_file(&self) -> Result<std::fs::File, SandboxError> {
        let name = if self.version == 1 {
            "tasks"
        } else {
            "cgroup.procs"
        };
        let path = self.dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(os(format!("opening {}", path.display())))
    }

    fn pids(&self) -> Vec<i32> {
        read_small(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills every process left in the cgroup, reaps what was reparented
    /// to us, and removes the cgroup (bounded: gives up after ~5 s).
    ///
    /// A killed process leaves the cgroup only at the end of its exit
    /// (after its namespaces are torn down: bwrap's pid 1 is usually still
    /// exiting when bwrap returns), so before each retry of the removal
    /// this waits for a killed process to exit (its pidfd turns readable;
    /// at most 1 ms per round), or pauses 20 us doubling to 1 ms when no
    /// process is listed or pidfds are missing: a launch waits about as
    /// long as that exit takes, not a whole millisecond more.
    pub fn kill_and_remove(self) {
        let kill_file = self.dir.join("cgroup.kill");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut pause = std::time::Duration::from_micros(20);
        loop {
            if self.version == 2 && kill_file.exists() {
                let _ = std::fs::write(&kill_file, "1");
            }
            let killed = self.pids();
            for pid in &killed {
                // SAFETY: kill has no memory effects; the pid belongs to
                // this run's cgroup (a process cannot leave it by itself).
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            super::tree::reap_exited();
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) if std::time::Instant::now() < deadline => {
                    if !killed.first().is_some_and(|pid| wait_exit(*pid)) {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(1));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        cgroup = %self.dir.display(),
                        "could not remove the run's cgroup: {e}"
                    );
                    return;
                }
            }
        }
    }
}

/// Waits at most 1 ms for `pid` to exit, through a pidfd (readable once
/// it has). False when no pidfd could be opened for it (a kernel before
/// 5.3, or the process is already gone): the caller pauses instead.
fn wait_exit(pid: i32) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::process::{Pid, PidfdFlags, pidfd_open};
    let Some(fd) = Pid::from_raw(pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok()) else {
        return false;
    };
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let _ = poll(
        &mut fds,
        Some(&Timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        }),
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the conventional places hold a hierarchy, the mount table
    /// says the same.
    #[test]
    fn the_statfs_shortcut_agrees_with_the_mount_table() {
        let table = mount_table();
        if let Some((v2, v1)) = conventional_mounts() {
            if v2.is_some() {
                assert_eq!(v2, table.0);
            }
            if v1.is_some() {
                assert_eq!(v1, table.1);
            }
        }
        let (v2, v1) = mounts();
        assert!(v2 == table.0 || v2.is_none() || table.0.is_none());
        assert!(v1 == table.1 || v1.is_none() || table.1.is_none());
    }
}
