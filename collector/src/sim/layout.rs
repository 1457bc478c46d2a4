//! The simulated fleet's hardware: nodes, GPU models and MIG layouts, from
//! the command line or a fleet file.

/// The fleet's hardware, node by node: what `--fleet FILE` holds, or what
/// `--nodes`, `--gpus-per-node`, `--model` and `--mig` describe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetLayout {
    pub nodes: Vec<NodeLayout>,
}

/// One node: its name, GPU model and GPUs, each a list of MIG profiles
/// (`"3g.40gb"`; empty: a whole GPU); optionally its own pool and the
/// tenants whose jobs run on it (otherwise `--pool` and `--tenants`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLayout {
    pub name: String,
    pub model: String,
    pub gpus: Vec<Vec<String>>,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub tenants: Option<TenantMix>,
}

/// Tenants and how often each one's job is the next to take a free device:
/// `team-llm:3` is three times as likely as a tenant of weight 1 (the
/// default, `team-llm`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct TenantMix(Vec<(String, u64)>);

impl TenantMix {
    /// Reads `name` or `name:weight` items; a weight is a whole number
    /// from 1 to 1000.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let mut mix = Vec::new();
        for item in items {
            let item = item.as_ref();
            let (name, weight) = match item.rsplit_once(':') {
                Some((name, weight)) => {
                    let weight = weight.parse().ok().filter(|w| (1..=1000).contains(w));
                    let weight = weight.ok_or_else(|| {
                        format!("tenant {item:?}: the weight after ':' must be a whole number from 1 to 1000")
                    })?;
                    (name, weight)
                }
                None => (item, 1),
            };
            if name.is_empty() || mix.iter().any(|(n, _)| n == name) {
                return Err(format!("tenant {name:?} is empty or repeated"));
            }
            mix.push((name.to_owned(), weight));
        }
        Ok(Self(mix))
    }

    /// No tenants: nobody holds a device.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The tenant a draw of `roll` (any number) picks, by weight.
    pub(super) fn pick(&self, roll: u64) -> Option<&str> {
        let total: u64 = self.0.iter().map(|(_, w)| w).sum();
        let mut left = roll % total.max(1);
        for (name, weight) in &self.0 {
            if left < *weight {
                return Some(name);
            }
            left -= weight;
        }
        None
    }
}

impl TryFrom<Vec<String>> for TenantMix {
    type Error = String;

    fn try_from(items: Vec<String>) -> Result<Self, String> {
        Self::parse(&items)
    }
}

/// The compute slices of a Hopper GPU.
pub(super) const MAX_SLICES: i32 = 7;

impl FleetLayout {
    /// `nodes` nodes of `gpus` GPUs of `model`, named `<pool>-nNN`; with
    /// `mig`, each node's first GPU split 3g+2g+1g+1g.
    pub fn uniform(pool: &str, model: &str, nodes: u32, gpus: u32, mig: bool) -> Self {
        let split = ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
            .map(str::to_owned)
            .to_vec();
        FleetLayout {
            nodes: (0..nodes)
                .map(|n| NodeLayout {
                    name: format!("{pool}-n{:02}", n + 1),
                    model: model.to_owned(),
                    gpus: (0..gpus)
                        .map(|g| {
                            if mig && g == 0 {
                                split.clone()
                            } else {
                                Vec::new()
                            }
                        })
                        .collect(),
                    pool: None,
                    tenants: None,
                })
                .collect(),
        }
    }

    /// Reads and checks a fleet file.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let layout: FleetLayout = serde_json::from_str(text).map_err(|e| e.to_string())?;
        layout.check()?;
        Ok(layout)
    }

    /// Every name once, every GPU a model NVML names, one model per pool,
    /// every split one the GPU can hold: profiles of 1, 2, 3, 4 or 7 slices
    /// adding up to at most 7.
    pub fn check(&self) -> Result<(), String> {
        let mut names = std::collections::BTreeSet::new();
        // Per pool (`None`: the default one), the model of its first node.
        let mut models = std::collections::BTreeMap::new();
        if self.nodes.is_empty() {
            return Err("the fleet has no nodes".to_owned());
        }
        for node in &self.nodes {
            if node.name.is_empty() || !names.insert(node.name.as_str()) {
                return Err(format!("node name {:?} is empty or repeated", node.name));
            }
            if node.model.is_empty() {
                return Err(format!("node {}: model is empty", node.name));
            }
            if node.pool.as_deref() == Some("") {
                return Err(format!("node {}: pool is empty", node.name));
            }
            let model = *models.entry(node.pool.as_deref()).or_insert(&node.model);
            if *model != node.model {
                return Err(format!(
                    "node {}: a pool holds one GPU model, and its pool already has {model}",
                    node.name
                ));
            }
            for (g, split) in node.gpus.iter().enumerate() {
                let mut slices = 0;
                for profile in split {
                    slices += mig_profile(profile)
                        .map_err(|e| format!("node {} GPU {g}: {e}", node.name))?
                        .0;
                }
                if slices > MAX_SLICES {
                    return Err(format!(
                        "node {} GPU {g}: {split:?} takes {slices} slices of {MAX_SLICES}",
                        node.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Slices and memory of a MIG profile name such as `3g.40gb`.
pub(super) fn mig_profile(name: &str) -> Result<(i32, i64), String> {
    let bad = || format!("MIG profile {name:?} is not like 3g.40gb with 1, 2, 3, 4 or 7 slices");
    let (slices, memory) = name.split_once("g.").ok_or_else(bad)?;
    let slices: i32 = slices.parse().map_err(|_| bad())?;
    let gb: i64 = memory
        .strip_suffix("gb")
        .and_then(|m| m.parse().ok())
        .filter(|m| *m > 0)
        .ok_or_else(bad)?;
    if ![1, 2, 3, 4, 7].contains(&slices) {
        return Err(bad());
    }
    Ok((slices, gb * 1_000_000_000))
}

/// A whole GPU's memory by model: an H100 has 80 GB, others (H200) 141 GB.
pub(super) fn gpu_memory(model: &str) -> i64 {
    if model.contains("H100") {
        80_000_000_000
    } else {
        141_000_000_000
    }
}
