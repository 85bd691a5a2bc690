//! `scripts/call.sh`, the by-hand call of the user docs, against the real binary: it places the
//! call, and says in plain words that it was answered and what the caller heard.

mod common;

use std::process::Command;

use common::*;

#[test]
fn call_sh_says_the_call_was_answered_and_the_reply_heard() {
    if !require("sipp") || !require("tshark") || !require("python3") {
        return;
    }
    let gw = start_gateway(&[]);
    let out = Command::new(workspace().join("scripts/call.sh"))
        .arg(gw.sip.to_string())
        .env("LISTEN_S", "8")
        .output()
        .expect("run scripts/call.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "call.sh failed:\n{text}\n{err}");
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
            .to_string()
    };
    assert_eq!(line("answered:"), "answered:   yes (200 OK)");
    assert_eq!(
        line("hung up:"),
        "hung up:    by us after listening (BYE answered 200)"
    );
    // "reply:      N RTP packets came back, M of them voiced (...)": the stub's reply is over a
    // second of speech, 50 packets a second.
    let reply = line("reply:");
    let voiced: u32 = reply
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no voiced count in `{reply}`"));
    assert!(voiced >= 50, "{reply}");
    assert!(line("turn:").contains("ms after the caller's speech ended"));
}

/// Every `@PLACEHOLDER@` of `fixtures/sipp/` has a row in docs/gateway.md's placeholder table,
/// and every row names a placeholder still in use.
#[test]
fn every_sipp_placeholder_is_documented() {
    let docs = std::fs::read_to_string(workspace().join("docs/gateway.md")).unwrap();
    let table = &docs[docs
        .find("### The sipp scenarios and their placeholders")
        .expect("the placeholder section")..];
    let documented: std::collections::BTreeSet<String> = table
        .lines()
        .skip_while(|l| !l.starts_with("| placeholder |"))
        .take_while(|l| l.starts_with('|'))
        .flat_map(|l| {
            let first = l.split(" | ").next().unwrap_or("").to_string();
            first
                .split('`')
                .filter(|w| w.len() > 2 && w.starts_with('@') && w.ends_with('@'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut used = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(workspace().join("fixtures/sipp")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut rest = text.as_str();
        while let Some(start) = rest.find('@') {
            let after = &rest[start + 1..];
            let Some(end) = after.find('@') else { break };
            let name = &after[..end];
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                used.insert(format!("@{name}@"));
                rest = &after[end + 1..];
            } else {
                rest = after;
            }
        }
    }
    assert_eq!(
        documented, used,
        "docs/gateway.md's placeholder table vs fixtures/sipp"
    );
}
