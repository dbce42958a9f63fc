//! The container's plan as `vibesys policy show` prints it: the image,
//! the security options (the seccomp profile summarised), the mounts and
//! the environment by name; the JSON carries the plan whole.

use vs_sandbox::explain::{ExplainError, PlanDescription};

use crate::plan::PlannedContainer;

impl PlannedContainer {
    /// The plan as text (each line indented by two spaces) and JSON.
    pub fn describe(&self) -> Result<PlanDescription, ExplainError> {
        let Self { options, plan, .. } = self;
        let mut text = format!(
            "  image {} (by ID {}), container {}, user {}\n",
            options.image.name, plan.image, plan.name, plan.user
        );
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
        Ok(PlanDescription {
            text,
            json: serde_json::to_value(plan)?,
        })
    }
}

/// A `--security-opt` as text: the seccomp profile (a JSON document of
/// several kilobytes) summarised by its default action and rule count.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seccomp_profile_is_summarised_and_other_options_stay() {
        assert_eq!(
            summarise_security_opt("no-new-privileges"),
            "no-new-privileges"
        );
        assert_eq!(
            summarise_security_opt("seccomp=nonsense"),
            "seccomp=nonsense"
        );
        let profile = r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{},{}]}"#;
        assert_eq!(
            summarise_security_opt(&format!("seccomp={profile}")),
            format!(
                "seccomp=(profile: default SCMP_ACT_ERRNO, 2 syscall rules, {} bytes; whole in --json)",
                profile.len()
            )
        );
    }
}
