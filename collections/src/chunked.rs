//! [`Chunked`]: a list that only grows (or is rebuilt whole), kept in
//! chunks of fixed length, so that growing never moves what it holds.
//!
//! The ledger keeps tables with an entry per admission or per segment for
//! a month and more. In one `Vec` each doubling copies every entry so far
//! (tens of megabytes, pushing everything else out of the caches) and
//! leaves a quarter of the memory unused on average; here only the first
//! chunk grows by doubling, up to its length, and every other chunk is
//! allocated once at its length.

use std::ops::{Index, IndexMut};

/// Values per chunk for values of `size` bytes: a power of two near
/// 64 KiB of them (values of no size count as one byte each).
const fn chunk_len(size: usize) -> usize {
    let size = if size == 0 { 1 } else { size };
    (64 * 1024 / size).next_power_of_two()
}

/// A list of `T` in chunks of [`chunk_len`] values.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    const CHUNK: usize = chunk_len(size_of::<T>());

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `value` at the end, moving nothing already held.
    pub fn push(&mut self, value: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < Self::CHUNK => last.push(value),
            _ => {
                // The first chunk grows as a vector does: a small list
                // costs no more than one.
                let mut chunk = if self.chunks.is_empty() {
                    Vec::new()
                } else {
                    Vec::with_capacity(Self::CHUNK)
                };
                chunk.push(value);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index / Self::CHUNK)?
            .get(index % Self::CHUNK)
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(index / Self::CHUNK)?
            .get_mut(index % Self::CHUNK)
    }

    /// Every value, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.into_iter()
    }

    /// Keeps only the values `keep` says yes to, in order (a rebuild).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for value in std::mem::take(self).into_values() {
            if keep(&value) {
                self.push(value);
            }
        }
    }

    fn into_values(self) -> impl Iterator<Item = T> {
        self.chunks.into_iter().flatten()
    }
}

impl<'a, T> IntoIterator for &'a Chunked<T> {
    type Item = &'a T;
    type IntoIter = std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.chunks.iter().flatten()
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index / Self::CHUNK][index % Self::CHUNK]
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index / Self::CHUNK][index % Self::CHUNK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_keep_their_places_and_never_move() {
        let mut list = Chunked::<[u8; 1000]>::default();
        assert_eq!(Chunked::<[u8; 1000]>::CHUNK, 128);
        assert!(list.is_empty() && list.get(0).is_none());
        let value = |i: usize| [(i % 251) as u8; 1000];
        for i in 0..1_000 {
            list.push(value(i));
        }
        let second_chunk: *const [u8; 1000] = &list[128];
        for i in 1_000..2_000 {
            list.push(value(i));
        }
        assert_eq!(list.len(), 2_000);
        // A value past the first chunk is never moved.
        assert_eq!(second_chunk, &list[128] as *const _);
        for i in [0, 127, 128, 129, 1_999] {
            assert_eq!(list[i], value(i), "value {i}");
            assert_eq!(list.get(i), Some(&value(i)));
        }
        assert!(list.get(2_000).is_none());
        list[5] = value(7);
        *list.get_mut(6).unwrap() = value(8);
        assert_eq!((list[5], list[6]), (value(7), value(8)));
        assert_eq!(list.iter().count(), 2_000);

        list.retain(|v| v[0] % 2 == 0);
        let kept: Vec<usize> = (0..2_000)
            .map(|i| match i {
                5 => 7,
                6 => 8,
                _ => i,
            })
            .filter(|i| (i % 251) % 2 == 0)
            .collect();
        assert_eq!(list.len(), kept.len());
        assert!(list.iter().zip(&kept).all(|(v, &i)| *v == value(i)));
    }
}
