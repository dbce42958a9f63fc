//! Running a hidden helper (see [`crate::helper`] for the protocol): the
//! binary's first step, before it parses its own command line.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::exit_codes::{EXIT_CONFINE_FAILED, EXIT_USAGE};
use crate::helper::{Helper, HostJob};

/// The helper entry point: when `args` (the process's whole argv, the
/// program first) names a helper, calls `on_start` with it (the binary
/// sets up logging there), runs it and returns its exit status; `None`
/// otherwise (the caller parses its own command line). An agent job
/// ([`Helper::HostJob`]) is confined by the broker's code, which this
/// crate does not hold: `host_job` runs it.
pub fn helper_main(
    mut args: impl Iterator<Item = OsString>,
    on_start: impl FnOnce(&Helper),
    host_job: impl FnOnce(HostJob) -> i32,
) -> Option<i32> {
    let _program = args.next()?;
    let subcommand = args.next()?;
    match Helper::parse(&subcommand, args) {
        Ok(None) => None,
        Ok(Some(helper)) => {
            on_start(&helper);
            Some(match helper {
                Helper::HostJob(job) => host_job(*job),
                helper => helper.run(),
            })
        }
        Err(err) => {
            eprintln!("vibesys: error: {err}");
            Some(EXIT_USAGE)
        }
    }
}

impl Helper {
    /// Runs the helper; returns its exit status (errors are printed as
    /// `vibesys: error: ...` with status 125). An agent job is refused
    /// here: [`helper_main`] hands it to the binary.
    pub fn run(self) -> i32 {
        let result = match self {
            Self::Launch { slots, limit, argv } => {
                crate::launch::run_with_fds(&slots, &argv, &limit)
            }
            Self::Landlock { plan, limit, argv } => {
                crate::launch::run_landlock(&plan, &argv, &limit, None, None)
            }
            Self::DockerAttach {
                container,
                user,
                workdir,
                env,
                argv,
            } => attach(container, user, workdir, env, argv),
            Self::CommandServer => return crate::docker::serve_commands(),
            Self::EgressForward { socket, port, argv } => {
                crate::egress::forward::run(&socket, port, &argv)
            }
            Self::HostJob(_) => Err(crate::SandboxError::Unsupported {
                backend: "bwrap",
                reason: "an agent job is confined by the run's broker code, which helper_main hands it to".into(),
            }),
        };
        match result {
            Ok(code) => code,
            Err(err) => {
                eprintln!("vibesys: error: {err}");
                EXIT_CONFINE_FAILED
            }
        }
    }
}

/// [`Helper::DockerAttach`]: the command in the container, attached.
fn attach(
    container: String,
    user: String,
    workdir: PathBuf,
    env: Vec<String>,
    argv: Vec<OsString>,
) -> Result<i32, crate::SandboxError> {
    let argv = argv
        .into_iter()
        .map(|a| {
            a.into_string().map_err(|a| {
                crate::SandboxError::InvalidCommand(format!("argument {a:?} is not UTF-8"))
            })
        })
        .collect::<Result<Vec<String>, _>>()?;
    let request = crate::docker::AttachRequest {
        container,
        user,
        workdir,
        env: crate::docker::EnvAllowList::new(env).pick_from_process(),
        argv,
    };
    crate::docker::attach(&request)
}
