//! The `cohort` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    let command = std::env::args().nth(1).unwrap_or_default();
    match command.as_str() {
        "demo" => {
            eprintln!(
                "cohort demo: the local demo cluster arrives with the actor runtime; not available in this build yet"
            );
            ExitCode::from(2)
        }
        _ => {
            eprintln!("usage: cohort demo");
            ExitCode::from(2)
        }
    }
}
