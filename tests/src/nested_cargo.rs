//! A `cargo` command for a test to run, without the environment `cargo test`
//! gives the test.
//!
//! Why: `cargo test` runs each test binary with `CARGO_MANIFEST_DIR`,
//! `CARGO_PKG_*` and the like set to the test's crate. A nested cargo that
//! inherits them hands them to build scripts, and a build script that
//! watches one (ring's watches `CARGO_MANIFEST_DIR`) counts as changed: the
//! nested build redoes ring and everything above it each time, minutes of
//! a release build, instead of reusing what `cargo build` left.

use std::process::Command;

/// Variables `cargo test` sets for the test binary it runs, by name.
const TEST_VARIABLES: [&str; 5] =
    ["CARGO_MANIFEST_DIR", "CARGO_MANIFEST_PATH", "CARGO_CRATE_NAME", "CARGO_TARGET_TMPDIR", "CARGO_PRIMARY_PACKAGE"];

/// Variables `cargo test` sets for the test binary it runs, by prefix.
const TEST_PREFIXES: [&str; 2] = ["CARGO_PKG_", "CARGO_BIN_EXE_"];

/// `cargo` (the one running the tests, from `$CARGO`) with the test's
/// variables removed; the caller adds the arguments.
pub fn command() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if TEST_VARIABLES.contains(&name.as_ref()) || TEST_PREFIXES.iter().any(|prefix| name.starts_with(prefix)) {
            command.env_remove(name.as_ref());
        }
    }
    command
}
