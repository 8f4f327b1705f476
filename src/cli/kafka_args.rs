//! The global options that say which Kafka cluster the ledger is on and
//! how to reach it (none: the embedded log).

use agentledger::log::kafka::{GroupProtocol, SaslMechanism};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers; without it the embedded log is used.
    #[arg(
        long = "kafka",
        id = "kafka",
        value_name = "KAFKA",
        global = true,
        env = "AGENTLEDGER_KAFKA",
        help_heading = "Kafka"
    )]
    pub brokers: Option<String>,
    /// Prefix of every topic name.
    #[arg(long, global = true, default_value = "", help_heading = "Kafka")]
    pub topic_prefix: String,
    /// Seconds to wait for Kafka before giving up with an error.
    #[arg(long, global = true, default_value_t = 30, help_heading = "Kafka")]
    pub kafka_timeout: u64,
    /// Speak TLS to the Kafka brokers, trusting the system's certificate
    /// authorities (or --kafka-tls-ca).
    #[arg(long, global = true, help_heading = "Kafka")]
    pub kafka_tls: bool,
    /// A PEM file of the certificate authority that signs the Kafka
    /// brokers' certificates (implies --kafka-tls).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_TLS_CA",
        help_heading = "Kafka"
    )]
    pub kafka_tls_ca: Option<PathBuf>,
    /// SASL mechanism to log in to the brokers with: scram-sha-512
    /// (default), scram-sha-256 or plain (plain only over TLS).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_SASL_MECHANISM",
        requires = "kafka_user",
        help_heading = "Kafka"
    )]
    pub kafka_sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name on the Kafka brokers (with --kafka-password-file).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_USER",
        requires = "kafka_password_file",
        help_heading = "Kafka"
    )]
    pub kafka_user: Option<String>,
    /// A file whose first line is the SASL password (a file, so that the
    /// password never shows in the process list).
    #[arg(
        long,
        global = true,
        env = "AGENTLEDGER_KAFKA_PASSWORD_FILE",
        requires = "kafka_user",
        help_heading = "Kafka"
    )]
    pub kafka_password_file: Option<PathBuf>,
    /// The consumer group protocol `serve` instances of one ledger share
    /// its partitions with: consumer (KIP-848, Kafka 4.0 and later; the
    /// brokers' group.consumer.session.timeout.ms says how soon a silent
    /// instance's partitions move) or classic (cooperative-sticky, for
    /// older brokers).
    #[arg(
        long,
        global = true,
        default_value = "consumer",
        env = "AGENTLEDGER_KAFKA_GROUP_PROTOCOL",
        help_heading = "Kafka"
    )]
    pub kafka_group_protocol: GroupProtocol,
}
