//! Egress by allow-list: the sandbox loses the network and gets one door
//! back, a proxy vibesys runs outside it ([`proxy`]) that admits only the
//! hosts and ports of an [`AllowList`], reached through a Unix socket
//! bound in and a forwarder on the sandbox's own loopback ([`forward`]).

pub mod allow;
pub mod denials;
pub mod forward;
pub mod peer;
pub mod proxy;

use std::ffi::OsString;
use std::path::PathBuf;

pub use allow::{AllowList, Host, HostPattern, HostPatternError};
pub use denials::Denial;
pub use proxy::{EgressProxy, ProxyError};

/// The port the forwarder listens on, on the sandbox's own loopback.
pub const INSIDE_PORT: u16 = 3128;
/// Where the proxy's socket is bound inside the sandbox.
pub const INSIDE_SOCKET: &str = "/.vibesys-egress/proxy.sock";
/// Where the vibesys executable (the forwarder) is bound inside.
pub const INSIDE_HELPER: &str = "/.vibesys-egress/vibesys";

/// A sandbox's door out: the allow-list and the proxy's socket on the
/// host.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EgressDoor {
    /// What the proxy admits.
    pub allow: AllowList,
    /// The proxy's Unix socket on the host.
    pub socket: PathBuf,
}

impl EgressDoor {
    /// The door of a running proxy.
    pub fn of(proxy: &EgressProxy, allow: &AllowList) -> Self {
        Self {
            allow: allow.clone(),
            socket: proxy.socket().to_path_buf(),
        }
    }
}

/// The proxy variables a confined command gets (both cases; `NO_PROXY`
/// emptied so that nothing bypasses the door).
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://127.0.0.1:{INSIDE_PORT}");
    let socks = format!("socks5h://127.0.0.1:{INSIDE_PORT}");
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
