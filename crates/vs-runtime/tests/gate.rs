//! The accuracy gate through the library API the evaluation flow uses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use vs_runtime::{Change, GateBaseline, GateDifference, ProtectedSet, RunId, StateLayout};

#[test]
fn record_then_check_reports_each_difference() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join("eval")).unwrap();
    fs::write(p.join("eval/a"), "a").unwrap();
    fs::write(p.join("eval/b"), "b").unwrap();
    let layout = StateLayout::open(p).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r1").unwrap();
    let set = ProtectedSet::resolve(
        &layout,
        &[PathBuf::from("eval"), PathBuf::from(".vibesys/state")],
    )
    .unwrap();
    assert_eq!(set.roots(), [".vibesys/state", "eval"]);
    let recorded = GateBaseline::record(&layout, &run, &set).unwrap();
    let loaded = GateBaseline::load(&layout, &run).unwrap();
    assert_eq!(recorded, loaded);
    assert!(loaded.check(&layout).unwrap().is_clean());

    fs::write(p.join("eval/a"), "A").unwrap();
    fs::remove_file(p.join("eval/b")).unwrap();
    fs::write(p.join(".vibesys/state/agent-visible/note.md"), "hi").unwrap();
    let report = loaded.check(&layout).unwrap();
    assert_eq!(
        report.differences,
        [
            GateDifference {
                change: Change::Added,
                path: ".vibesys/state/agent-visible/note.md".into()
            },
            GateDifference {
                change: Change::Changed,
                path: "eval/a".into()
            },
            GateDifference {
                change: Change::Removed,
                path: "eval/b".into()
            },
        ]
    );
}

#[test]
fn a_root_reached_through_a_swapped_parent_fails() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join("eval/lib")).unwrap();
    fs::write(p.join("eval/lib/x"), "x").unwrap();
    let layout = StateLayout::open(p).unwrap();
    let run = RunId::new("r").unwrap();
    let set = ProtectedSet::resolve(&layout, &[PathBuf::from("eval/lib")]).unwrap();
    let b = GateBaseline::record(&layout, &run, &set).unwrap();
    // Same bytes, but reached through a symlinked parent the agent controls.
    fs::rename(p.join("eval"), p.join("copy")).unwrap();
    symlink("copy", p.join("eval")).unwrap();
    let report = b.check(&layout).unwrap();
    assert!(!report.is_clean());
    assert!(
        report
            .differences
            .iter()
            .any(|d| d.path == "eval/lib" && d.change == Change::Changed),
        "{report:?}"
    );
}

#[test]
fn the_baseline_file_itself_is_never_part_of_the_set() {
    let dir = tempfile::tempdir().unwrap();
    let layout = StateLayout::open(dir.path()).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r").unwrap();
    let own = PathBuf::from(".vibesys/state/runs/r/gate-baseline.json");
    let set = ProtectedSet::resolve(&layout, &[PathBuf::from(".vibesys/state/runs")]).unwrap();
    GateBaseline::record(&layout, &run, &set).unwrap();
    // Protecting the record file directly and recording again is stable.
    let set = ProtectedSet::resolve(&layout, &[own]).unwrap();
    let b = GateBaseline::record(&layout, &run, &set).unwrap();
    assert!(b.check(&layout).unwrap().is_clean());
    assert!(
        !b.entries()
            .keys()
            .any(|k| k.ends_with("gate-baseline.json"))
    );
}
