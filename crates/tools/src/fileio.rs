//! Files the tools write the way a standby writes its logs: preallocated with real zeros
//! and synced, then overwritten in place, so that each `fdatasync` pays for data only and
//! not for growing the file (on ext4 here: ~150 µs instead of ~280 µs at 4 KiB).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Chunk of zeros written while preallocating.
const ZERO_CHUNK_BYTES: usize = 1 << 20;

/// Opens (creating if needed) `path` for writing and makes sure its first `bytes` bytes
/// are allocated and written (zeros, unless already there) and durable. A file already at
/// least that long is reused as it is.
pub fn preallocate(path: &Path, bytes: u64, extra_flags: i32) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    let length = file.metadata()?.len();
    if length < bytes {
        let mut writer = io::BufWriter::with_capacity(ZERO_CHUNK_BYTES, &file);
        let zeros = vec![0u8; ZERO_CHUNK_BYTES];
        let mut remaining = bytes - length;
        use std::io::Seek;
        writer.seek(io::SeekFrom::Start(length))?;
        while remaining > 0 {
            let chunk = remaining.min(ZERO_CHUNK_BYTES as u64) as usize;
            writer.write_all(&zeros[..chunk])?;
            remaining -= chunk as u64;
        }
        writer.flush()?;
        drop(writer);
        file.sync_all()?;
    }
    if extra_flags == 0 {
        return Ok(file);
    }
    // Reopen with the synchronous flags now that the zeros are down (writing them with
    // O_DSYNC would sync every megabyte).
    OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC | extra_flags).open(path)
}

/// A buffer aligned for `O_DIRECT` (4096 bytes covers every logical block size here).
pub struct AlignedBuffer {
    pointer: std::ptr::NonNull<u8>,
    layout: std::alloc::Layout,
}

/// Alignment of [`AlignedBuffer`].
pub const DIRECT_ALIGN_BYTES: usize = 4096;

impl AlignedBuffer {
    /// A zeroed buffer of `bytes` bytes (at least one) aligned to [`DIRECT_ALIGN_BYTES`].
    pub fn zeroed(bytes: usize) -> AlignedBuffer {
        let layout = std::alloc::Layout::from_size_align(bytes.max(1), DIRECT_ALIGN_BYTES)
            .expect("a valid layout");
        // SAFETY: the layout has a non-zero size.
        let pointer = unsafe { std::alloc::alloc_zeroed(layout) };
        let pointer = std::ptr::NonNull::new(pointer)
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuffer { pointer, layout }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is layout.size() bytes, initialised, and owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.pointer.as_ptr(), self.layout.size()) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above, shared.
        unsafe { std::slice::from_raw_parts(self.pointer.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe { std::alloc::dealloc(self.pointer.as_ptr(), self.layout) };
    }
}

// SAFETY: the buffer is plain owned memory.
unsafe impl Send for AlignedBuffer {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preallocation_writes_zeros_once_and_keeps_existing_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = preallocate(&path, 3 << 20, 0).unwrap();
        assert_eq!(file.metadata().unwrap().len(), 3 << 20);
        use std::os::unix::fs::FileExt;
        file.write_all_at(b"redo", 100).unwrap();
        drop(file);
        let file = preallocate(&path, 1 << 20, 0).unwrap();
        let mut back = [0u8; 4];
        file.read_exact_at(&mut back, 100).unwrap();
        assert_eq!(&back, b"redo");
        assert_eq!(file.metadata().unwrap().len(), 3 << 20);
    }

    #[test]
    fn aligned_buffers_are_aligned() {
        let mut buffer = AlignedBuffer::zeroed(12 * 1024);
        assert_eq!(buffer.as_slice().as_ptr() as usize % DIRECT_ALIGN_BYTES, 0);
        assert_eq!(buffer.as_mut_slice().len(), 12 * 1024);
        assert!(buffer.as_slice().iter().all(|&byte| byte == 0));
    }
}
