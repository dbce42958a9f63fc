//! A plan as `vibesys policy show` prints it: text for a person (the
//! bwrap argv shell-quoted, the Landlock rules, the Seatbelt parameters
//! and profile, the container's plan, then what the backend enforces)
//! and the same plan as JSON.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;

use serde_json::json;

use crate::confinement::EnforcementReport;
use crate::select::Plan;

pub use crate::plan_description::{ExplainError, PlanDescription};

/// `plan` as `exec` applies it, followed by what it enforces: the text,
/// and `{"plan": ..., "report": ...}`. `exec_env` is the environment
/// `exec` gives the command, shown by name only (a value, say a proxy URL
/// with credentials, never reaches a terminal or a log).
pub fn describe(
    plan: &Plan<'_>,
    exec_env: &[(OsString, OsString)],
) -> Result<PlanDescription, ExplainError> {
    let mut described = describe_plan(plan, exec_env)?;
    described.text.push_str(&plan.report().to_string());
    described.json = json!({ "plan": described.json, "report": plan.report() });
    Ok(described)
}

fn describe_plan(
    plan: &Plan<'_>,
    exec_env: &[(OsString, OsString)],
) -> Result<PlanDescription, ExplainError> {
    let mut text = String::new();
    let json = match plan {
        Plan::Bwrap(sandbox) => {
            // `exec` adds the environment with `--clearenv`, then
            // `--setenv` for each name.
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
        Plan::Docker { container, .. } => return container.describe(),
    };
    Ok(PlanDescription { text, json })
}

/// Each policy path and how it is enforced, what confines the rest, the
/// hardening and the known gaps: one line each, indented by two spaces.
impl fmt::Display for EnforcementReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.paths {
            writeln!(
                f,
                "  {:<9} {:<40} {}",
                p.access.name(),
                p.path.display(),
                p.how
            )?;
        }
        writeln!(f, "  outside the project: {}", self.outside)?;
        for h in &self.hardening {
            writeln!(f, "  enforced: {h}")?;
        }
        for g in &self.gaps {
            writeln!(f, "  gap: {g}")?;
        }
        Ok(())
    }
}

/// Each line of `s` behind `  | `.
fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  | {l}\n")).collect()
}

/// `program` and `args` as one shell command line.
fn shell_words(program: &Path, args: &[String]) -> String {
    let mut out = quote(&program.display().to_string());
    for a in args {
        out.push(' ');
        out.push_str(&quote(a));
    }
    out
}

/// `s` as one shell word: as is when it is plain, else single-quoted.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_stay_and_others_are_quoted() {
        assert_eq!(quote("--ro-bind"), "--ro-bind");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(
            shell_words(
                Path::new("/usr/bin/bwrap"),
                &["--bind".into(), "/a b".into()]
            ),
            "/usr/bin/bwrap --bind '/a b'"
        );
    }

    #[test]
    fn profiles_are_indented_line_by_line() {
        assert_eq!(
            indent("(version 1)\n(deny default)"),
            "  | (version 1)\n  | (deny default)\n"
        );
    }
}
