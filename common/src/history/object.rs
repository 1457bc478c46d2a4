//! A history root in an object store (`s3://bucket/prefix`). An object is
//! written by one PUT, which is atomic: a reader lists and reads a whole
//! file or does not see it, so no temporary name or rename is needed.
//!
//! The history writers are synchronous (they run on blocking threads), so
//! every call runs on a small runtime of the root's own and is waited for.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::HistoryFile;

/// A prefix in an object store, and the runtime its calls run on.
#[derive(Debug)]
pub struct ObjectRoot {
    url: String,
    /// `s3://bucket`: what a query engine registers the store under.
    store_url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// Always present until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for ObjectRoot {
    /// Without waiting: a root may be dropped on an async thread.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl ObjectRoot {
    /// `s3://bucket/prefix`, configured from the `AWS_*` environment
    /// variables (credentials, `AWS_REGION`, `AWS_ENDPOINT`,
    /// `AWS_ALLOW_HTTP`, …).
    pub fn parse(url: &str) -> Result<Self, String> {
        let fail = |e: &dyn std::fmt::Display| format!("history root {url}: {e}");
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| fail(&"only s3:// object-store URLs are supported"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(fail(&"the URL names no bucket"));
        }
        let store = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| fail(&e))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("gpuledger-history-io")
            .enable_all()
            .build()
            .map_err(|e| fail(&e))?;
        Ok(ObjectRoot {
            url: url.trim_end_matches('/').to_owned(),
            store_url: format!("s3://{bucket}"),
            store: Arc::new(store),
            prefix: ObjectPath::from(prefix.trim_matches('/')),
            runtime: Some(runtime),
        })
    }

    /// The URL it was made from, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store as readers should see it, with the URL (`s3://bucket`)
    /// it answers for: listings leave out the files a merged file covers
    /// while compaction has not yet removed them ([`super::SkipCovered`]).
    pub fn store(&self) -> (&str, Arc<dyn ObjectStore>) {
        (
            &self.store_url,
            Arc::new(super::SkipCovered::new(self.store.clone())),
        )
    }

    /// The URL of `table`'s folder, ending in `/`.
    pub fn table_url(&self, table: &str) -> String {
        format!("{}/{table}/", self.url)
    }

    fn location(&self, parts: &[&str]) -> ObjectPath {
        parts
            .iter()
            .fold(self.prefix.clone(), |path, part| path.join(*part))
    }

    /// Runs `work` on the root's runtime and waits for it, from any thread.
    fn block<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> std::io::Result<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        let runtime = self
            .runtime
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the history I/O runtime stopped"))?;
        runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv()
            .map_err(|_| std::io::Error::other("the history I/O runtime stopped"))?
            .map_err(|e| std::io::Error::other(format!("{}: {e}", self.url)))
    }

    pub(super) fn files(&self, table: &str) -> std::io::Result<Vec<HistoryFile>> {
        let store = self.store.clone();
        let folder = self.location(&[table]);
        let metas =
            self.block(async move { store.list(Some(&folder)).try_collect::<Vec<_>>().await })?;
        let table_parts = self.location(&[table]).parts().count();
        Ok(metas
            .into_iter()
            .filter_map(|meta| {
                // <prefix>/<table>/date=YYYY-MM-DD/<name>, nothing deeper.
                let parts: Vec<String> = meta
                    .location
                    .parts()
                    .skip(table_parts)
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                let [day, name] = parts.as_slice() else {
                    return None;
                };
                Some(HistoryFile {
                    date: day.strip_prefix("date=")?.to_owned(),
                    name: name.clone(),
                    size: meta.size,
                    modified: Some(meta.last_modified.into()),
                })
            })
            .collect())
    }

    pub(super) fn put(
        &self,
        table: &str,
        date: &str,
        name: &str,
        bytes: Vec<u8>,
    ) -> std::io::Result<()> {
        let store = self.store.clone();
        let location = self.location(&[table, &format!("date={date}"), name]);
        self.block(async move { store.put(&location, PutPayload::from(bytes)).await })?;
        Ok(())
    }

    pub(super) fn get(&self, table: &str, date: &str, name: &str) -> std::io::Result<Vec<u8>> {
        let store = self.store.clone();
        let location = self.location(&[table, &format!("date={date}"), name]);
        let bytes = self.block(async move { store.get(&location).await?.bytes().await })?;
        Ok(bytes.to_vec())
    }

    pub(super) fn remove(&self, table: &str, date: &str, name: &str) -> std::io::Result<()> {
        let store = self.store.clone();
        let location = self.location(&[table, &format!("date={date}"), name]);
        self.block(async move {
            match store.delete(&location).await {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                other => other,
            }
        })
    }
}
