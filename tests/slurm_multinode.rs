//! The slurm run environment on a multi-node cluster of containers
//! (scripts/slurm-cluster.sh): a controller and two compute nodes on a
//! private Docker network, the node image built by `vibesys image build
//! --root` from a debootstrap root and loaded with `vibesys image load`.
//! The broker runs on the controller (the login node); the workspace is
//! mounted at its own path on every node.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// The cluster; removed (containers, network, state) when dropped.
struct Cluster {
    name: String,
}

impl Cluster {
    fn up(share: &Path) -> Cluster {
        require_tool(
            "docker",
            "install Docker (Debian: apt-get install docker.io)",
        );
        require_tool(
            "debootstrap",
            "apt-get install debootstrap (scripts/install-deps.sh)",
        );
        let name = unique("vsmn");
        let cluster = Cluster { name };
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/slurm-cluster.sh"))
            .args(["up", &cluster.name])
            .arg(share)
            .env("VIBESYS_BIN", vibesys())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/slurm-cluster.sh up failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster
    }

    fn ctl(&self) -> String {
        format!("{}-ctl", self.name)
    }

    /// `docker exec` on the controller, in `dir`.
    fn exec(&self, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("docker");
        c.args(["exec", "-w"])
            .arg(dir)
            .arg(self.ctl())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    fn squeue(&self, run: &str) -> Vec<String> {
        let out = Command::new("docker")
            .args(["exec", &self.ctl(), "squeue", "-h", "-o", "%j|%T|%N"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with(&format!("vibesys-{run}-")) && !l.contains("-probe|"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/slurm-cluster.sh"))
            .args(["down", &self.name])
            .output();
    }
}

fn text(out: &Output) -> (String, String) {
    (stdout(out), stderr(out))
}

#[test]
fn jobs_land_on_both_nodes_confined_and_a_lost_node_fails_the_client() {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("slurm-multinode");
    std::fs::create_dir_all(&base).unwrap();
    let share = tempfile::Builder::new()
        .prefix("share")
        .tempdir_in(&base)
        .unwrap();
    let root = share.path().join("project");
    std::fs::create_dir_all(root.join("secret")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("secret/key"), "SECRET\n").unwrap();
    std::fs::write(root.join("docs/readme"), "docs\n").unwrap();
    std::fs::write(
        root.join("vibesys.toml"),
        "[sandbox]\nread_only = [\"docs\"]\nhidden = [\"secret\"]\n\n\
         [vibesys.agent_gpu]\nenabled = true\nmax_gpus = 2\n\n\
         [vibesys.broker]\ngpu_devices = \"/run/vibesys-slurm/gpu{}\"\n\n\
         [gates.where]\nargv = [\"sh\", \"-c\", \"hostname; exit 4\"]\n",
    )
    .unwrap();
    let cluster = Cluster::up(share.path());
    let run = unique("mn");
    let bin = vibesys();
    let bin = bin.to_str().unwrap();
    let project = root.to_str().unwrap();

    // The broker on the controller; its probe ran on n1 and n2.
    let mut broker: Child = cluster
        .exec(
            &root,
            &[
                "sh",
                "-c",
                "echo $$ > /tmp/broker.pid; exec \"$@\"",
                "sh",
                bin,
                "broker",
                "serve",
                "--project",
                project,
                "--run",
                &run,
            ],
        )
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(broker.stdout.take().unwrap()).lines();
    let mut sockets = Vec::new();
    while sockets.len() < 2 {
        let line = lines
            .next()
            .expect("the broker printed its sockets")
            .unwrap();
        sockets.push(line.split_once(": ").unwrap().1.to_owned());
    }
    let (agent, framework) = (sockets[0].clone(), sockets[1].clone());

    // A trusted gate runs on a compute node.
    let out = cluster
        .exec(
            &root,
            &[bin, "broker", "gate", "--socket", &framework, "where"],
        )
        .output()
        .unwrap();
    assert_code(&out, 4);
    let host = stdout(&out);
    assert!(host.trim() == "n1" || host.trim() == "n2", "{host}");

    // Two jobs at once: one CPU per node, so they land on both nodes;
    // each is confined.
    let script = "hostname; sleep 2; cat secret/key && echo READ-HIDDEN; \
                  echo x > docs/readme && echo WROTE-READ-ONLY; \
                  echo \"tmp=$TMPDIR cuda=$CUDA_VISIBLE_DEVICES\"; ls /run/vibesys-slurm";
    let jobs: Vec<Child> = (0..2)
        .map(|_| {
            cluster
                .exec(
                    &root,
                    &[
                        bin, "broker", "job", "--socket", &agent, "--gpus", "1", "--", "sh", "-c",
                        script,
                    ],
                )
                .spawn()
                .unwrap()
        })
        .collect();
    let mut hosts = BTreeSet::new();
    for j in jobs {
        let out = j.wait_with_output().unwrap();
        assert_code(&out, 0);
        let (so, se) = text(&out);
        assert!(
            !so.contains("READ-HIDDEN") && !so.contains("WROTE-READ-ONLY"),
            "{so}{se}"
        );
        assert!(so.contains("tmp=/tmp cuda=0"), "{so}");
        let gpus: Vec<&str> = so.lines().filter(|l| l.starts_with("gpu")).collect();
        assert_eq!(gpus, ["gpu0"], "only the allocated GPU: {so}");
        hosts.insert(so.lines().next().unwrap().trim().to_owned());
    }
    assert_eq!(
        hosts,
        BTreeSet::from(["n1".to_owned(), "n2".to_owned()]),
        "jobs landed on both compute nodes"
    );
    assert_file_is(root.join("docs/readme"), "docs\n");

    // A node lost mid-job: the client gets a clear failure, not a hang.
    let start = Instant::now();
    let client = cluster
        .exec(
            &root,
            &[
                bin, "broker", "job", "--socket", &agent, "--", "sleep", "300",
            ],
        )
        .spawn()
        .unwrap();
    let mut node = String::new();
    while node.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job never ran"
        );
        if let Some(l) = cluster
            .squeue(&run)
            .iter()
            .find(|l| l.contains("|RUNNING|"))
        {
            node = l.rsplit('|').next().unwrap().to_owned();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let killed = Command::new("docker")
        .args(["kill", &format!("{}-{node}", cluster.name)])
        .output()
        .unwrap();
    assert!(killed.status.success());
    let lost = Instant::now();
    let out = client.wait_with_output().unwrap();
    assert!(lost.elapsed() < Duration::from_secs(90), "the client hung");
    assert_code_stderr(&out, 120, "NODE_FAIL");

    // SIGTERM: the broker stops and nothing of the run is left.
    let _ = Command::new("docker")
        .args([
            "exec",
            &cluster.ctl(),
            "sh",
            "-c",
            "kill -TERM $(cat /tmp/broker.pid)",
        ])
        .status();
    let status = broker.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(cluster.squeue(&run).is_empty());
}
