//! `aedb-queue --version` reports the extension's version: one version for
//! the extension and its clients (scripts/versions_test.sh checks the
//! manifests; this checks what the built binary says). No cluster.

use std::process::Command;

/// The `version` of the [package] table of the extension's Cargo.toml.
fn extension_version() -> String {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("the extension's Cargo.toml");
    let package = text.split("[package]").nth(1).expect("a [package] table");
    let line = package
        .lines()
        .find(|l| l.trim_start().starts_with("version"))
        .expect("a version in [package]");
    line.split('"').nth(1).expect("a quoted version").to_string()
}

#[test]
fn version_is_the_extensions() {
    let out = Command::new(env!("CARGO_BIN_EXE_aedb-queue"))
        .arg("--version")
        .output()
        .expect("aedb-queue runs");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    assert_eq!(stdout.trim(), format!("aedb-queue {}", extension_version()));
}
