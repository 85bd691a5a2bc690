//! The harness's quota placement: the program it starts must be inside its CPU cgroup from its
//! first instruction, as in a container. A gateway moved in after it started had already read
//! its cgroup, found no quota, and sized its inference budget and admission for the whole
//! machine. Needs root and a writable CPU cgroup; skips with a printed reason elsewhere.

use std::path::PathBuf;

use ontime_loadgen::gateway::{start_with_limit, Placement};

/// A stand-in for the gateway that records, first thing, which cgroups it runs in, then
/// waits to be killed (it ignores the gateway flags the harness passes).
fn recorder() -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ontime-pod-placement-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("gateway.sh");
    let seen = dir.join("cgroup-at-start");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat /proc/self/cgroup > {}.tmp && mv {0}.tmp {0}\nexec sleep 30\n",
            seen.display()
        ),
    )
    .expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (script, seen)
}

#[test]
fn a_quota_placed_program_starts_inside_its_cgroup() {
    if let Err(e) = ontime_cgroup::CpuCgroup::current() {
        eprintln!("skip: no CPU cgroup for this process ({e})");
        return;
    }
    let (script, seen) = recorder();
    let gw = match start_with_limit(&script, Placement::Quota(0.5), 1, &[]) {
        Ok(gw) => gw,
        Err(
            e @ ontime_loadgen::Error::Cgroup(
                ontime_cgroup::Error::NotRoot { .. }
                | ontime_cgroup::Error::PermissionDenied { .. },
            ),
        ) => {
            eprintln!("skip: cannot create a child cgroup here ({e})");
            return;
        }
        Err(e) => panic!("starting the recorder failed: {e}"),
    };
    let cgroup_dir = gw
        .cgroup
        .as_ref()
        .expect("a quota placement has a cgroup")
        .dir();
    let name = cgroup_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("cgroup name")
        .to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&seen) {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the recorder never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(gw);
    let _ = std::fs::remove_dir_all(seen.parent().expect("temp dir"));
    // The line of the hierarchy with the CPU controller (v1 `…:cpu,cpuacct:/path` or
    // `…:cpu:/path`; v2 `0::/path`) names the child at the program's first instruction.
    let cpu_lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            let controllers = l.split(':').nth(1).unwrap_or("");
            controllers.split(',').any(|c| c == "cpu") || l.starts_with("0::")
        })
        .collect();
    assert_eq!(
        cpu_lines
            .iter()
            .filter(|l| l.ends_with(&format!("/{name}")))
            .count(),
        1,
        "the program started outside {name}: {text}"
    );
}
