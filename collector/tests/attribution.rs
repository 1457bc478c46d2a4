//! Attribution over recorded `/proc` files: a pod under the systemd cgroup
//! driver, a Slurm job under cgroup v1, a Slurm job known only from its
//! environment, and a process nobody owns.

use gpuledger_collector::attribution::{
    Attribution, Attributor, PodDirectory, PodLogs, PodName, TenantMap,
};

const POD_UID: &str = "8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d";

struct OnePod;

impl PodDirectory for OnePod {
    fn pod(&self, pod_uid: &str) -> Option<PodName> {
        (pod_uid == POD_UID).then(|| PodName {
            namespace: "ml-vision".to_owned(),
            name: "train-0".to_owned(),
        })
    }
}

fn attributor() -> Attributor {
    let map: TenantMap = serde_json::from_str(
        r#"{"namespaces":{"ml-vision":"team-vision"},"slurm_accounts":{"vision":"team-vision"},"users":{"bob":"team-llm"}}"#,
    )
    .unwrap();
    Attributor::new(fixture_proc(), map, Some(Box::new(OnePod)))
}

fn some(job: &str, tenant: Option<&str>) -> Attribution {
    Attribution {
        job_id: Some(job.to_owned()),
        tenant: tenant.map(str::to_owned),
        pod_uid: None,
    }
}

fn pod(job: &str, tenant: Option<&str>) -> Attribution {
    Attribution {
        pod_uid: Some(POD_UID.to_owned()),
        ..some(job, tenant)
    }
}

#[test]
fn recorded_processes_are_attributed() {
    let a = attributor();
    // A known pod is named as the admission webhook names it.
    assert_eq!(
        a.attribute(101),
        pod("ml-vision/train-0", Some("team-vision"))
    );
    assert_eq!(a.attribute(102), some("slurm-4242", Some("team-vision")));
    assert_eq!(a.attribute(103), some("slurm-77", Some("team-llm")));
    assert_eq!(a.attribute(104), Attribution::default());
    // A pid that is gone is unknown, not an error.
    assert_eq!(a.attribute(999_999), Attribution::default());
}

#[test]
fn a_pod_without_a_known_namespace_has_a_job_but_no_tenant() {
    let a = Attributor::new(fixture_proc(), TenantMap::default(), None);
    assert_eq!(
        a.attribute(101),
        pod("pod-8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d", None)
    );
}

#[test]
fn the_kubelets_pod_log_folders_name_a_pods_namespace() {
    let logs = std::env::temp_dir().join(format!("gpuledger-pod-logs-{}", std::process::id()));
    std::fs::create_dir_all(logs.join(format!("ml-vision_train-0_{POD_UID}"))).unwrap();
    std::fs::create_dir_all(logs.join("kube-system_coredns-7db6d8ff4d-abcde_11111111-2222"))
        .unwrap();
    std::fs::create_dir_all(logs.join("not-a-pod-folder")).unwrap();
    let map: TenantMap =
        serde_json::from_str(r#"{"namespaces":{"ml-vision":"team-vision"}}"#).unwrap();
    let a = Attributor::new(fixture_proc(), map, Some(Box::new(PodLogs::new(&logs))));
    assert_eq!(
        a.attribute(101),
        pod("ml-vision/train-0", Some("team-vision"))
    );
    let directory = PodLogs::new(&logs);
    assert_eq!(
        directory.pod("11111111-2222"),
        Some(PodName {
            namespace: "kube-system".to_owned(),
            name: "coredns-7db6d8ff4d-abcde".to_owned()
        })
    );
    assert_eq!(directory.pod("33333333"), None);
    // A pod started since the last look is found on the next.
    std::fs::create_dir_all(logs.join("ml-speech_asr-1_33333333")).unwrap();
    assert_eq!(directory.pod("33333333").unwrap().name, "asr-1");
    std::fs::remove_dir_all(&logs).unwrap();
}

#[test]
fn unknown_keys_in_the_tenant_map_are_refused() {
    let err = serde_json::from_str::<TenantMap>(r#"{"namespace":{}}"#).unwrap_err();
    assert!(
        err.to_string().contains("unknown field `namespace`"),
        "{err}"
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
