//! Every dependency a workspace crate declares is used by that crate's code: an unused one still
//! costs every build its compile time and every audit its review, and it is never noticed once
//! it is in. This test reads each member's `Cargo.toml` and looks for each dependency's library
//! name in the package's Rust sources (`src`, `tests`, `examples`, `benches`, `build.rs`).
//!
//! A test rather than `cargo-machete` or `cargo-udeps`: it runs with `cargo test` on the pinned
//! stable toolchain and offline, with nothing to install (udeps needs nightly; machete is a text
//! search like this one, behind a download). What counts as a use: the name followed by `::`
//! (`serde::Deserialize`, `metrics::counter!`, `#[derive(thiserror::Error)]`), `use name` or
//! `extern crate name`; lines that are `//` comments do not count (doc comments do: a
//! dev-dependency may serve only a doctest). A crate that is needed without being named (a
//! feature switched on for another crate, say) goes into `ALLOWED` with its reason.

use std::fs;
use std::path::{Path, PathBuf};

/// Dependencies used without their name appearing in code: (package, dependency, why).
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Library names that differ from the package name by more than `-` → `_`.
const LIB_NAMES: &[(&str, &str)] = &[("md-5", "md5")];

#[test]
fn every_declared_dependency_is_used() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut unused = Vec::new();
    let mut allowed_seen = vec![false; ALLOWED.len()];
    for dir in packages(root) {
        let manifest: toml::Table = fs::read_to_string(dir.join("Cargo.toml"))
            .expect("Cargo.toml")
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let package = manifest["package"]["name"].as_str().expect("package.name");
        let code = sources(&dir);
        for (kind, deps) in dependency_tables(&manifest) {
            for (key, spec) in deps {
                // `foo = { package = "bar" }` is used as `foo`; else the package's library name.
                let renamed = spec.get("package").is_some();
                let lib = match LIB_NAMES.iter().find(|(p, _)| *p == key && !renamed) {
                    Some((_, lib)) => lib.to_string(),
                    None => key.replace('-', "_"),
                };
                if uses(&code, &lib) {
                    continue;
                }
                match ALLOWED
                    .iter()
                    .position(|(p, d, _)| *p == package && *d == key)
                {
                    Some(i) => allowed_seen[i] = true,
                    None => unused.push(format!("{package}: {kind} `{key}`")),
                }
            }
        }
    }
    for (i, (p, d, _)) in ALLOWED.iter().enumerate() {
        if !allowed_seen[i] {
            unused.push(format!("ALLOWED entry {p} `{d}` is used now: delete it"));
        }
    }
    assert!(
        unused.is_empty(),
        "dependencies no code of their crate names (remove them, or add them to ALLOWED with the \
         reason they are needed):\n{}",
        unused.join("\n")
    );
}

/// The workspace's packages: the root facade and every member folder with a `Cargo.toml`.
fn packages(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    out.push(root.join("gateway"));
    let mut crates: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    out.extend(crates);
    out
}

/// `[dependencies]`, `[dev-dependencies]`, `[build-dependencies]` and their
/// `[target.'cfg(..)'.*]` twins, by kind.
fn dependency_tables(manifest: &toml::Table) -> Vec<(String, &toml::Table)> {
    const KINDS: [&str; 3] = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut out = Vec::new();
    for kind in KINDS {
        if let Some(t) = manifest.get(kind).and_then(toml::Value::as_table) {
            out.push((kind.to_string(), t));
        }
    }
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        for (cfg, t) in targets {
            for kind in KINDS {
                if let Some(t) = t.get(kind).and_then(toml::Value::as_table) {
                    out.push((format!("{cfg} {kind}"), t));
                }
            }
        }
    }
    out
}

/// The package's Rust code, `//` comment lines left out. Nested packages (fuzz targets) are
/// their own packages and not read.
fn sources(dir: &Path) -> String {
    let mut files = Vec::new();
    for sub in ["src", "tests", "examples", "benches"] {
        rust_files(&dir.join(sub), &mut files);
    }
    let build = dir.join("build.rs");
    if build.is_file() {
        files.push(build);
    }
    let mut code = String::new();
    for f in files {
        let text = fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("//") && !t.starts_with("///") && !t.starts_with("//!") {
                continue;
            }
            code.push_str(line);
            code.push('\n');
        }
    }
    code
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.expect("entry").path();
        if p.is_dir() {
            if !p.join("Cargo.toml").exists() {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `code` names the library `lib`: `lib::`, `use lib` or `extern crate lib`, with `lib`
/// a whole identifier.
fn uses(code: &str, lib: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(i) = code[from..].find(lib) {
        let start = from + i;
        let end = start + lib.len();
        from = end;
        if code[..start].chars().next_back().is_some_and(ident)
            || code[end..].chars().next().is_some_and(ident)
        {
            continue;
        }
        let before = code[..start].trim_end();
        if code[end..].trim_start().starts_with("::")
            || before.ends_with("use")
            || before.ends_with("extern crate")
        {
            return true;
        }
    }
    false
}

#[test]
fn a_use_is_a_path_a_use_or_an_extern_crate() {
    assert!(uses("let x = serde_json::to_string(&y);", "serde_json"));
    assert!(uses("#[derive(Debug, thiserror::Error)]", "thiserror"));
    assert!(uses("use tokio;", "tokio"));
    assert!(uses("    use md5 as _;", "md5"));
    assert!(!uses("let serde = 1; serde_json::x()", "serde"));
    assert!(!uses("my_libc::call()", "libc"));
    assert!(!uses("libc_call()", "libc"));
}
