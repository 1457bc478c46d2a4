//! Attribution: which job and tenant a GPU process belongs to.
//!
//! NVML reports host pids. Their cgroup names a Kubernetes pod or a Slurm
//! job (see [`cgroup`]); `SLURM_JOB_ID` in the environment is the fallback.
//! A configured map turns a namespace, a Slurm account or a user into a
//! tenant. Unknown pids get neither job nor tenant, and the ledger reports
//! them as unmetered use.

pub mod cgroup;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use cgroup::Owner;

/// Namespace, Slurm account and user → tenant, checked in that order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantMap {
    #[serde(default)]
    pub namespaces: BTreeMap<String, String>,
    #[serde(default)]
    pub slurm_accounts: BTreeMap<String, String>,
    #[serde(default)]
    pub users: BTreeMap<String, String>,
}

/// Who a process works for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attribution {
    pub job_id: Option<String>,
    pub tenant: Option<String>,
    /// The UID of the Kubernetes pod it runs in, if any.
    pub pod_uid: Option<String>,
}

/// A pod's namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
}

/// Looks a Kubernetes pod up by UID; tests and nodes without Kubernetes
/// use none.
pub trait PodDirectory: Send + Sync {
    /// The namespace and name of the pod with this UID, if known.
    fn pod(&self, pod_uid: &str) -> Option<PodName>;
}

/// The pods the kubelet keeps logs for: `/var/log/pods` (a host mount in
/// the collector's container) holds a folder `<namespace>_<name>_<uid>` for
/// every pod on the node — names and namespaces cannot contain `_` — so a
/// pod's UID gives its namespace and name with no call to the API server.
/// UIDs are never reused, so what was found once is kept.
#[derive(Debug)]
pub struct PodLogs {
    root: PathBuf,
    known: std::sync::Mutex<BTreeMap<String, PodName>>,
}

impl PodLogs {
    /// The pods under `root` (normally `/var/log/pods`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            known: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// Reads the folder again; pods it cannot read are simply not known.
    fn rescan(&self) -> BTreeMap<String, PodName> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return BTreeMap::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| {
                let mut parts = name.splitn(3, '_');
                let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
                (!namespace.is_empty() && !pod.is_empty() && !uid.is_empty()).then(|| {
                    (
                        uid.to_owned(),
                        PodName {
                            namespace: namespace.to_owned(),
                            name: pod.to_owned(),
                        },
                    )
                })
            })
            .collect()
    }
}

impl PodDirectory for PodLogs {
    fn pod(&self, pod_uid: &str) -> Option<PodName> {
        let mut known = self.known.lock().ok()?;
        if let Some(pod) = known.get(pod_uid) {
            return Some(pod.clone());
        }
        known.extend(self.rescan());
        known.get(pod_uid).cloned()
    }
}

/// Reads `/proc` (or a recorded copy of it) to attribute pids.
pub struct Attributor {
    proc_root: PathBuf,
    map: TenantMap,
    pods: Option<Box<dyn PodDirectory>>,
}

impl std::fmt::Debug for Attributor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attributor")
            .field("proc_root", &self.proc_root)
            .field("map", &self.map)
            .finish()
    }
}

impl Attributor {
    /// An attributor over `proc_root` (normally `/proc`).
    pub fn new(
        proc_root: impl Into<PathBuf>,
        map: TenantMap,
        pods: Option<Box<dyn PodDirectory>>,
    ) -> Self {
        Self {
            proc_root: proc_root.into(),
            map,
            pods,
        }
    }

    fn environ(&self, pid: i64) -> Vec<u8> {
        std::fs::read(self.proc_root.join(pid.to_string()).join("environ")).unwrap_or_default()
    }

    /// The job and tenant of `pid`; both `None` when nothing is known (the
    /// process may also have exited since NVML listed it).
    pub fn attribute(&self, pid: i64) -> Attribution {
        let cgroup = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup"))
            .unwrap_or_default();
        let environ = self.environ(pid);
        let owner = cgroup::owner_of(&cgroup).or_else(|| cgroup::slurm_job_from_environ(&environ));
        match owner {
            Some(Owner::Pod { uid }) => {
                // Named as the admission webhook names it where the pod is
                // known, by its UID otherwise.
                let pod = self.pods.as_ref().and_then(|p| p.pod(&uid));
                let tenant = pod
                    .as_ref()
                    .and_then(|p| self.map.namespaces.get(&p.namespace).cloned());
                let job_id = match &pod {
                    Some(p) => format!("{}/{}", p.namespace, p.name),
                    None => format!("pod-{uid}"),
                };
                Attribution {
                    job_id: Some(job_id),
                    tenant,
                    pod_uid: Some(uid),
                }
            }
            Some(Owner::SlurmJob { job_id }) => {
                let var = |name: &str| {
                    environ.split(|b| *b == 0).find_map(|e| {
                        std::str::from_utf8(e)
                            .ok()?
                            .strip_prefix(name)?
                            .strip_prefix('=')
                            .map(str::to_owned)
                    })
                };
                let tenant = var("SLURM_JOB_ACCOUNT")
                    .and_then(|a| self.map.slurm_accounts.get(&a).cloned())
                    .or_else(|| {
                        var("SLURM_JOB_USER")
                            .or_else(|| var("USER"))
                            .and_then(|u| self.map.users.get(&u).cloned())
                    });
                Attribution {
                    job_id: Some(format!("slurm-{job_id}")),
                    tenant,
                    pod_uid: None,
                }
            }
            None => Attribution::default(),
        }
    }
}
