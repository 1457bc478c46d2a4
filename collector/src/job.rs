//! `gpuledger-collector job start|end`: job lifecycle events from a
//! scheduler's hooks (Slurm prolog and epilog, CI runners). The event id is
//! derived from the job, the attempt and the state, so a retried hook is a
//! duplicate the ledger ignores.

use clap::{Args, ValueEnum};
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_schemas::events::{JobEvent, JobState};
use gpuledger_schemas::{Decimal, Envelope, Event, Timestamp};

/// Fields both `start` and `end` carry: the attempt and where it runs.
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    #[arg(long, env = "GPULEDGER_CLUSTER", default_value = "local")]
    pub cluster: String,
    #[arg(long, env = "GPULEDGER_POOL")]
    pub pool: String,
    #[arg(long)]
    pub job_id: String,
    /// 1 for the first run, 2 for the first retry, …
    #[arg(long, default_value_t = 1)]
    pub attempt: i32,
    #[arg(long)]
    pub tenant: String,
    #[arg(long)]
    pub user: Option<String>,
    #[arg(long)]
    pub node: Option<String>,
    /// When it happened (RFC 3339); default now.
    #[arg(long)]
    pub at: Option<Timestamp>,
    /// Who emits it (goes to the event's `source`).
    #[arg(long, default_value = "gpuledger-collector")]
    pub source: String,
}

/// What `started` adds: where it runs, or how much it asked for.
#[derive(Debug, Clone, Default, Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Start {
    /// A device the job runs on (repeatable): GPU or MIG UUID.
    #[arg(long = "device")]
    #[serde(default)]
    pub devices: Vec<String>,
    #[arg(long, requires = "requested_max_slices")]
    pub requested_slices: Option<i32>,
    #[arg(long, requires = "requested_slices")]
    pub requested_max_slices: Option<i32>,
}

/// `job start`.
#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,
    #[command(flatten)]
    pub job: JobArgs,
    #[command(flatten)]
    pub start: Start,
}

/// How the attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndState {
    Completed,
    Failed,
    Cancelled,
    Preempted,
}

/// What the terminal event says: the state, or the exit status that
/// decides it, and what the attempt achieved.
#[derive(Debug, Clone, Default, Args, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// The end state; without it, `--exit` decides.
    #[arg(long, value_enum)]
    pub state: Option<EndState>,
    /// Exit status as `CODE` or Slurm's `CODE:SIGNAL` (`SLURM_JOB_EXIT_CODE2`).
    #[arg(long)]
    pub exit: Option<String>,
    #[arg(long)]
    pub work_units: Option<Decimal>,
    #[arg(long)]
    pub work_unit_name: Option<String>,
    #[arg(long)]
    pub reason: Option<String>,
}

/// `job end`.
#[derive(Debug, Clone, Args)]
pub struct EndArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,
    #[command(flatten)]
    pub job: JobArgs,
    #[command(flatten)]
    pub end: End,
}

/// The end state an exit status means: `0` (or `0:0`) completed; a signal
/// with exit 0 (`0:15`, `0:9` — scancel, a time limit) cancelled; anything
/// else failed. Returns the state and the exit code to record.
pub fn state_from_exit(exit: &str) -> Result<(JobState, i32), String> {
    let bad = || format!("exit status {exit:?} is not CODE or CODE:SIGNAL");
    let (code, signal) = match exit.split_once(':') {
        Some((c, s)) => (
            c.trim().parse::<i32>().map_err(|_| bad())?,
            s.trim().parse::<i32>().map_err(|_| bad())?,
        ),
        None => (exit.trim().parse::<i32>().map_err(|_| bad())?, 0),
    };
    let state = match (code, signal) {
        (0, 0) => JobState::Completed,
        (0, _) => JobState::Cancelled,
        _ => JobState::Failed,
    };
    Ok((state, code))
}

fn event(job: &JobArgs, state: JobState, fill: impl FnOnce(&mut JobEvent)) -> Event {
    let mut body = JobEvent {
        pool: job.pool.as_str().into(),
        job_id: job.job_id.as_str().into(),
        attempt: job.attempt,
        tenant: job.tenant.as_str().into(),
        user: job.user.clone(),
        node: job.node.clone(),
        state,
        devices: None,
        requested_slices: None,
        requested_max_slices: None,
        work_units: None,
        work_unit_name: None,
        exit_code: None,
        reason: None,
    };
    fill(&mut body);
    let node = job
        .node
        .as_deref()
        .map(|n| format!("-{n}"))
        .unwrap_or_default();
    Event::new(
        Envelope {
            event_id: format!("{}-{}-{}{node}", job.job_id, job.attempt, state).into(),
            event_time: job.at.unwrap_or_else(Timestamp::now),
            source: job.source.as_str().into(),
            cluster: job.cluster.as_str().into(),
        },
        body,
    )
}

/// The `started` event of the attempt `job`.
pub fn start_event(job: &JobArgs, start: &Start) -> Event {
    event(job, JobState::Started, |e| {
        e.devices = (!start.devices.is_empty()).then(|| start.devices.clone());
        e.requested_slices = start.requested_slices;
        e.requested_max_slices = start.requested_max_slices;
    })
}

/// The terminal event of the attempt `job`.
pub fn end_event(job: &JobArgs, end: &End) -> Result<Event, String> {
    let (from_exit, code) = match &end.exit {
        Some(exit) => {
            let (state, code) = state_from_exit(exit)?;
            (Some(state), Some(code))
        }
        None => (None, None),
    };
    let state = match (end.state, from_exit) {
        (Some(EndState::Completed), _) => JobState::Completed,
        (Some(EndState::Failed), _) => JobState::Failed,
        (Some(EndState::Cancelled), _) => JobState::Cancelled,
        (Some(EndState::Preempted), _) => JobState::Preempted,
        (None, Some(state)) => state,
        (None, None) => return Err("give the end state, or the exit status".to_owned()),
    };
    Ok(event(job, state, |e| {
        e.exit_code = code;
        e.work_units = end.work_units.clone();
        e.work_unit_name = end.work_unit_name.clone();
        e.reason = end.reason.clone();
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_map_to_end_states() {
        assert_eq!(state_from_exit("0"), Ok((JobState::Completed, 0)));
        assert_eq!(state_from_exit("0:0"), Ok((JobState::Completed, 0)));
        assert_eq!(state_from_exit("1:0"), Ok((JobState::Failed, 1)));
        assert_eq!(state_from_exit("137"), Ok((JobState::Failed, 137)));
        assert_eq!(state_from_exit("0:15"), Ok((JobState::Cancelled, 0)));
        assert_eq!(state_from_exit("0:9"), Ok((JobState::Cancelled, 0)));
        assert!(state_from_exit("boom").is_err());
        assert!(state_from_exit("1:x").is_err());
    }
}
