//! `GpuSample` records read in place. The telemetry topic carries far
//! more samples than anything else, and the generic Avro reader builds a
//! tree of named values, then an event of owned strings, for every record;
//! this reader walks a datum written with the released v1 schema field by
//! field and borrows its text from the message, so a sample reaches the
//! `samples` columns without a single allocation.
//!
//! It answers only when the whole datum reads cleanly. Anything else — a
//! truncated record, a union branch that does not exist, a string that is
//! not UTF-8, an int out of range, bytes left over — is left to the
//! generic reader, so a bad record gets the same error whichever path it
//! took, and a good one the same event (a unit test compares the two on
//! every sample it can make and on corrupted copies).

use crate::events::GpuSample;
use crate::{Envelope, Event, Timestamp};

/// A `GpuSample` event with its text borrowed: from a message, as
/// [`crate::Codec::read_sample`] reads it, or from an owned event
/// ([`SampleRecord::of`]). The one shape the `samples` columns and the
/// sample rules of validation take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleRecord<'a> {
    pub event_id: &'a str,
    pub event_time: Timestamp,
    pub source: &'a str,
    pub cluster: &'a str,
    pub node: &'a str,
    pub pool: &'a str,
    pub device_uuid: &'a str,
    pub parent_gpu_uuid: Option<&'a str>,
    pub model: &'a str,
    pub mig_profile: Option<&'a str>,
    pub slices: i32,
    pub max_slices: i32,
    pub sm_util_pct: Option<f32>,
    pub mem_util_pct: Option<f32>,
    pub mem_used_bytes: i64,
    pub mem_total_bytes: i64,
    pub power_mw: Option<i64>,
    pub energy_mj: Option<i64>,
    pub temp_c: Option<i32>,
    pub pids: Pids<'a>,
    pub job_id: Option<&'a str>,
    pub tenant: Option<&'a str>,
    pub interval_ms: i32,
    pub seq: i64,
}

/// A sample's process ids: still Avro-encoded in the message (already
/// checked to read cleanly), or an owned event's list.
#[derive(Debug, Clone, Copy)]
pub enum Pids<'a> {
    /// The array's encoded blocks, ending with the empty block.
    Encoded(&'a [u8]),
    Decoded(&'a [i64]),
}

impl PartialEq for Pids<'_> {
    /// The same ids in the same order, however they are held.
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Pids<'_> {
    /// The ids in order.
    pub fn iter(&self) -> impl Iterator<Item = i64> + '_ {
        let (encoded, decoded) = match *self {
            Pids::Encoded(bytes) => (Some(PidBlocks::new(bytes)), None),
            Pids::Decoded(values) => (None, Some(values.iter().copied())),
        };
        encoded
            .into_iter()
            .flatten()
            .chain(decoded.into_iter().flatten())
    }
}

/// Walks the blocks of an encoded `long` array that was checked whole.
struct PidBlocks<'a> {
    datum: Datum<'a>,
    left_in_block: u64,
}

impl<'a> PidBlocks<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self {
            datum: Datum { rest: bytes },
            left_in_block: 0,
        }
    }
}

impl Iterator for PidBlocks<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        while self.left_in_block == 0 {
            let count = self.datum.long()?;
            if count == 0 {
                return None;
            }
            if count < 0 {
                self.datum.long()?;
            }
            self.left_in_block = count.unsigned_abs();
        }
        self.left_in_block -= 1;
        self.datum.long()
    }
}

impl<'a> SampleRecord<'a> {
    /// An owned sample event, borrowed.
    pub fn of(envelope: &'a Envelope, s: &'a GpuSample) -> Self {
        Self {
            event_id: &envelope.event_id,
            event_time: envelope.event_time,
            source: &envelope.source,
            cluster: &envelope.cluster,
            node: &s.node,
            pool: &s.pool,
            device_uuid: &s.device_uuid,
            parent_gpu_uuid: s.parent_gpu_uuid.as_deref(),
            model: &s.model,
            mig_profile: s.mig_profile.as_deref(),
            slices: s.slices,
            max_slices: s.max_slices,
            sm_util_pct: s.sm_util_pct,
            mem_util_pct: s.mem_util_pct,
            mem_used_bytes: s.mem_used_bytes,
            mem_total_bytes: s.mem_total_bytes,
            power_mw: s.power_mw,
            energy_mj: s.energy_mj,
            temp_c: s.temp_c,
            pids: Pids::Decoded(&s.pids),
            job_id: s.job_id.as_deref(),
            tenant: s.tenant.as_deref(),
            interval_ms: s.interval_ms,
            seq: s.seq,
        }
    }

    /// The record as an owned event.
    pub fn to_event(&self) -> Event {
        let owned = |s: Option<&str>| s.map(str::to_owned);
        let envelope = Envelope {
            event_id: self.event_id.into(),
            event_time: self.event_time,
            source: self.source.into(),
            cluster: self.cluster.into(),
        };
        let sample = GpuSample {
            node: self.node.to_owned(),
            pool: self.pool.to_owned(),
            device_uuid: self.device_uuid.to_owned(),
            parent_gpu_uuid: owned(self.parent_gpu_uuid),
            model: self.model.to_owned(),
            mig_profile: owned(self.mig_profile),
            slices: self.slices,
            max_slices: self.max_slices,
            sm_util_pct: self.sm_util_pct,
            mem_util_pct: self.mem_util_pct,
            mem_used_bytes: self.mem_used_bytes,
            mem_total_bytes: self.mem_total_bytes,
            power_mw: self.power_mw,
            energy_mj: self.energy_mj,
            temp_c: self.temp_c,
            pids: self.pids.iter().collect(),
            job_id: owned(self.job_id),
            tenant: owned(self.tenant),
            interval_ms: self.interval_ms,
            seq: self.seq,
        };
        Event::new(envelope, sample)
    }
}

/// The record in `datum` (the bytes after the single-object header), if
/// it is a well-formed v1 `GpuSample`.
pub(crate) fn read(datum: &[u8]) -> Option<SampleRecord<'_>> {
    let mut d = Datum { rest: datum };
    let record = SampleRecord {
        event_id: d.string()?,
        event_time: Timestamp::from_micros(d.long()?),
        source: d.string()?,
        cluster: d.string()?,
        node: d.string()?,
        pool: d.string()?,
        device_uuid: d.string()?,
        parent_gpu_uuid: d.optional(Datum::string)?,
        model: d.string()?,
        mig_profile: d.optional(Datum::string)?,
        slices: d.int()?,
        max_slices: d.int()?,
        sm_util_pct: d.optional(Datum::float)?,
        mem_util_pct: d.optional(Datum::float)?,
        mem_used_bytes: d.long()?,
        mem_total_bytes: d.long()?,
        power_mw: d.optional(Datum::long)?,
        energy_mj: d.optional(Datum::long)?,
        temp_c: d.optional(Datum::int)?,
        pids: d.longs()?,
        job_id: d.optional(Datum::string)?,
        tenant: d.optional(Datum::string)?,
        interval_ms: d.int()?,
        seq: d.long()?,
    };
    d.rest.is_empty().then_some(record)
}

/// The bytes of a datum not read yet.
struct Datum<'a> {
    rest: &'a [u8],
}

impl<'a> Datum<'a> {
    /// A zig-zag varint `long` (at most 10 bytes).
    #[inline]
    fn long(&mut self) -> Option<i64> {
        // Most fields are one byte: lengths, union branches, small counts.
        if let Some((&byte, rest)) = self.rest.split_first()
            && byte < 0x80
        {
            self.rest = rest;
            let value = u64::from(byte);
            return Some((value >> 1) as i64 ^ -((value & 1) as i64));
        }
        self.long_of_many_bytes()
    }

    /// [`Datum::long`] past its first byte.
    #[inline(never)]
    fn long_of_many_bytes(&mut self) -> Option<i64> {
        let mut value: u64 = 0;
        for (i, &byte) in self.rest.iter().enumerate().take(10) {
            // The tenth byte holds the 64th bit only.
            if i == 9 && byte > 1 {
                return None;
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.rest = &self.rest[i + 1..];
                return Some((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        None
    }

    /// An `int`: a `long` that fits 32 bits.
    fn int(&mut self) -> Option<i32> {
        i32::try_from(self.long()?).ok()
    }

    /// A `float`: four bytes, little-endian.
    fn float(&mut self) -> Option<f32> {
        let (bytes, rest) = self.rest.split_first_chunk::<4>()?;
        self.rest = rest;
        Some(f32::from_le_bytes(*bytes))
    }

    /// A `string`: its length, then UTF-8.
    #[inline]
    fn string(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.long()?).ok()?;
        let (bytes, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        // Nearly every text here is ASCII, which is checked faster.
        if bytes.is_ascii() {
            // SAFETY: ASCII is UTF-8.
            return Some(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        std::str::from_utf8(bytes).ok()
    }

    /// A `["null", T]` union: branch 0 is null, branch 1 is `T`.
    #[inline]
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.long()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }

    /// An array of `long`s, checked whole and kept encoded: blocks of
    /// items (a negative count is followed by the block's size in bytes),
    /// ended by an empty block.
    fn longs(&mut self) -> Option<Pids<'a>> {
        let start = self.rest;
        loop {
            let count = self.long()?;
            if count == 0 {
                let used = start.len() - self.rest.len();
                return Some(Pids::Encoded(&start[..used]));
            }
            if count < 0 {
                self.long()?;
            }
            // Every item takes a byte at least: a count beyond what is left
            // cannot be honest.
            let count = usize::try_from(count.unsigned_abs()).ok()?;
            if count > self.rest.len() {
                return None;
            }
            for _ in 0..count {
                self.long()?;
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventBody;
    use crate::wire::{Codec, HEADER_LEN};

    /// Samples with every optional field set and unset, MIG and whole,
    /// empty and long pid lists, extreme numbers and non-ASCII text.
    fn samples() -> Vec<Event> {
        let mut out = Vec::new();
        for variant in 0..64u32 {
            let on = |bit: u32| variant & (1 << bit) != 0;
            let sample = GpuSample {
                node: "h200-n01".into(),
                pool: "h200".into(),
                device_uuid: format!("MIG-{variant}"),
                parent_gpu_uuid: on(0).then(|| "GPU-0".to_owned()),
                model: "NVIDIA H200".into(),
                mig_profile: on(0).then(|| "1g.18gb".to_owned()),
                slices: if on(0) { 1 } else { 7 },
                max_slices: 7,
                sm_util_pct: on(1).then_some(55.5),
                mem_util_pct: on(1).then_some(0.0),
                mem_used_bytes: i64::from(variant) * 1_000_000_007,
                mem_total_bytes: i64::MAX,
                power_mw: on(2).then_some(400_000),
                energy_mj: on(2).then_some(i64::MAX - 1),
                temp_c: on(3).then_some(-5),
                pids: if on(4) {
                    (0..300).collect()
                } else {
                    Vec::new()
                },
                job_id: on(5).then(|| "pod-übung".to_owned()),
                tenant: on(5).then(|| "team-llm".to_owned()),
                interval_ms: 10_000,
                seq: i64::MIN + i64::from(variant),
            };
            let envelope = Envelope {
                event_id: format!("collector/n1:{variant}").into(),
                event_time: Timestamp::from_micros(1_793_491_200_000_000 + i64::from(variant)),
                source: "collector/n1".into(),
                cluster: "c".into(),
            };
            out.push(Event::new(envelope, sample));
        }
        out
    }

    #[test]
    fn reads_every_sample_as_the_generic_reader_does() {
        let codec = Codec::builtin();
        for event in samples() {
            let bytes = codec.encode(&event).unwrap();
            let record = read(&bytes[HEADER_LEN..]).unwrap();
            assert_eq!(record.to_event(), event);
            let EventBody::GpuSample(sample) = &event.body else {
                unreachable!()
            };
            assert_eq!(record, SampleRecord::of(&event.envelope, sample));
            assert_eq!(codec.decode(&bytes).unwrap(), event);
            assert_eq!(codec.decode_generic(&bytes).unwrap(), event);
        }
    }

    #[test]
    fn leaves_every_damaged_sample_to_the_generic_reader() {
        let codec = Codec::builtin();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            state >> 33
        };
        for event in samples() {
            let bytes = codec.encode(&event).unwrap();
            // Every truncation: never read as a sample.
            for len in HEADER_LEN..bytes.len() {
                assert_eq!(read(&bytes[HEADER_LEN..len]), None, "cut at {len}");
            }
            // Bytes overwritten at random: whenever this reader answers,
            // the generic one answers the same.
            for _ in 0..200 {
                let mut damaged = bytes.clone();
                for _ in 0..1 + next() % 3 {
                    let at = HEADER_LEN + (next() as usize) % (bytes.len() - HEADER_LEN);
                    damaged[at] = next() as u8;
                }
                // Compared as written again: a damaged float may be NaN.
                let written = |e: crate::Result<Event>| {
                    e.map(|e| codec.encode(&e).unwrap())
                        .map_err(|e| e.to_string())
                };
                if let Some(direct) = read(&damaged[HEADER_LEN..]).map(|r| r.to_event()) {
                    assert_eq!(written(codec.decode_generic(&damaged)), written(Ok(direct)));
                }
                assert_eq!(
                    written(codec.decode(&damaged)),
                    written(codec.decode_generic(&damaged))
                );
            }
        }
    }
}
