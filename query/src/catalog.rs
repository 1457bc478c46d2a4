//! The history tables, registered over the history root as listing tables
//! with a typed `date` partition column. Files are listed at every scan, so
//! new files show up in the next query.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::SessionContext;
use gpuledger_common::history::HistoryRoot;
use gpuledger_schemas::tables;

/// Registers every history table under `root` (a local table's folder is
/// created if missing, so the service can start before the first file is
/// written; an object store lists an empty prefix as no files).
pub fn register_history(ctx: &SessionContext, root: &HistoryRoot) -> Result<()> {
    for (table, schema) in tables::all() {
        let url = match root {
            HistoryRoot::Local(root) => {
                let dir = root.join(table);
                std::fs::create_dir_all(&dir)?;
                ListingTableUrl::parse(format!("{}/", dir.canonicalize()?.display()))?
            }
            HistoryRoot::Object(object) => {
                let (store_url, store) = object.store();
                let store_url = ObjectStoreUrl::parse(store_url)?;
                ctx.register_object_store(store_url.as_ref(), store);
                ListingTableUrl::parse(object.table_url(table))?
            }
        };
        let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
            .with_file_extension(".parquet")
            .with_table_partition_cols(vec![(tables::DATE_PARTITION.to_owned(), DataType::Date32)]);
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(schema);
        ctx.register_table(table, Arc::new(ListingTable::try_new(config)?))?;
    }
    Ok(())
}
