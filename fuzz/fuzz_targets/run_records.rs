//! Fuzzes the run records the framework reads back from its hidden state:
//! the accuracy gate's baseline (`GateBaseline::load`, what `vibesys gate
//! check` calls) and a trusted build's record (`TrustedBuild::load`, what
//! `vibesys build show` and the candidate flow call). The first byte picks
//! the record; the rest is the file's content.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vs_runtime::{GateBaseline, RunId, StateLayout, TrustedBuild};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

fn setup() -> &'static (StateLayout, RunId) {
    static SETUP: OnceLock<(StateLayout, RunId)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let project = common::fresh_dir("project");
        let layout = StateLayout::open(&project).expect("the scratch project opens");
        let run = RunId::new("fuzz-run").expect("a valid run id");
        let dir = layout.ensure_run_dir(&run).expect("the run directory");
        std::fs::create_dir_all(dir.join("builds")).expect("the builds directory");
        (layout, run)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, content)) = data.split_first() else {
        return;
    };
    let (layout, run) = setup();
    if which % 2 == 0 {
        let path = GateBaseline::path(layout, run);
        std::fs::write(&path, content).expect("write the baseline");
        if let Ok(b) = GateBaseline::load(layout, run) {
            // A baseline is only ever accepted for the run that reads it.
            let json = serde_json::to_value(&b).expect("a baseline encodes");
            assert_eq!(json["run_id"], "fuzz-run");
        }
    } else {
        let path = TrustedBuild::record_path(layout, run, COMMIT);
        std::fs::write(&path, content).expect("write the record");
        let _ = TrustedBuild::load(layout, run, COMMIT);
    }
});
