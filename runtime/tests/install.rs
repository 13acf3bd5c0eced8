//! O4: the `cohort` binary is installed the way the README says, with
//! `cargo install --path runtime`, and the installed copy runs.
//!
//! The test installs into a temporary root (`--root`), from the crates cargo
//! already holds (`--offline`) at the versions of the workspace's
//! `Cargo.lock` (`--locked`), so it needs no network and touches nothing
//! outside the temp dir. cargo builds a path install in the workspace's
//! target directory (`$CARGO_TARGET_DIR` if set), and the release build it
//! makes is the one `cargo build --release -p cohort-runtime` makes, which
//! runtime/tests/demo.rs asks for first: then the install only copies it
//! (under a second); from nothing it is a whole release build (10 minutes
//! on the shared 2-core machine). The nested cargo does not wait on its
//! parent: `cargo test` lets go of the target directory's lock before it
//! runs the test binaries; it runs without the variables `cargo test` sets
//! for this test, which would make it build again (`cohort_sim::nested_cargo`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn o4_cargo_install_puts_a_cohort_that_runs_into_the_root_s_bin() {
    let root = tempfile::tempdir().expect("temp dir");
    let installed = cohort_sim::nested_cargo::command()
        .current_dir(workspace())
        .args(["install", "--path", "runtime", "--locked", "--offline", "--quiet", "--root"])
        .arg(root.path())
        .output()
        .expect("cargo runs");
    assert!(
        installed.status.success(),
        "cargo install --path runtime:\n{}",
        String::from_utf8_lossy(&installed.stderr)
    );

    let binary = root.path().join("bin").join("cohort");
    assert!(binary.is_file(), "{} after the install", binary.display());
    let version = Command::new(&binary).arg("--version").output().expect("the installed cohort runs");
    assert!(version.status.success(), "{}", String::from_utf8_lossy(&version.stderr));
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), format!("cohort {}", env!("CARGO_PKG_VERSION")));
    // The installed binary is the whole CLI, not a stub: its help lists the commands the docs use.
    let help = Command::new(&binary).arg("--help").output().expect("the installed cohort runs");
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["demo", "node", "certs", "write", "read", "status", "groups", "admin"] {
        assert!(help.lines().any(|line| line.trim_start().starts_with(command)), "`{command}` in:\n{help}");
    }
}
