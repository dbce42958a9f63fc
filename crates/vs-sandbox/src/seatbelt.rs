//! `SeatbeltSandbox` (macOS): the policy lowered to a Seatbelt profile.
//!
//! The base profile lives in `seatbelt_base.sbpl`; the generated rules
//! refer to paths only through `(param "NAME")`, and the paths travel as
//! `-D NAME=PATH` arguments of `sandbox-exec`, so no path is ever parsed
//! as profile text. Profile generation is platform-neutral (unit-tested on
//! Linux); running it needs macOS.
//!
//! The network is one of [`SeatbeltNetwork`]: open, none (local Unix
//! sockets only), or an egress allow-list, where the profile lets the
//! command connect only to the egress proxy's port on the host loopback
//! (TCP over IPv4) and keeps it from the system resolver's socket, so
//! that names are resolved by the proxy alone and no query carries data
//! out. Macs have no network namespaces: that proxy listens on the host
//! (`crate::egress::EgressProxy::start_loopback`).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::confinement::{Confinement, EnforcementReport};
use crate::error::SandboxError;
use crate::policy::{Access, ResolvedPolicy};

/// The base profile text.
pub const BASE_PROFILE: &str = include_str!("seatbelt_base.sbpl");

/// The `sandbox-exec` executable.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The `env` executable, which sets the proxy variables in front of
/// `sandbox-exec` (the command inherits them).
pub const ENV: &str = "/usr/bin/env";

/// The socket through which macOS resolves names (`mDNSResponder`, which
/// asks the network's DNS servers): closed unless the network is open.
pub const RESOLVER_SOCKET: &str = "/private/var/run/mDNSResponder";

/// What the profile lets the network do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SeatbeltNetwork {
    /// The host's network.
    Open,
    /// Local Unix sockets only, except the resolver's
    /// ([`RESOLVER_SOCKET`]).
    None,
    /// An egress allow-list: TCP over IPv4 to the proxy's port on the host
    /// loopback; local Unix sockets as with [`SeatbeltNetwork::None`]
    /// except the resolver's ([`RESOLVER_SOCKET`]).
    Proxy(u16),
}

impl SeatbeltNetwork {
    /// The profile's network rules.
    fn rules(self) -> String {
        // Without the open network, the resolver's socket is closed too: a
        // query through it reaches the network's DNS servers and could
        // carry data out (under an allow-list the proxy resolves names).
        let local = format!(
            "(allow network* (local unix))\n\
             ; but not the resolver's: a query there could carry data out\n\
             (deny network-outbound (literal \"{RESOLVER_SOCKET}\"))\n\
             (deny network-outbound (remote unix-socket (path-literal \"{RESOLVER_SOCKET}\")))\n"
        );
        match self {
            Self::Open => "(allow network*)\n".into(),
            Self::None => local,
            Self::Proxy(port) => format!(
                "; network: an egress allow-list; local Unix sockets as without network\n\
                 {local}\
                 ; the one door: vibesys's egress proxy, TCP over IPv4 to its port on the host loopback\n\
                 (allow network-outbound (remote tcp4 \"localhost:{port}\"))\n"
            ),
        }
    }
}

/// A Seatbelt profile and the parameters it expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeatbeltPlan {
    /// The profile text (base plus generated rules).
    pub profile: String,
    /// `-D` parameters, in order.
    pub params: Vec<(String, PathBuf)>,
    /// Variables set for the command, winning over its own (the proxy
    /// variables of an allow-list; empty otherwise).
    pub env: Vec<(String, String)>,
}

impl SeatbeltPlan {
    /// Lowers a resolved policy into a profile and its parameters.
    pub fn new(policy: &ResolvedPolicy, tmpdir: &Path, network: SeatbeltNetwork) -> Self {
        let root = policy.workspace().root();
        let mut params = vec![
            ("WORKSPACE".to_owned(), root.to_path_buf()),
            ("TMPDIR".to_owned(), tmpdir.to_path_buf()),
        ];
        let mut profile = String::from(BASE_PROFILE);
        profile.push_str("\n; generated from the project path policy\n");
        // Ancestors of the project may not be listed.
        for (i, ancestor) in root.ancestors().skip(1).enumerate() {
            let name = format!("ANCESTOR_{i}");
            let _ = writeln!(
                profile,
                "(deny file-read-data (literal (param \"{name}\")))"
            );
            params.push((name, ancestor.to_path_buf()));
        }
        let (mut ro, mut hidden) = (0, 0);
        for entry in policy.entries() {
            let name = match entry.access {
                Access::ReadOnly => {
                    ro += 1;
                    let name = format!("READ_ONLY_{}", ro - 1);
                    let _ = writeln!(profile, "(deny file-write* (subpath (param \"{name}\")))");
                    name
                }
                Access::Hidden => {
                    hidden += 1;
                    let name = format!("HIDDEN_{}", hidden - 1);
                    let _ = writeln!(
                        profile,
                        "(deny file-read* file-write* (subpath (param \"{name}\")))"
                    );
                    name
                }
            };
            params.push((name, entry.host.clone()));
        }
        profile.push_str(&network.rules());
        let env = match network {
            SeatbeltNetwork::Proxy(port) => crate::egress::proxy_env_at(port),
            SeatbeltNetwork::Open | SeatbeltNetwork::None => Vec::new(),
        };
        Self {
            profile,
            params,
            env,
        }
    }

    /// The full argv: `sandbox-exec -p PROFILE -D K=V ... -- argv`, behind
    /// `env K=V ...` when the plan sets variables (`env` runs outside the
    /// profile; no variable is ever taken for the command's program).
    pub fn argv(&self, command: &[OsString]) -> Vec<OsString> {
        let mut out: Vec<OsString> = Vec::new();
        if !self.env.is_empty() {
            out.push(ENV.into());
            out.extend(
                self.env
                    .iter()
                    .map(|(k, v)| OsString::from(format!("{k}={v}"))),
            );
        }
        out.extend([
            SANDBOX_EXEC.into(),
            "-p".into(),
            self.profile.clone().into(),
        ]);
        for (name, path) in &self.params {
            let mut kv = OsString::from(format!("-D{name}="));
            kv.push(path.as_os_str());
            out.push(kv);
        }
        out.push("--".into());
        out.extend(command.iter().cloned());
        out
    }
}

/// Agent confinement with macOS Seatbelt (`sandbox-exec`).
#[derive(Debug, Clone)]
pub struct SeatbeltSandbox {
    plan: SeatbeltPlan,
    chdir: PathBuf,
    report: EnforcementReport,
}

impl SeatbeltSandbox {
    /// Plans Seatbelt confinement; the command starts in `chdir` (inside
    /// the workspace), else the workspace root.
    pub fn new(
        policy: &ResolvedPolicy,
        tmpdir: &Path,
        network: SeatbeltNetwork,
        chdir: Option<PathBuf>,
    ) -> Self {
        Self {
            plan: SeatbeltPlan::new(policy, tmpdir, network),
            chdir: chdir.unwrap_or_else(|| policy.workspace().root().to_path_buf()),
            report: seatbelt_report(policy, network),
        }
    }

    /// The directory the command starts in.
    pub fn chdir(&self) -> &Path {
        &self.chdir
    }

    /// The profile and parameters.
    pub fn plan(&self) -> &SeatbeltPlan {
        &self.plan
    }
}

/// The report of what the Seatbelt backend enforces.
pub fn seatbelt_report(policy: &ResolvedPolicy, network: SeatbeltNetwork) -> EnforcementReport {
    let mut report = EnforcementReport::for_policy("seatbelt", policy, |access| {
        match access {
        Access::ReadOnly => (true, "writes denied by the profile".into()),
        Access::Hidden => (
            true,
            "reads and writes denied by the profile (reads fail with EPERM rather than showing an empty path)".into(),
        ),
    }
    });
    report.outside =
        "writes outside the project and temp dir denied; reads broad (listing ancestors of the project denied)".into();
    report.gaps = vec!["reads outside the project are allowed (Seatbelt profiles stay usable only with broad reads)".into()];
    if let SeatbeltNetwork::Proxy(port) = network {
        report.hardening.push(format!(
            "egress: no (allow network*); TCP over IPv4 only to vibesys's proxy at 127.0.0.1:{port} on the host (named by HTTPS_PROXY, HTTP_PROXY and ALL_PROXY), which admits only the allow-list; local Unix sockets as without network, except the resolver's ({RESOLVER_SOCKET}); the profile is tested as text and type-checked, never run here (no macOS)"
        ));
        report.gaps.extend([
            format!("the proxy's port 127.0.0.1:{port} is on the host's loopback: every local process can use it (it meets the same allow-list)"),
            "Mach services stay reachable (the base profile allows mach-lookup): a system service that connects on a client's behalf is not held to the allow-list".into(),
            "a daemon behind a local Unix socket (allowed as without network) can connect on the command's behalf".into(),
            "an IPv6 socket (Java's default) cannot reach the proxy's IPv4 port: such a tool needs -Djava.net.preferIPv4Stack=true".into(),
        ]);
    }
    report
}

impl Confinement for SeatbeltSandbox {
    fn backend(&self) -> &'static str {
        "seatbelt"
    }

    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        if !cfg!(target_os = "macos") {
            return Err(SandboxError::UnsupportedPlatform {
                backend: "seatbelt",
            });
        }
        Ok(self.plan.argv(argv))
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        host.to_path_buf()
    }

    fn report(&self) -> &EnforcementReport {
        &self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ProjectPathPolicy, Workspace};

    fn plan(network: SeatbeltNetwork) -> SeatbeltPlan {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        SeatbeltPlan::new(&policy, Path::new("/private/tmp"), network)
    }

    /// The profile's rules after the base (what the network mode adds).
    fn generated(plan: &SeatbeltPlan) -> Vec<&str> {
        plan.profile
            .split("; generated from the project path policy\n")
            .nth(1)
            .unwrap()
            .lines()
            .filter(|l| !l.contains("ANCESTOR_") && !l.starts_with(';'))
            .collect()
    }

    /// An allow-list: no `(allow network*)` at all, outbound TCP only to
    /// the proxy's port (IPv4, loopback), Unix sockets as without network
    /// and the resolver's socket denied after them (the last matching
    /// rule wins).
    #[test]
    fn an_allow_list_opens_only_the_proxys_port() {
        let plan = plan(SeatbeltNetwork::Proxy(49152));
        assert!(
            !plan.profile.contains("(allow network*)"),
            "{}",
            plan.profile
        );
        assert!(!plan.profile.contains("(allow network-outbound)"));
        let rules = generated(&plan);
        assert_eq!(
            rules,
            [
                "(allow network* (local unix))",
                "(deny network-outbound (literal \"/private/var/run/mDNSResponder\"))",
                "(deny network-outbound (remote unix-socket (path-literal \"/private/var/run/mDNSResponder\")))",
                "(allow network-outbound (remote tcp4 \"localhost:49152\"))",
            ]
        );
        // Nothing else in the profile grants a network operation.
        let network_allows: Vec<&str> = plan
            .profile
            .lines()
            .filter(|l| l.starts_with("(allow network"))
            .collect();
        assert_eq!(
            network_allows,
            [
                "(allow network* (local unix))",
                "(allow network-outbound (remote tcp4 \"localhost:49152\"))"
            ]
        );
        assert!(!BASE_PROFILE.contains("network"));
    }

    /// Open is the whole network; none is local Unix sockets without the
    /// resolver's (a DNS query could carry data out).
    #[test]
    fn open_is_everything_and_none_has_no_resolver() {
        let open = plan(SeatbeltNetwork::Open);
        assert_eq!(generated(&open), ["(allow network*)"]);
        assert!(open.env.is_empty());
        let none = plan(SeatbeltNetwork::None);
        assert_eq!(
            generated(&none),
            [
                "(allow network* (local unix))",
                "(deny network-outbound (literal \"/private/var/run/mDNSResponder\"))",
                "(deny network-outbound (remote unix-socket (path-literal \"/private/var/run/mDNSResponder\")))",
            ]
        );
        assert!(none.env.is_empty());
        let argv = none.argv(&["ls".into()]);
        assert_eq!(argv[0], SANDBOX_EXEC);
    }

    /// The proxy variables name the proxy's actual port, in both cases,
    /// set by `env` in front of `sandbox-exec` (so they win over the
    /// caller's), and the command follows `--` untouched, even a program
    /// whose name looks like an assignment.
    #[test]
    fn the_proxy_variables_name_the_actual_port() {
        let plan = plan(SeatbeltNetwork::Proxy(49152));
        let argv: Vec<String> = plan
            .argv(&["./a=b".into(), "x".into()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(argv[0], ENV);
        let exec = argv.iter().position(|a| a == SANDBOX_EXEC).unwrap();
        let vars = &argv[1..exec];
        for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            assert!(
                vars.contains(&format!("{name}=http://127.0.0.1:49152")),
                "{vars:?}"
            );
        }
        for name in ["ALL_PROXY", "all_proxy"] {
            assert!(
                vars.contains(&format!("{name}=socks5h://127.0.0.1:49152")),
                "{vars:?}"
            );
        }
        assert!(vars.contains(&"NO_PROXY=".to_owned()), "{vars:?}");
        assert!(vars.contains(&"no_proxy=".to_owned()), "{vars:?}");
        assert!(!vars.iter().any(|v| v.contains(":3128")), "{vars:?}");
        assert_eq!(argv[exec + 1], "-p");
        assert_eq!(argv[argv.len() - 3..], ["--", "./a=b", "x"]);
    }

    /// The report says what the allow-list enforces and what it does not.
    #[test]
    fn the_report_states_the_allow_lists_door_and_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let report = seatbelt_report(&policy, SeatbeltNetwork::Proxy(49152));
        assert!(
            report
                .hardening
                .iter()
                .any(|h| h.contains("127.0.0.1:49152") && h.contains("never run")),
            "{report:?}"
        );
        assert!(report.gaps.iter().any(|g| g.contains("mach-lookup")));
        let open = seatbelt_report(&policy, SeatbeltNetwork::Open);
        assert_eq!(open.gaps.len(), 1);
        assert!(open.hardening.is_empty());
    }
}
