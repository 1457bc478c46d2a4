//! Reading who owns a process from its cgroup path: a Kubernetes pod (by
//! UID) or a Slurm job (by id), for cgroup v1 and v2 and for both of the
//! kubelet's cgroup drivers (cgroupfs and systemd).

/// What a process's cgroup says about its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A Kubernetes pod, by UID (dashed form).
    Pod { uid: String },
    /// A Slurm job, by id.
    SlurmJob { job_id: String },
}

/// Reads the owner from the text of `/proc/<pid>/cgroup` (all lines: v1
/// has one per hierarchy, v2 a single `0::` line).
pub fn owner_of(cgroup_file: &str) -> Option<Owner> {
    cgroup_file.lines().find_map(|line| {
        // `hierarchy-id:controllers:path`; the path may itself contain ':'.
        let path = line.splitn(3, ':').nth(2)?;
        pod_in(path).or_else(|| slurm_job_in(path))
    })
}

/// `…/kubepods/burstable/pod<uid>/…` (cgroupfs) or
/// `…/kubepods-burstable-pod<uid_with_underscores>.slice/…` (systemd).
fn pod_in(path: &str) -> Option<Owner> {
    if !path.contains("kubepods") {
        return None;
    }
    path.split('/').find_map(|segment| {
        let segment = segment.strip_suffix(".slice").unwrap_or(segment);
        let at = segment.rfind("pod")?;
        let uid = segment[at + 3..].replace('_', "-");
        is_uid(&uid).then_some(Owner::Pod { uid })
    })
}

fn is_uid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && [8, 4, 4, 4, 12]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n)
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// `/slurm/uid_X/job_Y/…` (v1) or `…/slurmstepd.scope/job_Y/…` (v2).
fn slurm_job_in(path: &str) -> Option<Owner> {
    if !path.contains("slurm") {
        return None;
    }
    path.split('/').find_map(|segment| {
        let id = segment.strip_prefix("job_")?;
        (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| Owner::SlurmJob {
            job_id: id.to_owned(),
        })
    })
}

/// `SLURM_JOB_ID` from the NUL-separated text of `/proc/<pid>/environ`.
pub fn slurm_job_from_environ(environ: &[u8]) -> Option<Owner> {
    environ.split(|b| *b == 0).find_map(|entry| {
        let entry = std::str::from_utf8(entry).ok()?;
        let id = entry.strip_prefix("SLURM_JOB_ID=")?;
        (!id.is_empty() && id.chars().all(|c| c.is_ascii_digit())).then(|| Owner::SlurmJob {
            job_id: id.to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d";

    fn pod() -> Option<Owner> {
        Some(Owner::Pod {
            uid: UID.to_owned(),
        })
    }

    #[test]
    fn kubernetes_pods_under_both_drivers_and_both_versions() {
        let v2_systemd = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod8f2b1c3d_4e5f_4a6b_9c7d_0e1f2a3b4c5d.slice/cri-containerd-abc123.scope\n";
        let v2_cgroupfs =
            "0::/kubepods/besteffort/pod8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d/0123abcd\n";
        let v2_guaranteed = "0::/kubepods.slice/kubepods-pod8f2b1c3d_4e5f_4a6b_9c7d_0e1f2a3b4c5d.slice/cri-containerd-abc.scope\n";
        let v1 = "12:pids:/kubepods/burstable/pod8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d/c1\n\
                  11:memory:/kubepods/burstable/pod8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d/c1\n\
                  1:name=systemd:/kubepods/burstable/pod8f2b1c3d-4e5f-4a6b-9c7d-0e1f2a3b4c5d/c1\n";
        for text in [v2_systemd, v2_cgroupfs, v2_guaranteed, v1] {
            assert_eq!(owner_of(text), pod(), "{text}");
        }
    }

    #[test]
    fn slurm_jobs_under_v1_and_v2() {
        let v1 = "4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n3:cpuset:/slurm/uid_1000/job_4242/step_0\n";
        let v2 = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n";
        for text in [v1, v2] {
            assert_eq!(
                owner_of(text),
                Some(Owner::SlurmJob {
                    job_id: "4242".into()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn anything_else_is_unknown_and_environ_is_the_fallback() {
        assert_eq!(
            owner_of("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(
            owner_of("0::/kubepods.slice/kubepods-podnot_a_uid.slice\n"),
            None
        );
        assert_eq!(owner_of(""), None);
        let environ = b"PATH=/usr/bin\0SLURM_JOB_ID=77\0HOME=/home/a\0";
        assert_eq!(
            slurm_job_from_environ(environ),
            Some(Owner::SlurmJob {
                job_id: "77".into()
            })
        );
        assert_eq!(slurm_job_from_environ(b"SLURM_JOB_ID=\0"), None);
    }
}
