//! Errors of the simulator: bad scenario files, unknown names, I/O.
//!
//! Scenario errors always say *where*: the file (or built-in scenario name),
//! the line when it can be found, and the field, so a user editing a copy of
//! a shipped scenario can fix it without reading the source.

use std::fmt;

/// Where in a scenario file an error was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file path, or `<built-in NAME>`.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted field path, e.g. `server.capacity`, when known.
    pub field: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": field `{field}`")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong when loading or running a simulation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A scenario file could not be parsed or has an invalid value.
    #[error("{location}: {message}")]
    Scenario {
        /// Where.
        location: Location,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A value is out of range; not yet tied to a file (see
    /// [`SimError::Scenario`] for the located form).
    #[error("field `{field}`: {message}")]
    Invalid {
        /// Dotted field path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// `--scenario` named neither a built-in scenario nor a readable file.
    #[error("unknown scenario `{0}`: not a built-in name (see `ratewise scenarios`) and not a readable .toml file")]
    UnknownScenario(String),
    /// `--strategy` named no known strategy.
    #[error("unknown strategy `{0}` (see `ratewise strategies` for the list)")]
    UnknownStrategy(String),
    /// Reading a scenario or writing a report failed.
    #[error("{path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl SimError {
    /// An out-of-range value in `field`.
    pub fn invalid(field: &str, message: impl Into<String>) -> Self {
        SimError::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// `Ok` when `v` is finite and above zero; else an error on `field`.
pub(crate) fn positive(v: f64, field: &str) -> Result<(), SimError> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(SimError::invalid(
            field,
            format!("must be a positive number, got {v}"),
        ))
    }
}

/// `Ok` when `v` is finite and not below zero; else an error on `field`.
pub(crate) fn non_negative(v: f64, field: &str) -> Result<(), SimError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(SimError::invalid(
            field,
            format!("must be zero or more, got {v}"),
        ))
    }
}
