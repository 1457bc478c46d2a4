//! A Kafka producer polled by a thread of its own that sleeps while idle.
//!
//! rust-rdkafka's `FutureProducer` polls its events every 100 ms, and each
//! poll waits out the last fraction of a millisecond of its deadline in a
//! busy loop (the remaining time is truncated to whole milliseconds before
//! librdkafka is asked to wait): an idle agent spent most of its CPU there.
//! This one blocks on librdkafka's event queue a second at a time, and a
//! delivery report wakes it at once. As with the future producer, each
//! record's delivery completes a oneshot channel.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::channel::oneshot;
use rdkafka::ClientConfig;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::future_producer::{Delivery, OwnedDeliveryResult};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

/// Completes each record's channel with its delivery report.
pub(crate) struct Deliveries;

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<oneshot::Sender<OwnedDeliveryResult>>;

    fn delivery(&self, result: &DeliveryResult<'_>, done: Self::DeliveryOpaque) {
        let owned = match result {
            Ok(message) => Ok(Delivery {
                partition: message.partition(),
                offset: message.offset(),
                timestamp: message.timestamp(),
            }),
            Err((error, message)) => Err((error.clone(), message.detach())),
        };
        // Nobody waiting any more is not an error.
        let _ = done.send(owned);
    }
}

/// A record on its way, with the channel its delivery report completes.
pub(crate) type PolledRecord<'a, K, P> =
    BaseRecord<'a, K, P, Box<oneshot::Sender<OwnedDeliveryResult>>>;

/// A record librdkafka would not take now (its queue is full), given back
/// with the reason.
pub(crate) type Refused<'a, K, P> = (KafkaError, BaseRecord<'a, K, P, ()>);

/// A producer and the thread that polls it, stopped when it is dropped.
pub(crate) struct PolledProducer {
    producer: Arc<BaseProducer<Deliveries>>,
    stop: Arc<AtomicBool>,
}

impl PolledProducer {
    /// Creates the producer from `config` and starts its polling thread.
    pub(crate) fn new(config: &ClientConfig) -> KafkaResult<Self> {
        let producer: Arc<BaseProducer<Deliveries>> =
            Arc::new(config.create_with_context(Deliveries)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (polled, stopping) = (Arc::clone(&producer), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("kafka-producer-poll".to_owned())
            .spawn(move || {
                // The thread owns a handle: the producer lives until it
                // has seen the stop flag (within a second), not longer.
                while !stopping.load(Ordering::Relaxed) {
                    polled.poll(Duration::from_secs(1));
                }
            })
            .map_err(|e| KafkaError::ClientCreation(format!("producer polling thread: {e}")))?;
        Ok(Self { producer, stop })
    }

    /// Hands `record` to librdkafka; its delivery report completes the
    /// returned channel. A full queue gives the record back (as
    /// rust-rdkafka's producers do: it is retried at once, not kept).
    #[allow(clippy::result_large_err)]
    pub(crate) fn send<'a, K, P>(
        &self,
        record: BaseRecord<'a, K, P, ()>,
    ) -> Result<oneshot::Receiver<OwnedDeliveryResult>, Refused<'a, K, P>>
    where
        K: ToBytes + ?Sized,
        P: ToBytes + ?Sized,
    {
        let (done, report) = oneshot::channel();
        let record: PolledRecord<'a, K, P> = BaseRecord {
            topic: record.topic,
            partition: record.partition,
            payload: record.payload,
            key: record.key,
            timestamp: record.timestamp,
            headers: record.headers,
            delivery_opaque: Box::new(done),
        };
        self.producer
            .send(record)
            .map(|()| report)
            .map_err(|(e, r)| {
                let back = BaseRecord {
                    topic: r.topic,
                    partition: r.partition,
                    payload: r.payload,
                    key: r.key,
                    timestamp: r.timestamp,
                    headers: r.headers,
                    delivery_opaque: (),
                };
                (e, back)
            })
    }

    /// Waits up to `timeout` for librdkafka's queue to drain.
    pub(crate) fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        self.producer.flush(timeout)
    }

    /// The client, for metadata requests.
    pub(crate) fn client(&self) -> &Client<Deliveries> {
        self.producer.client()
    }
}

impl Drop for PolledProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
