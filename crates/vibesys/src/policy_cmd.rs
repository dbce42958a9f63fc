//! `vibesys policy show`: the exact plan each backend would apply. It
//! writes nothing: the settings are `exec`'s, resolved without preparing
//! the run state, lowered by `vs_sandbox::plan`, the function `exec`'s
//! sandboxes are built by.

use std::ffi::OsString;
use std::path::Path;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use vs_sandbox::{EnforcementReport, Plan};

use crate::project::{PolicyArgs, cwd, helper_exe, host_env};

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

/// Backends `policy show` can print (clap's names for
/// `vs_sandbox::Backend`, in the order they are printed).
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
    /// Show the policy a session or run of this provider gets (codex,
    /// claude, gemini): an allow-list then admits its API host too.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// The command whose plan to show, as `exec -- CMD` would run it (its
    /// host resources depend on it; default `sh`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `vibesys policy ...`.
pub fn run(args: PolicyCmdArgs) -> anyhow::Result<u8> {
    match args.command {
        PolicyCommand::Show(show) => run_show(show),
    }
}

fn run_show(args: ShowArgs) -> anyhow::Result<u8> {
    // The settings `exec` resolves, without writing to the project.
    let mut project = args.policy.plan()?;
    if let Some(name) = &args.provider {
        let provider: agentshim::Provider = name.parse()?;
        if let Some(host) = provider.api_host(|v| std::env::var_os(v))? {
            project.add_provider_host(&host)?;
        }
    }
    let command: Vec<OsString> = if args.command.is_empty() {
        vec!["sh".into()]
    } else {
        args.command.clone()
    };
    let host_env = host_env();
    let cwd = cwd();
    let helper = helper_exe()?;
    let request =
        || project.sandbox_request(&command[0], &host_env, cwd.as_deref(), helper.clone());
    // The environment `exec` gives the command (without --env).
    let exec_env = vs_agent::env::exec_env_allowlist(std::env::vars_os(), &[])?.vars;
    let wants = |b: Backend| args.backend.is_none_or(|x| x == b);
    let mut backends = serde_json::Map::new();
    let mut text = String::new();
    for &backend in Backend::value_variants() {
        if !wants(backend) {
            continue;
        }
        let name = to_backend(backend).name();
        text.push_str(&format!("== {name} ==\n"));
        let mut req = request();
        // The door this backend would get (a placeholder: no proxy runs).
        req.egress = project.planned_egress_door(to_backend(backend));
        if backend == Backend::Docker {
            match crate::docker_cmd::options_for(&project, None, args.policy.project.as_deref()) {
                Ok(options) => req.docker = Some(Box::new(options)),
                Err(e) => {
                    text.push_str(&format!("  unusable: {e:#}\n"));
                    backends.insert(name.into(), json!({ "error": format!("{e:#}") }));
                    continue;
                }
            }
        }
        match vs_sandbox::plan(req, to_backend(backend)) {
            Ok(plan) => {
                let value = describe_plan(&plan, &exec_env, &mut text)?;
                push_report(&mut text, plan.report());
                backends.insert(
                    name.into(),
                    json!({ "plan": value, "report": plan.report() }),
                );
            }
            Err(e) => {
                text.push_str(&format!("  unusable: {e}\n"));
                backends.insert(name.into(), json!({ "error": e.to_string() }));
            }
        }
    }
    let resources = request().resources;
    let in_history = tracked_hidden(&project);
    if args.json {
        let out = json!({
            "hidden_in_history": in_history,
            "workspace": project.workspace.root(),
            "command": command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "chdir": project.chdir_in(cwd.as_deref()),
            "policy": {
                "read_only": project.policy.read_only(),
                "hidden": project.policy.hidden(),
            },
            "resolved": project.resolved.entries(),
            "defaults": project.defaults,
            "network": project.network,
            "egress": network_json(&project),
            "resources": resources.iter().collect::<Vec<_>>(),
            "backends": backends,
        });
        crate::output::print_json(&out)?;
    } else {
        let mut head = format!("workspace: {}\n", project.workspace.root().display());
        head.push_str(&network_text(&project));
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

/// `network: ...`: open, none, or the allow-list (and the provider
/// hosts it gained).
fn network_text(project: &crate::project::ProjectPolicy) -> String {
    if !project.network {
        return "network   none\n".into();
    }
    if project.allow_hosts.is_empty() {
        return "network   open\n".into();
    }
    let mut out = format!(
        "network   allow-list: {}\n",
        project
            .allow_hosts
            .patterns()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    for h in &project.provider_hosts {
        out.push_str(&format!("network   {h} added: the provider's API host\n"));
    }
    out
}

fn network_json(project: &crate::project::ProjectPolicy) -> serde_json::Value {
    let mode = match (project.network, project.allow_hosts.is_empty()) {
        (false, _) => "none",
        (true, true) => "open",
        (true, false) => "allow-list",
    };
    json!({
        "mode": mode,
        "allow_hosts": project.allow_hosts,
        "provider_hosts": project.provider_hosts,
    })
}

fn to_backend(b: Backend) -> vs_sandbox::Backend {
    match b {
        Backend::Bwrap => vs_sandbox::Backend::Bwrap,
        Backend::Landlock => vs_sandbox::Backend::Landlock,
        Backend::Seatbelt => vs_sandbox::Backend::Seatbelt,
        Backend::Docker => vs_sandbox::Backend::Docker,
    }
}

/// The plan as `exec` applies it, as text and JSON.
fn describe_plan(
    plan: &Plan<'_>,
    exec_env: &[(OsString, OsString)],
    text: &mut String,
) -> anyhow::Result<serde_json::Value> {
    Ok(match plan {
        Plan::Bwrap(sandbox) => {
            // The environment `exec` adds (`--clearenv`, then `--setenv`
            // for each name) is shown by name: its values (a proxy URL
            // with credentials, say) never go to a terminal or a log.
            let plan = sandbox.plan();
            let names: Vec<String> = exec_env
                .iter()
                .map(|(k, _)| k.to_string_lossy().into_owned())
                .collect();
            text.push_str(&format!("  {}", shell_words(&plan.program, &plan.args)));
            if !plan.env_tail.is_empty() {
                text.push_str(&format!(
                    " {}",
                    shell_words(Path::new("(then)"), &plan.env_tail)
                ));
            }
            text.push_str(&format!(
                " -- {}CMD...\n",
                plan.command_prefix
                    .iter()
                    .map(|a| format!("{a} "))
                    .collect::<String>()
            ));
            text.push_str(&format!(
                "  environment (--clearenv, then --setenv by name): {}\n",
                names.join(" ")
            ));
            text.push_str(&format!(
                "  descriptors: {}\n",
                plan.fds
                    .iter()
                    .enumerate()
                    .map(|(i, s)| format!("{}={}", i + 3, s.describe()))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
            let mut value = serde_json::to_value(plan)?;
            if let Some(map) = value.as_object_mut() {
                map.insert("environment".into(), json!(names));
            }
            value
        }
        Plan::Landlock(sandbox) => {
            let plan = sandbox.plan();
            for p in &plan.read {
                text.push_str(&format!("  read+exec  {}\n", p.display()));
            }
            for p in &plan.write {
                text.push_str(&format!("  read+write {}\n", p.display()));
            }
            serde_json::to_value(plan)?
        }
        Plan::Seatbelt(sandbox) => {
            let plan = sandbox.plan();
            for (k, v) in &plan.params {
                text.push_str(&format!("  -D {k}={}\n", v.display()));
            }
            for (k, v) in &plan.env {
                text.push_str(&format!("  env {k}={v}\n"));
            }
            text.push_str(&indent(&plan.profile));
            serde_json::to_value(plan)?
        }
        Plan::Docker { container, .. } => {
            let vs_docker::PlannedContainer { options, plan, .. } =
                vs_docker::PlannedContainer::of(container.as_ref())
                    .ok_or_else(|| anyhow::anyhow!("the container's plan is not Docker's"))?;
            text.push_str(&format!(
                "  image {} (by ID {}), container {}, user {}\n",
                options.image.name, plan.image, plan.name, plan.user
            ));
            text.push_str(&format!(
                "  cap-drop {} security-opt {} network {} devices none pids {} memory {}\n",
                plan.cap_drop.join(","),
                plan.security_opt
                    .iter()
                    .map(|o| summarise_security_opt(o))
                    .collect::<Vec<_>>()
                    .join(","),
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
            serde_json::to_value(plan)?
        }
    })
}

/// A Docker `--security-opt` as text: the seccomp profile (a JSON document
/// of several kilobytes) summarised by its default action and rule count;
/// `--json` carries it whole.
fn summarise_security_opt(opt: &str) -> String {
    let Some(profile) = opt.strip_prefix("seccomp=") else {
        return opt.to_owned();
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(profile) else {
        return opt.to_owned();
    };
    let default = value
        .get("defaultAction")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("?");
    let rules = value
        .get("syscalls")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    format!(
        "seccomp=(profile: default {default}, {rules} syscall rules, {} bytes; whole in --json)",
        profile.len()
    )
}

fn push_report(text: &mut String, report: &EnforcementReport) {
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
