//! Records the git revision the node is built from, for the
//! `cohort_build_info` metric: `COHORT_GIT_REVISION` if the builder set it
//! (a build from a source archive has no `.git`), else `git rev-parse` of
//! the checkout, else `unknown`. Nothing else is done at build time.

use std::path::Path;
use std::process::Command;

fn git(arguments: &[&str]) -> Option<String> {
    let output = Command::new("git").args(arguments).current_dir(env!("CARGO_MANIFEST_DIR")).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

/// The revision, if it looks like one (hex, at most a full SHA-256 id).
fn plain_revision(text: &str) -> Option<String> {
    let valid = !text.is_empty() && text.len() <= 64 && text.bytes().all(|byte| byte.is_ascii_hexdigit());
    valid.then(|| text.to_ascii_lowercase())
}

fn main() {
    println!("cargo:rerun-if-env-changed=COHORT_GIT_REVISION");
    let given = std::env::var("COHORT_GIT_REVISION").ok().and_then(|text| plain_revision(text.trim()));
    let revision = given.or_else(|| {
        // Build again when HEAD moves: HEAD itself (a checkout), the branch
        // it names (a commit) and the packed refs, wherever this worktree
        // keeps them. Only files that exist: a missing one would rerun
        // this script on every build.
        let branch = git(&["symbolic-ref", "-q", "HEAD"]);
        let files = [Some("HEAD"), branch.as_deref(), Some("packed-refs")]
            .into_iter()
            .flatten()
            .filter_map(|name| git(&["rev-parse", "--git-path", name]));
        for file in files {
            let file = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"]).and_then(|text| plain_revision(&text))
    });
    println!("cargo:rustc-env=COHORT_GIT_REVISION={}", revision.as_deref().unwrap_or("unknown"));
}
