//! The argv agentshim produces, run for real: stand-in executables named
//! `codex`, `claude` and `gemini`, first on PATH, record what they were
//! given (argv NUL-separated, plus the launch variables), and the test
//! compares that with what agentshim said it would pass.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use agentshim::{Launch, Provider, Resume, SessionId};

const RECORDER: &str = r#"#!/bin/sh
# Stand-in agent CLI: records its name, argv and launch variables.
out="$RECORD_DIR/$(basename "$0").record"
{
  printf 'argv0=%s\0' "$(basename "$0")"
  for a in "$@"; do printf 'arg=%s\0' "$a"; done
  for v in IS_SANDBOX GEMINI_SANDBOX GEMINI_CLI_TRUST_WORKSPACE; do
    eval "set=\${$v+x}"
    if [ -n "$set" ]; then eval "printf 'env=%s=%s\0' $v \"\$$v\""; fi
  done
} > "$out"
"#;

fn install_standins(dir: &Path) {
    for name in ["codex", "claude", "gemini", "my-agent"] {
        let path = dir.join(name);
        std::fs::write(&path, RECORDER).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// Runs `launch` the way a launcher would: explicit environment, stand-ins
/// first on PATH. Returns the recorded fields.
fn run(bin: &Path, rec: &Path, launch: &Launch) -> Vec<String> {
    let (program, args) = launch.argv.split_first().unwrap();
    let status = Command::new(program)
        .args(args)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("RECORD_DIR", rec)
        .envs(launch.env.iter().copied())
        .status()
        .unwrap();
    assert!(status.success());
    let name = Path::new(program)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let bytes = std::fs::read(rec.join(format!("{name}.record"))).unwrap();
    std::fs::remove_file(rec.join(format!("{name}.record"))).unwrap();
    bytes
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8(f.to_vec()).unwrap())
        .collect()
}

fn expected(launch: &Launch) -> Vec<String> {
    let (program, args) = launch.argv.split_first().unwrap();
    let mut v = vec![format!(
        "argv0={}",
        Path::new(program).file_name().unwrap().to_string_lossy()
    )];
    v.extend(args.iter().map(|a| format!("arg={}", a.to_string_lossy())));
    // The recorder prints variables in this fixed order.
    for name in ["IS_SANDBOX", "GEMINI_SANDBOX", "GEMINI_CLI_TRUST_WORKSPACE"] {
        if let Some((k, val)) = launch.env.iter().find(|(k, _)| *k == name) {
            v.push(format!("env={k}={val}"));
        }
    }
    v
}

#[test]
fn standins_receive_exactly_the_argv_agentshim_produces() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let rec = tmp.path().join("rec");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&rec).unwrap();
    install_standins(&bin);

    // A prompt that a shell or a careless argv builder would mangle.
    let prompt = "-n 'quoted' \"double\" $HOME `x` ;\nsecond line\t* ?";
    let id = Resume::Id(SessionId::new("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap());
    let mut ran = 0;
    for p in Provider::known() {
        let launches = [
            p.interactive(&[]),
            p.interactive(&[OsString::from("--model"), OsString::from("with space")]),
            p.one_shot(prompt).unwrap(),
            p.resume(&Resume::Latest, None).unwrap(),
            p.resume(&id, None).unwrap(),
            p.resume(&id, Some(prompt)).unwrap(),
            p.resume(&Resume::Latest, Some(prompt)).unwrap(),
        ];
        for l in &launches {
            assert_eq!(l.argv[0], OsString::from(p.name()), "bare program name");
            let got = run(&bin, &rec, l);
            assert_eq!(got, expected(l), "{p}");
            ran += 1;
        }
    }
    // The prompt arrives as one argument, byte for byte.
    let got = run(&bin, &rec, &Provider::Claude.one_shot(prompt).unwrap());
    assert_eq!(
        got.iter().rfind(|f| f.starts_with("arg=")).unwrap(),
        &format!("arg={prompt}")
    );
    assert!(got.contains(&"env=IS_SANDBOX=1".to_owned()));
    let got = run(&bin, &rec, &Provider::Gemini.one_shot(prompt).unwrap());
    assert!(got.contains(&format!("arg=--prompt={prompt}")));
    assert!(got.contains(&"env=GEMINI_SANDBOX=false".to_owned()));

    // A custom command, given by path.
    let custom =
        Provider::custom([bin.join("my-agent").into_os_string(), "--flag".into()]).unwrap();
    let got = run(&bin, &rec, &custom.one_shot(prompt).unwrap());
    assert_eq!(
        got,
        [
            "argv0=my-agent".to_owned(),
            "arg=--flag".to_owned(),
            format!("arg={prompt}")
        ]
    );
    assert_eq!(ran, 21);
}
