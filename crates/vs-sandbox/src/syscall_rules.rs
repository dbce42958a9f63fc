//! The system-call rules every Linux backend applies, as platform-neutral
//! data: bwrap and Landlock compile them to BPF (`linux::seccomp`), the
//! Docker backend writes them into the container's seccomp profile. One
//! list, so the backends cannot drift apart.

use serde_json::{Value, json};

/// Set-user-ID and set-group-ID mode bits (`S_ISUID | S_ISGID`).
pub const SETID_BITS: u64 = 0o6000;

/// The mode values that carry a set-id bit: each is refused.
pub const SETID_VALUES: [u64; 3] = [0o4000, 0o2000, 0o6000];

/// `O_CREAT` (the same value on every Linux architecture we build for).
pub const O_CREAT: u64 = 0o100;

/// `O_TMPFILE` (`__O_TMPFILE | O_DIRECTORY`), as `open(2)` tests it.
pub const O_TMPFILE: u64 = 0o20_200_000;

/// Syscalls refused outright with `EPERM`: they reach into other
/// processes, the kernel's key store, BPF or io_uring.
pub const DENIED: &[&str] = &[
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "userfaultfd",
];

/// A syscall whose mode argument may not carry [`SETID_BITS`]: root inside
/// a sandbox writes real files on the host, and a set-uid-root file left in
/// the project would be root for any local user who runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetidRule {
    /// The syscall's name.
    pub name: &'static str,
    /// The index of its mode argument.
    pub mode_arg: u8,
    /// For the `open` family: the index of the flags argument. The mode is
    /// only looked at when the flags create a file (`O_CREAT`,
    /// `O_TMPFILE`); otherwise it is not a mode at all.
    pub flags_arg: Option<u8>,
    /// Only on x86_64 (the legacy entry points newer ABIs dropped).
    pub x86_64_only: bool,
}

/// Every way to give a file a mode: chmod family, creation, mknod.
pub const SETID_RULES: &[SetidRule] = &[
    SetidRule::plain("chmod", 1, true),
    SetidRule::plain("fchmod", 1, false),
    SetidRule::plain("fchmodat", 2, false),
    SetidRule::plain("fchmodat2", 2, false),
    SetidRule::plain("creat", 1, true),
    SetidRule::plain("mknod", 1, true),
    SetidRule::plain("mknodat", 2, false),
    SetidRule::open("open", 1, 2, true),
    SetidRule::open("openat", 2, 3, false),
];

/// `openat2` takes its mode inside a structure seccomp cannot read: it is
/// refused whole (glibc, musl, Go and Rust's std never call it).
pub const OPENAT2: &str = "openat2";

impl SetidRule {
    const fn plain(name: &'static str, mode_arg: u8, x86_64_only: bool) -> Self {
        Self {
            name,
            mode_arg,
            flags_arg: None,
            x86_64_only,
        }
    }

    const fn open(name: &'static str, flags_arg: u8, mode_arg: u8, x86_64_only: bool) -> Self {
        Self {
            name,
            mode_arg,
            flags_arg: Some(flags_arg),
            x86_64_only,
        }
    }

    /// The rule applies to this build's architecture.
    pub fn applies_here(&self) -> bool {
        !self.x86_64_only || cfg!(target_arch = "x86_64")
    }

    /// The flag masks that make the mode argument meaningful: none for
    /// the chmod family, `O_CREAT` and `O_TMPFILE` for the open family.
    pub fn creating_flags(&self) -> &'static [u64] {
        match self.flags_arg {
            Some(_) => &[O_CREAT, O_TMPFILE],
            None => &[],
        }
    }
}

/// `ioctl` requests refused: terminal input injection and console control.
pub const DENIED_IOCTLS: &[(&str, u64)] = &[("TIOCSTI", 0x5412), ("TIOCLINUX", 0x541c)];

/// Syscalls the Docker profile refuses beyond [`DENIED`]: what Docker's
/// default profile refuses and a container without capabilities does not
/// need. The custom profile replaces Docker's default one, so it lists them.
pub const DOCKER_EXTRA_DENIED: &[&str] = &[
    "acct",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "init_module",
    "iopl",
    "ioperm",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "name_to_handle_at",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "quotactl",
    "reboot",
    "settimeofday",
    "swapoff",
    "swapon",
    "syslog",
    "umount2",
    "vhangup",
];

/// Syscalls that create or enter namespaces, refused outright (`EPERM`)
/// by the Landlock program and the Docker profile, as Docker's default
/// profile does: a new user namespace gives back every capability inside
/// it, and with them raw, packet and `NETLINK_NETFILTER` sockets in a new
/// network namespace, the usual first step of kernel exploits (nf_tables
/// and its kin). bwrap disables nested user namespaces itself
/// (`--disable-userns`) and holds no capability for the others.
pub const NAMESPACE_DENIED: &[&str] = &["unshare", "setns"];

/// `CLONE_NEWUSER` and the other namespace flags of `clone(2)`: a `clone`
/// with any of them is refused (`EPERM`) where [`NAMESPACE_DENIED`] is.
pub const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

/// `clone3` takes its flags inside a structure seccomp cannot read, so it
/// is refused whole with `ENOSYS`, as Docker and Podman do: the C
/// libraries (glibc 2.34+, musl) and Go then fall back to `clone(2)`,
/// whose flags the filter does read.
pub const CLONE3: &str = "clone3";

const EPERM: u64 = 1;
const ENOSYS: u64 = 38;

fn masked_eq(index: u8, mask: u64, value: u64) -> Value {
    json!({ "index": index, "value": mask, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ" })
}

fn errno_rule(names: &[&str], errno: u64, args: Vec<Value>) -> Value {
    let mut rule = json!({ "names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": errno });
    if !args.is_empty() {
        rule["args"] = Value::Array(args);
    }
    rule
}

/// The seccomp profile of a vibesys container, in the Engine's JSON format
/// (`--security-opt seccomp=<json>`): everything allowed but the rules
/// above. Canonical (the same bytes every time), so `policy show` can
/// print it and tests can compare it.
pub fn docker_seccomp_profile() -> String {
    let mut syscalls = Vec::new();
    let mut denied: Vec<&str> = DENIED
        .iter()
        .chain(DOCKER_EXTRA_DENIED)
        .chain(NAMESPACE_DENIED)
        .copied()
        .collect();
    denied.push(OPENAT2);
    denied.sort_unstable();
    syscalls.push(errno_rule(&denied, EPERM, Vec::new()));
    syscalls.push(errno_rule(&[CLONE3], ENOSYS, Vec::new()));
    // One rule per namespace flag: refused when that bit is set.
    let mut flag = 1u64;
    while flag <= CLONE_NAMESPACE_FLAGS {
        if CLONE_NAMESPACE_FLAGS & flag != 0 {
            syscalls.push(errno_rule(
                &["clone"],
                EPERM,
                vec![masked_eq(0, flag, flag)],
            ));
        }
        flag <<= 1;
    }
    for rule in SETID_RULES {
        for value in SETID_VALUES {
            let mode = masked_eq(rule.mode_arg, SETID_BITS, value);
            match rule.flags_arg {
                None => syscalls.push(errno_rule(&[rule.name], EPERM, vec![mode])),
                Some(flags_arg) => {
                    for flag in rule.creating_flags() {
                        let flags = masked_eq(flags_arg, *flag, *flag);
                        syscalls.push(errno_rule(&[rule.name], EPERM, vec![flags, mode.clone()]));
                    }
                }
            }
        }
    }
    for (_, request) in DENIED_IOCTLS {
        syscalls.push(errno_rule(
            &["ioctl"],
            EPERM,
            vec![json!({ "index": 1, "value": request, "op": "SCMP_CMP_EQ" })],
        ));
    }
    json!({ "defaultAction": "SCMP_ACT_ALLOW", "syscalls": syscalls }).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_flags_hold_every_namespace() {
        // CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
        let all = 0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000;
        let all = all | 0x2000_0000 | 0x4000_0000;
        assert_eq!(CLONE_NAMESPACE_FLAGS, all);
    }

    #[test]
    fn the_docker_profile_refuses_every_setid_rule() {
        let profile: Value = serde_json::from_str(&docker_seccomp_profile()).unwrap();
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ALLOW");
        let rules = profile["syscalls"].as_array().unwrap();
        for rule in SETID_RULES {
            let n = rules.iter().filter(|r| r["names"][0] == rule.name).count();
            let expected = SETID_VALUES.len() * rule.creating_flags().len().max(1);
            assert_eq!(n, expected, "{}", rule.name);
        }
        let denied = rules[0]["names"].as_array().unwrap();
        for name in DENIED
            .iter()
            .chain(NAMESPACE_DENIED)
            .chain([&OPENAT2, &"mount"])
        {
            assert!(denied.iter().any(|d| d == name), "{name}");
        }
    }

    #[test]
    fn ioctl_numbers_match_libc() {
        #[cfg(target_os = "linux")]
        {
            #[allow(clippy::unnecessary_cast)]
            let tiocsti = libc::TIOCSTI as u64;
            assert_eq!(DENIED_IOCTLS[0].1, tiocsti);
            assert_eq!(O_CREAT, libc::O_CREAT as u64);
            assert_eq!(O_TMPFILE, libc::O_TMPFILE as u64);
        }
    }
}
