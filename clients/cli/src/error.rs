//! The one error type of the command line, and how it is shown.
//!
//! Server errors keep their SQLSTATE, message, detail and hint; everything
//! else is a message. `main` prints [`Error::report`] on stderr and exits
//! with [`Error::exit_code`]: 1, or 2 for a flag value the server found bad
//! (clap's own usage errors exit 2 before any of this runs).

use std::fmt::Write as _;

#[derive(Debug)]
pub enum Error {
    /// From the server or the connection.
    Db(tokio_postgres::Error),
    /// A failure of the command itself (no such task, cancelled purge, bad file).
    Msg(String),
    /// A flag's value the server found bad (a duration): exits 2 like
    /// clap's usage errors.
    Usage(String),
    /// Another error, with what the command was doing when it happened.
    Context(String, Box<Error>),
    /// stdout was closed by its reader (`aedb-queue list q | head`): stop quietly.
    BrokenPipe,
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Db(e)
    }
}

impl Error {
    pub fn msg(s: impl Into<String>) -> Self {
        Error::Msg(s.into())
    }

    pub fn usage(s: impl Into<String>) -> Self {
        Error::Usage(s.into())
    }

    /// The exit code: 2 for usage errors (as clap's), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 2,
            Error::Context(_, inner) => inner.exit_code(),
            _ => 1,
        }
    }

    pub fn context(self, what: impl Into<String>) -> Self {
        Error::Context(what.into(), Box::new(self))
    }

    /// What `main` prints: `error: [SQLSTATE] message` for server errors,
    /// then their detail and hint on lines of their own.
    pub fn report(&self) -> String {
        let mut out = String::from("error: ");
        self.write_to(&mut out);
        out
    }

    fn write_to(&self, out: &mut String) {
        match self {
            Error::Db(e) => match e.as_db_error() {
                Some(db) => {
                    let _ = write!(out, "[{}] {}", db.code().code(), db.message());
                    if let Some(detail) = db.detail() {
                        let _ = write!(out, "\ndetail: {detail}");
                    }
                    if let Some(hint) = db.hint() {
                        let _ = write!(out, "\nhint: {hint}");
                    }
                }
                None => {
                    // Connection-level errors: the Display of tokio-postgres
                    // says what failed, its source says why.
                    let _ = write!(out, "{e}");
                    if let Some(src) = std::error::Error::source(e) {
                        let text = src.to_string();
                        if !out.contains(&text) {
                            let _ = write!(out, ": {text}");
                        }
                    }
                }
            },
            Error::Msg(m) | Error::Usage(m) => out.push_str(m),
            Error::Context(what, inner) => {
                let _ = write!(out, "{what}: ");
                inner.write_to(out);
            }
            Error::BrokenPipe => out.push_str("broken pipe"),
        }
    }
}
