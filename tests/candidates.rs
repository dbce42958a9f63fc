//! Candidate isolation: each candidate works in its own git worktree, and
//! an agent confined to one cannot see or change another (nor the run's
//! hidden state), with the real git and the real bwrap.

mod common;

use common::*;
use vs_runtime::{CandidateId, CandidateWorktree, RunId, StateLayout};

#[test]
fn a_confined_candidate_cannot_reach_another() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("git", "apt-get install git");
    let p = project(As::Root);
    std::fs::remove_file(p.root.join("vibesys.toml")).unwrap();
    std::fs::remove_dir_all(p.root.join(".git")).unwrap();
    git(&p.root, &["init", "-q"]);
    std::fs::write(p.root.join("src.txt"), "v1\n").unwrap();
    git(&p.root, &["add", "src.txt", "docs"]);
    git(&p.root, &["commit", "-q", "-m", "c1"]);
    let layout = StateLayout::open(&p.root).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r1").unwrap();
    let a =
        CandidateWorktree::create(&layout, &run, &CandidateId::new("a").unwrap(), "HEAD").unwrap();
    let b =
        CandidateWorktree::create(&layout, &run, &CandidateId::new("b").unwrap(), "HEAD").unwrap();
    std::fs::write(b.path().join("only-in-b.txt"), "B-PRIVATE\n").unwrap();

    let script = format!(
        "cat src.txt; echo edited > src.txt; \
         cat {b}/only-in-b.txt 2>/dev/null && echo SAW-B; \
         echo x > {b}/src.txt 2>/dev/null && echo WROTE-B; \
         ls {runs} 2>/dev/null | grep -q . && echo SAW-RUNS; exit 0",
        b = b.path().display(),
        runs = layout.runs_dir().display()
    );
    let out = exec_sh_command(As::Root, a.path(), "bwrap", &script)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "v1\n", "{}", stderr(&out));
    assert_file_is(a.path().join("src.txt"), "edited\n");
    assert_file_is(b.path().join("src.txt"), "v1\n");

    // git works inside the linked worktree (its gitdir and the common
    // directory are read-only resources), and nothing of the repository
    // can be changed from there.
    let out = exec_sh_command(As::Root, a.path(), "bwrap", "git log --oneline | wc -l; git status --porcelain | grep -q src.txt && echo STATUS-OK; \
             gd=$(git rev-parse --git-common-dir); (echo x >> $gd/config) 2>/dev/null && echo WROTE-CONFIG; \
             (echo x > $gd/hooks/post-checkout) 2>/dev/null && echo WROTE-HOOK; exit 0")
    .output()
    .unwrap();
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(
        text.starts_with("1\n") && text.contains("STATUS-OK"),
        "{text}\n{}",
        stderr(&out)
    );
    assert!(!text.contains("WROTE"), "{text}");
    a.remove().unwrap();
    b.remove().unwrap();
}
