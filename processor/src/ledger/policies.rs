//! A pool's tenant policies, with the GE amounts admission reads on every
//! request worked out once when a policy arrives (a decimal quota turned
//! into GE costs a division or two each time).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuledger_schemas::events::TenantPolicy;

use super::Ge;
use gpuledger_collections::by_name::ByName;

/// Each tenant's policy in one pool. A snapshot stores the policies alone
/// (tenant → policy); the GE amounts are worked out again on restore.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policies {
    by_tenant: ByName<Policy>,
    /// Σ nominal GE over every tenant.
    nominal_total: Ge,
}

#[derive(Debug, Clone)]
struct Policy {
    event: TenantPolicy,
    nominal: Ge,
    burst: Ge,
}

impl Policy {
    fn of(event: TenantPolicy) -> Self {
        Self {
            nominal: Ge::from_decimal(&event.nominal_ge),
            burst: Ge::from_decimal(&event.burst_ge),
            event,
        }
    }
}

impl Policies {
    /// Sets `tenant`'s policy, replacing the one before.
    pub(crate) fn insert(&mut self, tenant: &str, policy: TenantPolicy) {
        self.by_tenant.insert(tenant, Policy::of(policy));
        self.nominal_total = self.by_tenant.values().map(|p| p.nominal.clone()).sum();
    }

    pub(crate) fn get(&self, tenant: &str) -> Option<&TenantPolicy> {
        self.by_tenant.get(tenant).map(|p| &p.event)
    }

    pub(crate) fn contains_key(&self, tenant: &str) -> bool {
        self.by_tenant.contains_key(tenant)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &TenantPolicy> {
        self.by_tenant.values().map(|p| &p.event)
    }

    /// `tenant`'s policy with its nominal and burst GE, in one lookup.
    pub(crate) fn with_ge(&self, tenant: &str) -> Option<(&TenantPolicy, &Ge, &Ge)> {
        self.by_tenant
            .get(tenant)
            .map(|p| (&p.event, &p.nominal, &p.burst))
    }

    /// `tenant`'s nominal and burst GE (zero without a policy).
    pub(crate) fn ge(&self, tenant: &str) -> (Ge, Ge) {
        self.by_tenant
            .get(tenant)
            .map_or((Ge::zero(), Ge::zero()), |p| {
                (p.nominal.clone(), p.burst.clone())
            })
    }

    /// Σ nominal GE of every tenant.
    pub(crate) fn nominal_total(&self) -> &Ge {
        &self.nominal_total
    }
}

impl PartialEq for Policies {
    /// Equal when every tenant has the same policy (the GE follow).
    fn eq(&self, other: &Self) -> bool {
        self.by_tenant.len() == other.by_tenant.len()
            && self
                .by_tenant
                .iter()
                .zip(other.by_tenant.iter())
                .all(|((a, pa), (b, pb))| a == b && pa.event == pb.event)
    }
}

impl Serialize for Policies {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.by_tenant.iter().map(|(tenant, p)| (tenant, &p.event)))
    }
}

impl<'de> Deserialize<'de> for Policies {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut policies = Policies::default();
        for (tenant, policy) in BTreeMap::<String, TenantPolicy>::deserialize(d)? {
            policies.insert(&tenant, policy);
        }
        Ok(policies)
    }
}

#[cfg(test)]
mod tests {
    use gpuledger_schemas::Decimal;

    use super::*;

    fn policy(tenant: &str, nominal: &str, burst: &str) -> TenantPolicy {
        let json = format!(
            r#"{{"pool":"p","tenant":"{tenant}","nominal_ge":"{nominal}","burst_ge":"{burst}","enforcement":"deny"}}"#
        );
        serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn amounts_follow_the_policy_in_force_and_survive_a_snapshot() {
        let mut p = Policies::default();
        p.insert("a", policy("a", "1.5", "2"));
        p.insert("b", policy("b", "0.25", "0"));
        p.insert("a", policy("a", "3", "1"));
        let ge = |d: &str| Ge::from_decimal(&d.parse::<Decimal>().unwrap());
        assert_eq!(p.ge("a"), (ge("3"), ge("1")));
        assert_eq!(p.ge("c"), (Ge::zero(), Ge::zero()));
        assert_eq!(p.nominal_total(), &ge("3.25"));

        let text = serde_json::to_string(&p).unwrap();
        let back: Policies = serde_json::from_str(&text).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.ge("b"), (ge("0.25"), ge("0")));
        assert_eq!(back.nominal_total(), p.nominal_total());
        assert_eq!(back.values().count(), 2);
    }
}
