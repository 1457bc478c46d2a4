//! Records of a consumer's partitions read many at a time.
//!
//! rust-rdkafka's `BaseConsumer::poll` returns one record per call, and
//! every call pays for the queue's wake-up machinery: two clock reads in
//! librdkafka and one in the wrapper, a lock, an event made and destroyed.
//! At a million small records a second that was a tenth of the telemetry
//! writer's time. librdkafka's `rd_kafka_consume_batch_queue` takes up to a
//! buffer's worth of records from a queue under that machinery once, so a
//! [`BatchReader`] routes the fetched records of a topic's partitions into
//! a queue of its own and reads them in batches.
//!
//! Only records go that way. The consumer's own queue keeps everything
//! else — rebalances, errors, offset commits — and must still be polled
//! with `BaseConsumer::poll`; a record that arrives there (from a
//! partition created after the reader was made) is routed from then on by
//! [`BatchReader::route`].
//!
//! A rebalance undoes the routing: librdkafka clears a partition queue's
//! forwarding when it stops fetching the partition, and, the queue being
//! the application's, does not forward it anywhere when it starts again,
//! so the partition's records would pile up unread. Every read therefore
//! forwards each routed queue again first (a few locks per partition, once
//! per batch); records that piled up meanwhile move over in order.

use std::ffi::{CStr, CString, c_void};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, Headers, Message, Timestamp};
use rdkafka::types::RDKafkaErrorCode;

use crate::{Error, Result};

/// Records read per call at most.
const BATCH: usize = 1024;

/// A topic's records, read in batches from a queue they are routed to.
pub(crate) struct BatchReader {
    consumer: Arc<BaseConsumer>,
    topic: String,
    /// The queue records are routed to (owned: destroyed on drop).
    queue: *mut rdsys::rd_kafka_queue_t,
    /// The partitions' own queues, kept forwarded to `queue`.
    routed: Vec<(i32, *mut rdsys::rd_kafka_queue_t)>,
    /// Where a batch's records are put by librdkafka.
    buffer: Vec<*mut rdsys::rd_kafka_message_t>,
}

// SAFETY: librdkafka's queue and message handles may be used from any
// thread; the reader hands out records only for the duration of a call on
// `&mut self`.
unsafe impl Send for BatchReader {}

impl BatchReader {
    /// A reader for `topic` whose records of `partitions` are routed to it.
    pub(crate) fn new(
        consumer: Arc<BaseConsumer>,
        topic: &str,
        partitions: &[i32],
    ) -> Result<Self> {
        // SAFETY: the client pointer is valid while `consumer` lives, which
        // the reader holds.
        let queue = unsafe { rdsys::rd_kafka_queue_new(consumer.client().native_ptr()) };
        if queue.is_null() {
            return Err(Error::Consumer("librdkafka could not make a queue".into()));
        }
        let mut reader = BatchReader {
            consumer,
            topic: topic.to_owned(),
            queue,
            routed: Vec::new(),
            buffer: vec![std::ptr::null_mut(); BATCH],
        };
        for &partition in partitions {
            reader.route(partition)?;
        }
        Ok(reader)
    }

    /// Routes the records of `partition` to this reader from now on.
    pub(crate) fn route(&mut self, partition: i32) -> Result<()> {
        if self.routed.iter().any(|&(p, _)| p == partition) {
            return Ok(());
        }
        let topic = CString::new(self.topic.as_str())
            .map_err(|_| Error::Consumer(format!("topic {:?} holds a NUL byte", self.topic)))?;
        // SAFETY: valid client and C string; the returned handle is owned
        // and destroyed on drop.
        let source = unsafe {
            rdsys::rd_kafka_queue_get_partition(
                self.consumer.client().native_ptr(),
                topic.as_ptr(),
                partition,
            )
        };
        if source.is_null() {
            return Err(Error::Consumer(format!(
                "librdkafka has no queue for partition {partition} of {}",
                self.topic
            )));
        }
        // SAFETY: both handles are valid.
        unsafe { rdsys::rd_kafka_queue_forward(source, self.queue) };
        self.routed.push((partition, source));
        Ok(())
    }

    /// Waits up to `timeout` for records, then hands each one at hand (up
    /// to a batch) to `each`, in order; returns how many there were. A
    /// consumption error comes as a record whose [`Record::error`] is set.
    /// The first error `each` returns ends the call; the batch's records
    /// are released either way.
    pub(crate) fn read(
        &mut self,
        timeout: Duration,
        mut each: impl FnMut(&Record<'_>) -> Result<()>,
    ) -> Result<usize> {
        for &(_, source) in &self.routed {
            // SAFETY: both handles are valid.
            unsafe { rdsys::rd_kafka_queue_forward(source, self.queue) };
        }
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `buffer` has room for `BATCH` pointers, which librdkafka
        // fills with messages we then own.
        let count = unsafe {
            rdsys::rd_kafka_consume_batch_queue(
                self.queue,
                timeout_ms,
                self.buffer.as_mut_ptr(),
                self.buffer.len(),
            )
        };
        let count = usize::try_from(count).unwrap_or(0);
        let mut result = Ok(count);
        for &message in &self.buffer[..count] {
            if result.is_ok() {
                // SAFETY: librdkafka returned a valid message, alive until
                // it is destroyed below.
                let record = Record {
                    message: unsafe { &*message },
                    topic: &self.topic,
                };
                if let Err(e) = each(&record) {
                    result = Err(e);
                }
            }
            // SAFETY: each message is destroyed once, after its last use.
            unsafe { rdsys::rd_kafka_message_destroy(message) };
        }
        result
    }
}

impl Drop for BatchReader {
    fn drop(&mut self) {
        for &(_, source) in &self.routed {
            // SAFETY: handles made by `route`, destroyed once. Forwarding
            // is left as it is: the consumer is going away with the reader.
            unsafe { rdsys::rd_kafka_queue_destroy(source) };
        }
        // SAFETY: made in `new`, destroyed once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue) };
    }
}

/// One record of a batch, borrowed from librdkafka.
pub(crate) struct Record<'a> {
    message: &'a rdsys::rd_kafka_message_t,
    topic: &'a str,
}

impl Record<'_> {
    /// The consumption error this entry reports instead of a record.
    pub(crate) fn error(&self) -> Option<KafkaError> {
        let code = self.message.err;
        (code != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR)
            .then(|| KafkaError::MessageConsumption(RDKafkaErrorCode::from(code)))
    }

    /// Whether this entry says its partition was read to its end (with
    /// `enable.partition.eof`) rather than carrying a record.
    pub(crate) fn is_partition_end(&self) -> bool {
        self.message.err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF
    }

    fn bytes(&self, data: *mut c_void, len: usize) -> Option<&[u8]> {
        // SAFETY: librdkafka's pointer and length describe bytes the
        // message owns for as long as it is borrowed.
        (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data as *const u8, len) })
    }
}

impl Message for Record<'_> {
    type Headers = RecordHeaders;

    fn key(&self) -> Option<&[u8]> {
        self.bytes(self.message.key, self.message.key_len)
    }

    fn payload(&self) -> Option<&[u8]> {
        self.bytes(self.message.payload, self.message.len)
    }

    unsafe fn payload_mut(&mut self) -> Option<&mut [u8]> {
        // Records are read, never changed in place.
        None
    }

    fn topic(&self) -> &str {
        self.topic
    }

    fn partition(&self) -> i32 {
        self.message.partition
    }

    fn offset(&self) -> i64 {
        self.message.offset
    }

    fn timestamp(&self) -> Timestamp {
        use rdsys::rd_kafka_timestamp_type_t as Kind;
        let mut kind = Kind::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a valid message; librdkafka only reads it.
        let millis = unsafe {
            rdsys::rd_kafka_message_timestamp(
                std::ptr::from_ref(self.message).cast_mut(),
                &mut kind,
            )
        };
        match kind {
            _ if millis == -1 => Timestamp::NotAvailable,
            Kind::RD_KAFKA_TIMESTAMP_CREATE_TIME => Timestamp::CreateTime(millis),
            Kind::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => Timestamp::LogAppendTime(millis),
            Kind::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => Timestamp::NotAvailable,
        }
    }

    fn headers(&self) -> Option<&RecordHeaders> {
        let mut headers = std::ptr::null_mut();
        // SAFETY: a valid message; the headers stay owned by it.
        let code = unsafe {
            rdsys::rd_kafka_message_headers(std::ptr::from_ref(self.message), &mut headers)
        };
        (code == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !headers.is_null())
            // SAFETY: `RecordHeaders` has no size; a reference to it is the
            // headers' address, valid while the record is borrowed.
            .then(|| unsafe { &*(headers as *const RecordHeaders) })
    }
}

/// A record's headers, read in place (a reference to this is librdkafka's
/// headers handle).
pub(crate) struct RecordHeaders {
    _private: [u8; 0],
}

impl RecordHeaders {
    fn handle(&self) -> *const rdsys::rd_kafka_headers_t {
        std::ptr::from_ref(self).cast()
    }
}

impl Headers for RecordHeaders {
    fn count(&self) -> usize {
        // SAFETY: a valid headers handle.
        unsafe { rdsys::rd_kafka_header_cnt(self.handle()) }
    }

    fn try_get(&self, idx: usize) -> Option<Header<'_, &[u8]>> {
        let mut name = std::ptr::null();
        let mut value = std::ptr::null();
        let mut len = 0;
        // SAFETY: a valid headers handle; librdkafka points into memory it
        // owns for as long as the headers live.
        let code = unsafe {
            rdsys::rd_kafka_header_get_all(self.handle(), idx, &mut name, &mut value, &mut len)
        };
        if code != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return None;
        }
        Some(Header {
            // SAFETY: a NUL-terminated name, see above.
            key: unsafe { CStr::from_ptr(name) }.to_str().ok()?,
            value: (!value.is_null())
                // SAFETY: `len` bytes at `value`, see above.
                .then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }),
        })
    }
}
