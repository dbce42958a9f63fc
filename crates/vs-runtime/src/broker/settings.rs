//! The broker's trusted settings: `[vibesys.agent_gpu]`, `[vibesys.broker]`,
//! `[gates.NAME]` and the network of `[sandbox]` of the operator's
//! `vibesys.toml`, plus the flags of `vibesys broker serve`. Clients never
//! add to them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::BrokerError;
use super::slurm::JobScope;
use crate::fsutil::read_bounded;
use crate::id::{CandidateId, RunId};

/// Default time limit of a job, in minutes, when none is configured.
pub const DEFAULT_MAX_TIME_MINUTES: u32 = 60;
/// Default GPU limit when agent GPU jobs are on and none is configured.
pub const DEFAULT_MAX_GPUS: u32 = 1;
/// Where a GPU's device node is, `{}` standing for its Slurm GRES index.
pub const DEFAULT_GPU_DEVICES: &str = "/dev/nvidia{}";

#[derive(Debug, Default, Deserialize)]
struct RawFile {
    #[serde(default)]
    vibesys: RawVibesys,
    #[serde(default)]
    gates: BTreeMap<String, RawGate>,
}

#[derive(Debug, Default, Deserialize)]
struct RawVibesys {
    #[serde(default)]
    agent_gpu: Option<RawAgentGpu>,
    #[serde(default)]
    broker: Option<RawBroker>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgentGpu {
    #[serde(default)]
    enabled: bool,
    max_gpus: Option<u32>,
    max_time_minutes: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBroker {
    bwrap: Option<PathBuf>,
    gpu_devices: Option<String>,
    partition: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    argv: Vec<String>,
}

/// The flags of `vibesys broker serve` (they override the file).
#[derive(Debug, Clone, Default)]
pub struct BrokerFlags {
    /// `--agent-gpu`: turn agent GPU jobs on.
    pub agent_gpu: bool,
    /// `--max-gpus N`.
    pub max_gpus: Option<u32>,
    /// `--max-time MIN`.
    pub max_time_minutes: Option<u32>,
    /// `--candidates N`: one agent socket per candidate of the run, each
    /// bound to that candidate's worktree.
    pub candidates: u32,
    /// `--checkout NAME`: a standalone build's broker. One more socket,
    /// bound to the run's build checkout `NAME`, and only that checkout's
    /// jobs are the broker's to list and cancel.
    pub checkout: Option<CandidateId>,
    /// `--allow-host`: added to `[sandbox] allow_hosts` for every agent
    /// job (the session's or the run's own `--allow-host`).
    pub allow_hosts: Vec<String>,
    /// `--no-network`: agent jobs get no network.
    pub no_network: bool,
}

/// The network every job of the broker gets, decided once at start from
/// `[sandbox] network` and `allow_hosts` of the operator's `vibesys.toml`
/// and the broker's `--no-network` and `--allow-host` ([`decide_network`]);
/// the compute node takes it from the job's `internal-host-job`
/// arguments, never from a file the agent could have changed since.
pub use vs_sandbox::helper::JobNetwork;

/// Decides the jobs' network from the configuration's `network` and
/// `allow_hosts` and the broker's flags; an invalid pattern is an error
/// naming it.
fn decide_network(
    config: &vs_sandbox::config::PolicyConfig,
    flags: &BrokerFlags,
    path: &Path,
) -> Result<JobNetwork, BrokerError> {
    let hosts: Vec<String> = config
        .allow_hosts
        .iter()
        .chain(&flags.allow_hosts)
        .cloned()
        .collect();
    if let Err(errors) = vs_sandbox::egress::AllowList::parse(&hosts) {
        let each: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(BrokerError::Config {
            path: path.to_path_buf(),
            reason: format!(
                "invalid egress allow-list ([sandbox] allow_hosts or --allow-host): {}",
                each.join("; ")
            ),
        });
    }
    Ok(if flags.no_network || config.network == Some(false) {
        JobNetwork::Off
    } else if hosts.is_empty() {
        JobNetwork::Open
    } else {
        JobNetwork::AllowList(hosts)
    })
}

/// Everything the broker trusts, validated.
#[derive(Debug, Clone)]
pub struct BrokerSettings {
    /// The workspace (canonical): jobs run in it or its candidate worktrees.
    pub project: PathBuf,
    /// How many candidate agent sockets to serve (`--candidates`).
    pub candidates: u32,
    /// The run; jobs carry it in their name and comment.
    pub run: RunId,
    /// A standalone build's checkout within the run (`--checkout`).
    pub checkout: Option<CandidateId>,
    /// Whether the agent socket accepts jobs.
    pub agent_jobs: bool,
    /// Largest GPU count a job may ask for.
    pub max_gpus: u32,
    /// Longest time limit a job may ask for, in minutes.
    pub max_time_minutes: u32,
    /// The task's trusted gates: name to argv.
    pub gates: BTreeMap<String, Vec<String>>,
    /// The vibesys executable on the compute nodes (the confinement helper).
    pub helper: PathBuf,
    /// bubblewrap on the compute nodes (default: found in the job's PATH).
    pub bwrap: Option<PathBuf>,
    /// GPU device node pattern (`{}` is the GRES index).
    pub gpu_devices: String,
    /// The Slurm partition (default: the cluster's default).
    pub partition: Option<String>,
    /// The network of every job.
    pub network: JobNetwork,
}

impl BrokerSettings {
    /// Reads the project's own `vibesys.toml` and applies the flags.
    pub fn load(
        project: &Path,
        run: RunId,
        flags: &BrokerFlags,
        helper: PathBuf,
    ) -> Result<Self, BrokerError> {
        let project = std::fs::canonicalize(project).map_err(|source| BrokerError::Io {
            what: format!("resolve the project {}", project.display()),
            source,
        })?;
        if !project.is_dir() {
            return Err(BrokerError::Config {
                path: project,
                reason: "the project is not a directory".into(),
            });
        }
        let path = project.join("vibesys.toml");
        let raw = match read_bounded(&path, 1024 * 1024) {
            Ok(Some(bytes)) => {
                let text = String::from_utf8(bytes).map_err(|_| BrokerError::Config {
                    path: path.clone(),
                    reason: "not UTF-8".into(),
                })?;
                parse(&text, &path)?
            }
            Ok(None) => RawFile::default(),
            Err(e) => {
                return Err(BrokerError::Config {
                    path,
                    reason: e.to_string(),
                });
            }
        };
        let sandbox =
            vs_sandbox::config::PolicyConfig::load(&project).map_err(|e| BrokerError::Config {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let network = decide_network(&sandbox, flags, &path)?;
        let agent = raw.vibesys.agent_gpu.unwrap_or_default();
        let broker = raw.vibesys.broker.unwrap_or_default();
        let mut gates = BTreeMap::new();
        for (name, gate) in raw.gates {
            if gate.argv.is_empty() || gate.argv[0].is_empty() {
                return Err(BrokerError::Config {
                    path,
                    reason: format!("[gates.{name}] argv must not be empty"),
                });
            }
            if gate.argv.iter().any(|a| a.contains('\0')) {
                return Err(BrokerError::Config {
                    path,
                    reason: format!("[gates.{name}] argv contains NUL"),
                });
            }
            gates.insert(name, gate.argv);
        }
        let gpu_devices = broker
            .gpu_devices
            .unwrap_or_else(|| DEFAULT_GPU_DEVICES.to_owned());
        if !gpu_devices.starts_with('/') || gpu_devices.matches("{}").count() != 1 {
            return Err(BrokerError::Config {
                path,
                reason: format!(
                    "[vibesys.broker] gpu_devices {gpu_devices:?} must be an absolute path with one {{}} (the GRES index)"
                ),
            });
        }
        if let Some(b) = &broker.bwrap
            && !b.is_absolute()
        {
            return Err(BrokerError::Config {
                path,
                reason: format!("[vibesys.broker] bwrap {b:?} must be an absolute path"),
            });
        }
        let max_time_minutes = flags
            .max_time_minutes
            .or(agent.max_time_minutes)
            .unwrap_or(DEFAULT_MAX_TIME_MINUTES);
        if max_time_minutes == 0 {
            return Err(BrokerError::Config {
                path,
                reason: "the time limit must be at least one minute".into(),
            });
        }
        if flags.candidates > crate::run::MAX_CANDIDATES {
            return Err(BrokerError::Config {
                path: project.clone(),
                reason: format!(
                    "--candidates must be at most {}",
                    crate::run::MAX_CANDIDATES
                ),
            });
        }
        Ok(Self {
            project,
            candidates: flags.candidates,
            run,
            checkout: flags.checkout.clone(),
            agent_jobs: flags.agent_gpu || agent.enabled,
            max_gpus: flags
                .max_gpus
                .or(agent.max_gpus)
                .unwrap_or(DEFAULT_MAX_GPUS),
            max_time_minutes,
            gates,
            helper,
            bwrap: broker.bwrap,
            gpu_devices,
            partition: broker.partition,
            network,
        })
    }
}

impl BrokerSettings {
    /// The jobs this broker submits, lists and cancels.
    pub fn scope(&self) -> JobScope {
        match &self.checkout {
            None => JobScope::run(self.run.clone()),
            Some(c) => JobScope::checkout(self.run.clone(), c.clone()),
        }
    }
}

fn parse(text: &str, path: &Path) -> Result<RawFile, BrokerError> {
    toml::from_str(text).map_err(|e: toml::de::Error| BrokerError::Config {
        path: path.to_path_buf(),
        reason: e.message().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(toml: &str, flags: &BrokerFlags) -> Result<JobNetwork, BrokerError> {
        let path = Path::new("/p/vibesys.toml");
        let config = vs_sandbox::config::PolicyConfig::parse(toml, path).unwrap();
        decide_network(&config, flags, path)
    }

    fn args(network: &JobNetwork, requested: Option<bool>) -> Vec<String> {
        network
            .for_job(requested)
            .to_args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn the_job_network_is_the_files_and_the_flags_and_a_request_only_narrows_it() {
        let none = BrokerFlags::default();
        assert_eq!(decide("", &none).unwrap(), JobNetwork::Open);
        let listed = decide("[sandbox]\nallow_hosts = [\"pypi.org\"]\n", &none).unwrap();
        assert_eq!(listed, JobNetwork::AllowList(vec!["pypi.org".into()]));
        let flags = BrokerFlags {
            allow_hosts: vec!["127.0.0.1:8080".into()],
            ..BrokerFlags::default()
        };
        let both = decide("[sandbox]\nallow_hosts = [\"pypi.org\"]\n", &flags).unwrap();
        assert_eq!(
            args(&both, None),
            ["--allow-host=pypi.org", "--allow-host=127.0.0.1:8080"]
        );
        // A request for no network wins; a request for the network never
        // drops the list.
        assert_eq!(args(&both, Some(false)), ["--no-network"]);
        assert_eq!(args(&both, Some(true)), args(&both, None));
        assert!(args(&JobNetwork::Open, None).is_empty());
        assert_eq!(args(&JobNetwork::Open, Some(false)), ["--no-network"]);
        // Off (file or flag) beats an allow-list.
        let off = decide(
            "[sandbox]\nnetwork = false\nallow_hosts = [\"pypi.org\"]\n",
            &flags,
        )
        .unwrap();
        assert_eq!(off, JobNetwork::Off);
        assert_eq!(args(&off, Some(true)), ["--no-network"]);
        let no_network = BrokerFlags {
            no_network: true,
            ..flags
        };
        assert_eq!(decide("", &no_network).unwrap(), JobNetwork::Off);
    }

    /// (A bad pattern in the file is refused as the file is read.)
    #[test]
    fn an_invalid_pattern_is_named() {
        let flags = BrokerFlags {
            allow_hosts: vec!["*".into(), "x:0".into()],
            ..BrokerFlags::default()
        };
        let err = decide("[sandbox]\nallow_hosts = [\"pypi.org\"]\n", &flags)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"*\"") && err.contains("\"x:0\""), "{err}");
    }
}
