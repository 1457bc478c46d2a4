//! A direct reader of `GpuSample` datums written with the released v1
//! schema. The telemetry topic carries far more samples than anything
//! else, and the generic reader builds a tree of named values for every
//! record before the event is made from it; this one reads the fields in
//! schema order straight into the event.
//!
//! It answers only when the whole datum reads cleanly. Anything else — a
//! truncated record, a union branch that does not exist, a string that is
//! not UTF-8, an int out of range, bytes left over — is left to the
//! generic reader, so a bad record gets the same error whichever path it
//! took, and a good one the same event (a unit test compares the two on
//! every sample it can make and on corrupted copies).

use crate::events::GpuSample;
use crate::{Envelope, Event, Timestamp};

/// The event in `datum` (the bytes after the single-object header), if it
/// is a well-formed v1 `GpuSample`.
pub(crate) fn read(datum: &[u8]) -> Option<Event> {
    let mut d = Datum { rest: datum };
    let envelope = Envelope {
        event_id: d.string()?,
        event_time: Timestamp::from_micros(d.long()?),
        source: d.string()?,
        cluster: d.string()?,
    };
    let sample = GpuSample {
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
    d.rest.is_empty().then(|| Event::new(envelope, sample))
}

/// The bytes of a datum not read yet.
struct Datum<'a> {
    rest: &'a [u8],
}

impl Datum<'_> {
    /// A zig-zag varint `long` (at most 10 bytes).
    fn long(&mut self) -> Option<i64> {
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
    fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.long()?).ok()?;
        let (bytes, rest) = self.rest.split_at_checked(len)?;
        self.rest = rest;
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }

    /// A `["null", T]` union: branch 0 is null, branch 1 is `T`.
    fn optional<T>(&mut self, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        match self.long()? {
            0 => Some(None),
            1 => read(self).map(Some),
            _ => None,
        }
    }

    /// An array of `long`s: blocks of items, a negative count followed by
    /// the block's size in bytes, ended by an empty block.
    fn longs(&mut self) -> Option<Vec<i64>> {
        let mut out = Vec::new();
        loop {
            let count = self.long()?;
            if count == 0 {
                return Some(out);
            }
            if count < 0 {
                self.long()?;
            }
            let count = usize::try_from(count.unsigned_abs()).ok()?;
            // Every item takes a byte at least: a count beyond what is left
            // cannot be honest, and must not size an allocation.
            if count > self.rest.len() {
                return None;
            }
            out.reserve(count);
            for _ in 0..count {
                out.push(self.long()?);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                event_id: format!("collector/n1:{variant}"),
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
            assert_eq!(read(&bytes[HEADER_LEN..]).as_ref(), Some(&event));
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
                if let Some(direct) = read(&damaged[HEADER_LEN..]) {
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
