//! The history tables, registered over the history root as listing tables
//! with a typed `date` partition column. Files are listed at every scan, so
//! new files show up in the next query.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::error::Result;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::SessionContext;
use gpuledger_common::history::HistoryRoot;
use gpuledger_schemas::tables;

/// `schema` with its text columns read as string views (`Utf8View`).
///
/// Raw samples are what ad-hoc queries scan by the hundred million: a view
/// of a dictionary-encoded Parquet string points into the page's
/// dictionary instead of copying the text for every row, and grouping and
/// comparing short strings (a pool, a tenant) looks at the view alone. The
/// files keep plain strings; the other tables are small and stay as
/// written.
fn text_as_views(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 => f.as_ref().clone().with_data_type(DataType::Utf8View),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

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
        let schema = if table == tables::samples::TABLE {
            text_as_views(&schema)
        } else {
            schema
        };
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(schema);
        ctx.register_table(table, Arc::new(ListingTable::try_new(config)?))?;
    }
    Ok(())
}
