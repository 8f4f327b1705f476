//! The Kafka client over TLS and SASL against the test cluster's SASL_SSL
//! listener (`tools/kafka/kafka.sh` makes its CA and its user): both SASL
//! mechanisms the brokers offer carry records; a wrong password, a CA that
//! did not sign the brokers' certificate and a plaintext client at a TLS
//! listener are refused with a reason, within `--kafka-timeout`, never
//! showing the password; the CLI's flags reach the client.

mod common;

use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::{KafkaLog, KafkaSecurity, Password, SaslMechanism};
use agentledger::log::Log;
use agentledger::model::Topic;
use common::{
    cli_with_input, required_env, secure_kafka_security, unique_prefix,
    KAFKA_SASL_PASSWORD_FILE_ENV, KAFKA_SASL_USER_ENV, KAFKA_SECURE_ENV, KAFKA_TLS_CA_ENV,
};
use std::time::{Duration, Instant};

fn secure_config(test: &str, security: KafkaSecurity, timeout: Duration) -> KafkaConfig {
    KafkaConfig {
        topic_prefix: unique_prefix(test),
        timeout,
        security,
        ..KafkaConfig::new(required_env(KAFKA_SECURE_ENV))
    }
}

fn the_password() -> String {
    std::fs::read_to_string(required_env(KAFKA_SASL_PASSWORD_FILE_ENV))
        .unwrap()
        .trim()
        .to_owned()
}

/// `connect`'s error, and how long it took to come.
fn refused(config: &KafkaConfig) -> (String, Duration) {
    let t0 = Instant::now();
    let e = match KafkaLog::connect(config) {
        Ok(_) => panic!("connecting with {:?} should have failed", config.security),
        Err(e) => e.to_string(),
    };
    (e, t0.elapsed())
}

#[test]
fn scram_and_plain_logins_over_tls_carry_records() {
    for mechanism in [SaslMechanism::ScramSha512, SaslMechanism::Plain] {
        let config = secure_config(
            &format!("sasl-{mechanism}"),
            secure_kafka_security(mechanism),
            Duration::from_secs(30),
        );
        let log = KafkaLog::connect(&config)
            .unwrap_or_else(|e| panic!("{mechanism} over TLS to the test cluster: {e}"));
        let key = format!("k-{mechanism}");
        let at = log
            .append(
                Topic::Registry,
                &[(key.as_bytes().to_vec(), b"over sasl_ssl".to_vec())],
            )
            .unwrap();
        let (partition, offset) = at[0];
        let got = log.read(Topic::Registry, partition, offset, 1).unwrap();
        assert_eq!(got[0].payload, b"over sasl_ssl", "{mechanism}");
        assert_eq!(got[0].key, key.as_bytes(), "{mechanism}");
    }
}

#[test]
fn a_wrong_password_is_refused_at_once_with_the_brokers_reason() {
    let mut security = secure_kafka_security(SaslMechanism::ScramSha512);
    let wrong = "not-the-password-7c1d9e";
    security.sasl.as_mut().unwrap().password = Password::new(wrong);
    let timeout = Duration::from_secs(20);
    let (e, took) = refused(&secure_config("wrong-password", security, timeout));
    assert!(
        e.contains("SASL_SSL (SCRAM-SHA-512 as ") && e.contains("uthentication"),
        "{e}"
    );
    assert!(!e.contains(wrong) && !e.contains(&the_password()), "{e}");
    // Refused by the broker, not timed out: well inside the timeout.
    assert!(took < timeout / 2, "took {took:?}: {e}");
}

#[test]
fn a_ca_that_did_not_sign_the_brokers_certificate_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let other_ca = d.path().join("other-ca.pem");
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(&other_ca, params.self_signed(&key).unwrap().pem()).unwrap();
    let mut security = secure_kafka_security(SaslMechanism::ScramSha512);
    security.tls_ca = Some(other_ca);
    let timeout = Duration::from_secs(20);
    let (e, took) = refused(&secure_config("wrong-ca", security, timeout));
    assert!(e.contains("certificate"), "{e}");
    assert!(!e.contains(&the_password()), "{e}");
    assert!(took < timeout / 2, "took {took:?}: {e}");
}

#[test]
fn a_plaintext_client_at_the_tls_listener_gives_up_within_the_timeout() {
    let timeout = Duration::from_secs(3);
    let (e, took) = refused(&secure_config(
        "plaintext-at-tls",
        KafkaSecurity::default(),
        timeout,
    ));
    assert!(
        e.contains("cannot reach Kafka at") && e.contains("within 3s"),
        "{e}"
    );
    assert!(
        took < timeout + Duration::from_secs(5),
        "took {took:?}: {e}"
    );
}

#[test]
fn the_cli_logs_in_with_its_flags_and_never_shows_the_password() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let prefix = unique_prefix("cli-sasl");
    let base = |password_file: &str| -> Vec<String> {
        [
            "--data",
            data.to_str().unwrap(),
            "--kafka",
            &required_env(KAFKA_SECURE_ENV),
            "--topic-prefix",
            &prefix,
            "--kafka-tls-ca",
            &required_env(KAFKA_TLS_CA_ENV),
            "--kafka-user",
            &required_env(KAFKA_SASL_USER_ENV),
            "--kafka-password-file",
            password_file,
            "--kafka-timeout",
            "20",
            "apply",
            "-",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let op = r#"{"op":"publish_agent","agent":"hotel","scope":"acme/travel"}"#;
    let good = required_env(KAFKA_SASL_PASSWORD_FILE_ENV);
    let (code, out, err) = cli_with_input(&base(&good), op);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(r#""ok":true"#), "{out}");

    let wrong_file = d.path().join("wrong.password");
    let wrong = "wrong-password-for-the-cli-3f0a";
    std::fs::write(&wrong_file, format!("{wrong}\n")).unwrap();
    let t0 = Instant::now();
    let (code, out, err) = cli_with_input(&base(wrong_file.to_str().unwrap()), op);
    assert_ne!(code, 0, "{out}\n{err}");
    assert!(err.contains("uthentication"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "{err}");
    for text in [&out, &err] {
        assert!(
            !text.contains(wrong) && !text.contains(&the_password()),
            "{text}"
        );
    }

    // Flags that cannot work are named before anything connects.
    let mut args = base(&good);
    args.extend(["--kafka-sasl-mechanism".into(), "gssapi".into()]);
    let (code, _, err) = cli_with_input(&args, op);
    assert_ne!(code, 0);
    assert!(err.contains("unknown SASL mechanism"), "{err}");
    let mut args = base(d.path().join("absent.password").to_str().unwrap());
    args.retain(|a| a != "--kafka-tls-ca" && a != &required_env(KAFKA_TLS_CA_ENV));
    let (code, _, err) = cli_with_input(&args, op);
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot read the Kafka password file") && err.contains("absent.password"),
        "{err}"
    );
}
