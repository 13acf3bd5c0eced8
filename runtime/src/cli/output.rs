//! Writing the CLI's answers to stdout without panicking when nobody reads
//! them.
//!
//! Why: Rust programs ignore SIGPIPE, so a write to a pipe whose reader is
//! gone (`cohort certs init … | head`) fails with `BrokenPipe`, and
//! `println!` turns that failure into a panic. A command's work (files
//! written, a write committed) is done before its answer is printed, so a
//! reader that left early changes nothing: the rest of the answer is
//! dropped and the command exits as it would have.

use std::io::Write;

/// Write `text` and a newline to stdout. A reader that closed the pipe is
/// not an error (the rest is dropped); any other failure is returned.
pub(crate) fn print_line(text: &str) -> std::io::Result<()> {
    write_line(&mut std::io::stdout().lock(), text)
}

/// [`print_line`] to any writer.
pub(super) fn write_line(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let written = out.write_all(text.as_bytes()).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
    match written {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader is gone.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    /// A writer with a full disk.
    struct Full;

    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::StorageFull.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn c2_a_closed_pipe_is_not_an_error_and_other_failures_are() {
        assert!(write_line(&mut ClosedPipe, "node 1: certificate ...").is_ok());
        assert!(write_line(&mut Full, "x").is_err());
        let mut out = Vec::new();
        write_line(&mut out, "op:3").expect("a vector takes it");
        assert_eq!(out, b"op:3\n");
    }
}
