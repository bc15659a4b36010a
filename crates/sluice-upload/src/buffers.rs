//! Part buffers, recycled. A part buffer of several MiB freshly allocated is
//! fresh pages: the kernel faults and zeroes every one of them as the part is
//! copied in, which was a third of the gateway's CPU while relaying a large
//! upload. Buffers of at least [`MIN_RECYCLED`] bytes therefore go back to a
//! pool of idle buffers when the last `Bytes` made from them is dropped (after
//! the store has the part and every retry is done), and the next part of the
//! same size reuses one.
//!
//! The pool never makes the process hold more than the memory budget: a buffer
//! is kept idle only while idle bytes plus reserved bytes fit in the budget, and
//! idle buffers are freed when an allocation would pass it. Buffers are only
//! handed out under a [`Reservation`](crate::Reservation), so buffers in use never
//! exceed the reserved bytes.

use std::sync::Mutex;

use bytes::Bytes;

use crate::budget::MemoryBudget;

/// Buffers smaller than this come from the allocator and go back to it: small
/// allocations are served from the heap without fresh pages.
pub(crate) const MIN_RECYCLED: usize = 1024 * 1024;

/// Idle buffers of the pool.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    idle: Mutex<Idle>,
}

#[derive(Debug, Default)]
struct Idle {
    buffers: Vec<Vec<u8>>,
    bytes: u64,
}

impl BufferPool {
    /// Bytes held in idle buffers.
    pub(crate) fn idle_bytes(&self) -> u64 {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An empty buffer of exactly `capacity` bytes: an idle one of that size, or a
    /// new one after freeing idle buffers that would push the process past the budget.
    pub(crate) fn take(&self, budget: &MemoryBudget, capacity: usize) -> Vec<u8> {
        if capacity < MIN_RECYCLED {
            return Vec::with_capacity(capacity);
        }
        let mut freed = Vec::new();
        {
            let mut idle = self.lock();
            if let Some(i) = idle.buffers.iter().rposition(|b| b.capacity() == capacity) {
                let buffer = idle.buffers.swap_remove(i);
                idle.bytes -= capacity as u64;
                return buffer;
            }
            while idle.bytes + budget.in_use() > budget.capacity() && !idle.buffers.is_empty() {
                let oldest = idle.buffers.remove(0);
                idle.bytes -= oldest.capacity() as u64;
                freed.push(oldest);
            }
        }
        drop(freed); // outside the lock: freeing large buffers unmaps them
        Vec::with_capacity(capacity)
    }

    /// Keeps `buffer` for reuse if it is large enough and fits in the budget
    /// beside what is reserved; frees it otherwise.
    pub(crate) fn give_back(&self, budget: &MemoryBudget, mut buffer: Vec<u8>) {
        let capacity = buffer.capacity() as u64;
        if capacity < MIN_RECYCLED as u64 {
            return;
        }
        let mut idle = self.lock();
        if idle.bytes + capacity + budget.in_use() <= budget.capacity() {
            buffer.clear();
            idle.bytes += capacity;
            idle.buffers.push(buffer);
        }
    }
}

/// A buffer being filled with one part (or one whole small object). Dropped
/// unfrozen, or frozen and then dropped everywhere, it returns to the pool.
#[derive(Debug)]
pub(crate) struct PartBuffer {
    recycled: Recycled,
}

impl PartBuffer {
    /// Wraps `buffer`, taken from `budget`'s pool, to go back there.
    pub(crate) fn new(buffer: Vec<u8>, budget: MemoryBudget) -> Self {
        PartBuffer {
            recycled: Recycled { buffer, budget },
        }
    }

    /// The bytes so far, to append to up to the capacity.
    pub(crate) fn as_vec_mut(&mut self) -> &mut Vec<u8> {
        &mut self.recycled.buffer
    }

    pub(crate) fn len(&self) -> usize {
        self.recycled.buffer.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.recycled.buffer.is_empty()
    }

    /// The filled bytes, shared; the buffer returns to the pool when the last
    /// clone is dropped.
    pub(crate) fn freeze(mut self) -> Bytes {
        let capacity = self.recycled.buffer.capacity();
        if capacity < MIN_RECYCLED {
            return Bytes::from(std::mem::take(&mut self.recycled.buffer));
        }
        let recycled = Recycled {
            buffer: std::mem::take(&mut self.recycled.buffer),
            budget: self.recycled.budget.clone(),
        };
        Bytes::from_owner(recycled)
    }
}

/// A buffer that goes back to its budget's pool when dropped.
#[derive(Debug)]
struct Recycled {
    buffer: Vec<u8>,
    budget: MemoryBudget,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        if buffer.capacity() > 0 {
            self.budget.give_back(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[tokio::test]
    async fn a_frozen_buffer_returns_when_its_last_clone_drops() {
        let budget = MemoryBudget::new(64 * MIB as u64);
        let reservation = budget.reserve(4 * MIB as u64).await;
        let mut buffer = budget.buffer(4 * MIB);
        buffer.as_vec_mut().extend_from_slice(b"part");
        let address = buffer.as_vec_mut().as_ptr();
        let bytes = buffer.freeze();
        let clone = bytes.slice(1..);
        drop(reservation);
        drop(bytes);
        assert_eq!(budget.idle_bytes(), 0, "a clone still holds the buffer");
        assert_eq!(&clone[..], b"art");
        drop(clone);
        assert_eq!(budget.idle_bytes(), 4 * MIB as u64);

        let _reservation = budget.reserve(4 * MIB as u64).await;
        let mut again = budget.buffer(4 * MIB);
        assert_eq!(
            again.as_vec_mut().as_ptr(),
            address,
            "the same memory is reused"
        );
        assert!(again.is_empty());
        assert_eq!(budget.idle_bytes(), 0);
    }

    #[tokio::test]
    async fn recycling_by_size_and_budget() {
        // (budget MiB, reserved MiB while giving back, buffer MiB, kept idle)
        let cases = [
            (64, 0, 4, true),
            (64, 60, 4, true),
            (64, 61, 4, false), // idle + reserved would pass the budget
            (64, 0, 0, false),  // small buffers go back to the allocator
        ];
        for (budget_mib, reserved_mib, buffer_mib, kept) in cases {
            let budget = MemoryBudget::new((budget_mib * MIB) as u64);
            let capacity = (buffer_mib * MIB).max(4096);
            let buffer = budget.buffer(capacity);
            let _reserved = budget.reserve((reserved_mib * MIB) as u64).await;
            drop(buffer);
            let idle = if kept { capacity as u64 } else { 0 };
            assert_eq!(
                budget.idle_bytes(),
                idle,
                "{budget_mib} MiB budget, {reserved_mib} MiB reserved, {buffer_mib} MiB buffer"
            );
        }
    }

    #[tokio::test]
    async fn idle_buffers_are_freed_before_the_budget_is_passed() {
        let budget = MemoryBudget::new(16 * MIB as u64);
        drop(budget.buffer(8 * MIB));
        drop(budget.buffer(4 * MIB));
        assert_eq!(budget.idle_bytes(), 12 * MIB as u64);
        // 12 MiB reserved for a buffer of another size: 12 + 12 > 16, so the
        // older idle buffer goes, then 4 + 12 fits.
        let _reservation = budget.reserve(12 * MIB as u64).await;
        let buffer = budget.buffer(12 * MIB);
        assert_eq!(budget.idle_bytes(), 4 * MIB as u64);
        drop(buffer);
    }
}
