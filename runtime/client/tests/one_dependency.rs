//! C1: a program needs one cohort dependency line to use the network
//! client. The test takes docs/client.md's first `toml` block (the
//! dependency lines) and its first `rust` block (the example), puts them in
//! a new crate outside the workspace, and runs `cargo check --offline` on
//! it: the example must compile with nothing but `cohort-client` and tokio.
//!
//! `--offline` with a copy of the workspace's `Cargo.lock`: every crate is
//! already in cargo's cache from building the workspace, so the test needs
//! no network. It shares the workspace's target directory, so only the few
//! crates whose features differ (tokio, and what depends on it) are
//! checked again: about a minute with a cold cache, seconds after that.
//! The nested cargo does not wait on its parent: `cargo test` lets go of
//! the target directory's lock before it runs the test binaries.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The text of the first block fenced as ```` ```language ```` in `markdown`.
fn first_block<'a>(markdown: &'a str, language: &str) -> &'a str {
    let fence = format!("```{language}\n");
    let start = markdown.find(&fence).unwrap_or_else(|| panic!("no {language} block")) + fence.len();
    let length = markdown[start..].find("```").unwrap_or_else(|| panic!("the {language} block ends"));
    &markdown[start..start + length]
}

#[test]
fn c1_the_client_md_example_builds_with_one_cohort_dependency() {
    let doc = std::fs::read_to_string(workspace().join("docs/client.md")).expect("docs/client.md");
    let dependencies = first_block(&doc, "toml");
    let example = first_block(&doc, "rust");
    let cohort_lines: Vec<&str> = dependencies.lines().filter(|line| line.starts_with("cohort")).collect();
    assert_eq!(cohort_lines.len(), 1, "one cohort dependency line: {dependencies}");
    assert!(cohort_lines[0].starts_with("cohort-client = { path = "), "{dependencies}");
    assert!(
        example.lines().filter(|line| line.starts_with("use ")).all(|line| line.starts_with("use cohort_client::")),
        "the example names only cohort_client: {example}"
    );

    // The path in the doc is where a program beside a checkout would find the crate; here it is this one.
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).canonicalize().expect("the client crate's path");
    let manifest_dependencies = dependencies
        .replace(cohort_lines[0], &format!("cohort-client = {{ path = {:?} }}", client.display().to_string()));
    let dir = tempfile::tempdir().expect("temp dir");
    let manifest = format!(
        "[package]\nname = \"one-dependency\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         # Not a member of any workspace around the temp dir.\n[workspace]\n\n{manifest_dependencies}"
    );
    std::fs::write(dir.path().join("Cargo.toml"), manifest).expect("Cargo.toml");
    std::fs::create_dir(dir.path().join("src")).expect("src");
    // The example's top-level `?` and `.await` need an async fn around them.
    let main = format!(
        "async fn example() -> Result<(), Box<dyn std::error::Error>> {{\n{example}Ok(())\n}}\n\n\
         #[tokio::main]\nasync fn main() {{\n    let _ = example;\n}}\n"
    );
    std::fs::write(dir.path().join("src/main.rs"), main).expect("main.rs");
    std::fs::copy(workspace().join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("Cargo.lock");

    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace().join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // The variables `cargo test` set for this test would reach build scripts
    // (ring's watches CARGO_MANIFEST_DIR) and make them run again each time;
    // the same rule as cohort_sim::nested_cargo, which this crate does not
    // depend on.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        let set_by_cargo_test = [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_TARGET_TMPDIR",
            "CARGO_PRIMARY_PACKAGE",
        ]
        .contains(&name.as_ref())
            || name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_EXE_");
        if set_by_cargo_test {
            command.env_remove(name.as_ref());
        }
    }
    let out = command
        .args(["check", "--offline", "--quiet"])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "the docs/client.md example with only its Cargo.toml lines:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
