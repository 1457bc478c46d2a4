//! The simulated fleet's unit tests.

use super::*;
use gpuledger_schemas::EventBody;
use gpuledger_schemas::events::{AdmissionRequest, JobEvent};

fn spec() -> FleetSpec {
    FleetSpec {
        cluster: "c1".into(),
        pool: "h200".into(),
        layout: FleetLayout::uniform("h200", "NVIDIA H200", 2, 2, true),
        interval_ms: 10_000,
        start: "2026-11-01T00:00:00Z".parse().unwrap(),
        seed: 7,
        tenants: TenantMix::default(),
        xid_per_gpu_day: 0.0,
    }
}

#[test]
fn events_are_valid_and_deterministic() {
    let mut a = SimulatedFleet::new(spec());
    let mut b = SimulatedFleet::new(spec());
    assert_eq!(a.inventory(), b.inventory());
    for event in a.inventory() {
        event.validate().unwrap();
    }
    for _ in 0..5 {
        let (x, y) = (a.tick(), b.tick());
        assert_eq!(x, y);
        // 2 nodes × (4 MIG instances + 1 whole GPU)
        assert_eq!(x.len(), 10);
        for event in &x {
            event.validate().unwrap();
        }
    }
}

#[test]
fn tenants_jobs_hold_devices_and_tell_the_ledger() {
    let spec = FleetSpec {
        tenants: TenantMix::parse(&["team-llm", "team-vision"]).unwrap(),
        // Often enough that 5.5 hours of 4 GPUs see some.
        xid_per_gpu_day: 2.0,
        ..spec()
    };
    let run = |spec: &FleetSpec| {
        let mut fleet = SimulatedFleet::new(spec.clone());
        (0..2_000)
            .flat_map(|_| fleet.tick())
            .collect::<Vec<Event>>()
    };
    let events = run(&spec);
    assert_eq!(events, run(&spec), "the same seed gives the same events");
    // Each device's GPU.
    let gpu_of: BTreeMap<String, String> = SimulatedFleet::new(spec.clone())
        .inventory()
        .into_iter()
        .flat_map(|e| match e.body {
            EventBody::NodeInventory(n) => n.devices,
            _ => Vec::new(),
        })
        .map(|d| {
            let gpu = d.parent_gpu_uuid.unwrap_or_else(|| d.device_uuid.clone());
            (d.device_uuid, gpu)
        })
        .collect();
    // The attempt holding each device, and the attempts whose GPU failed
    // under them (since when).
    let mut holding: BTreeMap<String, (String, i32)> = BTreeMap::new();
    let mut stranded: BTreeMap<(String, i32), Timestamp> = BTreeMap::new();
    let mut stranded_seen = 0;
    // Per (job, attempt): its start, its end, and the device it named.
    let mut started: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut ended: BTreeMap<(String, i32), JobState> = BTreeMap::new();
    let mut admitted = 0;
    let mut held_samples = 0;
    // Per GPU: failed since (its samples stop until it recovers).
    let mut down: BTreeMap<String, Timestamp> = BTreeMap::new();
    let mut faults = 0;
    for event in &events {
        event.validate().unwrap();
        match &event.body {
            EventBody::AdmissionRequest(_) => admitted += 1,
            EventBody::JobEvent(j) if j.state == JobState::Started => {
                let device = j.devices.clone().unwrap().remove(0);
                assert!(
                    !down.contains_key(&gpu_of[&device]),
                    "a job started on a failed GPU"
                );
                holding.insert(device.clone(), (j.job_id.to_string(), j.attempt));
                assert!(
                    started
                        .insert((j.job_id.to_string(), j.attempt), device)
                        .is_none()
                );
            }
            EventBody::JobEvent(j) => {
                let key = (j.job_id.to_string(), j.attempt);
                assert!(started.contains_key(&key), "{key:?} ended unstarted");
                holding.remove(&started[&key]);
                if let Some(since) = stranded.remove(&key) {
                    // Its scheduler noticed the hung job 5 to 15 minutes on.
                    stranded_seen += 1;
                    assert_eq!(j.state, JobState::Failed);
                    let waited = event.envelope.event_time.as_micros() - since.as_micros();
                    assert!((300_000_000..=900_000_000).contains(&waited), "{waited}");
                }
                assert!(ended.insert(key, j.state).is_none());
            }
            EventBody::DeviceHealth(h) => {
                if h.state == HealthState::Failed {
                    faults += 1;
                    for (device, attempt) in &holding {
                        if gpu_of[device] == h.device_uuid {
                            stranded.insert(attempt.clone(), event.envelope.event_time);
                        }
                    }
                    assert!(
                        down.insert(h.device_uuid.clone(), event.envelope.event_time)
                            .is_none()
                    );
                } else {
                    assert!(down.remove(&h.device_uuid).is_some(), "recovered unfailed");
                }
            }
            EventBody::GpuSample(s) => {
                let gpu = s.parent_gpu_uuid.as_ref().unwrap_or(&s.device_uuid);
                assert!(!down.contains_key(gpu), "a failed GPU reported a sample");
                // A held device names its job and a process; a free one neither.
                assert_eq!(s.job_id.is_some(), !s.pids.is_empty());
                assert_eq!(s.job_id.is_some(), s.tenant.is_some());
                if let Some(job) = &s.job_id {
                    held_samples += 1;
                    let attempt = started
                        .iter()
                        .filter(|((j, _), d)| j == job && **d == s.device_uuid)
                        .map(|((_, a), _)| *a)
                        .max();
                    assert!(
                        attempt.is_some(),
                        "{job} on {} never started there",
                        s.device_uuid
                    );
                }
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(admitted, started.len(), "one admission request per attempt");
    assert!(faults > 0, "no XID fault in 5.5 hours at 2 a day per GPU");
    assert!(stranded_seen > 0, "no job was running on a GPU that failed");
    assert!(held_samples > 0);
    // Over 2,000 ticks (5.5 hours) jobs end every way, and failures are
    // retried as later attempts of the same job.
    let states: std::collections::BTreeSet<JobState> = ended.values().copied().collect();
    assert!(states.contains(&JobState::Completed), "{states:?}");
    assert!(started.keys().any(|(_, attempt)| *attempt > 1));
    for ((job, attempt), _) in started.iter().filter(|((_, a), _)| *a > 1) {
        assert_eq!(
            ended.get(&(job.clone(), attempt - 1)),
            Some(&JobState::Failed)
        );
    }
}

/// Admits team-llm only.
struct LlmOnly(Vec<String>);

impl Admit for LlmOnly {
    fn admit(&mut self, request: &AdmissionRequest) -> Admission {
        self.0.push(request.request_id.to_string());
        if request.tenant == "team-llm" {
            Admission::Admitted
        } else {
            Admission::Denied
        }
    }
}

#[test]
fn a_denied_job_never_starts_and_an_admitted_one_sends_no_request() {
    let mut fleet = SimulatedFleet::new(FleetSpec {
        tenants: TenantMix::parse(&["team-llm", "team-vision"]).unwrap(),
        ..spec()
    });
    let mut admit = LlmOnly(Vec::new());
    let events: Vec<Event> = (0..1_000)
        .flat_map(|_| fleet.tick_with(&mut admit))
        .collect();
    let starts: Vec<&JobEvent> = events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::JobEvent(j) if j.state == JobState::Started => Some(j),
            _ => None,
        })
        .collect();
    assert!(!starts.is_empty());
    assert!(starts.iter().all(|j| j.tenant == "team-llm"));
    assert!(admit.0.iter().any(|r| r.starts_with("team-vision")));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.body, EventBody::AdmissionRequest(_)))
    );
}

#[test]
fn a_fleet_file_mixes_models_and_mig_layouts() {
    let layout = FleetLayout::from_json(
        r#"{"nodes":[
            {"name":"h100-n01","model":"NVIDIA H100 80GB HBM3","pool":"h100","gpus":[["4g.40gb","3g.40gb"],[]]},
            {"name":"h200-n01","model":"NVIDIA H200","gpus":[["1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb"],["7g.141gb"]]}
        ]}"#,
    )
    .unwrap();
    let fleet = SimulatedFleet::new(FleetSpec { layout, ..spec() });
    // A node names its pool, or is in the default one.
    let pools: Vec<String> = fleet
        .inventory()
        .into_iter()
        .filter_map(|e| match e.body {
            EventBody::NodeInventory(n) => Some(n.pool),
            _ => None,
        })
        .collect();
    assert_eq!(pools, ["h100", "h200"]);
    let devices: Vec<(String, Option<String>, i32, i64)> = fleet
        .inventory()
        .into_iter()
        .flat_map(|e| match e.body {
            EventBody::NodeInventory(n) => n.devices,
            _ => Vec::new(),
        })
        .map(|d| (d.model, d.mig_profile, d.slices, d.memory_bytes))
        .collect();
    assert_eq!(devices.len(), 2 + 1 + 7 + 1);
    assert_eq!(
        devices[..3],
        [
            (
                "NVIDIA H100 80GB HBM3".into(),
                Some("4g.40gb".into()),
                4,
                40_000_000_000
            ),
            (
                "NVIDIA H100 80GB HBM3".into(),
                Some("3g.40gb".into()),
                3,
                40_000_000_000
            ),
            ("NVIDIA H100 80GB HBM3".into(), None, 7, 80_000_000_000),
        ]
    );
    // Splits a Hopper GPU cannot hold, and malformed files, are refused
    // with what is wrong.
    for (file, wrong) in [
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[["4g.71gb","4g.71gb"]]}]}"#,
            "8 slices",
        ),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[["5g.90gb"]]}]}"#,
            "5g.90gb",
        ),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[]},{"name":"a","model":"NVIDIA H200","gpus":[]}]}"#,
            "repeated",
        ),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpu":[]}]}"#,
            "unknown field",
        ),
        (r#"{"nodes":[]}"#, "no nodes"),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[]},{"name":"b","model":"NVIDIA H100 80GB HBM3","gpus":[]}]}"#,
            "one GPU model",
        ),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","tenants":["t:0"],"gpus":[]}]}"#,
            "t:0",
        ),
        (
            r#"{"nodes":[{"name":"a","model":"NVIDIA H200","tenants":["t","t:2"],"gpus":[]}]}"#,
            "repeated",
        ),
    ] {
        let e = FleetLayout::from_json(file).unwrap_err();
        assert!(e.contains(wrong), "{file}: {e}");
    }
}

#[test]
fn mig_devices_report_no_utilization_and_share_the_parent_counter() {
    let mut fleet = SimulatedFleet::new(spec());
    let samples: Vec<GpuSample> = fleet
        .tick()
        .into_iter()
        .filter_map(|e| match e.body {
            EventBody::GpuSample(s) => Some(s),
            _ => None,
        })
        .collect();
    let mig: Vec<&GpuSample> = samples.iter().filter(|s| s.mig_profile.is_some()).collect();
    assert_eq!(mig.iter().map(|s| s.slices).sum::<i32>(), 14);
    assert!(
        mig.iter()
            .all(|s| s.sm_util_pct.is_none() && s.power_mw.is_none())
    );
    assert_eq!(mig[0].energy_mj, mig[1].energy_mj);
    assert!(
        samples
            .iter()
            .filter(|s| s.mig_profile.is_none())
            .all(|s| s.sm_util_pct.is_some())
    );
}

#[test]
fn nodes_run_their_own_tenants_jobs_by_weight_in_their_own_pool() {
    let layout = FleetLayout::from_json(
        r#"{"nodes":[
            {"name":"a-n01","model":"NVIDIA H200","pool":"a","tenants":["big:3","small"],"gpus":[[],[],[],[]]},
            {"name":"b-n01","model":"NVIDIA H100 80GB HBM3","pool":"b","gpus":[[],[]]}
        ]}"#,
    )
    .unwrap();
    let spec = FleetSpec {
        layout,
        tenants: TenantMix::parse(&["other"]).unwrap(),
        ..spec()
    };
    let mut fleet = SimulatedFleet::new(spec);
    let mut starts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for event in (0..20_000).flat_map(|_| fleet.tick()) {
        if let EventBody::JobEvent(j) = &event.body
            && j.state == JobState::Started
            && j.attempt == 1
        {
            *starts
                .entry((j.pool.to_string(), j.tenant.to_string()))
                .or_default() += 1;
        }
    }
    let count = |pool: &str, tenant: &str| starts[&(pool.to_owned(), tenant.to_owned())];
    assert_eq!(starts.len(), 3, "{starts:?}");
    // Weight 3 against 1: about three times as many jobs.
    let ratio = count("a", "big") as f64 / count("a", "small") as f64;
    assert!((2.2..4.0).contains(&ratio), "{starts:?}");
    assert!(count("b", "other") > 0);
    assert!(
        TenantMix::parse(&["x:1001"])
            .unwrap_err()
            .contains("1 to 1000")
    );
}
