//! [`ConfigError`]: a configuration that breaks a rule of `API.md` §1.

/// A configuration validation error.
///
/// `Display` is exactly the contract's message text, without any prefix (the
/// Python layer raises it as `ValueError(message)`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// The full message text.
    pub message: String,
}

impl ConfigError {
    /// An error with the given message text.
    pub fn new(message: impl Into<String>) -> Self {
        ConfigError {
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_error_display_is_message() {
        let e = ConfigError::new("boom");
        assert_eq!(e.to_string(), "boom");
        assert_eq!(e.message, "boom");
        let _: &dyn std::error::Error = &e;
    }
}
