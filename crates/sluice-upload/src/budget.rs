//! The process-wide memory budget, in bytes. Every buffer the engine fills from a
//! source is reserved here first, so whatever the number and size of uploads in
//! the process, buffered bytes never exceed the budget: readers simply wait.
//!
//! Waiters are served first come, first served. A reservation larger than the
//! whole budget is refused by configuration validation, never clamped.
//!
//! One upload draws through a [`MemoryShare`]: a cap of its own on what it may
//! hold at once, so that no single upload takes more than a bounded share of the
//! budget. A reservation made through a share counts against both.
//!
//! The budget also keeps the large buffers it paid for, to reuse them (the
//! part buffers section below); idle ones plus reserved bytes stay within the
//! budget.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Semaphore;

/// Reservations are counted in units of this many bytes (the semaphore counts
/// permits in `u32`, and parts can be 5 GiB).
const UNIT: u64 = 1024;

/// A shared budget of bytes. Clones share the same budget.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    semaphore: Arc<Semaphore>,
    total_units: u64,
    pool: Arc<BufferPool>,
}

/// Bytes held from the budget (and from a share, when made through one); they
/// return when dropped.
#[derive(Debug)]
pub struct Reservation {
    semaphore: Arc<Semaphore>,
    share: Option<Arc<Semaphore>>,
    units: u64,
}

/// One upload's cap on the bytes it holds at once, within the budget.
#[derive(Debug, Clone)]
pub struct MemoryShare {
    budget: MemoryBudget,
    share: Arc<Semaphore>,
    units: u64,
}

impl MemoryBudget {
    pub fn new(bytes: u64) -> Self {
        let total_units = bytes.div_ceil(UNIT).max(1);
        MemoryBudget {
            semaphore: Arc::new(Semaphore::new(total_units as usize)),
            total_units,
            pool: Arc::default(),
        }
    }

    /// The budget's size in bytes.
    pub fn capacity(&self) -> u64 {
        self.total_units * UNIT
    }

    /// Bytes currently reserved.
    pub fn in_use(&self) -> u64 {
        (self.total_units - self.semaphore.available_permits() as u64) * UNIT
    }

    /// Bytes held in idle buffers kept for reuse (not reserved, but within the
    /// budget together with what is).
    pub fn idle_bytes(&self) -> u64 {
        self.pool.idle_bytes()
    }

    /// An empty buffer of `capacity` bytes, reused when one of that size is idle.
    /// Call it under a reservation of at least `capacity`.
    pub(crate) fn buffer(&self, capacity: usize) -> PartBuffer {
        PartBuffer::new(self.pool.take(self, capacity), self.clone())
    }

    pub(crate) fn give_back(&self, buffer: Vec<u8>) {
        self.pool.give_back(self, buffer)
    }

    /// Waits until `bytes` are free and reserves them. `bytes` is clamped to the
    /// budget so that a caller can never wait forever.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let units = bytes.div_ceil(UNIT).min(self.total_units);
        let mut acquired = 0u64;
        // acquire_many takes a u32; reserve in steps for very large budgets.
        while acquired < units {
            let step = (units - acquired).min(u32::MAX as u64) as u32;
            self.semaphore
                .acquire_many(step)
                .await
                .expect("the budget's semaphore is never closed")
                .forget();
            acquired += step as u64;
        }
        Reservation {
            semaphore: self.semaphore.clone(),
            share: None,
            units,
        }
    }

    /// A reservation of nothing, to grow with [`Reservation::absorb`].
    pub fn nothing(&self) -> Reservation {
        Reservation {
            semaphore: self.semaphore.clone(),
            share: None,
            units: 0,
        }
    }

    /// A share of at most `bytes` (clamped to the budget) for one upload.
    pub fn share(&self, bytes: u64) -> MemoryShare {
        let units = bytes.div_ceil(UNIT).clamp(1, self.total_units);
        MemoryShare {
            budget: self.clone(),
            share: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    /// Reserves `bytes` if they are free right now.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let units = bytes.div_ceil(UNIT).min(self.total_units);
        let permit = self
            .semaphore
            .try_acquire_many(u32::try_from(units).ok()?)
            .ok()?;
        permit.forget();
        Some(Reservation {
            semaphore: self.semaphore.clone(),
            share: None,
            units,
        })
    }
}

impl MemoryShare {
    /// The budget the share draws on.
    pub fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// The most this share may hold, in bytes.
    pub fn capacity(&self) -> u64 {
        self.units * UNIT
    }

    /// A reservation of nothing from this share.
    pub fn nothing(&self) -> Reservation {
        Reservation {
            semaphore: self.budget.semaphore.clone(),
            share: Some(self.share.clone()),
            units: 0,
        }
    }

    /// Waits until the share, then the budget, has `bytes` free (clamped to the
    /// share) and reserves them. The share is waited for first: only this
    /// upload's own parts in flight hold it, and they need nothing more to finish.
    pub async fn reserve(&self, bytes: u64) -> Reservation {
        let units = bytes.div_ceil(UNIT).min(self.units);
        if let Ok(step) = u32::try_from(units) {
            self.share
                .acquire_many(step)
                .await
                .expect("a share's semaphore is never closed")
                .forget();
        }
        let mut reservation = self.budget.reserve(units * UNIT).await;
        reservation.share = Some(self.share.clone());
        reservation
    }

    /// Reserves `bytes` from the share and the budget if both have them free now.
    pub fn try_reserve(&self, bytes: u64) -> Option<Reservation> {
        let units = bytes.div_ceil(UNIT);
        if units > self.units {
            return None;
        }
        let step = u32::try_from(units).ok()?;
        let share = self.share.try_acquire_many(step).ok()?;
        let mut reservation = self.budget.try_reserve(units * UNIT)?;
        share.forget();
        reservation.share = Some(self.share.clone());
        Some(reservation)
    }
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.units * UNIT
    }

    /// Moves up to `bytes` of this reservation into a new one.
    pub fn split(&mut self, bytes: u64) -> Reservation {
        let units = bytes.div_ceil(UNIT).min(self.units);
        self.units -= units;
        Reservation {
            semaphore: self.semaphore.clone(),
            share: self.share.clone(),
            units,
        }
    }

    /// Returns what is held beyond `bytes` (rounded up to the unit).
    pub fn shrink_to(&mut self, bytes: u64) {
        let keep = bytes.div_ceil(UNIT);
        if keep < self.units {
            drop(self.split((self.units - keep) * UNIT));
        }
    }

    /// Adds `other`'s bytes to this reservation. Both must come from the same
    /// budget and share.
    pub fn absorb(&mut self, mut other: Reservation) {
        debug_assert!(Arc::ptr_eq(&self.semaphore, &other.semaphore));
        debug_assert_eq!(
            self.share.as_ref().map(Arc::as_ptr),
            other.share.as_ref().map(Arc::as_ptr)
        );
        self.units += std::mem::take(&mut other.units);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.units > 0 {
            self.semaphore.add_permits(self.units as usize);
            if let Some(share) = &self.share {
                share.add_permits(self.units as usize);
            }
        }
    }
}

// ---- Part buffers, recycled ----
// Part buffers, recycled. A part buffer of several MiB freshly allocated is
// fresh pages: the kernel faults and zeroes every one of them as the part is
// copied in, which was a third of the gateway's CPU while relaying a large
// upload. Buffers of at least [`MIN_RECYCLED`] bytes therefore go back to a
// pool of idle buffers when the last `Bytes` made from them is dropped (after
// the store has the part and every retry is done), and the next part of the
// same size reuses one.
//
// The pool never makes the process hold more than the memory budget: a buffer
// is kept idle only while idle bytes plus reserved bytes fit in the budget, and
// idle buffers are freed when an allocation would pass it. Buffers are only
// handed out under a [`Reservation`](crate::Reservation), so buffers in use never
// exceed the reserved bytes.

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
    use std::time::Duration;

    #[tokio::test]
    async fn reserve_waits_until_released() {
        let budget = MemoryBudget::new(10 * 1024);
        let first = budget.reserve(8 * 1024).await;
        assert_eq!(budget.in_use(), 8 * 1024);
        assert!(budget.try_reserve(4 * 1024).is_none());
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(4 * 1024).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(first);
        let second = waiter.await.unwrap();
        assert_eq!(second.bytes(), 4 * 1024);
        drop(second);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn split_returns_parts_independently() {
        let budget = MemoryBudget::new(64 * 1024);
        let mut whole = budget.reserve(48 * 1024).await;
        let part = whole.split(16 * 1024);
        assert_eq!((whole.bytes(), part.bytes()), (32 * 1024, 16 * 1024));
        drop(part);
        assert_eq!(budget.in_use(), 32 * 1024);
        drop(whole);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn a_share_caps_one_upload_within_the_budget() {
        let budget = MemoryBudget::new(64 * 1024);
        let share = budget.share(16 * 1024);
        let mut held = share.reserve(12 * 1024).await;
        assert!(share.try_reserve(8 * 1024).is_none(), "past the share");
        held.absorb(share.try_reserve(4 * 1024).expect("within the share"));
        assert_eq!((held.bytes(), budget.in_use()), (16 * 1024, 16 * 1024));
        // Another upload's share is not touched by this one's.
        let other = budget.share(16 * 1024).try_reserve(16 * 1024);
        assert!(other.is_some());
        drop(other);
        held.shrink_to(5 * 1024);
        assert_eq!((held.bytes(), budget.in_use()), (5 * 1024, 5 * 1024));
        assert!(
            share.try_reserve(11 * 1024).is_some(),
            "shrinking returned to the share"
        );
        drop(held);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn a_share_is_not_taken_when_the_budget_is_short() {
        let budget = MemoryBudget::new(8 * 1024);
        let share = budget.share(8 * 1024);
        let _elsewhere = budget.reserve(6 * 1024).await;
        assert!(share.try_reserve(4 * 1024).is_none());
        assert!(
            share.try_reserve(2 * 1024).is_some(),
            "the failed try gave the share back"
        );
    }

    #[tokio::test]
    async fn oversized_request_is_clamped_not_stuck() {
        let budget = MemoryBudget::new(4 * 1024);
        let all = budget.reserve(1 << 40).await;
        assert_eq!(all.bytes(), budget.capacity());
    }
}

#[cfg(test)]
mod buffer_tests {
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
