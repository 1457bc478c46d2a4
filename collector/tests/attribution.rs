//! Attribution over recorded `/proc` files: a pod under the systemd cgroup
//! driver, a Slurm job under cgroup v1, a Slurm job known only from its
//! environment, and a process nobody owns.

use gpuledger_collector::attribution::{Attribution, Attributor, PodDirectory, TenantMap};

struct OnePod;

impl PodDirectory for OnePod {
    fn namespace_of(&self, pod_uid: &str) -> Option<String> {
        (pod_uid == "8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d").then(|| "ml-vision".to_owned())
    }
}

fn attributor() -> Attributor {
    let map: TenantMap = serde_json::from_str(
        r#"{"namespaces":{"ml-vision":"team-vision"},"slurm_accounts":{"vision":"team-vision"},"users":{"bob":"team-llm"}}"#,
    )
    .unwrap();
    Attributor::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc"),
        map,
        Some(Box::new(OnePod)),
    )
}

fn some(job: &str, tenant: Option<&str>) -> Attribution {
    Attribution {
        job_id: Some(job.to_owned()),
        tenant: tenant.map(str::to_owned),
    }
}

#[test]
fn recorded_processes_are_attributed() {
    let a = attributor();
    assert_eq!(
        a.attribute(101),
        some(
            "pod-8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d",
            Some("team-vision")
        )
    );
    assert_eq!(a.attribute(102), some("slurm-4242", Some("team-vision")));
    assert_eq!(a.attribute(103), some("slurm-77", Some("team-llm")));
    assert_eq!(a.attribute(104), Attribution::default());
    // A pid that is gone is unknown, not an error.
    assert_eq!(a.attribute(999_999), Attribution::default());
}

#[test]
fn a_pod_without_a_known_namespace_has_a_job_but_no_tenant() {
    let a = Attributor::new(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc"),
        TenantMap::default(),
        None,
    );
    assert_eq!(
        a.attribute(101),
        some("pod-8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d", None)
    );
}

#[test]
fn unknown_keys_in_the_tenant_map_are_refused() {
    let err = serde_json::from_str::<TenantMap>(r#"{"namespace":{}}"#).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `namespace`"),
        "{err}"
    );
}
