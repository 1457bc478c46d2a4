//! The guard against producers that write to the ledger topic without the
//! control API (`--ledger-max-ahead-s`, docs/security.md).

use std::time::Duration;

use gpuledger_schemas::{Event, Timestamp};

use crate::ledger::Rejection;

/// Why `event` is refused for being more than `max_ahead` after its
/// record's Kafka timestamp (`appended`, ms since the epoch), if it is.
/// A function of the record alone, so a replay refuses the same events.
pub(super) fn too_far_ahead(
    event: &Event,
    appended: Option<i64>,
    max_ahead: Option<Duration>,
) -> Option<Rejection> {
    let (max_ahead, appended) = (max_ahead?, appended?);
    let at = event.envelope.event_time;
    let limit = Timestamp::from_micros(appended.saturating_mul(1_000))
        .plus_micros(i64::try_from(max_ahead.as_micros()).unwrap_or(i64::MAX));
    (at > limit).then(|| Rejection::TooFarAhead {
        at,
        max_ahead_s: max_ahead.as_secs(),
        appended: Timestamp::from_micros(appended.saturating_mul(1_000)),
    })
}
