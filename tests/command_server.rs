//! `vibesys internal-command-server` as a process, on the host: the
//! protocol the Docker backend speaks to it, hostile input on its stdin,
//! and that the end of stdin kills what still runs. (In a container it is
//! the same code; `docker_sandbox.rs` tests it there.)

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::vibesys_bin;
use vs_docker::wire::{self, Reply, Request, RunRequest};

fn server() -> Child {
    Command::new(vibesys_bin())
        .arg(wire::SERVER_SUBCOMMAND)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn send(child: &mut Child, request: &Request) {
    let body = serde_json::to_vec(request).unwrap();
    wire::write_frame(child.stdin.as_mut().unwrap(), &body).unwrap();
}

fn reply(child: &mut Child) -> Reply {
    let out = child.stdout.as_mut().unwrap();
    let body = wire::read_frame(out, 1 << 24).unwrap().expect("a reply");
    serde_json::from_slice(&body).unwrap()
}

fn run(id: u64, script: &str, dir: &std::path::Path) -> Request {
    Request::Run(RunRequest {
        id,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        cwd: dir.to_string_lossy().into_owned(),
        env: vec![("GREETING".into(), "hi".into())],
        stdin: None,
        timeout_ms: Some(60_000),
        output_cap: 1024,
    })
}

/// Waits for the child to exit (at most 10 s); its status and stderr.
fn finish(mut child: Child) -> (Option<i32>, String, Duration) {
    drop(child.stdin.take());
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err, start.elapsed());
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the server did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn answers_ready_then_each_command_with_its_bounded_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = server();
    assert!(matches!(reply(&mut s), Reply::Ready { .. }));
    send(
        &mut s,
        &run(
            7,
            "echo $GREETING; head -c 5000 /dev/zero; echo err >&2; exit 3",
            dir.path(),
        ),
    );
    let Reply::Done { id, result } = reply(&mut s) else {
        panic!("expected a result")
    };
    assert_eq!((id, result.exit_code, result.signal), (7, 3, None));
    assert!(result.stdout.bytes().starts_with(b"hi\n"));
    assert_eq!(result.stdout.total_bytes(), 5003);
    assert!(result.stdout.bytes().len() <= 1024, "the cap is applied");
    assert_eq!(result.stderr.bytes(), b"err\n");
    // A program that does not exist is the runner's error, as text.
    send(
        &mut s,
        &Request::Run(RunRequest {
            argv: vec!["/no/such/program".into()],
            ..match run(8, "", dir.path()) {
                Request::Run(r) => r,
                Request::Cancel { .. } => unreachable!(),
            }
        }),
    );
    let Reply::Failed { id, error } = reply(&mut s) else {
        panic!("expected a failure")
    };
    assert_eq!(id, 8);
    assert!(error.contains("/no/such/program"), "{error}");
    let (code, _, _) = finish(s);
    assert_eq!(code, Some(0), "a clean end of stdin is a clean exit");
}

#[test]
fn cancel_kills_the_tree_and_the_end_of_stdin_kills_what_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = server();
    assert!(matches!(reply(&mut s), Reply::Ready { .. }));
    send(&mut s, &run(1, "sleep 1000 & sleep 1000", dir.path()));
    std::thread::sleep(Duration::from_millis(200));
    send(&mut s, &Request::Cancel { id: 1 });
    let Reply::Done { result, .. } = reply(&mut s) else {
        panic!("expected a result")
    };
    assert!(result.cancelled && result.signal == Some(9), "{result:?}");

    let pidfile = dir.path().join("pid");
    let script = format!("sleep 1000 & echo $! > {}; wait", pidfile.display());
    send(&mut s, &run(2, &script, dir.path()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pidfile.exists() || std::fs::read_to_string(&pidfile).unwrap().trim().is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().to_owned();
    let (code, err, took) = finish(s);
    assert_eq!(code, Some(0), "{err}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "a command outlived the server's stdin"
    );
}

#[test]
fn hostile_input_ends_the_server_with_a_message_and_no_values() {
    // Not JSON of a request; it carries a secret-looking value.
    let mut s = server();
    assert!(matches!(reply(&mut s), Reply::Ready { .. }));
    let bad = br#"{"type":"run","id":1,"argv":"sk-SECRET-VALUE"}"#;
    wire::write_frame(s.stdin.as_mut().unwrap(), bad).unwrap();
    let (code, err, _) = finish(s);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("malformed request"), "{err}");
    assert!(!err.contains("sk-SECRET-VALUE"), "{err}");

    // A header announcing more than the limit: refused before reading it.
    let mut s = server();
    assert!(matches!(reply(&mut s), Reply::Ready { .. }));
    s.stdin
        .as_mut()
        .unwrap()
        .write_all(&u32::MAX.to_be_bytes())
        .unwrap();
    let (code, err, _) = finish(s);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("over the limit"), "{err}");

    // A stream that ends inside a frame.
    let mut s = server();
    assert!(matches!(reply(&mut s), Reply::Ready { .. }));
    s.stdin
        .as_mut()
        .unwrap()
        .write_all(&[0, 0, 0, 50, b'{'])
        .unwrap();
    let (code, err, _) = finish(s);
    assert_eq!(code, Some(1), "{err}");
}
