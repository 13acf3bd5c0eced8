//! Client profiles: where a cluster is and how to prove ourselves to it,
//! written once in `~/.config/cohort/profiles.toml` instead of on every
//! command line (as etcdctl's and rpk's profiles do).
//!
//! ```toml
//! default = "prod"            # optional; else a profile named `default`, if any
//!
//! [profile.prod]
//! cluster = ["10.0.0.1:7201", "10.0.0.2:7201", "10.0.0.3:7201"]
//! admin = ["10.0.0.1:7301", "10.0.0.2:7301"]
//! certs = "/etc/cohort/certs"
//! client = "ops"
//! token_file = "prod.token"   # relative paths: beside this file
//! ```
//!
//! Why the precedence is flag > environment > profile > default, per
//! setting: a profile is the standing choice, the environment the
//! session's, the command line the one command's. The TLS settings
//! (`certs`, `client`, `ca`, `cert`, `key`, `insecure`) are one block: a
//! command line that names any of them takes none of the profile's, so a
//! profile's `ca` never mixes with a `--certs` given by hand.
//!
//! Like the node's configuration, the file is refused whole when it has a
//! key no profile knows, and the error names the valid keys: a typo must
//! not silently send a command to the default address.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use cohort_client::parse_cluster_id;
use cohort_messages::ClusterId;
use serde::Deserialize;

use super::exit::CliError;
use crate::admin::AdminToken;

/// The environment variable that names the profile file instead of the
/// default path.
pub(crate) const PROFILE_FILE_ENV: &str = "COHORT_PROFILE_FILE";

/// The largest profile file read (a profile is a few hundred bytes).
const PROFILE_FILE_SIZE_MAX_BYTES: u64 = 1024 * 1024;

/// The largest token file read.
const TOKEN_FILE_SIZE_MAX_BYTES: u64 = 64 * 1024;

/// The file: an optional default and the profiles by name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    /// The profile used when neither `--profile` nor `COHORT_PROFILE` names one.
    default: Option<String>,
    /// The profiles.
    #[serde(default)]
    profile: BTreeMap<String, Profile>,
}

/// Addresses as a list, or as one string of comma-separated addresses.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
enum Addresses {
    /// `"a:1,b:2"`.
    Text(String),
    /// `["a:1", "b:2"]`.
    List(Vec<String>),
}

impl Addresses {
    fn list(&self) -> Vec<String> {
        let items: Vec<&str> = match self {
            Addresses::Text(text) => text.split(',').collect(),
            Addresses::List(list) => list.iter().map(String::as_str).collect(),
        };
        items.into_iter().map(str::trim).filter(|item| !item.is_empty()).map(str::to_string).collect()
    }
}

/// One profile, as written in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    cluster: Option<Addresses>,
    admin: Option<Addresses>,
    certs: Option<PathBuf>,
    client: Option<String>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    insecure: Option<bool>,
    cluster_id: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
}

/// A profile, checked: addresses split, paths made absolute against the
/// file's directory, the cluster id parsed and the token read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The profile's name and file, for messages; `None` when no profile applies.
    pub source: Option<(String, PathBuf)>,
    /// The client ports.
    pub cluster: Vec<String>,
    /// The admin ports, tried in order.
    pub admin: Vec<String>,
    /// The certificates directory.
    pub certs: Option<PathBuf>,
    /// The client certificate's name in `certs`.
    pub client: Option<String>,
    /// The CA, certificate and key files, all three or none.
    pub files: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Plaintext.
    pub insecure: bool,
    /// The cluster id.
    pub cluster_id: Option<ClusterId>,
    /// The admin token.
    pub token: Option<String>,
}

impl Settings {
    /// Whether the profile sets any TLS setting.
    pub(crate) fn has_tls(&self) -> bool {
        self.certs.is_some() || self.client.is_some() || self.files.is_some() || self.insecure
    }

    /// `profile NAME (PATH)`, or `no profile`.
    pub(crate) fn describe(&self) -> String {
        match &self.source {
            Some((name, path)) => format!("profile {name} ({})", path.display()),
            None => "no profile".into(),
        }
    }
}

/// Where the profile file is: `$COHORT_PROFILE_FILE`, else
/// `$XDG_CONFIG_HOME/cohort/profiles.toml`, else
/// `$HOME/.config/cohort/profiles.toml`.
pub(crate) fn profile_path(env: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if let Some(path) = set(PROFILE_FILE_ENV) {
        return Some(PathBuf::from(path));
    }
    let config = set("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| set("HOME").map(|home| Path::new(&home).join(".config")))?;
    Some(config.join("cohort").join("profiles.toml"))
}

/// The settings of profile `name` (from `--profile` or `COHORT_PROFILE`),
/// or of the file's default profile when `name` is `None`. No file and no
/// name: empty settings. The error (a usage error) names the file and what
/// to fix.
pub(crate) fn load(name: Option<&str>, path: Option<&Path>) -> Result<Settings, CliError> {
    let Some(path) = path else {
        return match name {
            Some(name) => Err(CliError::usage(format!(
                "profile {name}: no profile file: set HOME, XDG_CONFIG_HOME or {PROFILE_FILE_ENV}"
            ))),
            None => Ok(Settings::default()),
        };
    };
    let text = match read_bounded(path, PROFILE_FILE_SIZE_MAX_BYTES) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && name.is_none() => {
            return Ok(Settings::default());
        }
        Err(error) => {
            let wanted = name.map_or(String::new(), |name| format!("profile {name}: "));
            return Err(CliError::usage(format!("{wanted}cannot read the profile file {}: {error}", path.display())));
        }
    };
    parse(&text, name, path)
}

/// [`load`] on the file's text.
fn parse(text: &str, name: Option<&str>, path: &Path) -> Result<Settings, CliError> {
    let shown = path.display();
    let file: ProfileFile = toml::from_str(text)
        .map_err(|error| CliError::usage(format!("profile file {shown}: {}", error.to_string().trim_end())))?;
    let chosen = match (name, &file.default) {
        (Some(name), _) => name,
        (None, Some(name)) => name.as_str(),
        (None, None) if file.profile.contains_key("default") => "default",
        (None, None) => return Ok(Settings::default()),
    };
    let Some(profile) = file.profile.get(chosen) else {
        let names: Vec<&str> = file.profile.keys().map(String::as_str).collect();
        let named_by = if name.is_some() { "--profile or COHORT_PROFILE" } else { "`default`" };
        return Err(CliError::usage(format!(
            "profile file {shown}: no profile {chosen:?} (named by {named_by}); the file has: {}",
            if names.is_empty() { "no profile".into() } else { names.join(", ") }
        )));
    };
    let base = path.parent().unwrap_or(Path::new("."));
    checked(profile, base)
        .map(|mut settings| {
            settings.source = Some((chosen.to_string(), path.to_path_buf()));
            settings
        })
        .map_err(|error| CliError::usage(format!("profile {chosen} in {shown}: {error}")))
}

/// A profile's settings, or the rule it breaks (naming the key).
fn checked(profile: &Profile, base: &Path) -> Result<Settings, String> {
    let path = |file: &PathBuf| if file.is_absolute() { file.clone() } else { base.join(file) };
    let addresses = |key: &str, addresses: &Option<Addresses>| -> Result<Vec<String>, String> {
        match addresses.as_ref().map(Addresses::list) {
            Some(list) if list.is_empty() => Err(format!("{key}: an empty list of addresses")),
            Some(list) => Ok(list),
            None => Ok(Vec::new()),
        }
    };
    let files = match (&profile.ca, &profile.cert, &profile.key) {
        (Some(ca), Some(cert), Some(key)) => Some((path(ca), path(cert), path(key))),
        (None, None, None) => None,
        _ => return Err("ca, cert and key: give all three or none".into()),
    };
    let insecure = profile.insecure.unwrap_or(false);
    if insecure && (files.is_some() || profile.client.is_some()) {
        return Err("insecure = true takes no ca, cert, key or client".into());
    }
    let cluster_id = match &profile.cluster_id {
        Some(text) => Some(parse_cluster_id(text).map_err(|error| format!("cluster_id: {error}"))?),
        None => None,
    };
    let token = match (&profile.token, &profile.token_file) {
        (Some(_), Some(_)) => return Err("token and token_file: give one".into()),
        (Some(token), None) => {
            AdminToken::check(token).map_err(|error| format!("token {error}"))?;
            Some(token.clone())
        }
        (None, Some(file)) => {
            let file = path(file);
            let text = read_bounded(&file, TOKEN_FILE_SIZE_MAX_BYTES)
                .map_err(|error| format!("token_file: cannot read {}: {error}", file.display()))?;
            let token = text.trim();
            AdminToken::check(token).map_err(|error| format!("token_file: the token in {} {error}", file.display()))?;
            Some(token.to_string())
        }
        (None, None) => None,
    };
    Ok(Settings {
        source: None,
        cluster: addresses("cluster", &profile.cluster)?,
        admin: addresses("admin", &profile.admin)?,
        certs: profile.certs.as_ref().map(path),
        client: profile.client.clone(),
        files,
        insecure,
        cluster_id,
        token,
    })
}

/// A file's text, refused past `size_max_bytes`.
fn read_bounded(path: &Path, size_max_bytes: u64) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(size_max_bytes + 1).read_to_string(&mut text)?;
    if text.len() as u64 > size_max_bytes {
        return Err(std::io::Error::other(format!("larger than {size_max_bytes} bytes")));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
default = "prod"

[profile.prod]
cluster = ["10.0.0.1:7201", "10.0.0.2:7201"]
admin = "10.0.0.1:7301, 10.0.0.2:7301"
certs = "certs"
client = "ops"
cluster_id = "ff"
token = "0123456789abcdef-token"

[profile.lab]
cluster = "127.0.0.1:7201"
insecure = true
"#;

    fn at(name: Option<&str>, text: &str) -> Result<Settings, CliError> {
        parse(text, name, Path::new("/home/op/.config/cohort/profiles.toml"))
    }

    #[test]
    fn o4_the_default_profile_or_the_named_one_is_read_with_paths_beside_the_file() {
        let prod = at(None, FILE).expect("the default profile");
        assert_eq!(prod.cluster, ["10.0.0.1:7201", "10.0.0.2:7201"]);
        assert_eq!(prod.admin, ["10.0.0.1:7301", "10.0.0.2:7301"]);
        assert_eq!(prod.certs.as_deref(), Some(Path::new("/home/op/.config/cohort/certs")));
        assert_eq!((prod.client.as_deref(), prod.cluster_id), (Some("ops"), Some(ClusterId(255))));
        assert_eq!(prod.token.as_deref(), Some("0123456789abcdef-token"));
        assert!(prod.describe().starts_with("profile prod ("), "{}", prod.describe());
        let lab = at(Some("lab"), FILE).expect("a named profile");
        assert_eq!(
            (lab.cluster.as_slice(), lab.insecure, lab.has_tls()),
            (&["127.0.0.1:7201".to_string()][..], true, true)
        );
        // No default named and none called `default`: no profile.
        assert_eq!(at(None, "[profile.x]\nclient = \"a\"\n").expect("parses"), Settings::default());
        let implicit = at(None, "[profile.default]\nclient = \"a\"\n").expect("parses");
        assert_eq!(implicit.client.as_deref(), Some("a"));
    }

    #[test]
    fn o4_unknown_keys_are_refused_naming_the_valid_ones() {
        let error = at(None, "[profile.prod]\nclutser = \"a:1\"\n").expect_err("a typo").message;
        assert!(error.contains("clutser") && error.contains("`cluster`") && error.contains("`token_file`"), "{error}");
        let error = at(None, "defualt = \"prod\"\n").expect_err("a typo").message;
        assert!(error.contains("defualt") && error.contains("`default`") && error.contains("`profile`"), "{error}");
    }

    #[test]
    fn o4_a_missing_profile_and_broken_rules_are_usage_errors_that_say_what_to_fix() {
        let error = at(Some("staging"), FILE).expect_err("no such profile");
        assert_eq!(error.exit, super::super::exit::Exit::Usage);
        assert!(error.message.contains("no profile \"staging\"") && error.message.contains("lab, prod"), "{error:?}");
        for (text, key) in [
            ("[profile.p]\nca = \"ca.pem\"\n", "ca, cert and key"),
            ("[profile.p]\ncluster_id = \"xyz\"\n", "cluster_id"),
            ("[profile.p]\ntoken = \"short\"\n", "token"),
            ("[profile.p]\ntoken = \"0123456789abcdef\"\ntoken_file = \"t\"\n", "token and token_file"),
            ("[profile.p]\ncluster = []\n", "cluster: an empty list"),
            ("[profile.p]\ninsecure = true\nclient = \"ops\"\n", "insecure"),
        ] {
            let error = at(Some("p"), text).expect_err(text).message;
            assert!(error.starts_with("profile p in ") && error.contains(key), "{text}: {error}");
        }
        assert!(load(Some("prod"), None).is_err(), "a named profile needs a file");
        assert_eq!(load(None, Some(Path::new("/nonexistent/profiles.toml"))), Ok(Settings::default()));
        assert!(load(Some("prod"), Some(Path::new("/nonexistent/profiles.toml"))).is_err());
    }

    #[test]
    fn o4_the_file_path_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        assert_eq!(profile_path(env(&[(PROFILE_FILE_ENV, "/p.toml"), ("HOME", "/h")])), Some("/p.toml".into()));
        assert_eq!(
            profile_path(env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")])),
            Some("/x/cohort/profiles.toml".into())
        );
        assert_eq!(profile_path(env(&[("HOME", "/h")])), Some("/h/.config/cohort/profiles.toml".into()));
        assert_eq!(profile_path(env(&[])), None);
    }

    #[test]
    fn o4_a_token_file_is_read_trimmed_and_checked() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("t"), "0123456789abcdef-token\n").expect("write");
        let path = dir.path().join("profiles.toml");
        std::fs::write(&path, "[profile.default]\ntoken_file = \"t\"\n").expect("write");
        assert_eq!(load(None, Some(&path)).expect("loads").token.as_deref(), Some("0123456789abcdef-token"));
        std::fs::write(&path, "[profile.default]\ntoken_file = \"missing\"\n").expect("write");
        let error = load(None, Some(&path)).expect_err("no token file").message;
        assert!(error.contains("token_file: cannot read"), "{error}");
    }
}
