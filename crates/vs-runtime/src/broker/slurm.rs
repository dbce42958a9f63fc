//! The Slurm client commands the broker runs (`srun`, `squeue`, `scancel`,
//! `sinfo`): their exact argv, and the parsing of their answers.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::BrokerError;
use crate::id::{CandidateId, RunId};

/// Slurm's own client tools, found once in the broker's `PATH`.
#[derive(Debug, Clone)]
pub struct SlurmTools {
    srun: PathBuf,
    squeue: PathBuf,
    scancel: PathBuf,
    sinfo: PathBuf,
    /// Variables every Slurm command and job gets (PATH, HOME, ...).
    baseline: Vec<(OsString, OsString)>,
}

/// The fixed `PATH` of jobs and Slurm commands.
pub const JOB_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl SlurmTools {
    /// Finds the tools in `path_var`; the error names what to install.
    pub fn find(path_var: Option<&std::ffi::OsStr>) -> Result<Self, BrokerError> {
        let find = |name: &str| {
            vs_sandbox::resources::find_program(std::ffi::OsStr::new(name), path_var).ok_or(
                BrokerError::SlurmMissing {
                    tool: name.to_owned(),
                },
            )
        };
        let mut baseline: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), JOB_PATH.into()),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        for key in ["HOME", "USER", "LOGNAME", "SLURM_CONF", "MUNGE_SOCKET"] {
            if let Some(v) = std::env::var_os(key) {
                baseline.push((key.into(), v));
            }
        }
        Ok(Self {
            srun: find("srun")?,
            squeue: find("squeue")?,
            scancel: find("scancel")?,
            sinfo: find("sinfo")?,
            baseline,
        })
    }

    /// The baseline environment of jobs.
    pub fn baseline(&self) -> &[(OsString, OsString)] {
        &self.baseline
    }

    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear();
        cmd.envs(self.baseline.iter().map(|(k, v)| (k, v)));
        cmd.stdin(Stdio::null());
        cmd
    }

    fn output(&self, program: &Path, args: &[String]) -> Result<String, BrokerError> {
        let out = self
            .command(program)
            .args(args)
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| BrokerError::Io {
                what: format!("run {}", program.display()),
                source,
            })?;
        if !out.status.success() {
            return Err(BrokerError::SlurmCommand {
                command: format!("{} {}", program.display(), args.join(" ")),
                message: String::from_utf8_lossy(&out.stderr)
                    .trim()
                    .chars()
                    .take(512)
                    .collect(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The `srun` command for one job (stdout/stderr to be piped by the caller).
    pub fn srun(&self, job: &JobSubmission) -> Command {
        let mut cmd = self.command(&self.srun);
        cmd.args(job.srun_args());
        cmd.current_dir(&job.cwd);
        cmd
    }

    /// Nodes that can take jobs, from `sinfo`.
    pub fn usable_nodes(&self, partition: Option<&str>) -> Result<Vec<String>, BrokerError> {
        let mut args = vec!["-h".to_owned(), "-N".into(), "-o".into(), "%N %t".into()];
        if let Some(p) = partition {
            args.push(format!("--partition={p}"));
        }
        let text = self.output(&self.sinfo, &args)?;
        let mut nodes: Vec<String> = text
            .lines()
            .filter_map(|l| {
                let (name, state) = l.split_once(' ')?;
                let usable = ![
                    "down", "drain", "fail", "maint", "unk", "futr", "npc", "inval",
                ]
                .iter()
                .any(|s| state.trim().starts_with(s));
                usable.then(|| name.to_owned())
            })
            .collect();
        nodes.sort();
        nodes.dedup();
        Ok(nodes)
    }

    /// Every job of the scope still known to the controller: (id, state).
    pub fn run_jobs(&self, scope: &JobScope) -> Result<Vec<(u64, String)>, BrokerError> {
        let args = vec![
            "-h".to_owned(),
            "--states=PENDING,RUNNING,SUSPENDED,COMPLETING,CONFIGURING,RESIZING,REQUEUED".into(),
            "-o".into(),
            "%i|%j|%k|%T".into(),
        ];
        let text = self.output(&self.squeue, &args)?;
        let comment = scope.comment();
        let prefix = format!("{}-", scope.name_prefix());
        Ok(text
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(4, '|');
                let id = f.next()?.trim().parse::<u64>().ok()?;
                let name = f.next()?;
                let cmt = f.next()?;
                let state = f.next()?.trim().to_owned();
                let ours = cmt == comment
                    || name.strip_prefix(&prefix).is_some_and(|rest| {
                        rest == "probe"
                            || (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
                    });
                ours.then_some((id, state))
            })
            .collect())
    }

    /// Cancels every job of the scope; returns how many were found.
    pub fn cancel_run(&self, scope: &JobScope) -> Result<usize, BrokerError> {
        let jobs = self.run_jobs(scope)?;
        if !jobs.is_empty() {
            let mut args = vec!["--quiet".to_owned()];
            args.extend(jobs.iter().map(|(id, _)| id.to_string()));
            self.output(&self.scancel, &args)?;
        }
        Ok(jobs.len())
    }

    /// Cancels a job by its (unique) name.
    pub fn cancel_name(&self, name: &str) -> Result<(), BrokerError> {
        self.output(
            &self.scancel,
            &["--quiet".to_owned(), format!("--name={name}")],
        )?;
        Ok(())
    }

    /// The final state of a finished job, by name (`COMPLETED`, `FAILED`,
    /// `CANCELLED`, `TIMEOUT`, `NODE_FAIL`, ...), waiting out `COMPLETING`.
    /// `None` when the controller never saw the job.
    pub fn final_state(&self, name: &str) -> Result<Option<(String, String)>, BrokerError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let args = vec![
                "-h".to_owned(),
                "--states=all".into(),
                format!("--name={name}"),
                "-o".into(),
                "%T|%r".into(),
            ];
            let text = self.output(&self.squeue, &args)?;
            let Some(line) = text.lines().next() else {
                return Ok(None);
            };
            let (state, reason) = line.split_once('|').unwrap_or((line, ""));
            let state = state.trim().to_owned();
            let busy = matches!(state.as_str(), "COMPLETING" | "RUNNING" | "CONFIGURING");
            if !busy || Instant::now() > deadline {
                return Ok(Some((state, reason.trim().to_owned())));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// How long `sinfo` may take to answer a status question.
const SINFO_TIMEOUT: Duration = Duration::from_secs(10);

/// One compute node as `sinfo` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// Its state (`idle`, `mix`, `alloc`, `down*`, `drain`, ...).
    pub state: String,
    /// Its generic resources (`gpu:2`, `(null)`).
    pub gres: String,
}

/// Asks `sinfo` (found in `PATH`) for every node; an error when Slurm's
/// tools are missing or the controller does not answer.
pub fn cluster_nodes() -> Result<Vec<NodeInfo>, BrokerError> {
    let tools = SlurmTools::find(std::env::var_os("PATH").as_deref())?;
    let mut child = tools
        .command(&tools.sinfo)
        .args(["-h", "-N", "-o", "%N|%t|%G"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BrokerError::Io {
            what: "run sinfo".into(),
            source,
        })?;
    let deadline = Instant::now() + SINFO_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BrokerError::SlurmCommand {
                    command: "sinfo".into(),
                    message: format!("no answer within {} s", SINFO_TIMEOUT.as_secs()),
                });
            }
        }
    };
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    if let Some(mut o) = child.stdout.take() {
        let _ = (&mut o).take(1 << 20).read_to_string(&mut out);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = (&mut e).take(8192).read_to_string(&mut err);
    }
    if !status.success() {
        return Err(BrokerError::SlurmCommand {
            command: "sinfo".into(),
            message: err.trim().chars().take(512).collect(),
        });
    }
    let mut nodes: Vec<NodeInfo> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, '|');
            Some(NodeInfo {
                name: f.next()?.trim().to_owned(),
                state: f.next()?.trim().to_owned(),
                gres: f.next()?.trim().to_owned(),
            })
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes.dedup_by(|a, b| a.name == b.name);
    Ok(nodes)
}

/// The slurm run environment's availability here: available (the broker,
/// its clients, and `session` / `build --run-environment slurm`) when
/// `sinfo` answers, not available otherwise.
pub fn availability() -> crate::availability::Availability {
    use crate::availability::Availability;
    match cluster_nodes() {
        Ok(nodes) if !nodes.is_empty() => Availability::Available,
        _ => Availability::NotAvailable {
            reason: "sinfo does not answer here (Slurm's client tools missing or no controller reachable); see docs/slurm.md"
                .to_owned(),
        },
    }
}

/// Whose jobs a broker submits, lists and cancels: a run's, or those of
/// one standalone build's checkout within a run. The two never overlap,
/// so a build's broker cannot cancel the jobs of a live run of the same
/// id, nor a run's broker a build's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobScope {
    run: RunId,
    checkout: Option<CandidateId>,
}

impl JobScope {
    /// Every job of `run` (a run's broker).
    pub fn run(run: RunId) -> Self {
        Self {
            run,
            checkout: None,
        }
    }

    /// The jobs of the build checkout `checkout` of `run` (a standalone
    /// build's broker).
    pub fn checkout(run: RunId, checkout: CandidateId) -> Self {
        Self {
            run,
            checkout: Some(checkout),
        }
    }

    /// The name prefix of every job in the scope (`vibesys-RUN` or
    /// `vibesys-RUN-CHECKOUT`); a job's name adds `-N` or `-probe`.
    pub fn name_prefix(&self) -> String {
        match &self.checkout {
            None => format!("vibesys-{}", self.run.as_str()),
            Some(c) => format!("vibesys-{}-{}", self.run.as_str(), c.as_str()),
        }
    }

    /// The comment every job in the scope carries.
    pub fn comment(&self) -> String {
        match &self.checkout {
            None => format!("vibesys-run={}", self.run.as_str()),
            Some(c) => format!("vibesys-run={}/{}", self.run.as_str(), c.as_str()),
        }
    }
}

/// One job as submitted: everything `srun` is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSubmission {
    /// Unique job name (`vibesys-RUN-N`).
    pub name: String,
    /// `vibesys-run=RUN`.
    pub comment: String,
    /// Time limit in minutes.
    pub time_minutes: u32,
    /// GPUs (`--gres=gpu:N`).
    pub gpus: u32,
    /// A node list to pin the job to (the probe).
    pub nodelist: Option<String>,
    /// The partition.
    pub partition: Option<String>,
    /// The working directory.
    pub cwd: PathBuf,
    /// The command run on the compute node.
    pub argv: Vec<OsString>,
}

impl JobSubmission {
    /// The arguments of `srun`.
    pub fn srun_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--quiet".into(),
            format!("--job-name={}", self.name).into(),
            format!("--comment={}", self.comment).into(),
            "--nodes=1".into(),
            "--ntasks=1".into(),
            format!("--time={}", self.time_minutes).into(),
        ];
        if self.gpus > 0 {
            a.push(format!("--gres=gpu:{}", self.gpus).into());
        }
        if let Some(n) = &self.nodelist {
            a.push(format!("--nodelist={n}").into());
        }
        if let Some(p) = &self.partition {
            a.push(format!("--partition={p}").into());
        }
        let mut chdir = OsString::from("--chdir=");
        chdir.push(self.cwd.as_os_str());
        a.push(chdir);
        a.push("--".into());
        a.extend(self.argv.iter().cloned());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_argv_carries_name_comment_and_limits() {
        let job = JobSubmission {
            name: "vibesys-r1-3".into(),
            comment: "vibesys-run=r1".into(),
            time_minutes: 5,
            gpus: 2,
            nodelist: None,
            partition: None,
            cwd: "/w".into(),
            argv: vec!["true".into()],
        };
        let args: Vec<String> = job
            .srun_args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            [
                "--quiet",
                "--job-name=vibesys-r1-3",
                "--comment=vibesys-run=r1",
                "--nodes=1",
                "--ntasks=1",
                "--time=5",
                "--gres=gpu:2",
                "--chdir=/w",
                "--",
                "true"
            ]
        );
    }
}
