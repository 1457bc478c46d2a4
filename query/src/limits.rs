//! What one query may take: memory of its own within the service's, a
//! place among its role's running queries, values no larger than a bound,
//! and an answer no larger than a bound (docs/security.md, "Query limits").
//!
//! - Every query runs with its own memory pool, [`QueryPool`]: at most
//!   `query_memory_bytes`, and within the service's pool, so one query
//!   cannot take the memory of all.
//! - Queries of a role run at most so many at once ([`Slots`]); team leads
//!   share their slots, so however many a lead sends, finance keeps its own.
//! - Functions whose output size the caller picks (`repeat`, `lpad`,
//!   `rpad`, `array_repeat`) refuse a value past `max_value_bytes` before
//!   they build it ([`Capped`]); aggregates such as `string_agg` count in
//!   the query's pool.
//! - Encoders stop an answer past `max_result_bytes`.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result, ScalarValue, exec_err, resources_err};
use datafusion::execution::memory_pool::{MemoryLimit, MemoryPool, MemoryReservation};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
};
use datafusion::prelude::SessionContext;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::access::Access;

/// The limits of the query service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Memory one query may hold.
    pub query_memory_bytes: usize,
    /// Queries of all team leads together that run at once.
    pub lead_queries: usize,
    /// Queries of admin and finance tokens together that run at once.
    pub reader_queries: usize,
    /// The largest value a size-picking function may make.
    pub max_value_bytes: usize,
    /// The largest answer one query may send.
    pub max_result_bytes: usize,
}

impl Limits {
    /// Defaults for a service with `memory_bytes` for all its queries: a
    /// quarter of it per query, four lead queries and eight others at
    /// once, 16 MiB values, 1 GiB answers.
    pub fn for_memory(memory_bytes: usize) -> Self {
        Self {
            query_memory_bytes: (memory_bytes / 4).max(64 << 20),
            lead_queries: 4,
            reader_queries: 8,
            max_value_bytes: 16 << 20,
            max_result_bytes: 1 << 30,
        }
    }
}

/// Places for running queries, by role.
#[derive(Debug, Clone)]
pub struct Slots {
    leads: Arc<Semaphore>,
    readers: Arc<Semaphore>,
}

impl Slots {
    pub fn new(limits: &Limits) -> Self {
        Self {
            leads: Arc::new(Semaphore::new(limits.lead_queries.max(1))),
            readers: Arc::new(Semaphore::new(limits.reader_queries.max(1))),
        }
    }

    /// A place for a query of `access`, once one is free.
    pub async fn enter(&self, access: &Access) -> OwnedSemaphorePermit {
        let slots = match access {
            Access::All => &self.readers,
            Access::Tenant(_) => &self.leads,
        };
        slots
            .clone()
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable!("the slots are never closed"))
    }
}

/// `base` with a memory pool of the query's own: at most `limit` bytes,
/// and within `base`'s pool.
pub fn for_one_query(base: &SessionState, limit: usize) -> SessionContext {
    let shared = base.runtime_env();
    let runtime = RuntimeEnv {
        memory_pool: Arc::new(QueryPool::new(shared.memory_pool.clone(), limit)),
        disk_manager: shared.disk_manager.clone(),
        cache_manager: shared.cache_manager.clone(),
        object_store_registry: shared.object_store_registry.clone(),
    };
    let state = SessionStateBuilder::new_from_existing(base.clone())
        .with_runtime_env(Arc::new(runtime))
        .build();
    SessionContext::new_with_state(state)
}

/// One query's memory: what it holds counts against its own limit and the
/// service's pool alike.
#[derive(Debug)]
pub struct QueryPool {
    shared: Arc<dyn MemoryPool>,
    limit: usize,
    used: AtomicUsize,
}

impl QueryPool {
    pub fn new(shared: Arc<dyn MemoryPool>, limit: usize) -> Self {
        Self {
            shared,
            limit,
            used: AtomicUsize::new(0),
        }
    }
}

impl std::fmt::Display for QueryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "query pool: {} of {} bytes, within {}",
            self.used.load(Ordering::Relaxed),
            self.limit,
            self.shared
        )
    }
}

impl MemoryPool for QueryPool {
    fn name(&self) -> &str {
        "query"
    }

    fn register(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.shared.register(consumer);
    }

    fn unregister(&self, consumer: &datafusion::execution::memory_pool::MemoryConsumer) {
        self.shared.unregister(consumer);
    }

    fn grow(&self, reservation: &MemoryReservation, additional: usize) {
        self.used.fetch_add(additional, Ordering::Relaxed);
        self.shared.grow(reservation, additional);
    }

    fn shrink(&self, reservation: &MemoryReservation, shrink: usize) {
        self.used.fetch_sub(shrink, Ordering::Relaxed);
        self.shared.shrink(reservation, shrink);
    }

    fn try_grow(&self, reservation: &MemoryReservation, additional: usize) -> Result<()> {
        let before = self.used.fetch_add(additional, Ordering::Relaxed);
        if before.saturating_add(additional) > self.limit {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return resources_err!(
                "the query needs more than its {} MiB of memory (--query-memory-mb)",
                self.limit >> 20
            );
        }
        if let Err(e) = self.shared.try_grow(reservation, additional) {
            self.used.fetch_sub(additional, Ordering::Relaxed);
            return Err(e);
        }
        Ok(())
    }

    fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn memory_limit(&self) -> MemoryLimit {
        MemoryLimit::Finite(self.limit)
    }
}

/// How a capped function's output size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Sizing {
    /// `repeat(text, n)`: the text's bytes times `n`.
    Repeat,
    /// `lpad`/`rpad(text, n [, fill])`: `n` characters of up to 4 bytes.
    Pad,
    /// `array_repeat(value, n)`: `n` elements of at least 8 bytes.
    ArrayRepeat,
}

/// A built-in function whose output size the caller picks, refusing a
/// value larger than `max_bytes` before it is made.
#[derive(Debug)]
pub struct Capped {
    inner: Arc<dyn ScalarUDFImpl>,
    sizing: Sizing,
    max_bytes: usize,
}

impl PartialEq for Capped {
    fn eq(&self, other: &Self) -> bool {
        self.inner.name() == other.inner.name()
            && self.sizing == other.sizing
            && self.max_bytes == other.max_bytes
    }
}

impl Eq for Capped {}

impl Hash for Capped {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.inner.name().hash(state);
        self.sizing.hash(state);
        self.max_bytes.hash(state);
    }
}

/// The capped versions of the session's size-picking functions, to
/// register in place of them.
pub fn capped_functions(ctx: &SessionContext, max_bytes: usize) -> Vec<ScalarUDF> {
    let state = ctx.state();
    [
        ("repeat", Sizing::Repeat),
        ("lpad", Sizing::Pad),
        ("rpad", Sizing::Pad),
        ("array_repeat", Sizing::ArrayRepeat),
    ]
    .into_iter()
    .filter_map(|(name, sizing)| {
        let inner = state.scalar_functions().get(name)?.inner().clone();
        Some(ScalarUDF::new_from_impl(Capped {
            inner,
            sizing,
            max_bytes,
        }))
    })
    .collect()
}

/// The largest of an integer argument's values (0 where null).
fn largest_count(arg: &ColumnarValue) -> i64 {
    match arg {
        ColumnarValue::Scalar(s) => scalar_count(s),
        ColumnarValue::Array(a) => (0..a.len())
            .filter(|i| a.is_valid(*i))
            .filter_map(|i| ScalarValue::try_from_array(a, i).ok())
            .map(|s| scalar_count(&s))
            .max()
            .unwrap_or(0),
    }
}

fn scalar_count(s: &ScalarValue) -> i64 {
    match s.cast_to(&DataType::Int64) {
        Ok(ScalarValue::Int64(Some(n))) => n,
        _ => 0,
    }
}

/// The longest text of a text argument, in bytes.
fn longest_text(arg: &ColumnarValue) -> usize {
    match arg {
        ColumnarValue::Scalar(s) => match s {
            ScalarValue::Utf8(Some(t))
            | ScalarValue::LargeUtf8(Some(t))
            | ScalarValue::Utf8View(Some(t)) => t.len(),
            _ => 0,
        },
        ColumnarValue::Array(a) => match a.data_type() {
            DataType::Utf8 => a.as_string::<i32>().iter().flatten().map(str::len).max(),
            DataType::LargeUtf8 => a.as_string::<i64>().iter().flatten().map(str::len).max(),
            DataType::Utf8View => a.as_string_view().iter().flatten().map(str::len).max(),
            _ => None,
        }
        .unwrap_or(0),
    }
}

impl Capped {
    /// The most bytes one value of the call could take.
    fn largest_output(&self, args: &[ColumnarValue]) -> u128 {
        let count = args.get(1).map_or(0, largest_count).max(0) as u128;
        match self.sizing {
            Sizing::Repeat => args.first().map_or(0, longest_text) as u128 * count,
            Sizing::Pad => count * 4,
            Sizing::ArrayRepeat => count * 8,
        }
    }
}

impl ScalarUDFImpl for Capped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let largest = self.largest_output(&args.args);
        if largest > self.max_bytes as u128 {
            return exec_err!(
                "{} would make a value of {largest} bytes; at most {} (--max-value-mb)",
                self.inner.name(),
                self.max_bytes
            );
        }
        self.inner.invoke_with_args(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Leads share their places: once they hold them all, another lead
    /// waits, and finance (every tenant) still gets one at once.
    #[tokio::test]
    async fn leads_filling_their_places_never_hold_finance_up() {
        let limits = Limits {
            lead_queries: 2,
            reader_queries: 1,
            ..Limits::for_memory(1 << 30)
        };
        let slots = Slots::new(&limits);
        let (a, b) = (
            Access::Tenant("team-a".into()),
            Access::Tenant("team-b".into()),
        );
        let held = [slots.enter(&a).await, slots.enter(&b).await];
        let short = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(short, slots.enter(&a)).await.is_err(),
            "a third lead query ran beside two"
        );
        let finance = tokio::time::timeout(short, slots.enter(&Access::All)).await;
        assert!(finance.is_ok(), "finance waited behind the leads");
        drop(held);
        assert!(tokio::time::timeout(short, slots.enter(&b)).await.is_ok());
    }
}
