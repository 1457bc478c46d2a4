//! The statement as FinOps FOCUS 1.2 cost rows (`GET /v1/export/focus`).
//!
//! One row per charge of a tenant's statement line (see
//! `schemas::billing::Charge`): a stretch of a job attempt's compute, the
//! credit for time on a failed device, unused reserved capacity, a storage
//! or egress record, the tenant's share of idle capacity, the pool's
//! overhead. `BilledCost` is the charge's share of its rounded line, so a
//! tenant's rows add up to its statement `total` to the cent.
//!
//! Internal chargeback has no negotiated discounts or amortised
//! commitments: the price book is the list, so `ListCost`,
//! `ContractedCost`, `EffectiveCost` and `BilledCost` are the same amount.
//! The 21 mandatory columns come first in the specification's order, then
//! the conditional ones that apply, then the `x_` columns with the GPU
//! specifics.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Decimal128Builder, Int32Builder, RecordBatch, StringBuilder,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use gpuledger_schemas::Decimal;
use gpuledger_schemas::billing::{Charge, Charged, Statement, UseKind};
use gpuledger_schemas::events::UsageKind;
use gpuledger_schemas::pricing::StatementLine;
use gpuledger_schemas::time::Timestamp;

use crate::access::Access;
use crate::columns::{ge_text, utc};

/// Who issues the charges: the platform running gpuledger.
const ISSUER: &str = "gpuledger";
/// The billing account: the shared GPU platform.
const ACCOUNT_ID: &str = "gpuledger";
const ACCOUNT_NAME: &str = "Shared GPU platform (internal chargeback)";

/// Money: what the statement rounds to.
const MONEY: DataType = DataType::Decimal128(38, 2);
const MONEY_SCALE: u32 = 2;
/// Quantities: GE of 1/7 makes hours no finite decimal holds.
const QUANTITY: DataType = DataType::Decimal128(38, 12);
const QUANTITY_SCALE: u32 = 12;

/// The columns, in order: (name, type, nullable).
fn columns() -> Vec<(&'static str, DataType, bool)> {
    vec![
        // Mandatory (FOCUS 1.2).
        ("BilledCost", MONEY, false),
        ("BillingAccountId", DataType::Utf8, false),
        ("BillingAccountName", DataType::Utf8, false),
        ("BillingCurrency", DataType::Utf8, false),
        ("BillingPeriodEnd", utc(), false),
        ("BillingPeriodStart", utc(), false),
        ("ChargeCategory", DataType::Utf8, false),
        ("ChargeClass", DataType::Utf8, true),
        ("ChargeDescription", DataType::Utf8, false),
        ("ChargePeriodEnd", utc(), false),
        ("ChargePeriodStart", utc(), false),
        ("ContractedCost", MONEY, false),
        ("EffectiveCost", MONEY, false),
        ("InvoiceIssuerName", DataType::Utf8, false),
        ("ListCost", MONEY, false),
        ("PricingQuantity", QUANTITY, true),
        ("PricingUnit", DataType::Utf8, true),
        ("ProviderName", DataType::Utf8, false),
        ("PublisherName", DataType::Utf8, false),
        ("ServiceCategory", DataType::Utf8, false),
        ("ServiceName", DataType::Utf8, false),
        // Conditional, where they apply.
        ("CapacityReservationId", DataType::Utf8, true),
        ("CapacityReservationStatus", DataType::Utf8, true),
        ("ConsumedQuantity", QUANTITY, true),
        ("ConsumedUnit", DataType::Utf8, true),
        ("PricingCategory", DataType::Utf8, true),
        ("ResourceId", DataType::Utf8, true),
        ("ResourceName", DataType::Utf8, true),
        ("ResourceType", DataType::Utf8, true),
        ("SkuId", DataType::Utf8, true),
        ("SubAccountId", DataType::Utf8, false),
        ("SubAccountName", DataType::Utf8, false),
        ("Tags", DataType::Utf8, false),
        // GPU specifics.
        ("x_Pool", DataType::Utf8, false),
        ("x_StatementLine", DataType::Utf8, false),
        ("x_Kind", DataType::Utf8, true),
        ("x_JobId", DataType::Utf8, true),
        ("x_Attempt", DataType::Int32, true),
        ("x_GpuModel", DataType::Utf8, true),
        ("x_MigProfile", DataType::Utf8, true),
        // GE held: whole GPUs (`2`) or MIG slices of one (`3/7`).
        ("x_Slices", DataType::Utf8, true),
    ]
}

/// The export's schema.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        columns()
            .into_iter()
            .map(|(name, data_type, nullable)| Field::new(name, data_type, nullable))
            .collect::<Vec<_>>(),
    ))
}

/// How one charge reads in FOCUS terms.
struct Described {
    category: &'static str,
    service_category: &'static str,
    service_name: &'static str,
    description: String,
    pricing_category: Option<&'static str>,
    reservation: Option<(String, &'static str)>,
    resource: Option<(String, String, &'static str)>,
    sku: Option<String>,
}

fn describe(c: &Charge) -> Described {
    let pool = &c.pool;
    match &c.charged {
        Charged::Attempt {
            job_id,
            attempt,
            kind,
            model,
            slices,
            max_slices,
        } => {
            let resource = Some((
                format!("{pool}/jobs/{job_id}/attempts/{attempt}"),
                format!("{job_id} attempt {attempt}"),
                "GPU job attempt",
            ));
            let sku = Some(format!("{model}/{}", kind.as_str()));
            if c.line == StatementLine::HealthCredit {
                return Described {
                    category: "Credit",
                    service_category: "AI and Machine Learning",
                    service_name: "GPU compute",
                    description: format!(
                        "credit for time of {job_id} attempt {attempt} on a failed device in pool {pool}"
                    ),
                    pricing_category: None,
                    reservation: None,
                    resource,
                    sku,
                };
            }
            let reservation = (*kind == UseKind::Reserved)
                .then(|| (format!("{pool}/reservations/{}", c.tenant), "Used"));
            Described {
                category: "Usage",
                service_category: "AI and Machine Learning",
                service_name: "GPU compute",
                description: format!(
                    "{} use of {} by {job_id} attempt {attempt} in pool {pool}",
                    kind.as_str(),
                    held(*slices, *max_slices, model),
                ),
                pricing_category: Some(match kind {
                    UseKind::Reserved => "Committed",
                    UseKind::Quota => "Other",
                    UseKind::Burst | UseKind::Unadmitted => "Standard",
                }),
                reservation,
                resource,
                sku,
            }
        }
        Charged::UnusedReservations { model } => Described {
            category: "Usage",
            service_category: "AI and Machine Learning",
            service_name: "GPU reservations",
            description: format!("reserved {model} capacity left unused in pool {pool}"),
            pricing_category: Some("Committed"),
            reservation: Some((format!("{pool}/reservations/{}", c.tenant), "Unused")),
            resource: Some((
                format!("{pool}/reservations/{}", c.tenant),
                format!("{} reservations in {pool}", c.tenant),
                "GPU reservation",
            )),
            sku: Some(format!("{model}/reserved")),
        },
        Charged::Usage { kind } => {
            let (service_category, service_name, what) = match kind {
                UsageKind::StorageGbHours => ("Storage", "Storage", "storage"),
                _ => ("Networking", "Data transfer", "data egress"),
            };
            Described {
                category: "Usage",
                service_category,
                service_name,
                description: format!("{what} of pool {pool}"),
                pricing_category: Some("Standard"),
                reservation: None,
                resource: Some((
                    format!("{pool}/{}", kind.as_str()),
                    format!("{what} in {pool}"),
                    service_name,
                )),
                sku: Some(kind.as_str().to_owned()),
            }
        }
        Charged::Energy => Described {
            category: "Usage",
            service_category: "Other",
            service_name: "GPU energy",
            description: format!("energy used by {}'s devices in pool {pool}", c.tenant),
            pricing_category: Some("Standard"),
            reservation: None,
            resource: Some((pool.clone(), pool.clone(), "GPU pool")),
            sku: Some("energy".to_owned()),
        },
        Charged::Pool => {
            let (service_name, description) = if c.line == StatementLine::SharedIdle {
                (
                    "Shared idle capacity",
                    format!("share of the idle capacity of pool {pool}"),
                )
            } else {
                (
                    "Platform overhead",
                    format!("overhead of pool {pool} on the lines above"),
                )
            };
            Described {
                category: "Adjustment",
                service_category: "AI and Machine Learning",
                service_name,
                description,
                pricing_category: None,
                reservation: None,
                resource: Some((pool.clone(), pool.clone(), "GPU pool")),
                sku: None,
            }
        }
    }
}

/// What an attempt held: `2 × H200`, `3/7 of a A100`.
fn held(slices: i64, max_slices: i64, model: &str) -> String {
    match max_slices {
        1 => format!("{slices} × {model}"),
        _ => format!("{} of a {model}", ge_text(slices, max_slices)),
    }
}

/// An exact decimal as the unscaled `i128` of a `Decimal128(38, scale)`.
fn unscaled(d: &Decimal, scale: u32) -> Result<i128, ArrowError> {
    crate::columns::unscaled(d.as_rational(), scale)
}

/// The FOCUS rows of `statement` that `access` may read.
pub fn rows(statement: &Statement, access: &Access) -> Result<RecordBatch, ArrowError> {
    let money = || Decimal128Builder::new().with_data_type(MONEY);
    let quantity = || Decimal128Builder::new().with_data_type(QUANTITY);
    let time = || TimestampMicrosecondBuilder::new().with_timezone("UTC");
    let text = StringBuilder::new;
    let (mut billed, mut contracted, mut effective, mut list) =
        (money(), money(), money(), money());
    let (mut account_id, mut account_name, mut currency) = (text(), text(), text());
    let (mut period_end, mut period_start, mut charge_end, mut charge_start) =
        (time(), time(), time(), time());
    let (mut category, mut class, mut description) = (text(), text(), text());
    let (mut issuer, mut provider, mut publisher) = (text(), text(), text());
    let (mut pricing_quantity, mut pricing_unit) = (quantity(), text());
    let (mut service_category, mut service_name) = (text(), text());
    let (mut reservation_id, mut reservation_status) = (text(), text());
    let (mut consumed_quantity, mut consumed_unit, mut pricing_category) =
        (quantity(), text(), text());
    let (mut resource_id, mut resource_name, mut resource_type, mut sku) =
        (text(), text(), text(), text());
    let (mut sub_id, mut sub_name, mut tags) = (text(), text(), text());
    let (mut x_pool, mut x_line, mut x_kind, mut x_job) = (text(), text(), text(), text());
    let mut x_attempt = Int32Builder::new();
    let (mut x_model, mut x_profile, mut x_slices) = (text(), text(), text());

    let micros = |t: Timestamp| t.as_micros();
    for tenant in statement
        .tenants
        .iter()
        .filter(|t| access.allows(&t.tenant))
    {
        for c in &tenant.charges {
            let d = describe(c);
            let cost = unscaled(&c.billed, MONEY_SCALE)?;
            for column in [&mut billed, &mut contracted, &mut effective, &mut list] {
                column.append_value(cost);
            }
            account_id.append_value(ACCOUNT_ID);
            account_name.append_value(ACCOUNT_NAME);
            currency.append_value(&statement.currency);
            period_end.append_value(micros(statement.period.end()));
            period_start.append_value(micros(statement.period.start()));
            category.append_value(d.category);
            class.append_null();
            description.append_value(&d.description);
            charge_end.append_value(micros(c.end));
            charge_start.append_value(micros(c.start));
            issuer.append_value(ISSUER);
            provider.append_value(ISSUER);
            publisher.append_value(ISSUER);
            service_category.append_value(d.service_category);
            service_name.append_value(d.service_name);
            // What was used, priced in the unit its rate is quoted in:
            // storage is priced per GB-month of 730 hours.
            let used = c
                .quantity
                .as_ref()
                .map(|q| unscaled(&q.round_half_even(QUANTITY_SCALE), QUANTITY_SCALE))
                .transpose()?;
            let usage = d.category == "Usage";
            match (used, c.unit()) {
                (Some(q), Some(unit)) if usage => {
                    consumed_quantity.append_value(q);
                    consumed_unit.append_value(unit);
                }
                _ => {
                    consumed_quantity.append_null();
                    consumed_unit.append_null();
                }
            }
            let priced = c
                .quantity
                .as_ref()
                .zip(c.unit())
                .map(|(q, unit)| match unit {
                    "GB-Hours" => (
                        q.checked_div(&gpuledger_schemas::Rational::from_integer(730))
                            .unwrap_or_default(),
                        "GB-Months",
                    ),
                    _ => (q.clone(), unit),
                });
            match priced {
                Some((q, unit)) => {
                    pricing_quantity.append_value(unscaled(
                        &q.round_half_even(QUANTITY_SCALE),
                        QUANTITY_SCALE,
                    )?);
                    pricing_unit.append_value(unit);
                }
                None => {
                    pricing_quantity.append_null();
                    pricing_unit.append_null();
                }
            }
            reservation_id.append_option(d.reservation.as_ref().map(|(id, _)| id));
            reservation_status.append_option(d.reservation.as_ref().map(|(_, s)| *s));
            pricing_category.append_option(d.pricing_category);
            resource_id.append_option(d.resource.as_ref().map(|(id, _, _)| id));
            resource_name.append_option(d.resource.as_ref().map(|(_, name, _)| name));
            resource_type.append_option(d.resource.as_ref().map(|(_, _, kind)| *kind));
            sku.append_option(d.sku.as_ref());
            sub_id.append_value(&c.tenant);
            sub_name.append_value(&c.tenant);
            let mut tag = serde_json::json!({
                "pool": c.pool,
                "statement_line": c.line.as_str(),
            });
            x_pool.append_value(&c.pool);
            x_line.append_value(c.line.as_str());
            match &c.charged {
                Charged::Attempt {
                    job_id,
                    attempt,
                    kind,
                    model,
                    slices,
                    max_slices,
                } => {
                    tag["job_id"] = job_id.as_str().into();
                    tag["kind"] = kind.as_str().into();
                    x_kind.append_value(kind.as_str());
                    x_job.append_value(job_id);
                    x_attempt.append_value(*attempt);
                    x_model.append_value(model);
                    if slices < max_slices {
                        x_profile.append_value(format!("{slices}g"));
                    } else {
                        x_profile.append_null();
                    }
                    x_slices.append_value(ge_text(*slices, *max_slices));
                }
                other => {
                    if let Charged::UnusedReservations { .. } = other {
                        x_kind.append_value(UseKind::Reserved.as_str());
                    } else {
                        x_kind.append_null();
                    }
                    x_job.append_null();
                    x_attempt.append_null();
                    match other {
                        Charged::UnusedReservations { model } => x_model.append_value(model),
                        _ => x_model.append_null(),
                    }
                    x_profile.append_null();
                    x_slices.append_null();
                }
            }
            tags.append_value(tag.to_string());
        }
    }
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(billed.finish()),
        Arc::new(account_id.finish()),
        Arc::new(account_name.finish()),
        Arc::new(currency.finish()),
        Arc::new(period_end.finish()),
        Arc::new(period_start.finish()),
        Arc::new(category.finish()),
        Arc::new(class.finish()),
        Arc::new(description.finish()),
        Arc::new(charge_end.finish()),
        Arc::new(charge_start.finish()),
        Arc::new(contracted.finish()),
        Arc::new(effective.finish()),
        Arc::new(issuer.finish()),
        Arc::new(list.finish()),
        Arc::new(pricing_quantity.finish()),
        Arc::new(pricing_unit.finish()),
        Arc::new(provider.finish()),
        Arc::new(publisher.finish()),
        Arc::new(service_category.finish()),
        Arc::new(service_name.finish()),
        Arc::new(reservation_id.finish()),
        Arc::new(reservation_status.finish()),
        Arc::new(consumed_quantity.finish()),
        Arc::new(consumed_unit.finish()),
        Arc::new(pricing_category.finish()),
        Arc::new(resource_id.finish()),
        Arc::new(resource_name.finish()),
        Arc::new(resource_type.finish()),
        Arc::new(sku.finish()),
        Arc::new(sub_id.finish()),
        Arc::new(sub_name.finish()),
        Arc::new(tags.finish()),
        Arc::new(x_pool.finish()),
        Arc::new(x_line.finish()),
        Arc::new(x_kind.finish()),
        Arc::new(x_job.finish()),
        Arc::new(x_attempt.finish()),
        Arc::new(x_model.finish()),
        Arc::new(x_profile.finish()),
        Arc::new(x_slices.finish()),
    ];
    RecordBatch::try_new(schema(), arrays)
}
