//! Which entries of a fresh `/proc` the bwrap plan binds read-only, by
//! rule rather than by list.
//!
//! The rule: every entry right below `/proc` except the per-process ones
//! (the numbered directories, `self`, `thread-self`: each process's own
//! files, which it needs) and symlinks (`mounts`, `net`: they lead into
//! the per-process ones) is covered when it is a file with a write bit in
//! its mode, or a directory holding such a file at any depth. Root inside
//! the sandbox is uid 0 of the host when vibesys runs as root, and the
//! owner's write bit is all it needs to write a root-owned file, with or
//! without capabilities: so the mode decides, not who runs the scan. A
//! directory that cannot be walked (unreadable, or more than
//! [`WALK_LIMIT`] entries) is covered too. Nothing right below `/proc` is
//! needed writable by a confined command.
//!
//! The entries bwrap covers itself ([`PROC_COVERED_BY_BWRAP`]) are left
//! out: each bind costs bwrap a mount and a read of the whole mount table.
//! The scan reads the host's `/proc`: the entries outside the per-process
//! ones are the same in the sandbox's fresh instance (the kernel's, not a
//! namespace's).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The entries of `/proc` bwrap itself (its fixed cover list, in every
/// release; the plan needs 0.8 or later for `--disable-userns`) binds
/// read-only right after mounting `/proc`, whenever the sandbox could
/// write them: it skips one only when `access(W_OK)` fails with every
/// capability of the new user namespace (EACCES, ENOENT or EROFS; any
/// other error stops it), so the command, with none, cannot write it
/// either. `/proc/sys` is not among them: a sysctl directory never passes
/// that test, though uid 0 may write files below it.
pub const PROC_COVERED_BY_BWRAP: &[&str] = &["/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// The most entries walked below one top-level directory of `/proc`
/// before it is covered unseen.
pub const WALK_LIMIT: usize = 20_000;

/// Any write bit.
const WRITE_BITS: u32 = 0o222;

/// The entries of `proc` (the host's `/proc`) that the rule covers and
/// bwrap does not, as paths below `/proc`, sorted. Empty where `proc`
/// cannot be listed (not Linux).
pub fn read_only_entries(proc: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    let mut covered = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.bytes().all(|b| b.is_ascii_digit()) || name == "self" || name == "thread-self" {
            continue;
        }
        let target = Path::new("/proc").join(name);
        if PROC_COVERED_BY_BWRAP.iter().any(|c| Path::new(c) == target) {
            continue;
        }
        let Ok(ft) = entry.file_type() else {
            continue;
        };
        let writable = if ft.is_dir() {
            holds_writable(&entry.path())
        } else if ft.is_symlink() {
            false
        } else {
            entry
                .metadata()
                .is_ok_and(|m| m.permissions().mode() & WRITE_BITS != 0)
        };
        if writable {
            covered.push(target);
        }
    }
    covered.sort();
    covered
}

/// Whether `dir` holds a non-directory with a write bit, at any depth (no
/// symlink followed); true as well when it cannot be walked whole.
fn holds_writable(dir: &Path) -> bool {
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            return true;
        };
        for entry in entries {
            let Ok(entry) = entry else {
                return true;
            };
            seen += 1;
            if seen > WALK_LIMIT {
                return true;
            }
            let Ok(ft) = entry.file_type() else {
                return true;
            };
            if ft.is_dir() {
                stack.push(entry.path());
            } else if !ft.is_symlink()
                && entry
                    .metadata()
                    .is_ok_and(|m| m.permissions().mode() & WRITE_BITS != 0)
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// The rule on a stand-in tree (the real `/proc` is tested end to end).
    #[test]
    fn the_rule_covers_writable_entries_and_nothing_per_process() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        for d in [
            "1/fd",
            "self",
            "sys/kernel",
            "acpi/x",
            "pressure",
            "irq",
            "tty",
        ] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        for (f, m) in [
            ("1/oom_score_adj", 0o644),
            ("self/comm", 0o644),
            ("sys/kernel/core_pattern", 0o644),
            ("acpi/x/info", 0o444),
            ("pressure/cpu", 0o666),
            ("irq/default_smp_affinity", 0o644),
            ("tty/drivers", 0o444),
            ("mtrr", 0o644),
            ("cpuinfo", 0o444),
            ("sysrq-trigger", 0o200),
        ] {
            std::fs::write(p.join(f), "").unwrap();
            mode(&p.join(f), m);
        }
        std::os::unix::fs::symlink("self/mounts", p.join("mounts")).unwrap();
        let got = read_only_entries(p);
        let want: Vec<PathBuf> = ["/proc/mtrr", "/proc/pressure", "/proc/sys"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_directory_past_the_walk_limit_is_covered() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big");
        std::fs::create_dir(&big).unwrap();
        // WALK_LIMIT + 1 entries, none writable: covered unseen.
        let mut d = big.clone();
        for i in 0..=WALK_LIMIT {
            if i % 1000 == 0 {
                d = big.join(format!("d{i}"));
                std::fs::create_dir(&d).unwrap();
                continue;
            }
            let f = d.join(i.to_string());
            std::fs::write(&f, "").unwrap();
            mode(&f, 0o444);
        }
        assert!(holds_writable(&big));
        assert!(!holds_writable(&big.join("d0")));
    }
}
