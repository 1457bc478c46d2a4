//! A pool's devices and their health, and the capacity they give.

use std::collections::BTreeMap;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::{DeviceHealth, HealthState, InventoryDevice, NodeInventory};
use serde::{Deserialize, Serialize};

use super::Ge;

/// The latest inventory per node and health per device.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PoolInventory {
    /// node → (as of, devices).
    nodes: BTreeMap<String, (Timestamp, Vec<InventoryDevice>)>,
    /// device or parent GPU uuid → (as of, state).
    health: BTreeMap<String, (Timestamp, HealthState)>,
    model: Option<String>,
}

impl PoolInventory {
    /// Replaces a node's device set. An inventory older than the one held
    /// is history, not state: it is accepted and changes nothing.
    pub(crate) fn replace_node(&mut self, e: &NodeInventory, at: Timestamp) -> Result<(), String> {
        if let Some(model) = &self.model
            && let Some(other) = e.devices.iter().find(|d| &d.model != model)
        {
            return Err(format!(
                "pool {:?} holds {model:?}; device {} of node {} is {:?} (a pool holds one GPU model)",
                e.pool, other.device_uuid, e.node, other.model
            ));
        }
        if self.nodes.get(&e.node).is_some_and(|(held, _)| *held > at) {
            return Ok(());
        }
        if let Some(first) = e.devices.first() {
            self.model = Some(first.model.clone());
        }
        self.nodes.insert(e.node.clone(), (at, e.devices.clone()));
        Ok(())
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
    }

    fn is_failed(&self, d: &InventoryDevice) -> bool {
        let failed = |uuid: &str| matches!(self.health.get(uuid), Some((_, HealthState::Failed)));
        failed(&d.device_uuid) || d.parent_gpu_uuid.as_deref().is_some_and(failed)
    }

    fn devices(&self) -> impl Iterator<Item = &InventoryDevice> {
        self.nodes.values().flat_map(|(_, devices)| devices.iter())
    }

    /// Σ GE of devices whose health is not `failed`.
    pub(crate) fn capacity(&self) -> Ge {
        self.devices()
            .filter(|d| !self.is_failed(d))
            .map(|d| Ge::of(d.slices, d.max_slices))
            .sum()
    }

    /// The pool's GPU model, once an inventory named one.
    pub(crate) fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// A device of the current inventory.
    pub(crate) fn device(&self, uuid: &str) -> Option<&InventoryDevice> {
        self.devices().find(|d| d.device_uuid == uuid)
    }
}
