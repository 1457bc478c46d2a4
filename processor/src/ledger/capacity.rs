//! A pool's devices and their health, and the capacity they give.

use std::collections::BTreeMap;
use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::{DeviceHealth, HealthState, InventoryDevice, NodeInventory};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Ge, Rejection};
use gpuledger_collections::by_text::ByText;

/// The latest inventory per node and health per device, with the
/// capacity they give and an index of devices kept up to date as they
/// change (neither is stored in a snapshot; both are rebuilt from it).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct PoolInventory {
    /// node → (as of, devices).
    nodes: BTreeMap<String, (Timestamp, Vec<InventoryDevice>)>,
    /// device or parent GPU uuid → (as of, state).
    health: BTreeMap<String, (Timestamp, HealthState)>,
    /// Shared with the pool's billing segments.
    model: Option<Arc<str>>,
    /// Device uuid → each node listing it, in name order, with the
    /// device as that node lists it. Asked on every attempt start, so
    /// hashed; the attempts share its uuid texts.
    index: ByText<Vec<(String, InventoryDevice)>>,
    /// Σ GE of devices whose health is not `failed`.
    capacity: Ge,
}

/// What a snapshot keeps of a pool's inventory.
#[derive(Serialize)]
struct StoredRef<'a> {
    nodes: &'a BTreeMap<String, (Timestamp, Vec<InventoryDevice>)>,
    health: &'a BTreeMap<String, (Timestamp, HealthState)>,
    model: &'a Option<Arc<str>>,
}

#[derive(Deserialize)]
struct Stored {
    nodes: BTreeMap<String, (Timestamp, Vec<InventoryDevice>)>,
    health: BTreeMap<String, (Timestamp, HealthState)>,
    model: Option<Arc<str>>,
}

impl Serialize for PoolInventory {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StoredRef {
            nodes: &self.nodes,
            health: &self.health,
            model: &self.model,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for PoolInventory {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let stored = Stored::deserialize(d)?;
        let mut inventory = PoolInventory {
            nodes: stored.nodes,
            health: stored.health,
            model: stored.model,
            index: ByText::default(),
            capacity: Ge::zero(),
        };
        let nodes: Vec<String> = inventory.nodes.keys().cloned().collect();
        for node in nodes {
            inventory.index_node(&node, true);
        }
        inventory.capacity = inventory.count_capacity();
        Ok(inventory)
    }
}

impl PoolInventory {
    /// Replaces a node's device set. An inventory older than the one held
    /// is history, not state: it is accepted and changes nothing.
    pub(crate) fn replace_node(
        &mut self,
        e: &NodeInventory,
        at: Timestamp,
    ) -> Result<(), Rejection> {
        if let Some(model) = &self.model
            && let Some(other) = e.devices.iter().find(|d| *d.model != **model)
        {
            return Err(Rejection::MixedModels {
                pool: e.pool.to_string(),
                model: model.to_string(),
                device: other.device_uuid.to_string(),
                node: e.node.to_string(),
                found: other.model.to_string(),
            });
        }
        if self.nodes.get(&e.node).is_some_and(|(held, _)| *held > at) {
            return Ok(());
        }
        if let Some(first) = e.devices.first()
            && self.model.as_deref() != Some(first.model.as_str())
        {
            self.model = Some(first.model.as_str().into());
        }
        self.index_node(&e.node, false);
        self.nodes.insert(e.node.clone(), (at, e.devices.clone()));
        self.index_node(&e.node, true);
        self.capacity = self.count_capacity();
        Ok(())
    }

    /// Adds `node`'s devices to the index, or takes them out.
    fn index_node(&mut self, node: &str, add: bool) {
        let Some((_, devices)) = self.nodes.get(node) else {
            return;
        };
        for d in devices {
            let uuid = d.device_uuid.as_str();
            if add {
                let places = self.index.get_or_insert_with(uuid, Vec::new);
                // The first of a uuid listed twice in one node wins.
                if let Err(at) = places.binary_search_by(|(n, _)| n.as_str().cmp(node)) {
                    places.insert(at, (node.to_owned(), d.clone()));
                }
            } else if let Some(places) = self.index.get_mut(uuid) {
                places.retain(|(n, _)| n != node);
                if places.is_empty() {
                    self.index.remove(uuid);
                }
            }
        }
    }

    /// Records a health report, unless a later one is already held.
    pub(crate) fn set_health(&mut self, e: &DeviceHealth, at: Timestamp) {
        if self
            .health
            .get(&e.device_uuid)
            .is_some_and(|(held, _)| *held > at)
        {
            return;
        }
        self.health.insert(e.device_uuid.clone(), (at, e.state));
        self.capacity = self.count_capacity();
    }

    fn is_failed(&self, d: &InventoryDevice) -> bool {
        let failed = |uuid: &str| matches!(self.health.get(uuid), Some((_, HealthState::Failed)));
        failed(&d.device_uuid) || d.parent_gpu_uuid.as_deref().is_some_and(failed)
    }

    /// Whether `uuid` is failed (or its parent GPU is), as far as the latest
    /// health tells; a device not in the current inventory may be.
    pub(crate) fn may_be_failed(&self, uuid: &str) -> bool {
        self.device(uuid).is_none_or(|d| self.is_failed(d))
    }

    fn devices(&self) -> impl Iterator<Item = &InventoryDevice> {
        self.nodes.values().flat_map(|(_, devices)| devices.iter())
    }

    /// Σ GE of devices whose health is not `failed`.
    pub(crate) fn capacity(&self) -> Ge {
        self.capacity.clone()
    }

    fn count_capacity(&self) -> Ge {
        self.devices()
            .filter(|d| !self.is_failed(d))
            .map(|d| Ge::of(d.slices, d.max_slices))
            .sum()
    }

    /// The pool's GPU model as the segments share it ("" before any
    /// inventory named one).
    pub(crate) fn shared_model(&self) -> Arc<str> {
        self.model.clone().unwrap_or_default()
    }

    /// A device of the current inventory.
    pub(crate) fn device(&self, uuid: &str) -> Option<&InventoryDevice> {
        // The first node, in name order, that lists it.
        self.index.get(uuid)?.first().map(|(_, d)| d)
    }

    /// `uuid` as the inventory's index holds it, if it lists the device.
    pub(crate) fn shared_uuid(&self, uuid: &str) -> Option<Arc<str>> {
        self.index
            .get_key_value(uuid)
            .map(|(key, _)| Arc::clone(key))
    }
}
