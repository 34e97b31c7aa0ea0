//! Memory aligned for O_DIRECT.

use std::fmt;

/// A byte buffer aligned to 4096 bytes, as O_DIRECT needs. Grows, never shrinks.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads.
unsafe impl Sync for AlignedBuf {}

/// What O_DIRECT needs of a write's memory on the devices this runs on.
pub(super) const ALIGNMENT: usize = 4096;

impl AlignedBuf {
    pub fn new() -> AlignedBuf {
        AlignedBuf { ptr: std::ptr::NonNull::dangling(), len: 0, capacity: 0 }
    }

    /// Sets the length to `len`, zero-filling, and reallocating if needed. Contents are not
    /// preserved across a reallocation.
    pub fn resize_zeroed(&mut self, len: usize) {
        if len > self.capacity {
            let capacity = len.next_multiple_of(ALIGNMENT).max(ALIGNMENT);
            let layout =
                std::alloc::Layout::from_size_align(capacity, ALIGNMENT).expect("valid layout");
            // SAFETY: the layout has non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            let Some(ptr) = std::ptr::NonNull::new(ptr) else {
                std::alloc::handle_alloc_error(layout)
            };
            self.free();
            self.ptr = ptr;
            self.capacity = capacity;
        } else {
            // SAFETY: len <= capacity, and the allocation is capacity bytes.
            unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, len) };
        }
        self.len = len;
    }

    /// Sets the length to `len` for a caller that overwrites every byte of it (the unit
    /// writer does): a buffer grown is zeroed, one reused keeps its old bytes (initialized,
    /// never read before they are overwritten), saving a pass over the data per log write.
    pub fn resize_for_overwrite(&mut self, len: usize) {
        if len > self.capacity {
            self.resize_zeroed(len);
        } else {
            self.len = len;
        }
    }

    fn free(&mut self) {
        if self.capacity > 0 {
            let layout = std::alloc::Layout::from_size_align(self.capacity, ALIGNMENT)
                .expect("valid layout");
            // SAFETY: ptr was allocated with exactly this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
            self.capacity = 0;
        }
    }
}

impl Default for AlignedBuf {
    fn default() -> AlignedBuf {
        AlignedBuf::new()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        self.free();
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for Deref, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf").field("len", &self.len).finish()
    }
}
