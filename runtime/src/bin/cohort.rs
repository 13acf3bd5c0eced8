//! The `cohort` command. Its commands live in the library
//! (`cohort_runtime`'s `cli::command`), which keeps them out of the public
//! API; see `cohort --help`.

fn main() -> std::process::ExitCode {
    cohort_runtime::cli_main()
}
