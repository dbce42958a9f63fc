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

/// `(arg & mask) == value`. A mask within the low 32 bits (a mode, open
/// flags) is compared as a Dword: the high word of a Qword compare,
/// `(high & 0) == 0`, always holds, so the rule is the same in fewer
/// instructions (every instruction costs the kernel at install, where it
/// is checked, translated and JIT-compiled, and at every system call).
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, SandboxError> {
    let len = if mask >> 32 == 0 {
        SeccompCmpArgLen::Dword
    } else {
        SeccompCmpArgLen::Qword
    };
    SeccompCondition::new(arg, len, SeccompCmpOp::MaskedEq(mask), value).map_err(seccomp_error)
}

/// The single bits of [`SETID_BITS`] (S_ISUID, S_ISGID). A mode carries a
/// set-id bit (its `mode & SETID_BITS` is one of
/// [`crate::syscall_rules::SETID_VALUES`]) exactly when one of these bits
/// is set in it: one rule per bit refuses the same modes as one rule per
/// value, with fewer rules.
fn setid_single_bits() -> impl Iterator<Item = u64> {
    (0..64)
        .map(|b| 1u64 << b)
        .filter(|bit| SETID_BITS & bit != 0)
}

/// The rules refusing a set-id bit in a mode argument ([`SETID_RULES`]).
fn setid_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SandboxError> {
    for rule in SETID_RULES.iter().filter(|r| r.applies_here()) {
        let list = rules.entry(number(rule.name)?).or_default();
        for bit in setid_single_bits() {
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
    let program: BpfProgram = compile(shared_rules()?, libc::EPERM)?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    Ok(bytes)
}

/// The rules of the shared program (syscall number to refusing rules).
fn shared_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
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
    Ok(rules)
}

/// Compiles `rules` to classic BPF: a matching rule returns `errno`,
/// anything else is allowed (another architecture is killed).
fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: libc::c_int,
) -> Result<BpfProgram, SandboxError> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        target_arch()?,
    )
    .map_err(seccomp_error)?;
    filter.try_into().map_err(seccomp_error)
}

// ---------------------------------------------------------------------------
// Socket rules of the Landlock launcher (compiled on their own and chained
// after the program above into one program, so both backends share that
// program unchanged).
// ---------------------------------------------------------------------------

/// Which sockets the Landlock launcher's socket rules refuse.
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

/// The largest classic BPF program the kernel accepts (`BPF_MAXINSNS`).
const MAX_INSTRUCTIONS: usize = 4096;

const RET_ALLOW: libc::sock_filter = libc::sock_filter {
    code: (libc::BPF_RET | libc::BPF_K) as u16,
    jt: 0,
    jf: 0,
    k: libc::SECCOMP_RET_ALLOW,
};

/// `first` followed by `second` as one program: every "allow" verdict of
/// `first` becomes a jump to the start of `second`, so a system call
/// `first` refuses gets `first`'s verdict and any other gets `second`'s.
/// When no system call is refused by both (their rules name disjoint
/// syscalls; both kill another architecture alike) that is exactly the
/// verdict of the two installed one after the other, from one
/// installation and one filter run per system call instead of two.
/// `None` when the result would be too long for the kernel.
fn chain(
    first: &[libc::sock_filter],
    second: &[libc::sock_filter],
) -> Option<Vec<libc::sock_filter>> {
    if first.len() + second.len() > MAX_INSTRUCTIONS {
        return None;
    }
    let ja = (libc::BPF_JMP | libc::BPF_JA) as u16;
    let mut out: Vec<libc::sock_filter> = first
        .iter()
        .enumerate()
        .map(|(i, ins)| {
            if (ins.code, ins.k) == (RET_ALLOW.code, RET_ALLOW.k) {
                libc::sock_filter {
                    code: ja,
                    jt: 0,
                    jf: 0,
                    k: (first.len() - i - 1) as u32,
                }
            } else {
                *ins
            }
        })
        .collect();
    out.extend_from_slice(second);
    Some(out)
}

fn to_libc(p: BpfProgram) -> Vec<libc::sock_filter> {
    p.into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// The Landlock launcher's filters, in installation order: the shared
/// program with the socket rules (when they refuse anything) chained
/// after it as one program (see [`chain`]); two stacked programs, the
/// shared one first, should the rules ever overlap or not fit in one.
pub fn landlock_programs(r: SocketRules) -> Result<Vec<Vec<libc::sock_filter>>, SandboxError> {
    let shared = program()?;
    let sockets = socket_rules(r)?;
    if sockets.is_empty() {
        return Ok(vec![shared]);
    }
    let overlap = shared_rules()?.keys().any(|nr| sockets.contains_key(nr));
    let sockets = to_libc(compile(sockets, libc::EACCES)?);
    if !overlap && let Some(one) = chain(&shared, &sockets) {
        return Ok(vec![one]);
    }
    Ok(vec![shared, sockets])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod socket_tests {
    use super::*;

    /// The socket filter, compiled; `None` when `r` refuses nothing.
    fn socket_program(r: SocketRules) -> Result<Option<BpfProgram>, SandboxError> {
        let rules = socket_rules(r)?;
        if rules.is_empty() {
            return Ok(None);
        }
        Ok(Some(compile(rules, libc::EACCES)?))
    }

    /// A classic BPF interpreter for what seccompiler emits (loads of
    /// `seccomp_data` words, AND, conditional jumps, JA, RET): the
    /// verdict of `prog` for a system call on this architecture.
    fn run(prog: &[libc::sock_filter], nr: i64, args: [u64; 6]) -> u32 {
        let arch = match target_arch().unwrap() {
            TargetArch::x86_64 => 0xc000_003e_u32,
            TargetArch::aarch64 => 0xc000_00b7,
            TargetArch::riscv64 => 0xc000_00f3,
        };
        let mut data = Vec::new();
        data.extend_from_slice(&(nr as i32).to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for a in args {
            data.extend_from_slice(&a.to_ne_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = prog[pc];
            let k = ins.k;
            let code = u32::from(ins.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let o = k as usize;
                    acc = u32::from_ne_bytes(data[o..o + 4].try_into().unwrap());
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += k as usize,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        x if x == libc::BPF_JEQ => acc == k,
                        x if x == libc::BPF_JGT => acc > k,
                        x if x == libc::BPF_JGE => acc >= k,
                        x if x == libc::BPF_JSET => acc & k != 0,
                        _ => panic!("unexpected jump {c:#x}"),
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                c if c == libc::BPF_RET | libc::BPF_K => return k,
                _ => panic!("unexpected instruction {code:#x}"),
            }
        }
    }

    /// The kernel's verdict for stacked filters: the most restrictive
    /// action, the newest filter winning a tie.
    fn stacked(older: u32, newer: u32) -> u32 {
        let action = |v: u32| (v & libc::SECCOMP_RET_ACTION_FULL) as i32;
        if action(older) < action(newer) {
            older
        } else {
            newer
        }
    }

    /// The shared program as it was compiled before it was compacted:
    /// Qword compares and one rule per value of `SETID_VALUES`.
    fn reference_program() -> Vec<libc::sock_filter> {
        use crate::syscall_rules::SETID_VALUES;
        let q = |arg, mask, value| {
            SeccompCondition::new(
                arg,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(mask),
                value,
            )
            .unwrap()
        };
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for name in DENIED.iter().chain([&OPENAT2]) {
            rules.insert(number(name).unwrap(), Vec::new());
        }
        for rule in SETID_RULES.iter().filter(|r| r.applies_here()) {
            let list = rules.entry(number(rule.name).unwrap()).or_default();
            for value in SETID_VALUES {
                let mode = q(rule.mode_arg, SETID_BITS, value);
                match rule.flags_arg {
                    None => list.push(SeccompRule::new(vec![mode]).unwrap()),
                    Some(flags_arg) => {
                        for flag in rule.creating_flags() {
                            let conds = vec![q(flags_arg, *flag, *flag), mode.clone()];
                            list.push(SeccompRule::new(conds).unwrap());
                        }
                    }
                }
            }
        }
        let mut ioctl_rules = Vec::new();
        for (_, request) in DENIED_IOCTLS {
            let cond =
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)
                    .unwrap();
            ioctl_rules.push(SeccompRule::new(vec![cond]).unwrap());
        }
        rules.insert(libc::SYS_ioctl, ioctl_rules);
        to_libc(compile(rules, libc::EPERM).unwrap())
    }

    /// System calls and argument values that exercise every rule.
    fn samples() -> Vec<(i64, [u64; 6])> {
        let mut nrs: Vec<i64> = DENIED
            .iter()
            .chain([&OPENAT2])
            .map(|n| number(n).unwrap())
            .collect();
        nrs.extend(
            SETID_RULES
                .iter()
                .filter(|r| r.applies_here())
                .map(|r| number(r.name).unwrap()),
        );
        nrs.extend([
            libc::SYS_ioctl,
            libc::SYS_read,
            libc::SYS_socket,
            libc::SYS_socketpair,
            libc::SYS_listen,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_sendmmsg,
            libc::SYS_connect,
        ]);
        let values: [u64; 14] = [
            0,
            1,
            2,
            3,
            10,
            0o755,
            0o1777,
            0o2755,
            0o4755,
            0o6755,
            0o7777,
            (1 << 40) | 0o4000,
            libc::O_CREAT as u64 | libc::O_RDWR as u64,
            0o20_200_000 | libc::MSG_FASTOPEN as u64,
        ];
        let extra: [u64; 6] = [0x5412, 0x541c, 0x1_0000_5412, 0o100, 0o20_200_000, 6];
        let mut out = Vec::new();
        for nr in nrs {
            for a in values.iter().chain(&extra) {
                for b in values.iter().chain(&extra) {
                    for c in &values {
                        out.push((nr, [*a, *b, *c, *a, 0, 0]));
                        out.push((nr, [*c, *a, *b, *b, 0, 0]));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_compacted_shared_program_refuses_exactly_what_it_did() {
        let (now, before) = (program().unwrap(), reference_program());
        assert!(
            now.len() < before.len(),
            "{} >= {}",
            now.len(),
            before.len()
        );
        for (nr, args) in samples() {
            assert_eq!(
                run(&now, nr, args),
                run(&before, nr, args),
                "nr {nr} args {args:?}"
            );
        }
        // And it refuses what it must.
        let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
        assert_eq!(run(&now, libc::SYS_ptrace, [0; 6]), eperm);
        assert_eq!(
            run(&now, libc::SYS_fchmodat, [0, 0, 0o2755, 0, 0, 0]),
            eperm
        );
        assert_eq!(
            run(&now, libc::SYS_fchmodat, [0, 0, 0o755, 0, 0, 0]),
            libc::SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&now, libc::SYS_ioctl, [0, 0x5412, 0, 0, 0, 0]), eperm);
    }

    #[test]
    fn the_chained_program_gives_the_verdict_of_the_stacked_filters() {
        for (deny_unix, deny_network) in [(true, false), (false, true), (true, true)] {
            let r = SocketRules {
                deny_unix,
                deny_network,
            };
            let programs = landlock_programs(r).unwrap();
            assert_eq!(programs.len(), 1, "one program to install");
            let one = &programs[0];
            assert!(one.len() <= MAX_INSTRUCTIONS);
            let shared = program().unwrap();
            let sockets = to_libc(socket_program(r).unwrap().unwrap());
            for (nr, args) in samples() {
                let want = stacked(run(&shared, nr, args), run(&sockets, nr, args));
                assert_eq!(run(one, nr, args), want, "{r:?} nr {nr} args {args:?}");
            }
            let af_unix = [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
            let unix_verdict = run(one, libc::SYS_socket, af_unix);
            assert_eq!(
                unix_verdict == libc::SECCOMP_RET_ERRNO | libc::EACCES as u32,
                // --no-network refuses every family but IPv4 and IPv6.
                deny_unix || deny_network,
                "{r:?}"
            );
        }
    }

    #[test]
    fn socket_filters_compile_and_stack_on_the_shared_program() {
        let none = SocketRules {
            deny_unix: false,
            deny_network: false,
        };
        assert!(socket_program(none).unwrap().is_none());
        assert_eq!(landlock_programs(none).unwrap().len(), 1);
        assert_eq!(
            landlock_programs(none).unwrap()[0].len() * 8,
            program_bytes().unwrap().len()
        );
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
        assert_eq!(programs.len(), 1);
        assert_eq!(
            programs[0].len() * 8,
            program_bytes().unwrap().len() + a.len() * 8
        );
        // A classic BPF program holds at most 4096 instructions.
        assert!(programs.iter().all(|p| p.len() <= 4096));
    }
}
