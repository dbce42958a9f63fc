//! The slurm run environment against a real single-node Slurm
//! (scripts/slurm-up.sh: munged, slurmctld, slurmd, two GRES GPUs over
//! device files): `vibesys broker serve` as a process, its clients, the
//! confinement of agent jobs on the compute node, every refusal, and
//! cancellation on disconnect, SIGTERM and after SIGKILL.

mod common;
mod slurm_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use slurm_support::{GPU_DIR, slurm};

/// Names of the run's jobs Slurm knows (running or finished), except the
/// start-up probe.
fn run_jobs(run: &str, all_states: bool) -> Vec<String> {
    let mut cmd = Command::new("squeue");
    cmd.args(["-h", "-o", "%j|%k|%T"]);
    if all_states {
        cmd.arg("--states=all");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "squeue failed");
    let prefix = format!("vibesys-{run}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&prefix) && !l.starts_with(&format!("{prefix}probe")))
        .map(str::to_owned)
        .collect()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A project with the broker's settings appended to its vibesys.toml.
fn broker_project(who: As, extra: &str) -> Project {
    let p = project(who);
    let mut toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
    toml.push_str(&format!(
        "\n[vibesys.broker]\ngpu_devices = \"{GPU_DIR}/gpu{{}}\"\n\n\
         [gates.check]\nargv = [\"sh\", \"-c\", \"echo gate-stdout; echo gate-stderr >&2; pwd; exit 3\"]\n\n{extra}"
    ));
    std::fs::write(p.root.join("vibesys.toml"), toml).unwrap();
    p
}

const AGENT_GPU: &str = "[vibesys.agent_gpu]\nenabled = true\nmax_gpus = 2\nmax_time_minutes = 5\n";

struct Broker {
    child: Option<Child>,
    agent: PathBuf,
    framework: PathBuf,
    /// `--candidates N`: candidate n's socket at n - 1.
    candidates: Vec<PathBuf>,
    /// `--checkout NAME`: the build checkout's socket.
    checkout: Option<PathBuf>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    who: As,
    root: PathBuf,
}

impl Broker {
    fn start(who: As, p: &Project, run: &str, flags: &[&str]) -> Broker {
        slurm();
        let root = p.root.to_str().unwrap().to_owned();
        let mut args = vec!["broker", "serve", "--project", &root, "--run", run];
        args.extend_from_slice(flags);
        let mut child = command_as(who, &p.root, &vibesys(), &args)
            .env("VIBESYS_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        {
            let mut e = child.stderr.take().unwrap();
            let log = std::sync::Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = e.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    log.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut agent = None;
        let mut framework = None;
        let mut candidates = Vec::new();
        let mut checkout = None;
        while agent.is_none() || framework.is_none() {
            match lines.next() {
                Some(Ok(l)) => {
                    if let Some((_, c)) = l
                        .strip_prefix("candidate ")
                        .and_then(|r| r.split_once(": "))
                    {
                        candidates.push(PathBuf::from(c));
                    } else if let Some(c) = l.strip_prefix("checkout: ") {
                        checkout = Some(PathBuf::from(c));
                    } else if let Some(a) = l.strip_prefix("agent: ") {
                        agent = Some(PathBuf::from(a));
                    } else if let Some(f) = l.strip_prefix("framework: ") {
                        framework = Some(PathBuf::from(f));
                    }
                }
                _ => {
                    let status = child.wait().unwrap();
                    panic!(
                        "the broker exited ({status}) before printing its sockets:\n{}",
                        stderr.lock().unwrap()
                    );
                }
            }
        }
        Broker {
            child: Some(child),
            agent: agent.unwrap(),
            framework: framework.unwrap(),
            candidates,
            checkout,
            stderr,
            who,
            root: p.root.clone(),
        }
    }

    fn client(&self, args: &[&str]) -> Command {
        let mut full = vec!["broker"];
        full.extend_from_slice(args);
        let mut c = command_as(self.who, &self.root, &vibesys(), &full);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }

    fn job(&self, extra: &[&str], script: &str) -> Output {
        let sock = self.agent.to_str().unwrap().to_owned();
        let mut args = vec!["job", "--socket", &sock];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", script]);
        self.client(&args).output().unwrap()
    }

    /// A job through candidate `n`'s socket, in `cwd`.
    fn candidate_job(&self, n: usize, cwd: &Path, script: &str) -> Output {
        let sock = self.candidates[n - 1].to_str().unwrap().to_owned();
        let cwd = cwd.to_str().unwrap().to_owned();
        self.client(&[
            "job", "--socket", &sock, "--cwd", &cwd, "--", "sh", "-c", script,
        ])
        .output()
        .unwrap()
    }

    /// A job through the build checkout's socket, in `cwd`.
    fn checkout_job(&self, cwd: &Path, script: &str) -> Output {
        let sock = self.checkout.as_ref().unwrap().to_str().unwrap().to_owned();
        let cwd = cwd.to_str().unwrap().to_owned();
        self.client(&[
            "job", "--socket", &sock, "--cwd", &cwd, "--", "sh", "-c", script,
        ])
        .output()
        .unwrap()
    }

    fn signal(&mut self, sig: &str) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let st = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        child.wait().unwrap()
    }

    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }
}

#[test]
fn gate_runs_through_the_framework_socket_only() {
    let who = As::Root;
    let p = broker_project(who, "");
    let run = unique("gate");
    let b = Broker::start(who, &p, &run, &[]);
    let fw = b.framework.to_str().unwrap().to_owned();
    let out = b
        .client(&["gate", "--socket", &fw, "check"])
        .output()
        .unwrap();
    assert_code(&out, 3);
    let so = stdout(&out);
    assert!(so.contains("gate-stdout"), "{so}");
    assert!(
        so.contains(&p.root.display().to_string()),
        "gates run in the workspace: {so}"
    );
    assert_stderr_has(&out, "gate-stderr");
    // An unknown gate name is refused: only the operator's argv runs.
    let out = b
        .client(&["gate", "--socket", &fw, "nope"])
        .output()
        .unwrap();
    assert_code_stderr(&out, 125, "no gate \"nope\"");
    // The agent socket never runs gates.
    let ag = b.agent.to_str().unwrap().to_owned();
    let out = b
        .client(&["gate", "--socket", &ag, "check"])
        .output()
        .unwrap();
    assert_code_stderr(&out, 125, "the agent socket cannot run gates");
    assert_eq!(
        run_jobs(&run, true).len(),
        1,
        "only the framework's gate ran"
    );
    // Sockets: operator-only directories, mode 0600.
    use std::os::unix::fs::PermissionsExt;
    for s in [&b.agent, &b.framework] {
        let mode = std::fs::metadata(s).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", s.display());
        let dir = std::fs::metadata(s.parent().unwrap()).unwrap();
        assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    }
    assert!(
        b.log().contains("peer pid="),
        "peer credentials logged: {}",
        b.log()
    );
}

/// In a run each candidate's container gets its own agent socket: a job
/// through it runs only in that candidate's worktree (never the project,
/// never another candidate's), cannot read or write the other worktree or
/// the project, finds `[task] protected` read-only and a fresh, empty HOME.
#[test]
fn a_candidates_socket_reaches_only_its_own_worktree() {
    for who in users() {
        let p = broker_project(
            who,
            &format!("{AGENT_GPU}\n[task]\nobjective = \"x\"\nprotected = [\"eval\"]\n"),
        );
        let run = unique("cand");
        let base = p
            .root
            .join(format!(".vibesys/state/local/candidates/{run}"));
        for n in ["1", "2"] {
            std::fs::create_dir_all(base.join(n).join("eval")).unwrap();
            std::fs::write(base.join(n).join("eval/check.sh"), "exit 1\n").unwrap();
            std::fs::write(base.join(n).join("mine.txt"), format!("CANDIDATE-{n}\n")).unwrap();
        }
        chown_to(who, &[&p.root.join(".vibesys")]);
        let b = Broker::start(who, &p, &run, &["--candidates", "2"]);
        assert_eq!(b.candidates.len(), 2, "{}", b.log());
        // Another candidate's worktree and the project are refused.
        for cwd in [base.join("2"), p.root.clone(), base.clone()] {
            let out = b.candidate_job(1, &cwd, "echo RAN");
            assert_code(&out, 125);
            assert!(!stdout(&out).contains("RAN"));
            assert!(
                stderr(&out).contains("candidate 1's socket runs jobs only in its own worktree"),
                "{who:?} {}: {}",
                cwd.display(),
                stderr(&out)
            );
        }
        let other = base.join("2/mine.txt");
        let out = b.candidate_job(
            1,
            &base.join("1"),
            &format!(
                "cat {other} 2>/dev/null; echo x > {other} 2>/dev/null && echo WROTE-OTHER; \
                 echo PWNED-LINE >> {root}/vibesys.toml 2>/dev/null; \
                 cat {root}/secret/key 2>/dev/null; \
                 echo 'exit 0' > eval/check.sh 2>/dev/null && echo WROTE-PROTECTED; \
                 echo ok > mine.txt && echo WROTE-OWN; \
                 echo home=$HOME; ls -A $HOME | wc -l",
                other = other.display(),
                root = p.root.display()
            ),
        );
        assert_code(&out, 0);
        let so = stdout(&out);
        for bad in ["CANDIDATE-2", "WROTE-OTHER", "SECRET", "WROTE-PROTECTED"] {
            assert!(!so.contains(bad), "{who:?} {bad}: {so}");
        }
        assert!(so.contains("WROTE-OWN"), "{so}");
        assert!(so.contains("home=/tmp/home\n0"), "{so}");
        assert_file_is(&other, "CANDIDATE-2\n");
        assert_file_is(base.join("1/eval/check.sh"), "exit 1\n");
        // The project is not mounted: what the job wrote there stayed in
        // its own private root.
        assert!(
            !std::fs::read_to_string(p.root.join("vibesys.toml"))
                .unwrap()
                .contains("PWNED-LINE")
        );
        // The shared agent socket still serves the project.
        assert_code(&b.job(&[], "true"), 0);
    }
}

#[test]
fn agent_job_runs_confined_on_the_compute_node() {
    for who in users() {
        let p = broker_project(who, AGENT_GPU);
        let run = unique("confined");
        let b = Broker::start(who, &p, &run, &[]);
        let marker = unique("tmp-marker");
        let out = b.job(
            &[
                "--gpus",
                "1",
                "--env",
                "GREETING=hi",
                "--env",
                "SLURM_FAKE=x",
            ],
            &format!(
                "cat secret/key && echo READ-HIDDEN; \
                 echo x > docs/readme && echo WROTE-READ-ONLY; \
                 echo \"tmp=$TMPDIR,$TMP,$TEMP\"; \
                 echo data > \"$TMPDIR/{marker}\" && echo TMP-WRITABLE; \
                 echo \"cuda=$CUDA_VISIBLE_DEVICES\"; \
                 echo \"greeting=$GREETING slurm_fake=${{SLURM_FAKE:-unset}}\"; \
                 ls {GPU_DIR}; echo done"
            ),
        );
        assert_code(&out, 0);
        let so = stdout(&out);
        assert!(
            !so.contains("READ-HIDDEN"),
            "{who:?}: hidden path readable: {so}"
        );
        assert!(
            !so.contains("WROTE-READ-ONLY"),
            "{who:?}: read-only path written: {so}"
        );
        assert!(so.contains("tmp=/tmp,/tmp,/tmp"), "{so}");
        assert!(so.contains("TMP-WRITABLE"), "{so}");
        assert!(so.contains("greeting=hi slurm_fake=unset"), "{so}");
        let cuda = so
            .lines()
            .find_map(|l| l.strip_prefix("cuda="))
            .unwrap_or_default();
        assert_eq!(cuda.split(',').count(), 1, "one GPU allocated: {so}");
        let devices: Vec<&str> = so.lines().filter(|l| l.starts_with("gpu")).collect();
        assert_eq!(
            devices,
            [format!("gpu{cuda}")],
            "only the allocated GPU's device: {so}"
        );
        assert_file_is(p.root.join("docs/readme"), "docs\n");
        // The private /tmp is gone with the job: not on the host, not in
        // the next job.
        assert!(!Path::new("/tmp").join(&marker).exists());
        let out = b.job(
            &["--gpus", "2"],
            &format!("ls /tmp/{marker} 2>&1; echo \"cuda=$CUDA_VISIBLE_DEVICES\"; ls {GPU_DIR}"),
        );
        assert_code(&out, 0);
        let so = stdout(&out);
        assert!(so.contains("No such file"), "{so}");
        assert!(
            so.contains("cuda=0,1") && so.contains("gpu0") && so.contains("gpu1"),
            "{so}"
        );
        // The job's own status comes back, 128+N for a signal.
        assert_code(&b.job(&[], "exit 7"), 7);
        assert_code(&b.job(&[], "kill -9 $$"), 137);
    }
}

#[test]
fn refusals_name_the_cause_and_submit_nothing() {
    let who = As::Root;
    // Agent jobs off: the agent socket refuses every job.
    let p = broker_project(who, "");
    let run = unique("off");
    let b = Broker::start(who, &p, &run, &[]);
    let out = b.job(&[], "echo ran");
    assert_code_stderr(&out, 125, "agent jobs are off");
    drop(b);
    assert!(run_jobs(&run, true).is_empty());

    let p = broker_project(who, AGENT_GPU);
    std::os::unix::fs::symlink("/etc", p.root.join("link-to-etc")).unwrap();
    let run = unique("refuse");
    let b = Broker::start(who, &p, &run, &["--max-time", "3"]);
    let etc_link = p.root.join("link-to-etc");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--cwd".into(), "/etc".into()], "outside the workspace"),
        (
            vec!["--cwd".into(), etc_link.display().to_string()],
            "outside the workspace",
        ),
        (
            vec!["--gpus".into(), "3".into()],
            "above the operator's limit of 2",
        ),
        (vec!["--time".into(), "4".into()], "the operator's limit"),
        (vec!["--time".into(), "0".into()], "outside 1..=3"),
    ];
    for (flags, cause) in &cases {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let out = b.job(&flags, "echo ran");
        assert_code(&out, 125);
        assert!(!stdout(&out).contains("ran"));
        assert!(stderr(&out).contains(cause), "{flags:?}: {}", stderr(&out));
    }
    assert!(
        run_jobs(&run, true).is_empty(),
        "{:?}",
        run_jobs(&run, true)
    );
}

/// Sends raw bytes, returns the reply frames' kinds and the final text.
fn raw_exchange(socket: &Path, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(bytes);
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut reply = Vec::new();
    let _ = s.read_to_end(&mut reply);
    assert!(reply.len() >= 5, "no reply frame: {reply:?}");
    let len = u32::from_be_bytes(reply[..4].try_into().unwrap()) as usize;
    assert_eq!(reply[4], 4, "a final frame");
    String::from_utf8_lossy(&reply[5..4 + len]).into_owned()
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = ((payload.len() + 1) as u32).to_be_bytes().to_vec();
    f.push(kind);
    f.extend_from_slice(payload);
    f
}

#[test]
fn hostile_frames_get_an_error_reply_and_the_broker_keeps_serving() {
    let who = As::Root;
    let p = broker_project(who, AGENT_GPU);
    let run = unique("hostile");
    let b = Broker::start(who, &p, &run, &[]);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (u32::MAX.to_be_bytes().to_vec(), "exceeds the limit"),
        (
            ((64 * 1024 + 2) as u32).to_be_bytes().to_vec(),
            "exceeds the limit",
        ),
        (vec![0, 0, 0, 10, 1, b'{'], "closed before a whole frame"),
        (vec![0, 0, 0, 0], "unknown frame kind 0"),
        (frame(9, b"{}"), "unknown frame kind 9"),
        (frame(2, b"output"), "expected a request frame"),
        (frame(1, b"not json"), "malformed request"),
        (frame(1, &[0xff, 0xfe, 0x00]), "malformed request"),
        (
            frame(1, br#"{"kind":"shell","version":1}"#),
            "malformed request",
        ),
        (
            frame(
                1,
                br#"{"kind":"job","version":1,"argv":["true"],"extra":1}"#,
            ),
            "malformed request",
        ),
        (
            frame(1, br#"{"kind":"job","version":99,"argv":["true"]}"#),
            "unsupported protocol version 99",
        ),
        (
            frame(1, br#"{"kind":"job","version":1,"argv":[]}"#),
            "the command is empty",
        ),
        (
            frame(
                1,
                br#"{"kind":"job","version":1,"argv":["true"],"env":{"A=B":"x"}}"#,
            ),
            "environment variable",
        ),
        (frame(1, &[b'['; 60000]), "malformed request"),
    ];
    for (bytes, cause) in &cases {
        let reply = raw_exchange(&b.agent, bytes);
        assert!(
            reply.contains("\"refused\"") && reply.contains(cause),
            "{cause}: {reply}"
        );
    }
    // A client that connects and trickles a byte at a time does not block
    // others, and is cut off after the request deadline (10 s).
    let mut idle = UnixStream::connect(&b.agent).unwrap();
    idle.write_all(&[0, 0, 0, 100, 1]).unwrap();
    let started = Instant::now();
    let out = b.job(&[], "echo still-serving");
    assert_code(&out, 0);
    assert!(stdout(&out).contains("still-serving"));
    let trickle = std::thread::spawn(move || {
        while idle.write_all(b" ").is_ok() && started.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(500));
        }
        started.elapsed()
    });
    let cut_after = trickle.join().unwrap();
    assert!(
        cut_after < Duration::from_secs(20),
        "a trickling client held its connection for {cut_after:?}"
    );
    assert_eq!(
        run_jobs(&run, true).len(),
        1,
        "only the valid job was submitted"
    );
}

/// A standalone build's broker (`vibesys build --run-environment slurm`
/// runs candidate code): its checkout socket runs jobs only in the
/// build's own checkout (never the project, never a candidate's
/// worktree), and neither its start nor its stop cancels a job of a live
/// run of the same id.
#[test]
fn a_build_checkouts_socket_reaches_only_its_checkout_and_spares_the_runs_jobs() {
    for who in users() {
        let p = broker_project(who, AGENT_GPU);
        let run = unique("bco");
        let name = "build-0123456789abcdef";
        let base = p
            .root
            .join(format!(".vibesys/state/local/candidates/{run}"));
        for d in ["1", name] {
            std::fs::create_dir_all(base.join(d)).unwrap();
        }
        chown_to(who, &[&p.root.join(".vibesys")]);
        let run_broker = Broker::start(who, &p, &run, &["--candidates", "1"]);
        let sock = run_broker.agent.to_str().unwrap().to_owned();
        let mut live = run_broker
            .client(&["job", "--socket", &sock, "--", "sleep", "300"])
            .spawn()
            .unwrap();
        wait_until("the run's job to run", Duration::from_secs(30), || {
            run_jobs(&run, false).iter().any(|l| l.ends_with("RUNNING"))
        });
        let mut build = Broker::start(who, &p, &run, &["--checkout", name]);
        assert!(
            !build.log().contains("leftover"),
            "{who:?}: the build's broker took the run's job for a leftover: {}",
            build.log()
        );
        for cwd in [p.root.clone(), base.join("1"), base.clone()] {
            let out = build.checkout_job(&cwd, "echo RAN");
            assert_code(&out, 125);
            assert!(!stdout(&out).contains("RAN"));
            assert!(
                stderr(&out)
                    .contains("the build checkout's socket runs jobs only in its own worktree"),
                "{who:?} {}: {}",
                cwd.display(),
                stderr(&out)
            );
        }
        let out = build.checkout_job(&base.join(name), "echo RAN; pwd");
        assert_code(&out, 0);
        assert!(stdout(&out).contains("RAN"), "{who:?}: {}", stderr(&out));
        let status = build.signal("-TERM");
        assert!(status.success(), "{status}: {}", build.log());
        assert!(
            run_jobs(&run, false).iter().any(|l| l.ends_with("RUNNING")),
            "{who:?}: the build's broker cancelled the live run's job: {}",
            build.log()
        );
        assert!(live.try_wait().unwrap().is_none(), "the run's client ended");
        drop(run_broker);
        // Cancelled by the run's own broker (123, or srun's kill when the
        // step ends first): never a success.
        let out = live.wait_with_output().unwrap();
        assert!(!out.status.success(), "{}", stderr(&out));
        assert_stderr_has(&out, "CANCELLED");
        wait_until("the run's job to go", Duration::from_secs(30), || {
            run_jobs(&run, false).is_empty()
        });
    }
}

#[test]
fn a_client_that_disconnects_cancels_its_job() {
    let who = As::Root;
    let p = broker_project(who, AGENT_GPU);
    let run = unique("disc");
    let b = Broker::start(who, &p, &run, &[]);
    let sock = b.agent.to_str().unwrap().to_owned();
    let mut client = b
        .client(&["job", "--socket", &sock, "--", "sleep", "300"])
        .spawn()
        .unwrap();
    wait_until("the job to run", Duration::from_secs(30), || {
        run_jobs(&run, false).iter().any(|l| l.ends_with("RUNNING"))
    });
    client.kill().unwrap();
    client.wait().unwrap();
    wait_until("the job to be cancelled", Duration::from_secs(30), || {
        run_jobs(&run, false).is_empty()
    });
    assert!(b.log().contains("cancelling"), "{}", b.log());
}

#[test]
fn sigterm_cancels_every_job_and_sigkill_leftovers_are_cancelled_at_restart() {
    let who = As::Root;
    let p = broker_project(who, AGENT_GPU);
    let run = unique("stop");
    let mut b = Broker::start(who, &p, &run, &[]);
    let sock = b.agent.to_str().unwrap().to_owned();
    let clients: Vec<Child> = (0..2)
        .map(|_| {
            b.client(&["job", "--socket", &sock, "--", "sleep", "300"])
                .spawn()
                .unwrap()
        })
        .collect();
    wait_until("both jobs to run", Duration::from_secs(30), || {
        run_jobs(&run, false)
            .iter()
            .filter(|l| l.ends_with("RUNNING"))
            .count()
            == 2
    });
    let status = b.signal("-TERM");
    assert!(status.success(), "{status}: {}", b.log());
    assert!(run_jobs(&run, false).is_empty());
    for c in clients {
        let out = c.wait_with_output().unwrap();
        assert_code_stderr(&out, 123, "CANCELLED");
    }
    assert!(
        !b.agent.exists() && !b.framework.exists(),
        "sockets removed"
    );

    // SIGKILL leaves the job running; the next start of the run cancels it.
    let mut b = Broker::start(who, &p, &run, &[]);
    let sock = b.agent.to_str().unwrap().to_owned();
    let mut client = b
        .client(&["job", "--socket", &sock, "--", "sleep", "300"])
        .spawn()
        .unwrap();
    wait_until("the job to run", Duration::from_secs(30), || {
        run_jobs(&run, false).iter().any(|l| l.ends_with("RUNNING"))
    });
    b.signal("-KILL");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !run_jobs(&run, false).is_empty(),
        "the job outlived a SIGKILLed broker"
    );
    let b2 = Broker::start(who, &p, &run, &[]);
    assert!(
        b2.log().contains("cancelled 1 leftover job(s)"),
        "{}",
        b2.log()
    );
    wait_until("the leftover to go", Duration::from_secs(30), || {
        run_jobs(&run, false).is_empty()
    });
    let _ = client.kill();
    let _ = client.wait();
}

#[test]
fn the_broker_refuses_to_start_where_the_probe_cannot_enforce_confinement() {
    slurm();
    let who = As::Root;
    let p = broker_project(who, "");
    let mut toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
    toml = toml.replace(
        "[vibesys.broker]\n",
        "[vibesys.broker]\nbwrap = \"/nonexistent/bwrap\"\n",
    );
    std::fs::write(p.root.join("vibesys.toml"), toml).unwrap();
    let run = unique("probe");
    let root = p.root.to_str().unwrap().to_owned();
    let out = vibesys_as(
        who,
        &p.root,
        &["broker", "serve", "--project", &root, "--run", &run],
    );
    assert_code(&out, 125);
    let err = stderr(&out);
    let node =
        String::from_utf8(Command::new("hostname").arg("-s").output().unwrap().stdout).unwrap();
    assert!(
        err.contains(&format!("compute node {}", node.trim())),
        "{err}"
    );
    assert!(
        err.contains("bubblewrap was not found at /nonexistent/bwrap"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "no socket announced");
    assert!(run_jobs(&run, false).is_empty());
}

#[test]
fn run_env_show_and_doctor_report_the_cluster() {
    slurm();
    let out = Command::new(vibesys())
        .args(["run-env", "show", "--run-environment", "slurm", "--json"])
        .output()
        .unwrap();
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let slurm = &json["environments"][0];
    assert_eq!(slurm["name"], "slurm");
    assert_eq!(slurm["availability"]["status"], "available", "{slurm}");
    let out = Command::new(vibesys())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "slurm")
        .unwrap()
        .clone();
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("gres gpu:2"),
        "{check}"
    );
}

#[test]
fn a_job_over_its_time_limit_ends_timed_out_with_its_own_code() {
    let who = As::Root;
    let p = broker_project(who, AGENT_GPU);
    let run = unique("timeout");
    let b = Broker::start(who, &p, &run, &[]);
    // Slurm's smallest limit is one minute; its timer runs every 30 s.
    let started = Instant::now();
    let out = b.job(&["--time", "1"], "echo started; sleep 600");
    assert_code(&out, 124);
    assert!(stdout(&out).contains("started"));
    assert_stderr_has(&out, "ended TIMEOUT");
    assert!(started.elapsed() < Duration::from_secs(240));
    assert!(run_jobs(&run, false).is_empty());
}

/// A project whose `[sandbox]` adds `sandbox` (e.g. `allow_hosts = [...]`).
fn egress_project(who: As, sandbox: &str) -> Project {
    let p = broker_project(who, AGENT_GPU);
    let toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
    let toml = toml.replacen("[sandbox]\n", &format!("[sandbox]\n{sandbox}\n"), 1);
    std::fs::write(p.root.join("vibesys.toml"), toml).unwrap();
    std::fs::write(
        p.root.join("probe.py"),
        common::loopback_http::network_probe("", ""),
    )
    .unwrap();
    chown_to(who, &[&p.root.join("probe.py")]);
    p
}

/// An agent job under an egress allow-list (the project's `[sandbox]
/// allow_hosts`, or the broker's `--allow-host`: a session's or a run's
/// own) has no network of its own: it reaches the listed loopback server
/// through the proxy its node started, and neither the other server (by
/// proxy, by a direct connect) nor anything by UDP; the refusal is named
/// once on the job's stderr. As root and as the unprivileged user.
#[test]
fn an_agent_job_reaches_only_the_allow_listed_host_through_its_proxy() {
    require_tool("curl", "apt-get install curl");
    require_tool("python3", "apt-get install python3");
    let allowed = common::loopback_http::Server::start("ALLOWED");
    let refused = common::loopback_http::Server::start("FORBIDDEN-BODY");
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let (a, r) = (allowed.port, refused.port);
    let script = format!(
        "curl -sS http://127.0.0.1:{a}/; \
         curl -sS -p http://127.0.0.1:{a}/ | sed s/^/TUNNEL-/; \
         echo REFUSED-HTTP $(curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{r}/); \
         curl -s -p http://127.0.0.1:{r}/ >/dev/null; echo REFUSED-CONNECT $?; \
         python3 probe.py {a} {r} {udp_port}"
    );
    for who in users() {
        for from_flag in [false, true] {
            let (listed, flags) = if from_flag {
                (
                    String::new(),
                    vec!["--allow-host".to_owned(), format!("127.0.0.1:{a}")],
                )
            } else {
                (format!("allow_hosts = [\"127.0.0.1:{a}\"]"), Vec::new())
            };
            let p = egress_project(who, &listed);
            let run = unique("egress");
            let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
            let b = Broker::start(who, &p, &run, &flags);
            let refused_before = refused.hits();
            let out = b.job(&[], &script);
            let text = stdout(&out);
            let err = stderr(&out);
            let ctx = format!("{who:?} flag={from_flag}\n--- stdout\n{text}\n--- stderr\n{err}");
            assert_code(&out, 0);
            for want in [
                format!("\nALLOWED-{a}\n"),
                format!("TUNNEL-ALLOWED-{a}\n"),
                "REFUSED-HTTP 403\n".into(),
                format!("DIRECT-FAILED {a} "),
                format!("DIRECT-FAILED {r} "),
                "UDP-OUT-FAILED".into(),
            ] {
                assert!(
                    format!("\n{text}").contains(&want),
                    "missing {want:?}: {ctx}"
                );
            }
            refused.assert_refused(refused_before, &text, &ctx);
            let mut datagram = [0u8; 16];
            assert!(
                udp.recv_from(&mut datagram).is_err(),
                "a datagram reached the host: {ctx}"
            );
            // One line per refused host, however often it was asked for.
            assert_eq!(
                err.matches(&format!("vibesys: egress refused: 127.0.0.1:{r} "))
                    .count(),
                1,
                "{ctx}"
            );
        }
    }
}

/// The list a job gets is the broker's, fixed when it started: an
/// allow-list written into the project's vibesys.toml afterwards (by an
/// operator, or by an agent where the file is writable) does not open or
/// change the job's network: the job is refused, nothing runs. With the
/// network off (`--no-network`, `[sandbox] network = false`) an
/// allow-list adds no door: the job stays without any network.
#[test]
fn a_job_never_runs_open_beside_an_allow_list_and_no_network_stays_none() {
    require_tool("curl", "apt-get install curl");
    let allowed = common::loopback_http::Server::start("ALLOWED");
    let a = allowed.port;
    let probe = format!(
        "echo proxy=${{HTTPS_PROXY:-none}}; echo CODE $(curl -s -o /dev/null -w '%{{http_code}}' --noproxy '*' http://127.0.0.1:{a}/); \
         echo VIA $(curl -s -o /dev/null -w '%{{http_code}}' -x http://127.0.0.1:3128 http://127.0.0.1:{a}/)"
    );
    for who in users() {
        let p = egress_project(who, "");
        let run = unique("late");
        let b = Broker::start(who, &p, &run, &[]);
        // Open: the node's network.
        let out = b.job(&[], &probe);
        assert_code(&out, 0);
        assert!(
            stdout(&out).contains("CODE 200"),
            "{who:?}: {}",
            stdout(&out)
        );
        let toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
        std::fs::write(
            p.root.join("vibesys.toml"),
            toml.replacen(
                "[sandbox]\n",
                &format!("[sandbox]\nallow_hosts = [\"127.0.0.1:{a}\"]\n"),
                1,
            ),
        )
        .unwrap();
        let hits = allowed.hits();
        let out = b.job(&[], &format!("echo RAN; {probe}"));
        assert_code(&out, 125);
        assert!(!stdout(&out).contains("RAN"), "{who:?}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("the run's broker did not start with"),
            "{who:?}: {}",
            stderr(&out)
        );
        assert_eq!(allowed.hits(), hits);
        drop(b);

        for (sandbox, flags) in [
            (
                format!("allow_hosts = [\"127.0.0.1:{a}\"]"),
                vec!["--no-network"],
            ),
            (
                format!("network = false\nallow_hosts = [\"127.0.0.1:{a}\"]"),
                Vec::new(),
            ),
        ] {
            let p = egress_project(who, &sandbox);
            let run = unique("nonet");
            let b = Broker::start(who, &p, &run, &flags);
            let hits = allowed.hits();
            let out = b.job(&[], &probe);
            assert_code(&out, 0);
            let so = stdout(&out);
            assert!(
                so.contains("proxy=none") && so.contains("CODE 000") && so.contains("VIA 000"),
                "{who:?} {sandbox:?} {flags:?}: {so}"
            );
            assert_eq!(allowed.hits(), hits, "{who:?} {sandbox:?} {flags:?}");
        }
    }
}

/// An invalid pattern stops the broker before it serves (exit 125, the
/// pattern named).
#[test]
fn the_broker_refuses_an_invalid_allow_list() {
    slurm();
    let who = As::Root;
    let p = egress_project(who, "allow_hosts = [\"*\"]");
    let root = p.root.to_str().unwrap().to_owned();
    let run = unique("badlist");
    for (flags, bad) in [(vec![], "\"*\""), (vec!["--allow-host", "x:0"], "\"x:0\"")] {
        if !flags.is_empty() {
            std::fs::write(p.root.join("vibesys.toml"), "").unwrap();
        }
        let mut args = vec!["broker", "serve", "--project", &root, "--run", &run];
        args.extend(flags);
        let out = vibesys_as(who, &p.root, &args);
        assert_code_stderr(&out, 125, bad);
        assert!(stdout(&out).is_empty(), "no socket announced");
    }
}
