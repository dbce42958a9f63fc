//! Every argv agentshim produces, in one reviewed snapshot: a change to a
//! provider flag shows up as a diff of `snapshots/argv_snapshot__argv.snap`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;

use agentshim::{Launch, Provider, Resume, SessionId};

/// Shell-style rendering, quoting only where needed.
fn render(l: &Launch) -> String {
    let quote = |s: &str| {
        if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_=./:,@%+".contains(&b))
        {
            s.to_owned()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    let mut parts: Vec<String> = l
        .env
        .iter()
        .map(|(k, v)| format!("{k}={}", quote(v)))
        .collect();
    parts.extend(l.argv.iter().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

#[test]
fn argv() {
    let id = Resume::Id(SessionId::new("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").unwrap());
    let prompt = "-fix the 'tests'";
    let mut out = String::new();
    for p in Provider::known() {
        let rows: [(&str, Launch); 7] = [
            ("interactive", p.interactive(&[])),
            (
                "interactive + args",
                p.interactive(&[OsString::from("--model"), OsString::from("m1")]),
            ),
            ("one-shot", p.one_shot(prompt).unwrap()),
            ("resume latest", p.resume(&Resume::Latest, None).unwrap()),
            ("resume id", p.resume(&id, None).unwrap()),
            (
                "resume latest + prompt",
                p.resume(&Resume::Latest, Some(prompt)).unwrap(),
            ),
            ("resume id + prompt", p.resume(&id, Some(prompt)).unwrap()),
        ];
        out.push_str(&format!("[{p}]\n"));
        for (what, launch) in rows {
            out.push_str(&format!("{what:<24} {}\n", render(&launch)));
        }
        out.push_str(&format!(
            "state: {:?}\n",
            p.state_paths()
                .iter()
                .map(|s| s.home_relative)
                .collect::<Vec<_>>()
        ));
        out.push_str(&format!("state vars: {:?}\n", p.state_env_vars()));
        out.push_str(&format!("auth vars: {:?}\n\n", p.auth_env_vars()));
    }
    insta::assert_snapshot!(out);
}
