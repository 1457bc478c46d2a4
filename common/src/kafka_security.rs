//! How the collector and the processor authenticate to Kafka and encrypt
//! the connection: plaintext (a local broker), TLS, or TLS with a SCRAM
//! login (`SASL_SSL`, what Strimzi's `scram-sha-512` listeners and most
//! managed clusters offer).
//!
//! The settings are typed so that a half-configured client is refused at
//! start (a username without a password, a CA file on a plaintext
//! connection), and the password is read from a file or the environment,
//! never printed.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::auth::TokenArg;

/// What is wrong with the Kafka security settings.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A setting that the chosen protocol needs is missing.
    #[error("--kafka-security-protocol {protocol} needs {missing}")]
    Missing {
        protocol: &'static str,
        missing: &'static str,
    },
    /// A setting that the chosen protocol does not use was given.
    #[error("{setting} is given but --kafka-security-protocol {protocol} does not use it")]
    Unused {
        protocol: &'static str,
        setting: &'static str,
    },
    /// The password was given both in a file and in the environment.
    #[error(
        "the SASL password is given twice: use --kafka-sasl-password-file or \
         GPULEDGER_KAFKA_SASL_PASSWORD, not both"
    )]
    TwoPasswords,
    /// The password file could not be read, or is empty.
    #[error("--kafka-sasl-password-file {path}: {reason}")]
    PasswordFile { path: PathBuf, reason: String },
    /// The CA file does not exist.
    #[error("--kafka-ca {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
}

/// How the connection to the brokers is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SecurityProtocol {
    /// No encryption, no login: a broker on the same host or network only.
    Plaintext,
    /// TLS, the broker's certificate verified; no login.
    Ssl,
    /// TLS and a SCRAM login.
    #[value(name = "sasl_ssl")]
    SaslSsl,
}

impl SecurityProtocol {
    fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }
}

/// The SCRAM variant of the login.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-512`: what Strimzi's `KafkaUser` credentials use.
    #[value(name = "SCRAM-SHA-512")]
    Sha512,
    /// `SCRAM-SHA-256`.
    #[value(name = "SCRAM-SHA-256")]
    Sha256,
}

impl ScramMechanism {
    fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
        }
    }
}

/// The Kafka security flags, flattened into [`crate::kafka::KafkaArgs`].
#[derive(Debug, Clone, Args)]
pub struct KafkaSecurityArgs {
    /// How the connection is protected: plaintext, ssl or sasl_ssl.
    #[arg(
        long = "kafka-security-protocol",
        env = "GPULEDGER_KAFKA_SECURITY_PROTOCOL",
        value_enum,
        ignore_case = true,
        default_value = "plaintext"
    )]
    pub protocol: SecurityProtocol,

    /// PEM file of the CA that signed the brokers' certificates (ssl,
    /// sasl_ssl); without it the system's roots are trusted.
    #[arg(long = "kafka-ca", env = "GPULEDGER_KAFKA_CA")]
    pub ca: Option<PathBuf>,

    /// SCRAM mechanism of the login (sasl_ssl).
    #[arg(
        long = "kafka-sasl-mechanism",
        env = "GPULEDGER_KAFKA_SASL_MECHANISM",
        value_enum,
        ignore_case = true,
        default_value = "SCRAM-SHA-512"
    )]
    pub mechanism: ScramMechanism,

    /// Username of the login (sasl_ssl).
    #[arg(long = "kafka-sasl-username", env = "GPULEDGER_KAFKA_SASL_USERNAME")]
    pub username: Option<String>,

    /// File whose first line is the login's password (sasl_ssl), e.g. the
    /// `password` key of a Strimzi `KafkaUser` secret mounted as a file.
    #[arg(
        long = "kafka-sasl-password-file",
        env = "GPULEDGER_KAFKA_SASL_PASSWORD_FILE"
    )]
    pub password_file: Option<PathBuf>,

    /// The login's password from the environment only (there is no flag,
    /// so that it never shows in a process list).
    #[arg(
        skip = std::env::var("GPULEDGER_KAFKA_SASL_PASSWORD").ok().filter(|p| !p.is_empty()).map(TokenArg::from)
    )]
    pub password_env: Option<TokenArg>,
}

impl Default for KafkaSecurityArgs {
    fn default() -> Self {
        Self {
            protocol: SecurityProtocol::Plaintext,
            ca: None,
            mechanism: ScramMechanism::Sha512,
            username: None,
            password_file: None,
            password_env: None,
        }
    }
}

impl KafkaSecurityArgs {
    /// Settings for a SASL_SSL broker whose certificate `ca` signed, with
    /// the login `username` and the password in `password_file`.
    pub fn sasl_ssl(ca: &Path, username: &str, password_file: &Path) -> Self {
        Self {
            protocol: SecurityProtocol::SaslSsl,
            ca: Some(ca.to_owned()),
            mechanism: ScramMechanism::Sha512,
            username: Some(username.to_owned()),
            password_file: Some(password_file.to_owned()),
            password_env: None,
        }
    }

    /// The librdkafka settings these flags stand for, checked: each
    /// protocol gets exactly what it needs and nothing it would ignore.
    pub fn settings(&self) -> Result<Vec<(&'static str, String)>, SecurityError> {
        let protocol = self.protocol.name();
        let unused = |setting| SecurityError::Unused { protocol, setting };
        let mut settings = vec![("security.protocol", protocol.to_owned())];
        if self.protocol == SecurityProtocol::Plaintext && self.ca.is_some() {
            return Err(unused("--kafka-ca"));
        }
        if let Some(ca) = &self.ca {
            if let Err(e) = std::fs::metadata(ca) {
                return Err(SecurityError::CaFile {
                    path: ca.clone(),
                    reason: e.to_string(),
                });
            }
            settings.push(("ssl.ca.location", ca.display().to_string()));
        }
        if self.protocol != SecurityProtocol::SaslSsl {
            if self.username.is_some() {
                return Err(unused("--kafka-sasl-username"));
            }
            if self.password_file.is_some() || self.password_env.is_some() {
                return Err(unused("a SASL password"));
            }
            return Ok(settings);
        }
        let missing = |missing| SecurityError::Missing { protocol, missing };
        let username = self
            .username
            .clone()
            .ok_or_else(|| missing("--kafka-sasl-username"))?;
        let password = match (&self.password_file, &self.password_env) {
            (Some(_), Some(_)) => return Err(SecurityError::TwoPasswords),
            (Some(path), None) => read_password(path)?,
            (None, Some(env)) => env.reveal().to_owned(),
            (None, None) => {
                return Err(missing(
                    "--kafka-sasl-password-file or GPULEDGER_KAFKA_SASL_PASSWORD",
                ));
            }
        };
        settings.push(("sasl.mechanism", self.mechanism.name().to_owned()));
        settings.push(("sasl.username", username));
        settings.push(("sasl.password", password));
        Ok(settings)
    }
}

fn read_password(path: &Path) -> Result<String, SecurityError> {
    let bad = |reason: String| SecurityError::PasswordFile {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let password = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if password.is_empty() {
        return Err(bad("the first line is empty".into()));
    }
    Ok(password.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl(dir: &Path, password: &str) -> KafkaSecurityArgs {
        let file = dir.join("password");
        std::fs::write(&file, password).unwrap();
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, "not read here").unwrap();
        KafkaSecurityArgs::sasl_ssl(&ca, "gpuledger-collector", &file)
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kafka-security-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn plaintext_sets_only_the_protocol() {
        let settings = KafkaSecurityArgs::default().settings().unwrap();
        assert_eq!(settings, vec![("security.protocol", "plaintext".into())]);
    }

    #[test]
    fn sasl_ssl_reads_the_password_file_first_line() {
        let dir = temp_dir("first-line");
        let settings = sasl(&dir, "s3cret-pass\nignored\n").settings().unwrap();
        let get = |k| {
            settings
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(get("sasl.mechanism"), Some("SCRAM-SHA-512"));
        assert_eq!(get("sasl.username"), Some("gpuledger-collector"));
        assert_eq!(get("sasl.password"), Some("s3cret-pass"));
        assert!(get("ssl.ca.location").unwrap().ends_with("ca.crt"));
    }

    #[test]
    fn half_configured_logins_are_refused_by_name() {
        let dir = temp_dir("half");
        let mut args = sasl(&dir, "pw");
        args.username = None;
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("--kafka-sasl-username"), "{err}");

        let mut args = sasl(&dir, "pw");
        args.password_file = None;
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("GPULEDGER_KAFKA_SASL_PASSWORD"), "{err}");

        let mut args = sasl(&dir, "pw");
        args.password_env = Some(TokenArg::from("other".to_owned()));
        assert!(matches!(args.settings(), Err(SecurityError::TwoPasswords)));

        let err = sasl(&dir, "\n").settings().unwrap_err().to_string();
        assert!(err.contains("first line is empty"), "{err}");

        let mut args = sasl(&dir, "pw");
        args.protocol = SecurityProtocol::Ssl;
        let err = args.settings().unwrap_err().to_string();
        assert!(
            err.contains("--kafka-sasl-username") && err.contains("ssl"),
            "{err}"
        );

        let args = KafkaSecurityArgs {
            ca: Some(dir.join("ca.crt")),
            ..Default::default()
        };
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("--kafka-ca"), "{err}");

        let mut args = sasl(&dir, "pw");
        args.ca = Some(dir.join("missing.crt"));
        let err = args.settings().unwrap_err().to_string();
        assert!(err.contains("missing.crt"), "{err}");
    }

    #[test]
    fn the_password_is_never_in_debug() {
        let dir = temp_dir("debug");
        let mut args = sasl(&dir, "pw");
        args.password_file = None;
        args.password_env = Some(TokenArg::from("hunter2-secret".to_owned()));
        assert!(!format!("{args:?}").contains("hunter2"));
    }
}
