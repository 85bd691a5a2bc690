//! Finding the process's CPU cgroup from `/proc/self/cgroup` and `/proc/self/mountinfo`.

use std::path::{Path, PathBuf};

use crate::{CgroupVersion, Error, Result};

/// One line of `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroupLine {
    /// Hierarchy id (0 for the v2 unified hierarchy).
    pub hierarchy: u32,
    /// Controllers bound to the hierarchy (empty for v2).
    pub controllers: Vec<String>,
    /// The cgroup's path relative to the hierarchy's root.
    pub path: String,
}

/// Parse `/proc/<pid>/cgroup` (cgroups(7)).
pub fn parse_proc_cgroup(text: &str, file: &Path) -> Result<Vec<ProcCgroupLine>> {
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(parse_error(
                file,
                line,
                "expected hierarchy-id:controllers:path",
            ));
        };
        let hierarchy = id
            .parse()
            .map_err(|_| parse_error(file, line, "hierarchy id is not a number"))?;
        if !path.starts_with('/') {
            return Err(parse_error(file, line, "cgroup path must be absolute"));
        }
        lines.push(ProcCgroupLine {
            hierarchy,
            controllers: controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
            path: path.to_owned(),
        });
    }
    Ok(lines)
}

/// A cgroup mount from `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// `cgroup` (v1) or `cgroup2`.
    pub version: CgroupVersion,
    /// The part of the hierarchy mounted there (not `/` inside some containers).
    pub root: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Super options: for v1 the controllers (`rw,cpu,cpuacct`).
    pub super_options: Vec<String>,
}

/// Undo mountinfo's octal escapes (`\040` for a space) in a path field.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let digits = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(v) = u8::from_str_radix(digits, 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse the cgroup mounts out of `/proc/<pid>/mountinfo` (proc(5)); other mounts are skipped.
pub fn parse_mountinfo(text: &str, file: &Path) -> Result<Vec<CgroupMount>> {
    let mut mounts = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            return Err(parse_error(
                file,
                line,
                "no ' - ' separator before the filesystem type",
            ));
        };
        if sep < 6 || fields.len() < sep + 4 {
            return Err(parse_error(file, line, "too few fields"));
        }
        let version = match fields[sep + 1] {
            "cgroup" => CgroupVersion::V1,
            "cgroup2" => CgroupVersion::V2,
            _ => continue,
        };
        mounts.push(CgroupMount {
            version,
            root: unescape(fields[3]),
            mount_point: PathBuf::from(unescape(fields[4])),
            super_options: fields[sep + 3].split(',').map(str::to_owned).collect(),
        });
    }
    Ok(mounts)
}

/// The directory of the process's CPU cgroup: the v1 `cpu` hierarchy when present (hybrid
/// systems bind `cpu` to v1), else the v2 unified hierarchy.
pub fn locate_cpu_cgroup(
    proc_cgroup: &[ProcCgroupLine],
    mounts: &[CgroupMount],
) -> Result<(CgroupVersion, PathBuf)> {
    let v1_line = proc_cgroup
        .iter()
        .find(|l| l.hierarchy != 0 && l.controllers.iter().any(|c| c == "cpu"));
    let v1_mount = mounts
        .iter()
        .find(|m| m.version == CgroupVersion::V1 && m.super_options.iter().any(|o| o == "cpu"));
    if let (Some(line), Some(mount)) = (v1_line, v1_mount) {
        return Ok((CgroupVersion::V1, join_under_mount(mount, &line.path)));
    }
    let v2_line = proc_cgroup
        .iter()
        .find(|l| l.hierarchy == 0 && l.controllers.is_empty());
    let v2_mount = mounts.iter().find(|m| m.version == CgroupVersion::V2);
    if let (Some(line), Some(mount)) = (v2_line, v2_mount) {
        return Ok((CgroupVersion::V2, join_under_mount(mount, &line.path)));
    }
    Err(Error::NotMounted { controller: "cpu" })
}

/// The cgroup path is relative to the hierarchy root; the mount shows the hierarchy from
/// `mount.root` down. Inside a container without a cgroup namespace the two share a prefix.
fn join_under_mount(mount: &CgroupMount, cgroup_path: &str) -> PathBuf {
    let root = mount.root.trim_end_matches('/');
    let rel = cgroup_path
        .strip_prefix(root)
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
        .unwrap_or(if mount.root == "/" { cgroup_path } else { "" });
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        mount.mount_point.clone()
    } else {
        mount.mount_point.join(rel)
    }
}

pub(crate) fn parse_error(file: &Path, content: &str, reason: &'static str) -> Error {
    Error::Parse {
        file: file.to_owned(),
        content: content.chars().take(200).collect(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_spaces() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/trailing\\"), "/trailing\\");
    }

    #[test]
    fn container_root_is_stripped() {
        let mount = CgroupMount {
            version: CgroupVersion::V1,
            root: "/kubepods/pod1/c1".into(),
            mount_point: "/sys/fs/cgroup/cpu".into(),
            super_options: vec!["rw".into(), "cpu".into()],
        };
        assert_eq!(
            join_under_mount(&mount, "/kubepods/pod1/c1"),
            PathBuf::from("/sys/fs/cgroup/cpu")
        );
        assert_eq!(
            join_under_mount(&mount, "/kubepods/pod1/c1/sub"),
            PathBuf::from("/sys/fs/cgroup/cpu/sub")
        );
        // A path outside the mounted part (cgroup namespace root "/") maps to the mount itself.
        assert_eq!(
            join_under_mount(&mount, "/"),
            PathBuf::from("/sys/fs/cgroup/cpu")
        );
    }
}
