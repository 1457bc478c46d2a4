//! An object store as history readers should see it: every listing leaves
//! out the files another file of the same folder covers (see
//! [`covered`](super::covered)), so a query that lists a day while
//! compaction is between writing the merged file and removing its parts
//! reads each row once. Everything else passes through unchanged.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// `inner`, with covered history files left out of every listing.
#[derive(Debug)]
pub struct SkipCovered {
    inner: Arc<dyn ObjectStore>,
}

impl SkipCovered {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self { inner }
    }
}

impl fmt::Display for SkipCovered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SkipCovered({})", self.inner)
    }
}

/// `objects` without those another object of the same folder covers.
fn uncovered(objects: Vec<ObjectMeta>) -> Vec<ObjectMeta> {
    let mut by_folder: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for meta in &objects {
        if let Some((folder, name)) = meta.location.as_ref().rsplit_once('/') {
            by_folder.entry(folder.to_owned()).or_default().push(name);
        }
    }
    let hidden: HashSet<String> = by_folder
        .iter()
        .flat_map(|(folder, names)| {
            super::covered(names.iter().copied())
                .into_iter()
                .map(move |name| format!("{folder}/{name}"))
        })
        .collect();
    if hidden.is_empty() {
        return objects;
    }
    objects
        .into_iter()
        .filter(|meta| !hidden.contains(meta.location.as_ref()))
        .collect()
}

#[async_trait]
impl ObjectStore for SkipCovered {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    /// The whole listing is read first: whether a file is covered depends
    /// on the other files of its folder.
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        let listing = self.inner.list(prefix);
        stream::once(async move {
            let objects: Vec<ObjectMeta> = listing.try_collect().await?;
            Ok::<_, object_store::Error>(stream::iter(uncovered(objects).into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        let mut result = self.inner.list_with_delimiter(prefix).await?;
        result.objects = uncovered(result.objects);
        Ok(result)
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn listings_leave_out_what_a_merged_file_covers() {
        let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for name in [
            "h/samples/date=2026-11-01/t-0-0-9.parquet",
            "h/samples/date=2026-11-01/t-0-10-19.parquet",
            "h/samples/date=2026-11-01/t-0-0-19.parquet",
            "h/samples/date=2026-11-01/t-1-0-9.parquet",
            // The same range on another day is another folder's business.
            "h/samples/date=2026-11-02/t-0-10-19.parquet",
        ] {
            inner
                .put(&Path::from(name), PutPayload::from_static(b"x"))
                .await
                .unwrap();
        }
        let store = SkipCovered::new(inner);
        let mut listed: Vec<String> = store
            .list(Some(&Path::from("h/samples")))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        listed.sort();
        assert_eq!(
            listed,
            [
                "h/samples/date=2026-11-01/t-0-0-19.parquet",
                "h/samples/date=2026-11-01/t-1-0-9.parquet",
                "h/samples/date=2026-11-02/t-0-10-19.parquet",
            ]
        );
        let day = store
            .list_with_delimiter(Some(&Path::from("h/samples/date=2026-11-01")))
            .await
            .unwrap();
        let mut names: Vec<String> = day.objects.iter().map(|m| m.location.to_string()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "h/samples/date=2026-11-01/t-0-0-19.parquet",
                "h/samples/date=2026-11-01/t-1-0-9.parquet",
            ]
        );
        // Reading a covered file by name still works (a query that listed
        // before the merged file appeared).
        assert!(
            store
                .get(&Path::from("h/samples/date=2026-11-01/t-0-0-9.parquet"))
                .await
                .is_ok()
        );
    }
}
