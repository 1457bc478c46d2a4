//! The tenants' jobs on the simulated devices: arrivals, runs with idle
//! stretches, endings and retries, and who is asked whether a job may start.

use gpuledger_schemas::events::{AdmissionRequest, InventoryDevice, JobEvent, JobState};
use gpuledger_schemas::{Event, Timestamp};

use super::{FleetSpec, SimDevice, SplitMix64, TenantMix, envelope};

/// What became of a job's admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not asked anywhere: the request goes to the ledger with the job's
    /// events, and the job starts.
    Send,
    /// Asked and admitted (the one asked put the request in the ledger).
    Admitted,
    /// Asked and denied: the job does not start.
    Denied,
}

/// Who decides whether a simulated job may start, as a scheduler would ask.
pub trait Admit {
    fn admit(&mut self, request: &AdmissionRequest) -> Admission;
}

/// Nobody is asked: every request goes to the ledger and every job starts.
#[derive(Debug, Default)]
pub struct Unasked;

impl Admit for Unasked {
    fn admit(&mut self, _: &AdmissionRequest) -> Admission {
        Admission::Send
    }
}

/// A job holding one device.
#[derive(Debug, Clone)]
pub(super) struct SimJob {
    pub(super) tenant: String,
    pub(super) job_id: String,
    pub(super) attempt: i32,
    pub(super) pid: i64,
    /// Ticks until it ends, and how.
    pub(super) ticks_left: i64,
    pub(super) ran: i64,
    pub(super) ending: JobState,
    /// Ticks of the idle stretch it is in.
    pub(super) idle_for: i64,
    /// Its GPU fell off the bus: it hangs until its scheduler gives up on
    /// it, and is not retried there.
    pub(super) stranded: bool,
}

/// What one device's jobs do in one tick, and the ledger events they send.
pub(super) struct Jobs<'a> {
    pub(super) spec: &'a FleetSpec,
    pub(super) rng: &'a mut SplitMix64,
    pub(super) count: &'a mut u64,
    pub(super) node: &'a str,
    pub(super) pool: &'a str,
    pub(super) tenants: &'a TenantMix,
    pub(super) at: Timestamp,
    pub(super) out: &'a mut Vec<Event>,
    pub(super) admit: &'a mut dyn Admit,
}

impl Jobs<'_> {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next() % n.max(1)
    }

    /// A job ends, starts or runs on; the device's utilization follows.
    /// On a failed GPU only a stranded job's time runs out.
    pub(super) fn advance(&mut self, device: &mut SimDevice, gpu_failed: bool) {
        if gpu_failed {
            if let Some(job) = device.job.take_if(|j| {
                j.ticks_left -= 1;
                j.ticks_left <= 0
            }) {
                self.job_event(device, &job, job.ending);
            }
            return;
        }
        let minute = self.spec.ticks(1);
        if let Some(job) = device.job.as_mut() {
            job.ticks_left -= 1;
            job.ran += 1;
        }
        if let Some(job) = device.job.take_if(|j| j.ticks_left <= 0) {
            self.job_event(device, &job, job.ending);
            if job.ending == JobState::Failed && job.attempt < 3 && !job.stranded {
                // Retried at once on the same device.
                self.retry(device, job);
                return;
            }
            device.free_for = self.below(60) as i64 * minute;
        } else if device.job.is_none() {
            if device.free_for > 0 {
                device.free_for -= 1;
            } else {
                self.start(device);
            }
        }
        let idle_roll = self.below(100);
        let busy = 60.0 + self.below(39) as f32;
        match device.job.as_mut() {
            Some(job) => {
                if job.idle_for > 0 {
                    job.idle_for -= 1;
                } else if idle_roll < 2 {
                    job.idle_for = 1 + (idle_roll as i64 + 1) * 3 * minute;
                }
                if device.util.is_some() {
                    device.util = Some(if job.idle_for > 0 { 2.0 } else { busy });
                }
            }
            None => {
                if device.util.is_some() {
                    device.util = Some(0.0);
                }
            }
        }
    }

    /// The next attempt of a failed job takes the device: it idles a
    /// minute while it loads again, and runs as long as the failed attempt
    /// did, and a minute more.
    fn retry(&mut self, device: &mut SimDevice, failed: SimJob) {
        let minute = self.spec.ticks(1);
        let job = SimJob {
            attempt: failed.attempt + 1,
            ticks_left: failed.ran.max(1) + minute,
            ran: 0,
            ending: self.ending(),
            idle_for: minute,
            stranded: false,
            ..failed
        };
        self.begin(device, job);
    }

    /// A new job of a tenant picked at random, by weight, takes the device.
    fn start(&mut self, device: &mut SimDevice) {
        let roll = self.rng.next();
        let Some(tenant) = self.tenants.pick(roll).map(str::to_owned) else {
            return;
        };
        *self.count += 1;
        let minutes = if self.below(4) == 0 {
            60 + self.below(300) as i64
        } else {
            10 + self.below(50) as i64
        };
        let job = SimJob {
            job_id: format!("{tenant}-{:05}", *self.count),
            tenant,
            attempt: 1,
            pid: 10_000 + (*self.count % 50_000) as i64,
            ticks_left: self.spec.ticks(minutes),
            ran: 0,
            ending: self.ending(),
            idle_for: 0,
            stranded: false,
        };
        self.begin(device, job);
    }

    fn ending(&mut self) -> JobState {
        match self.below(100) {
            0..80 => JobState::Completed,
            80..92 => JobState::Failed,
            _ => JobState::Cancelled,
        }
    }

    /// The job's admission request, and, unless it is denied, its start:
    /// the device is its. A denied job leaves the device free for a while.
    fn begin(&mut self, device: &mut SimDevice, job: SimJob) {
        let inv = &device.inventory;
        let request_id = format!("{}-{}", job.job_id, job.attempt);
        let request = AdmissionRequest {
            pool: self.pool.into(),
            request_id: request_id.into(),
            job_id: job.job_id.as_str().into(),
            attempt: job.attempt,
            tenant: job.tenant.as_str().into(),
            slices: inv.slices,
            max_slices: inv.max_slices,
        };
        match self.admit.admit(&request) {
            Admission::Send => {
                let id = format!("admission-{}", request.request_id);
                let envelope = envelope(self.spec, self.node, id, self.at);
                self.out.push(Event::new(envelope, request));
            }
            Admission::Admitted => {}
            Admission::Denied => {
                device.free_for = self.spec.ticks(5 + self.below(25) as i64);
                return;
            }
        }
        self.job_event(device, &job, JobState::Started);
        device.job = Some(job);
    }

    fn job_event(&mut self, device: &SimDevice, job: &SimJob, state: JobState) {
        let event = job_event(
            self.spec,
            self.pool,
            self.node,
            self.at,
            &device.inventory,
            job,
            state,
        );
        self.out.push(event);
    }
}

/// A `JobEvent` of `job` on `device`: `started` names the device; a
/// completed attempt reports its work in `steps`.
fn job_event(
    spec: &FleetSpec,
    pool: &str,
    node: &str,
    at: Timestamp,
    device: &InventoryDevice,
    job: &SimJob,
    state: JobState,
) -> Event {
    let completed = state == JobState::Completed;
    Event::new(
        envelope(
            spec,
            node,
            format!("{}-{}-{state}", job.job_id, job.attempt),
            at,
        ),
        JobEvent {
            pool: pool.into(),
            job_id: job.job_id.as_str().into(),
            attempt: job.attempt,
            tenant: job.tenant.as_str().into(),
            user: None,
            node: Some(node.to_owned()),
            state,
            devices: (state == JobState::Started).then(|| vec![device.device_uuid.clone()]),
            requested_slices: None,
            requested_max_slices: None,
            work_units: completed.then(|| gpuledger_schemas::Decimal::from(job.ran * 10)),
            work_unit_name: completed.then(|| "steps".to_owned()),
            exit_code: match state {
                JobState::Completed => Some(0),
                JobState::Failed => Some(1),
                _ => None,
            },
            reason: None,
        },
    )
}
