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
}

/// Looks a Kubernetes pod's namespace up by UID (the API server, or a
/// kubelet listing); tests and nodes without Kubernetes use none.
pub trait PodDirectory: Send + Sync {
    /// The namespace of the pod with this UID, if known.
    fn namespace_of(&self, pod_uid: &str) -> Option<String>;
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
                let tenant = self
                    .pods
                    .as_ref()
                    .and_then(|p| p.namespace_of(&uid))
                    .and_then(|ns| self.map.namespaces.get(&ns).cloned());
                Attribution {
                    job_id: Some(format!("pod-{uid}")),
                    tenant,
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
                }
            }
            None => Attribution::default(),
        }
    }
}
