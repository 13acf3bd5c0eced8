//! Tests that need a program from a Debian package (Prometheus, nftables,
//! a shell): get it, or skip with a reason, in one place.
//!
//! Why: the README's `cargo test --workspace` must pass on a fresh machine
//! as it stands, for root and for everyone else. `.ci/run` runs as root and
//! installs what the tests need; a developer may be neither root nor on
//! Debian. So a test that needs a package calls [`ensure`]: the programs are
//! on the `PATH` already, or this process is root with `apt-get` and installs
//! them (as `.ci/run` does), or the test is skipped with a line on stderr
//! naming the package and the command that installs it ([`skip`]). A skip is
//! never silent, and never a panic, unless `COHORT_NO_SKIP=1` (set by
//! `.ci/run`) says a skip is a failure: there, everything must run.
//!
//! The decision is [`plan`], a pure function, so it is tested without
//! touching the machine.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};

/// The environment variable that turns every [`skip`] into a failure.
pub const NO_SKIP_ENV: &str = "COHORT_NO_SKIP";

/// How long `apt-get` waits for another `apt-get` or `dpkg` to let go of
/// the package database before failing.
pub const APT_LOCK_WAIT_SECS: u32 = 300;

/// A Debian package a test needs, and the programs it must put on the `PATH`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Package {
    /// The package's name, as `apt-get install` takes it.
    pub name: &'static str,
    /// Programs the test runs; all must be found for the package to count as present.
    pub programs: &'static [&'static str],
}

/// `prometheus` and `promtool` (the O3 monitoring test).
pub const PROMETHEUS: Package = Package { name: "prometheus", programs: &["prometheus", "promtool"] };
/// `nft` (the Jepsen-style fault test's partitions).
pub const NFTABLES: Package = Package { name: "nftables", programs: &["nft"] };
/// `ip` (the Jepsen-style fault test's network namespaces).
pub const IPROUTE2: Package = Package { name: "iproute2", programs: &["ip"] };
/// `chromium` (the O6 web console's browser test; the O3 dashboard screenshot).
pub const CHROMIUM: Package = Package { name: "chromium", programs: &["chromium"] };
/// `zsh` (the completion scripts' test).
pub const ZSH: Package = Package { name: "zsh", programs: &["zsh"] };
/// `fish` (the completion scripts' test).
pub const FISH: Package = Package { name: "fish", programs: &["fish"] };

/// What this machine lets a test do about a missing package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Host {
    /// The process runs as root (effective uid 0).
    pub root: bool,
    /// `apt-get` is on the `PATH`.
    pub apt: bool,
}

impl Host {
    /// This process's host.
    pub fn this() -> Host {
        Host { root: effective_uid() == Some(0), apt: on_path("apt-get") }
    }
}

/// What to do about a package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Its programs are on the `PATH`: run the test.
    Ready,
    /// Missing, and this process may install it with `apt-get`.
    Install,
    /// Missing, and it cannot be installed here: skip the test.
    Skip,
}

/// What to do about a package whose programs are `present` (or not) on `host`.
pub fn plan(present: bool, host: Host) -> Plan {
    match (present, host.root && host.apt) {
        (true, _) => Plan::Ready,
        (false, true) => Plan::Install,
        (false, false) => Plan::Skip,
    }
}

/// How the packages came to be there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provided {
    /// They were installed already.
    Present,
    /// [`ensure`] installed at least one of them just now.
    Installed,
}

/// Why a test cannot run here: what it needs and how to get it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// What is missing and the command that provides it.
    pub reason: String,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The reason a missing package cannot be installed by this process on `host`.
pub fn why_not(missing: &[Package], host: Host) -> Unavailable {
    let names: Vec<&str> = missing.iter().map(|package| package.name).collect();
    let programs: Vec<&str> = missing.iter().flat_map(|package| package.programs.iter().copied()).collect();
    let because = if !host.root {
        "this test runs as a user other than root, which cannot install packages"
    } else if !host.apt {
        "there is no apt-get here"
    } else {
        "it is not installed"
    };
    Unavailable {
        reason: format!(
            "needs {} (Debian package {}); {because}: install it (on Debian, `sudo apt-get install {}`), \
             or run the tests as root on Debian, as .ci/run does",
            programs.join(", "),
            names.join(", "),
            names.join(" ")
        ),
    }
}

/// Make sure every package's programs are on the `PATH`: installed already,
/// or installed now with `apt-get` when this process is root. Otherwise the
/// reason to give [`skip`].
pub fn ensure(packages: &[Package]) -> Result<Provided, Unavailable> {
    // Two tests of one binary must not run apt-get at once.
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(PoisonError::into_inner);
    let missing: Vec<Package> = packages.iter().copied().filter(|package| !present(package)).collect();
    if missing.is_empty() {
        return Ok(Provided::Present);
    }
    let host = Host::this();
    match plan(false, host) {
        Plan::Ready => unreachable!("plan(false, _) never says Ready"),
        Plan::Skip => Err(why_not(&missing, host)),
        Plan::Install => {
            let names: Vec<&str> = missing.iter().map(|package| package.name).collect();
            eprintln!("installing Debian package {} with apt-get (root, and it was missing)", names.join(", "));
            // From the local package lists first; they may be missing or stale on a fresh machine.
            if apt_install(&names).is_err() {
                apt(&["update", "-qq"]).map_err(|reason| Unavailable { reason })?;
                apt_install(&names).map_err(|reason| Unavailable { reason })?;
            }
            match missing.iter().find(|package| !present(package)) {
                None => Ok(Provided::Installed),
                Some(package) => Err(Unavailable {
                    reason: format!(
                        "apt-get installed {} but {} is still not on the PATH",
                        package.name,
                        package.programs.join(", ")
                    ),
                }),
            }
        }
    }
}

/// Root, or the reason a test that needs it (for `why`) cannot run.
pub fn ensure_root(why: &str) -> Result<(), Unavailable> {
    if effective_uid() == Some(0) {
        return Ok(());
    }
    Err(Unavailable { reason: format!("needs root: {why}; run the tests as root, as .ci/run does") })
}

/// Say on stderr that `test` is skipped and why; with `COHORT_NO_SKIP=1`,
/// fail instead.
pub fn skip(test: &str, why: &Unavailable) {
    let line = format!("skipped {test}: {why}");
    assert!(!no_skip(), "{line} ({NO_SKIP_ENV}=1: every test must run here)");
    eprintln!("{line}");
}

fn no_skip() -> bool {
    std::env::var(NO_SKIP_ENV).is_ok_and(|value| value == "1")
}

fn present(package: &Package) -> bool {
    package.programs.iter().all(|program| on_path(program))
}

/// True if an executable file named `program` is in a directory of `PATH`.
pub fn on_path(program: &str) -> bool {
    let Some(path) = std::env::var_os("PATH") else { return false };
    std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
}

fn executable(file: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

fn apt_install(names: &[&str]) -> Result<(), String> {
    let mut arguments = vec!["install", "-y", "-qq", "--no-install-recommends"];
    arguments.extend_from_slice(names);
    apt(&arguments)
}

fn apt(arguments: &[&str]) -> Result<(), String> {
    let lock_wait = format!("DPkg::Lock::Timeout={APT_LOCK_WAIT_SECS}");
    let status = Command::new("apt-get")
        .args(["-o", &lock_wait])
        .args(arguments)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .map_err(|error| format!("apt-get: {error}"))?;
    if status.success() { Ok(()) } else { Err(format!("apt-get {}: {status}", arguments.join(" "))) }
}

/// This process's effective user id, from `/proc/self/status`.
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_HOST: [Host; 4] = [
        Host { root: false, apt: false },
        Host { root: false, apt: true },
        Host { root: true, apt: false },
        Host { root: true, apt: true },
    ];

    #[test]
    fn a_present_package_is_ready_on_every_host() {
        for host in EVERY_HOST {
            assert_eq!(plan(true, host), Plan::Ready, "{host:?}");
        }
    }

    #[test]
    fn a_missing_package_is_installed_only_by_root_with_apt_else_skipped() {
        assert_eq!(plan(false, Host { root: true, apt: true }), Plan::Install);
        for host in [Host { root: false, apt: false }, Host { root: false, apt: true }, Host { root: true, apt: false }]
        {
            assert_eq!(plan(false, host), Plan::Skip, "{host:?}");
        }
    }

    #[test]
    fn a_skip_names_the_programs_the_package_and_the_command() {
        let user = why_not(&[NFTABLES, IPROUTE2], Host { root: false, apt: true }).reason;
        for part in ["nft, ip", "nftables, iproute2", "sudo apt-get install nftables iproute2", "other than root"] {
            assert!(user.contains(part), "{part:?} in {user}");
        }
        let no_apt = why_not(&[PROMETHEUS], Host { root: true, apt: false }).reason;
        assert!(no_apt.contains("prometheus, promtool") && no_apt.contains("no apt-get"), "{no_apt}");
    }

    #[test]
    fn a_program_on_the_path_is_found_and_a_made_up_one_is_not() {
        assert!(on_path("sh"));
        assert!(!on_path("cohort-no-such-program"));
        assert!(ensure(&[Package { name: "dash", programs: &["sh"] }]).is_ok());
    }
}
