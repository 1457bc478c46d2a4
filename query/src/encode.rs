//! Query results in the format the client asks for by `Accept`: JSON (an
//! array of objects), CSV, Arrow IPC stream or Parquet. Batches are encoded
//! one by one as the engine produces them, and what each adds is sent on at
//! once, so a large result is never held whole.

use std::io::Write;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::compute::cast;
use datafusion::arrow::csv;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::json::ArrayWriter;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::WriterProperties;

/// A result format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Csv,
    Arrow,
    Parquet,
}

/// Media types, in the order a client's `*/*` falls back through.
const TYPES: [(&str, Format); 5] = [
    ("application/json", Format::Json),
    ("text/csv", Format::Csv),
    ("application/vnd.apache.arrow.stream", Format::Arrow),
    ("application/vnd.apache.parquet", Format::Parquet),
    ("application/x-parquet", Format::Parquet),
];

impl Format {
    /// The format an `Accept` header asks for: the first listed type we
    /// write (parameters and weights aside); JSON when it names none or
    /// accepts anything. `Err` names what we can write instead.
    pub fn from_accept(accept: Option<&str>) -> Result<Format, String> {
        let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
            return Ok(Format::Json);
        };
        for wanted in accept.split(',') {
            let media = wanted.split(';').next().unwrap_or_default().trim();
            if media == "*/*" || media == "application/*" {
                return Ok(Format::Json);
            }
            if let Some((_, format)) = TYPES.iter().find(|(t, _)| t.eq_ignore_ascii_case(media)) {
                return Ok(*format);
            }
        }
        Err(format!(
            "cannot answer in {accept:?}; ask for one of: {}",
            TYPES.map(|(t, _)| t).join(", ")
        ))
    }

    /// The `Content-Type` of the answer.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Csv => "text/csv",
            Format::Arrow => "application/vnd.apache.arrow.stream",
            Format::Parquet => "application/vnd.apache.parquet",
        }
    }
}

/// The bytes written so far and not yet sent.
#[derive(Debug, Clone, Default)]
pub struct Pending(Arc<Mutex<Vec<u8>>>);

impl Pending {
    /// Takes what was written since the last call.
    pub fn take(&self) -> Vec<u8> {
        self.0
            .lock()
            .map(|mut buf| std::mem::take(&mut *buf))
            .unwrap_or_default()
    }
}

impl Write for Pending {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("result buffer lock poisoned"))?
            .extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Encodes batches into a [`Pending`] buffer.
pub enum Encoder {
    Json(Box<ArrayWriter<Pending>>),
    Csv(Box<csv::Writer<Pending>>),
    Arrow(Box<StreamWriter<Pending>>),
    Parquet(Box<ArrowWriter<Pending>>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let format = match self {
            Encoder::Json(_) => "json",
            Encoder::Csv(_) => "csv",
            Encoder::Arrow(_) => "arrow",
            Encoder::Parquet(_) => "parquet",
        };
        f.debug_tuple("Encoder").field(&format).finish()
    }
}

/// `schema` with string views as plain strings: some tables are read as
/// views (see `catalog`), and a typed answer does not depend on that.
fn plain_text(schema: &SchemaRef) -> SchemaRef {
    if !schema.fields().iter().any(|f| is_view(f.data_type())) {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8View => f.as_ref().clone().with_data_type(DataType::Utf8),
            DataType::BinaryView => f.as_ref().clone().with_data_type(DataType::Binary),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

fn is_view(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8View | DataType::BinaryView)
}

/// `batch` in the schema of [`plain_text`] (the text copied out of its
/// views); a batch with no views as it is.
fn plain_text_batch(batch: &RecordBatch) -> Result<RecordBatch, EncodeError> {
    let schema = plain_text(batch.schema_ref());
    if Arc::ptr_eq(&schema, batch.schema_ref()) {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| cast(column, field.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// Why encoding failed.
pub type EncodeError = Box<dyn std::error::Error + Send + Sync>;

impl Encoder {
    /// An encoder for `format` writing results of `schema` into `out`.
    pub fn new(format: Format, schema: &SchemaRef, out: Pending) -> Result<Self, EncodeError> {
        Ok(match format {
            Format::Json => Encoder::Json(Box::new(ArrayWriter::new(out))),
            Format::Csv => {
                let mut writer = csv::WriterBuilder::new().with_header(true).build(out);
                // The header, even for a result with no rows.
                writer.write(&RecordBatch::new_empty(schema.clone()))?;
                Encoder::Csv(Box::new(writer))
            }
            Format::Arrow => {
                Encoder::Arrow(Box::new(StreamWriter::try_new(out, &plain_text(schema))?))
            }
            Format::Parquet => {
                let props = WriterProperties::builder()
                    .set_compression(Compression::ZSTD(ZstdLevel::default()))
                    .build();
                Encoder::Parquet(Box::new(ArrowWriter::try_new(
                    out,
                    plain_text(schema),
                    Some(props),
                )?))
            }
        })
    }

    /// Encodes one batch.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), EncodeError> {
        match self {
            Encoder::Json(w) => w.write(batch)?,
            Encoder::Csv(w) => w.write(batch)?,
            Encoder::Arrow(w) => w.write(&plain_text_batch(batch)?)?,
            Encoder::Parquet(w) => {
                w.write(&plain_text_batch(batch)?)?;
                // A row group per batch, so its bytes can go out now.
                w.flush()?;
            }
        }
        Ok(())
    }

    /// Writes what closes the result (the JSON `]`, the IPC end marker,
    /// the Parquet footer).
    pub fn finish(self) -> Result<(), EncodeError> {
        match self {
            Encoder::Json(mut w) => w.finish()?,
            Encoder::Csv(_) => {}
            Encoder::Arrow(mut w) => w.finish()?,
            Encoder::Parquet(w) => {
                w.close()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch() -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("tenant", DataType::Utf8, false),
            Field::new("n", DataType::Int64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b,c"])),
                Arc::new(Int64Array::from(vec![1, 2])),
            ],
        )
        .unwrap()
    }

    fn encode(format: Format, batches: &[RecordBatch]) -> Vec<u8> {
        let out = Pending::default();
        let schema = batch().schema();
        let mut encoder = Encoder::new(format, &schema, out.clone()).unwrap();
        let mut bytes = Vec::new();
        for b in batches {
            encoder.write(b).unwrap();
            bytes.extend(out.take());
        }
        encoder.finish().unwrap();
        bytes.extend(out.take());
        bytes
    }

    #[test]
    fn accept_picks_the_format() {
        assert_eq!(Format::from_accept(None), Ok(Format::Json));
        assert_eq!(Format::from_accept(Some("*/*")), Ok(Format::Json));
        assert_eq!(
            Format::from_accept(Some("text/csv;charset=utf-8")),
            Ok(Format::Csv)
        );
        assert_eq!(
            Format::from_accept(Some("image/png, application/vnd.apache.arrow.stream")),
            Ok(Format::Arrow)
        );
        assert_eq!(
            Format::from_accept(Some("application/vnd.apache.parquet")),
            Ok(Format::Parquet)
        );
        let e = Format::from_accept(Some("image/png")).unwrap_err();
        assert!(e.contains("text/csv"), "{e}");
    }

    #[test]
    fn every_format_reads_back() {
        let two = [batch(), batch()];
        let json: serde_json::Value = serde_json::from_slice(&encode(Format::Json, &two)).unwrap();
        assert_eq!(json.as_array().unwrap().len(), 4);
        assert_eq!(json[1], serde_json::json!({"tenant": "b,c", "n": 2}));
        assert_eq!(encode(Format::Json, &[]), b"[]");

        let text = String::from_utf8(encode(Format::Csv, &two)).unwrap();
        assert_eq!(text, "tenant,n\na,1\n\"b,c\",2\na,1\n\"b,c\",2\n");
        assert_eq!(
            String::from_utf8(encode(Format::Csv, &[])).unwrap(),
            "tenant,n\n"
        );

        let ipc = encode(Format::Arrow, &two);
        let reader = datafusion::arrow::ipc::reader::StreamReader::try_new(&ipc[..], None).unwrap();
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 4);

        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&encode(Format::Parquet, &two)).unwrap();
        let reader =
            datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(file, 1024)
                .unwrap();
        let read: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        assert_eq!(read.iter().map(RecordBatch::num_rows).sum::<usize>(), 4);
        let tenants: Vec<String> = read
            .iter()
            .flat_map(|b| {
                let column = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                column
                    .iter()
                    .flatten()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(tenants, ["a", "b,c", "a", "b,c"]);
    }

    #[test]
    fn string_views_are_answered_as_plain_strings() {
        use datafusion::arrow::array::StringViewArray;
        let schema = Arc::new(Schema::new(vec![Field::new(
            "pool",
            DataType::Utf8View,
            true,
        )]));
        let views = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringViewArray::from(vec![
                Some("a-pool-with-a-long-name"),
                None,
            ]))],
        )
        .unwrap();
        for format in [Format::Arrow, Format::Parquet] {
            let out = Pending::default();
            let mut encoder = Encoder::new(format, &schema, out.clone()).unwrap();
            encoder.write(&views).unwrap();
            encoder.finish().unwrap();
            let bytes = out.take();
            let read: Vec<RecordBatch> = match format {
                Format::Arrow => {
                    datafusion::arrow::ipc::reader::StreamReader::try_new(&bytes[..], None)
                        .unwrap()
                        .map(|b| b.unwrap())
                        .collect()
                }
                _ => {
                    let mut file = tempfile::tempfile().unwrap();
                    file.write_all(&bytes).unwrap();
                    datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(
                        file, 1024,
                    )
                    .unwrap()
                    .map(|b| b.unwrap())
                    .collect()
                }
            };
            assert_eq!(read[0].schema().field(0).data_type(), &DataType::Utf8);
            let column = read[0].column(0).as_any().downcast_ref::<StringArray>();
            let values: Vec<Option<&str>> = column.unwrap().iter().collect();
            assert_eq!(
                values,
                [Some("a-pool-with-a-long-name"), None],
                "{format:?}"
            );
        }
    }
}
