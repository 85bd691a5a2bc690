//! # ontime-cgroup
//!
//! Owns the container's CPU limits: reads the CFS quota and throttle counters of cgroup v1 and v2
//! for the current process, samples deltas and the throttle ratio (Δnr_throttled / Δnr_periods),
//! and creates/removes child cgroups with a given quota for experiments and tests. Files only.
