//! `--name value` flags, enough for the examples (no dependency needed).

use std::str::FromStr;

/// The process's arguments.
///
/// ```
/// use cohort_examples::args::Args;
/// let args = Args::from(vec!["--nodes".to_string(), "5".to_string(), "--async".to_string()]);
/// assert_eq!(args.value("--nodes", 3usize), Ok(5));
/// assert_eq!(args.value("--partitions", 4usize), Ok(4));
/// assert!(args.flag("--async"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Args(Vec<String>);

impl Args {
    /// The arguments after the program name.
    pub fn from_env() -> Args {
        Args(std::env::args().skip(1).collect())
    }

    /// The value after `name`, parsed, or `default` if absent.
    pub fn value<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.0.iter().position(|arg| arg == name) {
            None => Ok(default),
            Some(at) => {
                let raw = self.0.get(at + 1).ok_or_else(|| format!("{name} needs a value"))?;
                raw.parse().map_err(|_| format!("{name}: cannot parse {raw:?}"))
            }
        }
    }

    /// True if `name` is present.
    pub fn flag(&self, name: &str) -> bool {
        self.0.iter().any(|arg| arg == name)
    }
}

impl From<Vec<String>> for Args {
    fn from(args: Vec<String>) -> Args {
        Args(args)
    }
}
