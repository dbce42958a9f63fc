//! The seccomp filter bwrap installs: deny the syscalls that let a
//! confined process reach into others or the terminal.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::SandboxError;

/// Syscalls denied outright, with `EPERM`.
pub const DENIED_SYSCALLS: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("userfaultfd", libc::SYS_userfaultfd),
];

/// `ioctl` requests denied: terminal input injection and console control.
// The request constants are `c_ulong` in glibc's libc bindings and `c_int`
// in musl's; the cast is a no-op on one and needed on the other.
#[allow(clippy::unnecessary_cast)]
pub const DENIED_IOCTLS: &[(&str, u64)] = &[
    ("TIOCSTI", libc::TIOCSTI as u64),
    ("TIOCLINUX", libc::TIOCLINUX as u64),
];

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
    for (_, nr) in DENIED_SYSCALLS {
        rules.insert(*nr, Vec::new());
    }
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
