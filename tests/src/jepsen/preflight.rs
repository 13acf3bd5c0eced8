//! What a run needs from the machine, checked before anything starts, with
//! messages that say what to install: root (network namespaces, nftables),
//! `ip` (Debian package iproute2), `nft` (Debian package nftables), and a
//! built `cohort` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::host_package;
use crate::jepsen::error::Error;

/// The environment variable that names the `cohort` binary.
pub const BINARY_ENV: &str = "COHORT_BINARY";

/// Root, `ip` and `nft`, or an error naming what is missing.
pub fn check_environment() -> Result<(), Error> {
    let mut missing = Vec::new();
    if host_package::effective_uid() != Some(0) {
        missing.push(
            "root: the harness creates network namespaces and nftables rules (run as root; \
             developers without root can set COHORT_JEPSEN=off to skip the test)"
                .to_string(),
        );
    }
    for (tool, args, package) in [("ip", ["-V"], "iproute2"), ("nft", ["--version"], "nftables")] {
        let found = Command::new(tool)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            missing.push(format!("`{tool}`: install the Debian package {package} (apt-get install -y {package})"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(format!("cohort-jepsen cannot run here; missing:\n  - {}", missing.join("\n  - "))))
}

/// The `cohort` binary to run: `explicit` if given, else `$COHORT_BINARY`,
/// else the newer of `target/release/cohort` and `target/debug/cohort` (under
/// `$CARGO_TARGET_DIR` if set, else the workspace's `target/`).
pub fn find_binary(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    let named = explicit.map(Path::to_path_buf).or_else(|| std::env::var_os(BINARY_ENV).map(PathBuf::from));
    if let Some(path) = named {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::new(format!("the cohort binary {} does not exist", path.display())))
        };
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("target"));
    let newest = ["release", "debug"]
        .iter()
        .map(|profile| target.join(profile).join("cohort"))
        .filter_map(|path| Some((std::fs::metadata(&path).ok()?.modified().ok()?, path)))
        .max_by_key(|(modified, _)| *modified);
    match newest {
        Some((_, path)) => Ok(path.canonicalize().unwrap_or(path)),
        None => Err(Error::new(format!(
            "no cohort binary in {}/{{release,debug}}/cohort: build it with `cargo build --release --bin cohort`, \
             or name one with --binary or {BINARY_ENV}=PATH",
            target.display()
        ))),
    }
}
