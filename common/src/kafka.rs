//! Kafka client settings shared by the collector and the processor, and the
//! delivery of events in the wire format of DESIGN §2.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use clap::Args;
use gpuledger_schemas::{Codec, Event, Topic, cloud_event_headers};
use rdkafka::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{BaseRecord, FutureRecord};

use crate::kafka_security::{KafkaSecurityArgs, SecurityError};
use crate::polled_producer::PolledProducer;

/// What went wrong talking to Kafka.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `--kafka-option` that is not `key=value`.
    #[error("Kafka option {0:?} is not of the form key=value")]
    BadOption(String),
    /// A raw librdkafka setting that contradicts a typed one.
    #[error(
        "Kafka option {key}={raw} contradicts the setting {key}={typed} that gpuledger needs here"
    )]
    Conflict {
        key: String,
        typed: String,
        raw: String,
    },
    /// librdkafka refused the configuration or a request.
    #[error("Kafka client error: {0}")]
    Client(#[from] KafkaError),
    /// The security settings are incomplete or contradict each other.
    #[error(transparent)]
    Security(#[from] SecurityError),
    /// The event could not be encoded.
    #[error(transparent)]
    Encode(#[from] gpuledger_schemas::Error),
    /// The broker did not acknowledge a record.
    #[error("delivery to {topic} failed: {source}")]
    Delivery { topic: String, source: KafkaError },
    /// A topic the broker does not know (or that has no partitions).
    #[error("topic {0} has no partitions (does it exist?)")]
    NoTopic(String),
    /// Records were still queued when the flush deadline passed.
    #[error("{0} records were still undelivered when the flush timed out")]
    FlushTimeout(i32),
}

/// Result with the Kafka [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the broker is and how to talk to it. Its `Debug` shows the keys
/// of the raw options, not their values (one may be a password).
#[derive(Clone, Args)]
pub struct KafkaArgs {
    /// Bootstrap servers, `host:port[,host:port…]`.
    #[arg(
        long = "kafka-bootstrap",
        env = "GPULEDGER_KAFKA_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap: String,

    /// Prefix for every topic name (e.g. `staging.` gives `staging.gpuledger.ledger`).
    #[arg(
        long = "topic-prefix",
        env = "GPULEDGER_TOPIC_PREFIX",
        default_value = ""
    )]
    pub topic_prefix: String,

    /// Extra librdkafka settings as `key=value`, repeatable or comma-separated
    /// (TLS, SASL, timeouts…). They may not contradict a setting gpuledger needs.
    #[arg(
        long = "kafka-option",
        env = "GPULEDGER_KAFKA_OPTIONS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub options: Vec<String>,

    /// TLS and SASL.
    #[command(flatten)]
    pub security: KafkaSecurityArgs,
}

impl std::fmt::Debug for KafkaArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self
            .options
            .iter()
            .map(|o| o.split_once('=').map_or(o.as_str(), |(k, _)| k))
            .collect();
        f.debug_struct("KafkaArgs")
            .field("bootstrap", &self.bootstrap)
            .field("topic_prefix", &self.topic_prefix)
            .field("option_keys", &keys)
            .field("security", &self.security)
            .finish()
    }
}

impl KafkaArgs {
    /// Settings for a local broker at `bootstrap` with a topic prefix.
    pub fn local(bootstrap: &str, topic_prefix: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_owned(),
            topic_prefix: topic_prefix.to_owned(),
            options: Vec::new(),
            security: KafkaSecurityArgs::default(),
        }
    }

    /// A topic's full name.
    pub fn topic(&self, topic: Topic) -> String {
        topic.name(&self.topic_prefix)
    }

    /// A client configuration: bootstrap servers, the security settings,
    /// the `typed` settings this client needs, then the raw options. A raw
    /// option that sets a typed or security key to another value is an
    /// error, not a silent override.
    pub fn client_config(&self, typed: &[(&str, &str)]) -> Result<ClientConfig> {
        let security = self.security.settings()?;
        let mut typed: Vec<(&str, &str)> = typed.to_vec();
        typed.extend(security.iter().map(|(k, v)| (*k, v.as_str())));
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap);
        for (key, value) in &typed {
            config.set(*key, *value);
        }
        for option in &self.options {
            let (key, raw) = option
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| Error::BadOption(option.clone()))?;
            if let Some((_, typed)) = typed.iter().find(|(k, _)| *k == key)
                && *typed != raw
            {
                let secret = key.contains("password");
                let shown = |v: &str| {
                    if secret {
                        "…".to_owned()
                    } else {
                        v.to_owned()
                    }
                };
                return Err(Error::Conflict {
                    key: key.to_owned(),
                    typed: shown(typed),
                    raw: shown(raw),
                });
            }
            config.set(key, raw);
        }
        Ok(config)
    }
}

/// Producer settings for events: idempotent, every replica acknowledges,
/// compressed, a short linger so batches fill.
pub const PRODUCER_SETTINGS: &[(&str, &str)] = &[
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("compression.type", "zstd"),
    ("linger.ms", "5"),
    ("message.timeout.ms", "120000"),
];

/// The override collectors produce with: samples are nearly all of the
/// traffic and every consumer of them decompresses each one, and LZ4
/// decompresses several times faster than zstd for about a third more
/// bytes on the broker.
pub const TELEMETRY_COMPRESSION: (&str, &str) = ("compression.type", "lz4");

/// One event as a Kafka record: its topic, key, Avro value and CloudEvents
/// headers (DESIGN §2).
#[derive(Debug)]
pub struct WireRecord {
    pub topic: String,
    pub key: String,
    pub payload: Vec<u8>,
    pub headers: OwnedHeaders,
}

impl WireRecord {
    /// Encodes `event` for the topic its type travels on, under `prefix`.
    pub fn new(codec: &Codec, event: &Event, prefix: &str) -> Result<Self> {
        let headers = cloud_event_headers(event).iter().fold(
            OwnedHeaders::new_with_capacity(6),
            |h, (key, value)| {
                h.insert(Header {
                    key,
                    value: Some(value.as_bytes()),
                })
            },
        );
        Ok(Self {
            topic: event.event_type().topic().name(prefix),
            key: event.key().to_owned(),
            payload: codec.encode(event)?,
            headers,
        })
    }

    /// The record to hand to a [`EventProducer`].
    fn base_record(&self) -> BaseRecord<'_, str, [u8]> {
        BaseRecord::to(&self.topic)
            .key(self.key.as_str())
            .payload(self.payload.as_slice())
            .headers(self.headers.clone())
    }

    /// The record to hand to a producer.
    pub fn record(&self) -> FutureRecord<'_, str, [u8]> {
        FutureRecord::to(&self.topic)
            .key(self.key.as_str())
            .payload(self.payload.as_slice())
            .headers(self.headers.clone())
    }
}

/// Sends events to their topics in the wire format, keeping at most
/// `window` deliveries in flight.
pub struct EventProducer {
    producer: PolledProducer,
    codec: &'static Codec,
    prefix: String,
    in_flight: VecDeque<Delivery>,
    window: usize,
    delivered: u64,
}

impl std::fmt::Debug for EventProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventProducer")
            .field("prefix", &self.prefix)
            .field("in_flight", &self.in_flight.len())
            .field("delivered", &self.delivered)
            .finish()
    }
}

impl EventProducer {
    /// A producer for `args`' broker, identified as `client_id`.
    pub fn new(args: &KafkaArgs, client_id: &str) -> Result<Self> {
        Self::with_settings(args, client_id, &[])
    }

    /// Like [`EventProducer::new`], with `overrides` replacing settings of
    /// [`PRODUCER_SETTINGS`] (or adding to them).
    pub fn with_settings(
        args: &KafkaArgs,
        client_id: &str,
        overrides: &[(&str, &str)],
    ) -> Result<Self> {
        let mut typed: Vec<(&str, &str)> = PRODUCER_SETTINGS
            .iter()
            .filter(|(key, _)| !overrides.iter().any(|(k, _)| k == key))
            .copied()
            .collect();
        typed.extend_from_slice(overrides);
        typed.push(("client.id", client_id));
        let producer = PolledProducer::new(&args.client_config(&typed)?)?;
        Ok(Self {
            producer,
            codec: Codec::builtin(),
            prefix: args.topic_prefix.clone(),
            in_flight: VecDeque::new(),
            window: 50_000,
            delivered: 0,
        })
    }

    /// Records acknowledged so far.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// Records handed over and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Settles the deliveries already acknowledged, oldest first, without
    /// waiting: stops at the first still in flight, so [`delivered`] counts
    /// an unbroken prefix of what was sent. A failed delivery is an error.
    ///
    /// [`delivered`]: EventProducer::delivered
    pub fn settle_ready(&mut self) -> Result<u64> {
        use futures::FutureExt;
        while let Some(delivery) = self.in_flight.front_mut() {
            let Some(outcome) = (&mut delivery.future).now_or_never() else {
                break;
            };
            let Delivery { topic, .. } = self
                .in_flight
                .pop_front()
                .unwrap_or_else(|| unreachable!("front was just seen"));
            Delivery::outcome(topic, outcome)?;
            self.delivered += 1;
        }
        Ok(self.delivered)
    }

    /// Queues one event; waits for older deliveries when the window is full
    /// or librdkafka's queue is (backpressure, never a dropped record).
    pub async fn send(&mut self, event: &Event) -> Result<()> {
        self.send_to(event, None).await
    }

    /// Like [`EventProducer::send`], to one partition of the event's topic
    /// (`None`: the partition its key picks).
    pub async fn send_to(&mut self, event: &Event, partition: Option<i32>) -> Result<()> {
        let wire = WireRecord::new(self.codec, event, &self.prefix)?;
        let topic = wire.topic.clone();
        let mut record = wire.base_record();
        if let Some(p) = partition {
            record = record.partition(p);
        }
        loop {
            while self.in_flight.len() >= self.window {
                self.settle_oldest().await?;
            }
            match self.producer.send(record) {
                Ok(future) => {
                    self.in_flight.push_back(Delivery {
                        topic: topic.clone(),
                        future,
                    });
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    if self.in_flight.is_empty() {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    } else {
                        self.settle_oldest().await?;
                    }
                }
                Err((e, _)) => return Err(Error::Delivery { topic, source: e }),
            }
        }
    }

    async fn settle_oldest(&mut self) -> Result<()> {
        let Some(delivery) = self.in_flight.pop_front() else {
            return Ok(());
        };
        delivery.settled().await?;
        self.delivered += 1;
        Ok(())
    }

    /// Queues one event and returns its [`Delivery`], without taking the
    /// producer for the wait: callers that share a producer behind a lock
    /// release it before they wait, and their events share batches.
    pub async fn queue(&self, event: &Event) -> Result<Delivery> {
        self.queue_to(event, None).await
    }

    /// Like [`EventProducer::queue`], to one partition of the event's topic
    /// (`None`: the partition its key picks).
    pub async fn queue_to(&self, event: &Event, partition: Option<i32>) -> Result<Delivery> {
        let wire = WireRecord::new(self.codec, event, &self.prefix)?;
        let mut record = wire.base_record();
        if let Some(p) = partition {
            record = record.partition(p);
        }
        queue_record(&self.producer, &wire.topic, record).await
    }

    /// The partition ids of the topic events of `topic` travel on.
    pub fn partitions(&self, topic: gpuledger_schemas::Topic) -> Result<Vec<i32>> {
        partitions_of(self.producer.client(), &topic.name(&self.prefix))
    }

    /// Waits for every queued event to be acknowledged.
    pub async fn flush(&mut self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, self.settle_oldest()).await {
                Ok(result) => result?,
                Err(_) => return Err(Error::FlushTimeout(self.in_flight.len() as i32)),
            }
        }
        self.producer
            .flush(Duration::from_secs(1))
            .map_err(Error::Client)?;
        Ok(())
    }
}

/// One queued event on its way to the broker.
pub struct Delivery {
    topic: String,
    future: futures::channel::oneshot::Receiver<OwnedDeliveryResult>,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// Waits until the broker has the event (every replica, with
    /// `acks=all`), or says why it does not.
    pub async fn settled(self) -> Result<()> {
        self.placed().await.map(|_| ())
    }

    /// Like [`Delivery::settled`], with where the event landed: its
    /// partition and offset.
    pub async fn placed(self) -> Result<(i32, i64)> {
        let outcome = self.future.await;
        Self::outcome(self.topic, outcome)
    }

    fn outcome(
        topic: String,
        outcome: Result<OwnedDeliveryResult, futures::channel::oneshot::Canceled>,
    ) -> Result<(i32, i64)> {
        match outcome {
            Ok(Ok(placed)) => Ok((placed.partition, placed.offset)),
            Ok(Err((e, _))) => Err(Error::Delivery { topic, source: e }),
            Err(_cancelled) => Err(Error::Delivery {
                topic,
                source: KafkaError::Canceled,
            }),
        }
    }
}

/// Header on a dead letter naming why it could not be processed.
pub const DLQ_REASON_HEADER: &str = "gpuledger_dlq_reason";

/// The value of a record's header `name` as text, if it has one.
pub fn header_text<'a, M: rdkafka::Message>(message: &'a M, name: &str) -> Option<Cow<'a, str>> {
    use rdkafka::message::Headers;
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
        .map(String::from_utf8_lossy)
}

/// The dead letter for `original`: its key, value and headers, plus the
/// reason and where it came from, for the DLQ topic `dlq_topic`.
pub fn dead_letter<'a, M: rdkafka::Message>(
    dlq_topic: &'a str,
    original: &'a M,
    reason: &str,
) -> FutureRecord<'a, [u8], [u8]> {
    use rdkafka::message::Headers;
    let mut headers = OwnedHeaders::new();
    if let Some(existing) = original.headers() {
        for h in existing.iter() {
            headers = headers.insert(Header {
                key: h.key,
                value: h.value,
            });
        }
    }
    let partition = original.partition().to_string();
    let offset = original.offset().to_string();
    for (key, value) in [
        (DLQ_REASON_HEADER, reason),
        ("gpuledger_dlq_topic", original.topic()),
        ("gpuledger_dlq_partition", &partition),
        ("gpuledger_dlq_offset", &offset),
    ] {
        headers = headers.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
    let mut record = FutureRecord::<[u8], [u8]>::to(dlq_topic).headers(headers);
    if let Some(key) = original.key() {
        record = record.key(key);
    }
    if let Some(payload) = original.payload() {
        record = record.payload(payload);
    }
    record
}

/// Hands `record` to `producer`, waiting while librdkafka's queue is full
/// (backpressure, never a dropped record), and returns its delivery.
async fn queue_record<'a, K, P>(
    producer: &PolledProducer,
    topic: &str,
    mut record: BaseRecord<'a, K, P, ()>,
) -> Result<Delivery>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(future) => {
                return Ok(Delivery {
                    topic: topic.to_owned(),
                    future,
                });
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                record = returned;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err((e, _)) => {
                return Err(Error::Delivery {
                    topic: topic.to_owned(),
                    source: e,
                });
            }
        }
    }
}

/// Sends records that could not be decoded or validated to the DLQ topic,
/// with their original key, value and headers and the reason in headers.
pub struct DeadLetters {
    producer: PolledProducer,
    topic: String,
}

impl std::fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetters")
            .field("topic", &self.topic)
            .finish()
    }
}

impl DeadLetters {
    /// A DLQ sender for `args`' broker.
    pub fn new(args: &KafkaArgs, client_id: &str) -> Result<Self> {
        let mut typed = PRODUCER_SETTINGS.to_vec();
        typed.push(("client.id", client_id));
        Ok(Self {
            producer: PolledProducer::new(&args.client_config(&typed)?)?,
            topic: args.topic(Topic::Dlq),
        })
    }

    /// Sends one dead letter and waits until the broker has it.
    pub async fn send<M: rdkafka::Message>(&self, original: &M, reason: &str) -> Result<()> {
        let r = dead_letter(&self.topic, original, reason);
        let record = BaseRecord {
            topic: r.topic,
            partition: r.partition,
            payload: r.payload,
            key: r.key,
            timestamp: r.timestamp,
            headers: r.headers,
            delivery_opaque: (),
        };
        queue_record(&self.producer, &self.topic, record)
            .await?
            .settled()
            .await
    }
}

/// The partition ids of `topic`; an error when it has none (or does not
/// exist).
pub fn partitions_of<C: rdkafka::ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
) -> Result<Vec<i32>> {
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .map_err(Error::Client)?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(Error::NoTopic(topic.to_owned()));
    }
    Ok(partitions)
}
