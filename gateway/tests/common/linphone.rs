//! Debian's linphonec (`linphone-cli`) as a test's caller, driven on its standard input in file
//! mode (`soundcard use files`: it plays a WAV and records what it hears), with its own `HOME`
//! and configuration under the test's directory, and its log kept for the assertions.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use super::Proc;

/// A running linphonec; killed on drop.
pub struct Linphonec {
    proc: Proc,
    stdin: Option<ChildStdin>,
    dir: PathBuf,
    log_file: PathBuf,
}

impl Linphonec {
    /// Starts linphonec in `dir` on `linphonerc`'s `sip` lines (the test's transports, contact
    /// and security) and `rest` (its codec sections, say), with what every test here wants:
    /// IPv4 only (`ipv6_migration_done` keeps liblinphone from turning IPv6 back on), media on
    /// the ports `rtp` bound to and advertised on loopback, RTCP on its own port, no echo
    /// canceller.
    pub fn start(dir: &Path, sip: &str, rtp: (u16, u16), rest: &str) -> Linphonec {
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(".local/share/linphone")).unwrap();
        let (rtp_lo, rtp_hi) = rtp;
        let rc = dir.join("linphonerc");
        std::fs::write(
            &rc,
            format!(
                "[sip]\nuse_ipv6=0\nipv6_migration_done=1\n{sip}\n\n\
                 [rtp]\naudio_rtp_port={rtp_lo}-{rtp_hi}\nrtcp_mux=0\nbind_address=127.0.0.1\n\n\
                 [sound]\nechocancellation=0\n\n{rest}"
            ),
        )
        .unwrap();
        let log_file = dir.join("linphonec.log");
        let child = Command::new("linphonec")
            .arg("-c")
            .arg(&rc)
            .args(["-d", "6", "-l"])
            .arg(&log_file)
            .env("HOME", &home)
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(dir.join("linphonec.out")).unwrap())
            .stderr(std::fs::File::create(dir.join("linphonec.err")).unwrap())
            .spawn()
            .expect("spawn linphonec");
        let mut proc = Proc {
            child,
            name: "linphonec".into(),
        };
        let stdin = proc.child.stdin.take();
        Linphonec {
            proc,
            stdin,
            dir: dir.to_path_buf(),
            log_file,
        }
    }

    /// Types `command` at its prompt.
    pub fn send(&mut self, command: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            writeln!(stdin, "{command}").unwrap();
        }
    }

    /// What it printed on its standard output so far (`codec list` answers there).
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("linphonec.out")).unwrap_or_default()
    }

    /// Its standard output and its log so far.
    pub fn logs(&self) -> String {
        [
            self.output(),
            std::fs::read_to_string(&self.log_file).unwrap_or_default(),
        ]
        .join("\n")
    }

    /// Hangs up (`terminate`), waits up to 10 s for `ended`, quits and waits for it to exit.
    /// Returns whether `ended` held, and its logs.
    pub fn hang_up(mut self, ended: impl FnMut() -> bool) -> (bool, String) {
        self.send("terminate");
        let ended = super::wait_until(Duration::from_secs(10), ended);
        self.send("quit");
        drop(self.stdin.take());
        let _ = self.proc.wait_timeout(Duration::from_secs(10));
        (ended, self.logs())
    }
}
