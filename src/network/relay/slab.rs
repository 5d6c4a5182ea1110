//! A table of the relay's open connections, by index, each slot with a generation: a
//! resolver's answer or a timer that names a slot since reused is told apart and dropped.

pub struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<usize>,
    len: usize,
}

struct Slot<T> {
    generation: u64,
    value: Option<T>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slab<T> {
    /// Put `value` in a free slot: its index and generation.
    pub fn insert(&mut self, value: T) -> (usize, u64) {
        self.len += 1;
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index];
            slot.generation += 1;
            slot.value = Some(value);
            return (index, slot.generation);
        }
        self.slots.push(Slot {
            generation: 0,
            value: Some(value),
        });
        (self.slots.len() - 1, 0)
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.slots.get_mut(index)?.value.as_mut()
    }

    /// The value at `index` if its slot is still of `generation`.
    pub fn get_current(&mut self, index: usize, generation: u64) -> Option<&mut T> {
        let slot = self.slots.get_mut(index)?;
        if slot.generation != generation {
            return None;
        }
        slot.value.as_mut()
    }

    pub fn generation(&self, index: usize) -> Option<u64> {
        self.slots.get(index).map(|s| s.generation)
    }

    pub fn remove(&mut self, index: usize) -> Option<T> {
        let value = self.slots.get_mut(index)?.value.take()?;
        self.free.push(index);
        self.len -= 1;
        Some(value)
    }

    pub fn len(&self) -> usize {
        self.len
    }
}
