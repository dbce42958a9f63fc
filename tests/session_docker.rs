//! `vibesys session --confine docker`: the same launcher in the run's
//! container (the default run environment), on the real Engine with an
//! image vs-image built; only allow-listed names cross into it.

mod docker_support;

use docker_support::{TestImage, containers_of_run, static_vibesys, unique, vibesys, workspace};

#[test]
fn a_session_runs_confined_in_the_container_with_the_allow_list() {
    let img = TestImage::new();
    let ws = workspace();
    let run_id = unique("session");
    let out = vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_RUN_ID", &run_id)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .env("MY_EXTRA", "extra-value")
        .env("VIBESYS_TEST_SECRET", "must-not-leak")
        .env("OPENAI_API_KEY", "sk-not-for-custom")
        .args(["session", "--provider", "custom", "--confine", "docker", "--image", &img.name])
        .args(["--hidden", "key.txt", "--read-only", "ro", "--env", "MY_EXTRA", "--"])
        .args([
            "/bin/sh",
            "-c",
            "env | sed 's/=.*//' | sort > names; echo \"extra=$MY_EXTRA\" >> names; \
             echo \"key=[$(cat key.txt)]\" >> names; echo x > ro/a.txt 2>/dev/null && echo RO-WRITTEN >> names; \
             exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let names = std::fs::read_to_string(ws.path().join("names")).unwrap();
    assert!(names.contains("extra=extra-value\n"), "{names}");
    assert!(
        names.contains("key=[]\n"),
        "the hidden file was readable: {names}"
    );
    assert!(!names.contains("RO-WRITTEN"), "{names}");
    for leaked in ["VIBESYS_TEST_SECRET", "OPENAI_API_KEY"] {
        assert!(
            !names.lines().any(|l| l == leaked),
            "{leaked} crossed into the container: {names}"
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("must-not-leak") && !err.contains("sk-not"),
        "{err}"
    );
    assert!(
        containers_of_run(&run_id).is_empty(),
        "the session left its container behind"
    );
}
