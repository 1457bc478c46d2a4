//! Job lifecycle from what the node sees, for Kubernetes pods that no
//! scheduler reports (`run --observe-pods`). NVML shows which processes run
//! on which device and attribution names their pod; from that alone:
//!
//! - a pod (a process in a pod's cgroup; its job is named `namespace/name`
//!   where the pod is known, `pod-<uid>` otherwise) seen on a GPU for the
//!   first time has `started`, with the devices
//!   it is on and the tenant of its namespace (a pod whose tenant is not
//!   known is left out: the ledger meters its samples as unmetered use);
//! - a pod seen on no GPU for [`GONE_AFTER`] rounds in a row has a terminal
//!   event, `completed`: the node cannot see an exit status, so the reason
//!   says the state was observed, not reported;
//! - a pod that comes back after that is a new attempt.
//!
//! The event ids are those of `job start|end` (job, attempt, state, node),
//! so a collector restarted while a pod runs repeats its `started`, which
//! the ledger ignores as a duplicate.

use std::collections::{BTreeMap, BTreeSet};

use gpuledger_schemas::{Event, Timestamp};

use crate::job::{End, EndState, JobArgs, Start, end_event, start_event};
use crate::nvml::{Holders, NodeContext};

/// Rounds a pod must be missing from every GPU before it is over: a pod
/// between two steps may hold no GPU process for a moment.
pub const GONE_AFTER: u32 = 3;

/// What is known of one pod on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pod {
    tenant: String,
    attempt: i32,
    /// Rounds in a row it was seen on no device (0 while it runs).
    missing: u32,
    running: bool,
}

/// The pods this node has seen.
#[derive(Debug, Default)]
pub struct PodJobs {
    pods: BTreeMap<String, Pod>,
}

impl PodJobs {
    /// The job events one round's holders imply.
    pub fn observe(&mut self, ctx: &NodeContext, holders: &Holders, at: Timestamp) -> Vec<Event> {
        // Each pod with a known tenant, and the devices it is on now.
        let mut now: BTreeMap<&str, (&str, BTreeSet<&str>)> = BTreeMap::new();
        for (device, holder) in holders {
            let (Some(job), Some(tenant), Some(_)) = (
                holder.job_id.as_deref(),
                holder.tenant.as_deref(),
                holder.pod_uid.as_deref(),
            ) else {
                continue;
            };
            now.entry(job)
                .or_insert_with(|| (tenant, BTreeSet::new()))
                .1
                .insert(device);
        }
        let args = |job: &str, pod: &Pod| JobArgs {
            cluster: ctx.cluster.clone(),
            pool: ctx.pool.clone(),
            job_id: job.to_owned(),
            attempt: pod.attempt,
            tenant: pod.tenant.clone(),
            user: None,
            node: Some(ctx.node.clone()),
            at: Some(at),
            source: ctx.source.clone(),
        };
        let mut out = Vec::new();
        for (job, (tenant, devices)) in &now {
            let pod = self.pods.entry((*job).to_owned()).or_insert_with(|| Pod {
                tenant: (*tenant).to_owned(),
                attempt: 0,
                missing: 0,
                running: false,
            });
            pod.missing = 0;
            if pod.running {
                continue;
            }
            pod.running = true;
            pod.attempt += 1;
            pod.tenant = (*tenant).to_owned();
            let start = Start {
                devices: devices.iter().map(|d| (*d).to_owned()).collect(),
                requested_slices: None,
                requested_max_slices: None,
            };
            out.push(start_event(&args(job, pod), &start));
        }
        for (job, pod) in &mut self.pods {
            if !pod.running || now.contains_key(job.as_str()) {
                continue;
            }
            pod.missing += 1;
            if pod.missing < GONE_AFTER {
                continue;
            }
            pod.running = false;
            let end = End {
                state: Some(EndState::Completed),
                exit: None,
                work_units: None,
                work_unit_name: None,
                reason: Some(format!(
                    "observed: no process on any GPU of this node for {GONE_AFTER} rounds"
                )),
            };
            if let Ok(event) = end_event(&args(job, pod), &end) {
                out.push(event);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use gpuledger_schemas::EventBody;
    use gpuledger_schemas::events::JobState;

    use super::*;
    use crate::attribution::Attribution;

    fn ctx() -> NodeContext {
        NodeContext::for_tests()
    }

    fn held(pairs: &[(&str, &str, Option<&str>)]) -> Holders {
        pairs
            .iter()
            .map(|(device, job, tenant)| {
                (
                    (*device).to_owned(),
                    Attribution {
                        job_id: Some((*job).to_owned()),
                        tenant: tenant.map(str::to_owned),
                        pod_uid: job.strip_prefix("pod-").map(str::to_owned),
                    },
                )
            })
            .collect()
    }

    /// (job, attempt, state, devices) of each event.
    fn seen(events: &[Event]) -> Vec<(String, i32, JobState, Vec<String>)> {
        events
            .iter()
            .map(|e| {
                e.validate().unwrap();
                let EventBody::JobEvent(j) = &e.body else {
                    panic!("{e:?}")
                };
                assert_eq!((j.node.as_deref(), j.pool.as_str()), (Some("n1"), "h200"));
                (
                    j.job_id.to_string(),
                    j.attempt,
                    j.state,
                    j.devices.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn a_pod_starts_when_seen_and_ends_when_gone_for_long_enough() {
        let mut pods = PodJobs::default();
        let at = |round: i64| Timestamp::from_secs(1_793_491_200 + round * 10);
        let dev = |d: &str| d.to_owned();
        let a = "pod-aaaa";

        // On two devices; a Slurm job and a pod of unknown tenant are not
        // this module's business.
        let round = held(&[
            ("GPU-1", a, Some("team-vision")),
            ("MIG-2", a, Some("team-vision")),
            ("GPU-3", "slurm-42", Some("team-llm")),
            ("GPU-4", "pod-bbbb", None),
        ]);
        assert_eq!(
            seen(&pods.observe(&ctx(), &round, at(0))),
            [(
                a.into(),
                1,
                JobState::Started,
                vec![dev("GPU-1"), dev("MIG-2")]
            )]
        );
        // Still there: nothing new.
        assert!(pods.observe(&ctx(), &round, at(1)).is_empty());
        // Gone for two rounds, back on the third: the same attempt runs on.
        let empty = Holders::new();
        assert!(pods.observe(&ctx(), &empty, at(2)).is_empty());
        assert!(pods.observe(&ctx(), &empty, at(3)).is_empty());
        assert!(pods.observe(&ctx(), &round, at(4)).is_empty());
        // Gone for three rounds: completed.
        assert!(pods.observe(&ctx(), &empty, at(5)).is_empty());
        assert!(pods.observe(&ctx(), &empty, at(6)).is_empty());
        let ended = pods.observe(&ctx(), &empty, at(7));
        assert_eq!(seen(&ended), [(a.into(), 1, JobState::Completed, vec![])]);
        let EventBody::JobEvent(end) = &ended[0].body else {
            unreachable!()
        };
        assert!(end.reason.as_deref().unwrap().starts_with("observed"));
        assert!(pods.observe(&ctx(), &empty, at(8)).is_empty());
        // Back after its end: a second attempt.
        let back = held(&[("GPU-1", a, Some("team-vision"))]);
        assert_eq!(
            seen(&pods.observe(&ctx(), &back, at(9))),
            [(a.into(), 2, JobState::Started, vec![dev("GPU-1")])]
        );
    }
}
