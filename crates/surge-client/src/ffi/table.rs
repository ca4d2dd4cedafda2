//! The descriptor table: small non-negative ints naming open files, the
//! lowest free one reused first, as the kernel does.

/// Most descriptors open at once (the usual `ulimit -n` hard limit).
const MAX_DESCRIPTORS: usize = 1 << 20;

pub(crate) struct DescriptorTable<T> {
    slots: Vec<Option<T>>,
}

impl<T: Clone> DescriptorTable<T> {
    pub const fn new() -> Self {
        DescriptorTable { slots: Vec::new() }
    }

    /// Stores `value` under the lowest free descriptor; `None` when full.
    pub fn insert(&mut self, value: T) -> Option<i32> {
        let fd = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.slots.len() < MAX_DESCRIPTORS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[fd] = Some(value);
        Some(fd as i32)
    }

    pub fn get(&self, fd: i32) -> Option<T> {
        self.slots.get(usize::try_from(fd).ok()?)?.clone()
    }

    pub fn remove(&mut self, fd: i32) -> Option<T> {
        let value = self.slots.get_mut(usize::try_from(fd).ok()?)?.take();
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_descriptor_is_reused() {
        let mut t = DescriptorTable::new();
        assert_eq!((t.insert("a"), t.insert("b"), t.insert("c")), (Some(0), Some(1), Some(2)));
        assert_eq!(t.remove(1), Some("b"));
        assert_eq!(t.remove(1), None);
        assert_eq!(t.get(1), None);
        assert_eq!(t.insert("d"), Some(1));
        assert_eq!(t.get(1), Some("d"));
        assert_eq!((t.get(-1), t.get(99), t.remove(-5)), (None, None, None));
        t.remove(2);
        assert_eq!(t.slots.len(), 2, "trailing free slots are released");
        t.remove(0);
        assert_eq!(t.insert("e"), Some(0));
    }
}
