//! How every `cohort` command ends when it does not succeed: one exit code
//! per kind of outcome, the same for every command, and one shape of error
//! for scripts.
//!
//! Why one table: a script that runs `cohort status`, `cohort admin` and
//! `cohort write` must not learn three meanings of `2`. The codes are
//! documented in docs/cli.md ("Exit codes"):
//!
//! | code | [`Exit`] | meaning |
//! | --- | --- | --- |
//! | 0 | — | done (a repeated `freeze` or `unfreeze` too: it already was) |
//! | 1 | [`Exit::Failed`] | the cluster answered no: refused, no such group, failed with nothing applied |
//! | 2 | [`Exit::Usage`] | the command line, a profile, a certificate or a token is wrong |
//! | 3 | [`Exit::Unknown`] | no definite answer in time: the change may still apply |
//! | 4 | [`Exit::Unreachable`] | no node answered at the addresses given; nothing was sent |
//!
//! With `--json` an error is one JSON object on **stdout** (where the
//! answer would have been, so a script reads one place), with at least
//! `result` (a word: `usage`, `failed`, `unknown`, `unreachable`, or the
//! admin port's own word such as `refused`), `error` (a sentence) and
//! `exit_code`. Without `--json` the sentence goes to stderr.

use std::process::ExitCode;

use serde_json::{Map, Value, json};

/// Why a command did not succeed, as its exit code says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The cluster answered no (exit 1).
    Failed,
    /// The command line, a profile, a file or a token is wrong (exit 2).
    Usage,
    /// No definite answer in time; the change may still apply (exit 3).
    Unknown,
    /// No node answered at the addresses given; nothing was sent (exit 4).
    Unreachable,
}

impl Exit {
    /// The process's exit code.
    pub(crate) fn code(self) -> u8 {
        match self {
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::Unknown => 3,
            Exit::Unreachable => 4,
        }
    }

    /// The `result` word of a JSON error.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Exit::Failed => "failed",
            Exit::Usage => "usage",
            Exit::Unknown => "unknown",
            Exit::Unreachable => "unreachable",
        }
    }

    /// The exit kind of a code, for errors that carry only a code.
    pub(crate) fn of_code(code: u8) -> Exit {
        match code {
            2 => Exit::Usage,
            3 => Exit::Unknown,
            4 => Exit::Unreachable,
            _ => Exit::Failed,
        }
    }
}

/// A command's failure: how it exits, the sentence, and with `--json` the
/// admin port's own answer, when there was one, to keep its fields.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CliError {
    /// How the process exits.
    pub exit: Exit,
    /// What happened, for people.
    pub message: String,
    /// The admin port's JSON answer, if the error is one.
    pub answer: Option<Value>,
}

impl CliError {
    /// An error of kind `exit`.
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> CliError {
        CliError { exit, message: message.into(), answer: None }
    }

    /// A usage error (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError::new(Exit::Usage, message)
    }

    /// The JSON object printed with `--json`: the admin port's answer if
    /// any (its `result` word kept), with `error` and `exit_code` added.
    pub(crate) fn json(&self) -> Value {
        let mut object = match &self.answer {
            Some(Value::Object(answer)) => answer.clone(),
            _ => Map::new(),
        };
        object.entry("result").or_insert_with(|| json!(self.exit.word()));
        object.insert("error".into(), json!(self.message));
        object.insert("exit_code".into(), json!(self.exit.code()));
        Value::Object(object)
    }

    /// Print the error (JSON on stdout with `json`, else `what: message` on
    /// stderr) and return the exit code.
    pub(crate) fn report(&self, what: &str, json: bool) -> ExitCode {
        if json {
            if let Err(error) = super::print_line(&self.json().to_string()) {
                eprintln!("{what}: cannot print the error: {error}");
            }
        } else {
            eprintln!("{what}: {}", self.message);
        }
        ExitCode::from(self.exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o4_every_exit_kind_has_its_documented_code_and_word() {
        let table = [(Exit::Failed, 1, "failed"), (Exit::Usage, 2, "usage"), (Exit::Unknown, 3, "unknown")];
        for (exit, code, word) in table.into_iter().chain([(Exit::Unreachable, 4, "unreachable")]) {
            assert_eq!((exit.code(), exit.word()), (code, word));
            assert_eq!(Exit::of_code(code), exit);
        }
    }

    #[test]
    fn o4_a_json_error_has_result_error_and_exit_code_and_keeps_the_ports_answer() {
        let plain = CliError::new(Exit::Unreachable, "cannot reach 127.0.0.1:1");
        assert_eq!(
            plain.json(),
            json!({ "result": "unreachable", "error": "cannot reach 127.0.0.1:1", "exit_code": 4 })
        );
        let refused = CliError {
            exit: Exit::Failed,
            message: "refused: frozen".into(),
            answer: Some(json!({ "result": "refused", "reason": "frozen" })),
        };
        assert_eq!(
            refused.json(),
            json!({ "result": "refused", "reason": "frozen", "error": "refused: frozen", "exit_code": 1 })
        );
    }
}
