//! Running a hidden helper (see [`crate::helper`] for the protocol): the
//! binary's first step, before it parses its own command line.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::exit_codes::{EXIT_CONFINE_FAILED, EXIT_USAGE};
use crate::helper::Helper;

/// The helper entry point: when `args` (the process's whole argv, the
/// program first) names a helper, calls `on_start` with it (the binary
/// sets up logging there), runs it and returns its exit status; `None`
/// otherwise (the caller parses its own command line).
pub fn helper_main(
    mut args: impl Iterator<Item = OsString>,
    on_start: impl FnOnce(&Helper),
) -> Option<i32> {
    let _program = args.next()?;
    let subcommand = args.next()?;
    match Helper::parse(&subcommand, args) {
        Ok(None) => None,
        Ok(Some(helper)) => {
            on_start(&helper);
            Some(helper.run())
        }
        Err(err) => {
            eprintln!("vibesys: error: {err}");
            Some(EXIT_USAGE)
        }
    }
}

impl Helper {
    /// Runs the helper; returns its exit status (errors are printed as
    /// `vibesys: error: ...` with status 125).
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
