//! Where the gateway under test runs: spawned by the harness on free loopback ports (optionally
//! confined like a pod: a CFS-quota child cgroup, or one dedicated core), or already running.

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ontime_cgroup::{ChildCgroup, CpuCgroup, CpuQuota, CpuStat};

use crate::http::MetricsUrl;
use crate::{os, Error, Result};

/// How the spawned gateway is confined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Placement {
    /// Shares the machine with the harness.
    Shared,
    /// One dedicated core (its affinity; no quota); the harness keeps off it.
    Cpuset(usize),
    /// A child cgroup with this CFS quota in cores (the period is the parent's).
    Quota(f64),
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Shared => write!(f, "shared"),
            Placement::Cpuset(c) => write!(
                f,
                "cpuset {c} (dedicated core, no quota, weight {POD_CPU_WEIGHT})"
            ),
            Placement::Quota(q) => write!(f, "cpu quota {q} cores (weight {POD_CPU_WEIGHT})"),
        }
    }
}

/// RTP ports reserved per call (RTP and RTCP).
const PORTS_PER_CALL: u16 = 2;

/// A gateway the harness started; killed (and its cgroup removed) on drop.
#[derive(Debug)]
pub struct SpawnedGateway {
    child: Child,
    /// Its SIP address.
    pub sip: SocketAddr,
    /// Its metrics page.
    pub metrics: MetricsUrl,
    /// The quota cgroup it runs in, if any.
    pub cgroup: Option<ChildCgroup>,
    /// Where its stdout/stderr go.
    pub log_dir: PathBuf,
}

impl SpawnedGateway {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Throttle counters of its cgroup, if it has one.
    pub fn cgroup_stat(&self) -> Option<CpuStat> {
        self.cgroup.as_ref().and_then(|c| c.stat().ok())
    }

    /// The process has exited.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for SpawnedGateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The cgroup guard drops after this, once the process is gone.
    }
}

fn free_udp() -> Result<SocketAddr> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|source| Error::Os {
            action: "find a free UDP port",
            source,
        })
}

fn free_tcp() -> Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(|source| Error::Os {
            action: "find a free TCP port",
            source,
        })
}

/// A block of `n` free UDP ports on loopback starting at an even port.
fn free_port_range(n: u16) -> Result<(u16, u16)> {
    for _ in 0..200 {
        let base = (free_udp()?.port() & !1).max(20_000);
        let Some(end) = base.checked_add(n) else {
            continue;
        };
        if (base..end).all(|p| UdpSocket::bind(("127.0.0.1", p)).is_ok()) {
            return Ok((base, end - 1));
        }
    }
    Err(Error::Gateway(format!(
        "no {n} free consecutive UDP ports on loopback"
    )))
}

/// The ONNX Runtime library and models as `scripts/fetch-models.sh` leaves them, for when
/// `ORT_DYLIB_PATH` / `ONTIME_MODELS_DIR` are unset.
fn default_models_env(cmd: &mut Command) {
    let models = Path::new(".cache/models");
    if std::env::var_os("ONTIME_MODELS_DIR").is_none() && models.is_dir() {
        cmd.env("ONTIME_MODELS_DIR", models);
    }
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        let lib = std::fs::read_dir(models).ok().and_then(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("libonnxruntime.so"))
                })
                .max()
        });
        if let Some(lib) = lib {
            cmd.env("ORT_DYLIB_PATH", lib);
        }
    }
}

/// CPU weight of the gateway's cgroup: like a container with CPUs of its own, so its quota or
/// its core, not neighbours at the default weight, limit it (see `ChildCgroup::set_cpu_weight`).
const POD_CPU_WEIGHT: u32 = 10_000;

/// RT runtime per second for the gateway's cgroup where v1 RT group scheduling needs one, so
/// its SCHED_FIFO sender may run there.
const POD_RT_RUNTIME: Duration = Duration::from_millis(100);

/// A child cgroup for the gateway, like a pod: a CFS quota ([`Placement::Quota`]) or none
/// ([`Placement::Cpuset`], whose core comes from the affinity the process inherited). The
/// gateway joins it before it execs ([`os::join_cgroup_before_exec`]), as in a container.
fn pod_cgroup(placement: Placement) -> Result<ChildCgroup> {
    let parent = CpuCgroup::current()?;
    let period = parent.quota()?.period;
    let quota = match placement {
        Placement::Quota(cores) => CpuQuota::from_cores(cores, period)?,
        _ => CpuQuota::unlimited(period),
    };
    let rt = parent.has_rt_group_scheduling().then_some(POD_RT_RUNTIME);
    let name = format!("ontime-load-{}", std::process::id());
    let cg = parent.create_child(&name, quota, rt)?;
    cg.set_cpu_weight(POD_CPU_WEIGHT)?;
    Ok(cg)
}

/// Start `binary` on free loopback ports for up to `max_calls` calls, confined per `placement`,
/// with `extra` flags; then [`SpawnedGateway::wait_ready`].
///
/// Call it before starting the harness's own threads: with [`Placement::Cpuset`] it leaves the
/// calling thread on every other core, and threads started afterwards inherit that.
pub fn start(
    binary: &Path,
    placement: Placement,
    max_calls: usize,
    extra: &[String],
) -> Result<SpawnedGateway> {
    start_with_limit(binary, placement, max_calls + 4, extra)
}

/// [`start`] with the gateway's admission limit (`--max-calls`) exactly `limit`: the soak's
/// churn offers calls beyond it. RTP ports are reserved for `limit` + 4 calls.
pub fn start_with_limit(
    binary: &Path,
    placement: Placement,
    limit: usize,
    extra: &[String],
) -> Result<SpawnedGateway> {
    let sip = free_udp()?;
    let metrics_addr = free_tcp()?;
    let ports = u16::try_from(limit + 4)
        .ok()
        .and_then(|n| n.checked_mul(PORTS_PER_CALL))
        .ok_or_else(|| Error::Invalid {
            what: "steps",
            reason: format!("{limit} calls need more RTP ports than UDP has"),
        })?;
    let (first, last) = free_port_range(ports)?;
    let log_dir =
        std::env::temp_dir().join(format!("ontime-load-{}-{}", std::process::id(), sip.port()));
    std::fs::create_dir_all(&log_dir).map_err(|source| Error::Io {
        action: "create log directory",
        path: log_dir.clone(),
        source,
    })?;
    let file = |name: &str| {
        std::fs::File::create(log_dir.join(name)).map_err(|source| Error::Io {
            action: "create gateway log",
            path: log_dir.join(name),
            source,
        })
    };
    let mut cmd = Command::new(binary);
    cmd.args(["--sip-listen", &sip.to_string()])
        .args(["--metrics-listen", &metrics_addr.to_string()])
        .args(["--rtp-ports", &format!("{first}-{last}")])
        .args(["--max-calls", &limit.to_string()])
        .args(["--log-format", "json"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(file("gateway.log")?)
        .stderr(file("gateway.err")?);
    if std::env::var_os("RUST_LOG").is_none() {
        cmd.env("RUST_LOG", "info");
    }
    default_models_env(&mut cmd);

    let cgroup = match placement {
        Placement::Shared => None,
        _ => {
            let cg = pod_cgroup(placement)?;
            let procs = cg.dir().join("cgroup.procs");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&procs)
                .map_err(|source| Error::Io {
                    action: "open the gateway cgroup's process list",
                    path: procs,
                    source,
                })?;
            os::join_cgroup_before_exec(&mut cmd, file);
            Some(cg)
        }
    };

    // A cpuset is inherited: narrow this thread to the core, spawn, then give this thread (and
    // the harness threads it starts later) every other core.
    let before = os::current_thread_affinity();
    if let Placement::Cpuset(core) = placement {
        os::set_current_thread_affinity(&[core])?;
    }
    let spawned = cmd.spawn();
    if let Placement::Cpuset(core) = placement {
        let rest: Vec<usize> = before.iter().copied().filter(|&c| c != core).collect();
        os::set_current_thread_affinity(if rest.is_empty() { &before } else { &rest })?;
    }
    let child = spawned.map_err(|source| Error::Io {
        action: "start gateway",
        path: binary.to_owned(),
        source,
    })?;
    let gw = SpawnedGateway {
        child,
        sip,
        metrics: MetricsUrl {
            addr: metrics_addr,
            path: "/metrics".into(),
        },
        cgroup,
        log_dir,
    };
    Ok(gw)
}

impl SpawnedGateway {
    /// Wait (up to 60 s: models load at start-up) until `/readyz` answers 200.
    pub async fn wait_ready(&mut self) -> Result<()> {
        let gw = self;
        let ready = MetricsUrl {
            addr: gw.metrics.addr,
            path: "/readyz".into(),
        };
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if ready.get(Duration::from_secs(2)).await.is_ok() {
                return Ok(());
            }
            if gw.exited() {
                let err =
                    std::fs::read_to_string(gw.log_dir.join("gateway.err")).unwrap_or_default();
                return Err(Error::Gateway(format!(
                    "exited before ready; stderr: {}",
                    err.trim()
                )));
            }
            if Instant::now() > until {
                return Err(Error::Gateway(format!(
                    "not ready within 60 s (logs in {})",
                    gw.log_dir.display()
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
