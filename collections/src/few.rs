//! A short list that is nearly always one item long: that one item is kept
//! in place, and only a second one makes a list on the heap. The live
//! state keeps many of these (a job's attempts, the holds expiring at one
//! instant), and a heap list each would cost more than the items.

/// Items in the order the caller keeps them (it finds the place).
#[derive(Debug, Clone)]
pub enum Few<T> {
    One([T; 1]),
    /// Any number; empty (which allocates nothing) only while the first
    /// goes in or the last comes out.
    Many(Vec<T>),
}

impl<T> Few<T> {
    /// No item.
    pub fn none() -> Self {
        Few::Many(Vec::new())
    }

    pub fn as_slice(&self) -> &[T] {
        match self {
            Few::One(one) => one,
            Few::Many(many) => many,
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            Few::One(one) => one,
            Few::Many(many) => many,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Puts `item` at `i` (at most the length).
    pub fn insert(&mut self, i: usize, item: T) {
        *self = match std::mem::replace(self, Few::none()) {
            Few::Many(many) if many.is_empty() => Few::One([item]),
            Few::Many(mut many) => {
                many.insert(i, item);
                Few::Many(many)
            }
            Few::One([first]) => {
                let mut many = Vec::with_capacity(2);
                many.push(first);
                many.insert(i, item);
                Few::Many(many)
            }
        };
    }

    /// Takes out the item at `i` (below the length).
    pub fn remove(&mut self, i: usize) -> T {
        if let Few::Many(many) = self {
            return many.remove(i);
        }
        match std::mem::replace(self, Few::none()) {
            Few::One([only]) => only,
            Few::Many(mut many) => many.remove(i),
        }
    }
}

impl<T: PartialEq> PartialEq for Few<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_go_in_and_out_at_their_places_from_none_to_several_and_back() {
        let mut few = Few::none();
        assert!(few.is_empty());
        few.insert(0, 'b');
        assert!(matches!(few, Few::One(_)));
        few.insert(0, 'a');
        few.insert(2, 'c');
        assert_eq!(few.as_slice(), ['a', 'b', 'c']);
        few.as_mut_slice()[1] = 'B';
        assert_eq!(few.remove(1), 'B');
        assert_eq!(few.remove(0), 'a');
        assert_eq!(few.remove(0), 'c');
        assert!(few.is_empty());
        few.insert(0, 'z');
        assert_eq!(few.remove(0), 'z');
        assert!(few.is_empty());
        assert_eq!(Few::<char>::none(), Few::Many(vec![]));
    }
}
