//! What the commands print for people. `agentd trace ID | head` closes the pipe after ten
//! lines; `println!` would then panic ("failed printing to stdout: Broken pipe", exit 101).
//! Here a write to stdout returns the error instead, the command stops at once, and
//! [`is_broken_pipe`] lets `main` end it quietly. Messages on stderr never fail a command.

use std::io::Write;

/// Writes one line to stdout; an error (a closed pipe) is the caller's to return.
pub fn line(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.write_all(b"\n")?;
    stdout.flush()
}

/// Writes `text` to stdout as it is, flushed.
pub fn text(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}

/// Writes one line to stderr, ignoring a closed stderr (nothing better can be done).
pub fn note(args: std::fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr
        .write_fmt(args)
        .and_then(|()| stderr.write_all(b"\n"));
}

/// Whether a command failed because the reader of its output went away.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!` that returns the write error: `outln!("{x}")?;`.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*))
    };
}

/// `eprintln!` that never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::out::note(format_args!($($arg)*))
    };
}

pub(crate) use {errln, outln};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_found_anywhere_in_the_chain() {
        let pipe = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "closed");
        let err = anyhow::Error::new(pipe).context("printing the trace");
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("no task")));
    }
}
