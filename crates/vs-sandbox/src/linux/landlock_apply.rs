//! Applying Landlock rules to the current process (in the helper, right
//! before it executes the confined command).

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

use crate::controls::SandboxUnavailableError;
use crate::error::SandboxError;
use crate::landlock_rules::LandlockPlan;

/// The newest ABI whose rights we ask for (best effort below it).
const TARGET_ABI: ABI = ABI::V6;

/// What was actually enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LandlockOutcome {
    /// The kernel's Landlock ABI version.
    pub abi: i32,
    /// Whether every requested right is enforced.
    pub fully_enforced: bool,
}

fn unavailable(reason: String) -> SandboxError {
    SandboxUnavailableError::new(
        "landlock",
        reason,
        "use a kernel with Landlock enabled (Linux 5.13+, lsm=landlock), or use bwrap",
    )
    .into()
}

/// Builds the plan's ruleset (in the parent, where allocating is fine);
/// the launched child restricts itself to the returned descriptor right
/// before it executes the command. Fails when the kernel enforces nothing,
/// or when the plan denies the network and the kernel cannot (ABI < 4).
pub fn prepare(plan: &LandlockPlan) -> Result<(OwnedFd, LandlockOutcome), SandboxError> {
    let abi = super::probe::landlock_abi();
    if abi < 1 {
        return Err(unavailable("the kernel does not support Landlock".into()));
    }
    if !plan.network && abi < 4 {
        return Err(unavailable(format!(
            "denying the network needs Landlock ABI 4, the kernel has ABI {abi}"
        )));
    }
    let err = |e: landlock::RulesetError| unavailable(format!("building the ruleset failed: {e}"));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(err)?
        .scope(Scope::from_all(TARGET_ABI))
        .map_err(err)?;
    if !plan.network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(TARGET_ABI))
            .map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    // An egress allow-list: in the command's own network namespace the
    // one port it may connect to is the proxy's listener.
    if plan.egress.is_some() && !plan.network {
        created = created
            .add_rule(landlock::NetPort::new(
                crate::egress::INSIDE_PORT,
                AccessNet::ConnectTcp,
            ))
            .map_err(|e| unavailable(format!("adding the egress port rule failed: {e}")))?;
    }
    let add = |created: landlock::RulesetCreated,
               path: &PathBuf,
               access: landlock::BitFlags<AccessFs>|
     -> Result<landlock::RulesetCreated, SandboxError> {
        // Opened by a raw system call: the C library's `open` (musl's, in
        // the static build) adds an `fcntl` for close-on-exec to each of
        // the dozens of rules. As the crate's `PathFd`: `O_PATH`, a final
        // symlink followed (a rule on a link grants its target).
        let opened = rustix::fs::open(
            path,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        );
        let fd = match opened {
            Ok(fd) => fd,
            Err(e) => {
                tracing::debug!(path = %path.display(), "skipping landlock rule: {e}");
                return Ok(created);
            }
        };
        // Files only take file rights, directories take them all: the
        // crate asks the descriptor just opened and narrows the rights of
        // a file (best-effort compatibility), no second lookup of the path.
        created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| unavailable(format!("adding a rule for {} failed: {e}", path.display())))
    };
    for p in &plan.read {
        created = add(created, p, AccessFs::from_read(TARGET_ABI))?;
    }
    for p in &plan.write {
        created = add(created, p, AccessFs::from_all(TARGET_ABI))?;
    }
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or_else(|| unavailable("the kernel enforced no Landlock rule".into()))?;
    Ok((
        fd,
        LandlockOutcome {
            abi,
            fully_enforced: abi >= TARGET_ABI as i32,
        },
    ))
}
