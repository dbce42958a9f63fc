//! Running a hidden helper (see `vs_sandbox::helper` for the protocol):
//! the binary's first step, before it parses its own command line. Here,
//! in the crate that knows every other, because the helpers' code is
//! vs-sandbox's (launch, Landlock, egress forwarder), vs-docker's (attach,
//! the command server) and the broker's (an agent job on a Slurm compute
//! node).

use std::ffi::OsString;
use std::path::PathBuf;

use vs_sandbox::exit_codes::{EXIT_CONFINE_FAILED, EXIT_USAGE};
use vs_sandbox::{Helper, SandboxError};

use crate::broker::host_job;
use crate::broker::protocol::EXIT_REFUSED;

/// The helper entry point: when `args` (the process's whole argv, the
/// program first) names a helper, starts the log (except for the command
/// server, whose stdout is its reply channel), runs the helper and returns
/// its exit status; `None` otherwise (the caller parses its own
/// command line). Errors are printed as `vibesys: error: ...`.
pub fn run_if_helper(mut args: impl Iterator<Item = OsString>) -> Option<i32> {
    let _program = args.next()?;
    let subcommand = args.next()?;
    match Helper::parse(&subcommand, args) {
        Ok(None) => None,
        Ok(Some(helper)) => {
            if helper != Helper::CommandServer {
                crate::logging::init_stderr();
            }
            Some(run(helper))
        }
        Err(err) => {
            eprintln!("vibesys: error: {err}");
            Some(EXIT_USAGE)
        }
    }
}

/// Runs the helper; returns its exit status (errors are printed as
/// `vibesys: error: ...` with status 125).
fn run(helper: Helper) -> i32 {
    let result = match helper {
        Helper::Launch { slots, limit, argv } => {
            vs_sandbox::launch::run_with_fds(&slots, &argv, &limit)
        }
        Helper::Landlock { plan, limit, argv } => {
            vs_sandbox::launch::run_landlock(&plan, &argv, &limit, None, None)
        }
        Helper::DockerAttach {
            container,
            user,
            workdir,
            env,
            argv,
        } => attach(container, user, workdir, env, argv),
        Helper::CommandServer => return vs_docker::serve_commands(),
        Helper::HostJob(job) => {
            let host_env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            return match host_job::run(&job, &host_env) {
                Ok(code) => i32::from(code),
                Err(e) => {
                    eprintln!(
                        "vibesys: error: agent job not started: {}",
                        crate::error_chain::one_line(&e)
                    );
                    EXIT_REFUSED
                }
            };
        }
        Helper::EgressForward { socket, port, argv } => {
            vs_sandbox::egress::forward::run(&socket, port, &argv)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("vibesys: error: {err}");
            EXIT_CONFINE_FAILED
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
) -> Result<i32, SandboxError> {
    let argv = argv
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| SandboxError::InvalidCommand(format!("argument {a:?} is not UTF-8")))
        })
        .collect::<Result<Vec<String>, _>>()?;
    let request = vs_docker::AttachRequest {
        container,
        user,
        workdir,
        env: vs_docker::EnvAllowList::new(env).pick_from_process(),
        argv,
    };
    vs_docker::attach(&request)
}
