//! Compares every G.711 code and sample with the ITU-T G.191 STL sweep files in
//! `../shared/testdata/g711`. Skips with a printed reason when that directory is absent (a user's
//! clone does not have it); the core suite pins the same tables by digest.

use std::path::PathBuf;

use ontime_rtp::g711::{alaw_decode, alaw_encode, ulaw_decode, ulaw_encode};

fn testdata() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/g711");
    if dir.is_dir() {
        Some(dir)
    } else {
        println!(
            "skipped: {} not found (test data lives beside the workspace)",
            dir.display()
        );
        None
    }
}

/// Reads a G.191 STL file: 65,536 little-endian 16-bit words.
fn words(path: PathBuf) -> Vec<i16> {
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_eq!(
        bytes.len(),
        131_072,
        "{} is not a 65536-word sweep",
        path.display()
    );
    bytes
        .chunks_exact(2)
        .map(|w| i16::from_le_bytes([w[0], w[1]]))
        .collect()
}

fn check_law(dir: &std::path::Path, name: &str, encode: fn(i16) -> u8, decode: fn(u8) -> i16) {
    let stl = dir.join("itu-t-g191-stl");
    let src = words(stl.join("sweep.src"));
    let codes = words(stl.join(format!("sweep-r.{name}")));
    let decoded = words(stl.join(format!("sweep-r.{name}-{name}")));
    let mut encode_mismatches = 0;
    let mut decode_mismatches = 0;
    for ((&sample, &code), &back) in src.iter().zip(&codes).zip(&decoded) {
        let code = u8::try_from(code).expect("STL code word is 0..255");
        if encode(sample) != code {
            encode_mismatches += 1;
        }
        if decode(code) != back {
            decode_mismatches += 1;
        }
    }
    assert_eq!(encode_mismatches, 0, "{name}-law encode differs from G.191");
    assert_eq!(decode_mismatches, 0, "{name}-law decode differs from G.191");

    // The byte tables are the same codes, one byte per input value.
    let table = std::fs::read(dir.join(format!(
        "tables/{}_encode_65536.stl.bin",
        if name == "u" { "ulaw" } else { "alaw" }
    )))
    .expect("read encode table");
    for (i, &code) in table.iter().enumerate() {
        let sample = (i as i32 - 32768) as i16;
        assert_eq!(encode(sample), code, "{name}-law encode of {sample}");
    }
}

#[test]
fn ulaw_matches_g191_on_every_input() {
    let Some(dir) = testdata() else { return };
    check_law(&dir, "u", ulaw_encode, ulaw_decode);
}

#[test]
fn alaw_matches_g191_on_every_input() {
    let Some(dir) = testdata() else { return };
    check_law(&dir, "a", alaw_encode, alaw_decode);
}

#[test]
fn decode_csv_agrees_for_all_256_codes() {
    let Some(dir) = testdata() else { return };
    for (file, decode) in [
        ("ulaw_decode_256.csv", ulaw_decode as fn(u8) -> i16),
        ("alaw_decode_256.csv", alaw_decode as fn(u8) -> i16),
    ] {
        let text = std::fs::read_to_string(dir.join("tables").join(file)).expect("read csv");
        let mut rows = 0;
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split(',').collect();
            let code: u8 = cols[1].parse().expect("code column");
            let stl: i16 = cols[3].trim().parse().expect("stl column");
            assert_eq!(decode(code), stl, "{file}: code {code}");
            rows += 1;
        }
        assert_eq!(rows, 256, "{file} has every code");
    }
}

#[test]
fn audioop_differs_only_where_the_notes_say() {
    let Some(dir) = testdata() else { return };
    let audioop = std::fs::read(dir.join("tables/ulaw_encode_65536.audioop.bin")).expect("read");
    let diffs = audioop
        .iter()
        .enumerate()
        .filter(|&(i, &code)| ulaw_encode((i as i32 - 32768) as i16) != code)
        .count();
    assert_eq!(diffs, 508, "ITU vs audioop µ-law differences");
}
