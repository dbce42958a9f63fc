//! The seccomp filter bwrap installs, compiled from the shared rules in
//! [`crate::syscall_rules`]: deny the syscalls that let a confined process
//! reach into others or the terminal, and every mode with a set-id bit.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::error::SandboxError;
use crate::syscall_rules::{DENIED, DENIED_IOCTLS, OPENAT2, SETID_BITS, SETID_RULES, SETID_VALUES};

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

fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, SandboxError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
    .map_err(seccomp_error)
}

/// The rules refusing a set-id bit in a mode argument ([`SETID_RULES`]).
fn setid_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SandboxError> {
    for rule in SETID_RULES.iter().filter(|r| r.applies_here()) {
        let list = rules.entry(number(rule.name)?).or_default();
        for value in SETID_VALUES {
            let mode = masked(rule.mode_arg, SETID_BITS, value)?;
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
