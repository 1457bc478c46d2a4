//! NVML readings → events, on the fake.

use gpuledger_schemas::events::HealthState;
use gpuledger_schemas::{EventBody, Timestamp};

use super::fake::FakeNvml;
use super::xid::{health_event, state_of_xid};
use super::*;

fn ctx() -> NodeContext {
    NodeContext::for_tests()
}

fn at() -> Timestamp {
    "2026-11-03T08:00:00Z".parse().unwrap()
}

#[test]
fn a_split_gpu_lists_its_instances_and_a_whole_one_itself() {
    let mut fake = FakeNvml::fleet(1, 3);
    fake.gpus
        .extend(FakeNvml::fleet(1, 0).gpus.into_iter().map(|mut g| {
            g.uuid = "GPU-whole".into();
            g
        }));
    let gpus = fake.read().unwrap();
    let event = inventory(&ctx(), &gpus, at());
    event.validate().unwrap();
    let EventBody::NodeInventory(inv) = &event.body else {
        panic!("{event:?}")
    };
    type Row = (String, Option<String>, i32, i32, Option<String>);
    let summary: Vec<Row> = inv
        .devices
        .iter()
        .map(|d| {
            (
                d.device_uuid.clone(),
                d.parent_gpu_uuid.clone(),
                d.slices,
                d.max_slices,
                d.mig_profile.clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "MIG-fake-0000-0".into(),
                Some("GPU-fake-0000".into()),
                1,
                7,
                Some("1g.18gb".into())
            ),
            (
                "MIG-fake-0000-1".into(),
                Some("GPU-fake-0000".into()),
                1,
                7,
                Some("1g.18gb".into())
            ),
            (
                "MIG-fake-0000-2".into(),
                Some("GPU-fake-0000".into()),
                1,
                7,
                Some("1g.18gb".into())
            ),
            ("GPU-whole".into(), None, 7, 7, None),
        ]
    );
}

#[test]
fn samples_keep_unsupported_values_null_and_seq_increasing() {
    let mut fake = FakeNvml::fleet(1, 2);
    fake.gpus
        .extend(FakeNvml::fleet(1, 0).gpus.into_iter().map(|mut g| {
            g.uuid = "GPU-whole".into();
            g.temp_c = None;
            g
        }));
    // No GPM on the second instance.
    fake.gpus[0].migs[1].sm_activity_pct = None;
    let gpus = fake.read().unwrap();
    let mut seq = 41;
    let events = samples(&ctx(), &gpus, &Holders::new(), at(), &mut seq);
    assert_eq!(seq, 44);
    let samples: Vec<&GpuSample> = events
        .iter()
        .map(|e| {
            e.validate().unwrap();
            match &e.body {
                EventBody::GpuSample(s) => s,
                other => panic!("{other:?}"),
            }
        })
        .collect();
    assert_eq!(
        events
            .iter()
            .map(|e| e.envelope.event_id.as_str())
            .collect::<Vec<_>>(),
        ["collector-n1:42", "collector-n1:43", "collector-n1:44"]
    );
    // MIG: GPM activity where there is one, null otherwise; no memory
    // utilization and no power of its own; the parent's energy counter.
    assert_eq!(samples[0].sm_util_pct, Some(0.0));
    assert_eq!(samples[1].sm_util_pct, None);
    assert_eq!(samples[0].mem_util_pct, None);
    assert_eq!(samples[0].power_mw, None);
    assert_eq!(samples[0].energy_mj, Some(1_400_000));
    assert_eq!(samples[0].pids, [10_000]);
    assert_eq!(samples[0].parent_gpu_uuid.as_deref(), Some("GPU-fake-0000"));
    // A whole GPU: utilization, power, and an unsupported temperature null.
    assert_eq!(samples[2].sm_util_pct, Some(55.0));
    assert_eq!(samples[2].power_mw, Some(400_000));
    assert_eq!(samples[2].temp_c, None);
    assert_eq!((samples[2].slices, samples[2].max_slices), (7, 7));
}

#[test]
fn xids_map_to_failed_or_degraded_from_one_table() {
    for xid in [48, 63, 64, 74, 79, 92, 94, 95] {
        assert_eq!(state_of_xid(xid), HealthState::Failed, "XID {xid}");
    }
    for xid in [13, 31, 43, 45, 999] {
        assert_eq!(state_of_xid(xid), HealthState::Degraded, "XID {xid}");
    }
    let signal = HealthSignal {
        device_uuid: "GPU-fake-0000".into(),
        kind: HealthKind::Xid(79),
    };
    let event = health_event(&ctx(), &signal, at()).unwrap();
    event.validate().unwrap();
    let EventBody::DeviceHealth(h) = &event.body else {
        panic!("{event:?}")
    };
    assert_eq!(h.state, HealthState::Failed);
    assert_eq!(h.xid, Some(79));
    assert!(h.reason.contains("fallen off the bus"), "{}", h.reason);
    let ecc = HealthSignal {
        device_uuid: "GPU-fake-0000".into(),
        kind: HealthKind::EccUncorrectable,
    };
    let EventBody::DeviceHealth(h) = health_event(&ctx(), &ecc, at()).unwrap().body else {
        panic!()
    };
    assert_eq!(h.state, HealthState::Failed);
    let mig = HealthSignal {
        device_uuid: "GPU-fake-0000".into(),
        kind: HealthKind::MigReconfigured,
    };
    assert!(health_event(&ctx(), &mig, at()).is_none());
}

#[test]
fn a_layout_change_is_seen() {
    let mut fake = FakeNvml::fleet(2, 7);
    let before = layout(&fake.read().unwrap());
    fake.gpus[1] = FakeNvml::fleet(1, 0).gpus.remove(0);
    let after = layout(&fake.read().unwrap());
    assert_ne!(before, after);
    assert_eq!(before.len(), 14);
    assert_eq!(after.len(), 8);
}

#[test]
fn profiles_and_slices_come_from_names() {
    assert_eq!(
        mig_profile("NVIDIA H200 MIG 1g.18gb").as_deref(),
        Some("1g.18gb")
    );
    assert_eq!(
        mig_profile("NVIDIA H100 80GB HBM3 MIG 3g.40gb").as_deref(),
        Some("3g.40gb")
    );
    assert_eq!(mig_profile("NVIDIA H200"), None);
    assert_eq!(max_slices_of("NVIDIA A30"), 4);
    assert_eq!(max_slices_of("NVIDIA H200"), 7);
}

/// The recorded `/proc` of the attribution tests: pid 102 is Slurm job
/// 4242 of account `vision`, 103 job 77 of user `bob`, 104 nobody's.
fn recorded_attributor() -> Attributor {
    let map = serde_json::from_str(
        r#"{"slurm_accounts":{"vision":"team-vision"},"users":{"bob":"team-llm"}}"#,
    )
    .unwrap();
    Attributor::new(fixture_proc(), map, None)
}

fn running(pids: &[u32]) -> Vec<ProcessReading> {
    pids.iter()
        .map(|&pid| ProcessReading {
            pid,
            used_memory_bytes: None,
            gpu_instance_id: None,
            compute_instance_id: None,
        })
        .collect()
}

/// (device, action, job, tenant) of each `MigAssignment`.
fn assignments(events: &[Event]) -> Vec<(String, String, Option<String>, Option<String>)> {
    events
        .iter()
        .map(|e| {
            e.validate().unwrap();
            match &e.body {
                EventBody::MigAssignment(m) => (
                    m.device_uuid.clone(),
                    m.action.to_string(),
                    m.job_id.clone(),
                    m.tenant.clone(),
                ),
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

#[test]
fn a_mig_device_changing_hands_is_released_then_assigned() {
    let attributor = recorded_attributor();
    let mut fake = FakeNvml::fleet(1, 3);
    let uuid = |i: usize, fake: &FakeNvml| fake.gpus[0].migs[i].uuid.clone();
    let (m0, m1, m2) = (uuid(0, &fake), uuid(1, &fake), uuid(2, &fake));
    let mut migs = MigAssignments::default();
    let mut round = |fake: &mut FakeNvml, mut seq: i64| {
        let gpus = fake.read().unwrap();
        let holders = holders(&gpus, Some(&attributor));
        let changes = migs.changes(&ctx(), &gpus, &holders, at());
        (changes, samples(&ctx(), &gpus, &holders, at(), &mut seq))
    };
    let some = |s: &str| Some(s.to_owned());

    // Job 4242 on the first instance, an unknown process on the second.
    fake.gpus[0].migs[0].processes = running(&[104, 102]);
    fake.gpus[0].migs[1].processes = running(&[104]);
    fake.gpus[0].migs[2].processes = Vec::new();
    let (changes, samples) = round(&mut fake, 0);
    assert_eq!(
        assignments(&changes),
        [
            (
                m0.clone(),
                "assigned".into(),
                some("slurm-4242"),
                some("team-vision")
            ),
            (m1.clone(), "assigned".into(), None, None),
        ]
    );
    let EventBody::GpuSample(first) = &samples[0].body else {
        panic!()
    };
    assert_eq!(
        (first.job_id.as_deref(), first.tenant.as_deref()),
        (Some("slurm-4242"), Some("team-vision"))
    );

    // Nothing changed: nothing to say.
    assert!(round(&mut fake, 10).0.is_empty());

    // Job 77 takes the first instance, the second is let go, job 4242
    // moves to the third.
    fake.gpus[0].migs[0].processes = running(&[103]);
    fake.gpus[0].migs[1].processes = Vec::new();
    fake.gpus[0].migs[2].processes = running(&[102]);
    let (changes, _) = round(&mut fake, 20);
    assert_eq!(
        assignments(&changes),
        [
            (
                m0.clone(),
                "released".into(),
                some("slurm-4242"),
                some("team-vision")
            ),
            (m1.clone(), "released".into(), None, None),
            (
                m0.clone(),
                "assigned".into(),
                some("slurm-77"),
                some("team-llm")
            ),
            (
                m2.clone(),
                "assigned".into(),
                some("slurm-4242"),
                some("team-vision")
            ),
        ]
    );

    // The GPU is made whole again: every held instance is released.
    fake.gpus[0] = FakeNvml::fleet(1, 0).gpus.remove(0);
    let (changes, _) = round(&mut fake, 30);
    assert_eq!(
        assignments(&changes),
        [
            (m0, "released".into(), some("slurm-77"), some("team-llm")),
            (
                m2,
                "released".into(),
                some("slurm-4242"),
                some("team-vision")
            ),
        ]
    );
}

/// The recorded `/proc` the attribution tests read. The folder is looked up
/// when the test runs (cargo sets `CARGO_MANIFEST_DIR` for it), so a build
/// cached in one checkout still finds the fixtures of the one running it.
fn fixture_proc() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("tests/fixtures/proc")
}
