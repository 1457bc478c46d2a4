//! Texts numbered in the order they were first kept, stored end to end in
//! one buffer. The ledger's largest tables only grow (every event id
//! applied, every admission request decided, every attempt ended), and a
//! heap allocation per key costs more than the key: here a key costs its
//! bytes, one offset and an 8-byte slot in the hash index, and keys kept
//! one after another lie one after another in memory.
//!
//! Nothing is ever removed; a table that forgets belongs elsewhere.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::by_name::same_text;

/// A text's number in its table: 0 for the first kept, then 1, 2, ...
pub type TextId = u32;

/// Texts by number, and numbers by text.
#[derive(Debug, Clone, Default)]
pub struct TextIds {
    list: TextList,
    /// The number of each text, found by its hash.
    index: HashTable<Slot>,
}

/// A text found not kept, with its hash (from [`TextIds::find_or_absent`]):
/// keeping it then costs no second hash or probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Absent {
    hash: u32,
}

impl Absent {
    /// `text`, looked for where no table holds it yet.
    pub fn of(text: &str) -> Self {
        Self {
            hash: hash_of(text),
        }
    }
}

/// One text's place in the index: its number, and the low half of its
/// hash, so that growing the index and most mismatches never read the
/// text itself.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: TextId,
    hash: u32,
}

/// The hash the index files a text under. Only 32 bits of it are kept in
/// a slot; the index's hash is rebuilt from those bits, the same way on
/// insertion as on growth.
fn hash_of(text: &str) -> u32 {
    FxBuildHasher.hash_one(text) as u32
}

fn spread(hash: u32) -> u64 {
    // The index takes its bucket from the low bits and its tag from the
    // top seven: both come from the 32 bits kept.
    (u64::from(hash) << 32) | u64::from(hash)
}

impl TextIds {
    /// The number of `text`, if it was kept.
    pub fn find(&self, text: &str) -> Option<TextId> {
        self.find_hashed(hash_of(text), text)
    }

    fn find_hashed(&self, hash: u32, text: &str) -> Option<TextId> {
        self.index
            .find(spread(hash), |s| {
                s.hash == hash && same_text(self.list.get(s.id), text)
            })
            .map(|s| s.id)
    }

    /// The number of `text`, or, where it is not kept, what
    /// [`TextIds::insert_absent`] needs to keep it without hashing it again.
    pub fn find_or_absent(&self, text: &str) -> Result<TextId, Absent> {
        let hash = hash_of(text);
        self.find_hashed(hash, text).ok_or(Absent { hash })
    }

    /// Keeps `text`, found absent (and not kept since), and gives its
    /// number.
    pub fn insert_absent(&mut self, absent: Absent, text: &str) -> TextId {
        debug_assert_eq!(
            absent.hash,
            hash_of(text),
            "{text} is not what was looked for"
        );
        debug_assert!(self.find(text).is_none(), "{text} is kept already");
        self.push(absent.hash, text)
    }

    /// The number of `text`, kept now if it was not.
    pub fn intern(&mut self, text: &str) -> TextId {
        let hash = hash_of(text);
        match self.find_hashed(hash, text) {
            Some(id) => id,
            None => self.push(hash, text),
        }
    }

    /// Makes room for `additional` more texts: keeping them then moves
    /// none already kept (their offsets and the index; the bytes still
    /// grow as they come).
    pub fn reserve(&mut self, additional: usize) {
        self.list.ends.reserve(additional);
        self.index.reserve(additional, |s| spread(s.hash));
    }

    /// Keeps `text`, of hash `hash`, not kept yet.
    fn push(&mut self, hash: u32, text: &str) -> TextId {
        let id = self.list.push(text);
        self.index
            .insert_unique(spread(hash), Slot { id, hash }, |s| spread(s.hash));
        id
    }

    /// The text numbered `id`.
    ///
    /// Panics if no text has that number: numbers come only from this
    /// table.
    pub fn get(&self, id: TextId) -> &str {
        self.list.get(id)
    }

    /// How many texts are kept.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every text with its number, in the order kept.
    pub fn iter(&self) -> impl Iterator<Item = (TextId, &str)> {
        self.list.iter()
    }
}

/// Texts stored end to end, numbered in the order pushed; a text pushed
/// twice is stored twice.
#[derive(Debug, Clone, Default)]
pub struct TextList {
    bytes: String,
    /// Where each text ends in `bytes`; it starts where the one before
    /// ends.
    ends: Vec<usize>,
}

impl TextList {
    /// Stores `text` and gives its number.
    pub fn push(&mut self, text: &str) -> TextId {
        let id = TextId::try_from(self.ends.len())
            .unwrap_or_else(|_| unreachable!("more than 2^32 texts in one table"));
        self.bytes.push_str(text);
        self.ends.push(self.bytes.len());
        id
    }

    /// The text numbered `id`.
    pub fn get(&self, id: TextId) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every text with its number, in the order pushed.
    pub fn iter(&self) -> impl Iterator<Item = (TextId, &str)> {
        (0..self.ends.len()).map(|i| (i as TextId, self.get(i as TextId)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_made_ahead_is_used_without_growing() {
        let mut ids = TextIds::default();
        ids.intern("kept before");
        ids.reserve(1_000);
        let (index, ends) = (ids.index.capacity(), ids.list.ends.capacity());
        assert!(index >= 1_001 && ends >= 1_001, "{index} {ends}");
        for i in 0..1_000 {
            assert_eq!(ids.intern(&format!("event-{i}")), i + 1);
        }
        assert_eq!(ids.index.capacity(), index, "the index grew");
        assert_eq!(ids.list.ends.capacity(), ends, "the offsets grew");
        assert_eq!(ids.find("kept before"), Some(0));
        assert_eq!(ids.find("event-999"), Some(1_000));
    }

    #[test]
    fn texts_keep_their_numbers_and_are_found_by_content() {
        let mut ids = TextIds::default();
        assert_eq!(ids.find("a"), None);
        assert_eq!(ids.intern("a"), 0);
        assert_eq!(ids.intern(""), 1);
        assert_eq!(ids.intern("a"), 0);
        for i in 0..10_000 {
            assert_eq!(ids.intern(&format!("id-{i}")), i + 2);
        }
        assert_eq!(ids.len(), 10_002);
        assert_eq!(ids.find("id-9999"), Some(10_001));
        assert_eq!(ids.find("id-10000"), None);
        assert_eq!(ids.get(0), "a");
        assert_eq!(ids.get(1), "");
        assert_eq!(ids.get(7), "id-5");
        let all: Vec<_> = ids.iter().take(3).collect();
        assert_eq!(all, [(0, "a"), (1, ""), (2, "id-0")]);

        let absent = ids.find_or_absent("new").unwrap_err();
        assert_eq!(ids.find_or_absent("id-0"), Ok(2));
        assert_eq!(ids.insert_absent(absent, "new"), 10_002);
        assert_eq!(ids.find("new"), Some(10_002));

        let mut list = TextList::default();
        assert_eq!(list.push("x"), 0);
        assert_eq!(list.push("x"), 1);
        assert_eq!((list.get(1), list.len()), ("x", 2));
    }
}
