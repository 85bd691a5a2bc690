//! cgroup v1, v2 and hybrid layouts from fixture files: locating the CPU cgroup, reading quota
//! and counters, deltas and the throttle ratio, and typed errors on malformed files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ontime_cgroup::{
    parse_cfs_quota, parse_cpu_max, parse_cpu_stat, parse_mountinfo, parse_proc_cgroup,
    CgroupVersion, CpuCgroup, CpuQuota, CpuStat, Error,
};
use proptest::prelude::*;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

#[test]
fn v1_container_is_located_under_its_mount() {
    let cg = CpuCgroup::of_proc_dir(&fixture("v1/proc")).expect("locates");
    assert_eq!(cg.version(), CgroupVersion::V1);
    // The mount shows the pod's own cgroup as its root, so the cgroup is the mount point itself.
    assert_eq!(cg.dir(), Path::new("/sys/fs/cgroup/cpu,cpuacct"));
}

#[test]
fn v2_container_is_located_under_its_mount() {
    let cg = CpuCgroup::of_proc_dir(&fixture("v2/proc")).expect("locates");
    assert_eq!(cg.version(), CgroupVersion::V2);
    assert_eq!(cg.dir(), Path::new("/sys/fs/cgroup"));
}

#[test]
fn hybrid_host_prefers_the_v1_cpu_controller() {
    // This machine: cpu bound to v1 at /sys/fs/cgroup/cpu, an empty v2 at .../unified.
    let cg = CpuCgroup::of_proc_dir(&fixture("hybrid/proc")).expect("locates");
    assert_eq!(cg.version(), CgroupVersion::V1);
    assert_eq!(cg.dir(), Path::new("/sys/fs/cgroup/cpu"));
}

#[test]
fn v1_quota_counters_and_rt_group_scheduling() {
    let cg = CpuCgroup::at(CgroupVersion::V1, fixture("v1/cpu"));
    let quota = cg.quota().expect("quota");
    assert_eq!(quota.quota, Some(Duration::from_millis(50)));
    assert_eq!(quota.period, Duration::from_millis(100));
    assert_eq!(quota.cores(), Some(0.5));
    let stat = cg.stat().expect("stat");
    assert_eq!(stat.nr_periods, 1981);
    assert_eq!(stat.nr_throttled, 131);
    // v1 throttled_time is in nanoseconds.
    assert_eq!(
        stat.throttled_time_summed_per_cpu,
        Duration::from_millis(16_593)
    );
    assert_eq!(stat.usage, None);
    assert!(cg.has_rt_group_scheduling());
    assert_eq!(cg.rt_runtime().expect("rt"), Some(Duration::ZERO));
}

#[test]
fn v2_quota_counters() {
    let cg = CpuCgroup::at(CgroupVersion::V2, fixture("v2/cpu"));
    let quota = cg.quota().expect("quota");
    assert_eq!(quota.cores(), Some(0.5));
    let stat = cg.stat().expect("stat");
    assert_eq!(stat.nr_throttled, 131);
    // v2 throttled_usec is in microseconds: the same 16.6 s summed per CPU.
    assert_eq!(
        stat.throttled_time_summed_per_cpu,
        Duration::from_millis(16_593)
    );
    assert_eq!(stat.usage, Some(Duration::from_millis(49_512)));
    assert!(!cg.has_rt_group_scheduling());
}

#[test]
fn unlimited_quotas() {
    let p = Path::new("cpu.max");
    assert_eq!(parse_cpu_max("max 100000\n", p).expect("ok").cores(), None);
    let q = parse_cfs_quota("-1\n", p, "100000\n", p).expect("ok");
    assert_eq!(q, CpuQuota::unlimited(Duration::from_millis(100)));
}

#[test]
fn deltas_and_throttle_ratio() {
    let before = CpuStat {
        nr_periods: 100,
        nr_throttled: 10,
        throttled_time_summed_per_cpu: Duration::from_millis(500),
        usage: Some(Duration::from_secs(1)),
    };
    let after = CpuStat {
        nr_periods: 300,
        nr_throttled: 60,
        throttled_time_summed_per_cpu: Duration::from_millis(4500),
        usage: Some(Duration::from_secs(7)),
    };
    let d = after.since(&before);
    assert_eq!(d.periods, 200);
    assert_eq!(d.throttled, 50);
    assert_eq!(d.throttle_ratio(), Some(0.25));
    assert_eq!(d.usage, Some(Duration::from_secs(6)));
    assert_eq!(
        before.since(&before).throttle_ratio(),
        None,
        "no period elapsed"
    );
    // A counter reset (new cgroup) saturates instead of wrapping.
    assert_eq!(before.since(&after).periods, 0);
}

#[test]
fn malformed_files_are_parse_errors_naming_file_and_content() {
    let file = Path::new("/sys/fs/cgroup/cpu.max");
    for bad in ["", "50000", "fifty 100000", "50000 100000 7", "max max"] {
        match parse_cpu_max(bad, file) {
            Err(Error::Parse {
                file: f, content, ..
            }) => {
                assert_eq!(f, file);
                assert!(bad.contains(content.trim()) || content.contains(bad.trim()));
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    let stat = Path::new("cpu.stat");
    let err = parse_cpu_stat("nr_periods 5\nnr_throttled x\n", stat).expect_err("bad value");
    assert!(err.to_string().contains("nr_throttled x"), "{err}");
    assert!(
        parse_cpu_stat("usage_usec 5\n", stat).is_err(),
        "counters missing"
    );
    assert!(parse_cfs_quota("-2x", stat, "100000", stat).is_err());
    let proc = Path::new("/proc/self/cgroup");
    assert!(parse_proc_cgroup("garbage", proc).is_err());
    assert!(parse_proc_cgroup("x:cpu:/", proc).is_err());
    assert!(parse_proc_cgroup("1:cpu:relative", proc).is_err());
    assert!(parse_mountinfo("1 2 3 no separator here at all", proc).is_err());
    let err = CpuCgroup::of_proc_dir(Path::new("/nonexistent/proc")).expect_err("no files");
    assert!(
        err.to_string().contains("/nonexistent/proc/cgroup"),
        "{err}"
    );
}

#[test]
fn no_cpu_hierarchy_is_not_mounted() {
    let lines = parse_proc_cgroup("4:memory:/\n", Path::new("c")).expect("parses");
    let mounts = parse_mountinfo(
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
        Path::new("m"),
    )
    .expect("parses");
    assert!(matches!(
        ontime_cgroup::locate_cpu_cgroup(&lines, &mounts),
        Err(Error::NotMounted { controller: "cpu" })
    ));
}

#[test]
fn invalid_quotas_and_names_are_rejected() {
    for cores in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(CpuQuota::from_cores(cores, CpuQuota::DEFAULT_PERIOD).is_err());
    }
    let cg = CpuCgroup::at(CgroupVersion::V1, "/nonexistent");
    let q = CpuQuota::from_cores(0.5, CpuQuota::DEFAULT_PERIOD).expect("valid");
    for name in ["", "a/b", "..", "."] {
        assert!(matches!(
            cg.create_child(name, q, None),
            Err(Error::InvalidName(_))
        ));
    }
}

#[test]
fn v2_child_in_a_plain_directory_writes_cpu_max_and_cleans_up() {
    // A v2-shaped directory on an ordinary filesystem: the files the crate writes can be read
    // back, and the guard removes what it created.
    let root = std::env::temp_dir().join(format!("ontime-cgroup-v2-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("tmp");
    let parent = CpuCgroup::at(CgroupVersion::V2, &root);
    let q = CpuQuota::from_cores(0.5, Duration::from_millis(100)).expect("valid");
    let child = parent.create_child("exp", q, None).expect("created");
    assert_eq!(
        std::fs::read_to_string(root.join("cgroup.subtree_control")).expect("written"),
        "+cpu"
    );
    assert_eq!(
        child.cgroup().quota().expect("read back").cores(),
        Some(0.5)
    );
    assert!(matches!(
        child.add_thread(1),
        Err(Error::Unsupported {
            version: CgroupVersion::V2,
            ..
        })
    ));
    // A real cgroupfs removes the directory with its files; a plain one needs them gone first.
    std::fs::remove_file(child.dir().join("cpu.max")).expect("cleanup");
    child.remove().expect("removed");
    assert!(!root.join("exp").exists());
    std::fs::remove_dir_all(&root).expect("cleanup");
}

proptest! {
    #[test]
    fn cpu_stat_round_trips(periods in any::<u64>(), throttled in any::<u64>(), t in 0u64..u64::MAX / 1000) {
        let v2 = format!("usage_usec 1\nnr_periods {periods}\nnr_throttled {throttled}\nthrottled_usec {t}\n");
        let s = parse_cpu_stat(&v2, Path::new("cpu.stat")).expect("valid");
        prop_assert_eq!(s.nr_periods, periods);
        prop_assert_eq!(s.nr_throttled, throttled);
        prop_assert_eq!(s.throttled_time_summed_per_cpu, Duration::from_micros(t));
    }

    #[test]
    fn parsers_never_panic(text in ".{0,200}") {
        let p = Path::new("f");
        let _ = parse_cpu_stat(&text, p);
        let _ = parse_cpu_max(&text, p);
        let _ = parse_cfs_quota(&text, p, &text, p);
        let _ = parse_proc_cgroup(&text, p);
        let _ = parse_mountinfo(&text, p);
    }

    #[test]
    fn quota_from_cores_round_trips(milli in 10u64..64_000) {
        let cores = milli as f64 / 1000.0;
        let q = CpuQuota::from_cores(cores, CpuQuota::DEFAULT_PERIOD).expect("valid");
        prop_assert!((q.cores().expect("limited") - cores).abs() < 1e-6);
    }
}
