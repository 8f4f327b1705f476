//! How the Kafka client proves itself to the brokers and checks them: TLS
//! (with a CA of the operator's choosing) and SASL (SCRAM-SHA-512,
//! SCRAM-SHA-256, PLAIN), turned into librdkafka settings.
//!
//! The password is read from a file (never a flag: flags show in `ps`) and
//! kept in a [`Password`] that prints as `***`, so a `{:?}` of a
//! [`super::config::KafkaConfig`] in a log line never carries it.

use crate::log::LogError;
use rdkafka::config::ClientConfig;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// TLS and SASL settings of the client; the default is plaintext without
/// SASL (a broker on a trusted network, as in development).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KafkaSecurity {
    /// Speak TLS to the brokers.
    pub tls: bool,
    /// PEM file of the certificate authorities that sign the brokers'
    /// certificates; the system's trust store when `None`.
    pub tls_ca: Option<PathBuf>,
    /// Log in with SASL.
    pub sasl: Option<SaslLogin>,
}

/// A SASL user and how it logs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    pub user: String,
    pub password: Password,
}

/// The SASL mechanisms the client offers (GSSAPI and OAUTHBEARER are not
/// built in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    ScramSha512,
    ScramSha256,
    Plain,
}

impl SaslMechanism {
    /// The name librdkafka and the brokers use.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::Plain => "PLAIN",
        }
    }
}

impl fmt::Display for SaslMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SaslMechanism {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().replace('_', "-").as_str() {
            "SCRAM-SHA-512" => Ok(SaslMechanism::ScramSha512),
            "SCRAM-SHA-256" => Ok(SaslMechanism::ScramSha256),
            "PLAIN" => Ok(SaslMechanism::Plain),
            _ => Err(format!(
                "unknown SASL mechanism {s:?} (expected scram-sha-512, scram-sha-256 or plain)"
            )),
        }
    }
}

/// A password that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(secret: impl Into<String>) -> Self {
        Password(secret.into())
    }

    /// The password, for the one place it is handed to librdkafka.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The first line of a file (a trailing newline is not part of it).
    /// Errors name the file, never its content.
    pub fn from_file(path: &Path) -> Result<Self, LogError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            LogError::Config(format!(
                "cannot read the Kafka password file {}: {e}",
                path.display()
            ))
        })?;
        let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
        if line.is_empty() {
            return Err(LogError::Config(format!(
                "the Kafka password file {} is empty",
                path.display()
            )));
        }
        Ok(Password(line.to_owned()))
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl KafkaSecurity {
    /// `security.protocol` as librdkafka names it.
    pub fn protocol(&self) -> &'static str {
        match (self.tls, self.sasl.is_some()) {
            (false, false) => "plaintext",
            (true, false) => "ssl",
            (false, true) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        }
    }

    /// Refuse what cannot work or would leak: a CA file that cannot be
    /// read, a PLAIN password sent without TLS, an empty user name.
    pub fn check(&self) -> Result<(), LogError> {
        if let Some(ca) = &self.tls_ca {
            std::fs::File::open(ca).map_err(|e| {
                LogError::Config(format!(
                    "cannot read the Kafka TLS CA file {}: {e}",
                    ca.display()
                ))
            })?;
        }
        if let Some(login) = &self.sasl {
            if login.user.is_empty() {
                return Err(LogError::Config("the Kafka SASL user name is empty".into()));
            }
            if login.mechanism == SaslMechanism::Plain && !self.tls {
                return Err(LogError::Config(
                    "SASL PLAIN sends the password in clear: use it with TLS (--kafka-tls or --kafka-tls-ca)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Set the client's security settings.
    pub fn apply(&self, c: &mut ClientConfig) {
        c.set("security.protocol", self.protocol());
        if self.tls {
            // Check the broker's name (or IP) against its certificate.
            c.set("ssl.endpoint.identification.algorithm", "https");
            if let Some(ca) = &self.tls_ca {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
        }
        if let Some(login) = &self.sasl {
            c.set("sasl.mechanisms", login.mechanism.name())
                .set("sasl.username", &login.user)
                .set("sasl.password", login.password.expose());
        }
    }

    /// A few words for messages: `SASL_SSL (SCRAM-SHA-512 as ledger)`.
    pub fn describe(&self) -> String {
        let proto = self.protocol().to_ascii_uppercase();
        match &self.sasl {
            Some(l) => format!("{proto} ({} as {})", l.mechanism, l.user),
            None => proto,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_never_prints() {
        let s = KafkaSecurity {
            tls: true,
            tls_ca: None,
            sasl: Some(SaslLogin {
                mechanism: SaslMechanism::ScramSha512,
                user: "ledger".into(),
                password: Password::new("hunter2-very-secret"),
            }),
        };
        let shown = format!("{s:?} {}", s.describe());
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("SASL_SSL (SCRAM-SHA-512 as ledger)"),
            "{shown}"
        );
    }

    #[test]
    fn protocols_follow_tls_and_sasl() {
        let login = SaslLogin {
            mechanism: SaslMechanism::ScramSha256,
            user: "u".into(),
            password: Password::new("p"),
        };
        let mut s = KafkaSecurity::default();
        assert_eq!(s.protocol(), "plaintext");
        s.tls = true;
        assert_eq!(s.protocol(), "ssl");
        s.sasl = Some(login);
        assert_eq!(s.protocol(), "sasl_ssl");
        s.tls = false;
        assert_eq!(s.protocol(), "sasl_plaintext");
        assert!(s.check().is_ok());
    }

    #[test]
    fn plain_without_tls_and_unreadable_files_are_refused() {
        let mut s = KafkaSecurity {
            sasl: Some(SaslLogin {
                mechanism: SaslMechanism::Plain,
                user: "u".into(),
                password: Password::new("p"),
            }),
            ..KafkaSecurity::default()
        };
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("PLAIN sends the password in clear"), "{e}");
        s.tls = true;
        s.tls_ca = Some("/nonexistent/ca.pem".into());
        let e = s.check().unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");

        let dir = std::env::temp_dir().join(format!("al-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pw");
        std::fs::write(&f, "\n").unwrap();
        let e = Password::from_file(&f).unwrap_err().to_string();
        assert!(e.contains("is empty"), "{e}");
        std::fs::write(&f, "s3cret\nignored\n").unwrap();
        assert_eq!(Password::from_file(&f).unwrap().expose(), "s3cret");
        let e = Password::from_file(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mechanisms_parse_as_people_write_them() {
        assert_eq!("scram-sha-512".parse(), Ok(SaslMechanism::ScramSha512));
        assert_eq!("SCRAM_SHA_256".parse(), Ok(SaslMechanism::ScramSha256));
        assert_eq!("plain".parse(), Ok(SaslMechanism::Plain));
        assert!("gssapi".parse::<SaslMechanism>().is_err());
    }
}
