//! A dead letter fitted into a row that every dialect accepts, so that any message can be
//! dead-lettered (a row that the database rejects would send the delivery back to the broker,
//! again and again).
//!
//! - Raw bytes (the id and the payload) go to binary columns whole. Only when the row would
//!   exceed MySQL's `max_allowed_packet` is the payload (then the raw id) cut, ending with
//!   the marker; `payload_hash` and `id_hash` are always the hashes of the whole values.
//! - Text is cut at a char boundary to a per-column limit, ending with `…[truncated N bytes]`:
//!   the display id (255 bytes), the entity key (64 KiB − 1, MySQL's `TEXT`), the detail
//!   (64 KiB) and the headers (values 64 KiB, keys 1 KiB, 1 MiB of JSON in all; headers that
//!   don't fit are dropped and counted in an `oncely.dropped_headers` header, so the column
//!   stays valid JSON).
//! - PostgreSQL's `TEXT` rejects NUL (SQLSTATE 22021): there NUL becomes U+FFFD. SQLite and
//!   MySQL keep it.

use crate::clock::{from_ms, to_ms};
use crate::dialect::Dialect;
use crate::query::{Column, Value};
use oncely_core::{DeadLetter, DeadLetterReason, Meta, PayloadHash, StoredDeadLetter};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Byte limit of the display id (`message_id`).
pub(crate) const DISPLAY_ID_MAX: usize = 255;
/// Byte limit of the entity key (MySQL `TEXT`).
pub(crate) const ENTITY_KEY_MAX: usize = 65_535;
/// Byte limit of the detail text.
pub(crate) const DETAIL_MAX: usize = 64 * 1024;
/// Byte limit of the headers' JSON.
pub(crate) const HEADERS_MAX: usize = 1024 * 1024;
const HEADER_KEY_MAX: usize = 1024;
const HEADER_VALUE_MAX: usize = 64 * 1024;
/// Room left in a MySQL packet for the statement text and the protocol's framing.
const PACKET_OVERHEAD: usize = 64 * 1024;

/// The marker that ends a cut value.
fn marker(cut: usize) -> String {
    format!("…[truncated {cut} bytes]")
}

/// How many bytes of a `len`-byte value to keep so that the kept part plus its marker fit
/// in `max` (the marker's length depends on the number it names, bounded by `len`'s).
fn keep_for(len: usize, max: usize) -> usize {
    max.saturating_sub(marker(len).len())
}

/// `text`, or its first bytes (at a char boundary) and the marker, at most `max` bytes.
pub(crate) fn fit_text(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut keep = keep_for(text.len(), max);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    Cow::Owned(format!("{}{}", &text[..keep], marker(text.len() - keep)))
}

/// `bytes`, or their first bytes and the marker, at most `max` bytes.
pub(crate) fn fit_bytes(bytes: &[u8], max: usize) -> Cow<'_, [u8]> {
    if bytes.len() <= max {
        return Cow::Borrowed(bytes);
    }
    let keep = keep_for(bytes.len(), max);
    let mut out = Vec::with_capacity(max);
    out.extend_from_slice(&bytes[..keep]);
    out.extend_from_slice(marker(bytes.len() - keep).as_bytes());
    Cow::Owned(out)
}

/// Text a column of `dialect` accepts: NUL replaced where the type rejects it, then cut.
fn column_text(text: &str, max: usize, dialect: Dialect) -> String {
    let text = match dialect {
        Dialect::Postgres if text.contains('\0') => Cow::Owned(text.replace('\0', "\u{FFFD}")),
        _ => Cow::Borrowed(text),
    };
    fit_text(&text, max).into_owned()
}

/// The headers as JSON of at most [`HEADERS_MAX`] bytes (JSON escapes NUL, so every
/// dialect's text column takes it).
pub(crate) fn fit_headers(headers: &BTreeMap<String, String>) -> String {
    let json = |map: &BTreeMap<String, String>| serde_json::to_string(map).unwrap_or_default();
    let all = json(headers);
    if all.len() <= HEADERS_MAX {
        return all;
    }
    let note_room = 256;
    let (mut kept, mut size, mut dropped) = (BTreeMap::new(), 2, 0usize);
    for (key, value) in headers {
        let (key, value) = (
            fit_text(key, HEADER_KEY_MAX),
            fit_text(value, HEADER_VALUE_MAX),
        );
        let entry = serde_json::to_string(&key).map_or(0, |k| k.len())
            + serde_json::to_string(&value).map_or(0, |v| v.len())
            + 2;
        if size + entry > HEADERS_MAX - note_room {
            dropped += 1;
            continue;
        }
        size += entry;
        kept.insert(key.into_owned(), value.into_owned());
    }
    if dropped > 0 {
        kept.insert(
            "oncely.dropped_headers".to_owned(),
            format!("{dropped} headers did not fit in the 1 MiB the dead-letter row keeps"),
        );
    }
    json(&kept)
}

/// The display id with a marker when [`oncely_core::RawEnvelope::display_id`] had to cut it.
fn display_id(letter: &DeadLetter) -> Option<String> {
    let shown = letter.message.display_id()?;
    let raw = letter.message.id.as_deref().unwrap_or_default();
    let full: usize = String::from_utf8_lossy(raw)
        .escape_debug()
        .map(char::len_utf8)
        .sum();
    if full <= shown.len() {
        return Some(shown);
    }
    let mut keep = keep_for(full, DISPLAY_ID_MAX).min(shown.len());
    while !shown.is_char_boundary(keep) {
        keep -= 1;
    }
    Some(format!("{}{}", &shown[..keep], marker(full - keep)))
}

/// One dead-letter row, ready to bind.
pub(crate) struct LetterRow<'a> {
    pub consumer: &'a str,
    pub message_id: Option<String>,
    pub raw_id: Option<Cow<'a, [u8]>>,
    pub payload: Cow<'a, [u8]>,
    pub payload_hash: String,
    pub stored_hash: Option<String>,
    pub reason: &'static str,
    pub detail: String,
    pub attempts: i32,
    pub entity_key: Option<String>,
    pub version: Option<i64>,
    pub source_time: Option<i64>,
    pub headers: String,
    pub id_hash: String,
}

impl<'a> LetterRow<'a> {
    /// The row for `letter` in `dialect`; `packet_limit` is MySQL's `max_allowed_packet`.
    pub fn new(letter: &'a DeadLetter, dialect: Dialect, packet_limit: Option<usize>) -> Self {
        let message = &letter.message;
        let meta = &message.meta;
        let mut row = Self {
            consumer: letter.consumer.as_str(),
            message_id: display_id(letter),
            raw_id: message.id.as_deref().map(Cow::Borrowed),
            payload: Cow::Borrowed(&message.payload),
            payload_hash: PayloadHash::of(&message.payload).to_hex(),
            stored_hash: match &letter.reason {
                DeadLetterReason::Conflict { stored, .. } => Some(stored.to_hex()),
                _ => None,
            },
            reason: letter.reason.code(),
            detail: column_text(&letter.reason.to_string(), DETAIL_MAX, dialect),
            attempts: i32::try_from(letter.attempts).unwrap_or(i32::MAX),
            entity_key: meta
                .entity_key
                .as_deref()
                .map(|k| column_text(k, ENTITY_KEY_MAX, dialect)),
            version: meta.version,
            source_time: meta.source_time.map(to_ms),
            headers: fit_headers(&meta.headers),
            id_hash: message
                .id
                .as_deref()
                .map(|id| PayloadHash::of(id).to_hex())
                .unwrap_or_default(),
        };
        if let Some(limit) = packet_limit {
            row.fit_packet(limit);
        }
        row
    }

    /// Bytes of everything but the raw id and the payload.
    fn text_bytes(&self) -> usize {
        self.consumer.len()
            + self.message_id.as_ref().map_or(0, String::len)
            + self.payload_hash.len()
            + self.stored_hash.as_ref().map_or(0, String::len)
            + self.reason.len()
            + self.detail.len()
            + self.entity_key.as_ref().map_or(0, String::len)
            + self.headers.len()
            + self.id_hash.len()
            + 64
    }

    /// Cuts the payload, then the raw id, so the statement fits in `limit` bytes.
    fn fit_packet(&mut self, limit: usize) {
        let room = limit.saturating_sub(PACKET_OVERHEAD + self.text_bytes());
        let raw_len = self.raw_id.as_ref().map_or(0, |r| r.len());
        if raw_len + self.payload.len() <= room {
            return;
        }
        let payload_room = room.saturating_sub(raw_len.min(room / 2));
        let whole = self.payload.len();
        self.payload = Cow::Owned(fit_bytes(&self.payload, payload_room).into_owned());
        tracing::warn!(
            consumer = self.consumer,
            payload_bytes = whole,
            stored_bytes = self.payload.len(),
            max_allowed_packet = limit,
            "dead letter larger than the server's max_allowed_packet: payload stored truncated (payload_hash is of the whole payload)"
        );
        let raw_room = room.saturating_sub(self.payload.len());
        if let Some(raw) = &self.raw_id
            && raw.len() > raw_room
        {
            self.raw_id = Some(Cow::Owned(fit_bytes(raw, raw_room).into_owned()));
        }
    }
}

/// The columns of a [`StoredDeadLetter`], for a `SELECT … FROM {prefix}dead_letters` whose
/// rows are fetched as [`DEAD_LETTER_TYPES`] and read by [`decode_dead_letter`] (the consumer
/// as text, as MySQL stores it as `VARBINARY`; the counters widened to 64 bits).
///
/// ```
/// let cols = oncely_sql::letter::dead_letter_columns(oncely_sql::Dialect::MySql);
/// assert!(cols.starts_with("id, CAST(consumer AS CHAR) AS consumer, message_id"));
/// assert!(cols.contains("CAST(attempts AS SIGNED) AS attempts"));
/// ```
pub fn dead_letter_columns(dialect: Dialect) -> String {
    format!(
        "id, {} AS consumer, message_id, raw_id, payload, payload_hash, stored_hash, reason, detail, {} AS attempts, entity_key, version, source_time, headers, dead_lettered_at, last_seen, {} AS deliveries",
        dialect.text("consumer"),
        dialect.cast_i64("attempts"),
        dialect.cast_i64("deliveries"),
    )
}

/// How to decode the columns of [`dead_letter_columns`], in order.
pub const DEAD_LETTER_TYPES: &[Column] = &[
    Column::I64,      // id
    Column::Text,     // consumer
    Column::OptText,  // message_id
    Column::OptBytes, // raw_id
    Column::Bytes,    // payload
    Column::Text,     // payload_hash
    Column::OptText,  // stored_hash
    Column::Text,     // reason
    Column::Text,     // detail
    Column::I64,      // attempts
    Column::OptText,  // entity_key
    Column::OptI64,   // version
    Column::OptI64,   // source_time
    Column::Text,     // headers
    Column::I64,      // dead_lettered_at
    Column::I64,      // last_seen
    Column::I64,      // deliveries
];

/// Decodes a row selected with [`dead_letter_columns`] and fetched as [`DEAD_LETTER_TYPES`]
/// (the one decoder of the dead-letter row: the stores'
/// [`Inspect::dead_letters`](oncely_core::Inspect::dead_letters) and oncely-ops use it).
/// Missing columns read as empty / NULL.
///
/// ```no_run
/// # async fn f(pool: oncely_sql::AnyPool) -> oncely_core::Result<()> {
/// use oncely_sql::{SqlTx, Tables};
/// use oncely_sql::letter::{DEAD_LETTER_TYPES, dead_letter_columns, decode_dead_letter};
/// let mut pool = pool;
/// let sql = format!("SELECT {} FROM {}", dead_letter_columns(pool.dialect()), Tables::default().dead_letters());
/// for row in pool.fetch(&sql, &[], DEAD_LETTER_TYPES).await? {
///     println!("{}", decode_dead_letter(&row).reason);
/// }
/// # Ok(()) }
/// ```
pub fn decode_dead_letter(row: &[Value]) -> StoredDeadLetter {
    const NULL: Value = Value::NullText;
    let col = |i: usize| row.get(i).unwrap_or(&NULL);
    let count = |i: usize| u32::try_from(col(i).i64().max(0)).unwrap_or(u32::MAX);
    StoredDeadLetter {
        id: col(0).i64(),
        consumer: col(1).text(),
        message_id: col(2).opt_text(),
        raw_id: col(3).opt_bytes(),
        payload: col(4).bytes(),
        payload_hash: col(5).text(),
        stored_hash: col(6).opt_text(),
        reason: col(7).text(),
        detail: col(8).text(),
        attempts: count(9),
        dead_lettered_at: from_ms(col(14).i64()),
        last_seen: from_ms(col(15).i64()),
        deliveries: count(16),
        meta: Meta {
            entity_key: col(10).opt_text(),
            version: col(11).opt_i64(),
            source_time: col(12).opt_i64().map(from_ms),
            headers: serde_json::from_str(&col(13).text()).unwrap_or_default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncely_core::{ConsumerName, RawEnvelope};

    #[test]
    fn text_is_cut_at_a_char_boundary_with_a_marker() {
        assert_eq!(fit_text("short", 10), "short");
        let long = "é".repeat(100); // 200 bytes
        let cut = fit_text(&long, 50);
        assert!(cut.len() <= 50, "{}", cut.len());
        assert!(cut.ends_with(" bytes]"), "{cut}");
        let kept = cut.split('…').next().unwrap();
        assert_eq!(
            cut,
            format!("{kept}…[truncated {} bytes]", 200 - kept.len())
        );
    }

    #[test]
    fn bytes_are_cut_with_a_marker() {
        let data = vec![7u8; 1000];
        assert_eq!(fit_bytes(&data, 1000).len(), 1000);
        let cut = fit_bytes(&data, 100);
        let keep = 100 - marker(1000).len();
        let n = 1000 - keep;
        assert_eq!(cut.len(), keep + marker(n).len());
        assert!(cut.len() <= 100);
        assert!(cut.ends_with(marker(n).as_bytes()));
    }

    #[test]
    fn nul_is_replaced_for_postgres_only() {
        assert_eq!(column_text("a\0b", 10, Dialect::Postgres), "a\u{FFFD}b");
        assert_eq!(column_text("a\0b", 10, Dialect::MySql), "a\0b");
        assert_eq!(column_text("a\0b", 10, Dialect::Sqlite), "a\0b");
    }

    #[test]
    fn huge_headers_stay_json() {
        let mut headers = BTreeMap::new();
        for i in 0..40 {
            headers.insert(format!("h{i:02}"), "x".repeat(100_000));
        }
        headers.insert("nul".to_owned(), "a\0b".to_owned());
        let json = fit_headers(&headers);
        assert!(json.len() <= HEADERS_MAX, "{}", json.len());
        let back: BTreeMap<String, String> = serde_json::from_str(&json).unwrap();
        assert!(back.contains_key("oncely.dropped_headers"), "{back:?}");
        assert!(back["h00"].ends_with(" bytes]"));
    }

    fn letter(id: Option<Vec<u8>>, payload: Vec<u8>) -> DeadLetter {
        DeadLetter {
            consumer: ConsumerName::new("c").unwrap(),
            message: RawEnvelope {
                id,
                payload,
                ..Default::default()
            },
            reason: DeadLetterReason::Panicked("x".into()),
            attempts: 1,
        }
    }

    #[test]
    fn long_display_id_gets_a_marker_and_the_hashes_are_of_whole_values() {
        let id = vec![b'a'; 70_000];
        let l = letter(Some(id.clone()), b"p".to_vec());
        let row = LetterRow::new(&l, Dialect::Sqlite, None);
        let shown = row.message_id.unwrap();
        assert!(shown.len() <= DISPLAY_ID_MAX);
        assert!(
            shown.ends_with(&format!(
                "[truncated {} bytes]",
                70_000 - shown.find('…').unwrap()
            )),
            "{shown}"
        );
        assert_eq!(row.raw_id.unwrap().len(), 70_000);
        assert_eq!(row.id_hash, PayloadHash::of(&id).to_hex());
        let none = letter(None, vec![]);
        assert_eq!(LetterRow::new(&none, Dialect::Sqlite, None).id_hash, "");
    }

    #[test]
    fn a_row_over_the_packet_limit_cuts_the_payload() {
        let l = letter(Some(vec![1; 70_000]), vec![2; 16 * 1024 * 1024]);
        let row = LetterRow::new(&l, Dialect::MySql, Some(16 * 1024 * 1024));
        let total = row.payload.len() + row.raw_id.as_ref().unwrap().len() + row.text_bytes();
        assert!(total + PACKET_OVERHEAD <= 16 * 1024 * 1024);
        assert_eq!(row.raw_id.unwrap().len(), 70_000, "the id stays whole");
        assert!(row.payload.ends_with(b" bytes]"));
        assert_eq!(
            row.payload_hash,
            PayloadHash::of(&l.message.payload).to_hex()
        );
        let small = letter(Some(vec![1; 10]), vec![2; 1000]);
        let row = LetterRow::new(&small, Dialect::MySql, Some(16 * 1024 * 1024));
        assert_eq!(row.payload.len(), 1000);
    }
}
