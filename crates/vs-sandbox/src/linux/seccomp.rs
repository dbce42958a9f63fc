//! The seccomp filter bwrap installs, compiled from the shared rules in
//! [`crate::syscall_rules`]: deny the syscalls that let a confined process
//! reach into others or the terminal, and every mode with a set-id bit.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::SandboxError;
use crate::syscall_rules::{DENIED, DENIED_IOCTLS, OPENAT2, SETID_BITS, SETID_RULES};

/// The syscall number of a rule's name on this architecture; `None` for
/// a name this architecture does not have (x86_64-only legacy calls).
fn syscall_number(name: &str) -> Option<libc::c_long> {
    Some(match name {
        "ptrace" => libc::SYS_ptrace,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "bpf" => libc::SYS_bpf,
        "userfaultfd" => libc::SYS_userfaultfd,
        "fchmod" => libc::SYS_fchmod,
        "fchmodat" => libc::SYS_fchmodat,
        // Added in Linux 6.6 with the same number on every architecture.
        "fchmodat2" => 452,
        "mknodat" => libc::SYS_mknodat,
        "openat" => libc::SYS_openat,
        "openat2" => libc::SYS_openat2,
        #[cfg(target_arch = "x86_64")]
        "chmod" => libc::SYS_chmod,
        #[cfg(target_arch = "x86_64")]
        "creat" => libc::SYS_creat,
        #[cfg(target_arch = "x86_64")]
        "mknod" => libc::SYS_mknod,
        #[cfg(target_arch = "x86_64")]
        "open" => libc::SYS_open,
        _ => return None,
    })
}

fn number(name: &str) -> Result<i64, SandboxError> {
    syscall_number(name).ok_or_else(|| seccomp_error(format!("no syscall number for {name}")))
}

/// `arg & mask == value` on the argument's low 32 bits: every mask here
/// (set-id bits, `O_CREAT`, `O_TMPFILE`) lies within them, so the high
/// word is never compared (a 64-bit comparison would test `hi & 0 == 0`,
/// always true, at twice the instructions).
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, SandboxError> {
    if mask > u64::from(u32::MAX) || value & !mask != 0 {
        return Err(seccomp_error(format!(
            "mask {mask:#o} (value {value:#o}) does not fit the argument's low 32 bits"
        )));
    }
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(seccomp_error)
}

/// The rules refusing a set-id bit in a mode argument ([`SETID_RULES`]):
/// one rule per bit of [`SETID_BITS`] (`mode & bit == bit`), which
/// together refuse exactly the modes whose set-id bits are one of
/// `SETID_VALUES` (any of them set), with two rules instead of three. A
/// shorter program costs less to load (bwrap loads it twice per launch)
/// and to run on every system call of the command.
fn setid_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SandboxError> {
    let bits = (0..u64::BITS)
        .map(|i| 1u64 << i)
        .filter(|bit| SETID_BITS & bit != 0);
    for rule in SETID_RULES.iter().filter(|r| r.applies_here()) {
        let list = rules.entry(number(rule.name)?).or_default();
        for bit in bits.clone() {
            let mode = masked(rule.mode_arg, bit, bit)?;
            match rule.flags_arg {
                None => list.push(SeccompRule::new(vec![mode]).map_err(seccomp_error)?),
                Some(flags_arg) => {
                    for flag in rule.creating_flags() {
                        let creates = masked(flags_arg, *flag, *flag)?;
                        let conds = vec![creates, mode.clone()];
                        list.push(SeccompRule::new(conds).map_err(seccomp_error)?);
                    }
                }
            }
        }
    }
    Ok(())
}

fn target_arch() -> Result<TargetArch, SandboxError> {
    if cfg!(target_arch = "x86_64") {
        Ok(TargetArch::x86_64)
    } else if cfg!(target_arch = "aarch64") {
        Ok(TargetArch::aarch64)
    } else if cfg!(target_arch = "riscv64") {
        Ok(TargetArch::riscv64)
    } else {
        Err(SandboxError::UnsupportedPlatform {
            backend: "seccomp (this CPU architecture)",
        })
    }
}

fn seccomp_error(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Os {
        what: "building the seccomp filter".into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Compiles the filter to classic BPF, as bytes in native order (the
/// format `bwrap --seccomp FD` reads).
pub fn program_bytes() -> Result<Vec<u8>, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for name in DENIED.iter().chain([&OPENAT2]) {
        rules.insert(number(name)?, Vec::new());
    }
    setid_rules(&mut rules)?;
    let mut ioctl_rules = Vec::new();
    for (_, request) in DENIED_IOCTLS {
        let cond = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)
            .map_err(seccomp_error)?;
        ioctl_rules.push(SeccompRule::new(vec![cond]).map_err(seccomp_error)?);
    }
    rules.insert(libc::SYS_ioctl, ioctl_rules);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(seccomp_error)?;
    let program: BpfProgram = filter.try_into().map_err(seccomp_error)?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    Ok(bytes)
}

// ---------------------------------------------------------------------------
// Socket rules of the Landlock launcher (a second filter, stacked on the
// program above, so both backends share that program unchanged).
// ---------------------------------------------------------------------------

/// Which sockets the Landlock launcher's second filter refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketRules {
    /// Refuse `socket(AF_UNIX, ...)`: without a Landlock right for Unix
    /// sockets, a named socket anywhere (the Docker socket, the D-Bus
    /// system bus, a tmux server in /tmp) would be reachable by path.
    /// `socketpair` stays allowed.
    pub deny_unix: bool,
    /// `--no-network`: refuse every socket Landlock's TCP rules do not
    /// govern (anything but TCP over IPv4/IPv6: UDP, MPTCP, SCTP, raw,
    /// packet, netlink, ...), `listen` (an unbound socket would be bound
    /// to an ephemeral port without a Landlock check) and TCP Fast Open
    /// sends (which connect without `connect`); the list reports quote is
    /// [`crate::landlock::UNGOVERNED_NETWORK`].
    pub deny_network: bool,
}

const SOCK_TYPE_MASK: u64 = 0xf;
const TCP_PROTOCOLS: [u64; 2] = [0, libc::IPPROTO_TCP as u64];

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(seccomp_error)
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, SandboxError> {
    SeccompRule::new(conds).map_err(seccomp_error)
}

/// The rules of the socket filter (syscall number to refusing rules);
/// empty when nothing is refused.
fn socket_rules(r: SocketRules) -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let inet = [libc::AF_INET as u64, libc::AF_INET6 as u64];
    let mut socket = Vec::new();
    let mut rules = BTreeMap::new();
    if r.deny_unix {
        socket.push(rule(vec![cond(0, Eq, libc::AF_UNIX as u64)?])?);
    }
    if r.deny_network {
        socket.push(rule(vec![cond(0, Ne, inet[0])?, cond(0, Ne, inet[1])?])?);
        for family in inet {
            let [p0, p1] = TCP_PROTOCOLS;
            socket.push(rule(vec![
                cond(0, Eq, family)?,
                cond(2, Ne, p0)?,
                cond(2, Ne, p1)?,
            ])?);
            for ty in (0..=SOCK_TYPE_MASK).filter(|t| *t != libc::SOCK_STREAM as u64) {
                socket.push(rule(vec![
                    cond(0, Eq, family)?,
                    cond(1, MaskedEq(SOCK_TYPE_MASK), ty)?,
                ])?);
            }
        }
        rules.insert(
            libc::SYS_socketpair,
            vec![rule(vec![cond(0, Ne, libc::AF_UNIX as u64)?])?],
        );
        rules.insert(libc::SYS_listen, Vec::new());
        let fastopen = libc::MSG_FASTOPEN as u64;
        for (nr, flags_arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            rules.insert(
                nr,
                vec![rule(vec![cond(flags_arg, MaskedEq(fastopen), fastopen)?])?],
            );
        }
    }
    if !socket.is_empty() {
        rules.insert(libc::SYS_socket, socket);
    }
    Ok(rules)
}

/// The socket filter, compiled; `None` when `r` refuses nothing.
pub fn socket_program(r: SocketRules) -> Result<Option<BpfProgram>, SandboxError> {
    let rules = socket_rules(r)?;
    if rules.is_empty() {
        return Ok(None);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        target_arch()?,
    )
    .map_err(seccomp_error)?;
    Ok(Some(filter.try_into().map_err(seccomp_error)?))
}

/// [`program_bytes`] decoded back into instructions, to install in
/// this process rather than hand to bwrap.
pub fn program() -> Result<Vec<libc::sock_filter>, SandboxError> {
    Ok(program_bytes()?
        .chunks_exact(8)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}

/// The Landlock launcher's filters, in installation order: the shared
/// program, then the socket rules (when they refuse anything).
pub fn landlock_programs(r: SocketRules) -> Result<Vec<Vec<libc::sock_filter>>, SandboxError> {
    let mut out = vec![program()?];
    if let Some(p) = socket_program(r)? {
        out.push(
            p.into_iter()
                .map(|i| libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect(),
        );
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod socket_tests {
    use super::*;

    #[test]
    fn socket_filters_compile_and_stack_on_the_shared_program() {
        let none = SocketRules {
            deny_unix: false,
            deny_network: false,
        };
        assert!(socket_program(none).unwrap().is_none());
        assert_eq!(landlock_programs(none).unwrap().len(), 1);
        let unix = SocketRules {
            deny_unix: true,
            deny_network: false,
        };
        let all = SocketRules {
            deny_unix: true,
            deny_network: true,
        };
        let (u, a) = (
            socket_program(unix).unwrap().unwrap(),
            socket_program(all).unwrap().unwrap(),
        );
        assert!(a.len() > u.len());
        let programs = landlock_programs(all).unwrap();
        assert_eq!(programs.len(), 2);
        assert_eq!(programs[0].len() * 8, program_bytes().unwrap().len());
        // A classic BPF program holds at most 4096 instructions.
        assert!(programs.iter().all(|p| p.len() <= 4096));
    }
}
