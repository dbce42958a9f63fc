//! Fuzzes the task of the operator's `vibesys.toml` as `vibesys run`
//! reads it (`TaskSpec::parse`), and the same text as the remote run
//! environments read it (`TrustedEvaluation::parse`, `RemoteConfig::parse`).
//!
//! Properties: an accepted task has a check program and only protected
//! paths that stay inside the project; the two readers of `[check]` agree
//! on its argv.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use vs_runtime::remote::config::{RemoteConfig, TrustedEvaluation};
use vs_runtime::task::TaskSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("vibesys.toml");
    let task = TaskSpec::parse(text, path);
    if let Ok(task) = &task {
        assert!(!task.check.argv.is_empty(), "a check with no program");
        for p in task.protected_paths() {
            assert!(
                p.components().all(|c| matches!(c, Component::Normal(_))),
                "a protected path that leaves the project: {p:?}"
            );
        }
    }
    let evaluation = TrustedEvaluation::parse(text, path);
    if let (Ok(task), Ok(evaluation)) = (&task, &evaluation) {
        assert_eq!(task.check.argv, evaluation.check.argv, "two readings of [check]");
    }
    let _ = RemoteConfig::parse(text, path);
});
