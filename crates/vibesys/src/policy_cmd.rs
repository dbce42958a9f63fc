//! `vibesys policy show`: the exact plan each backend would apply.

use std::ffi::OsStr;
use std::path::Path;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use vs_sandbox::bwrap::{BwrapPlan, bwrap_report};
use vs_sandbox::landlock::{LandlockPlan, landlock_report};
use vs_sandbox::seatbelt::{SeatbeltPlan, seatbelt_report};
use vs_sandbox::{BwrapOptions, EnforcementReport, ProcessLimit};

use crate::project::{PolicyArgs, helper_exe};

/// Arguments of `vibesys policy`.
#[derive(Debug, Args)]
pub struct PolicyCmdArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print the validated policy and the plan each backend would apply:
    /// the bwrap argv, the Landlock rules, the Seatbelt profile, and which
    /// paths a backend does not enforce.
    Show(ShowArgs),
}

/// Backends `policy show` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Backend {
    Bwrap,
    Landlock,
    Seatbelt,
    Docker,
}

#[derive(Debug, Args)]
struct ShowArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    /// Show only this backend (default: all).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Print JSON (stable; documented in docs/cli.md).
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys policy ...`.
pub fn run(args: PolicyCmdArgs) -> anyhow::Result<u8> {
    match args.command {
        PolicyCommand::Show(show) => run_show(show),
    }
}

fn run_show(args: ShowArgs) -> anyhow::Result<u8> {
    let project = args.policy.resolve()?;
    let resources = project.resources(OsStr::new("sh"), &args.policy.allow);
    let wants = |b: Backend| args.backend.is_none_or(|x| x == b);
    let limit = ProcessLimit::choose(project.config.max_processes());
    let mut backends = serde_json::Map::new();
    let mut text = String::new();
    let push_report = |text: &mut String, report: &EnforcementReport| {
        for p in &report.paths {
            text.push_str(&format!(
                "  {:<9} {:<40} {}\n",
                p.access.name(),
                p.path.display(),
                p.how
            ));
        }
        text.push_str(&format!("  outside the project: {}\n", report.outside));
        for h in &report.hardening {
            text.push_str(&format!("  enforced: {h}\n"));
        }
        for g in &report.gaps {
            text.push_str(&format!("  gap: {g}\n"));
        }
    };
    if wants(Backend::Bwrap) {
        let options = BwrapOptions {
            program: vs_sandbox::bwrap::find_bwrap(std::env::var_os("PATH").as_deref())
                .unwrap_or_else(|_| "bwrap".into()),
            network: project.network,
            chdir: None,
            helper: helper_exe()?,
            writable: Vec::new(),
            read_only_within: Vec::new(),
            private_files: Vec::new(),
            max_processes: project.config.max_processes(),
            devices: project.config.devices.clone(),
        };
        let plan = BwrapPlan::new(&project.resolved, &resources, &options);
        let report = bwrap_report(&project.resolved, &options, &limit);
        text.push_str("== bwrap ==\n");
        text.push_str(&format!("  {}", shell_words(&plan.program, &plan.args)));
        text.push_str(" -- CMD...\n");
        text.push_str(&format!(
            "  descriptors: {}\n",
            plan.fds
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{}={}", i + 3, s.describe()))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        push_report(&mut text, &report);
        backends.insert("bwrap".into(), json!({ "plan": plan, "report": report }));
    }
    if wants(Backend::Landlock) {
        let report = landlock_report(&project.resolved, project.network, &limit);
        match LandlockPlan::new(&project.resolved, &resources, project.network) {
            Ok(plan) => {
                text.push_str("== landlock ==\n");
                for p in &plan.read {
                    text.push_str(&format!("  read+exec  {}\n", p.display()));
                }
                for p in &plan.write {
                    text.push_str(&format!("  read+write {}\n", p.display()));
                }
                push_report(&mut text, &report);
                backends.insert("landlock".into(), json!({ "plan": plan, "report": report }));
            }
            Err(e) => {
                text.push_str(&format!("== landlock ==\n  unusable: {e}\n"));
                backends.insert("landlock".into(), json!({ "error": e.to_string() }));
            }
        }
    }
    if wants(Backend::Seatbelt) {
        let tmp = std::env::temp_dir();
        let plan = SeatbeltPlan::new(&project.resolved, &tmp, project.network);
        let report = seatbelt_report(&project.resolved);
        text.push_str("== seatbelt ==\n");
        for (k, v) in &plan.params {
            text.push_str(&format!("  -D {k}={}\n", v.display()));
        }
        text.push_str(&indent(&plan.profile));
        push_report(&mut text, &report);
        backends.insert("seatbelt".into(), json!({ "plan": plan, "report": report }));
    }
    if wants(Backend::Docker) {
        text.push_str("== docker ==\n");
        match crate::docker_cmd::plan_for(&project, args.policy.project.as_deref()) {
            Ok((options, plan)) => {
                let report = vs_sandbox::docker::docker_report(&project.resolved, &options);
                text.push_str(&format!(
                    "  image {} (by ID {}), container {}, user {}\n",
                    options.image.name, plan.image, plan.name, plan.user
                ));
                text.push_str(&format!(
                    "  cap-drop {} security-opt {} network {} devices none pids {} memory {}\n",
                    plan.cap_drop.join(","),
                    plan.security_opt.join(","),
                    plan.network_mode,
                    plan.pids_limit,
                    plan.memory_bytes
                ));
                for m in &plan.mounts {
                    text.push_str(&format!(
                        "  mount {:<10} {} -> {}{}\n",
                        serde_json::to_value(m.role)?.as_str().unwrap_or("?"),
                        m.source.display(),
                        m.target.display(),
                        if m.read_only { " (ro)" } else { "" }
                    ));
                }
                text.push_str(&format!("  env (by name): {}\n", plan.env_names.join(" ")));
                push_report(&mut text, &report);
                backends.insert("docker".into(), json!({ "plan": plan, "report": report }));
            }
            Err(e) => {
                text.push_str(&format!("  unusable: {e:#}\n"));
                backends.insert("docker".into(), json!({ "error": format!("{e:#}") }));
            }
        }
    }
    let in_history = tracked_hidden(&project);
    if args.json {
        let out = json!({
            "hidden_in_history": in_history,
            "workspace": project.workspace.root(),
            "policy": {
                "read_only": project.policy.read_only(),
                "hidden": project.policy.hidden(),
            },
            "resolved": project.resolved.entries(),
            "defaults": project.defaults,
            "network": project.network,
            "resources": resources.iter().collect::<Vec<_>>(),
            "backends": backends,
        });
        crate::output::print_json(&out)?;
    } else {
        let mut head = format!("workspace: {}\n", project.workspace.root().display());
        for d in &project.defaults.entries {
            head.push_str(&format!(
                "default   {:<9} {}{}\n",
                d.access.name(),
                d.path,
                if d.widened {
                    "  WIDENED by [sandbox] widen: not applied"
                } else {
                    ""
                }
            ));
        }
        for e in project.resolved.entries() {
            head.push_str(&format!(
                "{:<9} {} ({:?})\n",
                e.access.name(),
                e.rel,
                e.kind
            ));
        }
        for p in &in_history {
            head.push_str(&format!(
                "WARNING   hidden path {p} is in git history: its content stays readable through .git/objects ({HISTORY_FIX})\n"
            ));
        }
        crate::output::print_text(&(head + &text))?;
    }
    Ok(0)
}

/// How to get a hidden path out of history.
pub const HISTORY_FIX: &str = "rewrite history without it (git filter-repo --invert-paths --path P), rotate what it held, and expire the reflog";

/// Hidden paths of the policy whose content git history holds.
pub fn tracked_hidden(project: &crate::project::ProjectPolicy) -> Vec<String> {
    let hidden: Vec<&Path> = project
        .resolved
        .with_access(vs_sandbox::Access::Hidden)
        .map(|e| e.resolved_rel.as_path())
        .collect();
    match vs_runtime::state::hidden_paths_in_history(project.workspace.root(), &hidden) {
        Ok(found) => found.into_iter().collect(),
        Err(e) => {
            tracing::warn!("cannot read git history to look for hidden paths: {e}");
            Vec::new()
        }
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  | {l}\n")).collect()
}

fn shell_words(program: &Path, args: &[String]) -> String {
    let mut out = quote(&program.display().to_string());
    for a in args {
        out.push(' ');
        out.push_str(&quote(a));
    }
    out
}

fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
