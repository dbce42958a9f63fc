//! The seccomp filter of both host backends, built from the shared rules
//! in [`crate::syscall_rules`]: deny the syscalls that let a confined
//! process reach into others or the terminal, every mode with a set-id
//! bit, and (Landlock only) namespace creation and the sockets its rules
//! cannot govern.
//!
//! The program is assembled here, not by a generic rule compiler: the
//! kernel checks, translates and JIT-compiles every instruction when a
//! filter is installed (~0.6 us each on the machines this was measured
//! on, plus ~45 us for any program), on every launch, and bwrap installs
//! it twice. A generic compiler emits one comparison chain per rule; here
//! the system call is dispatched once and the rules that test the same
//! argument share one block, so the same verdicts take a quarter of the
//! instructions. The tests run both through a BPF interpreter: every
//! verdict equals seccompiler's compilation of the same rules.

use crate::error::SandboxError;
use crate::syscall_rules::{
    CLONE_NAMESPACE_FLAGS, CLONE3, DENIED, DENIED_IOCTLS, NAMESPACE_DENIED, O_CREAT, O_TMPFILE,
    OPENAT2, SETID_BITS, SETID_RULES,
};

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
        "unshare" => libc::SYS_unshare,
        "setns" => libc::SYS_setns,
        "clone" => libc::SYS_clone,
        "clone3" => libc::SYS_clone3,
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

fn number(name: &str) -> Result<u32, SandboxError> {
    syscall_number(name)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| seccomp_error(format!("no syscall number for {name}")))
}

/// `AUDIT_ARCH_*` of this architecture: a filter for another one kills.
fn audit_arch() -> Result<u32, SandboxError> {
    if cfg!(target_arch = "x86_64") {
        Ok(0xc000_003e)
    } else if cfg!(target_arch = "aarch64") {
        Ok(0xc000_00b7)
    } else if cfg!(target_arch = "riscv64") {
        Ok(0xc000_00f3)
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

impl SocketRules {
    /// The shared program's rules only (bwrap).
    const NONE: Self = Self {
        deny_unix: false,
        deny_network: false,
    };
}

/// The shared program (bwrap's), as bytes in native order (the format
/// `bwrap --seccomp FD` reads).
pub fn program_bytes() -> Result<Vec<u8>, SandboxError> {
    Ok(to_bytes(&program()?))
}

/// The shared program, to install in this process.
pub fn program() -> Result<Vec<libc::sock_filter>, SandboxError> {
    assemble(SocketRules::NONE, Namespaces::Allowed)
}

/// The Landlock launcher's filters, in installation order: one program,
/// the shared rules, the namespace rules and its socket rules. bwrap's
/// program has no namespace rules: bwrap disables nested user namespaces
/// itself and the command holds no capability for any other.
pub fn landlock_programs(r: SocketRules) -> Result<Vec<Vec<libc::sock_filter>>, SandboxError> {
    Ok(vec![assemble(r, Namespaces::Refused)?])
}

/// Whether a program refuses namespace creation ([`NAMESPACE_DENIED`],
/// `clone` with a flag of [`CLONE_NAMESPACE_FLAGS`], and [`CLONE3`] with
/// `ENOSYS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Namespaces {
    Allowed,
    Refused,
}

fn to_bytes(program: &[libc::sock_filter]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for ins in program {
        bytes.extend_from_slice(&ins.code.to_ne_bytes());
        bytes.push(ins.jt);
        bytes.push(ins.jf);
        bytes.extend_from_slice(&ins.k.to_ne_bytes());
    }
    bytes
}

// ---------------------------------------------------------------------------
// The assembler: instructions with symbolic forward jumps.
// ---------------------------------------------------------------------------

/// A place in the program: a block, or the next instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Block(Block),
}

/// The shared blocks every rule jumps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Allow,
    Eperm,
    Eacces,
    Enosys,
    Kill,
    /// `clone` with a namespace flag refused.
    Clone,
    /// `mode & SETID_BITS` of argument N refused.
    Mode(u8),
    /// A creating `open` (flags argument, mode argument).
    Open(u8, u8),
    Ioctl,
    Socket,
    Socketpair,
    /// `MSG_FASTOPEN` in argument N refused.
    Fastopen(u8),
    Inet,
    InetProtocol,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Start of a block (no instruction).
    Label(Block),
    /// `A = seccomp_data` word at the offset.
    Load(u32),
    /// `A &= k`.
    And(u32),
    /// Conditional jump on `A == k`, `A & k != 0`, `A >= k`.
    Jeq(u32, To, To),
    Jset(u32, To, To),
    Jge(u32, To, To),
    /// Unconditional jump.
    Ja(Block),
    Ret(u32),
}

/// The low 32 bits of system call argument `n` (little endian; every
/// mask and value the rules compare lies in them, and the kernel reads
/// modes, flags, families and ioctl requests as 32-bit integers).
fn arg(n: u8) -> Op {
    let low = if cfg!(target_endian = "little") { 0 } else { 4 };
    Op::Load(16 + 8 * u32::from(n) + low)
}

const NR: Op = Op::Load(0);
const ARCH: Op = Op::Load(4);
/// x86_64's x32 ABI: the same system calls with this bit set in the
/// number. A filter matching plain numbers would let them all through.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn errno(e: libc::c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The program for the shared rules plus `sockets` and `namespaces`.
fn assemble(
    sockets: SocketRules,
    namespaces: Namespaces,
) -> Result<Vec<libc::sock_filter>, SandboxError> {
    use Block::*;
    use To::{Block as B, Next};
    let mut ops = vec![ARCH, Op::Jeq(audit_arch()?, Next, B(Kill)), NR];
    if cfg!(target_arch = "x86_64") {
        ops.push(Op::Jge(X32_SYSCALL_BIT, B(Eperm), Next));
    }
    // Dispatch on the number, once.
    for name in DENIED.iter().chain([&OPENAT2]) {
        ops.push(Op::Jeq(number(name)?, B(Eperm), Next));
    }
    let mut blocks: Vec<Block> = Vec::new();
    if namespaces == Namespaces::Refused {
        for name in NAMESPACE_DENIED {
            ops.push(Op::Jeq(number(name)?, B(Eperm), Next));
        }
        ops.push(Op::Jeq(number(CLONE3)?, B(Enosys), Next));
        ops.push(Op::Jeq(number("clone")?, B(Clone), Next));
        blocks.push(Clone);
    }
    for rule in SETID_RULES.iter().filter(|r| r.applies_here()) {
        let block = match rule.flags_arg {
            None => Mode(rule.mode_arg),
            Some(flags) => Open(flags, rule.mode_arg),
        };
        ops.push(Op::Jeq(number(rule.name)?, B(block), Next));
        blocks.push(block);
        if let Open(_, mode) = block {
            blocks.push(Mode(mode));
        }
    }
    ops.push(Op::Jeq(libc::SYS_ioctl as u32, B(Ioctl), Next));
    blocks.push(Ioctl);
    if sockets.deny_unix || sockets.deny_network {
        ops.push(Op::Jeq(libc::SYS_socket as u32, B(Socket), Next));
        blocks.push(Socket);
        if sockets.deny_network {
            blocks.extend([Inet, InetProtocol]);
        }
    }
    if sockets.deny_network {
        ops.push(Op::Jeq(libc::SYS_socketpair as u32, B(Socketpair), Next));
        ops.push(Op::Jeq(libc::SYS_listen as u32, B(Eacces), Next));
        for (nr, flags_arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            ops.push(Op::Jeq(nr as u32, B(Fastopen(flags_arg)), Next));
            blocks.push(Fastopen(flags_arg));
        }
        blocks.push(Socketpair);
    }
    ops.push(Op::Ret(libc::SECCOMP_RET_ALLOW));
    // The blocks, each once, after the dispatch (jumps only go forward).
    // Blocks only jump forward: each after those that jump to it, the
    // verdicts last.
    let rank = |b: &Block| match b {
        Open(..) => 0,
        Mode(_) => 1,
        Socket => 2,
        Inet => 3,
        InetProtocol => 4,
        _ => 5,
    };
    blocks.sort_by_key(rank);
    let mut emitted: Vec<Block> = Vec::new();
    let verdicts = [Allow, Eperm, Eacces, Enosys, Kill]
        .into_iter()
        .filter(|v| *v != Enosys || namespaces == Namespaces::Refused);
    for block in blocks.into_iter().chain(verdicts) {
        if emitted.contains(&block) {
            continue;
        }
        emitted.push(block);
        ops.push(Op::Label(block));
        ops.extend(block_ops(block, sockets));
    }
    resolve(&ops)
}

/// The instructions of one block.
fn block_ops(block: Block, sockets: SocketRules) -> Vec<Op> {
    use Block::*;
    use To::{Block as B, Next};
    let setid = SETID_BITS as u32;
    let fastopen = libc::MSG_FASTOPEN as u32;
    match block {
        Allow => vec![Op::Ret(libc::SECCOMP_RET_ALLOW)],
        Eperm => vec![Op::Ret(errno(libc::EPERM))],
        Eacces => vec![Op::Ret(errno(libc::EACCES))],
        Enosys => vec![Op::Ret(errno(libc::ENOSYS))],
        Kill => vec![Op::Ret(libc::SECCOMP_RET_KILL_PROCESS)],
        // Every namespace flag lies in the low 32 bits of the flags.
        Clone => vec![
            arg(0),
            Op::Jset(CLONE_NAMESPACE_FLAGS as u32, B(Eperm), B(Allow)),
        ],
        Mode(n) => vec![arg(n), Op::Jset(setid, B(Eperm), B(Allow))],
        // Creating: O_CREAT, or every bit of O_TMPFILE (which includes
        // O_DIRECTORY); then the mode decides.
        Open(flags, mode) => vec![
            arg(flags),
            Op::Jset(O_CREAT as u32, B(Mode(mode)), Next),
            Op::And(O_TMPFILE as u32),
            Op::Jeq(O_TMPFILE as u32, B(Mode(mode)), B(Allow)),
        ],
        Ioctl => {
            let mut ops = vec![arg(1)];
            for (_, request) in DENIED_IOCTLS {
                ops.push(Op::Jeq(*request as u32, B(Eperm), Next));
            }
            ops.push(Op::Ja(Allow));
            ops
        }
        Socket => {
            let mut ops = vec![arg(0)];
            if sockets.deny_unix {
                ops.push(Op::Jeq(libc::AF_UNIX as u32, B(Eacces), Next));
            }
            if sockets.deny_network {
                // Only TCP over IPv4 and IPv6, which Landlock governs.
                ops.push(Op::Jeq(libc::AF_INET as u32, B(Inet), Next));
                ops.push(Op::Jeq(libc::AF_INET6 as u32, B(Inet), B(Eacces)));
            } else {
                ops.push(Op::Ja(Allow));
            }
            ops
        }
        Inet => vec![
            arg(1),
            Op::And(0xf),
            Op::Jeq(libc::SOCK_STREAM as u32, B(InetProtocol), B(Eacces)),
        ],
        InetProtocol => vec![
            arg(2),
            Op::Jeq(0, B(Allow), Next),
            Op::Jeq(libc::IPPROTO_TCP as u32, B(Allow), B(Eacces)),
        ],
        Socketpair => vec![arg(0), Op::Jeq(libc::AF_UNIX as u32, B(Allow), B(Eacces))],
        Fastopen(n) => vec![arg(n), Op::Jset(fastopen, B(Eacces), B(Allow))],
    }
}

/// Lays the operations out and turns block references into the forward
/// offsets classic BPF jumps take (at most 255 for a conditional jump).
fn resolve(ops: &[Op]) -> Result<Vec<libc::sock_filter>, SandboxError> {
    let mut at: Vec<(Block, usize)> = Vec::new();
    let mut pc = 0usize;
    for op in ops {
        match op {
            Op::Label(b) => at.push((*b, pc)),
            _ => pc += 1,
        }
    }
    let place = |b: Block| {
        at.iter()
            .find(|(x, _)| *x == b)
            .map(|(_, p)| *p)
            .ok_or_else(|| seccomp_error(format!("no block {b:?}")))
    };
    let mut out = Vec::with_capacity(pc);
    for op in ops {
        let here = out.len();
        let offset = |to: To| -> Result<u8, SandboxError> {
            let target = match to {
                To::Next => here + 1,
                To::Block(b) => place(b)?,
            };
            target
                .checked_sub(here + 1)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| seccomp_error(format!("jump from {here} to {target} out of range")))
        };
        let ins = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        };
        let jmp = libc::BPF_JMP | libc::BPF_K;
        out.push(match *op {
            Op::Label(_) => continue,
            Op::Load(o) => ins(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, o),
            Op::And(k) => ins(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, k),
            Op::Jeq(k, t, f) => ins(jmp | libc::BPF_JEQ, offset(t)?, offset(f)?, k),
            Op::Jset(k, t, f) => ins(jmp | libc::BPF_JSET, offset(t)?, offset(f)?, k),
            Op::Jge(k, t, f) => ins(jmp | libc::BPF_JGE, offset(t)?, offset(f)?, k),
            Op::Ja(b) => {
                let d = place(b)?
                    .checked_sub(here + 1)
                    .ok_or_else(|| seccomp_error("backward jump"))?;
                ins(libc::BPF_JMP | libc::BPF_JA, 0, 0, d as u32)
            }
            Op::Ret(k) => ins(libc::BPF_RET | libc::BPF_K, 0, 0, k),
        });
    }
    if out.len() > MAX_INSTRUCTIONS {
        return Err(seccomp_error(format!("{} instructions", out.len())));
    }
    Ok(out)
}

/// The largest classic BPF program the kernel accepts (`BPF_MAXINSNS`).
const MAX_INSTRUCTIONS: usize = 4096;

#[cfg(test)]
mod tests {
    //! The assembled programs against seccompiler's compilation of the
    //! same rules (the program vibesys installed before it assembled its
    //! own), through a classic BPF interpreter.
    use std::collections::BTreeMap;

    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    use super::*;

    fn number(name: &str) -> Result<i64, SandboxError> {
        super::number(name).map(i64::from)
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

    /// The rules of the shared program (syscall number to refusing rules).
    fn shared_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for name in DENIED.iter().chain([&OPENAT2]) {
            rules.insert(number(name)?, Vec::new());
        }
        setid_rules(&mut rules)?;
        let mut ioctl_rules = Vec::new();
        for (_, request) in DENIED_IOCTLS {
            let cond =
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *request)
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

    /// The namespace rules refused with `EPERM`: unshare, setns, and
    /// clone with any namespace flag (one rule per flag).
    fn namespace_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SandboxError> {
        let mut rules = BTreeMap::new();
        for name in NAMESPACE_DENIED {
            rules.insert(number(name)?, Vec::new());
        }
        let clone = (0..64)
            .map(|b| 1u64 << b)
            .filter(|bit| CLONE_NAMESPACE_FLAGS & bit != 0)
            .map(|bit| rule(vec![masked(0, bit, bit)?]))
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_clone, clone);
        Ok(rules)
    }

    /// The reference for `r` (and the namespace rules, when refused): the
    /// shared rules, the namespace rules, clone3's `ENOSYS` and the socket
    /// rules compiled by seccompiler, run as the kernel runs stacked
    /// filters.
    struct Reference {
        filters: Vec<Vec<libc::sock_filter>>,
    }

    impl Reference {
        fn new(r: SocketRules, namespaces: Namespaces) -> Self {
            let mut filters = vec![to_libc(
                compile(shared_rules().unwrap(), libc::EPERM).unwrap(),
            )];
            if namespaces == Namespaces::Refused {
                filters.push(to_libc(
                    compile(namespace_rules().unwrap(), libc::EPERM).unwrap(),
                ));
                let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
                filters.push(to_libc(compile(clone3, libc::ENOSYS).unwrap()));
            }
            let sockets = socket_rules(r).unwrap();
            if !sockets.is_empty() {
                filters.push(to_libc(compile(sockets, libc::EACCES).unwrap()));
            }
            Self { filters }
        }

        fn verdict(&self, nr: i64, args: [u64; 6]) -> u32 {
            self.filters
                .iter()
                .map(|f| run(f, nr, args))
                .reduce(stacked)
                .unwrap_or(libc::SECCOMP_RET_ALLOW)
        }
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
            libc::SYS_clone,
            libc::SYS_clone3,
            libc::SYS_unshare,
            libc::SYS_setns,
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
        // ioctls, open flags, TCP, then clone flags: fork's, a thread's,
        // CLONE_NEWUSER | CLONE_NEWNET, CLONE_NEWNS, a flag above 32 bits.
        let extra: [u64; 11] = [
            0x5412,
            0x541c,
            0x1_0000_5412,
            0o100,
            0o20_200_000,
            6,
            0x0120_0011,
            0x003d_0f00,
            0x5000_0000,
            0x0002_0000,
            0x1_0000_0000,
        ];
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

    const ALL_RULES: [SocketRules; 4] = [
        SocketRules::NONE,
        SocketRules {
            deny_unix: true,
            deny_network: false,
        },
        SocketRules {
            deny_unix: false,
            deny_network: true,
        },
        SocketRules {
            deny_unix: true,
            deny_network: true,
        },
    ];

    #[test]
    fn the_assembled_programs_give_seccompilers_verdicts() {
        let samples = samples();
        for (r, ns) in ALL_RULES
            .into_iter()
            .flat_map(|r| [(r, Namespaces::Allowed), (r, Namespaces::Refused)])
        {
            let ours = assemble(r, ns).unwrap();
            let reference = Reference::new(r, ns);
            for (nr, args) in &samples {
                assert_eq!(
                    run(&ours, *nr, *args),
                    reference.verdict(*nr, *args),
                    "{r:?} {ns:?} nr {nr} args {args:?}"
                );
            }
            // Every other system call number gets the same verdict too.
            for nr in 0..500 {
                for args in [[0o4755, 0o4755, 0o4755, 0o4755, 0, 0], [0; 6]] {
                    assert_eq!(
                        run(&ours, nr, args),
                        reference.verdict(nr, args),
                        "{r:?} {ns:?} nr {nr}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_assembled_programs_are_short() {
        let shared = program().unwrap();
        let reference = to_libc(compile(shared_rules().unwrap(), libc::EPERM).unwrap());
        assert!(
            shared.len() * 3 < reference.len(),
            "{} vs {}",
            shared.len(),
            reference.len()
        );
        for r in ALL_RULES {
            let p = landlock_programs(r).unwrap();
            assert_eq!(p.len(), 1, "one program to install");
            assert!(p[0].len() < 100, "{r:?}: {} instructions", p[0].len());
        }
        assert_eq!(program_bytes().unwrap().len(), shared.len() * 8);
    }

    /// What the rules must refuse, stated directly.
    #[test]
    fn the_programs_refuse_what_they_must() {
        let eperm = errno(libc::EPERM);
        let eacces = errno(libc::EACCES);
        let allow = libc::SECCOMP_RET_ALLOW;
        let p = program().unwrap();
        assert_eq!(run(&p, libc::SYS_ptrace, [0; 6]), eperm);
        assert_eq!(run(&p, libc::SYS_fchmodat, [0, 0, 0o2755, 0, 0, 0]), eperm);
        assert_eq!(run(&p, libc::SYS_fchmodat, [0, 0, 0o755, 0, 0, 0]), allow);
        assert_eq!(run(&p, libc::SYS_ioctl, [0, 0x5412, 0, 0, 0, 0]), eperm);
        assert_eq!(
            run(&p, libc::SYS_ioctl, [0, 0x1_0000_5412, 0, 0, 0, 0]),
            eperm
        );
        let creat_suid = [0, 0, (libc::O_CREAT | libc::O_WRONLY) as u64, 0o4755, 0, 0];
        assert_eq!(run(&p, libc::SYS_openat, creat_suid), eperm);
        let tmpfile_sgid = [0, 0, 0o20_200_000 | libc::O_RDWR as u64, 0o2700, 0, 0];
        assert_eq!(run(&p, libc::SYS_openat, tmpfile_sgid), eperm);
        // O_DIRECTORY alone shares a bit with O_TMPFILE: not creating.
        let directory = [0, 0, libc::O_DIRECTORY as u64, 0o4755, 0, 0];
        assert_eq!(run(&p, libc::SYS_openat, directory), allow);
        assert_eq!(
            run(&p, libc::SYS_socket, [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]),
            allow
        );
        // bwrap's program leaves namespaces to bwrap.
        assert_eq!(
            run(&p, libc::SYS_unshare, [0x5000_0000, 0, 0, 0, 0, 0]),
            allow
        );
        let l = &landlock_programs(ALL_RULES[3]).unwrap()[0];
        let enosys = errno(libc::ENOSYS);
        assert_eq!(
            run(l, libc::SYS_unshare, [0x5000_0000, 0, 0, 0, 0, 0]),
            eperm
        );
        assert_eq!(run(l, libc::SYS_setns, [3, 0, 0, 0, 0, 0]), eperm);
        assert_eq!(run(l, libc::SYS_clone3, [0; 6]), enosys);
        let newuser = [0x1000_0000 | libc::SIGCHLD as u64, 0, 0, 0, 0, 0];
        assert_eq!(run(l, libc::SYS_clone, newuser), eperm);
        let fork = [0x0120_0011, 0, 0, 0, 0, 0];
        assert_eq!(run(l, libc::SYS_clone, fork), allow);
        assert_eq!(
            run(l, libc::SYS_socket, [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]),
            eacces
        );
        let udp = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        assert_eq!(run(l, libc::SYS_socket, udp), eacces);
        let mptcp = [
            libc::AF_INET6 as u64,
            libc::SOCK_STREAM as u64,
            262,
            0,
            0,
            0,
        ];
        assert_eq!(run(l, libc::SYS_socket, mptcp), eacces);
        let tcp = [
            libc::AF_INET as u64,
            (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as u64,
            6,
            0,
            0,
            0,
        ];
        assert_eq!(run(l, libc::SYS_socket, tcp), allow);
        assert_eq!(run(l, libc::SYS_listen, [3, 1, 0, 0, 0, 0]), eacces);
    }

    /// x86_64's x32 numbers (the same calls with bit 30 set) are refused
    /// outright: matching plain numbers would let every rule be bypassed
    /// on a kernel with the x32 ABI (seccompiler's program allowed them).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_system_calls_are_refused() {
        for r in ALL_RULES {
            let p = assemble(r, Namespaces::Refused).unwrap();
            for nr in [libc::SYS_ptrace, libc::SYS_getpid, 521, 0x3fff_ffff] {
                let x32 = nr | i64::from(X32_SYSCALL_BIT);
                assert_eq!(run(&p, x32, [0; 6]), errno(libc::EPERM), "{nr:#x}");
            }
        }
    }
}
