//! The egress proxy's refusals: each one kept (the first
//! [`MAX_KEPT_DENIALS`]) for the run record and, when a log is attached,
//! appended to it as one JSON line; the first of each host:port named in
//! one line on stderr; all counted.
//!
//! Everything a refusal holds but its time, port, reason and `via` came
//! from the confined side (the host asked for, the command line of the
//! process that asked), so it is kept as [`shown`] makes it: bounded,
//! with no control character (no newline to forge a line, no terminal
//! escape sequence) and no bidirectional override.

use std::collections::HashSet;
use std::io::Write;

use serde::Serialize;

/// Refusals kept in memory for the run record (and logged); the total is
/// counted.
pub const MAX_KEPT_DENIALS: usize = 10_000;
/// The most bytes of a refused host kept in a [`Denial`] (a DNS name has
/// at most 253; a client may send 16 KiB of anything).
pub const MAX_SHOWN_HOST: usize = 255;
/// The most bytes of a command line kept in a [`Denial`].
pub const MAX_SHOWN_COMMAND: usize = 512;

/// One refused connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Denial {
    /// When (RFC 3339, UTC).
    pub time: String,
    /// The host asked for.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Why it was refused.
    pub reason: String,
    /// How it was asked for: `connect`, `http` or `socks5`.
    pub via: &'static str,
    /// The process that asked (its pid on the host), when it could be
    /// known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// That process's command line as it presents it (arguments joined
    /// by spaces), when it could be known. Written by the confined
    /// process: it may lie.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// The refusals of one proxy: the first of each host:port named on
/// stderr, the first [`MAX_KEPT_DENIALS`] kept for the run record and
/// appended to the log (when one is attached), all counted.
#[derive(Debug, Default)]
pub struct Denials {
    seen: HashSet<(String, u16)>,
    kept: Vec<Denial>,
    total: u64,
    log: Option<std::fs::File>,
}

impl Denials {
    /// Appends every refusal kept from now on to `log`, one JSON object a
    /// line.
    pub fn log_to(&mut self, log: std::fs::File) {
        self.log = Some(log);
    }

    /// Whether a refusal recorded now would be kept (worth finding out
    /// which process made it).
    pub fn keeps_more(&self) -> bool {
        self.kept.len() < MAX_KEPT_DENIALS
    }

    /// The refusals kept and their total.
    pub fn kept(&self) -> (Vec<Denial>, u64) {
        (self.kept.clone(), self.total)
    }

    /// Records `denial`: bounded and cleaned, named on stderr when its
    /// host:port is new, kept and logged while fewer than
    /// [`MAX_KEPT_DENIALS`] are.
    pub fn record(&mut self, denial: Denial) {
        let mut stderr = std::io::stderr().lock();
        self.record_to(denial, &mut stderr);
    }

    fn record_to(&mut self, mut denial: Denial, stderr: &mut dyn Write) {
        denial.host = shown(&denial.host, MAX_SHOWN_HOST);
        denial.command = denial.command.map(|c| shown(&c, MAX_SHOWN_COMMAND));
        self.total += 1;
        if self.seen.len() < MAX_KEPT_DENIALS
            && self.seen.insert((denial.host.clone(), denial.port))
        {
            let _ = writeln!(stderr, "{}", stderr_line(&denial));
        }
        if self.kept.len() >= MAX_KEPT_DENIALS {
            return;
        }
        if let Some(log) = &mut self.log
            && let Ok(mut line) = serde_json::to_vec(&denial)
        {
            line.push(b'\n');
            if let Err(e) = log.write_all(&line) {
                let _ = writeln!(
                    stderr,
                    "vibesys: egress: cannot append to the refusal log ({e}); later refusals are not logged"
                );
                self.log = None;
            }
        }
        self.kept.push(denial);
        if self.kept.len() == MAX_KEPT_DENIALS {
            let _ = writeln!(
                stderr,
                "vibesys: egress: {MAX_KEPT_DENIALS} refusals recorded; later ones are counted, not recorded"
            );
        }
    }
}

/// The line a new refused host:port gets on stderr (its parts already
/// [`shown`]).
fn stderr_line(d: &Denial) -> String {
    let mut line = format!(
        "vibesys: egress refused: {}:{} ({})",
        d.host, d.port, d.reason
    );
    match (d.pid, &d.command) {
        (Some(pid), Some(command)) => line.push_str(&format!(" by pid {pid}: {command}")),
        (Some(pid), None) => line.push_str(&format!(" by pid {pid}")),
        _ => {}
    }
    line
}

/// `text` as a refusal keeps it: every control character (C0, DEL, C1:
/// newlines, carriage returns, escape sequences) and every bidirectional
/// formatting character escaped (`\n`, `\u{1b}`, `\u{202e}`), then cut to
/// at most `max` bytes on a character boundary, marked `...` when cut.
pub fn shown(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max) + 3);
    for c in text.chars() {
        let before = out.len();
        if c.is_control() || is_bidi_format(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
        if out.len() > max {
            out.truncate(before);
            out.push_str("...");
            break;
        }
    }
    out
}

/// Unicode's explicit bidirectional formatting characters (embeddings,
/// overrides, isolates, marks): they reorder what a terminal shows.
fn is_bidi_format(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(host: &str, port: u16, command: Option<&str>) -> Denial {
        Denial {
            time: String::new(),
            host: host.into(),
            port,
            reason: "not in the allow-list".into(),
            via: "connect",
            pid: command.map(|_| 7),
            command: command.map(str::to_owned),
        }
    }

    /// A client decides the host a refusal records: it is kept bounded
    /// (in memory, the log, stderr and the run record).
    #[test]
    fn a_refused_host_is_recorded_bounded() {
        let mut d = Denials::default();
        let mut err = Vec::new();
        d.record_to(denial(&"\u{e9}".repeat(8000), 1, None), &mut err);
        d.record_to(denial("a.example.com", 2, None), &mut err);
        assert!(
            d.kept[0].host.len() <= MAX_SHOWN_HOST + 3,
            "{}",
            d.kept[0].host.len()
        );
        assert!(d.kept[0].host.ends_with("..."));
        assert!(d.seen.iter().all(|(h, _)| h.len() <= MAX_SHOWN_HOST + 3));
        assert_eq!(d.kept[1].host, "a.example.com");
        assert_eq!(d.total, 2);
    }

    /// A SOCKS5 client names its host in any bytes: a newline or an
    /// escape sequence in it cannot forge a second stderr line or reach
    /// the terminal; the command line is cleaned the same way.
    #[test]
    fn hostile_hosts_and_commands_keep_to_one_clean_line() {
        let mut d = Denials::default();
        let mut err = Vec::new();
        let host = "evil\nvibesys: egress refused: fake:1 (x)\u{1b}[2J";
        let command = format!(
            "python3 -c x\n\r\u{1b}]0;title\u{7}\u{202e}{}",
            "A".repeat(100_000)
        );
        d.record_to(denial(host, 9, Some(&command)), &mut err);
        let err = String::from_utf8(err).unwrap();
        assert_eq!(err.lines().count(), 1, "{err:?}");
        assert!(!err.trim_end().chars().any(char::is_control), "{err:?}");
        assert!(!err.contains('\u{202e}'), "{err:?}");
        assert!(err.contains("evil\\nvibesys"), "{err:?}");
        assert!(err.contains("by pid 7: python3 -c x\\n\\r\\u{1b}]0;title\\u{7}\\u{202e}AAA"));
        let kept = d.kept[0].command.as_deref().unwrap();
        assert!(kept.len() <= MAX_SHOWN_COMMAND + 3, "{}", kept.len());
        assert!(kept.ends_with("..."));
    }

    /// The log gets one JSON line per kept refusal, with the process.
    #[test]
    fn the_log_gets_one_json_line_per_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut d = Denials::default();
        d.log_to(std::fs::File::create(&path).unwrap());
        let mut err = Vec::new();
        d.record_to(
            denial("a.example.com", 1, Some("curl\u{1b}[31m a")),
            &mut err,
        );
        d.record_to(denial("a.example.com", 1, None), &mut err);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["command"], "curl\\u{1b}[31m a");
        assert_eq!(lines[0]["pid"], 7);
        assert!(lines[1].get("command").is_none(), "{text}");
        // Named on stderr once.
        assert_eq!(String::from_utf8(err).unwrap().lines().count(), 1);
    }

    /// Past [`MAX_KEPT_DENIALS`] refusals are counted, not kept or logged.
    #[test]
    fn refusals_past_the_cap_are_only_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut d = Denials::default();
        d.log_to(std::fs::File::create(&path).unwrap());
        let mut err = Vec::new();
        for i in 0..MAX_KEPT_DENIALS + 5 {
            d.record_to(denial("h", (i % 60_000) as u16 + 1, None), &mut err);
        }
        assert_eq!(d.kept.len(), MAX_KEPT_DENIALS);
        assert_eq!(d.total, MAX_KEPT_DENIALS as u64 + 5);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), MAX_KEPT_DENIALS);
        assert!(!d.keeps_more());
    }

    #[test]
    fn shown_cuts_on_a_character_boundary() {
        assert_eq!(shown("abc", 3), "abc");
        assert_eq!(shown("abcd", 3), "abc...");
        assert_eq!(shown("a\u{e9}", 2), "a...");
        assert_eq!(shown("a\tb", 10), "a\\tb");
        assert_eq!(shown("\u{9b}", 10), "\\u{9b}");
    }
}
