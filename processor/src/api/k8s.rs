//! The Kubernetes admission webhook (`AdmissionReview` v1 for Pods): a pod
//! asking for `nvidia.com/gpu` or `nvidia.com/mig-<profile>` becomes an
//! admission request; everything else is allowed untouched.

use std::collections::BTreeMap;

use serde_json::Value;

/// How pods map to tenants, pools and GPU units.
#[derive(Debug, Clone, Default)]
pub struct K8sMapping {
    /// Namespace → tenant.
    pub tenants: BTreeMap<String, String>,
    /// Pool for pods without the `gpuledger.io/pool` annotation.
    pub default_pool: String,
    /// Slices per whole GPU for MIG profiles (7 on H100/H200/A100/B200, 4 on A30).
    pub max_slices: i32,
}

/// What a pod asks for, read from its AdmissionReview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodAsk {
    pub uid: String,
    pub request_id: String,
    pub job_id: String,
    pub namespace: String,
    pub pool: String,
    pub slices: i32,
    pub max_slices: i32,
    pub dry_run: bool,
}

/// Annotation naming a pod's pool.
pub const POOL_ANNOTATION: &str = "gpuledger.io/pool";

/// The most GPUs one pod may ask for, counted in whole GPUs.
pub const MAX_GPUS: i64 = 1024;

/// GPU-equivalents one container asks for, as slices of `max_slices`.
fn container_slices(container: &Value, max_slices: i32) -> Result<i64, String> {
    let resources = &container["resources"];
    // Extended resources need requests = limits; limits win when both are given.
    let mut asked: BTreeMap<String, Value> = BTreeMap::new();
    for part in ["requests", "limits"] {
        if let Some(map) = resources[part].as_object() {
            for (k, v) in map {
                asked.insert(k.clone(), v.clone());
            }
        }
    }
    let mut slices = 0i64;
    for (name, value) in asked {
        let per: i64 = if name == "nvidia.com/gpu" {
            i64::from(max_slices)
        } else if let Some(profile) = name.strip_prefix("nvidia.com/mig-") {
            // `1g.18gb` → 1 slice; `3g.71gb` → 3.
            profile
                .split_once('g')
                .and_then(|(n, _)| n.parse().ok())
                .filter(|per| (1..=i64::from(max_slices)).contains(per))
                .ok_or_else(|| format!("MIG resource {name} has no slice count of 1 to {max_slices} (expected e.g. nvidia.com/mig-1g.18gb)"))?
        } else {
            continue;
        };
        let count: i64 = match &value {
            Value::String(s) => s.parse().ok(),
            Value::Number(n) => n.as_i64(),
            _ => None,
        }
        .filter(|c| (0..=MAX_GPUS * i64::from(max_slices)).contains(c))
        .ok_or_else(|| {
            format!("resource {name} = {value} is not a whole number from 0 to {MAX_GPUS} GPUs")
        })?;
        slices = count
            .checked_mul(per)
            .and_then(|s| slices.checked_add(s))
            .filter(|s| *s <= MAX_GPUS * i64::from(max_slices))
            .ok_or_else(|| too_many(max_slices))?;
    }
    Ok(slices)
}

fn too_many(max_slices: i32) -> String {
    format!(
        "the pod asks for more than {MAX_GPUS} GPUs ({} slices of {max_slices})",
        MAX_GPUS * i64::from(max_slices)
    )
}

/// The pod's effective GPU request in slices, as Kubernetes sums a pod's
/// resources: its containers together with its sidecars (init containers
/// with `restartPolicy: Always`, which keep running), or, if larger, the
/// most any one init container needs alongside the sidecars started
/// before it.
fn pod_slices(spec: &Value, max_slices: i32) -> Result<i64, String> {
    let limit = MAX_GPUS * i64::from(max_slices);
    let add = |a: i64, b: i64| {
        a.checked_add(b)
            .filter(|s| *s <= limit)
            .ok_or_else(|| too_many(max_slices))
    };
    let mut containers = 0i64;
    for c in spec["containers"].as_array().into_iter().flatten() {
        containers = add(containers, container_slices(c, max_slices)?)?;
    }
    let (mut sidecars, mut init) = (0i64, 0i64);
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = container_slices(c, max_slices)?;
        if c["restartPolicy"].as_str() == Some("Always") {
            sidecars = add(sidecars, own)?;
        } else {
            init = init.max(add(sidecars, own)?);
        }
    }
    Ok(add(containers, sidecars)?.max(init))
}

/// Reads a review. `Ok(None)` for pods that ask for no GPU.
pub fn read_review(review: &Value, mapping: &K8sMapping) -> Result<Option<PodAsk>, String> {
    let request = &review["request"];
    let uid = request["uid"]
        .as_str()
        .ok_or("request.uid is missing")?
        .to_owned();
    if request["kind"]["kind"].as_str() != Some("Pod") {
        return Ok(None);
    }
    let pod = &request["object"];
    let spec = &pod["spec"];
    let max_slices = mapping.max_slices.max(1);
    let slices = pod_slices(spec, max_slices)?;
    if slices == 0 {
        return Ok(None);
    }
    let namespace = request["namespace"]
        .as_str()
        .or_else(|| pod["metadata"]["namespace"].as_str())
        .ok_or("the pod has no namespace")?
        .to_owned();
    let name = pod["metadata"]["name"]
        .as_str()
        .or_else(|| request["name"].as_str())
        .or_else(|| pod["metadata"]["generateName"].as_str())
        .unwrap_or("pod");
    let pool = pod["metadata"]["annotations"][POOL_ANNOTATION]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| mapping.default_pool.clone());
    // The API server retries a call with a new review uid; the pod's own
    // uid (or, at CREATE where it has none yet, namespace/name) keeps one answer.
    let request_id = match pod["metadata"]["uid"].as_str() {
        Some(pod_uid) => format!("k8s:{pod_uid}"),
        None => format!("k8s:{namespace}/{name}"),
    };
    Ok(Some(PodAsk {
        uid,
        request_id,
        job_id: format!("{namespace}/{name}"),
        namespace,
        pool,
        slices: i32::try_from(slices)
            .map_err(|_| "the pod asks for more GPUs than can be counted".to_owned())?,
        max_slices,
        dry_run: request["dryRun"].as_bool().unwrap_or(false),
    }))
}

/// The AdmissionReview response.
pub fn response(uid: &str, allowed: bool, code: u16, message: &str) -> Value {
    serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": allowed,
            "status": { "code": code, "message": message },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping() -> K8sMapping {
        K8sMapping {
            tenants: BTreeMap::from([("vision".to_owned(), "team-vision".to_owned())]),
            default_pool: "h200".into(),
            max_slices: 7,
        }
    }

    fn review(spec: Value) -> Value {
        serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "rev-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "vision", "operation": "CREATE",
                "object": {"metadata": {"name": "train-0", "annotations": {"gpuledger.io/pool": "h100"}}, "spec": spec}
            }
        })
    }

    #[test]
    fn whole_gpus_and_mig_profiles_add_up_in_slices() {
        let spec = serde_json::json!({"containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/mig-1g.18gb": 1}, "limits": {"nvidia.com/mig-1g.18gb": 1}}},
            {"name": "c", "resources": {"limits": {"nvidia.com/mig-3g.71gb": "1"}}}
        ]});
        let ask = read_review(&review(spec), &mapping()).unwrap().unwrap();
        // 2 × 7 + 1 + 3 = 18 slices of 7.
        assert_eq!((ask.slices, ask.max_slices), (18, 7));
        assert_eq!(ask.pool, "h100");
        assert_eq!(ask.request_id, "k8s:vision/train-0");
        assert_eq!(ask.job_id, "vision/train-0");
        assert_eq!(ask.uid, "rev-1");
    }

    #[test]
    fn the_largest_init_container_counts_when_it_asks_more() {
        let spec = serde_json::json!({
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}],
            "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
        });
        assert_eq!(
            read_review(&review(spec), &mapping())
                .unwrap()
                .unwrap()
                .slices,
            28
        );
    }

    #[test]
    fn pods_without_gpus_and_bad_quantities() {
        let spec = serde_json::json!({"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}}}]});
        assert_eq!(read_review(&review(spec), &mapping()).unwrap(), None);
        let spec = serde_json::json!({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "half"}}}]});
        let err = read_review(&review(spec), &mapping()).unwrap_err();
        assert!(err.contains("nvidia.com/gpu"), "{err}");
        assert!(read_review(&serde_json::json!({"request": {}}), &mapping()).is_err());
    }

    #[test]
    fn sidecars_add_to_the_containers_and_to_later_init_containers() {
        let gpu = |n: i64| serde_json::json!({"limits": {"nvidia.com/gpu": n.to_string()}});
        let spec = serde_json::json!({
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": gpu(1)},
                {"name": "setup", "resources": gpu(2)},
            ],
            "containers": [{"name": "main", "resources": gpu(1)}],
        });
        // main 1 + sidecar 1 = 2; setup 2 + the sidecar before it = 3.
        let ask = read_review(&review(spec), &mapping()).unwrap().unwrap();
        assert_eq!(ask.slices, 3 * 7);
        let spec = serde_json::json!({
            "initContainers": [{"name": "side", "restartPolicy": "Always", "resources": gpu(2)}],
            "containers": [{"name": "main", "resources": gpu(3)}],
        });
        assert_eq!(
            read_review(&review(spec), &mapping())
                .unwrap()
                .unwrap()
                .slices,
            5 * 7
        );
    }

    #[test]
    fn gpu_counts_are_bounded_without_overflow() {
        let gpu = |n: &str| serde_json::json!({"limits": {"nvidia.com/gpu": n}});
        let one = |n: &str| serde_json::json!({"containers": [{"name": "a", "resources": gpu(n)}]});
        assert_eq!(
            read_review(&review(one("1024")), &mapping())
                .unwrap()
                .unwrap()
                .slices,
            1024 * 7
        );
        for n in ["1025", "-1", "9223372036854775807", "99999999999999999999"] {
            let err = read_review(&review(one(n)), &mapping()).unwrap_err();
            assert!(err.contains("1024"), "{n}: {err}");
        }
        // Many containers of 1,000 each: the sum is refused, not wrapped.
        let many: Vec<Value> = (0..10)
            .map(|i| serde_json::json!({"name": format!("c{i}"), "resources": gpu("1000")}))
            .collect();
        let err =
            read_review(&review(serde_json::json!({"containers": many})), &mapping()).unwrap_err();
        assert!(err.contains("more than 1024 GPUs"), "{err}");
    }
}
