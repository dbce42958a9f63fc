//! Egress by allow-list: the sandbox loses the network and gets one door
//! back, a proxy vibesys runs outside it ([`proxy`]) that admits only the
//! hosts and ports of an [`AllowList`]. The door is one of two
//! [`Entrance`]s: a Unix socket bound in, over which a listener on the
//! sandbox's own loopback is handed to the proxy ([`forward`]; bwrap,
//! Landlock, Docker), or, where there is no network namespace to make one
//! in (Seatbelt), the proxy's own listener on the host loopback, the one
//! address the sandbox's profile lets it connect to.

pub mod allow;
pub mod denials;
pub mod forward;
pub mod peer;
pub mod proxy;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use allow::{AllowList, Host, HostPattern, HostPatternError};
pub use denials::Denial;
pub use proxy::{EgressProxy, ProxyError};

/// The port the forwarder listens on, on the sandbox's own loopback.
pub const INSIDE_PORT: u16 = 3128;
/// Where the proxy's socket is bound inside the sandbox.
pub const INSIDE_SOCKET: &str = "/.vibesys-egress/proxy.sock";
/// Where the vibesys executable (the forwarder) is bound inside.
pub const INSIDE_HELPER: &str = "/.vibesys-egress/vibesys";

/// How a sandbox reaches its proxy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Entrance {
    /// The proxy's Unix datagram socket on the host: the sandbox listens
    /// on its own loopback at [`INSIDE_PORT`] and hands that listener
    /// over (bwrap, Landlock, Docker).
    Handover(PathBuf),
    /// The proxy's own listener at `127.0.0.1:PORT` on the host, the one
    /// address the sandbox may connect to (Seatbelt: macOS has no network
    /// namespaces). `0` in a plan: the port is chosen when it starts.
    Loopback(u16),
}

/// Which [`Entrance`] a backend needs (see `crate::resolve::Backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntranceKind {
    /// [`Entrance::Handover`].
    Handover,
    /// [`Entrance::Loopback`].
    Loopback,
}

impl Entrance {
    /// Which kind this is.
    pub fn kind(&self) -> EntranceKind {
        match self {
            Self::Handover(_) => EntranceKind::Handover,
            Self::Loopback(_) => EntranceKind::Loopback,
        }
    }
}

/// A sandbox's door out: the allow-list and how the proxy is reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EgressDoor {
    /// What the proxy admits.
    pub allow: AllowList,
    /// How the sandbox reaches the proxy.
    pub entrance: Entrance,
}

impl EgressDoor {
    /// The door of a running proxy.
    pub fn of(proxy: &EgressProxy, allow: &AllowList) -> Self {
        Self {
            allow: allow.clone(),
            entrance: proxy.entrance().clone(),
        }
    }

    /// A door through the proxy's Unix socket at `socket`.
    pub fn handover(allow: AllowList, socket: impl Into<PathBuf>) -> Self {
        Self {
            allow,
            entrance: Entrance::Handover(socket.into()),
        }
    }

    /// The proxy's Unix socket, for a [`Entrance::Handover`] door.
    pub fn socket(&self) -> Option<&Path> {
        match &self.entrance {
            Entrance::Handover(p) => Some(p),
            Entrance::Loopback(_) => None,
        }
    }

    /// The proxy's port on the host loopback, for a
    /// [`Entrance::Loopback`] door.
    pub fn loopback_port(&self) -> Option<u16> {
        match self.entrance {
            Entrance::Loopback(port) => Some(port),
            Entrance::Handover(_) => None,
        }
    }
}

/// The proxy variables a confined command behind a handed-over listener
/// gets ([`INSIDE_PORT`]; see [`proxy_env_at`]).
pub fn proxy_env() -> Vec<(String, String)> {
    proxy_env_at(INSIDE_PORT)
}

/// The proxy variables naming `127.0.0.1:port` (both cases; `NO_PROXY`
/// emptied so that nothing bypasses the door).
pub fn proxy_env_at(port: u16) -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{port}");
    let socks = format!("socks5h://127.0.0.1:{port}");
    let mut out = Vec::new();
    for (name, value) in [
        ("HTTPS_PROXY", &http),
        ("HTTP_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &String::new()),
    ] {
        out.push((name.to_owned(), value.clone()));
        out.push((name.to_ascii_lowercase(), value.clone()));
    }
    out
}

/// Whether `name` is one of the proxy variables [`proxy_env`] sets.
pub fn is_proxy_var(name: &str) -> bool {
    ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"]
        .iter()
        .any(|p| p.eq_ignore_ascii_case(name))
}

/// The argv that runs `command` behind the forwarder (`helper` is the
/// vibesys executable as the sandbox sees it).
pub fn forwarder_argv(helper: &str, socket: &str, command: &[OsString]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        helper.into(),
        crate::helper::Helper::EGRESS_FORWARD.into(),
        "--socket".into(),
        socket.into(),
        "--port".into(),
        INSIDE_PORT.to_string().into(),
        "--".into(),
    ];
    argv.extend(command.iter().cloned());
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handover backends' variables are unchanged (3128); a loopback
    /// door's name its own port.
    #[test]
    fn proxy_variables_name_the_port_given() {
        assert_eq!(proxy_env(), proxy_env_at(INSIDE_PORT));
        let vars = proxy_env_at(49152);
        assert_eq!(vars.len(), 8);
        assert!(vars.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:49152".into())));
        assert!(vars.contains(&("all_proxy".into(), "socks5h://127.0.0.1:49152".into())));
        assert!(vars.contains(&("no_proxy".into(), String::new())));
        assert!(vars.iter().all(|(k, _)| is_proxy_var(k)));
    }
}
